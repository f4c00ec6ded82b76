"""The actors' library and ``interchange actor`` against real nodes: the demo's two-node federation
(``interchange interop --self``'s: nodes A and B, their DNS, actor-1's datasets and delivery at A),
mutual TLS 1.3 everywhere, SASL EXTERNAL on AMQPS.

Published at A, received at B through B's subscription at A; settlement and flow control; the
broker's reason for a rejected message; a selector the Java engines refuse is refused locally with
the node's own words; the overlap check agrees with the node's NO_OVERLAP; the command line end to end.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from certs.tls import TlsFiles, client_context
from ii_api.peers.client import IIClient
from ii_api.peers.discovery import Neighbour
from ii_api.wire.models import SubscriptionRequest, SubscriptionRequestItem
from interchange.actor import (
    Actor,
    ActorError,
    ActorSettings,
    DnsDiscovery,
    OutgoingMessage,
    check_properties,
    check_selector,
    message_properties,
)
from interchange.app.cli import main
from interchange.app.selfnode import KIT_NAME, SelfFederation
from interchange.testing.selector_cases import REFUSED_BY_THE_JAVA_ENGINES, SELECTORS
from interop_kit.demo_data import (
    CONSUMER,
    DEMO_SELECTOR,
    DOMAIN,
    INTERCHANGE,
    PUBLISHER,
    SUBSCRIBER,
    actor_settings,
)

HAZELDONK = (51.4449, 4.9238)
WAIT_S = 20.0


def settings(federation: SelfFederation, cn: str, node: str) -> ActorSettings:
    return actor_settings(federation.directory, cn, node, federation.nodes[node].ii_port or 0)


@pytest.fixture
async def actors(interop_self: SelfFederation) -> AsyncIterator[tuple[Actor, Actor]]:
    """actor-1 at A (its datasets and delivery registered), actor-2 at B."""
    publisher = Actor(settings(interop_self, PUBLISHER, INTERCHANGE))
    consumer = Actor(settings(interop_self, CONSUMER, SUBSCRIBER))
    try:
        yield publisher, consumer
    finally:
        await publisher.close()
        await consumer.close()


async def until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.05)


async def linked(federation: SelfFederation, count: int = 1) -> None:
    """B's subscriptions at A have their data links up (what B imports reaches its local sources)."""
    b_ii = federation.nodes[SUBSCRIBER].ii
    assert b_ii is not None
    await until(lambda: sum(link["connected"] for o in b_ii.status()["outgoing"] for link in o["links"]) >= count,
                "B's federation links")


def denm(body: str = "", **extra: Any) -> OutgoingMessage:
    props = message_properties(message_type="DENM", publisher_id="NL00001", publication_id="denm-demo",
                               protocol_version="DENM:1.3.1", position=HAZELDONK, cause_code=1, sub_cause_code=0,
                               extra=extra)
    return OutgoingMessage.build(props, body.encode())


# ---------------------------------------------------------------------------------- data plane
async def test_published_at_a_received_at_b_through_the_iis_subscription(
        interop_self: SelfFederation, actors: tuple[Actor, Actor]) -> None:
    publisher, consumer = actors
    seen: list[str] = []
    subscription = await consumer.subscribe(DEMO_SELECTOR, on_change=lambda s: seen.append(s.status.value))
    assert seen[-1] == "CREATED" and subscription.endpoints[0].port == interop_self.nodes[SUBSCRIBER].amqps_port
    await linked(interop_self)
    listener = await consumer.listen(subscription)
    ivim = OutgoingMessage.build(message_properties(message_type="IVIM", publisher_id="NL00001",
                                                    publication_id="ivim-demo", protocol_version="IVIM:1.2.1",
                                                    position=HAZELDONK), b"speed limit")
    assert (await publisher.publish(ivim)).accepted  # fits actor-1's delivery, not actor-2's selector
    message = denm("stationary vehicle", **{"custom-nl-lane": "2"})
    outcome = await publisher.publish(message)
    assert outcome.accepted and outcome.reason is None
    got = await listener.next(WAIT_S)
    assert got.properties == message.properties and got.body == b"stationary vehicle"
    assert got.ttl_ms == 648_000 and got.durable  # IP_033's DENM TTL, durable by default
    got.release()  # back to the source: it comes again
    again = await listener.next(WAIT_S)
    assert again.body == b"stationary vehicle" and again.settled is None
    again.accept()
    with pytest.raises(TimeoutError):
        await listener.next(1.0)  # the IVIM never came, the DENM is settled


