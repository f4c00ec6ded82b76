"""The TLEX bridge in a node, against the simulator, over real TLS sockets end to end:
controllers -> TCPStreaming (TLS 1.2) -> bridge -> AMQPS (TLS 1.3) -> broker -> a C-ITS actor, and
an SREM from that actor back to exactly one controller, whose SSEM comes back."""
from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import generate_latest
from proton import Message

from certs import TestPki
from ii_api.selectors.policy import SubscriptionPolicy
from ii_api.settings.config import RequestLimits
from interchange.app.cli import main
from interchange.app.config import NodeConfig
from interchange.app.node import RunningNode
from interchange.bridges.tlex.config import DEFAULT_REPETITION_MS, ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.controllers import ControllerSpec, FakeController, PayloadFactory
from interchange.bridges.tlex.limits import batches
from interchange.bridges.tlex.payloads import DEFAULT_TYPES, PayloadTypes, kind_of, stand_in
from interchange.bridges.tlex.publication import BiMessage, tile
from interchange.bridges.tlex.service import Limits
from interchange.bridges.tlex.stream import read_now
from interchange.testing.broker_harness import complete_records
from interchange.testing.ii_harness import Consumer, Https, node_config, publish, start, wait_for
from interchange.testing.tlex_harness import DOMAIN, SIM_HOST, TLCS, Sim, start_sim, start_virtual_sim, up

NODE = "a.interchange.test"
BRIDGE, ACTOR = "tlex-bridge", "actor-a"
HAZELDONK = (51.485992, 4.735311)
CONTROLLERS = [ControllerConfig(tlc_id=TLCS[0], intersections=["5-57"], latitude=HAZELDONK[0], longitude=HAZELDONK[1]),
               ControllerConfig(tlc_id=TLCS[1], intersections=["5-58", "5-59"], latitude=52.0116, longitude=4.3571)]


def bridge_config(sim: Sim, pki: TestPki) -> TlexBridgeConfig:
    return TlexBridgeConfig(api_url=sim.service.api_url, authorization=sim.broker.authorization, server_name=SIM_HOST,
                            trust_bundle=sim.pki.trust_bundle, domain=DOMAIN, actor=pki.identity(BRIDGE).directory,
                            publisher_id="NL00001", originating_country="NL", controllers=CONTROLLERS,
                            backoff_initial=0.05, backoff_max=0.5)


def bridged_config(sim: Sim, pki: TestPki, tmp_path: Path, **bridge: object) -> NodeConfig:
    tlex = bridge_config(sim, pki).model_copy(update=bridge)  # not validated again: give whole values
    config = node_config(pki, NODE, tmp_path / "node").model_copy(update={"tlex": tlex})
    return config.model_copy(update={"admin": config.admin.model_copy(update={"port": 0})})


async def start_bridged_node(sim: Sim, pki: TestPki, tmp_path: Path, **bridge: object) -> RunningNode:
    return await start(bridged_config(sim, pki, tmp_path, **bridge))


async def subscribe(https: Https, selector: str) -> str:
    status, body = await https.post(f"/{ACTOR}/subscriptions", {"subscriptions": [{"selector": selector}]})
    assert status == 200, body
    return body["subscriptions"][0]["endpoints"][0]["source"]


