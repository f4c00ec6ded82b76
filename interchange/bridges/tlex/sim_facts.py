"""What a node needs to know of a ``tlex-sim`` run, the same at every start of the same directory.

- Tokens: the accounts' X-Authorization tokens are made once and kept in ``<dir>/tokens.json``
  (mode 0600); ``--token`` sets the Broker account's. With the fixed default ports, a node's
  ``[tlex]`` written once keeps working across restarts of the simulator.
- Controllers: ``NLSM0001``, ``NLSM0002``, ... with one intersection each (``5-100``, ``5-101``, ...)
  and a position on a grid of crossings ~300 m apart in Delft (a node's ``[tlex]`` needs one: the
  reference position of its messages, IP_038).
- :func:`facts` (``sim.json``, absolute paths) and :func:`node_config` (the ``[tlex]`` block a node
  pointed at the simulator runs with, TOML; ``tlex-sim --print-node-config``).
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from interchange.bridges.tlex.controllers import ControllerSpec
from interchange.bridges.tlex.payloads import MESSAGE_IDS, PayloadTypes

SERVICE_NAME = "tlex-sim.test"
DEFAULT_DOMAIN = "c-roads"
#: REST (HTTPS), TCPStreaming over TLS 1.2, plain TCPStreaming: fixed, so a node's [tlex] stays valid.
DEFAULT_PORTS = {"api": 8640, "tls": 8641, "plain": 8642}
ACCOUNTS = ("broker", "tlc-operator", "monitor")
ORIGIN = (52.0000, 4.3500)  #: the grid's first crossing (Delft)
#: the actor rule a node needs for the bridge ([ii.actors], IP_068)
BRIDGE_RULE = {"publish_message_types": ["SPATEM", "MAPEM", "SSEM"], "subscribe_message_types": ["SREM"]}


def tlc_id(index: int) -> str:
    """TLC identifiers of the simulation: 8 ASCII characters, NLSM0001, NLSM0002, ..."""
    return f"NLSM{index + 1:04d}"


def position(index: int) -> tuple[float, float]:
    """Controller ``index``'s crossing: 50 to a row, ~330 m apart north-south, ~270 m east-west."""
    return round(ORIGIN[0] + (index // 50) * 0.003, 6), round(ORIGIN[1] + (index % 50) * 0.004, 6)


def specs(count: int) -> list[ControllerSpec]:
    return [ControllerSpec(tlc_id(i), [f"5-{100 + i}"], 1_000_000 + i) for i in range(count)]


def tokens(directory: Path, broker: str | None = None) -> dict[str, str]:
    """The accounts' tokens of this directory (made at the first start); ``broker`` replaces the
    Broker account's and is kept."""
    path = directory / "tokens.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        kept = {}
    made = {name: str(kept[name]) if isinstance(kept.get(name), str) and kept[name] else secrets.token_urlsafe(24)
            for name in ACCOUNTS}
    if broker is not None:
        made["broker"] = broker
    if made != kept:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(made, indent=2) + "\n", encoding="utf-8")
        os.chmod(path, 0o600)
    return made


def facts(*, api_url: str, trust_bundle: Path, domain: str, tokens_: dict[str, str], specs_: list[ControllerSpec],
          payload_types: PayloadTypes, listeners: dict[str, int]) -> dict[str, Any]:
    """``sim.json``: what a bridge needs, every path absolute."""
    return {"api_url": api_url, "server_name": SERVICE_NAME, "trust_bundle": str(trust_bundle.resolve()),
            "domain": domain, "broker_authorization": tokens_["broker"],
            "monitor_authorization": tokens_["monitor"], "payload_types": dict(payload_types.by_kind),
            "streaming_ports": listeners,
            "controllers": [{"tlc_id": s.tlc_id, "intersections": s.intersections,
                             "latitude": position(i)[0], "longitude": position(i)[1]} for i, s in enumerate(specs_)]}


def node_config(found: dict[str, Any], *, actor: Path | None, publisher_id: str = "NL00001") -> str:
    """The ``[tlex]`` block (TOML) of a node pointed at the simulator of ``found`` (:func:`facts`)."""
    q = json.dumps  # a JSON string is a TOML basic string
    actor_line = (f"actor = {q(str(actor.resolve()))}" if actor is not None else
                  'actor = "pki/issued/tlex-bridge"   # EDIT: the bridge\'s identity at this node (chain.pem, key.pem, '
                  'trust.pem), e.g. `interchange pki issue`')
    lines = ["# the TLEX bridge, pointed at `interchange tlex-sim` (tlex-sim --print-node-config)", "[tlex]",
             f"api_url = {q(found['api_url'])}", f"authorization = {q(found['broker_authorization'])}",
             f"server_name = {q(found['server_name'])}", f"trust_bundle = {q(found['trust_bundle'])}",
             f"domain = {q(found['domain'])}", 'security_mode = "TLSv1.2"', actor_line,
             f"publisher_id = {q(publisher_id)}", f"originating_country = {q(publisher_id[:2])}"]
    if found["payload_types"] != dict(MESSAGE_IDS):
        lines.append("payload_types = { " + ", ".join(f"{k} = {v}" for k, v in found["payload_types"].items()) + " }")
    for controller in found["controllers"]:
        lines += ["", "[[tlex.controllers]]", f"tlc_id = {q(controller['tlc_id'])}",
                  f"intersections = {q(controller['intersections'])}",
                  f"latitude = {controller['latitude']}", f"longitude = {controller['longitude']}"]
    lines += ["", "# and, with [ii.actors] default = \"deny\", a rule for the bridge's certificate (IP_068):",
              "# [[ii.actors.rules]]", '# cn = "tlex-bridge"', f"# publisher_ids = [{q(publisher_id)}]",
              *(f"# {k} = {q(v)}" for k, v in BRIDGE_RULE.items())]
    return "\n".join(lines) + "\n"
