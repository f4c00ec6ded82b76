"""The II's HTTPS API on one real node: mutual TLS 1.3, identity checks, JSON in and out, every
status and every 4xx, broker targets and sources behind the answers, restart restore."""
from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.http.server import OPERATIONS
from ii_api.peers.discovery import DiscoveryConfig, Neighbour
from ii_api.settings.config import RequestLimits
from ii_api.storage.store import Store, db_path
from interchange.app.node import RunningNode
from interchange.broker.addresses import Scope, TargetSpec
from interchange.ground.ports import free_port
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv
from interchange.testing.ii_harness import (
    DOMAIN,
    WAIT_S,
    A,
    B,
    C,
    Consumer,
    Https,
    denm_capability,
    denm_message,
    ivim_capability,
    node_config,
    publish,
    relay,
    schema_1_database,
    seed_neighbours,
    start,
    wait_for,
)

DENM = "messageType = 'DENM'"


class Env:
    """Node A with neighbour B recorded as discovered, and HTTPS clients for several identities."""

    def __init__(self, pki: TestPki, node: RunningNode) -> None:
        self.pki, self.node = pki, node
        self.actor = Https(pki, "actor-a", node)
        self.other = Https(pki, "actor-x", node)
        self.b = Https(pki, B, node)  # a discovered interchange
        self.c = Https(pki, C, node)  # an interchange that is not discovered

    async def close(self) -> None:
        for client in (self.actor, self.other, self.b, self.c):
            await client.close()
        await self.node.close()


async def start_env(pki: TestPki, workdir: Path, **ii: Any) -> Env:
    seed_neighbours(workdir, [Neighbour(B, "127.0.0.1", 9, DOMAIN)])  # nobody listens there: pushes retry
    return Env(pki, await start(node_config(pki, A, workdir, **ii)))


@pytest.fixture
async def env(pki: TestPki, tmp_path: Path) -> AsyncIterator[Env]:
    made = await start_env(pki, tmp_path / "a")
    try:
        yield made
    finally:
        await made.close()


def subscription_request(*selectors: str, name: str = B, version: str = "1.2", **extra: Any) -> dict[str, Any]:
    return {"version": version, "name": name, "subscriptions": [{"selector": s, **extra} for s in selectors]}


# ------------------------------------------------------------------------------------ transport
async def test_tls13_with_client_certificate_only(env: Env, pki: TestPki) -> None:
    import aiohttp

    url = f"https://127.0.0.1:{env.node.ii_port}/openapi.json"
    no_cert = ssl.create_default_context(cafile=str(pki.trust_bundle))
    tls12 = client_context(TlsFiles.from_pki(pki.directory, "actor-a", with_crls=False))
    tls12.minimum_version = tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as session:
        for context in (no_cert, tls12):  # IP_069/090: no client certificate, or TLS 1.2: refused
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, OSError)):
                async with session.get(url, ssl=context, server_hostname=A) as response:
                    await response.read()
    assert (await env.actor.get("/openapi.json"))[0] == 200


async def test_openapi_document_lists_every_endpoint(env: Env) -> None:
    status, document = await env.actor.get("/openapi.json")
    assert status == 200 and document["openapi"].startswith("3.")
    for operation in OPERATIONS:
        entry = document["paths"][operation.path][operation.method.lower()]
        assert str(operation.status) in entry["responses"]
    schemas = document["components"]["schemas"]
    assert {"CapabilitiesMessage", "SubscriptionRequest", "SubscriptionPollResponse", "ErrorBody"} <= set(schemas)
    assert set(schemas["SubscriptionStatus"]["enum"]) == {
        "REQUESTED", "CREATED", "ILLEGAL", "NOT_VALID", "NO_OVERLAP", "RESUBSCRIBE", "ERROR"}


async def test_whoami_without_an_actor_policy_allows_everything(env: Env) -> None:
    """No [ii.actors] section: every actor may do everything, and whoami says so."""
    status, me = await env.actor.get("/whoami")
    assert status == 200 and me["name"] == "actor-a" and me["role"] == "actor" and me["allowed"] is True
    assert me["policyConfigured"] is False and me["path"] == "/actor-a"
    assert me["permissions"] == {"publishMessageTypes": ["*"], "publisherIds": ["*"], "subscribeMessageTypes": ["*"]}
    status, answer = await env.c.get("/whoami")  # an interchange nobody discovered is an actor here
    assert status == 200 and answer["name"] == C and answer["role"] == "actor"


# ------------------------------------------------------------------------------------ 4xx
async def test_forbidden_identities(env: Env) -> None:
    # IP_126: an actor, and an interchange that is not a discovered SRV target, on II endpoints
    for client in (env.actor, env.c):
        status, body = await client.post("/capabilities", {"version": "2.0", "name": client.cn, "capabilities": []})
        assert status == 403 and "IP_126" in body["error"]
        status, body = await client.post("/subscriptions", subscription_request(DENM, name=client.cn))
        assert status == 403
    # the name in the JSON must be the certificate's CN
    status, body = await env.b.post("/capabilities", {"version": "2.0", "name": C, "capabilities": []})
    assert status == 403 and body["field"] == "name"
    status, body = await env.b.post("/subscriptions", subscription_request(DENM, name=C))
    assert status == 403
    # the path name must be the CN: other owners' lists and items are not visible
    assert (await env.b.get(f"/{C}/subscriptions"))[0] == 403
    assert (await env.actor.get("/actor-x/capabilities"))[0] == 403
    assert (await env.actor.post("/actor-x/deliveries", {"deliveries": [{"selector": DENM}]}))[0] == 403
    assert (await env.actor.delete("/actor-x/subscriptions/1"))[0] == 403
    # an interchange may not use the local actor API, nor an actor claim another name in the body
    assert (await env.b.post(f"/{B}/capabilities", {"capabilities": [denm_capability()]}))[0] == 403
    status, body = await env.actor.post("/actor-a/subscriptions", {"name": "actor-x", "subscriptions": [
        {"selector": DENM}]})
    assert status == 403 and body["field"] == "name"