@pytest.mark.parametrize("bi_door", ["in-process", "amqps"])
async def test_controllers_to_actor_and_srem_back(sim: Sim, pki: TestPki, tmp_path: Path, bi_door: str) -> None:
    """Both ways of publishing into the broker (its in-process door, an AMQPS link) give the actor
    the same messages in the same order, and the node the same records and metrics."""
    node = await start_bridged_node(sim, pki, tmp_path, bi_door=bi_door)
    https = Https(pki, ACTOR, node)
    bridge_https = Https(pki, BRIDGE, node)
    sent: dict[str, list[bytes]] = {}

    def factory_for(tlc: str, station: int):
        def make(kind: str, intersection: str, seq: int) -> bytes:
            data = stand_in(kind, station, intersection, seq)
            sent.setdefault(tlc, []).append(data)
            return data
        return make

    controllers: list[FakeController] = []
    consumer = ssem_consumer = None
    try:
        assert node.tlex is not None
        status, caps = await bridge_https.get(f"/{BRIDGE}/capabilities")
        assert status == 200 and len(caps["capabilities"]) == 6  # SPATEM, MAPEM, SSEM per controller
        source = await subscribe(https, "messageType IN ('SPATEM', 'MAPEM')")
        consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
        async with sim.api(sim.tlc_system) as tlc_api:
            for i, ctl in enumerate(CONTROLLERS):
                controllers.append(FakeController(
                    ControllerSpec(ctl.tlc_id, ctl.intersections, 100 + i), tlc_api, domain=DOMAIN,
                    stream_ssl=sim.stream_ssl(), spatem_hz=10, server_hostname=SIM_HOST,
                    factory=factory_for(ctl.tlc_id, 100 + i)))
                controllers[-1].start()
            got: list[Message] = []
            while {m.properties["publicationId"] for m in got} != {
                    f"NL00001:{t}-{k}" for t in TLCS[:2] for k in ("SPATEM", "MAPEM")}:
                message = await asyncio.to_thread(consumer.receive)
                assert message is not None, f"only {len(got)} messages arrived"
                got.append(message)
            for ctl in CONTROLLERS:
                mine = [m for m in got if m.properties["publicationId"].startswith(f"NL00001:{ctl.tlc_id}-")]
                assert mine[0].properties["messageType"] == "MAPEM"  # IP_104
                assert [bytes(m.body) for m in mine] == sent[ctl.tlc_id][:len(mine)]  # bytes unchanged, in order
                spat = next(m for m in mine if m.properties["messageType"] == "SPATEM")
                assert spat.properties == {
                    "messageType": "SPATEM", "publisherId": "NL00001", "publicationId": f"NL00001:{ctl.tlc_id}-SPATEM",
                    "originatingCountry": "NL", "protocolVersion": "SPATEM:2.1.1",
                    "quadTree": f",{tile(ctl)},{','.join(node.tlex.translator.area(ctl, 'SPATEM'))},",
                    "id": "," + ",".join(ctl.intersections) + ",", "latitude": ctl.latitude, "longitude": ctl.longitude}
                assert len(tile(ctl)) == 18
                assert spat.ttl == 1.0 and mine[0].ttl == 648.0  # IP_033: 100 ms and 540 s x 1.2, at least 1 s

            # SREM from a C-ITS actor at the node -> only the controller of intersection 5-59
            srem_caps = [{"application": {"messageType": "SREM", "publisherId": "NL00002",
                                          "publicationId": "NL00002:srem", "originatingCountry": "NL",
                                          "protocolVersion": "SREM:2.1.1", "quadTree": ["1"]}, "metadata": {}}]
            assert (await https.post(f"/{ACTOR}/capabilities", {"capabilities": srem_caps}))[0] == 200
            status, body = await https.post(f"/{ACTOR}/deliveries", {"deliveries": [{"selector": "messageType = 'SREM'"}]})
            target = body["deliveries"][0]["endpoints"][0]["target"]
            ssem_source = await subscribe(https, "messageType = 'SSEM'")
            ssem_consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, ssem_source)
            srem_body = stand_in("SREM", 7, "5-59", 1)
            srem = Message(body=srem_body, inferred=True, properties={
                "messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": f",{tile(CONTROLLERS[1])},",
                "id": ",5-59,"})
            outcomes = await asyncio.to_thread(publish, pki, ACTOR, node.amqps_port, NODE, target, [srem])
            assert outcomes == ["accepted"]
            await wait_for(lambda: controllers[1].record.received, "the SREM at controller 2")
            assert [bytes(p.payload) for p in controllers[1].record.received] == [srem_body]
            assert controllers[0].record.received == []
            ssem = await asyncio.to_thread(ssem_consumer.receive)
            assert ssem is not None and ssem.properties["publicationId"] == f"NL00001:{TLCS[1]}-SSEM"
            assert ssem.properties["id"] == ",5-58,5-59," and bytes(ssem.body) in sent[TLCS[1]]

        assert node.metrics is not None
        metrics = generate_latest(node.metrics).decode()
        assert 'tlex_session_connected 1.0' in metrics
        async with aiohttp.ClientSession() as session:  # the node's view of its bridge (deploy/monitoring)
            async with session.get(f"http://127.0.0.1:{node.admin_port}/metrics") as response:
                assert 'interchange_bridge_link_up{bridge="tlex",link="tlex-session"} 1.0' in await response.text()
            async with session.get(f"http://127.0.0.1:{node.admin_port}/federation") as response:
                assert '<td>tlex</td><td>tlex-session</td><td class="ok">connected</td>' in await response.text()
        assert f'tlex_tlc_srem_out_total{{tlc="{TLCS[1]}"}} 1.0' in metrics
        assert f'tlex_tlc_published_total{{tlc="{TLCS[0]}"}}' in metrics
        log = (tmp_path / "node" / "node.log").read_text()
        assert '"tlex_stream_connected"' in log and '"tlex_bridge_started"' in log
        records = [json.loads(line) for line in log.splitlines()]
        connected = [r for r in records if r["event"] == "tlex_amqp_connected"]
        assert connected and connected[0]["details"]["publish"] == {"in-process": "in-process door", "amqps": "amqps"}[bi_door]
        attached = [r["details"] for r in records if r["event"] == "link_attach"]
        assert {"role": "publisher", "identity": BRIDGE, "address": node.tlex.target, "selector": None} in attached
    finally:
        for controller in controllers:
            await controller.stop()
        for c in (consumer, ssem_consumer):
            if c is not None:
                await asyncio.to_thread(c.close)
        await https.close()
        await bridge_https.close()
        await node.close()


