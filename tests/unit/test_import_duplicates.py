"""Duplicate suppression at import (multi-hop make-before-break), sans-I/O: the bounded
window of bare-message digests, and the broker core keeping a second copy that came over another
route (a different hop trace, the same bare message, IP_014/015) from a source that had the first.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from proton import symbol

from interchange.broker.addresses import AddressBook, Scope, SourceSpec
from interchange.broker.admission import Admission
from interchange.broker.amqp_scan import find_message_annotations
from interchange.broker.hop_trace import TRACE_KEY, Forward, HopGuard, HopTrace, stamp_trace
from interchange.broker.import_duplicates import ImportDuplicates, bare_digest
from interchange.broker.message_log import JsonLog
from interchange.broker.metrics import broker_registry
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.server import BrokerServer
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.broker_harness import complete_records
from interchange.testing.harness import denm

A, B, C = "a.interchange.test", "b.interchange.test", "c.interchange.test"
NOW = 1_000_000


def test_window_remembers_per_source_for_its_duration() -> None:
    window = ImportDuplicates(window_ms=1000)
    d1, d2 = b"1" * 16, b"2" * 16
    assert window.first("s1", d1, NOW)
    assert not window.first("s1", d1, NOW + 999)  # a second copy, within the window
    assert window.first("s2", d1, NOW + 999)  # another source has not had it
    assert window.first("s1", d2, NOW + 999)  # another message
    assert window.first("s1", d1, NOW + 1000)  # forgotten after the window: a new first copy
    assert len(window) == 3  # the first entry went (time bound), the two of NOW + 999 are still in it
    assert window.first("s3", d1, NOW + 5000) and len(window) == 1


def test_window_is_bounded_by_count() -> None:
    window = ImportDuplicates(window_ms=60_000, max_entries=3)
    for i in range(5):
        assert window.first("s", bytes([i]) * 16, NOW)
    assert len(window) == 3
    assert window.first("s", bytes([0]) * 16, NOW)  # the oldest was forgotten first
    assert not window.first("s", bytes([4]) * 16, NOW)
    with pytest.raises(ValueError):
        ImportDuplicates(window_ms=0)


def test_digest_covers_the_bare_message_only() -> None:
    raw = denm().encode()
    via_b = stamp_trace(raw, HopTrace((A, B), 4))
    via_c = stamp_trace(raw, HopTrace((A, C, B), 4))
    assert via_b != via_c and bare_digest(via_b) == bare_digest(via_c) == bare_digest(raw)
    for stamp in (True, False):  # where the hop guard says the bare message starts (no second scan)
        forward = HopGuard(C, stamp=stamp).inspect(via_b, B)
        assert isinstance(forward, Forward) and forward.bare_at == find_message_annotations(forward.raw).end
        assert bare_digest(forward.raw, forward.bare_at) == bare_digest(raw)
    assert bare_digest(denm(body=b"other").encode()) != bare_digest(raw)
    assert bare_digest(denm(causeCode=2).encode()) != bare_digest(raw)  # application properties count
    other_id = denm()
    other_id.id = "m-2"
    assert bare_digest(other_id.encode()) != bare_digest(raw)  # so do the properties


def _core(duplicates: ImportDuplicates | None, log: JsonLog | None = None) -> BrokerCore:
    """Node B with multi-hop on: two local sources taking imported data."""
    addresses = AddressBook()
    addresses.load([], [SourceSpec(address=a, consumers=frozenset({"actor"}), scope=Scope.ALL) for a in ("s1", "s2")])
    return BrokerCore(addresses, Admission(TtlPolicy(), accelerated=False), BrokerObserver(log),
                      clock_ms=lambda: NOW, hops=HopGuard(B, stamp=True), duplicates=duplicates)


def _over_two_routes(core: BrokerCore) -> None:
    """A's message reaches B straight from A (for s1) and over C (for s1 and s2) during a handover."""
    raw = denm().encode()
    core.publish_imported(raw, A, only=["s1"])
    over_c = stamp_trace(raw, HopTrace((A, C), 4))
    core.publish_imported(over_c, C, only=["s1", "s2"])


def test_second_copy_over_another_route_is_kept_from_the_source_that_had_it(tmp_path: Path) -> None:
    log = JsonLog(B, path=tmp_path / "b.log")
    core = _core(ImportDuplicates(window_ms=10_000), log)
    _over_two_routes(core)
    log.close()
    records = complete_records(tmp_path / "b.log")
    drops = [r for r in records if r["event"] == "dropped_message"]
    assert [(r["reason"], r["source"], r["level"], r["origin"]) for r in drops] == [
        ("duplicate", "s1", "warning", "federated")]
    assert (core.sources["s1"].depth, core.sources["s2"].depth) == (1, 1)
    assert core.observer.duplicate_dropped_count == 1
    assert core.observer.hop_dropped_count == {"loop": 0, "hop_limit": 0}
    kept = core.sources["s2"].buffered()[0].raw  # the copy s2 got: over C, trace stamped, bare message exact
    assert bare_digest(kept) == bare_digest(denm().encode())
    registry = broker_registry(core, BrokerServer(core))  # a server object, never started: for its metrics
    assert registry.get_sample_value("interchange_messages_duplicate_dropped_total") == 1
    # A different message is no duplicate.
    core.publish_imported(denm(body=b"next").encode(), A, only=["s1"])
    assert core.sources["s1"].depth == 2 and core.observer.duplicate_dropped_count == 1


def test_without_the_window_both_copies_are_kept() -> None:
    core = _core(None)  # multi-hop off (the default): plain federation keeps every message
    _over_two_routes(core)
    assert (core.sources["s1"].depth, core.sources["s2"].depth) == (2, 1)
    assert core.observer.duplicate_dropped_count == 0


def test_a_looped_copy_is_still_a_loop_drop() -> None:
    core = _core(ImportDuplicates(window_ms=10_000))
    looped = denm()
    looped.annotations = {symbol(TRACE_KEY): [B, C]}
    core.publish_imported(looped.encode(), C, only=["s1"])
    assert core.observer.hop_dropped_count["loop"] == 1 and core.observer.duplicate_dropped_count == 0
    assert core.sources["s1"].depth == 0