async def test_bad_request_bodies_name_the_field(env: Env) -> None:
    status, body = await env.actor.post("/actor-a/capabilities", raw=b'{"capabilities": [')
    assert status == 400 and body["error"].startswith("invalid JSON") and "field" not in body
    status, body = await env.actor.post("/actor-a/capabilities", raw=b"[]")
    assert status == 400 and body["field"] == "capabilities"
    wrong = denm_capability()
    wrong["application"]["quadTree"] = "1202021"
    status, body = await env.actor.post("/actor-a/capabilities", {"capabilities": [wrong]})
    assert status == 400 and body["field"] == "capabilities.0.application.quadTree"
    wrong = denm_capability()
    wrong["metadata"]["shardCount"] = "2"
    status, body = await env.actor.post("/actor-a/capabilities", {"capabilities": [wrong]})
    assert status == 400 and body["field"] == "capabilities.0.metadata.shardCount"
    unknown = denm_capability()
    unknown["application"]["messageType"] = "DATEX_2"
    status, body = await env.actor.post("/actor-a/capabilities", {"capabilities": [unknown]})
    assert status == 400 and "DATEX_2" in body["error"]
    bad_id = denm_capability(publication="x")
    bad_id["application"]["publicationId"] = "SE00001:x"
    status, body = await env.actor.post("/actor-a/capabilities", {"capabilities": [bad_id]})
    assert status == 400 and body["field"] == "capabilities.0.application.publicationId"
    status, body = await env.b.post("/subscriptions", {"version": "1.2", "name": B, "subscriptions": [
        {"selector": 42}]})
    assert status == 400 and body["field"] == "subscriptions.0.selector"
    status, body = await env.b.post("/subscriptions", subscription_request(DENM, version="3.0"))
    assert status == 400 and body["field"] == "version"
    status, body = await env.b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": "none"})
    assert status == 400 and body["field"] == "capabilities"


@pytest.mark.parametrize("item", ["\u00b2", "1\u00b9", "\u0663", "\uff11", "\U0001d7cf", "-1", "+1", " 1"])
async def test_malformed_ids_are_404_never_500(env: Env, item: str) -> None:
    """Ids of non-ASCII digits (superscripts, Arabic-Indic, full-width) answered 500."""
    for owner in ("actor-a/capabilities", "actor-a/deliveries", "actor-a/subscriptions"):
        for method in ("GET", "DELETE"):
            status, body = await env.actor.request(method, f"/{owner}/{item}")
            assert status == 404 and body["error"], (method, owner, item, status)
    status, _ = await env.b.get(f"/{B}/subscriptions/{item}")
    assert status == 404