async def test_settlement_is_explicit_and_bounds_what_is_in_flight(
        interop_self: SelfFederation, actors: tuple[Actor, Actor]) -> None:
    publisher, consumer = actors
    subscription = await consumer.subscribe(DEMO_SELECTOR)
    await linked(interop_self)
    listener = await consumer.listen(subscription, credit=4)
    for index in range(8):
        assert (await publisher.publish(denm(f"m{index}"))).accepted
    held = [await listener.next(WAIT_S) for _ in range(4)]
    with pytest.raises(TimeoutError):
        await listener.next(1.0)  # four unsettled: the broker sends no more (flow control)
    assert listener.unsettled == 4
    held[0].reject("not for us")
    for message in held[1:]:
        message.accept()
    rest = []
    for _ in range(4):  # credit comes back as they are settled
        rest.append(await listener.next(WAIT_S))
        rest[-1].accept()
    assert [m.body for m in held + rest] == [f"m{i}".encode() for i in range(8)]  # in order, none lost
    assert [m.settled for m in held] == ["rejected", "accepted", "accepted", "accepted"]


async def test_repeat_publishes_copies_on_a_schedule(interop_self: SelfFederation,
                                                     actors: tuple[Actor, Actor]) -> None:
    """IP_048: the same message again every interval; its TTL the interval x 1.2 (IP_033)."""
    publisher, consumer = actors
    subscription = await consumer.subscribe(DEMO_SELECTOR)
    await linked(interop_self)
    listener = await consumer.listen(subscription)
    message = OutgoingMessage.build(denm("repeated").properties, b"repeated", repeat_every_ms=2_000)
    assert message.ttl_ms == 2_400
    numbered: list[int] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcomes = await publisher.repeat(message, 0.3, times=3, on_outcome=lambda n, o: numbered.append(n))
    assert [o.accepted for o in outcomes] == [True, True, True] and numbered == [1, 2, 3]
    assert loop.time() - started >= 0.6  # two intervals between three copies
    copies = [await listener.next(WAIT_S) for _ in range(3)]
    assert all(c.body == b"repeated" and c.ttl_ms == 2_400 for c in copies)
    for copy in copies:
        copy.accept()


async def test_a_rejected_publish_shows_the_brokers_reason(actors: tuple[Actor, Actor]) -> None:
    publisher, _ = actors
    broken = {**denm().properties, "originatingCountry": "nl", "causeCode": 300}
    unchecked = OutgoingMessage.build(broken, b"x", check=False)
    outcome = await publisher.publish(unchecked)
    assert not outcome.accepted and outcome.reason is not None
    for problem in check_properties(broken):  # what the library says locally, the broker says too
        assert str(problem) in outcome.reason, outcome.reason
    with pytest.raises(ActorError) as refused:
        OutgoingMessage.build(broken, b"x")
    assert all(str(p) in str(refused.value) for p in check_properties(broken))
    outside = await publisher.publish(denm(causeCode=5))  # actor-1's DENM capability has causeCodes 1 and 94
    assert not outside.accepted and "does not fit the capabilities registered for this target" in str(outside.reason)


# -------------------------------------------------------------------------------- control plane
async def test_a_selector_the_java_engines_reject_is_refused_locally_with_the_nodes_words(
        actors: tuple[Actor, Actor]) -> None:
    publisher, consumer = actors
    for text in REFUSED_BY_THE_JAVA_ENGINES:
        local = check_selector(text)
        assert local is not None, text
        node = await consumer.api.create_subscription(text)  # past the local check: what the node answers
        assert node.status.value == "NOT_VALID" and node.errorMessage == local.message, (text, node)
        delivery = await publisher.api.create_delivery(text)
        assert delivery.status.value == "NOT_VALID" and delivery.errorMessage == local.message
        before = len(await consumer.api.subscriptions())
        with pytest.raises(ActorError) as info:
            await consumer.subscribe(text)
        assert str(info.value).startswith(local.message)
        assert len(await consumer.api.subscriptions()) == before  # refused here: the node never saw it


