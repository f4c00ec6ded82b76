"""The IF2 bridge against a real RabbitMQ (Debian's rabbitmq-server, TLS 1.3, SASL EXTERNAL) and a
real node (BI over AMQPS, II over HTTPS, the test PKI): both directions, the republishing rules,
capabilities, refusals, and recovery from connection losses and a RabbitMQ restart."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from proton import Message

from certs import TestPki
from if2_backoffice import BackOffice, ConnectBackOffice, quadtree_path
from ii_api.peers.discovery import Neighbour
from interchange.app.config import AdminConfig
from interchange.app.node import RunningNode
from interchange.ground.ports import free_port
from interchange.testing.if2_harness import (
    BACKOFFICE,
    BRIDGE,
    CROADS_ACTOR,
    DENM_KEY,
    HAZELDONK,
    HAZELDONK_POINT,
    IF2_NEIGHBOUR,
    IF2_NODE,
    SPATEM_CAPABILITY,
    WAIT_S,
    bridge_node_config,
    croads_consumer,
    croads_publisher,
    dotted,
    spatem,
)
from interchange.testing.ii_harness import (DOMAIN, Https, logged, node_config, publish, seed_neighbours, start, wait_for,
                                            wait_logged)
from interchange.testing.rabbitmq import RabbitMQ



@pytest.fixture
async def node(if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path) -> AsyncIterator[RunningNode]:
    running = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, republish_interval_s=1.0))
    try:
        await wait_for(lambda: running.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        yield running
    finally:
        await running.close()


async def test_if2_publisher_to_croads_consumer(if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    """An IF2 DENM appears at a C-Roads consumer with Table 1/2 properties and the body byte for byte;
    the bridge registered its capability (so neighbours discover it)."""
    await if2_denm_to_croads(if2_pki, node, backoffice)


async def test_if2_publisher_to_croads_consumer_over_amqps(
        if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path, backoffice: BackOffice) -> None:
    """bi_door = "amqps": the same message, properties and capability, published over the bridge's
    AMQPS sender (not the broker's in-process door, the default)."""
    node = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, bi_door="amqps"))
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await if2_denm_to_croads(if2_pki, node, backoffice)
        sender = node.if2.bi._sender
        assert sender is not None and sender.sent == 1 and node.if2.bi._publisher is None
    finally:
        await node.close()