async def test_not_found_method_not_allowed_conflict_too_large(pki: TestPki, tmp_path: Path) -> None:
    env = await start_env(pki, tmp_path / "a", limits=RequestLimits(capabilities_body_bytes=4096, body_bytes=2048))
    try:
        for path in ("/actor-a/capabilities/99", "/actor-a/deliveries/99", "/actor-a/subscriptions/99",
                     "/actor-a/subscriptions/abc", "/nothing/here/at/all"):
            status, body = await env.actor.get(path)
            assert status == 404 and body["error"], path
        assert (await env.actor.delete("/actor-a/capabilities/99"))[0] == 404
        assert (await env.b.get(f"/{B}/subscriptions/99"))[0] == 404
        assert (await env.b.delete(f"/{B}/subscriptions/99"))[0] == 404
        status, body = await env.actor.request("PUT", "/actor-a/capabilities", {})
        assert status == 405 and body["error"]
        status, body = await env.actor.get("/capabilities")
        assert status == 405
        # publicationId unique: within a request, locally, and across the network
        twice = {"capabilities": [denm_capability(), denm_capability()]}
        assert (await env.actor.post("/actor-a/capabilities", twice))[0] == 409
        assert (await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]}))[0] == 200
        status, body = await env.other.post("/actor-x/capabilities", {"capabilities": [denm_capability()]})
        assert status == 409 and "already in use" in body["error"]
        theirs = denm_capability(publisher="SE00001", publication="s", country="SE")
        assert (await env.b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": [theirs]}))[0] == 200
        status, body = await env.other.post("/actor-x/capabilities", {"capabilities": [theirs]})
        assert status == 409 and B in body["error"]
        status, body = await env.actor.post("/actor-a/capabilities", raw=b'{"capabilities": []' + b" " * 5000 + b"}")
        assert status == 413 and body["error"]
        # bounds per operation: 3,000 bytes fit a capabilities POST (4,096), not a subscriptions POST (2,048)
        padded = b'{"subscriptions": []' + b" " * 3000 + b"}"
        status, body = await env.actor.post("/actor-a/subscriptions", raw=padded)
        assert status == 413 and "at most 2048" in body["error"]
        status, body = await env.actor.post("/actor-a/capabilities", raw=b'{"capabilities": []' + b" " * 3000 + b"}")
        assert status == 400 and body["field"] == "capabilities"  # read and validated: within its bound
    finally:
        await env.close()


async def test_item_counts_bounded_per_operation(pki: TestPki, tmp_path: Path) -> None:
    """More items than the operation accepts is 413 naming the list, and nothing is stored."""
    env = await start_env(pki, tmp_path / "a", limits=RequestLimits(capabilities_per_request=2,
                                                                     subscriptions_per_request=1))
    try:
        three = {"capabilities": [denm_capability(publication=f"d{i}") for i in range(3)]}
        for client, path in ((env.actor, "/actor-a/capabilities"), (env.b, "/capabilities")):
            body = {**three, "version": "2.0", "name": client.cn}
            status, answer = await client.post(path, body)
            assert status == 413 and answer["field"] == "capabilities" and "at most 2" in answer["error"], path
        assert (await env.actor.get("/actor-a/capabilities"))[1]["capabilities"] == []
        two = [{"selector": "messageType = 'DENM'"}] * 2
        for client, path, key in ((env.actor, "/actor-a/subscriptions", "subscriptions"),
                                  (env.actor, "/actor-a/deliveries", "deliveries"),
                                  (env.b, "/subscriptions", "subscriptions")):
            status, answer = await client.post(path, {"version": "1.2", "name": client.cn, key: two})
            assert status == 413 and answer["field"] == key, path
    finally:
        await env.close()


# ------------------------------------------------------------------------------------ capability exchange
async def test_capability_exchange_replaces_theirs_answers_ours_keeps_custom_properties(env: Env) -> None:
    ours = denm_capability()
    ours["custom-nw-roadOperator"] = "NPRA"
    ours["application"]["custom-nw-lane"] = 2
    ours["application"]["unknownThing"] = True  # IP_092: ignored
    ours["metadata"]["infoUrl"] = "https://example.no/denm"  # NordicWay spelling, read as infoURL
    status, body = await env.actor.post("/actor-a/capabilities", {"capabilities": [ours]})
    assert status == 200
    definition = body["capabilities"][0]["definition"]
    assert definition["custom-nw-roadOperator"] == "NPRA" and definition["application"]["custom-nw-lane"] == 2
    assert "unknownThing" not in definition["application"]
    assert definition["metadata"] == {"infoURL": "https://example.no/denm"}
    cpm = {"application": {"messageType": "CPM", "publisherId": "SE00001", "publicationId": "SE00001:cpm",
                           "originatingCountry": "SE", "protocolVersion": "CPM:1.0", "quadTree": ["0"]},
           "metadata": {"redirectPolicy": "MANDATORY"}}
    poim = {"application": {"messageType": "POIM-PA", "publisherId": "SE00001", "publicationId": "SE00001:poim",
                            "originatingCountry": "SE", "protocolVersion": "POIM:1.0", "quadTree": ["1"]}}
    first = {"version": "2.0", "name": B, "capabilities": [cpm, poim], "futureProperty": {"x": 1}}
    status, body = await env.b.post("/capabilities", first)
    assert status == 200 and body["version"] == "2.0" and body["name"] == A
    assert body["capabilities"][0]["custom-nw-roadOperator"] == "NPRA"  # IP_109: only our actors' capabilities
    assert len(body["capabilities"]) == 1
    assert [c.application.messageType for c in env.node.ii.neighbour_capabilities(B)] == ["CPM", "POIM-PA"]
    status, _ = await env.b.post("/capabilities", {"version": "2.0", "name": B.upper(), "capabilities": [poim]})
    assert status == 200  # IP_094: replaced, not merged; names compare case-insensitively
    assert [c.application.messageType for c in env.node.ii.neighbour_capabilities(B)] == ["POIM-PA"]
    status, network = await env.actor.get("/actor-a/network/capabilities", params={"selector": "messageType = 'POIM-PA'"})
    assert status == 200 and [c["application"]["publicationId"] for c in network["capabilities"]] == ["SE00001:poim"]
    status, network = await env.actor.get("/actor-a/network/capabilities")
    assert len(network["capabilities"]) == 2
    status, body = await env.actor.get("/actor-a/network/capabilities", params={"selector": "messageType ="})
    assert status == 400 and body["field"] == "selector"


# ------------------------------------------------------------------------------------ neighbour subscriptions
async def test_neighbour_subscription_statuses_and_sources(env: Env, pki: TestPki) -> None:
    await env.actor.post("/actor-a/capabilities", {"capabilities": [
        denm_capability(tiles=["1202021", "0313322"]), ivim_capability(publication="ivim-r")]})
    long = DENM + " AND " + " AND ".join(f"causeCode <> {i}" for i in range(300))
    status, body = await env.b.post("/subscriptions", subscription_request(
        DENM + " AND quadTree LIKE '%,1202021%'", "messageType = ", "causeCode = 1", long, "messageType = 'CAM'",
        version="2.0"))  # NordicWay's version on the subscription API is accepted
    assert status == 202 and body["version"] == "1.2" and body["name"] == A
    subs = body["subscriptions"]
    assert [s["status"] for s in subs] == ["CREATED", "NOT_VALID", "ILLEGAL", "ILLEGAL", "NO_OVERLAP"]
    assert all(s["errorMessage"] for s in subs[1:]) and "errorMessage" not in subs[0]
    created = subs[0]
    assert created["path"] == f"/{B}/subscriptions/{created['id']}" and created["consumerCommonName"] == B
    endpoint = created["endpoints"][0]
    assert endpoint["host"] == "127.0.0.1" and endpoint["port"] == env.node.amqps_port
    source = env.node.addresses.source(endpoint["source"])
    assert source is not None and source.scope is Scope.LOCAL and source.consumers == {B}
    # poll (IP_108), list (IP_107)
    status, poll = await env.b.get(created["path"])
    assert status == 200 and poll["status"] == "CREATED" and poll["lastUpdatedTimestamp"] > 0
    assert poll["endpoints"] == created["endpoints"]
    status, listed = await env.b.get(f"/{B}/subscriptions")
    assert [s["id"] for s in listed["subscriptions"]] == [s["id"] for s in subs]
    # only the subscribed data flows, to the neighbour's certificate only
    status, deliveries = await env.actor.post("/actor-a/deliveries", {"deliveries": [{"selector": DENM}]})
    target = deliveries["deliveries"][0]["endpoints"][0]["target"]
    assert await relay(pki, "actor-a", env.node, target, [denm_message(body=b"here"), denm_message(
        tile="031332213323322232", body=b"spain")], B, env.node, endpoint["source"], count=1, quiet_s=0.5) == [b"here"]
    # DELETE: gone, source removed
    assert (await env.b.delete(created["path"]))[0] == 204
    assert env.node.addresses.source(endpoint["source"]) is None
    assert (await env.b.get(created["path"]))[0] == 404


async def test_requested_in_the_answer_created_when_polled(pki: TestPki, tmp_path: Path) -> None:
    env = await start_env(pki, tmp_path / "a", created_in_answer=False)
    try:
        await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
        status, body = await env.b.post("/subscriptions", subscription_request(DENM, "messageType = "))
        first, invalid = body["subscriptions"]
        assert status == 202 and first["status"] == "REQUESTED" and "endpoints" not in first
        assert invalid["status"] == "NOT_VALID"
        status, poll = await env.b.get(first["path"])
        assert poll["status"] == "CREATED" and poll["endpoints"][0]["port"] == env.node.amqps_port
    finally:
        await env.close()


async def test_redirect_policies_and_consumer_common_name(env: Env) -> None:
    await env.actor.post("/actor-a/capabilities", {"capabilities": [
        denm_capability(publication="m", redirectPolicy="MANDATORY"),
        denm_capability(publication="n", redirectPolicy="NOT_AVAILABLE")]})
    status, body = await env.b.post("/subscriptions", subscription_request(
        DENM + " AND publicationId = 'NO00001:m'", DENM + " AND publicationId = 'NO00001:n'"))
    assert [s["status"] for s in body["subscriptions"]] == ["NO_OVERLAP", "CREATED"]  # IP_134
    assert "redirectPolicy" in body["subscriptions"][0]["errorMessage"]
    status, body = await env.b.post("/subscriptions", subscription_request(DENM, consumerCommonName="actor-x"))
    redirected = body["subscriptions"][0]
    assert redirected["status"] == "CREATED" and redirected["consumerCommonName"] == "actor-x"
    spec = env.node.addresses.source(redirected["endpoints"][0]["source"])
    assert spec is not None and spec.consumers == {"actor-x"}
    assert spec.selector is not None and "NO00001:m" in spec.selector and "NO00001:n" not in spec.selector


async def test_resubscribe_when_a_matching_capability_appears(env: Env) -> None:
    await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
    status, body = await env.b.post("/subscriptions", subscription_request(DENM, "messageType = 'IVIM'"))
    denm_sub, ivim_sub = body["subscriptions"]
    assert (denm_sub["status"], ivim_sub["status"]) == ("CREATED", "NO_OVERLAP")
    await env.actor.post("/actor-a/capabilities", {"capabilities": [ivim_capability()]})
    assert (await env.b.get(ivim_sub["path"]))[1]["status"] == "RESUBSCRIBE"
    assert (await env.b.get(denm_sub["path"]))[1]["status"] == "CREATED"  # the IVIM is not relevant to it
    before = (await env.b.get(denm_sub["path"]))[1]["lastUpdatedTimestamp"]
    await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability(publication="denm-2")]})
    after = (await env.b.get(denm_sub["path"]))[1]
    assert after["status"] == "RESUBSCRIBE" and after["lastUpdatedTimestamp"] >= before


