"""deploy/monitoring/ against a real Prometheus (Debian's, installed by scripts/setup.sh) scraping a
live federation: node A runs two broker processes (admin port P and P + 1) and the IF2 bridge to
the tests' private RabbitMQ, node B is its neighbour; A's actor publishes, B's actor subscribes
through a federation link.

Prometheus runs the shipped prometheus.yml (only its intervals shortened to 1 s) with the shipped
rules, the targets written by ``interchange monitoring-targets``'s function: every rule must
evaluate without error, and every query of every dashboard panel must return data from the live
nodes through Prometheus' HTTP API. The federation view of the node running the bridge shows it.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from test_monitoring_rules import DASHBOARD, MONITORING, dashboard_queries

from certs import TestPki
from interchange.app.config import AdminConfig, NodeConfig
from interchange.app.node_metrics import scrape_targets
from interchange.ground.ports import free_port, reserve
from interchange.testing.if2_harness import CROADS_ACTOR, IF2_NEIGHBOUR, IF2_NODE, bridge_node_config
from interchange.testing.ii_harness import wait_for
from interchange.testing.monitoring_harness import Pair, federate, start_pair
from interchange.testing.rabbitmq import RabbitMQ

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
WAIT_DATA_S = 90.0  # rate() over 1 m and the 5 m p99 need a few scrapes; the machine may be loaded


def two_free_ports() -> int:
    """P with P and P + 1 free (the admin ports of broker processes 0 and 1)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        if reserve(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


class Prometheus:
    """``prometheus`` on a loopback port with a copy of deploy/monitoring as its configuration."""

    def __init__(self, workdir: Path, targets: list[dict[str, Any]]) -> None:
        self.config_dir = workdir / "monitoring"
        shutil.copytree(MONITORING, self.config_dir)
        config = yaml.safe_load((self.config_dir / "prometheus.yml").read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        for job in config["scrape_configs"]:
            for sd in job.get("file_sd_configs", []):
                sd["refresh_interval"] = "1s"
        (self.config_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        (self.config_dir / "targets" / "nodes" / "test.yml").write_text(json.dumps(targets))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "prometheus.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.config_dir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    async def get(self, path: str, **params: str) -> Any:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(self.url + path, params=params) as response:
                body = await response.json()
                assert body["status"] == "success", body
                return body["data"]

    async def ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
                async with session.get(self.url + "/-/ready") as response:
                    return response.status == 200
        except aiohttp.ClientError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture
def prometheus_binary() -> Iterator[str]:
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is not installed: run scripts/setup.sh (it installs Debian's prometheus)")
    yield PROMETHEUS


@pytest.fixture
async def pair(if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path) -> AsyncIterator[Pair]:
    admin_a = two_free_ports()

    def node_a(config: NodeConfig) -> NodeConfig:
        bridged = bridge_node_config(if2_pki, rabbitmq_if2, tmp_path / IF2_NODE, ii_port=config.ii.port if config.ii else 0)
        return bridged.model_copy(update={"admin": AdminConfig(host="127.0.0.1", port=admin_a),
                                          "broker": bridged.broker.model_copy(update={"processes": 2})})

    def node_b(config: NodeConfig) -> NodeConfig:
        return config.model_copy(update={"admin": AdminConfig(host="127.0.0.1", port=0)})
    made = await start_pair(if2_pki, tmp_path, IF2_NODE, IF2_NEIGHBOUR, CROADS_ACTOR, adapt_a=node_a, adapt_b=node_b)
    try:
        yield made
    finally:
        await made.close()


async def test_prometheus_scrapes_evaluates_and_answers_every_panel(prometheus_binary: str, pair: Pair,
                                                                   tmp_path: Path) -> None:
    await federate(pair)
    assert pair.a.if2 is not None
    await wait_for(lambda: pair.a.if2.rabbitmq_connected and pair.a.if2.bi_connected, "the IF2 bridge's links")
    assert pair.a.config.admin.port is not None and pair.b.admin_port is not None
    targets = (scrape_targets(IF2_NODE, "127.0.0.1", pair.a.config.admin.port, 2)
               + scrape_targets(IF2_NEIGHBOUR, "127.0.0.1", pair.b.admin_port, 1))
    prometheus = Prometheus(tmp_path, targets)
    try:
        await wait_for(prometheus.ready, "Prometheus ready", timeout=60)

        async def all_up() -> bool:
            active = (await prometheus.get("/api/v1/targets"))["activeTargets"]
            return len(active) == 3 and all(t["health"] == "up" for t in active)
        await wait_for(all_up, "the three broker processes scraped", timeout=60)
        up = await prometheus.get("/api/v1/query", query='up{job="interchange"}')
        assert sorted((r["metric"]["node"], r["metric"]["process"]) for r in up["result"]) == [
            (IF2_NODE, "0"), (IF2_NODE, "1"), (IF2_NEIGHBOUR, "0")]

        queries = dashboard_queries(json.loads(DASHBOARD.read_text()))

        async def empty_panels() -> list[str]:
            empty = []
            for title, expr in queries:
                if not (await prometheus.get("/api/v1/query", query=expr))["result"]:
                    empty.append(f"{title}: {expr}")
            return empty
        last: list[str] = []

        async def every_panel_answers() -> bool:
            nonlocal last
            last = await empty_panels()
            return not last
        try:
            await wait_for(every_panel_answers, "data for every dashboard query", timeout=WAIT_DATA_S)
        except AssertionError:
            raise AssertionError(f"queries without data: {last}") from None

        groups = (await prometheus.get("/api/v1/rules"))["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        shipped = [rule for name in ("recording.yml", "alerts.yml")
                   for group in yaml.safe_load((MONITORING / "rules" / name).read_text())["groups"]
                   for rule in group["rules"]]
        assert len(rules) == len(shipped)
        assert [r["name"] for r in rules if r["health"] != "ok"] == [], rules

        # what the node exports reaches Prometheus as the rules expect it
        neighbours = await prometheus.get("/api/v1/query", query="interchange_ii_neighbour_reachable")
        assert {(r["metric"]["node"], r["metric"]["neighbour"], r["value"][1]) for r in neighbours["result"]} == {
            (IF2_NODE, IF2_NEIGHBOUR, "1"), (IF2_NEIGHBOUR, IF2_NODE, "1")}
        bridges = await prometheus.get("/api/v1/query", query="node_bridge_link:interchange_bridge_link_up:min")
        assert {(r["metric"]["bridge"], r["metric"]["link"], r["value"][1]) for r in bridges["result"]} == {
            ("if2", "rabbitmq", "1"), ("if2", "bi", "1")}
        imported = await prometheus.get("/api/v1/query", query='interchange_messages_received_by_type_total'
                                                                '{origin="federation"}')
        assert {(r["metric"]["node"], r["metric"]["message_type"], r["metric"]["peer"])
                for r in imported["result"]} == {(IF2_NEIGHBOUR, "DENM", IF2_NODE)}
    finally:
        await asyncio.to_thread(prometheus.stop)

    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{pair.a.admin_port}/federation") as response:
            page = await response.text()
    assert "<td>if2</td><td>rabbitmq</td><td class=\"ok\">connected</td>" in page