async def test_the_overlap_check_agrees_with_the_nodes_no_overlap(
        interop_self: SelfFederation, actors: tuple[Actor, Actor]) -> None:
    """Deliveries (actor-1's capabilities at A) and a neighbour's subscriptions at A (A's capabilities,
    as B's actor-2 sees them in the federation): NO_OVERLAP exactly where the check says none match."""
    publisher, consumer = actors
    b_ii = interop_self.nodes[SUBSCRIBER].ii
    assert b_ii is not None
    await until(lambda: len(b_ii.neighbour_capabilities(INTERCHANGE)) == 2, "B to know A's capabilities")
    a = interop_self.nodes[INTERCHANGE]
    kit = IIClient(lambda: client_context(TlsFiles.from_pki(interop_self.directory / "pki", KIT_NAME)))
    try:
        answer = await kit.post_subscriptions(Neighbour(INTERCHANGE, "127.0.0.1", a.ii_port or 0, DOMAIN),
                                              SubscriptionRequest(name=KIT_NAME, subscriptions=[
                                                  SubscriptionRequestItem(selector=s) for s in SELECTORS]))
    finally:
        await kit.close()
    decided = {s.selector: s.status.value for s in answer.subscriptions}
    seen_both = set()
    for selector in SELECTORS:
        mine = await publisher.check_selector(selector, against="mine")
        delivery = await publisher.api.create_delivery(selector)
        assert (delivery.status.value == "NO_OVERLAP") == (not mine.any), (selector, mine.summary())
        network = await consumer.check_selector(selector, against="network")
        assert (decided[selector] == "NO_OVERLAP") == (not network.any), (selector, network.summary())
        seen_both.add(network.any)
    assert seen_both == {True, False}  # the cases hold both answers


async def test_whoami_and_refusals_say_what_to_do(interop_self: SelfFederation, actors: tuple[Actor, Actor]) -> None:
    publisher, consumer = actors
    me = await consumer.api.whoami()
    assert (me.name, me.role, me.allowed, me.interchange) == (CONSUMER, "actor", True, SUBSCRIBER)
    assert me.permissions is not None and me.permissions.subscribeMessageTypes == ["DENM"]
    with pytest.raises(ActorError) as refused:
        await consumer.subscribe("messageType = 'IVIM'")  # actor-2 may subscribe to DENMs only
    assert refused.value.status == 403 and "may not subscribe to IVIM" in str(refused.value)
    assert "interchange actor whoami" in str(refused.value)
    with pytest.raises(ActorError, match="publicationId must be unique"):
        await publisher.api.add_capabilities([c.definition for c in await publisher.api.capabilities()][:1])
    with pytest.raises(ActorError, match="has no endpoint|NOT_VALID|no such"):
        await consumer.listen(await consumer.api.create_subscription("a ="))