async def test_if2_publisher_to_croads_consumer_through_the_door_by_default(
        if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    """The default: through the broker's in-process door, nothing over the AMQPS sender."""
    await if2_denm_to_croads(if2_pki, node, backoffice)
    publisher = node.if2.bi._publisher
    assert publisher is not None and (publisher.sent, publisher.accepted) == (1, 1)
    assert node.if2.bi._sender is None or node.if2.bi._sender.sent == 0


async def if2_denm_to_croads(if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    consumer = await croads_consumer(if2_pki, node, "messageType = 'DENM'")
    try:
        body = bytes(range(256)) + b"\x00denm"
        await backoffice.send("DENM", DENM_KEY, body, lat=HAZELDONK_POINT[0], lon=HAZELDONK_POINT[1],
                                 ttl_ms=20_000)
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None, "nothing arrived from IF2"
        assert bytes(got.body) == body
        properties = dict(got.properties)
        area = properties.pop("quadTree")
        assert properties == {
            "messageType": "DENM", "protocolVersion": "DENM:1.2.1", "publisherId": "NL00001",
            "publicationId": "NL00001:if2-DENM-1_2_1", "originatingCountry": "NL",
            "causeCode": 5, "subCauseCode": 0, "latitude": HAZELDONK_POINT[0], "longitude": HAZELDONK_POINT[1]}
        assert area.startswith(f",{HAZELDONK},")  # the reference tile, then the area's (IP_112, the next test)
        assert 0 < got.ttl <= 20.0
    finally:
        await asyncio.to_thread(consumer.close)
    https = Https(if2_pki, BRIDGE, node)  # what the bridge registered through the local actor API
    try:
        status, answer = await https.get(f"/{BRIDGE}/capabilities")
    finally:
        await https.close()
    assert status == 200
    assert [c["definition"]["application"] for c in answer["capabilities"]] == [{
        "messageType": "DENM", "publisherId": "NL00001", "publicationId": "NL00001:if2-DENM-1_2_1",
        "originatingCountry": "NL", "protocolVersion": "DENM:1.2.1", "quadTree": ["1202"], "causeCode": None}]
    assert node.if2.counts["imported"] == 1


async def test_consumers_of_the_area_around_an_if2_message_get_it(
        if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    """IP_112: a DENM from IF2 carries tiles of zoom 13 covering the configured area (1 km by default)
    around its lat/lon, so a consumer subscribed to a neighbouring zoom-13 tile gets it; one 5 km away
    does not. The tiles are the back-office's (its own quadtree, from IF2 7.3.4), not the bridge's."""
    lat, lon = HAZELDONK_POINT
    own = quadtree_path(lat, lon, 13)
    # 900 m north, east, south or west: the first that lies in another zoom-13 tile
    near = next(tile for dlat, dlon in ((0.0081, 0.0), (0.0, 0.013), (-0.0081, 0.0), (0.0, -0.013))
                if (tile := quadtree_path(lat + dlat, lon + dlon, 13)) != own)
    far = quadtree_path(lat + 0.045, lon, 13)  # 5 km north
    neighbour = await croads_consumer(if2_pki, node, f"messageType = 'DENM' AND quadTree LIKE '%,{near}%'")
    distant = await croads_consumer(if2_pki, node, f"messageType = 'DENM' AND quadTree LIKE '%,{far}%'")
    try:
        await backoffice.send("DENM", DENM_KEY, b"area", lat=lat, lon=lon, ttl_ms=20_000)
        got = await asyncio.to_thread(neighbour.receive)
        assert got is not None and bytes(got.body) == b"area", f"nothing for the neighbouring tile {near}"
        assert f",{near}," in got.properties["quadTree"]
        assert await asyncio.to_thread(distant.receive, 2.0) is None
    finally:
        await asyncio.to_thread(neighbour.close)
        await asyncio.to_thread(distant.close)


async def test_if2_messages_that_cannot_be_mapped_are_refused_and_logged(
        if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    consumer = await croads_consumer(if2_pki, node, "messageType IN ('DENM', 'IVIM')")
    try:
        bad = [("DENM", f"DENM.1_2_1.NOPE.5.{dotted(HAZELDONK)}", {}),  # provider not in the table
               ("DENM", f"DENM.1_2_1.RWS.x.{dotted(HAZELDONK)}", {}),  # not a cause code
               ("IVI", f"IVI.1_2_1.RWS.0.{dotted(HAZELDONK)}", {"lat": 42.0, "lon": -8.6}),  # lat/lon elsewhere
               ("IVI", f"DENM.1_2_1.RWS.5.{dotted(HAZELDONK)}", {}),  # a DENM key on the IVI exchange
               ("DENM", f"DENM.1_2_1.RWS.5.{dotted('031332213323322232')}", {})]  # outside RWS's coverage
        for exchange, key, position in bad:
            await backoffice.send(exchange, key, b"bad", **position)
        await backoffice.send("IVI", f"IVI.1_2_1.BASt.speed.{dotted(HAZELDONK)}", b"good")
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"good"
        assert got.properties["custom-intercor-if2-subtype"] == "speed" and got.properties["messageType"] == "IVIM"
    finally:
        await asyncio.to_thread(consumer.close)
    await wait_for(lambda: node.if2.counts["import_refused"] == len(bad), "the refusals to be counted")
    errors = " ".join(str(details["error"]) for details in await wait_logged(node, "if2_import_refused", len(bad)))
    assert len(logged(node, "if2_import_refused")) == len(bad)
    assert "'NOPE' is not in the provider table" in errors and "outside provider 'RWS'" in errors


async def test_croads_publisher_to_if2_consumer_with_republishing(
        if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    """A SPATEM published at the BI appears on IF2's SPAT exchange with its routing key, Table 4
    headers and body; the same bytes again are not published, changed bytes are; while valid it is
    published again at the configured interval (1 s here; at most an hour) with the validity left."""
    await backoffice.bind("SPAT", "SPAT.*.RWS.#")
    target = await croads_publisher(if2_pki, node, SPATEM_CAPABILITY)
    outcomes = await asyncio.to_thread(publish, if2_pki, CROADS_ACTOR, node.amqps_port, IF2_NODE, target,
                                       [spatem(b"\x01spat", ttl_s=30.0)])
    assert outcomes == ["accepted"]
    got = await backoffice.next()
    assert got.exchange == "SPAT" and got.routing_key == f"SPAT.2_1_1.RWS.0.{dotted(HAZELDONK)}"
    assert got.body == b"\x01spat" and got.expiration is not None
    assert 29_000 <= int(got.expiration) <= 30_000
    assert float(got.headers["lat"]) == HAZELDONK_POINT[0] and float(got.headers["lon"]) == HAZELDONK_POINT[1]
    assert got.app_id == f"{IF2_NODE}/if2"
    # the same bytes again: not republished at once; a changed body: at once
    await asyncio.to_thread(publish, if2_pki, CROADS_ACTOR, node.amqps_port, IF2_NODE, target,
                            [spatem(b"\x01spat"), spatem(b"\x02spat")])
    changed = await backoffice.next()
    assert changed.body == b"\x02spat"
    assert node.if2.policy.suppressed == 1
    # rule 3 (interval 1 s in this test): published again without a new copy from C-Roads
    again = await backoffice.next(5.0)
    assert again.body == b"\x02spat" and int(again.expiration) < 30_000
    # counted once RabbitMQ's confirm reaches the bridge, which may be after the back-office got the copy
    await wait_for(lambda: node.if2.counts["republished"] >= 1, "the republished copy to be counted")


async def test_nothing_loops_between_if2_and_croads(if2_pki: TestPki, backoffice: BackOffice,
                                                    rabbitmq_if2: RabbitMQ, tmp_path: Path) -> None:
    """A bridge importing and exporting DENM: what came from IF2 is not exported back (the subscription
    leaves out if2- publications), what it exported is not imported back (its app_id is skipped)."""
    node = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, imports={"DENM": ["#"]},
                                          exports={"DENM": ["#"]}))
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await backoffice.bind("DENM")
        await backoffice.send("DENM", DENM_KEY, b"from-if2")
        assert (await backoffice.next()).body == b"from-if2"  # the back-office's own copy
        await wait_for(lambda: node.if2.counts["imported"] == 1, "the DENM to be imported")
        capability = {"application": {"messageType": "DENM", "publisherId": "DE15608",
                                      "publicationId": "DE15608:denm-3", "originatingCountry": "DE",
                                      "protocolVersion": "DENM:1.3.1", "quadTree": ["1202"], "causeCode": [3]},
                      "metadata": {}}
        target = await croads_publisher(if2_pki, node, capability)
        denm = Message(body=b"from-croads", inferred=True, ttl=60.0, properties={
            "messageType": "DENM", "protocolVersion": "DENM:1.3.1", "publisherId": "DE15608",
            "publicationId": "DE15608:denm-3", "originatingCountry": "DE", "quadTree": f",{HAZELDONK},",
            "causeCode": 3, "subCauseCode": 0})
        assert await asyncio.to_thread(publish, if2_pki, CROADS_ACTOR, node.amqps_port, IF2_NODE, target,
                                       [denm]) == ["accepted"]
        out = await backoffice.next()
        assert out.body == b"from-croads" and out.routing_key == f"DENM.1_3_1.BASt.3.{dotted(HAZELDONK)}"
        assert await backoffice.quiet(1.5) is None  # the IF2 DENM did not come back out
        assert node.if2.counts["imported"] == 1 and node.if2.counts["exported"] == 1
    finally:
        await node.close()


async def test_bi_connection_loss_loses_no_acknowledged_message(
        if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path, backoffice: BackOffice) -> None:
    """IF2 -> C-Roads over AMQPS (``bi_door = "amqps"``): the bridge's BI connection is cut while messages
    flow: every message RabbitMQ handed to the bridge reaches the C-Roads consumer (acks only after the
    BI accepted)."""
    node = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, bi_door="amqps"))
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await _survives_bi_losses(if2_pki, node, backoffice)
    finally:
        await node.close()


async def _survives_bi_losses(if2_pki: TestPki, node: RunningNode, backoffice: BackOffice) -> None:
    consumer = await croads_consumer(if2_pki, node, "messageType = 'DENM'")
    try:
        count = 200
        for i in range(count):
            await backoffice.send("DENM", DENM_KEY, b"n%d" % i)
            if i in (50, 120):  # two separate losses: the second only once the first was reconnected
                await wait_for(lambda: node.if2.bi.connects == 1 + (i == 120), "the BI link to be connected")  # noqa: B023 (called within this turn of the loop)
                node.if2.bi._connection.abort()  # the TCP connection drops, no AMQP close
        seen: set[bytes] = set()
        while len(seen) < count:
            got = await asyncio.to_thread(consumer.receive, WAIT_S)
            assert got is not None, (f"{count - len(seen)} messages lost: "
                                     f"{sorted({b'n%d' % i for i in range(count)} - seen)[:5]}")
            seen.add(bytes(got.body))
    finally:
        await asyncio.to_thread(consumer.close)
    assert node.if2.bi.connects >= 3


async def test_rabbitmq_restart_is_recovered(if2_pki: TestPki, node: RunningNode, rabbitmq_if2: RabbitMQ,
                                             connect_backoffice: ConnectBackOffice) -> None:
    """RabbitMQ stops and starts again: the bridge reconnects, declares its queues again (Table 3) and both
    directions work; durable exchanges (Table 2) survived."""
    await asyncio.to_thread(rabbitmq_if2.stop)
    await wait_for(lambda: not node.if2.rabbitmq_connected, "the bridge to notice")
    await asyncio.to_thread(rabbitmq_if2.start)
    await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to reconnect", timeout=30.0)
    backoffice = await connect_backoffice()
    consumer = await croads_consumer(if2_pki, node, "messageType = 'DENM'")
    try:
        await backoffice.bind("SPAT")
        await backoffice.send("DENM", DENM_KEY, b"after-restart")
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"after-restart"
        target = await croads_publisher(if2_pki, node, SPATEM_CAPABILITY)
        await asyncio.to_thread(publish, if2_pki, CROADS_ACTOR, node.amqps_port, IF2_NODE, target,
                                [spatem(b"spat-after-restart")])
        assert (await backoffice.next()).body == b"spat-after-restart"
    finally:
        await asyncio.to_thread(consumer.close)
        await backoffice.close()


def test_config_errors_are_clear(if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path) -> None:
    from pydantic import ValidationError

    for change, why in [({"exports": {"CAM": ["#"]}}, "'CAM' is not an IF2 exchange"),
                        ({"exports": {"DENM": ["DENM.1.NOPE.#"]}}, "'NOPE' is not in the provider table"),
                        ({"auth": "plain"}, "needs username and password"),
                        ({"url": "http://x"}, "should match pattern"),
                        ({"area_radius_m": {"DENM": 6000.0}}, r"area_radius_m.DENM = 6000.0: 0 to 5000 m"),
                        ({"area_radius_m": {"CAM": 100.0}}, "'CAM' is not an IF2 exchange"),
                        ({"bi_attempts": 0}, "greater than or equal to 1")]:
        with pytest.raises(ValidationError, match=why):
            bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, **change)
    assert BACKOFFICE != BRIDGE


