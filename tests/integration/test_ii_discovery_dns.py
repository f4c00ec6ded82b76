"""DNS SRV interchange discovery (IP_073, IP_085-089, IP_125/126) against a real dnsmasq: several domains,
outages, timeouts, periodic rounds."""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from ii_api.peers.discovery import MAX_INTERVAL_S, Discovery, DiscoveryConfig, DiscoveryResult, Neighbour
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv

WAIT_S = 20.0  # bound of every wait for a discovery round


def config_for(server: DnsmasqServer, *domains: str, **extra: object) -> DiscoveryConfig:
    assert server.port is not None
    extra.setdefault("timeout_s", 2.0)
    return DiscoveryConfig(dns_server=server.host, dns_port=server.port, domains=domains,
                           **extra)  # type: ignore[arg-type]


def names(neighbours: object) -> set[str]:
    return {n.name for n in neighbours}  # type: ignore[attr-defined]


NETWORK = DnsRecords(
    srv=[
        Srv("one.test", "ixn-a.one.test", 8443, priority=10, weight=5),
        Srv("one.test", "ixn-b.one.test", 9443, priority=20, weight=1),
        Srv("one.test", "me.one.test", 443),
        Srv("one.test", "noaddr.one.test", 443),  # target without any address record
        Srv("one.test", "v6only.one.test", 443),  # target with AAAA only
        Srv("two.test", "ixn-c.two.test", 443),
    ],
    hosts={"ixn-a.one.test": "127.0.0.1", "ixn-b.one.test": "127.0.0.2", "me.one.test": "127.0.0.9",
           "v6only.one.test": "::1", "ixn-c.two.test": "127.0.0.3"},
    zones=["empty.test"],  # served, but without _ixc._tcp: NXDOMAIN
)


