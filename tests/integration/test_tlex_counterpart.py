"""The TLEX bridge against a streaming service written from the specs (``tlex_counterpart`` beside it,
no code of the bridge): its controllers use their own type bytes (0x01-0x04) and real UPER ITS PDU
headers. One run per variant of the service; the checks below are what a run must show, and each
broken variant (mutant) fails exactly the checks named for it, so every check can fail."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from tlex_counterpart import its
from tlex_counterpart.service import Behaviour, Counterpart, Sent

from certs import TestPki
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.testing.broker_harness import complete_records
from interchange.testing.ii_harness import Consumer, Https, node_config, publish, start
from interchange.testing.tlex_harness import SIM_HOST
from quadtree.tiles import from_latlon

NODE, BRIDGE, ACTOR = "a.interchange.test", "tlex-bridge", "actor-a"
TOLD = {"SPATEM": 0x01, "MAPEM": 0x02, "SREM": 0x03, "SSEM": 0x04}  #: the bridge's [tlex] payload_types
CONTROLLERS = {"NLCP0001": "5-201", "NLCP0002": "5-202"}
MAX_MESSAGE_SIZE = 4096
RUN_S = 2.5


@dataclass
class Run:
    counterpart: Counterpart
    published: list[tuple[str, str, bytes]]  #: (TLC, messageType, body) in the order the consumer got them
    records: list[dict[str, Any]]
    counters: Any
    srem: bytes
    srem_to: str = "NLCP0001"
    events: list[str] = field(default_factory=list)


def _warnings(run: Run, event: str) -> list[dict[str, Any]]:
    return [r for r in run.records if r["event"] == event]


def session_per_spec(run: Run) -> str | None:
    """TLEX 5.2.1.1, 6.2, 6.3.4.2: a Broker TCPStreaming_Multiplex session for the configured
    identifiers, then a stream opened with 0x01 and that session's Token."""
    cp = run.counterpart
    if cp.problems:
        return "; ".join(cp.problems)
    if not cp.requests or not cp.opened:
        return "no session was created and opened"
    asked = sorted(cp.requests[0]["details"]["tlcIdentifiers"])
    return None if asked == sorted(CONTROLLERS) else f"the session asked for {asked}"


def timestamps_answered(run: Run) -> str | None:
    """6.3.4.6.2: every Timestamps request answered with its own t0, t1 <= t2."""
    answers = run.counterpart.timestamps
    if not answers:
        return "no Timestamps response"
    wrong = [a for a in answers if not (a[0] and a[1] <= a[2] <= a[3])]
    return f"{len(wrong)} responses with a t0 never sent or t1 > t2" if wrong else None


def published_as_sent(run: Run) -> str | None:
    """Every SPATEM, MAPEM and SSEM the controllers sent is published, with the message type they
    meant and the bytes unchanged."""
    got = {(tlc, kind, body) for tlc, kind, body in run.published}
    missing = [s for s in run.counterpart.sent if (s.tlc, s.kind, s.payload) not in got]
    if not run.counterpart.sent or missing:
        first = f" (first: a {missing[0].kind} of {missing[0].tlc})" if missing else ""
        return f"{len(missing)} of {len(run.counterpart.sent)} payloads not published{first}"
    return None


def mapem_before_spatem(run: Run) -> str | None:
    """IP_104 at the consumer: no SPATEM of a controller before its MAPEM."""
    mapped: set[str] = set()
    for tlc, kind, _ in run.published:
        if kind == "MAPEM":
            mapped.add(tlc)
        elif kind == "SPATEM" and tlc not in mapped:
            return f"a SPATEM of {tlc} before its MAPEM"
    return None


