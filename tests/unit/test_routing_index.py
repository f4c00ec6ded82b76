"""The routing index only rules sources out: index + selector == selector alone (brute force)."""
from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import jms_selectors
from interchange.broker.addresses import SourceSpec
from interchange.broker.routing_index import RoutingIndex, index_key
from interchange.broker.source import Source

TILES = ["0", "1", "12", "120", "1202", "12020", "031", "0313", "2", "3", "33"]
TYPES = ["DENM", "IVIM", "CAM"]


@pytest.mark.parametrize("text, key", [
    ("messageType = 'DENM'", ("type", ("DENM",))),
    ("'DENM' = messageType AND causeCode = 1", ("type", ("DENM",))),
    ("messageType IN ('IVIM')", ("type", ("IVIM",))),
    ("quadTree LIKE '%,1202%'", ("tile", ("1202",))),
    ("messageType = 'DENM' AND (quadTree LIKE '%,1202%' OR quadTree LIKE '%,0313%')", ("tile", ("0313", "1202"))),
    ("quadTree LIKE '%,1202%' OR causeCode = 1", ("always", ())),
    ("quadTree NOT LIKE '%,1202%'", ("always", ())),
    ("quadTree LIKE '%1202%'", ("always", ())),
    ("quadTree LIKE '%,12_2%'", ("always", ())),
    ("messageType = 'DENM' OR messageType = 'IVIM'", ("always", ())),
    ("messageType <> 'DENM'", ("always", ())),
    ("causeCode > 3", ("always", ())),
])
def test_index_keys(text: str, key: tuple) -> None:
    assert index_key(jms_selectors.compile(text).ast) == key


def _source(i: int, text: str | None) -> Source:
    return _compiled_source(i, text)[0]


def _compiled_source(i: int, text: str | None) -> tuple[Source, Any]:
    """The source and its selector's syntax tree (None without one), the selector compiled once."""
    spec = SourceSpec(address=f"s{i}", selector=text)
    compiled = jms_selectors.compile(text) if text else None
    return Source(spec, compiled.matches if compiled else None), compiled.ast if compiled else None


conjunct = st.one_of(
    st.sampled_from(TYPES).map(lambda t: f"messageType = '{t}'"),
    st.lists(st.sampled_from(TILES), min_size=1, max_size=3).map(
        lambda ts: "(" + " OR ".join(f"quadTree LIKE '%,{t}%'" for t in ts) + ")"),
    st.integers(0, 3).map(lambda n: f"causeCode = {n}"),
    st.sampled_from(TILES).map(lambda t: f"quadTree NOT LIKE '%,{t}%'"),
)
selector_text = st.one_of(st.none(), st.lists(conjunct, min_size=1, max_size=3).map(" AND ".join))
message = st.fixed_dictionaries({
    "messageType": st.sampled_from(TYPES),
    "quadTree": st.lists(st.text("0123", min_size=1, max_size=6), min_size=1, max_size=4).map(
        lambda ts: "," + ",".join(ts) + ","),
    "causeCode": st.integers(0, 3),
})


@settings(max_examples=300, deadline=None)
@given(selectors=st.lists(selector_text, max_size=12), messages=st.lists(message, min_size=1, max_size=5))
def test_index_never_loses_a_match(selectors: list[str | None], messages: list[dict]) -> None:
    compiled = [_compiled_source(i, text) for i, text in enumerate(selectors)]
    sources = [source for source, _ in compiled]
    index = RoutingIndex()
    for source, tree in compiled:
        index.add(source, tree)
    for props in messages:
        expected = {s.spec.address for s in sources if s.node_selector is None or s.node_selector(props)}
        candidates = list(index.candidates(props))
        assert len(candidates) == len({id(c) for c in candidates})  # each source at most once
        found = {s.spec.address for s in candidates if s.residual is None or s.residual(props)}
        assert found == expected


def test_index_rules_out_most_sources() -> None:
    index = RoutingIndex()
    sources = []
    for i in range(1000):
        tile = f"{i % 4}{(i // 4) % 4}{(i // 16) % 4}{(i // 64) % 4}"
        source, tree = _compiled_source(i, f"messageType = 'DENM' AND quadTree LIKE '%,{tile}%'")
        sources.append(source)
        index.add(source, tree)
    candidates = list(index.candidates({"messageType": "DENM", "quadTree": ",120202130121133020,"}))
    assert sorted(s.spec.address for s in candidates) == ["s137", "s393", "s649", "s905"]  # tile 1202 only
    for source in sources[:500]:
        index.remove(source)
    assert len(index) == 500


@pytest.mark.parametrize("text, residual_true_for, residual_false_for", [
    ("quadTree LIKE '%,12%' OR quadTree LIKE '%,03%'", None, None),
    ("messageType = 'DENM' AND quadTree LIKE '%,12%'", {"messageType": "DENM"}, {"messageType": "IVIM"}),
    ("messageType = 'DENM' AND causeCode = 1", {"causeCode": 1}, {"causeCode": 2}),
    ("causeCode = 1 OR causeCode = 2", {"causeCode": 2}, {"causeCode": 3}),
])
def test_residual_is_what_the_key_does_not_cover(text: str, residual_true_for, residual_false_for) -> None:
    source = _source(1, text)
    RoutingIndex().add(source, jms_selectors.compile(text).ast)
    if residual_true_for is None:
        assert source.residual is None
    else:
        assert source.residual(residual_true_for) and not source.residual(residual_false_for)


def test_remove_restores_always_and_type_buckets() -> None:
    index = RoutingIndex()
    a, b = _source(1, None), _source(2, "messageType = 'IVIM'")
    index.add(a, None)
    index.add(b, jms_selectors.compile("messageType = 'IVIM'").ast)
    assert {s.spec.address for s in index.candidates({"messageType": "IVIM"})} == {"s1", "s2"}
    index.remove(a)
    index.remove(b)
    assert list(index.candidates({"messageType": "IVIM"})) == []