async def test_error_when_the_broker_source_cannot_be_created(env: Env) -> None:
    await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
    deep = "(" * 100 + DENM + ")" * 100  # valid, but nested too deeply once restricted to its grant
    before = set(env.node.addresses.sources)
    status, body = await env.b.post("/subscriptions", subscription_request(deep, DENM))
    failed, created = body["subscriptions"]
    assert status == 202 and (failed["status"], created["status"]) == ("ERROR", "CREATED")
    assert failed["errorMessage"].startswith("the source could not be created: invalid selector")
    assert "nested too deeply" in failed["errorMessage"] and not failed.get("endpoints")
    assert set(env.node.addresses.sources) - before == {created["endpoints"][0]["source"]}
    status, poll = await env.b.get(failed["path"])
    assert (status, poll["status"], poll["errorMessage"], poll["endpoints"]) == (
        200, "ERROR", failed["errorMessage"], [])


# ------------------------------------------------------------------------------------ local actor API
async def test_capabilities_get_and_delete_by_id(env: Env) -> None:
    status, body = await env.actor.post("/actor-a/capabilities", [denm_capability()])  # a bare list is accepted
    assert status == 200
    item = body["capabilities"][0]
    assert item["path"] == f"/actor-a/capabilities/{item['id']}"
    assert (await env.actor.get(item["path"]))[1] == item
    assert (await env.other.get(f"/actor-x/capabilities/{item['id']}"))[0] == 404  # not yours
    assert (await env.actor.get("/actor-a/capabilities"))[1]["capabilities"] == [item]
    assert (await env.actor.delete(item["path"]))[0] == 204
    assert (await env.actor.get("/actor-a/capabilities"))[1]["capabilities"] == []
    status, ours = await env.b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": []})
    assert ours["capabilities"] == []