def srem_with_controller_type(run: Run) -> str | None:
    """The SREM published for a controller's intersection reaches it, unchanged, with the type
    byte it takes SREMs with."""
    behaviour = run.counterpart.behaviour
    wanted = behaviour.srem_type if behaviour.srem_type is not None else behaviour.types["SREM"]
    got = [(tlc, type_byte) for tlc, type_byte, payload in run.counterpart.received if payload == run.srem]
    if (run.srem_to, wanted) in got:
        return None
    return f"the SREM reached {got or 'no controller'}; {run.srem_to} takes SREMs as 0x{wanted:02x}"


def none_unidentified(run: Run) -> str | None:
    if run.counters.unidentified or _warnings(run, "tlex_payload_unidentified"):
        return f"unidentified payloads: {dict(run.counters.unidentified)}"
    return None


def types_agree(run: Run) -> str | None:
    mismatches = _warnings(run, "tlex_payload_type_mismatch")
    return f"type bytes contradict headers: {[r['details']['reason'] for r in mismatches]}" if mismatches else None


def none_refused(run: Run) -> str | None:
    refused = _warnings(run, "tlex_message_refused")
    return f"refused: {[r['details']['reason'] for r in refused]}" if refused else None


CHECKS: dict[str, Callable[[Run], str | None]] = {check.__name__: check for check in (
    session_per_spec, timestamps_answered, published_as_sent, mapem_before_spatem, srem_with_controller_type,
    none_unidentified, types_agree, none_refused)}

#: The service's variants and the checks each must fail.
VARIANTS: dict[str, tuple[Behaviour, set[str]]] = {
    "as_specified": (Behaviour(), set()),
    "srem_type_byte_not_told": (Behaviour(srem_type=0x07), {"srem_with_controller_type"}),
    "type_bytes_swapped": (Behaviour(types={"SPATEM": 0x02, "MAPEM": 0x01, "SREM": 0x03, "SSEM": 0x04}),
                           {"types_agree"}),
    "no_mapem_first": (Behaviour(mapem_after_s=1.0), {"published_as_sent"}),
    "no_its_header_unknown_type": (Behaviour(header=False, unknown_type=0x21), {"published_as_sent", "none_unidentified"}),
    "mapem_over_max_message_size": (Behaviour(mapem_filler=6000), {"published_as_sent", "none_refused"}),
    "no_timestamps_requests": (Behaviour(timestamps_every=None), {"timestamps_answered"}),
}


async def run_against(behaviour: Behaviour, sim_pki: TestPki, pki: TestPki, tmp_path: Path) -> Run:
    server = sim_pki.servers[SIM_HOST]
    counterpart = Counterpart(server.chain, server.key, "broker-token", dict(CONTROLLERS), behaviour)
    await counterpart.start()
    tlex = TlexBridgeConfig(api_url=counterpart.api_url, authorization="broker-token", server_name=SIM_HOST,
                            trust_bundle=sim_pki.trust_bundle, domain="c-roads", actor=pki.identity(BRIDGE).directory,
                            publisher_id="NL00001", originating_country="NL", payload_types=TOLD,
                            controllers=[ControllerConfig(tlc_id=tlc, intersections=[ix], latitude=52.0 + i / 100,
                                                          longitude=4.35) for i, (tlc, ix) in enumerate(CONTROLLERS.items())],
                            backoff_initial=0.05, backoff_max=0.5)
    config = node_config(pki, NODE, tmp_path / "node")
    broker = config.broker.model_copy(update={"limits": config.broker.limits.model_copy(
        update={"max_message_size": MAX_MESSAGE_SIZE})})
    node = await start(config.model_copy(update={"tlex": tlex, "broker": broker}))
    https, consumer = Https(pki, ACTOR, node), None
    published: list[tuple[str, str, bytes]] = []
    srem = its.message("SREM", 99, "5-201", 1)
    try:
        status, body = await https.post(f"/{ACTOR}/subscriptions", {"subscriptions": [
            {"selector": "messageType IN ('SPATEM', 'MAPEM', 'SSEM')"}]})
        assert status == 200, body
        consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE,
                                           body["subscriptions"][0]["endpoints"][0]["source"])
        target = await _srem_delivery(https)
        counterpart.go.set()
        await asyncio.sleep(RUN_S / 2)
        message = Message(body=srem, inferred=True, properties={
            "messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem", "originatingCountry": "NL",
            "protocolVersion": "SREM:2.1.1", "quadTree": f",{from_latlon(52.0, 4.35, 18)},", "id": ",5-201,"})
        assert await asyncio.to_thread(publish, pki, ACTOR, node.amqps_port, NODE, target, [message]) == ["accepted"]
        await asyncio.sleep(RUN_S / 2)
        await counterpart.close()  # the controllers stop; what they sent is in the bridge by now or soon
        while (got := await asyncio.to_thread(consumer.receive, 1.5)) is not None:
            publication = got.properties["publicationId"]
            published.append((publication.split(":")[1].split("-")[0], got.properties["messageType"], bytes(got.body)))
        assert node.tlex is not None
        counters = node.tlex.counters
    finally:
        if consumer is not None:
            await asyncio.to_thread(consumer.close)
        await https.close()
        await node.close()
        await counterpart.close()
    return Run(counterpart, published, complete_records(tmp_path / "node" / "node.log"), counters, srem)


