"""A neighbour silenced by a firewall is detected by the federation link's idle time-out.

Two node processes of the federation harness, each in its own network namespace
(:mod:`interop_kit.federation`); node 2's actor subscribes to node 1's demo data, so node 2 pulls
over a link into node 1's namespace. An nftables rule in node 1's namespace then drops every packet
(no close, no reset: a partition): node 2 must log ``federation_link_down`` (the idle time-out)
within twice its time-out, node 1 must drop node 2's silent connection within twice its own, and
once the rule goes the link is up again. Needs root and nft (CI runs as root; scripts/setup.sh
installs nftables): it fails, saying why, where it cannot run.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interchange.testing.broker_harness import complete_records
from certs.pki import Pki
from interchange.actor import Actor
from interop_kit import federation
from interop_kit.demo_data import actor_settings, demo_traffic
from interop_kit.netns import available

FEDERATION_IDLE_S = 2.0  #: node 2's links ([ii] federation_idle_timeout_s)
BROKER_IDLE_S = 3.0  #: node 1's AMQP connections ([broker.limits] idle_timeout_ms)
CONSUMER = "actor-2"


def _nft() -> str:
    path = shutil.which("nft") or "/usr/sbin/nft"
    if os.geteuid() != 0 or not Path(path).exists() or (why := available()) is not None:
        pytest.fail("the partition test needs root, network namespaces and nft (Debian nftables, scripts/setup.sh): "
                    f"uid {os.geteuid()}, nft {'found' if Path(path).exists() else 'missing'}, namespaces: "
                    f"{why or 'available'}")
    return path


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[federation.FederationState]:
    _nft()
    settings = {"ii": {"federation_idle_timeout_s": FEDERATION_IDLE_S},
                "broker": {"limits": {"idle_timeout_ms": int(BROKER_IDLE_S * 1000)}}}
    state = federation.up(tmp_path / "federation", count=2, isolation="netns", settings=settings)
    try:
        yield state
    finally:
        federation.down(Path(state.directory))


def _records(node: federation.NodeState, event: str, where: Callable[[dict[str, Any]], bool] = lambda r: True,
             ) -> list[dict[str, Any]]:
    return [r for r in complete_records(Path(node.log)) if r["event"] == event and where(r)]


def _wait(what: str, found: Callable[[], list[dict[str, Any]]], timeout: float) -> float:
    """When (monotonic) ``found()`` is no longer empty (fails after ``timeout`` seconds)."""
    started = time.monotonic()
    while not found():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic()


def _silence(state: federation.FederationState, node: federation.NodeState, on: bool) -> None:
    """Drop every packet in and out of ``node``'s namespace (``on``), or remove the rule."""
    assert state.network is not None and node.namespace is not None
    nft = [*state.network.exec_prefix(state.nodes.index(node) + 1), _nft()]
    if on:
        rules = ("add table inet partition\n"
                 "add chain inet partition in { type filter hook input priority -100; policy drop; }\n"
                 "add chain inet partition out { type filter hook output priority -100; policy drop; }\n")
        subprocess.run([*nft, "-f", "-"], input=rules, text=True, check=True, capture_output=True)
    else:
        subprocess.run([*nft, "delete", "table", "inet", "partition"], check=True, capture_output=True)


def _idle(record: dict[str, Any]) -> bool:
    return "idle-timeout" in str(record["details"].get("description"))


async def _subscribe(state: federation.FederationState) -> str:
    node = state.nodes[1]
    Pki(state.pki).issue_client(CONSUMER, ca=federation.INTERMEDIATES[1])
    async with Actor(actor_settings(Path(state.directory), CONSUMER, node.name, node.ii_port, node.address)) as actor:
        subscription = await actor.subscribe(demo_traffic().selector, timeout_s=30)
    return subscription.endpoints[0].source


def test_silenced_neighbour_detected_within_twice_the_idle_timeout(harness: federation.FederationState) -> None:
    first, second = harness.nodes
    asyncio.run(_subscribe(harness))
    _wait("node 2's link to node 1", lambda: _records(second, "federation_link_up"), 30)
    time.sleep(2 * FEDERATION_IDLE_S)  # quiet but alive: the empty frames keep it up
    assert not _records(second, "federation_link_down")
    assert not _records(first, "transport_error", _idle)
    _silence(harness, first, True)
    silenced = time.monotonic()
    try:
        detected = _wait("node 2's link down", lambda: _records(second, "federation_link_down"),
                         2 * FEDERATION_IDLE_S + 3) - silenced
        (down,) = _records(second, "federation_link_down")[:1]
        assert "idle-timeout" in down["details"]["reason"] and down["details"]["neighbour"] == first.name
        assert detected <= 2 * FEDERATION_IDLE_S, detected
        dropped = _wait("node 1 drops the silent connection", lambda: _records(first, "transport_error", _idle),
                        2 * BROKER_IDLE_S + 3) - silenced
        assert dropped <= 2 * BROKER_IDLE_S, dropped
    finally:
        _silence(harness, first, False)
    _wait("node 2's link up again", lambda: _records(second, "federation_link_up")[1:], 60)
    print(f"\nsilenced neighbour: link down after {detected:.2f} s (time-out {FEDERATION_IDLE_S:g} s), "
          f"its silent client dropped after {dropped:.2f} s (time-out {BROKER_IDLE_S:g} s)")