async def test_bridge_survives_reconnect_and_restarts_idempotently(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    node = await start_bridged_node(sim, pki, tmp_path)
    try:
        assert node.tlex is not None and node.tlex.supervisor is not None
        supervisor = node.tlex.supervisor
        await wait_for(lambda: up(sim, supervisor, 1), "the bridge's stream")
        assert sim.service.reconnect() == 1
        await wait_for(lambda: up(sim, supervisor, 2), "a new session")
        assert sim.service.say_bye("maintenance") == 1
        await wait_for(lambda: up(sim, supervisor, 3), "another session")
        assert supervisor.stats.closes == {"reconnect": 1, "bye": 1}
    finally:
        await node.close()
    node = await start_bridged_node(sim, pki, tmp_path)  # same data dir: capabilities are not posted twice
    try:
        https = Https(pki, BRIDGE, node)
        status, caps = await https.get(f"/{BRIDGE}/capabilities")
        assert status == 200 and len(caps["capabilities"]) == 6
        await https.close()
    finally:
        await node.close()


def grid(count: int, *, region: int = 5) -> list[dict[str, Any]]:
    return [{"tlc_id": f"NLSM{i:04d}", "intersections": [f"{region}-{100 + i}"], "latitude": 51 + i * 0.001,
             "longitude": 4.0} for i in range(count)]


@pytest.mark.parametrize("policy, controllers, expected", [
    ({"max_subscriptions_per_owner": 3}, grid(400),
     "400 intersections need 5 SREM subscriptions of at most 1900 characters, and "
     "ii.policy.max_subscriptions_per_owner is 3"),
    ({"max_selector_length": 40}, grid(1), "SREM subscription selector of 46 characters is needed"),
    ({"max_selector_length": 50}, grid(1, region=123456789), "of 54 characters is needed"),
])
def test_a_bridge_the_node_could_not_register_is_refused_before_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: dict, controllers: list, expected: str) -> None:
    """Limits of the node's II that the bridge cannot work around (Table 14 ILLEGAL): the config is
    refused with the reason when it is read, before anything listens."""
    tlex = {"api_url": "https://x", "authorization": "t", "domain": "d", "actor": "a", "publisher_id": "NL00001",
            "originating_country": "NL", "controllers": controllers}
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"name": "a.interchange.test", "ii": {"policy": policy}, "tlex": tlex}))
    assert main(["broker", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("interchange broker: error: config") and "tlex: " in err and expected in err, err
    assert "Traceback" not in err and "\n" not in err
    within = {**policy, "max_subscriptions_per_owner": 1000, "max_selector_length": 1900}
    assert NodeConfig.model_validate({"name": "a", "ii": {"policy": within}, "tlex": tlex}).tlex is not None


def test_batches_stay_within_count_and_body_size() -> None:
    items = [{"n": "x" * (i % 7)} for i in range(23)]
    counted = list(batches(items, "capabilities", 5))
    assert [len(b) for b in counted] == [5, 5, 5, 5, 3] and [i for b in counted for i in b] == items
    sized = list(batches(items, "capabilities", 100, body_bytes=120))
    assert [i for b in sized for i in b] == items and len(sized) > 1
    assert all(len(json.dumps({"capabilities": b})) <= 120 for b in sized)
    assert list(batches([{"n": "y" * 500}], "capabilities", 10, body_bytes=100)) == [[{"n": "y" * 500}]]


async def test_bridge_registers_within_the_node_limits(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """A node that takes 4 capabilities and 1 subscription per request and 70-character selectors:
    the bridge's 6 capabilities go in two requests, its SREM subscriptions (2) in one each."""
    config = bridged_config(sim, pki, tmp_path)
    assert config.ii is not None
    config = config.model_copy(update={"ii": config.ii.model_copy(update={
        "limits": RequestLimits(capabilities_per_request=4, subscriptions_per_request=1),
        "policy": SubscriptionPolicy(max_selector_length=70)})})
    node = await start(config)
    https = Https(pki, BRIDGE, node)
    try:
        status, caps = await https.get(f"/{BRIDGE}/capabilities")
        assert status == 200 and len(caps["capabilities"]) == 6
        status, subs = await https.get(f"/{BRIDGE}/subscriptions")
        assert [len(s["selector"]) <= 70 and s["status"] for s in subs["subscriptions"]] == ["CREATED", "CREATED"]
        assert node.tlex is not None and len(node.tlex.srem_sources) == 2
    finally:
        await https.close()
        await node.close()


async def test_mapem_kept_across_a_restart(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """IP_049/IP_104: after a restart the stored MAPEM is published again first, so the controller's
    SPATEMs flow at once although its next MAPEM is an hour away."""
    async with sim.api(sim.tlc_system) as tlc_api:
        controller = FakeController(ControllerSpec(TLCS[0], CONTROLLERS[0].intersections, 1), tlc_api, domain=DOMAIN,
                                    stream_ssl=sim.stream_ssl(), spatem_hz=10, mapem_interval=3600,
                                    server_hostname=SIM_HOST)
        node = await start_bridged_node(sim, pki, tmp_path)
        try:
            controller.start()
            assert node.tlex is not None
            counters = node.tlex.counters
            await wait_for(lambda: counters.tlc(TLCS[0]).published >= 5, "MAPEM and SPATEMs published")
            await wait_for(lambda: list((tmp_path / "node" / "tlex").glob("*.mapem")), "the stored MAPEM")
        finally:
            await node.close()
        node = await start_bridged_node(sim, pki, tmp_path)
        try:
            assert node.tlex is not None
            counters = node.tlex.counters
            await wait_for(lambda: counters.tlc(TLCS[0]).published >= 5, "SPATEMs published after the restart")
            assert counters.tlc(TLCS[0]).dropped == 0 and node.tlex.translator.spatem_before_mapem == 0
            await wait_for(lambda: '"tlex_mapem_restored"' in (tmp_path / "node" / "node.log").read_text(),
                           "tlex_mapem_restored in the log (written by its own thread)")
            records = complete_records(tmp_path / "node" / "node.log")
            first_run = next(r for r in records if r["event"] == "tlex_tlc" and r["details"]["tlc"] == TLCS[0])
            assert first_run["details"]["published"] >= 5 and first_run["details"]["dropped"] == 0
        finally:
            await controller.stop()
            await node.close()


async def test_mapem_repeated_to_consumers(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """IP_048 end to end: a controller that sent its MAPEM once (next one an hour away) but keeps
    sending SPATEMs has that MAPEM repeated by the bridge every MAPEM repetition interval (1 s here),
    byte for byte, each copy before the SPATEM that triggered it."""
    node = await start_bridged_node(sim, pki, tmp_path, repetition_ms={**DEFAULT_REPETITION_MS, "MAPEM": 1000})
    https = Https(pki, ACTOR, node)
    consumer = None
    async with sim.api(sim.tlc_system) as tlc_api:
        controller = FakeController(ControllerSpec(TLCS[0], CONTROLLERS[0].intersections, 1), tlc_api, domain=DOMAIN,
                                    stream_ssl=sim.stream_ssl(), spatem_hz=10, mapem_interval=3600,
                                    server_hostname=SIM_HOST)
        try:
            source = await subscribe(https, f"publicationId LIKE 'NL00001:{TLCS[0]}-%'")
            consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
            controller.start()
            got: list[Message] = []
            while sum(m.properties["messageType"] == "MAPEM" for m in got) < 3:
                message = await asyncio.to_thread(consumer.receive)
                assert message is not None, f"only {len(got)} messages arrived"
                got.append(message)
            mapems = [i for i, m in enumerate(got) if m.properties["messageType"] == "MAPEM"]
            assert mapems[0] == 0 and len({bytes(got[i].body) for i in mapems}) == 1  # the same MAPEM again
            assert all(got[i + 1].properties["messageType"] == "SPATEM" for i in mapems[1:] if i + 1 < len(got))
            assert 8 <= mapems[2] - mapems[1] <= 13  # about 1 s of 10 Hz SPATEMs between repeats
            assert node.tlex is not None and node.tlex.translator.mapems.repeated >= 2
            assert node.metrics is not None and "tlex_mapem_repeated_total" in generate_latest(node.metrics).decode()
        finally:
            await controller.stop()
            if consumer is not None:
                await asyncio.to_thread(consumer.close)
            await https.close()
            await node.close()


async def test_controllers_changed_at_run_time(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """SIGHUP's [tlex] reload swaps a traffic light for another without a restart: the
    Broker session's identifiers are updated in place (PUT, 5.2.1.4), capabilities and SREM
    subscriptions follow at the node, the new controller's payloads reach a consumer and an SREM
    reaches it; a change that needs a restart is refused, logged, and changes nothing."""
    config = bridged_config(sim, pki, tmp_path, controllers=[CONTROLLERS[0]])
    node = await start(config)
    https, bridge_https = Https(pki, ACTOR, node), Https(pki, BRIDGE, node)
    consumer = None
    controllers: list[FakeController] = []
    async with sim.api(sim.tlc_system) as tlc_api:
        try:
            assert node.tlex is not None and node.tlex.supervisor is not None
            bridge, counters = node.tlex, node.tlex.counters
            source = await subscribe(https, "messageType IN ('SPATEM', 'MAPEM')")
            consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
            for i, ctl in enumerate(CONTROLLERS):
                controllers.append(FakeController(
                    ControllerSpec(ctl.tlc_id, ctl.intersections, 100 + i), tlc_api, domain=DOMAIN,
                    stream_ssl=sim.stream_ssl(), spatem_hz=10, mapem_interval=0.5, server_hostname=SIM_HOST))
                controllers[-1].start()
            await wait_for(lambda: counters.tlc(TLCS[0]).published >= 5, "the first controller's payloads")
            assert counters.tlc(TLCS[1]).payloads_in == 0  # not in the session's scope
            session_token = bridge.supervisor.session.token if bridge.supervisor.session else None

            swapped = config.model_copy(update={"tlex": config.tlex.model_copy(update={"controllers": [CONTROLLERS[1]]})})
            summary = await node.reload_tlex(lambda: swapped)
            assert summary == {"added": [TLCS[1]], "removed": [TLCS[0]], "moved": [], "session": "updated"}
            assert bridge.supervisor.session is not None and bridge.supervisor.session.token == session_token
            assert bridge.supervisor.stream is not None and bridge.supervisor.stream.tlc_ids == {TLCS[1]}
            await wait_for(lambda: counters.tlc(TLCS[1]).published >= 5, "the added controller's payloads")
            while True:  # at the consumer too, MAPEM first (IP_104)
                message = await asyncio.to_thread(consumer.receive)
                assert message is not None
                if message.properties["publicationId"].startswith(f"NL00001:{TLCS[1]}-"):
                    assert message.properties["messageType"] == "MAPEM"
                    break
            status, caps = await bridge_https.get(f"/{BRIDGE}/capabilities")
            assert status == 200 and sorted(c["definition"]["application"]["publicationId"] for c in caps["capabilities"]) == [
                f"NL00001:{TLCS[1]}-{kind}" for kind in ("MAPEM", "SPATEM", "SSEM")]
            status, subs = await bridge_https.get(f"/{BRIDGE}/subscriptions")
            assert [s["selector"] for s in subs["subscriptions"]] == [
                "messageType = 'SREM' AND (id LIKE '%,5-58,%' OR id LIKE '%,5-59,%')"]

            srem_caps = [{"application": {"messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                                          "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": ["1"]},
                          "metadata": {}}]
            assert (await https.post(f"/{ACTOR}/capabilities", {"capabilities": srem_caps}))[0] == 200
            status, body = await https.post(f"/{ACTOR}/deliveries", {"deliveries": [{"selector": "messageType = 'SREM'"}]})
            srem = Message(body=b"srem-5-58", inferred=True, properties={
                "messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": f",{tile(CONTROLLERS[1])},",
                "id": ",5-58,"})
            target = body["deliveries"][0]["endpoints"][0]["target"]
            assert await asyncio.to_thread(publish, pki, ACTOR, node.amqps_port, NODE, target, [srem]) == ["accepted"]
            await wait_for(lambda: controllers[1].record.received, "the SREM at the added controller")
            assert [bytes(p.payload) for p in controllers[1].record.received] == [b"srem-5-58"]

            moved_publisher = swapped.model_copy(update={"tlex": swapped.tlex.model_copy(update={"publisher_id": "NL00009"})})
            with pytest.raises(ValueError, match="publisher_id changed: restart the node"):
                await node.reload_tlex(lambda: moved_publisher)
            assert bridge.config.publisher_id == "NL00001" and bridge.supervisor.stream.tlc_ids == {TLCS[1]}
            await wait_for(lambda: '"tlex_reload_failed"' in (tmp_path / "node" / "node.log").read_text(),
                           "tlex_reload_failed in the log (written by its own thread)")
            assert await node.reload_tlex(lambda: swapped) == {"added": [], "removed": [], "moved": [],
                                                              "session": "unchanged"}
        finally:
            for controller in controllers:
                await controller.stop()
            if consumer is not None:
                await asyncio.to_thread(consumer.close)
            await https.close()
            await bridge_https.close()
            await node.close()


async def test_mapems_stored_by_one_writer_latest_per_controller(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """A MAPEM burst is stored by one write at a time, each with only the latest MAPEM per controller
    that arrived meanwhile; at stop nothing accepted is left unstored."""
    from interchange.bridges.tlex.bridge import TlexBridge

    config = bridged_config(sim, pki, tmp_path)
    assert config.tlex is not None
    bridge = TlexBridge(config.tlex, node_name=NODE, ii_port=1, amqps_port=1, event=lambda *_: None,
                        state_dir=tmp_path / "tlex")
    store = bridge._mapems
    assert store is not None
    batches: list[dict[str, tuple[int, bytes]]] = []
    save_all = store.save_all

    def recording(batch: dict[str, tuple[int, bytes]]) -> None:
        batches.append(dict(batch))
        save_all(batch)

    store.save_all = recording  # type: ignore[method-assign]
    for i in range(60):
        bridge._enqueue(BiMessage({}, 1000, b"map-%d" % i, TLCS[i % 2], "MAPEM"))
    await bridge._store_unsaved_mapems()
    assert 2 <= len(batches) <= 3 and sum(len(batch) for batch in batches) <= 5  # not 60 writes
    assert batches[0] == {TLCS[0]: (batches[0][TLCS[0]][0], b"map-0")}
    stored = store.load([TLCS[0], TLCS[1]], batches[-1][TLCS[0]][0])
    assert {tlc: payload for tlc, (_, payload) in stored.items()} == {TLCS[0]: b"map-58", TLCS[1]: b"map-59"}
    assert not list((tmp_path / "tlex").glob("*.tmp"))


@pytest.mark.parametrize("interval_s, writes_before_stop", [(30.0, 1), (0.0, 3)])
async def test_a_controllers_mapem_is_stored_at_most_once_per_interval(
        sim: Sim, pki: TestPki, tmp_path: Path, interval_s: float, writes_before_stop: int) -> None:
    """mapem_store_interval_s: copies within the interval are not written (a file each costs the
    kernel ~0.2 ms), the newest is at stop; 0 writes every copy."""
    from interchange.bridges.tlex.bridge import TlexBridge

    config = bridged_config(sim, pki, tmp_path, mapem_store_interval_s=interval_s)
    assert config.tlex is not None
    bridge = TlexBridge(config.tlex, node_name=NODE, ii_port=1, amqps_port=1, event=lambda *_: None,
                        state_dir=tmp_path / "tlex")
    store = bridge._mapems
    assert store is not None
    batches: list[dict[str, tuple[int, bytes]]] = []
    save_all = store.save_all

    def recording(batch: dict[str, tuple[int, bytes]]) -> None:
        batches.append(dict(batch))
        save_all(batch)

    store.save_all = recording  # type: ignore[method-assign]
    for i in range(3):
        bridge._enqueue(BiMessage({}, 1000, b"map-%d" % i, TLCS[0], "MAPEM"))
        await wait_for(lambda: bridge._saving is None, "the store's write done")
    assert [batch[TLCS[0]][1] for batch in batches] == [b"map-%d" % i for i in range(writes_before_stop)]
    await bridge._store_unsaved_mapems()
    assert {tlc: body for tlc, (_, body) in store.load([TLCS[0]], batches[-1][TLCS[0]][0]).items()} == {
        TLCS[0]: b"map-2"}  # the newest, whatever the interval


async def test_controllers_with_other_type_bytes(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """A service whose controllers send SPATEM as 0x01, MAPEM 0x02, SREM 0x03, SSEM 0x04 (the specs
    leave type bytes to the application): the bridge publishes their payloads by their ITS PDU
    headers without being told the bytes; an SREM goes out with the type byte of the controller's
    mapping, so the controller configured with them answers it, the one left at the default (0x09)
    does not take it for an SREM."""
    other = PayloadTypes({"SPATEM": 1, "MAPEM": 2, "SREM": 3, "SSEM": 4})
    told = [CONTROLLERS[0].model_copy(update={"payload_types": dict(other.by_kind)}), CONTROLLERS[1]]
    node = await start_bridged_node(sim, pki, tmp_path, controllers=told)
    https = Https(pki, ACTOR, node)
    consumer = None
    controllers: list[FakeController] = []
    async with sim.api(sim.tlc_system) as tlc_api:
        try:
            source = await subscribe(https, "messageType IN ('SPATEM', 'MAPEM', 'SSEM')")
            consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
            for i, ctl in enumerate(CONTROLLERS):
                controllers.append(FakeController(
                    ControllerSpec(ctl.tlc_id, ctl.intersections, 100 + i), tlc_api, domain=DOMAIN,
                    stream_ssl=sim.stream_ssl(), spatem_hz=10, server_hostname=SIM_HOST, payload_types=other))
                controllers[-1].start()
            got: list[Message] = []
            while {m.properties["publicationId"] for m in got} != {
                    f"NL00001:{t}-{k}" for t in TLCS[:2] for k in ("SPATEM", "MAPEM")}:
                message = await asyncio.to_thread(consumer.receive)
                assert message is not None, f"only {len(got)} messages arrived"
                got.append(message)
            assert all(m.properties["messageType"] == kind_of(bytes(m.body)[1]) for m in got)  # named by the header
            srem_caps = [{"application": {"messageType": "SREM", "publisherId": "NL00002",
                                          "publicationId": "NL00002:srem", "originatingCountry": "NL",
                                          "protocolVersion": "SREM:2.1.1", "quadTree": ["1"]}, "metadata": {}}]
            assert (await https.post(f"/{ACTOR}/capabilities", {"capabilities": srem_caps}))[0] == 200
            status, body = await https.post(f"/{ACTOR}/deliveries", {"deliveries": [{"selector": "messageType = 'SREM'"}]})
            target = body["deliveries"][0]["endpoints"][0]["target"]
            srem = Message(body=stand_in("SREM", 7, "5-57", 1), inferred=True, properties={
                "messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": f",{tile(CONTROLLERS[0])},",
                "id": ",5-57,5-58,"})
            assert await asyncio.to_thread(publish, pki, ACTOR, node.amqps_port, NODE, target, [srem]) == ["accepted"]
            await wait_for(lambda: controllers[0].record.received and controllers[1].record.received, "the SREMs")
            assert [p.payload_type for p in controllers[0].record.received] == [3]
            assert [p.payload_type for p in controllers[1].record.received] == [9]
            while True:  # the first controller's SSEM (sent as 0x04) comes back as an SSEM
                message = await asyncio.to_thread(consumer.receive)
                assert message is not None
                if message.properties["messageType"] == "SSEM":
                    assert message.properties["publicationId"] == f"NL00001:{TLCS[0]}-SSEM"
                    break
            assert controllers[1].record.sent.get("SSEM") is None  # 0x09 is not its SREM byte
            assert node.tlex is not None and node.tlex.counters.dropped.get("unidentified") is None
        finally:
            for controller in controllers:
                await controller.stop()
            if consumer is not None:
                await asyncio.to_thread(consumer.close)
            await https.close()
            await node.close()


async def test_a_payload_too_large_for_the_broker_is_refused_before_sending(sim: Sim, pki: TestPki, tmp_path: Path) -> None:
    """A node taking messages of at most 2,048 bytes (its max-message-size, on the attach): a
    controller's 3,000-byte MAPEMs are refused by the bridge before sending, counted, logged with the
    reason, and its SPATEMs wait (IP_104: no MAPEM was published); the link is never detached, so the
    other controller's messages flow."""
    config = bridged_config(sim, pki, tmp_path)
    broker = config.broker.model_copy(update={"limits": config.broker.limits.model_copy(update={"max_message_size": 2048})})
    config = config.model_copy(update={"broker": broker})
    node = await start(config)
    https = Https(pki, ACTOR, node)
    controllers: list[FakeController] = []

    def big_maps(kind: str, intersection: str, seq: int) -> bytes:
        return stand_in(kind, 100, intersection, seq, 3000 if kind == "MAPEM" else None)

    async with sim.api(sim.tlc_system) as tlc_api:
        try:
            assert node.tlex is not None
            bridge, counters = node.tlex, node.tlex.counters
            for i, ctl in enumerate(CONTROLLERS):
                controllers.append(FakeController(
                    ControllerSpec(ctl.tlc_id, ctl.intersections, 100 + i), tlc_api, domain=DOMAIN,
                    stream_ssl=sim.stream_ssl(), spatem_hz=10, mapem_interval=0.5, server_hostname=SIM_HOST,
                    factory=big_maps if i == 0 else None))
                controllers[-1].start()
            await wait_for(lambda: counters.tlc(TLCS[1]).published >= 10, "the second controller's messages")
            await wait_for(lambda: counters.tlc(TLCS[0]).refused >= 2, "the first controller's MAPEMs refused")
            assert counters.tlc(TLCS[0]).published == 0 and counters.dropped["waits_for_mapem"] > 0
            assert counters.amqp_connects == 1 and bridge.outbound.max_message_size == 2048
            await wait_for(lambda: '"tlex_message_refused"' in (tmp_path / "node" / "node.log").read_text(), "the log")
            [record] = [r for r in complete_records(tmp_path / "node" / "node.log") if r["event"] == "tlex_message_refused"]
            assert record["level"] == "warning" and record["details"]["tlc"] == TLCS[0]
            assert record["details"]["reason"].endswith("the broker takes at most 2048 (its max-message-size)")
            assert record["details"]["spatems_wait"] is True
            assert node.metrics is not None
            assert f'tlex_tlc_refused_total{{tlc="{TLCS[0]}"}}' in generate_latest(node.metrics).decode()
        finally:
            for controller in controllers:
                await controller.stop()
            await https.close()
            await node.close()


POISON_SMALL, POISON_AT = 5000, 2500  #: small SPATEMs sent, and where among them the oversize one goes


def receive_all(consumer: Consumer, count: int, quiet_s: float) -> list[Message]:
    """``count`` messages (fewer if one takes longer than WAIT_S), then any more within ``quiet_s``."""
    got: list[Message] = []
    while len(got) < count and (message := consumer.receive()) is not None:
        got.append(message)
    while (extra := consumer.receive(quiet_s)) is not None:
        got.append(extra)
    return got


@pytest.mark.parametrize("bi_door", ["in-process", "amqps"])
async def test_one_oversize_payload_among_5000_is_refused_once_and_the_rest_flow(
        sim_pki: TestPki, pki: TestPki, tmp_path: Path, bi_door: str) -> None:
    """A poison payload: two controllers stream 5,000 small SPATEMs after their MAPEMs, and one SPATEM
    of 3,000 bytes among them, to a node taking at most 2,048 (its max-message-size). Every small one
    reaches the actor once, in each controller's order; the big one is refused once, before sending
    (counted, logged and in the metrics with the reason); neither the BI connection nor a TLEX session
    is made again (no reconnect loop)."""
    sim = await start_sim(sim_pki, Limits(payload_rate=100_000, throughput_kb=100_000))  # a burst, not a rate test
    config = bridged_config(sim, pki, tmp_path, bi_door=bi_door,  # a 60 s SPATEM TTL: a slow consumer loses none
                            repetition_ms={**DEFAULT_REPETITION_MS, "SPATEM": 50_000})
    config = config.model_copy(update={"broker": config.broker.model_copy(update={
        "limits": config.broker.limits.model_copy(update={"max_message_size": 2048})})})
    node = await start(config)
    https = Https(pki, ACTOR, node)
    controllers: list[FakeController] = []
    consumer = None
    try:
        assert node.tlex is not None and node.tlex.supervisor is not None
        bridge, counters = node.tlex, node.tlex.counters
        source = await subscribe(https, "messageType IN ('SPATEM', 'MAPEM')")
        consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
        expected: dict[str, list[bytes]] = {}
        sent_maps: dict[str, list[bytes]] = {}

        def maps_of(tlc: str, station: int) -> PayloadFactory:
            def make(kind: str, intersection: str, seq: int) -> bytes:
                data = stand_in(kind, station, intersection, seq)
                sent_maps.setdefault(tlc, []).append(data)
                return data
            return make

        async with sim.api(sim.tlc_system) as tlc_api:
            for i, ctl in enumerate(CONTROLLERS):  # no SPATEM of their own: their MAPEMs when the session is up
                controllers.append(FakeController(
                    ControllerSpec(ctl.tlc_id, ctl.intersections, 100 + i), tlc_api, domain=DOMAIN,
                    stream_ssl=sim.stream_ssl(), spatem_hz=0, mapem_interval=3600, server_hostname=SIM_HOST,
                    factory=maps_of(ctl.tlc_id, 100 + i)))
                controllers[-1].start()
            await wait_for(lambda: all(counters.tlc(c.tlc_id).published == len(c.intersections) for c in CONTROLLERS),
                           "both controllers' MAPEMs published")
            for ctl in CONTROLLERS:
                expected[ctl.tlc_id] = list(sent_maps[ctl.tlc_id])
            spatem = DEFAULT_TYPES.by_kind["SPATEM"]
            for n in range(POISON_SMALL + 1):
                i = n % 2
                ctl = CONTROLLERS[i]
                intersection = ctl.intersections[(n // 2) % len(ctl.intersections)]
                data = stand_in("SPATEM", 100 + i, intersection, n, 3000 if n == POISON_AT else None)
                assert controllers[i].supervisor.send(Payload(spatem, read_now().utc_ms, data)) is None
                if n != POISON_AT:
                    expected[ctl.tlc_id].append(data)
                if n % 100 == 99:
                    await asyncio.sleep(0.005)  # bursts of 100, as a service's reads would hand them on
            total = sum(len(bodies) for bodies in expected.values())
            assert total == POISON_SMALL + 3  # and the 3 MAPEMs
            got = await asyncio.to_thread(receive_all, consumer, total, 1.0)
        for ctl in CONTROLLERS:  # each small one once, in the order its controller sent it
            mine = [bytes(m.body) for m in got if m.properties["publicationId"].startswith(f"NL00001:{ctl.tlc_id}-")]
            assert len(mine) == len(expected[ctl.tlc_id]) and mine == expected[ctl.tlc_id], ctl.tlc_id
        assert len(got) == total
        assert counters.tlc(TLCS[0]).refused == 1 and counters.tlc(TLCS[1]).refused == 0
        assert counters.dropped.get("refused") == 1 and counters.queue_dropped_total == 0
        assert [counters.tlc(c.tlc_id).published for c in CONTROLLERS] == [len(expected[c.tlc_id]) for c in CONTROLLERS]
        records = complete_records(tmp_path / "node" / "node.log")
        [refused] = [r for r in records if r["event"] == "tlex_message_refused"]
        assert refused["details"]["tlc"] == TLCS[0] and refused["details"]["message_type"] == "SPATEM"
        assert refused["details"]["count"] == 1 and refused["details"]["spatems_wait"] is False
        assert refused["details"]["reason"].endswith("the broker takes at most 2048 (its max-message-size)")
        assert node.metrics is not None
        assert f'tlex_tlc_refused_total{{tlc="{TLCS[0]}"}} 1.0' in generate_latest(node.metrics).decode()
        # no reconnect loop: one BI connection, its link never closed, one TLEX session each
        assert counters.amqp_connects == 1 and bridge.outbound.retried == 0
        assert not [r for r in records if r["event"] in ("tlex_amqp_link_closed", "tlex_amqp_failed")]
        assert bridge.supervisor is not None and bridge.supervisor.stats.sessions == 1
        assert [c.supervisor.stats.sessions for c in controllers] == [1, 1]
    finally:
        for controller in controllers:
            await controller.stop()
        if consumer is not None:
            await asyncio.to_thread(consumer.close)
        await https.close()
        await node.close()
        await sim.service.close()


async def test_a_node_pointed_at_a_running_simulator_publishes_at_once(pki: TestPki, tmp_path: Path) -> None:
    """A new user's path: the simulator runs (its controllers' MAPEMs, an hour apart, already went
    out to nobody), then a node starts with the [tlex] block --print-node-config gives: the
    controllers send their MAPEM at once to the new Broker session, so SPATEMs are published within
    seconds, not after the next MAPEM. IP_104 as the session sees it: the SPATEMs a controller had
    already sent on its own session when the Broker session took its identifiers reach the bridge
    before that MAPEM (TLEX routes each session's payloads as they come; how many depends on the
    machine's load) and are not published; none that came after the MAPEM is dropped."""
    from interchange.bridges.tlex.sim_cli import start_simulation
    from interchange.bridges.tlex.sim_facts import node_config as tlex_block

    simulation = await start_simulation(tmp_path / "sim", controllers=2, spatem_hz=10, mapem_interval=3600)
    node = None
    log = tmp_path / "node" / "node.log"

    def held_when_mapem_came() -> dict[str, int]:  # per controller, said when its SPATEMs flow
        return {r["details"]["tlc"]: r["details"]["held"] for r in complete_records(log)
                if r["event"] == "tlex_spatems_flow"}
    try:
        await asyncio.sleep(0.5)  # the controllers stream; no Broker session yet
        assert simulation.sent().get("MAPEM") == 2
        block = tomllib.loads(tlex_block(simulation.facts, actor=pki.identity(BRIDGE).directory))["tlex"]
        config = node_config(pki, NODE, tmp_path / "node").model_copy(
            update={"tlex": TlexBridgeConfig.model_validate(block)})
        node = await start(config)
        assert node.tlex is not None
        counters = node.tlex.counters
        tlcs = ("NLSM0001", "NLSM0002")
        await wait_for(lambda: all(counters.tlc(t).published >= 5 for t in tlcs),
                       "SPATEMs of both controllers within seconds", timeout=10)
        assert simulation.sent()["MAPEM"] == 4
        held = {t: counters.tlc(t).held_for_mapem for t in tlcs if counters.tlc(t).held_for_mapem}
        await wait_for(lambda: held_when_mapem_came().keys() == held.keys(), "tlex_spatems_flow of those that waited")
        assert held_when_mapem_came() == held  # every SPATEM dropped came before its controller's MAPEM
        assert counters.dropped.get("waits_for_mapem", 0) == sum(held.values())
        assert {t: counters.tlc(t).dropped for t in tlcs} == {t: held.get(t, 0) for t in tlcs}
    finally:
        if node is not None:
            await node.close()
        await simulation.close()


async def test_spatems_waiting_for_a_mapem_are_said_once_per_controller(sim_pki: TestPki, pki: TestPki,
                                                                       tmp_path: Path) -> None:
    """IP_104 as an operator sees it: controllers whose MAPEM went out before the bridge was there
    (the next one an hour away): the bridge logs at info, once per controller, that their SPATEMs
    wait for a MAPEM, counts each, and says when they flow (with how many were held)."""
    specs = [ControllerSpec(c.tlc_id, c.intersections, 10 + i) for i, c in enumerate(CONTROLLERS)]
    service, played = await start_virtual_sim(sim_pki, specs, spatem_hz=10, mapem_interval=3600)
    tlex = TlexBridgeConfig(api_url=service.service.api_url, authorization=service.broker.authorization,
                            server_name=SIM_HOST, trust_bundle=service.pki.trust_bundle, domain=DOMAIN,
                            actor=pki.identity(BRIDGE).directory, publisher_id="NL00001", originating_country="NL",
                            controllers=CONTROLLERS, backoff_initial=0.05, backoff_max=0.5)
    await asyncio.sleep(0.3)  # the MAPEMs go out to nobody
    config = node_config(pki, NODE, tmp_path / "node")
    node = await start(config.model_copy(update={"tlex": tlex, "admin": config.admin.model_copy(update={"port": 0})}))
    log = tmp_path / "node" / "node.log"
    try:
        assert node.tlex is not None
        counters = node.tlex.counters
        await wait_for(lambda: all(counters.tlc(t).held_for_mapem >= 10 for t in TLCS[:2]), "SPATEMs held back")
        assert counters.tlc(TLCS[0]).published == 0
        await wait_for(lambda: log.read_text().count('"tlex_spatems_wait_for_mapem"') == 2, "one record each")
        played.map_now(frozenset({TLCS[0]}))
        await wait_for(lambda: counters.tlc(TLCS[0]).published >= 5, "the first controller's SPATEMs")
        await wait_for(lambda: '"tlex_spatems_flow"' in log.read_text(), "tlex_spatems_flow")
        records = complete_records(log)
        waits = [r for r in records if r["event"] == "tlex_spatems_wait_for_mapem"]
        assert sorted(r["details"]["tlc"] for r in waits) == sorted(TLCS[:2]) and {r["level"] for r in waits} == {"info"}
        [flow] = [r for r in records if r["event"] == "tlex_spatems_flow"]
        assert flow["details"]["tlc"] == TLCS[0] and flow["details"]["held"] >= 10
        assert node.metrics is not None
        assert f'tlex_tlc_held_for_mapem_total{{tlc="{TLCS[1]}"}}' in generate_latest(node.metrics).decode()
    finally:
        await node.close()
        await played.stop()
        await service.service.close()
