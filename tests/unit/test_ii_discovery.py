"""DNS SRV interchange discovery (IP_073, IP_085-089, IP_125/126): the pure functions and the configuration
(against a real dnsmasq: tests/integration/test_ii_discovery_dns.py)."""
from __future__ import annotations

from dataclasses import dataclass

import pydantic
import pytest

from ii_api.peers.discovery import (
    MAX_INTERVAL_S,
    Discovery,
    DiscoveryConfig,
    DiscoveryResult,
    Neighbour,
    SrvTarget,
    build_neighbours,
    departure_delay_s,
    is_discovered,
    merge_neighbours,
    neighbour_changes,
    parse_srv,
    srv_query_name,
)


# --------------------------------------------------------------------------- pure functions

@dataclass
class FakeSrv:
    target: str
    port: int
    priority: int
    weight: int


def test_srv_query_name_is_the_ixc_service() -> None:
    assert srv_query_name("Example.TEST.") == "_ixc._tcp.example.test."


def test_parse_srv_normalises_orders_and_prefers_the_best_record_per_target() -> None:
    parsed = parse_srv([
        FakeSrv("B.Example.Test.", 443, 20, 0),
        FakeSrv("a.example.test.", 8443, 10, 5),
        FakeSrv("b.example.test", 9443, 10, 1),  # same target, better priority: kept
        FakeSrv(".", 0, 0, 0),  # RFC 2782: service not offered
    ])
    assert parsed == [SrvTarget("a.example.test", 8443, 10, 5), SrvTarget("b.example.test", 9443, 10, 1)]


def test_build_neighbours_leaves_out_targets_without_address() -> None:
    targets = [SrvTarget("a.x.test", 1, 0, 0), SrvTarget("b.x.test", 2, 0, 0)]
    built = build_neighbours("x.test", targets, {"a.x.test": "10.0.0.1", "b.x.test": None})
    assert built == [Neighbour("a.x.test", "10.0.0.1", 1, "x.test", 0, 0)]


def test_merge_keeps_neighbours_only_where_dns_gave_no_verdict() -> None:
    a = Neighbour("a.one.test", "10.0.0.1", 443, "one.test")
    b = Neighbour("b.two.test", "10.0.0.2", 443, "two.test")
    c = Neighbour("c.one.test", "10.0.0.3", 443, "one.test")
    gone = DiscoveryResult(neighbours=[a])
    assert merge_neighbours([a, b, c], gone) == (a,)
    outage = DiscoveryResult(neighbours=[a], unsettled_domains=frozenset({"two.test"}),
                             unsettled_names=frozenset({"c.one.test"}))
    assert set(merge_neighbours([a, b, c], outage)) == {a, b, c}


def test_neighbour_changes_name_the_gone_and_the_new_or_moved() -> None:
    a = Neighbour("a.one.test", "10.0.0.1", 443, "one.test")
    b = Neighbour("b.two.test", "10.0.0.2", 443, "two.test")
    c = Neighbour("c.one.test", "10.0.0.3", 443, "one.test")
    moved = Neighbour("a.one.test", "10.0.0.9", 443, "one.test", priority=5)
    assert neighbour_changes({"a.one.test": a, "b.two.test": b}, {"a.one.test": moved, "c.one.test": c}) == (
        frozenset({"b.two.test"}), frozenset({"a.one.test", "c.one.test"}))
    reweighted = Neighbour("a.one.test", "10.0.0.1", 443, "one.test", weight=9)  # same address: no change
    assert neighbour_changes({"a.one.test": a}, {"a.one.test": reweighted}) == (frozenset(), frozenset())


def test_departure_delay_counts_the_grace_period_from_the_departure() -> None:
    assert departure_delay_s(1_000_000, 60.0, 1_000_000) == 60.0
    assert departure_delay_s(1_000_000, 60.0, 1_045_500) == 14.5  # time spent while the node was down counts
    assert departure_delay_s(1_000_000, 60.0, 2_000_000) == 0.0
    assert departure_delay_s(1_000_000, 0.0, 1_000_000) == 0.0


def test_is_discovered_compares_names_case_insensitively() -> None:
    known = [Neighbour("ixn-a.one.test", "10.0.0.1", 443, "one.test")]
    assert is_discovered("IXN-A.one.test", known)
    assert is_discovered("ixn-a.one.test.", known)
    assert not is_discovered("ixn-b.one.test", known)
    assert not is_discovered("", known)
    assert not is_discovered("bad..name", known)


def test_config_enforces_the_12_hour_rule_and_valid_names() -> None:
    ok = DiscoveryConfig(dns_server="127.0.0.1", domains=("One.Test.", "one.test"), own_name="ME.one.test.")
    assert ok.domains == ("one.test",) and ok.own_name == "me.one.test" and ok.interval_s <= MAX_INTERVAL_S
    with pytest.raises(pydantic.ValidationError):
        DiscoveryConfig(dns_server="127.0.0.1", domains=("one.test",), interval_s=MAX_INTERVAL_S + 1)
    with pytest.raises(pydantic.ValidationError):
        DiscoveryConfig(dns_server="dns.example", domains=("one.test",))
    with pytest.raises(pydantic.ValidationError):
        DiscoveryConfig(dns_server="127.0.0.1", domains=())
    with pytest.raises(pydantic.ValidationError):
        DiscoveryConfig(dns_server="127.0.0.1", domains=("bad..domain",))


async def test_run_periodically_refuses_intervals_over_12_hours() -> None:
    discovery = Discovery(DiscoveryConfig(dns_server="127.0.0.1", domains=("one.test",)))
    with pytest.raises(ValueError, match="IP_089"):
        await discovery.run_periodically(interval_s=MAX_INTERVAL_S * 2)
