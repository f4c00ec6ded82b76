"""II stall: an actor's POST of 4,000 capabilities on a node holding hundreds of
deliveries and subscriptions must not stall the event loop the broker shares, and SIGTERM stops
the node within seconds whatever the II is doing. Real node process, real HTTPS."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from certs import TestPki
from ii_api.peers.discovery import Neighbour
from interchange.testing.harness import A, B
from interchange.testing.paths import REPO_ROOT
from interchange.testing.ii_harness import DOMAIN, Https, denm_capability, node_config, seed_neighbours, start

CAPABILITIES = 4000
PEERS = 300  #: deliveries, and subscriptions of neighbour B, already on the node
STOP_S = 5.0  #: SIGTERM to exit, at most


def _bulk(count: int) -> dict[str, Any]:
    return {"version": "1.0", "name": "actor-a", "capabilities": [
        denm_capability("NO00001", f"bulk-{i}", tiles=[f"1202{i % 4}{i % 3}"]) for i in range(count)]}


async def _populate(actor: Https, b: Https) -> None:
    """A few capabilities, PEERS deliveries of the actor and PEERS subscriptions of neighbour B."""
    seed = [denm_capability("NO00001", f"seed-{i}", tiles=[f"12020{i % 4}"]) for i in range(20)]
    assert (await actor.post("/actor-a/capabilities", {"capabilities": seed}))[0] == 200
    selectors = [{"selector": f"messageType = 'DENM' AND quadTree LIKE '%,12020{i % 4}%'"} for i in range(PEERS)]
    assert (await actor.post("/actor-a/deliveries", {"deliveries": selectors}))[0] == 200
    assert (await b.post("/subscriptions", {"version": "1.2", "name": B, "subscriptions": selectors}))[0] == 202


async def test_bulk_capabilities_keep_the_loop_responsive(pki: TestPki, tmp_path: Path) -> None:
    """While 2,000 capabilities are processed (half the probe's: this node shares its loop with the
    test's client, so it is kept short), the loop answers timers within a fraction of a second;
    the POST ends with every capability registered and the deliveries covering the new ones rebuilt."""
    seed_neighbours(tmp_path / "a", [Neighbour(B, "127.0.0.1", 9, DOMAIN)])
    node = await start(node_config(pki, A, tmp_path / "a"))
    # the POST itself may take long on a loaded machine (it shares the loop with this test): what
    # is bounded is the loop's longest pause meanwhile
    actor = Https(pki, "actor-a", node, timeout_s=120)
    b, other = Https(pki, B, node), Https(pki, "actor-x", node)
    try:
        await _populate(actor, b)
        lags: list[float] = []
        post = asyncio.create_task(actor.post("/actor-a/capabilities", _bulk(CAPABILITIES // 2)))
        while not post.done():
            began = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - began - 0.01)
        status, body = post.result()
        assert status == 200 and len(body["capabilities"]) == CAPABILITIES // 2
        assert max(lags) < 2.0, f"the event loop stalled {max(lags):.2f} s"  # it stalled for > 15 s
        # the deliveries covering tile 120200 now cover the bulk capabilities of that tile too
        deliveries = (await actor.get("/actor-a/deliveries"))[1]["deliveries"]
        target = node.addresses.target(deliveries[0]["endpoints"][0]["target"])
        assert target is not None and target.coverage is not None and "NO00001:bulk-0" in target.coverage.publication_ids()
        assert (await other.get("/actor-x/capabilities"))[0] == 200
    finally:
        for client in (actor, b, other):
            await client.close()
        await node.close()


async def test_sigterm_stops_the_node_during_a_bulk_post(pki: TestPki, tmp_path: Path) -> None:
    """SIGTERM while the II works through 4,000 capabilities: the node process exits within
    STOP_S seconds (it needed SIGKILL before)."""
    workdir = tmp_path / "a"
    seed_neighbours(workdir, [Neighbour(B, "127.0.0.1", 9, DOMAIN)])
    config_path = tmp_path / "node.json"
    config_path.write_text(node_config(pki, A, workdir).model_dump_json(), encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "interchange", "broker", "--config", str(config_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=REPO_ROOT)
    try:
        assert process.stdout is not None
        line = await asyncio.to_thread(process.stdout.readline)
        assert "II (HTTPS) port" in line, line
        ii_port = int(line.rsplit("II (HTTPS) port ", 1)[1])

        class Remote:  # what Https needs of a node
            config = node_config(pki, A, workdir)
            ii = type("II", (), {"base": ""})()

        Remote.ii_port = ii_port  # type: ignore[attr-defined]
        actor, b = Https(pki, "actor-a", Remote()), Https(pki, B, Remote())  # type: ignore[arg-type]
        try:
            await _populate(actor, b)
            post = asyncio.create_task(actor.post("/actor-a/capabilities", _bulk(CAPABILITIES)))
            await asyncio.sleep(1.0)
            assert not post.done(), "the POST ended before SIGTERM: the test proves nothing"
            process.send_signal(signal.SIGTERM)
            began = time.monotonic()
            code = await asyncio.to_thread(process.wait, STOP_S * 3)
            took = time.monotonic() - began
            assert took < STOP_S, f"the node took {took:.1f} s to stop"
            assert code == 0
            post.cancel()
            await asyncio.gather(post, return_exceptions=True)
        finally:
            await actor.close()
            await b.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