@pytest.fixture
def silent_dns_port() -> Iterator[int]:
    """A UDP port that receives queries and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def test_several_domains_with_partial_failures(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(NETWORK)
    discovery = Discovery(config_for(dnsmasq, "one.test", "empty.test", "two.test", "unserved.test",
                                     own_name="ME.one.test"))
    result = await discovery.run_once()

    assert sorted(result.neighbours, key=lambda n: n.name) == [
        Neighbour("ixn-a.one.test", "127.0.0.1", 8443, "one.test", 10, 5),
        Neighbour("ixn-b.one.test", "127.0.0.2", 9443, "one.test", 20, 1),
        Neighbour("ixn-c.two.test", "127.0.0.3", 443, "two.test", 10, 10),
    ]
    errors = "\n".join(result.errors)
    assert len(result.errors) == 4, errors
    assert "empty.test: SRV _ixc._tcp.empty.test: NXDOMAIN" in errors
    assert "one.test: target noaddr.one.test: no A record (NXDOMAIN)" in errors
    assert "one.test: target v6only.one.test: no A record (no records)" in errors
    assert "unserved.test:" in errors  # dnsmasq refuses names outside its zones
    assert result.unsettled_domains == {"unserved.test"}
    assert "me.one.test" not in names(result.neighbours)
    assert names(discovery.neighbours) == names(result.neighbours)


async def test_is_discovered_follows_the_srv_targets(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(NETWORK)
    discovery = Discovery(config_for(dnsmasq, "one.test", "two.test", own_name="me.one.test"))
    assert not discovery.is_discovered("ixn-a.one.test")  # nothing looked up yet
    await discovery.run_once()
    assert discovery.is_discovered("ixn-a.one.test")
    assert discovery.is_discovered("IXN-C.two.test")
    assert not discovery.is_discovered("noaddr.one.test")  # no A record: not a usable neighbour
    assert not discovery.is_discovered("me.one.test")
    assert not discovery.is_discovered("ixn-a.one.test.evil.test")
    assert not discovery.is_discovered("actor-1")


async def test_neighbours_survive_a_dns_outage_but_not_a_removal(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(NETWORK)
    discovery = Discovery(config_for(dnsmasq, "two.test", timeout_s=0.5))
    await discovery.run_once()
    assert discovery.is_discovered("ixn-c.two.test")

    await asyncio.to_thread(dnsmasq.stop)
    outage = await discovery.run_once()
    assert outage.neighbours == [] and outage.errors and outage.unsettled_domains == {"two.test"}
    assert discovery.is_discovered("ixn-c.two.test")

    await asyncio.to_thread(dnsmasq.start, DnsRecords(zones=["two.test"]))
    removed = await discovery.run_once()
    assert removed.unsettled_domains == frozenset() and "NXDOMAIN" in removed.errors[0]
    assert not discovery.is_discovered("ixn-c.two.test")


async def test_timeouts_are_reported_per_domain(silent_dns_port: int) -> None:
    config = DiscoveryConfig(dns_server="127.0.0.1", dns_port=silent_dns_port, domains=("one.test", "two.test"),
                             timeout_s=0.3)
    result = await Discovery(config).run_once()
    assert result.neighbours == []
    assert sorted(result.errors) == ["one.test: SRV _ixc._tcp.one.test: timed out",
                                     "two.test: SRV _ixc._tcp.two.test: timed out"]
    assert result.unsettled_domains == {"one.test", "two.test"}


async def test_periodic_discovery_sees_records_appear_and_disappear(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(DnsRecords(srv=[Srv("one.test", "ixn-a.one.test", 443)], hosts={"ixn-a.one.test": "127.0.0.1"}))
    results: asyncio.Queue[DiscoveryResult] = asyncio.Queue()
    # rounds during a restart fail (short timeout keeps them brief) and are simply followed by the next
    discovery = Discovery(config_for(dnsmasq, "one.test", timeout_s=0.5), on_result=results.put)

    async def until(predicate: object) -> DiscoveryResult:
        while True:
            result = await results.get()
            if predicate(result):  # type: ignore[operator]
                return result

    task = asyncio.create_task(discovery.run_periodically(interval_s=0.05))
    try:
        first = await asyncio.wait_for(until(lambda r: r.neighbours), WAIT_S)
        assert names(first.neighbours) == {"ixn-a.one.test"}

        await asyncio.to_thread(dnsmasq.reconfigure, DnsRecords(
            srv=[Srv("one.test", "ixn-a.one.test", 443), Srv("one.test", "ixn-new.one.test", 8443)],
            hosts={"ixn-a.one.test": "127.0.0.1", "ixn-new.one.test": "127.0.0.7"}))
        grown = await asyncio.wait_for(until(lambda r: "ixn-new.one.test" in names(r.neighbours)), WAIT_S)
        assert Neighbour("ixn-new.one.test", "127.0.0.7", 8443, "one.test", 10, 10) in grown.neighbours
        assert discovery.is_discovered("ixn-new.one.test")

        await asyncio.to_thread(dnsmasq.reconfigure, DnsRecords(
            srv=[Srv("one.test", "ixn-new.one.test", 8443)], hosts={"ixn-new.one.test": "127.0.0.7"}))
        await asyncio.wait_for(until(lambda r: names(r.neighbours) == {"ixn-new.one.test"}), WAIT_S)
        assert not discovery.is_discovered("ixn-a.one.test")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled()


async def test_trigger_runs_a_round_at_once(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(DnsRecords(zones=["one.test"]))
    results: asyncio.Queue[DiscoveryResult] = asyncio.Queue()
    discovery = Discovery(config_for(dnsmasq, "one.test", interval_s=MAX_INTERVAL_S), on_result=results.put)
    task = asyncio.create_task(discovery.run_periodically())
    try:
        first = await asyncio.wait_for(results.get(), WAIT_S)  # the start-up round
        assert first.neighbours == [] and "NXDOMAIN" in first.errors[0]

        await asyncio.to_thread(dnsmasq.reconfigure, DnsRecords(srv=[Srv("one.test", "ixn-a.one.test", 443)],
                                                                  hosts={"ixn-a.one.test": "127.0.0.1"}))
        discovery.trigger()  # without it the next round would be 12 h away
        second = await asyncio.wait_for(results.get(), WAIT_S)
        assert names(second.neighbours) == {"ixn-a.one.test"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_failing_result_handler_does_not_stop_the_loop(dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(NETWORK)
    calls: asyncio.Queue[int] = asyncio.Queue()

    async def broken(result: DiscoveryResult) -> None:
        await calls.put(len(result.neighbours))
        raise RuntimeError("database gone")

    discovery = Discovery(config_for(dnsmasq, "two.test"), on_result=broken)
    task = asyncio.create_task(discovery.run_periodically(interval_s=0.01))
    try:
        assert [await asyncio.wait_for(calls.get(), WAIT_S) for _ in range(2)] == [1, 1]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