async def test_deliveries_follow_the_actor_capabilities(env: Env, pki: TestPki) -> None:
    status, body = await env.actor.post("/actor-a/deliveries", {"deliveries": [
        {"selector": DENM}, {"selector": "messageType = = 'DENM'"}]})
    waiting, invalid = body["deliveries"]
    assert waiting["status"] == "NO_OVERLAP" and waiting["endpoints"] == []
    assert invalid["status"] == "NOT_VALID" and "position" in invalid["errorMessage"]
    status, caps = await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
    status, now = await env.actor.get(waiting["path"])
    assert now["status"] == "CREATED" and now["lastUpdatedTimestamp"] >= waiting["lastUpdatedTimestamp"]
    endpoint = now["endpoints"][0]
    assert endpoint == {"host": "127.0.0.1", "port": env.node.amqps_port, "target": endpoint["target"]}
    spec = env.node.addresses.target(endpoint["target"])
    assert spec is not None and spec.publishers == {"actor-a"}
    outcomes = await asyncio.to_thread(publish, pki, "actor-a", env.node.amqps_port, A, endpoint["target"], [
        denm_message(), denm_message(tile="031332213323322232"), denm_message(cause=7),
        denm_message(publication="other")])
    assert outcomes == ["accepted", "rejected", "rejected", "rejected"]  # only what fits the capability
    assert (await env.other.get("/actor-x/deliveries"))[1]["deliveries"] == []
    await env.actor.delete(caps["capabilities"][0]["path"])
    assert (await env.actor.get(waiting["path"]))[1]["status"] == "NO_OVERLAP"
    assert env.node.addresses.target(endpoint["target"]) is None
    assert (await env.actor.delete(waiting["path"]))[0] == 204
    assert [d["id"] for d in (await env.actor.get("/actor-a/deliveries"))[1]["deliveries"]] == [invalid["id"]]


async def test_local_subscriptions(env: Env, pki: TestPki) -> None:
    status, body = await env.actor.post("/actor-a/subscriptions", {"subscriptions": [
        {"selector": DENM + " AND quadTree LIKE '%,1202021%'"}, {"selector": "messageType ="},
        {"selector": "causeCode = 3"}, {"selector": DENM, "consumerCommonName": "actor-x"}]})
    created, invalid, broad, other_cn = body["subscriptions"]
    assert created["status"] == "CREATED" and created["lastUpdatedTimestamp"] > 0
    assert (invalid["status"], broad["status"], other_cn["status"]) == ("NOT_VALID", "ILLEGAL", "ILLEGAL")
    assert all(s["errorMessage"] and s["endpoints"] == [] for s in (invalid, broad, other_cn))
    source = created["endpoints"][0]["source"]
    spec = env.node.addresses.source(source)
    assert spec is not None and spec.consumers == {"actor-a"} and spec.scope is Scope.ALL
    # local data reaches a local subscription
    await env.other.post("/actor-x/capabilities", {"capabilities": [denm_capability(publisher="NL00001")]})
    _, deliveries = await env.other.post("/actor-x/deliveries", {"deliveries": [{"selector": DENM}]})
    target = deliveries["deliveries"][0]["endpoints"][0]["target"]
    consumer = await asyncio.to_thread(Consumer, pki, "actor-a", env.node.amqps_port, A, source)
    try:
        await asyncio.to_thread(publish, pki, "actor-x", env.node.amqps_port, A, target,
                                [denm_message(publisher="NL00001", body=b"local")])
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"local"
    finally:
        await asyncio.to_thread(consumer.close)
    assert (await env.actor.get(created["path"]))[1] == created
    assert len((await env.actor.get("/actor-a/subscriptions"))[1]["subscriptions"]) == 4
    assert (await env.other.get(created["path"].replace("actor-a", "actor-x")))[0] == 404
    assert (await env.actor.delete(created["path"]))[0] == 204
    assert env.node.addresses.source(source) is None


