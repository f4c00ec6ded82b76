"""A source's bounded buffer and hand-off to links, without sockets (IP_032/033/128)."""
from __future__ import annotations

from interchange.broker.addresses import SourceSpec
from interchange.broker.memory import message_cost
from interchange.broker.message import BrokerMessage
from interchange.broker.source import Source

import jms_selectors


class FakeLink:
    def __init__(self, credit: int = 0, selector: str | None = None) -> None:
        self.credit = credit
        self.selector = jms_selectors.compile(selector).matches if selector else None
        self.got: list[BrokerMessage] = []
        self.source = None

    def can_send(self) -> bool:
        return self.credit > 0

    def send(self, message: BrokerMessage) -> None:
        assert self.credit > 0
        self.credit -= 1
        self.got.append(message)


def msg(body: str, expiry: int | None = None, **props: object) -> BrokerMessage:
    properties = {"messageType": "DENM", "publicationId": "NO00001:p", **props}
    return BrokerMessage(body.encode(), properties, expiry, False, "actor", 0)


def bodies(link: FakeLink) -> list[str]:
    return [m.raw.decode() for m in link.got]


def test_direct_hand_off_when_credit() -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink(credit=2)
    source.add_link(link)
    source.offer(msg("a"), 0)
    assert bodies(link) == ["a"] and source.depth == 0


def test_buffer_then_pump_in_order() -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink()
    source.add_link(link)
    for b in "abc":
        source.offer(msg(b), 0)
    assert source.depth == 3
    link.credit = 2
    source.credit_changed(0)
    assert bodies(link) == ["a", "b"]
    source.offer(msg("d"), 0)  # must not overtake c
    link.credit = 5
    source.credit_changed(0)
    assert bodies(link) == ["a", "b", "c", "d"]


def test_overflow_drops_oldest_by_count_and_bytes() -> None:
    source = Source(SourceSpec(address="s", max_messages=200), None)
    for i in range(250):
        source.offer(msg(str(i)), 0)
    assert source.depth == 200 and source.dropped == 50
    big = Source(SourceSpec(address="b", max_bytes=1024 * 1024), None)
    for _ in range(5):
        big.offer(BrokerMessage(bytes(300_000), {}, None, False, "x", 0), 0)
    # each counted for its bytes and the bookkeeping besides them (interchange.broker.memory)
    assert big.depth == 3 and big.dropped == 2 and big.depth_bytes == 3 * message_cost(300_000)


def test_expired_messages_never_delivered() -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink()
    source.add_link(link)
    source.offer(msg("old", expiry=100), 0)
    source.offer(msg("new", expiry=10_000), 0)
    link.credit = 5
    source.credit_changed(500)
    assert bodies(link) == ["new"] and source.expired == 1
    source.offer(msg("x", expiry=600), 0)
    assert source.expire(700) == 0  # already delivered
    source.remove_link(link)
    source.offer(msg("y", expiry=800), 0)
    assert source.expire(900) == 1 and source.depth == 0


def test_unwanted_message_does_not_block_later_ones() -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink(credit=10, selector="causeCode = 2")
    source.add_link(link)
    source.offer(msg("c1", causeCode=1), 0)
    source.offer(msg("c2", causeCode=2), 0)
    assert bodies(link) == ["c2"] and source.depth == 1


def test_shards_stick_to_a_link_and_keep_order() -> None:
    source = Source(SourceSpec(address="s"), None)
    a, b = FakeLink(credit=100), FakeLink(credit=100)
    source.add_link(a)
    source.add_link(b)
    for i in range(30):
        source.offer(msg(f"{i % 3}:{i}", shardId=1 + i % 3), 0)
    for link in (a, b):
        per_shard: dict[str, list[int]] = {}
        for body in bodies(link):
            shard, i = body.split(":")
            per_shard.setdefault(shard, []).append(int(i))
        for seq in per_shard.values():
            assert seq == sorted(seq)
    shards_a = {x.split(":")[0] for x in bodies(a)}
    shards_b = {x.split(":")[0] for x in bodies(b)}
    assert shards_a and shards_b and not shards_a & shards_b
    assert len(a.got) + len(b.got) == 30


def test_blocked_shard_waits_while_others_flow() -> None:
    source = Source(SourceSpec(address="s"), None)
    a, b = FakeLink(credit=1), FakeLink(credit=100)
    source.add_link(a)
    source.add_link(b)
    source.offer(msg("s1-0", shardId=1), 0)  # goes to a (round robin starts at a), a now has no credit
    source.offer(msg("s2-0", shardId=2), 0)  # goes to b
    source.offer(msg("s1-1", shardId=1), 0)  # shard 1 belongs to a: buffered
    source.offer(msg("s2-1", shardId=2), 0)  # flows to b
    source.offer(msg("s1-2", shardId=1), 0)  # buffered behind s1-1
    assert bodies(a) == ["s1-0"] and bodies(b) == ["s2-0", "s2-1"] and source.depth == 2
    a.credit = 10
    source.credit_changed(0)
    assert bodies(a) == ["s1-0", "s1-1", "s1-2"]


def test_requeue_puts_unsettled_first() -> None:
    source = Source(SourceSpec(address="s"), None)
    source.offer(msg("later"), 0)
    source.requeue([msg("first"), msg("second")])
    link = FakeLink(credit=10)
    source.add_link(link)
    source.credit_changed(0)
    assert bodies(link) == ["first", "second", "later"]