async def _srem_delivery(https: Https) -> str:
    caps = [{"application": {"messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                             "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": ["1"]},
             "metadata": {}}]
    assert (await https.post(f"/{ACTOR}/capabilities", {"capabilities": caps}))[0] == 200
    status, body = await https.post(f"/{ACTOR}/deliveries", {"deliveries": [{"selector": "messageType = 'SREM'"}]})
    assert status == 200, body
    return str(body["deliveries"][0]["endpoints"][0]["target"])


@pytest.mark.parametrize("variant", list(VARIANTS))
async def test_bridge_against_a_service_written_from_the_specs(variant: str, sim_pki: TestPki, pki: TestPki,
                                                              tmp_path: Path) -> None:
    behaviour, failing = VARIANTS[variant]
    run = await run_against(behaviour, sim_pki, pki, tmp_path)
    verdicts = {name: check(run) for name, check in CHECKS.items()}
    assert {name for name, problem in verdicts.items() if problem is not None} == failing, verdicts
    if variant == "no_mapem_first":  # the bridge said why the early SPATEMs were not published (IP_104)
        assert len(_warnings(run, "tlex_spatems_wait_for_mapem")) == len(CONTROLLERS)
        assert sum(c.held_for_mapem for c in run.counters.tlcs.values()) > 0
    if variant == "no_its_header_unknown_type":  # counted per controller and type byte, warned once each
        assert set(run.counters.unidentified) == {(tlc, 0x21) for tlc in CONTROLLERS}
        assert {r["level"] for r in _warnings(run, "tlex_payload_unidentified")} == {"warning"}
        assert len(_warnings(run, "tlex_payload_unidentified")) == len(CONTROLLERS)


def test_the_checks_the_service_cannot_break_can_fail() -> None:
    """session_per_spec and mapem_before_spatem judge the bridge alone: shown failing on runs as a
    broken bridge would make them."""
    counterpart = Counterpart(Path("c"), Path("k"), "t", dict(CONTROLLERS))
    counterpart.requests.append({"details": {"tlcIdentifiers": ["NLCP0001"]}})
    counterpart.opened.append("token")
    run = Run(counterpart, [("NLCP0001", "SPATEM", b"s"), ("NLCP0001", "MAPEM", b"m")], [], None, b"")
    assert session_per_spec(run) == "the session asked for ['NLCP0001']"
    assert mapem_before_spatem(run) == "a SPATEM of NLCP0001 before its MAPEM"
    counterpart.problems.append("the first datagram is not the Token of a session (6.3.4.2)")
    assert session_per_spec(run) == "the first datagram is not the Token of a session (6.3.4.2)"
    assert Sent("NLCP0001", "SPATEM", 1, b"s") in [Sent("NLCP0001", "SPATEM", 1, b"s")]