async def test_dns_discovery_and_wrong_endpoints(interop_self: SelfFederation) -> None:
    files = TlsFiles.from_pki(interop_self.directory / "pki", CONSUMER, with_crls=False)
    base = dict(cert_chain=files.cert_chain, key=files.key, trust_bundle=files.trust_bundle, timeout_s=5.0)
    found = ActorSettings(node=SUBSCRIBER, discovery=DnsDiscovery(domain=DOMAIN, dns_port=interop_self.dns.port or 0),
                          **base)
    async with Actor(found) as actor:
        assert (await actor.api.whoami()).name == CONSUMER
        assert await actor.api.base_url() == f"https://127.0.0.1:{interop_self.nodes[SUBSCRIBER].ii_port}"
    nowhere = found.model_copy(update={"node": "c.interchange.test"})
    with pytest.raises(ActorError, match="DNS names no interchange c.interchange.test"):
        await Actor(nowhere).api.whoami()
    b_url = f"https://127.0.0.1:{interop_self.nodes[SUBSCRIBER].ii_port}"
    misnamed = ActorSettings(node=INTERCHANGE, ii_url=b_url, **base)  # B's certificate does not name A
    with pytest.raises(ActorError, match="certificate was refused.*must name a.interchange.test"):
        await Actor(misnamed).api.whoami()
    from interchange.ground.ports import free_port
    closed = ActorSettings(node=SUBSCRIBER, ii_url=f"https://127.0.0.1:{free_port()}", **base)
    with pytest.raises(ActorError, match="cannot reach the node.*is the node running"):
        await Actor(closed).api.whoami()
    async with Actor(ActorSettings(node=SUBSCRIBER, ii_url=b_url, **base)) as actor:
        subscription = await actor.subscribe(DEMO_SELECTOR)
        endpoint = subscription.endpoints[0].model_copy(update={"source": "no-such-source"})
        listener = await actor.listen(endpoint)
        with pytest.raises(ActorError, match="source no-such-source: amqp:"):
            await listener.next(WAIT_S)


# ----------------------------------------------------------------------------- the command line
async def test_the_command_line_end_to_end(interop_self: SelfFederation, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def write(cn: str, node: str) -> str:
        path = tmp_path / f"{cn}.toml"
        path.write_text(settings(interop_self, cn, node).to_toml())
        return str(path)

    a1, a2 = write(PUBLISHER, INTERCHANGE), write(CONSUMER, SUBSCRIBER)

    async def run(*argv: str) -> tuple[int, str, str]:
        status = await asyncio.to_thread(main, ["actor", *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    status, out, _ = await run("whoami", "--config", a2)
    assert status == 0 and "actor-2, a local actor, allowed" in out and "may subscribe to  DENM" in out
    status, out, err = await run("subscribe", DEMO_SELECTOR, "--config", a2)
    assert status == 0 and "subscription 1: CREATED" in err and "matches 1 of 2 capabilities: NL00001:denm-demo" in err
    assert "interchange actor listen 1" in out
    await linked(interop_self)
    (tmp_path / "props.json").write_text(json.dumps({"messageType": "DENM", "publisherId": "NL00001",
                                                     "publicationId": "NL00001:denm-demo",
                                                     "protocolVersion": "DENM:1.3.1", "causeCode": 94,
                                                     "subCauseCode": 0}))
    (tmp_path / "body.bin").write_bytes(b"\xff\x01denm")
    status, out, err = await run("publish", "--config", a1, "--properties", str(tmp_path / "props.json"),
                                 "--position", "51.4449,4.9238", "--body-file", str(tmp_path / "body.bin"))
    assert status == 0 and "1: accepted" in out and "TTL 648000 ms, durable" in err
    status, out, err = await run("publish", "--config", a1, "--properties", str(tmp_path / "props.json"),
                                 "--position", "51.4449,4.9238", "--property", "causeCode=5", "--body", "x")
    assert status == 1 and "REJECTED: rejected: amqp:invalid-field: message does not fit" in out
    status, out, err = await run("listen", "--config", a2, "--count", "1", "--json", "--save", str(tmp_path / "got"))
    assert status == 0 and "received 1 message" in err
    line = json.loads(out)
    assert line["properties"]["causeCode"] == 94 and line["body_base64"] and line["ttl_ms"] == 648_000
    assert (tmp_path / "got" / "000001-DENM.bin").read_bytes() == b"\xff\x01denm"
    assert json.loads((tmp_path / "got" / "000001-DENM.json").read_text())["properties"]["causeCode"] == 94
    status, out, _ = await run("subscriptions", "--config", a2)
    assert status == 0 and "CREATED" in out and DEMO_SELECTOR in out
    status, out, _ = await run("check-selector", "messageType = 'DENM' AND causeCode = 2", "--config", a2)
    assert status == 1 and "causeCode = 2 is false for all its messages (it has causeCode [1, 94])" in out
    status, _, err = await run("subscribe", "causeCode IN (1, 2)", "--config", a2)
    assert status == 2 and "invalid selector at position 14" in err and "\n" not in err.strip()
