"""Sans-I/O subscription logic: policy, capability selectors, incoming decisions, what to request
from neighbours, the outgoing state machine and local subscription status (no sockets)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jms_selectors
from ii_api.decisions.capability_selector import capabilities_coverage, capability_selector, granted_selector, quote
from ii_api.decisions.subscriptions import (
    DeleteRemote,
    Finished,
    LocalSubscriptionView,
    OutgoingKey,
    OutgoingSubscriptionMachine,
    OutgoingView,
    Persist,
    Phase,
    PollStatus,
    PostRequest,
    Schedule,
    StartFederation,
    StopFederation,
    Timing,
    decide_incoming,
    desired_outgoing,
    local_subscription_state,
    plan_outgoing,
    recheck_incoming,
    redirect_compliant,
    wants_redirect,
)
from ii_api.selectors.matching import capability_matches_message
from ii_api.selectors.policy import SubscriptionPolicy, is_constrained
from ii_api.wire.models import Capability, Endpoint, LocalEndpoint, SubscriptionStatus
from interchange.broker.addresses import TargetSpec
from interchange.broker.router import target_acceptor

S = SubscriptionStatus
POLICY = SubscriptionPolicy()
A = "a.interchange.test"
B = "b.interchange.test"


def cap(publication: str = "denm-1", *, kind: str = "DENM", tiles: tuple[str, ...] = ("1202021",),
        publisher: str = "NO00001", redirect: str | None = None, shards: int | None = None,
        causes: list[int] | None = None) -> Capability:
    app: dict[str, Any] = {"messageType": kind, "publisherId": publisher,
                           "publicationId": f"{publisher}:{publication}", "originatingCountry": "NO",
                           "protocolVersion": f"{kind}:1.3.1", "quadTree": list(tiles)}
    if kind == "DENM":
        app["causeCode"] = causes
    metadata: dict[str, Any] = {}
    if redirect:
        metadata["redirectPolicy"] = redirect
    if shards:
        metadata["shardCount"] = shards
    return Capability.model_validate({"application": app, "metadata": metadata})


def ast(text: str) -> Any:
    return jms_selectors.compile(text).ast


# ---------------------------------------------------------------------------------- policy
@pytest.mark.parametrize("text", [
    "messageType = 'DENM'",
    "quadTree LIKE '%,1202%' AND causeCode = 3",
    "'NO' = originatingCountry",
    "publisherId IN ('NO00001', 'SE00002')",
    "(messageType = 'DENM' OR messageType = 'IVIM') AND causeCode > 2",
    "messageType = 'DENM' OR quadTree LIKE '%,0313%'",
])
def test_policy_accepts_selectors_that_narrow_every_alternative(text: str) -> None:
    assert is_constrained(ast(text))
    assert POLICY.check(text, ast(text)) is None


@pytest.mark.parametrize("text", [
    "", "causeCode = 3", "messageType <> 'CAM'", "NOT messageType = 'CAM'", "messageType = 'DENM' OR 1 = 1",
    "messageType IS NOT NULL", "quadTree LIKE '%'", "messageType NOT IN ('CAM')", "messageType = publisherId",
])
def test_policy_refuses_too_broad_selectors(text: str) -> None:
    reason = POLICY.check(text, ast(text))
    assert reason is not None and "too broad" in reason


def test_policy_refuses_too_long_selectors_and_too_many_subscriptions() -> None:
    policy = SubscriptionPolicy(max_selector_length=40, max_subscriptions_per_owner=2)
    long = "messageType = 'DENM' AND originatingCountry = 'NO'"
    assert "too long" in (policy.check(long, ast(long)) or "")
    short = "messageType = 'DENM'"
    assert policy.check(short, ast(short), existing=1) is None
    assert "too many" in (policy.check(short, ast(short), existing=2) or "")


# ---------------------------------------------------------------------------------- capability selectors
def test_capability_selector_terms() -> None:
    selector = capability_selector(cap(tiles=("1202021", "0313"), shards=3, causes=[1, 94]))
    assert selector == ("messageType = 'DENM' AND publisherId = 'NO00001' AND publicationId = 'NO00001:denm-1' AND "
                        "originatingCountry = 'NO' AND protocolVersion = 'DENM:1.3.1' AND "
                        "(quadTree LIKE '%,1202021%' OR quadTree LIKE '%,0313%') AND "
                        "(causeCode = 1 OR causeCode = 94) AND shardId BETWEEN 1 AND 3")
    assert quote("it's") == "'it''s'"


tile = st.text("0123", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(cap_tiles=st.lists(tile, min_size=1, max_size=3), message_tiles=st.lists(tile, min_size=1, max_size=3),
       causes=st.one_of(st.none(), st.lists(st.integers(-1, 5), min_size=1, max_size=3)),
       cause=st.integers(-1, 5), shards=st.one_of(st.none(), st.integers(1, 4)),
       shard_id=st.one_of(st.none(), st.integers(0, 5)), kind=st.sampled_from(["DENM", "IVIM"]),
       publication=st.sampled_from(["denm-1", "other"]))
def test_capability_selector_accepts_exactly_what_fits_the_capability(
        cap_tiles: list[str], message_tiles: list[str], causes: list[int] | None, cause: int, shards: int | None,
        shard_id: int | None, kind: str, publication: str) -> None:
    capability = cap(tiles=tuple(cap_tiles), causes=causes, shards=shards)
    properties: dict[str, Any] = {"messageType": kind, "publisherId": "NO00001",
                                  "publicationId": f"NO00001:{publication}", "originatingCountry": "NO",
                                  "protocolVersion": "DENM:1.3.1", "quadTree": "," + ",".join(message_tiles) + ",",
                                  "causeCode": cause}
    if shard_id is not None:
        properties["shardId"] = shard_id
    expected = capability_matches_message(capability.application.model_dump(mode="json"), properties,
                                          metadata=capability.metadata.model_dump(mode="json"))
    assert jms_selectors.compile(capability_selector(capability)).matches(properties) is expected


def test_granted_selector_restricts_to_publication_ids_even_after_a_comment() -> None:
    selector = granted_selector("messageType = 'DENM' -- all of them\n", ["NO00001:b", "NO00001:a"])
    assert selector.endswith("publicationId IN ('NO00001:a', 'NO00001:b')")
    compiled = jms_selectors.compile(selector)
    assert compiled.matches({"messageType": "DENM", "publicationId": "NO00001:a"})
    assert not compiled.matches({"messageType": "DENM", "publicationId": "NO00001:c"})
    assert granted_selector("messageType = 'DENM'", []).endswith("AND FALSE")


def test_granted_selector_keeps_minus_signs_that_are_no_comment() -> None:
    """``causeCode = 1 -- offset`` has no line break after the dashes: two minus signs, as the Java
    engines read it (causeCode = 1 + offset). Closing it off with a line break must not make them
    a comment that drops the offset."""
    alone = jms_selectors.compile("causeCode = 1 -- offset")
    granted = jms_selectors.compile(granted_selector("causeCode = 1 -- offset", ["NO00001:a"]))
    for props in ({"causeCode": 3, "offset": 2}, {"causeCode": 1, "offset": 2}, {"causeCode": 1}):
        assert granted.evaluate({**props, "publicationId": "NO00001:a"}) is alone.evaluate(props)
    assert not granted.matches({"causeCode": 3, "offset": 2, "publicationId": "NO00001:c"})


def test_delivery_selector_keeps_minus_signs_that_are_no_comment() -> None:
    """The same for an actor's delivery: its target takes the delivery's selector as it is, beside
    the capabilities it covers (no text is joined to it)."""
    spec = TargetSpec(address="t", selector="causeCode = 1 -- offset", coverage=capabilities_coverage([cap(causes=[1, 3])]))
    accepts, _ = target_acceptor(spec)
    assert accepts is not None
    fitting = {"messageType": "DENM", "publisherId": "NO00001", "publicationId": "NO00001:denm-1",
               "originatingCountry": "NO", "protocolVersion": "DENM:1.3.1", "quadTree": ",12020213,", "offset": 2}
    assert accepts({**fitting, "causeCode": 3}) is True
    assert accepts({**fitting, "causeCode": 1}) is False


@pytest.mark.parametrize("selector", ["TRUE", " true ", "TRUE AND offset IS NULL", "offset IS NULL", "FALSE"])
def test_a_delivery_selector_of_true_leaves_the_capabilities_to_decide(selector: str) -> None:
    """A delivery for all of its actor's capabilities (selector TRUE, as the IF2 bridge's) is not
    evaluated for each message: the capabilities alone decide, as they would with it. Any other
    selector still counts."""
    spec = TargetSpec(address="t", selector=selector, coverage=capabilities_coverage([cap(causes=[1, 3])]))
    accepts, coverage = target_acceptor(spec)
    assert accepts is not None and coverage is not None
    fitting = {"messageType": "DENM", "publisherId": "NO00001", "publicationId": "NO00001:denm-1",
               "originatingCountry": "NO", "protocolVersion": "DENM:1.3.1", "quadTree": ",12020213,", "causeCode": 3}
    if selector.strip().upper() == "TRUE":
        assert accepts is coverage  # nothing evaluated beside the capabilities
    assert accepts(fitting) is (selector != "FALSE")
    assert accepts({**fitting, "causeCode": 2}) is False  # not a capability's
    assert accepts({**fitting, "offset": 1}) is (selector.strip().upper() == "TRUE")

# ---------------------------------------------------------------------------------- incoming decisions
def test_incoming_statuses() -> None:
    caps = [cap("denm-1"), cap("ivim-1", kind="IVIM")]
    invalid = decide_incoming("messageType = ", None, B, caps, POLICY)
    assert invalid.status is S.NOT_VALID and "position" in (invalid.error or "")
    illegal = decide_incoming("causeCode = 1", None, B, caps, POLICY)
    assert illegal.status is S.ILLEGAL and "too broad" in (illegal.error or "")
    none = decide_incoming("messageType = 'CAM'", None, B, caps, POLICY)
    assert none.status is S.NO_OVERLAP and none.error
    created = decide_incoming("messageType = 'DENM'", None, B, caps, POLICY)
    assert created.status is S.CREATED and created.grant == {"NO00001:denm-1"} and created.consumer == B
    assert created.source_selector == "(messageType = 'DENM'\n) AND publicationId IN ('NO00001:denm-1')"
    many = decide_incoming("messageType = 'DENM'", None, B, caps, SubscriptionPolicy(max_subscriptions_per_owner=3),
                           existing=3)
    assert many.status is S.ILLEGAL


def test_redirect_policies_ip_133_134() -> None:
    assert not wants_redirect(None, B) and not wants_redirect("B.Interchange.Test", B) and wants_redirect("actor-x", B)
    mandatory, optional, never = cap("m", redirect="MANDATORY"), cap("o"), cap("n", redirect="NOT_AVAILABLE")
    assert [redirect_compliant(c, True) for c in (mandatory, optional, never)] == [True, True, False]
    assert [redirect_compliant(c, False) for c in (mandatory, optional, never)] == [False, True, True]
    # all matching capabilities refuse the mode: NO_OVERLAP
    refused = decide_incoming("messageType = 'DENM'", "actor-x", B, [never], POLICY)
    assert refused.status is S.NO_OVERLAP and "IP_134" in (refused.error or "")
    assert decide_incoming("messageType = 'DENM'", None, B, [mandatory], POLICY).status is S.NO_OVERLAP
    # only some comply: the subscription covers only those
    partial = decide_incoming("messageType = 'DENM'", "actor-x", B, [mandatory, optional, never], POLICY)
    assert partial.status is S.CREATED and partial.consumer == "actor-x"
    assert partial.grant == {"NO00001:m", "NO00001:o"}
    plain = decide_incoming("messageType = 'DENM'", B, B, [mandatory, optional, never], POLICY)
    assert plain.grant == {"NO00001:o", "NO00001:n"} and plain.consumer == B


def test_resubscribe_when_a_new_relevant_capability_appears() -> None:
    first = decide_incoming("messageType = 'DENM'", None, B, [cap("denm-1")], POLICY)
    assert recheck_incoming(S.CREATED, first.grant, "messageType = 'DENM'", None, B, [cap("denm-1")]) is None
    assert recheck_incoming(S.CREATED, first.grant, "messageType = 'DENM'", None, B,
                            [cap("denm-1"), cap("ivim", kind="IVIM")]) is None
    assert recheck_incoming(S.CREATED, first.grant, "messageType = 'DENM'", None, B,
                            [cap("denm-1"), cap("denm-2")]) is S.RESUBSCRIBE
    # a new capability whose redirect policy forbids the request is not relevant
    assert recheck_incoming(S.CREATED, first.grant, "messageType = 'DENM'", None, B,
                            [cap("denm-1"), cap("denm-2", redirect="MANDATORY")]) is None
    assert recheck_incoming(S.NO_OVERLAP, frozenset(), "messageType = 'DENM'", None, B, [cap()]) is S.RESUBSCRIBE
    for status in (S.NOT_VALID, S.ILLEGAL, S.RESUBSCRIBE, S.ERROR):
        assert recheck_incoming(status, frozenset(), "messageType = 'DENM'", None, B, [cap()]) is None


# ---------------------------------------------------------------------------------- what to request
def test_desired_outgoing_shares_selectors_and_honours_redirect_policies() -> None:
    subs = [LocalSubscriptionView(1, "actor-1", "messageType = 'DENM'"),
            LocalSubscriptionView(2, "actor-2", "messageType = 'DENM'"),
            LocalSubscriptionView(3, "actor-3", "messageType = 'DENM'", redirect=True),
            LocalSubscriptionView(4, "actor-4", "messageType = 'IVIM'"),
            LocalSubscriptionView(5, "actor-5", "not a selector (")]
    neighbours = {A: [cap("a")], B: [cap("b", redirect="MANDATORY")], "c.x": []}
    wanted = desired_outgoing(subs, neighbours)
    assert wanted == {
        OutgoingKey(A, "messageType = 'DENM'"): frozenset({1, 2}),  # IP_106: asked once for both
        OutgoingKey(A, "messageType = 'DENM'", "actor-3"): frozenset({3}),
        OutgoingKey(B, "messageType = 'DENM'", "actor-3"): frozenset({3}),  # IP_133: B only allows redirects
    }
    create, withdraw = plan_outgoing(wanted, [OutgoingKey(A, "messageType = 'DENM'"), OutgoingKey(A, "old")])
    assert create == sorted(set(wanted) - {OutgoingKey(A, "messageType = 'DENM'")})
    assert withdraw == [OutgoingKey(A, "old")]


# ---------------------------------------------------------------------------------- the outgoing machine
TIMING = Timing(poll_interval_s=300.0, first_poll_s=0.05, retry_min_s=0.5, retry_max_s=4.0, delete_attempts=3)
ENDPOINT = Endpoint(host="127.0.0.1", port=5671, source="s1")
KEY = OutgoingKey(A, "messageType = 'DENM'")


def machine(key: OutgoingKey = KEY) -> OutgoingSubscriptionMachine:
    return OutgoingSubscriptionMachine(key, TIMING)


def test_outgoing_lifecycle_created_federates_and_polls_every_interval() -> None:
    m = machine()
    assert m.start(0.0) == [PostRequest()]
    actions = m.post_succeeded(1.0, "7", "/c/subscriptions/7", S.CREATED, [ENDPOINT])
    assert actions == [StartFederation((ENDPOINT,)), Persist(), Schedule(301.0)]
    assert m.phase is Phase.ACTIVE and m.stored_status == "CREATED"
    assert m.on_timer(100.0) == []  # not due yet
    assert m.on_timer(301.0) == [PollStatus("/c/subscriptions/7")]
    # same answer: nothing to persist, links untouched, next poll within the interval (IP_127)
    assert m.poll_succeeded(302.0, S.CREATED, [ENDPOINT]) == [Schedule(602.0)]
    moved = Endpoint(host="127.0.0.2", port=5671, source="s1")
    assert m.poll_succeeded(603.0, S.CREATED, [moved]) == [StartFederation((moved,)), Persist(), Schedule(903.0)]


def test_outgoing_requested_is_polled_fast_then_slower() -> None:
    m = machine()
    m.start(0.0)
    assert m.post_succeeded(0.0, "1", "/p/1", S.REQUESTED)[-1] == Schedule(0.05)
    delays = []
    now = 0.05
    for _ in range(14):
        m.on_timer(now)
        schedule = m.poll_succeeded(now, S.REQUESTED)[-1]
        assert isinstance(schedule, Schedule) and schedule.at is not None
        delays.append(round(schedule.at - now, 3))
        now = schedule.at
    assert delays[:3] == [0.1, 0.2, 0.4] and max(delays) == 300.0
    actions = m.poll_succeeded(now, S.CREATED, [ENDPOINT])
    assert StartFederation((ENDPOINT,)) in actions and actions[-1] == Schedule(now + 300.0)


def test_outgoing_resubscribe_deletes_then_finishes_so_that_it_is_requested_anew() -> None:
    m = machine()
    m.start(0.0)
    m.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    actions = m.poll_succeeded(5.0, S.RESUBSCRIBE)
    assert actions == [StopFederation(), Persist(), Schedule(None), DeleteRemote("/p/1")]
    assert m.phase is Phase.DELETING and m.stored_status == "DELETING"
    assert m.delete_succeeded(6.0) == [Finished("deleted at the neighbour")]
    assert m.phase is Phase.DONE


def test_outgoing_failures_back_off_and_404_means_forgotten() -> None:
    m = machine()
    m.start(0.0)
    schedules = [m.post_failed(0.0, "refused", 503)[-1] for _ in range(5)]
    assert [s.at for s in schedules] == [0.5, 1.0, 2.0, 4.0, 4.0]  # doubling, capped
    assert m.on_timer(4.0) == [PostRequest()]
    m.post_succeeded(4.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert m.poll_failed(5.0, "timeout")[-1] == Schedule(5.5)  # links stay, retried
    assert m.poll_failed(6.0, "gone", 404) == [StopFederation(), Finished("the neighbour no longer knows subscription 1")]


def test_outgoing_withdraw_before_and_after_the_request() -> None:
    fresh = machine()
    fresh.start(0.0)
    assert fresh.withdraw(0.0) == [Finished("withdrawn before it was requested")]
    active = machine()
    active.start(0.0)
    active.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert active.withdraw(1.0) == [StopFederation(), Persist(), Schedule(None), DeleteRemote("/p/1")]
    assert active.delete_failed(2.0, "boom", 500)[-1] == Schedule(2.5)
    assert active.delete_failed(3.0, "boom", 500)[-1] == Schedule(4.0)
    assert active.delete_failed(4.0, "boom", 500) == [
        Finished("gave up deleting at the neighbour after 3 attempts: boom")]
    gone = machine()
    gone.start(0.0)
    gone.post_succeeded(0.0, "1", "/p/1", S.CREATED)
    gone.withdraw(0.0)
    assert gone.delete_failed(1.0, "not found", 404) == [Finished("already gone at the neighbour")]
    # withdrawn while the request was on its way: deleted as soon as it is known
    racing = machine()
    racing.start(0.0)
    racing.withdraw(0.1)
    assert racing.post_succeeded(0.2, "9", "/p/9", S.CREATED, [ENDPOINT])[-1] == DeleteRemote("/p/9")


def test_outgoing_refusals_stop_links_and_redirects_never_federate() -> None:
    m = machine()
    m.start(0.0)
    m.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert m.poll_succeeded(1.0, S.NO_OVERLAP, [], "no longer") == [StopFederation(), Persist(), Schedule(301.0)]
    redirect = machine(OutgoingKey(A, "messageType = 'DENM'", "actor-x"))
    redirect.start(0.0)
    assert redirect.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT]) == [Persist(), Schedule(300.0)]
    assert not redirect.federates


def test_outgoing_nudge_polls_now_and_restore_resumes() -> None:
    m = machine()
    m.start(0.0)
    m.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert m.nudge(10.0) == [Schedule(None), PollStatus("/p/1")]
    restored = OutgoingSubscriptionMachine.restore(KEY, "CREATED", "1", "/p/1", [ENDPOINT], None, TIMING)
    assert restored.phase is Phase.ACTIVE
    assert restored.start(0.0) == [StartFederation((ENDPOINT,)), PollStatus("/p/1")]
    deleting = OutgoingSubscriptionMachine.restore(KEY, "DELETING", "1", "/p/1", [], None, TIMING)
    assert deleting.start(0.0) == [DeleteRemote("/p/1")]
    new = OutgoingSubscriptionMachine.restore(KEY, "NEW", None, None, [], None, TIMING)
    assert new.start(0.0) == [PostRequest()]
    retired = OutgoingSubscriptionMachine.restore(KEY, "CREATED", "1", "/p/1", [ENDPOINT], None, TIMING)
    retired.withdrawn = True
    assert retired.start(0.0)[-1] == DeleteRemote("/p/1")


def test_outgoing_forgotten_at_once_when_the_neighbour_left_dns() -> None:
    m = machine()
    m.start(0.0)
    m.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert m.withdraw(1.0) == [StopFederation(), Persist(), Schedule(None), DeleteRemote("/p/1")]
    assert m.neighbour_gone(1.0) == [Finished("the neighbour is no longer discovered in DNS")]  # no DELETE retries
    assert m.phase is Phase.DONE
    linked = machine()
    linked.start(0.0)
    linked.post_succeeded(0.0, "1", "/p/1", S.CREATED, [ENDPOINT])
    assert linked.neighbour_gone(1.0)[0] == StopFederation()


# ---------------------------------------------------------------------------------- local subscription status
def test_local_subscription_state() -> None:
    local = LocalEndpoint(host="127.0.0.1", port=5671, source="ii-local-1")
    created = OutgoingView(A, Phase.ACTIVE, S.CREATED, (ENDPOINT,))
    refused = OutgoingView(B, Phase.ACTIVE, S.ILLEGAL, (), "too long")
    pending = OutgoingView("c.x", Phase.NEW, None)
    assert local_subscription_state(False, [local], [created, pending]) == (S.CREATED, [local], None)
    status, endpoints, error = local_subscription_state(True, [local], [created, refused])
    assert status is S.ERROR and error == "b.interchange.test: ILLEGAL (too long)"
    assert [e.source for e in endpoints] == ["ii-local-1", "s1"]
    second = local.model_copy(update={"port": 5672})  # two broker processes: both come first
    _, endpoints, _ = local_subscription_state(True, [local, second], [created])
    assert [(e.port, e.source) for e in endpoints] == [(5671, "ii-local-1"), (5672, "ii-local-1"), (ENDPOINT.port, "s1")]
