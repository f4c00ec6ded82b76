"""Memory is bounded by what the limits say (sans-I/O; interchange.broker.memory, IP_032).

A buffered message holds no more than it is counted for (its encoded bytes and
:data:`~interchange.broker.memory.COMPACT_OVERHEAD` in its compact form,
:data:`~interchange.broker.memory.MESSAGE_OVERHEAD` as an object: measured here with tracemalloc);
its compact form gives back every field; its properties are decoded again, the same, when a
selector or the log reads them; and the node's budget across
sources evicts the oldest messages of the source holding the most, logged, leaving the others whole.
"""
from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from interchange.broker import message as message_module
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.memory import IP_032_FLOOR, BufferLimits, compact_cost, message_cost
from interchange.broker.message import BrokerMessage
from interchange.broker.metrics import broker_registry
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.server import BrokerServer
from interchange.broker.source import Source
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.harness import denm

import jms_selectors

#: Messages per measurement: what each holds is the same to a byte at 1,500 as at 5,000 (the
#: one-off growth of the queue and the dicts is spread over enough of them).
COUNT = 1_500
NOW = 1_800_000_000_000


class Recorder:
    """A message log that keeps what it is told (the observer's MessageLog)."""

    messages_on = False

    def __init__(self) -> None:
        self.drops: list[tuple[str, str, object]] = []
        self.events: list[tuple[str, str, dict]] = []

    def message(self, event: str, message: BrokerMessage, address: str | None, **fields: Any) -> None:
        if event == "dropped_message":
            self.drops.append((str(fields["source"]), str(fields["reason"]), message.properties.get("publicationId")))

    def rejected(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing is rejected here")

    def event(self, level: str, event: str, fields: dict) -> None:
        self.events.append((level, event, fields))


class Link:
    """A consumer link with a selector and credit (the source's ConsumerLink)."""

    def __init__(self, selector: str) -> None:
        self.selector = jms_selectors.compile(selector).matches
        self.source: Source | None = None
        self.credit = 0
        self.got: list[BrokerMessage] = []

    identity = "actor-2"

    def close(self, condition: str, description: str) -> None:
        raise AssertionError(description)

    def can_send(self) -> bool:
        return self.credit > 0

    def send(self, message: BrokerMessage) -> None:
        self.credit -= 1
        self.got.append(message)


@pytest.mark.parametrize(("body", "kind"), [(0, "memory-only"), (40, "memory-only"), (1000, "memory-only"),
                                           (0, "durable"), (0, "given back"), (0, "durable, given back")],
                         ids=["250B", "290B", "1253B", "250B durable", "250B given back", "250B durable given back"])
def test_a_buffered_message_holds_no_more_than_it_is_counted_for(body: int, kind: str) -> None:
    # the admission of the node (the C accelerator where built: a dict per message; the Python
    # path shares one among messages of the same properties, which would hide a kept dict here)
    raw = bytes(denm(body=b"x" * body).encode())
    admission = Admission(TtlPolicy())
    source = Source(SourceSpec(address="all", max_messages=10 * COUNT, max_bytes=10 * COUNT * message_cost(len(raw))),
                    None)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(COUNT):  # a fresh bytes object each, as proton hands them over
            message = admission.admit(bytes(bytearray(raw)), "actor-1", False, None, NOW + i)
            if "durable" in kind:  # as the router and the store mark it
                message.holders, message.store_id = {"all"}, 1_000_000 + i
            if "given back" in kind:
                source.requeue([message])
            else:
                source.offer(message, NOW)
        gc.collect()
        held = (tracemalloc.get_traced_memory()[0] - before) / COUNT
    finally:
        tracemalloc.stop()
    # memory-only ones wait in their compact form; the others as objects (their own state)
    cost = compact_cost(len(raw)) if kind == "memory-only" else message_cost(len(raw))
    assert source.depth == COUNT and source.depth_bytes == COUNT * cost
    assert held <= cost, f"{held:.0f} bytes held per {len(raw)}-byte message"


@pytest.mark.parametrize("accelerated", [True, False], ids=["c", "python"])
def test_buffered_properties_decode_again_for_selectors(monkeypatch: pytest.MonkeyPatch, accelerated: bool) -> None:
    if not accelerated:
        monkeypatch.setattr(message_module, "_c_admit", None)
    admission = Admission(TtlPolicy(), accelerated=False)
    source = Source(SourceSpec(address="all"), None)
    link = Link("causeCode = 5")
    source.add_link(link)
    sent = [denm(body=b"%d" % i, causeCode=5 if i % 2 else 1, publicationId=f"NO00001:p{i}") for i in range(10)]
    for message in sent:
        source.offer(admission.admit(bytes(message.encode()), "actor-1", False, None, NOW), NOW)
    assert source.depth == 10 and source.depth_bytes == sum(compact_cost(len(m.encode())) for m in sent)
    link.credit = 10
    source.credit_changed(NOW)
    assert [m.properties["publicationId"] for m in link.got] == [f"NO00001:p{i}" for i in range(1, 10, 2)]
    assert [m.properties for m in link.got] == [dict(sent[i].properties) for i in range(1, 10, 2)]
    assert source.depth == 5


def test_the_compact_form_gives_back_every_field() -> None:
    admission = Admission(TtlPolicy())
    cases = [admission.admit(bytes(denm(publicationId=f"NO00001:{i}", shardId=1 + i % 2).encode()), f"peer-{i}",
                             i % 2 == 1, None, NOW + i) for i in range(4)]
    cases[1].expiry_ms, cases[1].expiry_source = None, "ttl"
    cases[2].expiry_source = "absolute-expiry-time"
    cases[3].seq, cases[3].shard_seq = (1 << 60) + 3, (1 << 40) - 1
    for message in cases:
        entry = message.compact()
        assert entry is not None and entry[0] is message.raw and entry[1] is message.shard_key
        restored = BrokerMessage.restore(entry)
        for field in BrokerMessage.__slots__:
            if field != "_properties":
                assert getattr(restored, field) == getattr(message, field), field
        assert restored.properties == message.properties
    # what has state of its own, or does not fit, stays an object
    kept = []
    for change in ("holders", "redeliveries", "store_id", "seq", "raw", "expiry_ms", "shard_seq", "expiry_source"):
        message = admission.admit(bytes(denm().encode()), "actor-1", False, None, NOW)
        value = {"holders": {"all"}, "redeliveries": {"all": 1}, "store_id": 7, "seq": 0,
                 "raw": bytearray(message.raw), "expiry_ms": 1 << 45, "shard_seq": 1 << 40,
                 "expiry_source": "other"}[change]
        setattr(message, change, value)
        kept.append((change, message.compact()))
    assert [change for change, entry in kept if entry is not None] == []


def budget_core(log: Recorder, node_bytes: int) -> tuple[BrokerCore, Any]:
    addresses = AddressBook()
    addresses.load([TargetSpec(address="in", publishers=frozenset({"a"}))],
                   [SourceSpec(address="slow", selector="causeCode = 1"),
                    SourceSpec(address="slower", selector="causeCode = 2"),
                    SourceSpec(address="small", selector="causeCode = 3")])
    limits = BufferLimits(max_message_size=1024, source_max_bytes=1 << 30, node_max_bytes=node_bytes)
    core = BrokerCore(addresses, Admission(TtlPolicy()), BrokerObserver(log), clock_ms=lambda: NOW, buffers=limits)
    return core, core.attach_publisher("a", "in")


def test_the_node_budget_evicts_the_fullest_source_and_says_so() -> None:
    log = Recorder()
    raw = {cause: [bytes(denm(causeCode=cause, publicationId=f"NO00001:{cause}-{i}").encode()) for i in range(3000)]
           for cause in (1, 2, 3)}
    cost = message_cost(len(raw[1][0]))
    core, publisher = budget_core(log, node_bytes=IP_032_FLOOR * message_cost(1024) + 100 * cost)
    budget = core.budget
    for i in range(50):
        core.publish(publisher, raw[3][i])  # a source that stays small
    for i in range(3000):  # two that nobody consumes, one faster than the other
        core.publish(publisher, raw[1][i])
        if i % 3 == 0:
            core.publish(publisher, raw[2][i])
        assert budget.used <= budget.limit
    depths = {address: source.depth for address, source in core.sources.items()}
    assert depths["small"] == 50 and budget.used == sum(s.depth_bytes for s in core.sources.values())
    assert depths["slow"] + depths["slower"] < 3000 + 1000
    # the fullest gave up its oldest, in order, and each loss is a record naming its source
    drops = [d for d in log.drops if d[1] == "node_memory"]
    assert drops and {source for source, _, _ in drops} <= {"slow", "slower"}
    lost_slow = [p for source, _, p in drops if source == "slow"]
    assert lost_slow == [f"NO00001:1-{i}" for i in range(len(lost_slow))]
    assert depths["slow"] == 3000 - len(lost_slow)
    assert len(drops) == budget.evicted == core.observer.dropped_count
    episodes = [f for level, event, f in log.events if event == "memory_budget"]
    assert len(episodes) == budget.episodes >= 1 and all(level == "warning" for level, event, _ in log.events
                                                           if event == "memory_budget")
    assert sum(f["evicted"] for f in episodes) == len(drops)
    assert all(f["after_bytes"] <= budget.low_water < f["before_bytes"] for f in episodes)
    registry = broker_registry(core, BrokerServer(core))  # a server object, never started: for its metrics
    assert registry.get_sample_value("interchange_memory_budget_evicted_total") == len(drops)
    assert registry.get_sample_value("interchange_memory_budget_used_bytes") == budget.used
    assert registry.get_sample_value("interchange_memory_budget_bytes") == budget.limit


def test_a_budget_below_the_floor_is_refused() -> None:
    limits = BufferLimits(max_message_size=1 << 20, node_max_bytes=100 << 20)
    assert any("node_max_bytes" in problem and "(IP_032)" in problem for problem in limits.problems())
