"""A delivery target's coverage (interchange.broker.coverage): what fits the actor's capabilities, as
data. It must accept exactly what the OR of the capabilities' validating selectors
(``capability_selector``, compiled by jms_selectors) accepts, on any message properties, and
stay small and fast whatever the number of capabilities (no sockets)."""
from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import int32, symbol, ulong

import jms_selectors
from ii_api.decisions.capability_selector import Covering, capabilities_coverage, capability_selector
from ii_api.wire.models import Capability
from interchange.broker.addresses import TargetSpec
from interchange.broker.control import ControlCodec, PutTarget
from interchange.broker.coverage import Coverage, CoverageMatcher
from interchange.broker.router import target_acceptor

KINDS = ("DENM", "IVIM", "SPATEM")
PUBLICATIONS = ("a", "b", "c")


def cap(publication: str = "a", *, kind: str = "DENM", tiles: tuple[str, ...] = ("1202021",),
        publisher: str = "NO00001", country: str = "NO", version: str | None = None, shards: int | None = None,
        causes: list[int] | None = None) -> Capability:
    app: dict[str, Any] = {"messageType": kind, "publisherId": publisher, "publicationId": f"{publisher}:{publication}",
                           "originatingCountry": country, "protocolVersion": version or f"{kind}:1.3.1",
                           "quadTree": list(tiles)}
    if kind == "DENM":
        app["causeCode"] = causes
    return Capability.model_validate({"application": app, "metadata": {"shardCount": shards} if shards else {}})


def by_selectors(capabilities: list[Capability], properties: dict[str, Any]) -> bool:
    """The definition: some capability's validating selector is TRUE for the message."""
    return any(jms_selectors.compile(capability_selector(c)).matches(properties) for c in capabilities)


tile = st.text("0123", min_size=1, max_size=6)
capabilities = st.lists(st.builds(
    cap, st.sampled_from(PUBLICATIONS), kind=st.sampled_from(KINDS),
    tiles=st.lists(tile, min_size=1, max_size=12).map(tuple),  # past 8 tiles: the prefix-set path
    publisher=st.sampled_from(["NO00001", "NO00002"]), country=st.sampled_from(["NO", "SE"]),
    version=st.sampled_from([None, "v2"]), shards=st.one_of(st.none(), st.integers(1, 4)),
    causes=st.one_of(st.none(), st.lists(st.integers(-1, 5), min_size=1, max_size=3))), min_size=0, max_size=6)

MISSING = object()
odd = st.one_of(st.none(), st.booleans(), st.integers(-2, 6), st.floats(allow_nan=True), st.binary(max_size=2),
                st.just(MISSING))


def text_value(*choices: str) -> st.SearchStrategy[Any]:
    """One of ``choices`` (also as a proton symbol, a str subclass) or a value of another type."""
    return st.one_of(st.sampled_from(choices), st.sampled_from(choices).map(symbol), odd)


quad_trees = st.one_of(
    st.lists(tile, min_size=1, max_size=4).map(lambda ts: "," + ",".join(ts) + ","),  # well formed
    st.text("0123,x", max_size=14),  # anything made of tile characters and commas
    odd)
numbers = st.one_of(st.integers(-2, 6), st.integers(-2, 6).map(int32), st.integers(0, 6).map(ulong),
                    st.sampled_from([0.5, 1.0, 3.0, 4.5, math.nan, math.inf]), odd)
messages = st.fixed_dictionaries({
    "messageType": text_value(*KINDS), "publisherId": text_value("NO00001", "NO00002"),
    "publicationId": text_value(*(f"{p}:{x}" for p in ("NO00001", "NO00002") for x in PUBLICATIONS)),
    "originatingCountry": text_value("NO", "SE"),
    "protocolVersion": text_value("DENM:1.3.1", "IVIM:1.3.1", "SPATEM:1.3.1", "v2"),
    "quadTree": quad_trees, "causeCode": numbers, "shardId": numbers,
}).map(lambda props: {k: v for k, v in props.items() if v is not MISSING})


def fitting(capability: Capability) -> dict[str, Any]:
    """Properties of a message that fits ``capability`` (its first tile, code and shard)."""
    app = capability.application
    props: dict[str, Any] = {key: getattr(app, key) for key in (
        "messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")}
    props["quadTree"] = f",{app.quadTree[0]}1,"
    props["causeCode"] = (getattr(app, "causeCode", None) or [0])[0]
    props["shardId"] = capability.metadata.shardCount or 1
    return props


