"""Authorization of local actors (IP_068): the [ii.actors] policy, over real HTTPS with
the test PKI's client certificates. Refusals are 403 with a JSON reason (and the field) and logged."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from certs import TestPki
from ii_api.decisions.actor_policy import ActorPolicy, ActorRule
from interchange.testing.broker_harness import complete_records
from interchange.testing.harness import B
from interchange.testing.ii_harness import Https, denm_capability, ivim_capability, wait_for
from test_ii_server import Env, start_env

POLICY = ActorPolicy(default="deny", rules=(
    ActorRule(cn="actor-a", publish_message_types=("DENM",), publisher_ids=("NO00001",),
              subscribe_message_types=("DENM", "IVIM")),
    ActorRule(cn="actor-[bc]", subscribe_message_types=("*",)),  # a pattern: consumers only
))


@pytest.fixture
async def env(pki: TestPki, tmp_path: Path) -> AsyncIterator[Env]:
    made = await start_env(pki, tmp_path / "a", actors=POLICY)
    try:
        yield made
    finally:
        await made.close()


def refusals(env: Env) -> list[dict[str, Any]]:
    path = env.node.config.log.path
    assert path is not None
    return [r for r in complete_records(path) if r["event"] == "ii_actor_refused"]


async def test_actor_no_rule_names_is_refused_everything(env: Env) -> None:
    """actor-x holds a certificate of the trust chain but no agreement: default deny."""
    for method, path, body in (("GET", "/actor-x/capabilities", None),
                               ("POST", "/actor-x/capabilities", {"capabilities": [denm_capability()]}),
                               ("POST", "/actor-x/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]}),
                               ("POST", "/actor-x/subscriptions", {"subscriptions": [{"selector": "messageType = 'DENM'"}]}),
                               ("GET", "/actor-x/network/capabilities", None)):
        status, answer = await env.other.request(method, path, body)
        assert status == 403 and "not a local actor" in answer["error"], (method, path, answer)
    logged = await wait_for(lambda: len(refusals(env)) >= 5 and refusals(env), "the refusals logged")
    assert {r["details"]["actor"] for r in logged} == {"actor-x"}
    assert all(r["level"] == "warning" and r["details"]["reason"] for r in logged)


async def test_publishing_limited_to_agreed_types_and_publisher_ids(env: Env) -> None:
    ok = await env.actor.post("/actor-a/capabilities", {"capabilities": [denm_capability()]})
    assert ok[0] == 200
    status, answer = await env.actor.post("/actor-a/capabilities", {"capabilities": [
        denm_capability(publication="d2"), ivim_capability()]})
    assert status == 403 and answer["field"] == "capabilities.1.application.messageType" and "IVIM" in answer["error"]
    other_publisher = denm_capability(publisher="SE00001", country="SE")
    status, answer = await env.actor.post("/actor-a/capabilities", {"capabilities": [other_publisher]})
    assert status == 403 and answer["field"] == "capabilities.0.application.publisherId"
    assert [c["definition"]["application"]["publicationId"]
            for c in (await env.actor.get("/actor-a/capabilities"))[1]["capabilities"]] == ["NO00001:denm-1"]
    assert (await env.actor.post("/actor-a/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]}))[0] == 200
    async with _client(env, "actor-b") as consumer:  # may subscribe, may not publish
        status, answer = await consumer.post("/actor-b/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
        assert status == 403 and "may not publish" in answer["error"]
        status, answer = await consumer.post("/actor-b/capabilities", {"capabilities": [denm_capability(publication="b")]})
        assert status == 403
    reasons = [r["details"]["reason"] for r in refusals(env)]
    assert any("IVIM" in r for r in reasons) and any("SE00001" in r for r in reasons)


async def test_subscriptions_must_exclude_types_not_agreed(env: Env) -> None:
    for selector in ("messageType = 'DENM'", "messageType IN ('DENM', 'IVIM') AND quadTree LIKE '%,1202%'"):
        status, answer = await env.actor.post("/actor-a/subscriptions", {"subscriptions": [{"selector": selector}]})
        assert status == 200, answer
    for selector in ("messageType = 'CAM'", "quadTree LIKE '%,1202%'", "messageType <> 'DENM' AND publisherId = 'X'"):
        status, answer = await env.actor.post("/actor-a/subscriptions", {"subscriptions": [{"selector": selector}]})
        assert status == 403 and answer["field"] == "subscriptions.0.selector", (selector, answer)
        assert "messageType IN ('DENM', 'IVIM')" in answer["error"]
    async with _client(env, "actor-c") as anything:  # '*': every type
        status, answer = await anything.post("/actor-c/subscriptions",
                                             {"subscriptions": [{"selector": "quadTree LIKE '%,1202%'"}]})
        assert status == 200, answer


async def test_neighbours_are_not_subject_to_the_actor_policy(env: Env) -> None:
    """The policy is about local actors; interchanges are authorized by DNS (IP_126)."""
    status, _ = await env.b.post("/capabilities", {"version": "2.0", "name": B, "capabilities": []})
    assert status == 200


async def test_whoami_says_who_the_node_sees_and_what_it_may_do(env: Env) -> None:
    """GET /whoami: the certificate's CN, its role, and the agreement the policy holds for it."""
    status, me = await env.actor.get("/whoami")
    assert status == 200
    assert me == {"name": "actor-a", "interchange": env.node.config.name, "role": "actor", "allowed": True,
                  "policyConfigured": True, "path": "/actor-a",
                  "permissions": {"publishMessageTypes": ["DENM"], "publisherIds": ["NO00001"],
                                  "subscribeMessageTypes": ["DENM", "IVIM"]}}
    status, stranger = await env.other.get("/whoami")  # actor-x: no rule names it
    assert status == 200 and stranger["role"] == "actor" and stranger["allowed"] is False
    assert "not a local actor" in stranger["reason"] and "permissions" not in stranger
    status, neighbour = await env.b.get("/whoami")
    assert status == 200 and neighbour["role"] == "interchange" and neighbour["name"] == B
    assert "permissions" not in neighbour and "II endpoints" in neighbour["reason"]


def test_policy_rules() -> None:
    assert POLICY.rule("actor-b") is not None and POLICY.rule("actor-d") is None
    assert ActorPolicy(default="allow").check_subscriptions("anyone", ["quadTree LIKE '%,1%'"]) is None
    with pytest.raises(ValueError, match="unknown message types"):
        ActorRule(cn="x", publish_message_types=("DENMS",))


@contextlib.asynccontextmanager
async def _client(env: Env, cn: str) -> AsyncIterator[Https]:
    """An Https client of ``cn`` for the test, closed after."""
    https = Https(env.pki, cn, env.node)
    try:
        yield https
    finally:
        await https.close()
