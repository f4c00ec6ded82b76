"""A source's bounded buffer and hand-off to links, without sockets (IP_032/033/128).

Each test runs with messages built by hand (buffered as objects, as durable and given-back ones
are) and with admitted AMQP messages (buffered in their compact form, restored when they leave).
"""
from __future__ import annotations

import pytest
from proton import Message

from interchange.broker.addresses import SourceSpec
from interchange.broker.admission import Admission
from interchange.broker.memory import compact_cost, message_cost
from interchange.broker.message import BrokerMessage
from interchange.broker.source import Source
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.harness import denm

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


class Form:
    """How the messages of a test are built: by hand (``object``), or admitted from their AMQP
    bytes (``compact``), and how to read back what a link got."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.admission = Admission(TtlPolicy())

    def msg(self, body: str, expiry: int | None = None, **props: object) -> BrokerMessage:
        properties = {"messageType": "DENM", "publicationId": "NO00001:p", **props}
        if self.name == "object":
            return BrokerMessage(body.encode(), properties, expiry, False, "actor", 0)
        raw = bytes(denm(body=body.encode(), **properties).encode())
        message = self.admission.admit(raw, "actor", False, None, 0)
        message.expiry_ms = expiry
        return message

    def bodies(self, link: FakeLink) -> list[str]:
        if self.name == "object":
            return [m.raw.decode() for m in link.got]
        decoded = []
        for m in link.got:
            message = Message()
            message.decode(m.raw)
            decoded.append(bytes(message.body).decode())
        return decoded

    def cost(self, size: int) -> int:
        """What the buffer counts a message of ``size`` bytes for in this form."""
        return (message_cost if self.name == "object" else compact_cost)(size)


@pytest.fixture(params=["object", "compact"])
def form(request: pytest.FixtureRequest) -> Form:
    return Form(request.param)


def test_direct_hand_off_when_credit(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink(credit=2)
    source.add_link(link)
    source.offer(form.msg("a"), 0)
    assert form.bodies(link) == ["a"] and source.depth == 0


def test_buffer_then_pump_in_order(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink()
    source.add_link(link)
    for b in "abc":
        source.offer(form.msg(b), 0)
    assert source.depth == 3
    link.credit = 2
    source.credit_changed(0)
    assert form.bodies(link) == ["a", "b"]
    source.offer(form.msg("d"), 0)  # must not overtake c
    link.credit = 5
    source.credit_changed(0)
    assert form.bodies(link) == ["a", "b", "c", "d"]


def test_overflow_drops_oldest_by_count_and_bytes(form: Form) -> None:
    source = Source(SourceSpec(address="s", max_messages=200), None)
    sent = [form.msg(str(i)) for i in range(250)]
    for message in sent:
        source.offer(message, 0)
    assert source.depth == 200 and source.dropped == 50
    assert [m.raw for m in source.buffered()] == [m.raw for m in sent[50:]]  # the oldest went
    assert source.depth_bytes == sum(form.cost(m.size) for m in sent[50:])
    big = Source(SourceSpec(address="b", max_bytes=1024 * 1024), None)
    large = [form.msg("x" * 300_000) for _ in range(5)]
    for message in large:
        big.offer(message, 0)
    # each counted for its bytes and the bookkeeping besides them (interchange.broker.memory)
    assert big.depth == 3 and big.dropped == 2 and big.depth_bytes == 3 * form.cost(large[0].size)


def test_expired_messages_never_delivered(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink()
    source.add_link(link)
    source.offer(form.msg("old", expiry=100), 0)
    source.offer(form.msg("new", expiry=10_000), 0)
    link.credit = 5
    source.credit_changed(500)
    assert form.bodies(link) == ["new"] and source.expired == 1
    source.offer(form.msg("x", expiry=600), 0)
    assert source.expire(700) == 0  # already delivered
    source.remove_link(link)
    source.offer(form.msg("y", expiry=800), 0)
    assert source.expire(900) == 1 and source.depth == 0


def test_unwanted_message_does_not_block_later_ones(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    link = FakeLink(credit=10, selector="causeCode = 2")
    source.add_link(link)
    source.offer(form.msg("c1", causeCode=1), 0)
    source.offer(form.msg("c2", causeCode=2), 0)
    assert form.bodies(link) == ["c2"] and source.depth == 1


def test_shards_stick_to_a_link_and_keep_order(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    a, b = FakeLink(credit=100), FakeLink(credit=100)
    source.add_link(a)
    source.add_link(b)
    for i in range(30):
        source.offer(form.msg(f"{i % 3}:{i}", shardId=1 + i % 3), 0)
    for link in (a, b):
        per_shard: dict[str, list[int]] = {}
        for body in form.bodies(link):
            shard, i = body.split(":")
            per_shard.setdefault(shard, []).append(int(i))
        for seq in per_shard.values():
            assert seq == sorted(seq)
    shards_a = {x.split(":")[0] for x in form.bodies(a)}
    shards_b = {x.split(":")[0] for x in form.bodies(b)}
    assert shards_a and shards_b and not shards_a & shards_b
    assert len(a.got) + len(b.got) == 30


def test_blocked_shard_waits_while_others_flow(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    a, b = FakeLink(credit=1), FakeLink(credit=100)
    source.add_link(a)
    source.add_link(b)
    source.offer(form.msg("s1-0", shardId=1), 0)  # goes to a (round robin starts at a), a now has no credit
    source.offer(form.msg("s2-0", shardId=2), 0)  # goes to b
    source.offer(form.msg("s1-1", shardId=1), 0)  # shard 1 belongs to a: buffered
    source.offer(form.msg("s2-1", shardId=2), 0)  # flows to b
    source.offer(form.msg("s1-2", shardId=1), 0)  # buffered behind s1-1
    assert form.bodies(a) == ["s1-0"] and form.bodies(b) == ["s2-0", "s2-1"] and source.depth == 2
    a.credit = 10
    source.credit_changed(0)
    assert form.bodies(a) == ["s1-0", "s1-1", "s1-2"]


def test_requeue_puts_unsettled_first(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    source.offer(form.msg("later"), 0)
    source.requeue([form.msg("first"), form.msg("second")])
    link = FakeLink(credit=10)
    source.add_link(link)
    source.credit_changed(0)
    assert form.bodies(link) == ["first", "second", "later"]


def test_a_message_expires_at_its_expiry(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    source.offer(form.msg("at", expiry=1_000), 0)
    source.offer(form.msg("after", expiry=1_001), 0)
    source.offer(form.msg("never"), 0)
    assert source.expire(999) == 0
    assert source.expire(1_000) == 1 and source.depth == 2  # IP_033: expiry <= now is expired
    link = FakeLink(credit=5)
    source.add_link(link)
    source.credit_changed(1_001)
    assert form.bodies(link) == ["never"] and source.expired == 2 and source.depth_bytes == 0


def test_a_buffered_message_is_not_decoded_again_for_a_link_without_selector(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compact message leaves the buffer without its properties; handed to the one link, which has no
    selector, they are not decoded again (only a link selector reads them)."""
    form = Form("compact")
    source = Source(SourceSpec(address="s"), None)
    plain, choosy = FakeLink(credit=0), FakeLink(credit=0, selector="messageType = 'DENM'")
    source.add_link(plain)
    for body in ("a", "b"):
        source.offer(form.msg(body), 0)

    def decoded(raw: bytes | bytearray) -> dict[str, object]:
        raise AssertionError("decoded again")

    monkeypatch.setattr("interchange.broker.message.decode_properties", decoded)
    plain.credit = 2
    source.credit_changed(0)
    assert form.bodies(plain) == ["a", "b"]
    source.remove_link(plain)
    source.add_link(choosy)
    source.offer(form.msg("c"), 0)  # buffered: no credit
    choosy.credit = 1
    with pytest.raises(AssertionError, match="decoded again"):  # a selector reads them
        source.credit_changed(0)