def variants(value: Any) -> st.SearchStrategy[Any]:
    """``value`` or one a type or a step away (what the fit's type and range checks must tell apart)."""
    if isinstance(value, str):
        return st.sampled_from([value, symbol(value), value + "x", value[:-1], value.encode(), None, 1])
    return st.sampled_from([value, int32(value), float(value), value + 0.5, value - 1, value + 1, str(value),
                            True, False, None, math.nan])


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Capability], dict[str, Any]]:
    """Capabilities, and either any message or one near one of them: a fitting message with up
    to two properties changed a little (:func:`variants`) or left out."""
    caps = draw(capabilities)
    if not caps or draw(st.booleans()):
        return caps, draw(messages)
    props = fitting(draw(st.sampled_from(caps)))
    for key in draw(st.lists(st.sampled_from(sorted(props)), max_size=2, unique=True)):
        if draw(st.integers(0, 4)):
            props[key] = draw(variants(props[key]))
        else:
            del props[key]
    return caps, props


@settings(max_examples=1000, deadline=None)
@given(case=cases())
def test_coverage_accepts_exactly_what_the_capability_selectors_accept(
        case: tuple[list[Capability], dict[str, Any]]) -> None:
    capabilities, properties = case
    coverage = capabilities_coverage(capabilities)
    expected = by_selectors(capabilities, properties)
    assert CoverageMatcher(coverage)(properties) is expected
    # as a broker process gets it: in a target spec, over the control channel (JSON)
    spec = TargetSpec(address="t", coverage=coverage)
    [received] = ControlCodec().feed(ControlCodec.encode(PutTarget(spec=spec)))
    assert received.spec == spec and CoverageMatcher(received.spec.coverage)(properties) is expected


@settings(max_examples=300, deadline=None)
@given(case=cases(), selector=st.sampled_from(["", "messageType = 'DENM'", "publisherId = 'NO00001' -- ours\n"]))
def test_target_accepts_what_its_selector_and_its_coverage_both_accept(
        case: tuple[list[Capability], dict[str, Any]], selector: str) -> None:
    """A delivery target: the delivery's own selector AND the capabilities it covers."""
    capabilities, properties = case
    spec = TargetSpec(address="t", selector=selector or None, coverage=capabilities_coverage(capabilities))
    acceptor, _ = target_acceptor(spec)
    assert acceptor is not None
    expected = jms_selectors.compile(selector).matches(properties) and by_selectors(capabilities, properties)
    assert acceptor(properties) is expected


EDGES: list[Any] = [0, 1, 2, 3, 4, True, False, 1.0, 1.5, 2.5, 0.5, int32(1), ulong(2), math.nan, math.inf, "1",
                    b"1", None, "DENM", symbol("DENM"), "NO00001:a", symbol("NO00001:a"), ",1202021,", ",120202,",
                    "x,1202021", symbol(",12020213,")]


@pytest.mark.parametrize("key", ["messageType", "publicationId", "quadTree", "causeCode", "shardId"])
def test_each_property_on_the_edges_of_its_type_and_range(key: str) -> None:
    """A fitting message with one property set to each edge value: the coverage and the selectors agree."""
    capabilities = [cap(causes=[1, 3], shards=2), cap("b", kind="IVIM", tiles=tuple(f"12020{i}" for i in "0123") +
                                                  ("3", "21", "1202021", "00"), shards=4)]
    for capability in capabilities:
        for value in EDGES:
            properties = {**fitting(capability), key: value}
            assert CoverageMatcher(capabilities_coverage(capabilities))(properties) is \
                by_selectors(capabilities, properties), (capability.application.publicationId, key, value)


@settings(max_examples=300, deadline=None)
@given(pool=st.one_of(capabilities.filter(bool), st.lists(st.builds(  # few shapes: fits of several capabilities
    cap, st.sampled_from(PUBLICATIONS), kind=st.sampled_from(KINDS[:2]), tiles=st.sampled_from([("12",), ("3", "1")]),
    shards=st.sampled_from([None, 2])), min_size=1, max_size=6)),
       steps=st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=25))
def test_a_covering_changed_capability_by_capability_is_the_covering_made_anew(
        pool: list[Capability], steps: list[tuple[bool, int]]) -> None:
    """What a delivery's target accepts after capabilities are added and removed one at a time (the
    II updates it so, and the broker builds each version's matcher from the last one) is what the
    capabilities it holds then give when covered all at once."""
    covering, held = Covering(), []
    matcher: CoverageMatcher | None = None
    for add, index in steps:
        capability = pool[index % len(pool)]
        if add:
            covering.add(capability)
            held.append(capability)
        else:
            assert covering.remove(capability) is (capability in held)
            if capability in held:
                held.remove(capability)
        assert len(covering) == len(held)
        shard_counts = {c.metadata.shardCount for c in held}
        assert covering.shard_count == (shard_counts.pop() if len(shard_counts) == 1 else None)
        anew = capabilities_coverage(held)  # as the II looks after each change
        assert covering.coverage().publication_ids() == anew.publication_ids()
        matcher = CoverageMatcher(covering.coverage(), matcher)
        for other in pool:
            properties = fitting(other)
            assert matcher(properties) is CoverageMatcher(anew)(properties)
    for capability in pool:
        properties = fitting(capability)
        assert CoverageMatcher(covering.coverage())(properties) is by_selectors(held, properties)


