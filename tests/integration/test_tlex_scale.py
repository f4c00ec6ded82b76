"""A TLEX bridge of 2,000 traffic lights starts: a real node (broker, II, bridge) and the simulator
playing 2,000 controllers (each its own zoom-18 tile, so no two capabilities share a shape), over
real TLS. The bridge registers all 6,000 capabilities, one delivery and its SREM subscriptions;
a SPATEM of the highest-numbered controller reaches a consumer, and an SREM for its
intersection reaches it (its SSEM comes back). As one selector text, the delivery target of more
than ~110 such controllers would be longer than the parser's 64 KiB (delivery ERROR: the node
does not start)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from proton import Message

from certs import TestPki
from interchange.app.node import start_node
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.controllers import ControllerSpec
from interchange.bridges.tlex.payloads import stand_in
from interchange.bridges.tlex.publication import tile
from interchange.testing.ii_harness import Consumer, Https, node_config, publish, wait_for
from interchange.testing.tlex_harness import DOMAIN, SIM_HOST, start_virtual_sim

NODE = "a.interchange.test"
BRIDGE, ACTOR = "tlex-bridge", "actor-a"
COUNT = 2000
START_S = 180.0  #: a bound on start-up for a loaded 2-core machine (it takes ~6 s on a quiet one)


def controllers() -> list[ControllerConfig]:
    """A national grid of crossings ~300 m apart: every controller has a tile of its own."""
    return [ControllerConfig(tlc_id=f"NLSM{i + 1:04d}", intersections=[f"5-{100 + i}"],
                             latitude=51.0 + (i % 50) * 0.003, longitude=4.0 + (i // 50) * 0.004) for i in range(COUNT)]


async def test_a_node_with_2000_traffic_lights_starts_and_bridges_the_last_one(
        sim_pki: TestPki, pki: TestPki, tmp_path: Path) -> None:
    configs = controllers()
    assert len({tile(c) for c in configs}) == COUNT
    specs = [ControllerSpec(c.tlc_id, c.intersections, 1000 + i) for i, c in enumerate(configs)]
    sim, played = await start_virtual_sim(sim_pki, specs, spatem_hz=0.2, mapem_interval=4.0)
    tlex = TlexBridgeConfig(api_url=sim.service.api_url, authorization=sim.broker.authorization, server_name=SIM_HOST,
                            trust_bundle=sim.pki.trust_bundle, domain=DOMAIN, actor=pki.identity(BRIDGE).directory,
                            publisher_id="NL00001", originating_country="NL", controllers=configs,
                            backoff_initial=0.05, backoff_max=0.5)
    config = node_config(pki, NODE, tmp_path / "node").model_copy(update={"tlex": tlex})
    node = https = bridge_https = consumer = None
    try:
        started = time.monotonic()
        node = await asyncio.wait_for(start_node(config), START_S)
        print(f"node with {COUNT} controllers started in {time.monotonic() - started:.1f} s")
        https, bridge_https = Https(pki, ACTOR, node, timeout_s=60), Https(pki, BRIDGE, node, timeout_s=60)
        status, caps = await bridge_https.get(f"/{BRIDGE}/capabilities")
        assert status == 200 and len(caps["capabilities"]) == 3 * COUNT
        status, deliveries = await bridge_https.get(f"/{BRIDGE}/deliveries")
        [delivery] = deliveries["deliveries"]
        assert delivery["status"] == "CREATED"
        target = node.addresses.target(delivery["endpoints"][0]["target"])
        assert target is not None and target.coverage is not None and len(target.coverage.publication_ids()) == 3 * COUNT
        status, subscriptions = await bridge_https.get(f"/{BRIDGE}/subscriptions")
        srem = subscriptions["subscriptions"]
        assert len(srem) > 1 and all(s["status"] == "CREATED" and len(s["selector"]) <= 1900 for s in srem)
        assert node.tlex is not None and len(node.tlex.srem_sources) == len(srem)

        last = configs[-1]
        status, body = await https.post(f"/{ACTOR}/subscriptions", {"subscriptions": [
            {"selector": f"publicationId IN ('NL00001:{last.tlc_id}-SPATEM', 'NL00001:{last.tlc_id}-SSEM')"}]})
        assert status == 200, body
        source = body["subscriptions"][0]["endpoints"][0]["source"]
        consumer = await asyncio.to_thread(Consumer, pki, ACTOR, node.amqps_port, NODE, source)
        spatem = await asyncio.to_thread(consumer.receive, 30)  # its MAPEM (every 4 s) first, then a SPATEM
        assert spatem is not None and spatem.properties["messageType"] == "SPATEM"
        area = node.tlex.translator.area(last, "SPATEM")  # IP_038's zoom-18 tile, IP_113's zoom-14 ones
        assert spatem.properties["quadTree"] == f",{tile(last)},{','.join(area)}," and spatem.properties["id"] == ",5-2099,"

        # an SREM for its intersection (listed in the last SREM subscription) reaches it; its SSEM comes back
        srem_caps = [{"application": {"messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
                                      "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1",
                                      "quadTree": ["1"]}, "metadata": {}}]
        assert (await https.post(f"/{ACTOR}/capabilities", {"capabilities": srem_caps}))[0] == 200
        status, body = await https.post(f"/{ACTOR}/deliveries", {"deliveries": [{"selector": "messageType = 'SREM'"}]})
        srem_target = body["deliveries"][0]["endpoints"][0]["target"]
        message = Message(body=stand_in("SREM", 7, "5-2099", 1), inferred=True, properties={
            "messageType": "SREM", "publisherId": "NL00002", "publicationId": "NL00002:srem",
            "originatingCountry": "NL", "protocolVersion": "SREM:2.1.1", "quadTree": f",{tile(last)},",
            "id": ",5-2099,"})
        assert await asyncio.to_thread(publish, pki, ACTOR, node.amqps_port, NODE, srem_target, [message]) == ["accepted"]
        await wait_for(lambda: played.from_broker.get(last.tlc_id), "the SREM at the last controller")
        assert list(played.from_broker) == [last.tlc_id]
        while (answer := await asyncio.to_thread(consumer.receive, 30)) is not None:
            if answer.properties["messageType"] == "SSEM":
                break
        assert answer is not None and answer.properties["publicationId"] == f"NL00001:{last.tlc_id}-SSEM"
    finally:
        if consumer is not None:
            await asyncio.to_thread(consumer.close)
        for client in (https, bridge_https):
            if client is not None:
                await client.close()
        if node is not None:
            await node.close()
        await played.stop()
        await sim.service.close()
