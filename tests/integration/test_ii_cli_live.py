"""`interchange discover` against a real dnsmasq and `interchange subscriptions` against a running node."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from certs import TestPki
from ii_api.node.cli import SubscriptionsReport
from ii_api.peers.discovery import Neighbour
from ii_api.storage.store import DB_FILENAME, Store
from interchange.app.cli import main
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv
from interchange.testing.ii_harness import (
    DOMAIN,
    A,
    B,
    Https,
    denm_capability,
    node_config,
    seed_neighbours,
    start,
    wait_for,
)

RECORDS = DnsRecords(
    srv=[Srv("one.test", "ixn-a.one.test", 8443, priority=5, weight=7), Srv("one.test", "me.one.test", 443),
         Srv("two.test", "ixn-b.two.test", 443)],
    hosts={"ixn-a.one.test": "127.0.0.1", "me.one.test": "127.0.0.2", "ixn-b.two.test": "127.0.0.3"},
    zones=["empty.test"],
)
DENM = "messageType = 'DENM'"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _outgoing_failed(data_dir: Path) -> bool:
    with Store.open(data_dir, read_only=True) as store:
        return any(r.error for r in store.outgoing.list())


def test_discover_stores_and_prints_then_neighbours_lists(dnsmasq: DnsmasqServer, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    dnsmasq.start(RECORDS)
    data = tmp_path / "var"
    status = main(["discover", "--dns", f"127.0.0.1:{dnsmasq.port}", "--domain", "one.test", "--domain", "two.test",
                   "--name", "me.one.test", "--data-dir", str(data)])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "HOST", "PORT", "DOMAIN", "PRIORITY", "WEIGHT"]
    assert [line.split() for line in lines[1:]] == [["ixn-a.one.test", "127.0.0.1", "8443", "one.test", "5", "7"],
                                                   ["ixn-b.two.test", "127.0.0.3", "443", "two.test", "10", "10"]]
    assert err == ""

    assert main(["neighbours", "--data-dir", str(data)]) == 0
    out, _ = capsys.readouterr()
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "HOST", "PORT", "DOMAIN", "LAST", "SEEN"]
    assert [r[:4] for r in rows[1:]] == [["ixn-a.one.test", "127.0.0.1", "8443", "one.test"],
                                        ["ixn-b.two.test", "127.0.0.3", "443", "two.test"]]
    assert all(re.fullmatch(ISO, r[4]) for r in rows[1:])


def test_discover_reports_failing_domains_and_keeps_the_rest(dnsmasq: DnsmasqServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    dnsmasq.start(RECORDS)
    status = main(["discover", "--dns", f"127.0.0.1:{dnsmasq.port}", "--domain", "empty.test",
                   "--domain", "two.test", "--data-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 1
    assert "ixn-b.two.test" in out
    assert err.strip() == "interchange discover: empty.test: SRV _ixc._tcp.empty.test: NXDOMAIN"
    with Store.open(tmp_path, create=False) as store:
        assert [n.name for n in store.neighbours.list()] == ["ixn-b.two.test"]


async def test_subscriptions_lists_a_running_nodes_ii(pki: TestPki, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    workdir = tmp_path / "a"
    seed_neighbours(workdir, [Neighbour(B, "127.0.0.1", 9, DOMAIN)])  # nobody listens there: requests fail
    node = await start(node_config(pki, A, workdir))
    actor, b = Https(pki, "actor-a", node), Https(pki, B, node)
    config = tmp_path / "node.toml"
    config.write_text(f'name = "{A}"\ndata_dir = "a"\n')  # relative to the config file
    try:
        await actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
        _, deliveries = await actor.post("/actor-a/deliveries", {"deliveries": [{"selector": DENM}]})
        _, incoming = await b.post("/subscriptions", {"version": "1.2", "name": B, "subscriptions": [
            {"selector": DENM}, {"selector": "messageType ="}]})
        await b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": [
            denm_capability(publisher="SE00001", country="SE")]})
        _, local = await actor.post("/actor-a/subscriptions", {"subscriptions": [{"selector": DENM}]})
        await wait_for(lambda: _outgoing_failed(workdir), "the failed request at B recorded")

        assert await asyncio.to_thread(main, ["subscriptions", "--config", str(config), "--json"]) == 0
        report = SubscriptionsReport.model_validate_json(capsys.readouterr().out)
        created, invalid = incoming["subscriptions"]
        assert (report.name, report.database) == (A, str(workdir / DB_FILENAME))
        assert [(r.neighbour, str(r.id), r.status) for r in report.incoming] == [
            (B, created["id"], "CREATED"), (B, invalid["id"], "NOT_VALID")]
        assert report.incoming[0].source == created["endpoints"][0]["source"]
        assert report.incoming[0].endpoints == created["endpoints"] and report.incoming[0].granted == ["NO00001:denm-1"]
        assert report.incoming[1].errorMessage == invalid["errorMessage"] and report.incoming[1].source is None
        (outgoing,) = report.outgoing
        assert (outgoing.neighbour, outgoing.selector, outgoing.status) == (B, DENM, "NEW") and outgoing.errorMessage
        (mine,) = report.localSubscriptions
        assert (mine.actor, str(mine.id), mine.status, mine.endpoints) == (
            "actor-a", local["subscriptions"][0]["id"], "CREATED", local["subscriptions"][0]["endpoints"])
        (delivery,) = report.deliveries
        assert delivery.target == deliveries["deliveries"][0]["endpoints"][0]["target"]

        assert await asyncio.to_thread(main, ["subscriptions", "--config", str(config)]) == 0
        text = capsys.readouterr().out
        sections = text.split("\n\n")
        assert [s.splitlines()[0] for s in sections] == [
            "Subscriptions of neighbours here (incoming):", "Our subscriptions at neighbours (outgoing):",
            "Local actors' subscriptions:", "Local actors' deliveries:"]
        incoming_rows = sections[0].splitlines()[1:]
        assert incoming_rows[0].split()[:3] == ["NEIGHBOUR", "ID", "STATUS"]
        assert incoming_rows[1].split()[:3] == [B, created["id"], "CREATED"]
        assert f"127.0.0.1:{node.amqps_port}/{created['endpoints'][0]['source']}" in incoming_rows[1]
        assert incoming_rows[2].split()[:3] == [B, invalid["id"], "NOT_VALID"]
        assert sections[1].splitlines()[2].split()[:3] == [B, str(outgoing.id), "NEW"]
    finally:
        await actor.close()
        await b.close()
        await node.close()