async def test_a_subscription_the_node_refuses_stops_the_start_with_a_clear_error(
        if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path) -> None:
    config = bridge_node_config(if2_pki, rabbitmq_if2, tmp_path)
    assert config.ii is not None
    strict = config.ii.policy.model_copy(update={"max_selector_length": 20})
    config = config.model_copy(update={"ii": config.ii.model_copy(update={"policy": strict})})
    with pytest.raises(ValueError, match="the IF2 bridge could not set up at the node: subscription .* has no endpoint"):
        await start(config)


def test_if2_section_of_a_toml_node_config(tmp_path: Path) -> None:
    from interchange.app.config import load_config
    from interchange.ground.errors import CliError

    text = """
name = "a.interchange.test"
[tls]
cert_chain = "pki/a/chain.pem"
key = "pki/a/key.pem"
trust_bundle = "pki/trust.pem"
[ii]
port = 0
[if2]
url = "amqps://if2.example.nl:5671/test"
actor = "if2-bridge"
[if2.tls]
cert_chain = "pki/bridge/chain.pem"
key = "pki/bridge/key.pem"
trust_bundle = "pki/trust.pem"
[[if2.providers]]
name = "RWS"
publisher_id = "NL00001"
coverage = ["1202"]
[if2.imports]
DENM = ["#"]
[if2.exports]
SPAT = ["SPAT.*.RWS.#"]
"""
    path = tmp_path / "node.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.if2 is not None and config.if2.tls.cert_chain == tmp_path / "pki/bridge/chain.pem"
    assert config.if2.export_selector() == "messageType = 'SPATEM' AND publisherId = 'NL00001'"
    path.write_text(text.replace('coverage = ["1202"]', 'coverage = ["12x"]'))
    with pytest.raises(CliError, match="if2.providers.0.coverage: .*'12x' is not 1-18 digits 0-3"):
        load_config(path)


