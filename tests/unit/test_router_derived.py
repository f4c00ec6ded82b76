"""What the broker core keeps per application-properties object (a target's verdict, the sources a
message is routed to): messages of the same properties section share one read-only dict (both
admission paths), the core checks and routes them once per section, and forgets what it kept as soon
as a target or source changes, so a message is never routed by a stale verdict or route."""
from __future__ import annotations

import pytest

from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import WINDOW, WORTH, Admission, accelerator_available
from interchange.broker.engine import Rejected
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import DERIVED, BrokerCore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.harness import denm

BRIDGE, TARGET = "bridge", "in"
PATHS = [False, True] if accelerator_available() else [False]


def source(address: str, selector: str | None = None, scope: str = "all") -> SourceSpec:
    return SourceSpec(address=address, consumers=frozenset({"c"}), selector=selector, scope=scope)  # type: ignore[arg-type]


def core(accelerated: bool, selector: str = "TRUE") -> tuple[AddressBook, BrokerCore]:
    book = AddressBook()
    book.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector=selector)], [source("a")])
    return book, BrokerCore(book, Admission(TtlPolicy(), accelerated=accelerated), BrokerObserver(None))


def held(broker: BrokerCore, address: str) -> list[bytes]:
    return [bytes(m.raw) for m in broker.sources[address].buffered()]


@pytest.mark.parametrize("accelerated", PATHS)
def test_messages_of_one_section_share_their_properties_object(accelerated: bool) -> None:
    admission = Admission(TtlPolicy(), accelerated=accelerated)
    first, second = (admission.admit(denm(body=b).encode(), "p", False, None, 1) for b in (b"1", b"2"))
    other = admission.admit(denm(body=b"3", causeCode=2).encode(), "p", False, None, 1)
    assert first.properties is second.properties and first.properties == other.properties | {"causeCode": 1}
    assert other.properties is not first.properties


@pytest.mark.parametrize("accelerated", PATHS)
def test_the_verdict_of_a_section_depends_on_the_capability_shard_count(accelerated: bool) -> None:
    """IP_131: a shardId over the target's shard count is refused, under it admitted: the same section,
    read for two shard counts in turn, gets each count's verdict."""
    admission = Admission(TtlPolicy(), accelerated=accelerated)
    raw = denm(shardId=3, shardCount=3).encode()
    for _ in range(2):
        assert admission.admit(raw, "p", False, 3, 1).properties["shardId"] == 3
        with pytest.raises(Rejected):
            admission.admit(raw, "p", False, 2, 1)


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_source_added_or_removed_changes_where_the_same_section_goes(accelerated: bool) -> None:
    book, broker = core(accelerated)
    publisher = broker.attach_publisher(BRIDGE, TARGET)
    broker.publish(publisher, one := denm(body=b"1").encode())
    assert held(broker, "a") == [one]
    book.put_source(source("b", "messageType = 'DENM'"))
    book.put_source(source("c", "messageType = 'IVIM'"))
    broker.publish(publisher, two := denm(body=b"2").encode())
    book.remove("a")
    broker.publish(publisher, three := denm(body=b"3").encode())
    assert held(broker, "b") == [two, three] and held(broker, "c") == []
    book.put_source(source("b", "messageType = 'IVIM'"))  # its selector changed: the same section no longer fits
    broker.publish(publisher, denm(body=b"4").encode())
    assert held(broker, "b") == [two, three]


@pytest.mark.parametrize("accelerated", PATHS)
def test_an_imported_message_is_routed_apart_from_a_published_one(accelerated: bool) -> None:
    """IP_109: the same section reaches a LOCAL source when published, never when imported."""
    book, broker = core(accelerated)
    book.put_source(source("local", scope="local"))
    publisher = broker.attach_publisher(BRIDGE, TARGET)
    raw = denm().encode()
    broker.publish(publisher, raw)
    broker.publish_imported(raw, "neighbour.test")
    broker.publish(publisher, raw)
    assert len(held(broker, "local")) == 2 and len(held(broker, "a")) == 3


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_target_changed_under_a_publisher_judges_the_same_section_again(accelerated: bool) -> None:
    book, broker = core(accelerated, selector="messageType = 'DENM'")
    publisher = broker.attach_publisher(BRIDGE, TARGET)
    broker.publish(publisher, denm(body=b"1").encode())
    book.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="messageType = 'IVIM'"))
    with pytest.raises(Rejected, match="does not fit"):
        broker.publish(publisher, denm(body=b"2").encode())
    book.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="causeCode = 1"))
    broker.publish(publisher, denm(body=b"3").encode())
    assert len(held(broker, "a")) == 2


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_section_is_kept_from_its_second_message_on(accelerated: bool) -> None:
    """Messages of distinct properties (a CAM's position, say) each bring a section seen once: nothing
    is kept for them; the second message of a section is routed by what is kept from then on."""
    book, broker = core(accelerated, selector="messageType = 'DENM'")
    publisher = broker.attach_publisher(BRIDGE, TARGET)
    for n in range(50):
        broker.publish(publisher, denm(publicationId=f"NO00001:denm-{n}").encode())
    assert broker._routes == ({}, {}) and publisher._verdicts == {}
    for body in (b"1", b"2", b"3"):
        broker.publish(publisher, denm(body=body).encode())
    assert len(broker._routes[0]) == 1 and len(publisher._verdicts) == 1


def test_what_is_kept_stays_bounded() -> None:
    book, broker = core(False, selector="messageType = 'DENM'")
    publisher = broker.attach_publisher(BRIDGE, TARGET)
    for n in range(DERIVED + 10):  # as many sections, each twice
        for body in (b"1", b"2"):
            broker.publish(publisher, denm(body=body, publicationId=f"NO00001:denm-{n}").encode())
    assert 0 < len(broker._routes[0]) <= DERIVED and 0 < len(publisher._verdicts) <= DERIVED
    assert len(held(broker, "a")) == 2 * (DERIVED + 10)


@pytest.mark.skipif(not accelerator_available(), reason="the C accelerator is not built (no compiler)")
def test_the_c_section_cache_is_used_while_sections_repeat() -> None:
    """Messages of distinct properties only: after a window the C path stops keeping sections (none
    repeats: each kept one would cost and never serve); a publication's repeated messages later: after
    the pause the caches are tried again, and kept while they serve."""
    admission = Admission(TtlPolicy(), accelerated=True)
    for n in range(WINDOW + 1):
        admission.admit(denm(publicationId=f"NO00001:d{n}").encode(), "p", False, None, 1)
    assert not admission._caching and not admission.repeated
    same = denm().encode()
    seen = [admission.admit(same, "p", False, None, 1).properties for _ in range(WINDOW * WORTH)]
    assert admission._caching and admission.repeated
    assert seen[-1] is seen[-2] and seen[0] is not seen[1]  # (kept once the caches are on again)