# ------------------------------------------------------------------------------------ IP_126 with real DNS
async def test_only_interchanges_found_in_dns_may_use_the_ii(pki: TestPki, tmp_path: Path,
                                                             dnsmasq: DnsmasqServer) -> None:
    dnsmasq.start(DnsRecords(srv=[Srv(DOMAIN, A, 9), Srv(DOMAIN, B, 9)],
                             hosts={A: "127.0.0.1", B: "127.0.0.1"}, zones=("other.test",)))
    discovery = DiscoveryConfig(dns_server=dnsmasq.host, dns_port=dnsmasq.port, domains=(DOMAIN, "other.test"),
                                interval_s=0.2, timeout_s=2.0)
    node = await start(node_config(pki, A, tmp_path / "a", discovery=discovery))
    b, c = Https(pki, B, node), Https(pki, C, node)
    try:
        await wait_for(lambda: node.ii is not None and node.ii.is_neighbour(B), "discovery of B")
        assert [n.name for n in node.ii.neighbours] == [B]  # not itself
        assert (await b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": []}))[0] == 200
        assert (await c.post("/capabilities", {"version": "2.0", "name": C, "capabilities": []}))[0] == 403
        # DNS now lists C and drops B: refused and accepted accordingly (IP_126)
        dnsmasq.reconfigure(DnsRecords(srv=[Srv(DOMAIN, A, 9), Srv(DOMAIN, C, 9)],
                                       hosts={A: "127.0.0.1", C: "127.0.0.1"}, zones=("other.test",)))
        await wait_for(lambda: node.ii.is_neighbour(C) and not node.ii.is_neighbour(B), "rediscovery")
        assert (await c.post("/capabilities", {"version": "2.0", "name": C, "capabilities": []}))[0] == 200
        assert (await b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": []}))[0] == 403
    finally:
        await b.close()
        await c.close()
        await node.close()


async def test_a_neighbour_gone_from_dns_keeps_its_subscriptions_for_the_grace_period_only(
        pki: TestPki, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    dns: DnsmasqServer = request.getfixturevalue("dnsmasq")
    with_b = DnsRecords(srv=[Srv(DOMAIN, A, 9), Srv(DOMAIN, B, 9)], hosts={A: "127.0.0.1", B: "127.0.0.1"})
    without_b = DnsRecords(srv=[Srv(DOMAIN, A, 9)], hosts={A: "127.0.0.1"})
    dns.start(with_b)
    discovery = DiscoveryConfig(dns_server=dns.host, dns_port=dns.port, domains=(DOMAIN,), interval_s=0.2,
                                timeout_s=2.0)
    workdir = tmp_path / "a"

    async def boot(grace_s: float) -> Env:
        return Env(pki, await start(node_config(pki, A, workdir, discovery=discovery, neighbour_grace_s=grace_s)))

    env = await boot(60)
    try:
        await wait_for(lambda: env.node.ii.is_neighbour(B), "discovery of B")
        await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
        _, body = await env.b.post("/subscriptions", subscription_request(DENM))
        sub = body["subscriptions"][0]
        source = sub["endpoints"][0]["source"]
        dns.reconfigure(without_b)
        await wait_for(lambda: not env.node.ii.is_neighbour(B), "B gone from DNS")
        refused, _ = await env.b.post("/subscriptions", subscription_request(DENM))
        assert refused == 403  # IP_126 at once (its GETs are answered as an actor's: 404)
        assert env.node.addresses.source(source) is not None and B in env.node.ii.departures.pending()
        dns.reconfigure(with_b)  # back within the grace period: nothing lost
        await wait_for(lambda: env.node.ii.is_neighbour(B), "B back in DNS")
        assert not env.node.ii.departures.pending()
        assert (await env.b.get(sub["path"]))[1]["status"] == "CREATED"
        dns.reconfigure(without_b)
        await wait_for(lambda: not env.node.ii.is_neighbour(B), "B gone again")
    finally:
        await env.close()
    with Store.open(workdir, read_only=True) as store:
        departed = store.neighbours.departures()
    assert list(departed) == [B]
    env = await boot(60)  # a restart keeps the departure time: the grace period neither restarts nor ends
    try:
        assert B in env.node.ii.departures.pending() and env.node.addresses.source(source) is not None
        with Store.open(workdir, read_only=True) as store:
            assert store.neighbours.departures() == departed
    finally:
        await env.close()
    env = await boot(0)  # the grace period is over: its subscriptions and their sources go
    try:
        await wait_for(lambda: env.node.addresses.source(source) is None, "the expiry")
        with Store.open(workdir, read_only=True) as store:
            assert store.incoming.list() == [] and store.neighbours.departures() == {}
        dns.reconfigure(with_b)  # found again later: its poll says 404, so it subscribes anew
        await wait_for(lambda: env.node.ii.is_neighbour(B), "B back in DNS")
        assert (await env.b.get(sub["path"]))[0] == 404
        _, body = await env.b.post("/subscriptions", subscription_request(DENM))
        assert body["subscriptions"][0]["status"] == "CREATED"
    finally:
        await env.close()


# ------------------------------------------------------------------------------------ restart
async def test_state_survives_a_restart(pki: TestPki, tmp_path: Path) -> None:
    amqps_port = free_port()
    env = await start_env(pki, tmp_path / "a", amqps_port=amqps_port)
    try:
        await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
        _, deliveries = await env.actor.post("/actor-a/deliveries", {"deliveries": [{"selector": DENM}]})
        _, local = await env.other.post("/actor-x/subscriptions", {"subscriptions": [{"selector": DENM}]})
        _, incoming = await env.b.post("/subscriptions", subscription_request(DENM))
        await env.b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": [
            ivim_capability(publisher="SE00001", country="SE")]})
        before = {path: (await client.get(path))[1] for client, path in (
            (env.actor, "/actor-a/capabilities"), (env.actor, "/actor-a/deliveries"),
            (env.other, "/actor-x/subscriptions"), (env.b, f"/{B}/subscriptions"))}
    finally:
        await env.close()
    env = await start_env(pki, tmp_path / "a", amqps_port=amqps_port)
    try:
        for client, path in ((env.actor, "/actor-a/capabilities"), (env.actor, "/actor-a/deliveries"),
                             (env.other, "/actor-x/subscriptions"), (env.b, f"/{B}/subscriptions")):
            assert (await client.get(path))[1] == before[path], path
        target = deliveries["deliveries"][0]["endpoints"][0]["target"]
        local_source = local["subscriptions"][0]["endpoints"][0]["source"]
        neighbour_source = incoming["subscriptions"][0]["endpoints"][0]["source"]
        assert env.node.addresses.target(target) is not None
        assert env.node.addresses.source(local_source) is not None
        spec = env.node.addresses.source(neighbour_source)
        assert spec is not None and spec.scope is Scope.LOCAL and spec.consumers == {B}
        assert [c.application.messageType for c in env.node.ii.neighbour_capabilities(B)] == ["IVIM"]
        consumer = await asyncio.to_thread(Consumer, pki, "actor-x", env.node.amqps_port, A, local_source)
        try:
            outcomes = await asyncio.to_thread(publish, pki, "actor-a", env.node.amqps_port, A, target,
                                               [denm_message(body=b"after restart")])
            assert outcomes == ["accepted"]
            got = await asyncio.to_thread(consumer.receive, WAIT_S)
            assert got is not None and bytes(got.body) == b"after restart"
        finally:
            await asyncio.to_thread(consumer.close)
    finally:
        await env.close()
    # Another AMQPS port: the endpoints advertise it, and say when they changed.
    env = await start_env(pki, tmp_path / "a")
    try:
        _, now = await env.other.get(local["subscriptions"][0]["path"])
        assert now["endpoints"][0]["port"] == env.node.amqps_port != amqps_port
        assert now["lastUpdatedTimestamp"] > local["subscriptions"][0]["lastUpdatedTimestamp"]
        _, poll = await env.b.get(incoming["subscriptions"][0]["path"])
        assert poll["endpoints"][0]["port"] == env.node.amqps_port
    finally:
        await env.close()


