"""TLEX / UDAP traffic-light streaming: the Broker-system side (client) and a streaming-service simulator.

Specs: TLEX-BROKER-SYSTEM Interface v1.1.1 (Monotch) and UDAP C-ITS-SUBJECT-SYSTEM (iVRI) 1.0.0,
both in /work/shared/specs/. Layers, bottom up (imports run downwards only):

- :mod:`.codec`: TCPStreaming protocol version 0x01 (preamble, framing, datagrams), sans-I/O;
- :mod:`.session`: the client and service sides of one TCPStreaming connection, sans-I/O state
  machines fed bytes and time that return actions;
- :mod:`.models`: the JSON REST bodies (pydantic);
- :mod:`.rest`: the REST client (aiohttp);
- :mod:`.stream`: asyncio code that moves bytes and time for a session over TLS (``SessionSupervisor``);
- :mod:`.config`, :mod:`.publication`, :mod:`.mapem_store`, :mod:`.bridge`: the bridge a node runs for ``[tlex]``;
- :mod:`.service`, :mod:`.simulator`, :mod:`.controllers`, :mod:`.sim_cli`: the streaming-service
  simulator and fake traffic-light controllers (``interchange tlex-sim``); ``interchange
  tlex-demo``, which assembles nodes around them, is the shell's :mod:`interchange.app.tlex_demo`.
"""