async def test_neighbours_discover_what_arrives_from_if2(if2_pki: TestPki, rabbitmq_if2: RabbitMQ,
                                                        backoffice: BackOffice, tmp_path: Path) -> None:
    """The capability the bridge registers for IF2 data reaches a neighbour interchange (IP_091)."""
    a_port, b_port = free_port(), free_port()
    seed_neighbours(tmp_path / "a", [Neighbour(IF2_NEIGHBOUR, "127.0.0.1", b_port, DOMAIN)])
    seed_neighbours(tmp_path / "b", [Neighbour(IF2_NODE, "127.0.0.1", a_port, DOMAIN)])
    node_b = await start(node_config(if2_pki, IF2_NEIGHBOUR, tmp_path / "b", ii_port=b_port))
    node_a = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path / "a", ii_port=a_port))
    https = Https(if2_pki, CROADS_ACTOR, node_b)
    try:
        await wait_for(lambda: node_a.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await backoffice.send("DENM", DENM_KEY, b"seen-by-neighbours")

        async def announced() -> bool:
            status, answer = await https.get(f"/{CROADS_ACTOR}/network/capabilities")
            assert status == 200, answer
            return any(c["application"]["publicationId"] == "NL00001:if2-DENM-1_2_1" for c in answer["capabilities"])

        await wait_for(announced, "node B to know the IF2 capability of node A")
    finally:
        await https.close()
        await node_a.close()
        await node_b.close()


async def _bridge_capabilities(pki: TestPki, node: RunningNode) -> set[str]:
    """The publicationIds of the capabilities the bridge has registered at the node (its actor API)."""
    https = Https(pki, BRIDGE, node)
    try:
        status, answer = await https.get(f"/{BRIDGE}/capabilities")
    finally:
        await https.close()
    assert status == 200, answer
    return {c["definition"]["application"]["publicationId"] for c in answer["capabilities"]}


async def test_metrics_on_the_admin_endpoint(if2_pki: TestPki, rabbitmq_if2: RabbitMQ, backoffice: BackOffice,
                                             tmp_path: Path) -> None:
    config = bridge_node_config(if2_pki, rabbitmq_if2, tmp_path)
    node = await start(config.model_copy(update={"admin": AdminConfig(host="127.0.0.1", port=0)}))
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected and node.if2.bi_connected, "the bridge's connections")
        await backoffice.send("DENM", DENM_KEY, b"counted")
        await backoffice.send("DENM", "DENM.1_2_1.NOBODY.5.1.2", b"unknown provider")
        await wait_for(lambda: node.if2.counts["imported"] == 1 and node.if2.counts["import_refused"] == 1,
                       "one import and one refusal")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{node.admin_port}/metrics") as response:
                text = await response.text()
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert samples[("if2_messages_total", (("direction", "if2_to_croads"), ("outcome", "accepted")))] == 1
        assert samples[("if2_messages_total", (("direction", "if2_to_croads"), ("outcome", "refused")))] == 1
        assert samples[("if2_capabilities_registered", ())] == 1
        assert samples[("if2_rabbitmq_connected", ())] == 1 and samples[("if2_bi_connected", ())] == 1
        assert samples[("interchange_connections", ())] >= 1  # the broker's own metrics are still there
    finally:
        await node.close()


