"""The IF2 export's runs: a turn's BI deliveries mapped by their application properties and ttl (the
envelope of a section and ttl seen before given again), published in runs of one envelope
(:meth:`Connection.publish_run`, the frames and confirms of one publish each), the export itself its copy's publish under way
(:meth:`IF2Copies.published_all` for a confirm frame's), the republishing rules renewing an entry in
place. What a run or a kept mapping gives must be exactly what one message at a time gave."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pamqp import commands
from proton import Message

from certs import TestPki
from interchange.bridges.if2 import bi_message
from interchange.bridges.if2.amqp091 import Confirmed
from interchange.bridges.if2.amqp091_io import Client
from interchange.bridges.if2.bi_message import application_properties, message
from interchange.bridges.if2.bridge import _ExportMaps
from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.copies import IF2Copies, Publishing
from interchange.bridges.if2.keys import If2KeyError
from interchange.bridges.if2.republish import RepublishPolicy
from tests.unit.test_if2_export_batches import _confirm_channel
from tests.unit.test_if2_export_path import OTHER_TILE, SPATEM, export_path, wire

KEY = "SPAT.2_1_1.RWS.0." + ".".join("120202130121133020")


# ---------------------------------------------------------------------------- 0-9-1: a run of publishes
@pytest.mark.parametrize("frame_max", [512, 131072])
def test_a_run_writes_the_bytes_and_keeps_the_confirms_of_one_publish_each(frame_max: int) -> None:
    """Bodies empty, of one frame and over frame-max in one run, after other publishes: the same bytes
    as each published alone, each token confirmed at its own sequence number."""
    properties = commands.Basic.Properties(app_id="node/if2", expiration="60000", headers={"ttl": 60000})
    other = commands.Basic.Properties(app_id="node/if2")
    payloads = [b"a" * 10, b"", b"b" * 20, bytes(range(250)) * 5, b"c" * 30, b"d" * 11]
    alone, run = _confirm_channel(), _confirm_channel()
    for connection in (alone, run):
        connection.frame_max = frame_max
        connection.take_output()
        connection.publish(1, "SPAT", "SPAT.x", other, b"before", "t0")
    for token, payload in enumerate(payloads, 1):
        alone.publish(1, "SPAT", KEY, properties, payload, f"t{token}")
    run.publish_run(1, "SPAT", KEY, properties, payloads, [f"t{token}" for token in range(1, len(payloads) + 1)])
    assert run.take_output() == alone.take_output()
    for connection in (alone, run):
        connection.publish(1, "SPAT", KEY, properties, b"after", "t7")
        connection.publish_run(1, "SPAT", KEY, properties, [], [])  # (nothing)
        assert connection.receive(wire((1, commands.Basic.Ack(2, False)), (1, commands.Basic.Nack(4, False)),
                                       (1, commands.Basic.Ack(8, True)))) == [
            Confirmed(1, ("t1",), True), Confirmed(1, ("t3",), False),
            Confirmed(1, ("t0", "t2", "t4", "t5", "t6", "t7"), True)]


def test_a_run_on_a_channel_without_confirms_keeps_no_token() -> None:
    connection = _confirm_channel()
    connection.send(2, commands.Channel.Open())
    connection.receive(wire((2, commands.Channel.OpenOk())))
    connection.publish_run(2, "SPAT", KEY, commands.Basic.Properties(), [b"x", b"y"], ["a", "b"])
    assert connection.lost() == ()  # (nothing waits for a confirm)


async def test_a_run_after_the_connection_went_is_not_confirmed() -> None:
    client = Client(_confirm_channel())
    confirmed: list[tuple[list[Any], bool]] = []
    client.on_confirmed = lambda tokens, ack: confirmed.append((list(tokens), ack))
    client.publish_run(1, "SPAT", KEY, commands.Basic.Properties(), [b"x", b"y"], ["a", "b"])
    client.connection_lost(None)
    assert confirmed == [(["a", "b"], False)]
    client.publish_run(1, "SPAT", KEY, commands.Basic.Properties(), [b"z"], ["c"])
    assert confirmed[1:] == [(["c"], False)]


# ---------------------------------------------------------------------------- mapping by the section and ttl
def _maps(pki: TestPki) -> _ExportMaps:
    identity = pki.identity("actor-x")
    config = If2Config(url="amqps://127.0.0.1:5671/", actor="actor-x", exports={"SPAT": ["#"]},
                       tls={"cert_chain": identity.chain, "key": identity.key, "trust_bundle": pki.trust_bundle},
                       providers=[{"name": "RWS", "publisher_id": "NL00001", "coverage": ["1202"]}])
    return _ExportMaps(config.provider_table())


def _outcome(maps: _ExportMaps, raw: bytes | bytearray) -> object:
    try:
        envelope, body, identity, ttl_ms = maps.map(raw)
    except (If2KeyError, ValueError, TypeError) as exc:
        return type(exc)
    return envelope, bytes(body), identity, ttl_ms


def test_messages_of_one_head_share_its_envelope_each_keeps_its_body(pki: TestPki) -> None:
    maps = _maps(pki)
    section = application_properties(SPATEM)
    first, second = maps.map(message(section, b"one", 60_000)), maps.map(bytearray(message(section, b"two", 60_000)))
    assert first[0] is second[0] and (first[1], second[1]) == (b"one", b"two") and first[2:] == second[2:]
    other_ttl = maps.map(message(section, b"one", 5_000))
    assert other_ttl[0].ttl_ms == 5_000 and other_ttl[3] == 5_000 and first[0].ttl_ms == 60_000
    moved = maps.map(message(application_properties({**SPATEM, "quadTree": f",{OTHER_TILE},"}), b"one", 60_000))
    assert moved[0].key != first[0].key and moved[2] != first[2]
    large = b"z" * 300  # (a vbin32 data section)
    assert maps.map(message(section, large, 60_000))[1] == large
    with_footer = message(section, b"one", 60_000) + b"\x00\x53\x78\xc1\x01\x00"  # (an empty footer)
    assert maps.map(with_footer)[1] == b"one"  # (another shape: read by proton, not kept by its head)


def test_messages_with_their_own_message_ids_share_one_mapping(pki: TestPki) -> None:
    """A JMS client gives every message an id of its own (a properties section before the application
    properties): the mapping is kept by what it reads, so such messages are read once and share one
    envelope, and their bodies and ttls stay their own."""
    maps = _maps(pki)
    reads = []
    read = maps._reader.read
    maps._reader.read = lambda raw: reads.append(raw) or read(raw)  # type: ignore[method-assign]
    raws = [Message(id=f"ID:actor-x-{i}", creation_time=1_700_000_000 + i, properties=dict(SPATEM),
                    body=b"body-%d" % i, ttl=60.0, inferred=True).encode() for i in range(3)]
    mapped = [maps.map(raw) for raw in raws]
    assert mapped[0][0] is mapped[1][0] is mapped[2][0]
    assert [bytes(body) for _, body, _, _ in mapped] == [b"body-0", b"body-1", b"body-2"] and len(reads) == 1
    assert [_outcome(maps, raw) for raw in raws] == [_outcome(_maps(pki), raw) for raw in raws]
    shorter = Message(id="ID:actor-x-9", properties=dict(SPATEM), body=b"b", ttl=5.0, inferred=True).encode()
    assert maps.map(shorter)[3] == 5_000 and maps.map(shorter)[0] is not mapped[0][0]


def test_every_changed_byte_maps_as_a_fresh_mapping_would(pki: TestPki) -> None:
    """Every byte of a message changed and every cut, read in turns by one warm map (its heads kept):
    each gives what a map that never saw another message gives, or refuses it alike (with the C scanner
    built, the heads of the usual shape are kept)."""
    assert bi_message._c_locate is not None  # (setup.py builds it)
    raw = message(application_properties(SPATEM), b"abc", 60_000)
    warm = _maps(pki)
    variants = [raw[:stop] for stop in range(len(raw))]
    variants += [raw[:at] + bytes([value]) + raw[at + 1:] for at in range(len(raw)) for value in (0x00, 0xFF, raw[at] ^ 1)]
    for turn in range(2):
        for variant in variants:
            assert _outcome(warm, variant) == _outcome(_maps(pki), variant), (turn, variant)
            assert _outcome(warm, raw) == _outcome(_maps(pki), raw)


# ---------------------------------------------------------------------------- the bridge: a turn in runs
async def test_a_turn_of_interleaved_publications_is_published_in_order_each_with_its_own_key(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    other = {**SPATEM, "quadTree": f",{OTHER_TILE},", "publicationId": "NL00001:spat-2"}
    cases = [(SPATEM, 60.0), (SPATEM, 60.0), (other, 60.0), (SPATEM, 60.0), (SPATEM, 5.0), (SPATEM, 5.0),
             (other, 60.0)]
    raws = []
    for i, (properties, ttl) in enumerate(cases):
        msg = Message(body=b"m%d" % i, properties=properties, inferred=True)
        msg.ttl = ttl
        raws.append(msg.encode())
    publisher.publish_all(raws, lambda i: lambda outcome: None)
    for _ in range(3):
        await asyncio.sleep(0)
    published = transport.published()
    assert [b for _, _, _, b in published] == [b"m%d" % i for i in range(len(cases))]
    assert [k.split(".", 4)[4].replace(".", "") for _, k, _, _ in published] == [
        "120202130121133020" if properties is SPATEM else OTHER_TILE for properties, _ in cases]
    assert [p.expiration for _, _, p, _ in published] == ["60000", "60000", "60000", "60000", "5000", "5000", "60000"]
    assert bridge.in_flight == len(cases)
    client.data_received(wire((1, commands.Basic.Ack(len(cases), True))))
    assert bridge.counts["exported"] == len(cases) and bridge.in_flight == 0
    assert not bridge.bi.receiver.unsettled  # type: ignore[union-attr]
    assert all(bridge.copies.known(bridge_copy) is True for bridge_copy in list(bridge.copies._entries))


async def test_a_turn_to_an_exchange_not_declared_is_held_and_given_out_again(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    assert bridge.rabbit.session is not None
    bridge.rabbit.session.exchanges = set()  # (SPAT not declared on this connection)
    msg = Message(body=b"m", properties=SPATEM, inferred=True, ttl=60)
    publisher.publish(msg.encode(), lambda outcome: None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.published() == [] and bridge.counts["export_nacked"] == 1 and bridge.in_flight == 1
    bridge.rabbit.session.exchanges = {"SPAT"}
    for _ in range(100):  # released after the back-off's hold: given out again, published now
        await asyncio.sleep(0.005)
        if transport.published():
            break
    assert [b for _, _, _, b in transport.published()] == [b"m"]
    client.data_received(wire((1, commands.Basic.Ack(1, False))))
    assert bridge.counts["exported"] == 1 and bridge.in_flight == 0


async def test_a_turn_while_rabbitmq_is_down_is_published_once_it_is_up(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    session, bridge.rabbit.session = bridge.rabbit.session, None
    for i in range(3):
        publisher.publish(Message(body=b"m%d" % i, properties=SPATEM, inferred=True, ttl=60).encode(),
                          lambda outcome: None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.published() == [] and bridge.in_flight == 3
    bridge.rabbit.session = session
    bridge.rabbit.up.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert [b for _, _, _, b in transport.published()] == [b"m0", b"m1", b"m2"]
    client.data_received(wire((1, commands.Basic.Ack(3, True))))
    assert bridge.counts["exported"] == 3 and bridge.in_flight == 0


# ---------------------------------------------------------------------------- copies and the republishing rules
async def test_published_all_is_published_confirmed_for_each() -> None:
    """A confirm frame's publishes at once: each copy at IF2, a waiter told, a newer publish of the same
    copy left in place, the limit kept."""
    one, each = IF2Copies(limit=3), IF2Copies(limit=3)
    for copies in (one, each):
        for name in "wxyz":
            copies.publishing(name)
    waiting = [asyncio.ensure_future(copies.at_if2("x")) for copies in (one, each)]
    await asyncio.sleep(0)
    ends = {copies: [copies._entries[name] for name in "xyz"] for copies in (one, each)}
    for copies in (one, each):
        copies.publishing("z", Publishing("z"))  # (a newer publish of z)
    one.published_all(ends[one])
    for publishing in ends[each]:
        each.published(publishing.copy, publishing, True)
    assert [await waiter for waiter in waiting] == [True, True]
    assert list(one._entries) == list(each._entries) == ["y", "z"]  # (x asked for once; w the oldest, forgotten)
    assert [one.known(name) is True for name in "yz"] == [each.known(name) is True for name in "yz"] == [True, False]


def test_a_copy_published_again_is_last_in_line_for_eviction() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy(max_entries=3)
    for key in "abc":
        assert policy.offer(key, b"1", "env", 60_000, now=0.0)
    assert policy.offer("a", b"2", "env2", 5_000, now=1.0)  # new content: published again, renewed
    assert policy.offer("d", b"1", "env", 60_000, now=2.0)  # full: b, now published longest ago, goes
    assert list(policy._entries) == ["c", "a", "d"]
    assert policy.holds("a", b"2") and not policy.holds("a", b"1")
    entry = policy._entries["a"]
    assert (entry.body, entry.payload, entry.ttl_s, entry.valid_until, entry.published_at) == (b"2", "env2", 5.0,
                                                                                                6.0, 1.0)