class RunLink(FakeLink):
    """A link that takes a run in one call, as far as its credit goes (the engine's ``send_run``)."""

    def __init__(self, credit: int = 0, selector: str | None = None) -> None:
        super().__init__(credit, selector)
        self.runs: list[int] = []

    def send_run(self, messages: list[BrokerMessage]) -> int:
        taken = messages[:self.credit]
        self.credit -= len(taken)
        self.got.extend(taken)
        self.runs.append(len(taken))
        return len(taken)


@pytest.mark.parametrize("credit", [0, 3, 5, 8])
def test_offer_all_is_offer_one_by_one(form: Form, credit: int) -> None:
    """A run offered at once ends as offered one by one: what the link's credit allows sent (in one
    call), the rest buffered in order, counted alike."""
    ends = []
    for run in (True, False):
        source = Source(SourceSpec(address="s"), None)
        link = RunLink(credit=credit)
        source.add_link(link)
        messages = [form.msg(f"m{i}") for i in range(5)]
        if run:
            source.offer_all(messages, 0)
            assert link.runs == [min(credit, 5)]
        else:
            for message in messages:
                source.offer(message, 0)
        link.credit += 10
        source.credit_changed(0)
        ends.append((form.bodies(link), source.depth, source.enqueued, source.delivered))
    assert ends[0] == ends[1] and ends[0][0] == [f"m{i}" for i in range(5)]


def test_offer_all_behind_a_buffer_or_with_a_selector_goes_one_by_one(form: Form) -> None:
    source = Source(SourceSpec(address="s"), None)
    link = RunLink(credit=0)
    source.add_link(link)
    source.offer(form.msg("old"), 0)  # (buffered: no credit)
    link.credit = 10  # (not told yet: what comes waits behind the buffered one)
    source.offer_all([form.msg("a"), form.msg("b")], 0)
    assert link.runs == [] and source.depth == 3
    source.credit_changed(0)
    assert form.bodies(link) == ["old", "a", "b"]
    picky = Source(SourceSpec(address="p"), None)
    chosen = RunLink(credit=10, selector="causeCode = 5")
    picky.add_link(chosen)
    picky.offer_all([form.msg("x", causeCode=5), form.msg("y", causeCode=6)], 0)
    assert chosen.runs == [] and form.bodies(chosen) == ["x"]