def test_capabilities_alike_but_for_their_publication_id_share_one_fit() -> None:
    capabilities = [cap(f"bulk-{i}", tiles=(f"1202{i % 4}{i % 3}",), causes=[1, 2]) for i in range(2000)]
    coverage = capabilities_coverage(capabilities)
    assert len(coverage.fits) == 12 and len(coverage.publication_ids()) == 2000
    matcher = CoverageMatcher(coverage)
    message = {"messageType": "DENM", "publisherId": "NO00001", "publicationId": "NO00001:bulk-7",
               "originatingCountry": "NO", "protocolVersion": "DENM:1.3.1", "quadTree": ",120231,", "causeCode": 2}
    assert matcher(message)
    assert not matcher({**message, "quadTree": ",120230,"})  # bulk-7 covers 120231 only
    assert not matcher({**message, "causeCode": 3})
    assert not matcher({**message, "publicationId": "NO00001:bulk-2000"})


def test_no_capabilities_accept_nothing_and_a_broken_mapping_is_no_match() -> None:
    assert not CoverageMatcher(capabilities_coverage([]))({"publicationId": "NO00001:a"})

    class Broken(dict):
        def get(self, key: object, default: object = None) -> object:
            raise RuntimeError("broken mapping")

    assert CoverageMatcher(capabilities_coverage([cap()]))(Broken()) is False


def test_thousands_of_capabilities_with_their_own_tiles() -> None:
    """A TLEX bridge of 4,000 traffic lights: 12,000 capabilities, each its own zoom-18 tile (the
    OR of their selectors would be ~2.5 MB of text; the parser takes 64 KiB). Built, sent to a
    broker process and matched per message without regard to their number."""
    kinds = ("SPATEM", "MAPEM", "SSEM")
    tiles = [format(i * 7919, "018b").replace("1", "3").replace("0", "1") for i in range(4000)]
    capabilities = [cap(f"TLC{i:05d}-{kind}", kind=kind, publisher="NL00001", country="NL", tiles=(tiles[i],))
                    for i in range(4000) for kind in kinds]
    coverage = capabilities_coverage(capabilities)
    assert len(coverage.fits) == 12_000
    line = ControlCodec.encode(PutTarget(spec=TargetSpec(address="t", coverage=coverage)))
    assert len(line) < 256 * 12_000  # bytes per capability, far below the control channel's line bound
    matcher = CoverageMatcher(coverage)
    message = {"messageType": "SPATEM", "publisherId": "NL00001", "publicationId": "NL00001:TLC03999-SPATEM",
               "originatingCountry": "NL", "protocolVersion": "SPATEM:1.3.1", "quadTree": f",{tiles[3999]},"}
    assert matcher(message)
    assert not matcher({**message, "quadTree": f",{tiles[3998]},"})
    assert not matcher({**message, "messageType": "MAPEM"})
    started = time.perf_counter()
    for _ in range(10_000):
        matcher(message)
    assert time.perf_counter() - started < 1.0  # ~2 µs each; generous for a loaded machine


@pytest.mark.parametrize("tiles", [("1202",), tuple(f"1202{i}" for i in "0123") + ("13", "2", "0312", "31")])
def test_tile_terms_are_substring_tests_on_any_text(tiles: tuple[str, ...]) -> None:
    """``quadTree LIKE '%,<tile>%'`` is a substring test: it holds for any text with ``,<tile>`` in it,
    well-formed or not, and for no other type (both the few- and the many-tile paths)."""
    matcher = CoverageMatcher(Coverage.model_validate({"fits": [{"publicationIds": ["X:a"], "tiles": tiles}]}))
    assert matcher({"publicationId": "X:a", "quadTree": ",12021,"})
    assert matcher({"publicationId": "X:a", "quadTree": "junk,12021junk"})
    assert not matcher({"publicationId": "X:a", "quadTree": "1202,"})
    assert not matcher({"publicationId": "X:a", "quadTree": ",120,"})
    assert not matcher({"publicationId": "X:a", "quadTree": b",1202,"})