async def test_idle_if2_capability_is_withdrawn_and_registered_again(
        if2_pki: TestPki, rabbitmq_if2: RabbitMQ, backoffice: BackOffice, tmp_path: Path) -> None:
    """No IF2 message of a provider/type/version for capability_idle_s: its capability is withdrawn at the
    node (neighbours stop seeing it); the next message registers it again and still arrives."""
    node = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, capability_idle_s=1.0))
    pid = "NL00001:if2-DENM-1_2_1"
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await backoffice.send("DENM", DENM_KEY, b"first")
        await wait_for(lambda: node.if2.counts["imported"] == 1, "the DENM to be imported")
        assert pid in await _bridge_capabilities(if2_pki, node)
        await wait_for(lambda: node.if2.counts["capabilities_withdrawn"] == 1, "the idle capability's withdrawal")
        assert pid not in await _bridge_capabilities(if2_pki, node)
        consumer = await croads_consumer(if2_pki, node, "messageType = 'DENM'")
        try:
            await backoffice.send("DENM", DENM_KEY, b"again")
            got = await asyncio.to_thread(consumer.receive, WAIT_S)
            assert got is not None and bytes(got.body) == b"again"
        finally:
            await asyncio.to_thread(consumer.close)
        assert pid in await _bridge_capabilities(if2_pki, node)
        withdrawn = await wait_logged(node, "if2_capability_withdrawn", 1)
        assert [details["publicationId"] for details in withdrawn] == [pid]
    finally:
        await node.close()