async def test_a_restart_neither_widens_nor_narrows_a_grant(pki: TestPki, tmp_path: Path) -> None:
    workdir, amqps_port = tmp_path / "a", free_port()
    env = await start_env(pki, workdir, amqps_port=amqps_port)
    try:
        _, caps = await env.actor.post("/actor-a/capabilities", {"capabilities": [
            denm_capability(), denm_capability(publication="denm-2")]})
        _, body = await env.b.post("/subscriptions", subscription_request(DENM))
        sub = body["subscriptions"][0]
        source = sub["endpoints"][0]["source"]
        spec = env.node.addresses.source(source)
        assert spec is not None and spec.selector is not None
        granted = spec.selector
        assert "'NO00001:denm-1', 'NO00001:denm-2'" in granted
        assert (await env.actor.delete(caps["capabilities"][1]["path"]))[0] == 204  # the grant stays as it was
    finally:
        await env.close()
    with Store.open(workdir) as store:  # registered while the node was down
        store.capabilities.add(actor_cn="actor-a", publication_id="NO00001:denm-3",
                               document=denm_capability(publication="denm-3"))
    env = await start_env(pki, workdir, amqps_port=amqps_port)
    try:
        spec = env.node.addresses.source(source)
        assert spec is not None and spec.selector == granted  # not without denm-2, not with denm-3
        _, poll = await env.b.get(sub["path"])
        assert poll["status"] == "RESUBSCRIBE" and poll["endpoints"] == sub["endpoints"]  # denm-3 is new
        _, deliveries = await env.actor.post("/actor-a/deliveries", {"deliveries": [{"selector": DENM}]})
        target = deliveries["deliveries"][0]["endpoints"][0]["target"]
        assert await relay(pki, "actor-a", env.node, target, [denm_message(publication="denm-3", body=b"not granted"),
                                                              denm_message(body=b"granted")],
                           B, env.node, source, count=1, quiet_s=0.3) == [b"granted"]
    finally:
        await env.close()


async def test_a_schema_1_database_is_upgraded_and_its_grants_computed_once(pki: TestPki, tmp_path: Path) -> None:
    workdir, address = tmp_path / "a", "ii-sub-0123456789abcdef"
    with closing(schema_1_database(db_path(workdir))) as old:
        old.execute("INSERT INTO neighbours VALUES (?, '127.0.0.1', 9, ?, 0, 0, 1, 1)", (B, DOMAIN))
        old.execute("INSERT INTO local_capabilities (actor_cn, publication_id, document, created_ms, last_updated_ms) "
                    "VALUES ('actor-a', 'NO00001:denm-1', ?, 1, 1)", (json.dumps(denm_capability()),))
        old.execute("INSERT INTO incoming_subscriptions (owner_cn, consumer_common_name, selector, status, endpoints, "
                    "source_address, created_ms, last_updated_ms) VALUES (?, ?, ?, 'CREATED', ?, ?, 1, 1)",
                    (B, B, DENM, json.dumps([{"host": "127.0.0.1", "port": 1, "source": address}]), address))
        old.commit()
    env = Env(pki, await start(node_config(pki, A, workdir)))
    try:
        spec = env.node.addresses.source(address)
        assert spec is not None and spec.consumers == {B} and spec.scope is Scope.LOCAL
        assert spec.selector is not None and spec.selector.endswith("publicationId IN ('NO00001:denm-1')")
        status, poll = await env.b.get(f"/{B}/subscriptions/1")
        assert (status, poll["status"]) == (200, "CREATED")
        assert poll["endpoints"] == [{"host": "127.0.0.1", "port": env.node.amqps_port, "source": address}]
        with Store.open(workdir, read_only=True) as store:
            assert store.schema_version == 3 and store.incoming.list()[0].granted == ["NO00001:denm-1"]
    finally:
        await env.close()


