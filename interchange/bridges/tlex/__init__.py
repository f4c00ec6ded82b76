"""TLEX / UDAP traffic-light streaming: the Broker-system side (client) and a streaming-service simulator.

Specs: TLEX-BROKER-SYSTEM Interface v1.1.1 (Monotch) and UDAP C-ITS-SUBJECT-SYSTEM (iVRI) 1.0.0.
Layers, bottom up (imports run downwards only): :mod:`.codec`, :mod:`.session` (sans-I/O),
:mod:`.models`, :mod:`.rest`, :mod:`.stream` (asyncio); the bridge a node runs for ``[tlex]``
(:mod:`.config`, :mod:`.publication`, :mod:`.mapem_store`, :mod:`.bridge`, ...); the simulator and
fake controllers (:mod:`.service`, :mod:`.simulator`, :mod:`.controllers`, :mod:`.sim_cli`:
``interchange tlex-sim``; ``tlex-demo`` is :mod:`interchange.app.tlex_demo`). Every module's job:
docs/architecture.md ("Bridges: ``interchange/bridges/tlex/``"); the protocol and the bridge's
rules: docs/tlex-bridge.md.
"""