async def test_ttl_expired_while_valid_is_republished_end_to_end(
        if2_pki: TestPki, rabbitmq_if2: RabbitMQ, backoffice: BackOffice, tmp_path: Path) -> None:
    """IF2 6.4 rule 2 through RabbitMQ: the C-Roads publisher repeats a SPATEM (ttl 1.5 s) after 1 s, so it
    stays valid until 2.5 s; the second, bit-identical copy is not published, but when the first IF2 copy
    expires (1.5 s) the bridge publishes it again with the validity left, once (hourly rule 3 is far)."""
    node = await start(bridge_node_config(if2_pki, rabbitmq_if2, tmp_path, republish_interval_s=3600.0))
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected, "the bridge to connect to RabbitMQ")
        await backoffice.bind("SPAT", "SPAT.*.RWS.#")
        target = await croads_publisher(if2_pki, node, SPATEM_CAPABILITY)
        send = lambda: asyncio.to_thread(publish, if2_pki, CROADS_ACTOR, node.amqps_port, IF2_NODE,  # noqa: E731
                                         target, [spatem(b"\x07spat", ttl_s=1.5)])
        assert await send() == ["accepted"]
        first = await backoffice.next()
        assert first.body == b"\x07spat" and 1000 < int(first.expiration) <= 1500
        await asyncio.sleep(1.0)
        assert await send() == ["accepted"]  # the same bytes: valid for longer, not published now
        again = await backoffice.next(5.0)
        assert again.body == b"\x07spat" and int(again.expiration) < 1500
        assert node.if2.policy.suppressed == 1
        # counted once RabbitMQ's confirm reaches the bridge, which may be after the back-office got the copy
        await wait_for(lambda: node.if2.counts["republished"] == 1, "the republished copy to be counted")
        assert await backoffice.quiet(2.0) is None  # no longer valid: not published again
    finally:
        await node.close()