async def test_error_when_a_restored_source_collides_with_a_configured_target(pki: TestPki, tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    env = await start_env(pki, workdir)
    try:
        await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
        _, incoming = await env.b.post("/subscriptions", subscription_request(DENM, DENM + " AND causeCode = 1"))
        _, local = await env.other.post("/actor-x/subscriptions", {"subscriptions": [
            {"selector": DENM}, {"selector": DENM + " AND causeCode = 1"}]})
    finally:
        await env.close()
    (hit, spared), (local_hit, local_spared) = incoming["subscriptions"], local["subscriptions"]
    taken = [hit["endpoints"][0]["source"], local_hit["endpoints"][0]["source"]]
    # An operator's config now has targets at those addresses: the sources cannot come back.
    config = node_config(pki, A, workdir)
    config = config.model_copy(update={"broker": config.broker.model_copy(update={
        "targets": [TargetSpec(address=a, publishers=frozenset({"actor-a"})) for a in taken]})})
    env = Env(pki, await start(config))
    try:
        for client, failed, fine in ((env.b, hit, spared), (env.other, local_hit, local_spared)):
            _, poll = await client.get(failed["path"])
            assert poll["status"] == "ERROR" and poll["endpoints"] == []
            assert poll["errorMessage"] == (f"the source could not be created: address "
                                            f"{failed['endpoints'][0]['source']!r} is already a target")
            assert (await client.get(fine["path"]))[1]["status"] == "CREATED"
            assert env.node.addresses.source(fine["endpoints"][0]["source"]) is not None
        assert all(env.node.addresses.target(a) is not None and env.node.addresses.source(a) is None for a in taken)
    finally:
        await env.close()


# ------------------------------------------------------------------------------------ configuration
async def test_base_path_prefixes_every_route_and_path(pki: TestPki, tmp_path: Path) -> None:
    env = await start_env(pki, tmp_path / "a", base_path="/ii/v1")
    try:
        assert env.actor.base.endswith("/ii/v1")
        status, body = await env.actor.post("/actor-a/subscriptions", {"subscriptions": [{"selector": DENM}]})
        assert status == 200 and body["subscriptions"][0]["path"] == "/ii/v1/actor-a/subscriptions/1"
        status, document = await env.actor.get("/openapi.json")
        assert "/ii/v1/capabilities" in document["paths"]
        status, _ = await env.actor.request("GET", env.actor.base.replace("/ii/v1", "") + "/actor-a/subscriptions")
        assert status == 404
    finally:
        await env.close()


def test_ii_config_section(tmp_path: Path) -> None:
    from interchange.app.config import load_config
    from interchange.ground.errors import CliError

    path = tmp_path / "node.toml"
    path.write_text('name = "a.interchange.test"\n[ii]\nport = 8443\nbase_path = "/ii"\npoll_interval_s = 60\n'
                    '[ii.discovery]\ndns_server = "127.0.0.1"\ndns_port = 5353\n'
                    'domains = ["one.test", "two.test"]\ninterval_s = 600\n[ii.policy]\nmax_selector_length = 500\n')
    config = load_config(path)
    assert config.ii is not None and config.ii.base_path == "/ii" and config.ii.poll_interval_s == 60
    assert config.ii.discovery is not None and config.ii.discovery.domains == ("one.test", "two.test")
    assert config.ii.policy.max_selector_length == 500
    for bad, field in (("poll_interval_s = 301", "poll_interval_s"),  # IP_127
                       ("capability_repost_s = 90000", "capability_repost_s"),  # IP_091
                       ('base_path = "ii/"', "base_path")):
        path.write_text(f'name = "a.interchange.test"\n[ii]\n{bad}\n')
        with pytest.raises(CliError, match=field):
            load_config(path)
    path.write_text('name = "a.interchange.test"\n[ii.discovery]\ndns_server = "x"\ndomains = ["a.test"]\n'
                    'interval_s = 50000\n')  # IP_089: at most 12 h
    with pytest.raises(CliError, match="interval_s"):
        load_config(path)


async def test_ii_needs_tls(tmp_path: Path) -> None:
    from ii_api.settings.config import IIConfig
    from interchange.app.config import BrokerConfig, NodeConfig
    from interchange.app.node import start_node

    config = NodeConfig(name=A, data_dir=tmp_path, broker=BrokerConfig(port=0, plain_port=0, plain_identity="dev"),
                        ii=IIConfig(port=0))
    with pytest.raises(ValueError, match="needs \\[tls\\]"):
        await start_node(config)

