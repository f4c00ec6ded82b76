"""Multi-hop federation in the capability exchange, sans-I/O: the IP_132 extension
properties, what is re-exported to whom, and where subscriptions go (shortest routes, no duplicates)."""
from __future__ import annotations

from typing import Any

from ii_api.decisions.capability_selector import granted_selector
from ii_api.decisions.multihop import (
    ANNOUNCE_KEY,
    ROUTE_KEY,
    ReexportWant,
    announced_hop_limit,
    announcement,
    best_offers,
    desired_routes,
    reexported,
    restricted,
    route_of,
)
from ii_api.decisions.subscriptions import LocalSubscriptionView, OutgoingKey, desired_outgoing
from ii_api.wire.models import CapabilitiesMessage, Capability, is_custom_property

A, B, C, D = "a.interchange.test", "b.interchange.test", "c.interchange.test", "d.interchange.test"
DENM = "messageType = 'DENM'"


def capability(publisher: str, via: tuple[str, ...] | None = None, publication: str = "denm-1") -> Capability:
    data: dict[str, Any] = {"application": {"messageType": "DENM", "publisherId": publisher,
                                            "publicationId": f"{publisher}:{publication}", "originatingCountry": "NO",
                                            "protocolVersion": "DENM:1.3.1", "quadTree": ["1202021"],
                                            "causeCode": [1]}, "metadata": {}}
    if via is not None:
        data[ROUTE_KEY] = {"via": list(via)}
    return Capability.model_validate(data)


def test_extension_properties_follow_ip_132_and_survive_the_wire() -> None:
    assert is_custom_property(ANNOUNCE_KEY) and is_custom_property(ROUTE_KEY)
    message = CapabilitiesMessage.model_validate({"name": B, "capabilities": [capability("NO00001", (A,))],
                                                  ANNOUNCE_KEY: announcement(3)})
    wire = message.to_json()
    assert wire[ANNOUNCE_KEY] == {"version": 1, "hopLimit": 3}
    assert wire["capabilities"][0][ROUTE_KEY] == {"via": [A]}
    assert set(wire) == {"version", "name", "capabilities", ANNOUNCE_KEY}  # Table 9 plus the extension only
    again = CapabilitiesMessage.model_validate(wire)
    assert announced_hop_limit(again) == 3 and route_of(again.capabilities[0]) == (A,)


def test_a_plain_neighbour_and_malformed_announcements_are_not_multihop() -> None:
    plain = CapabilitiesMessage.model_validate({"version": "2.0", "name": A, "capabilities": []})  # appendix C
    assert announced_hop_limit(plain) is None and route_of(capability("NO00001")) == ()
    for bad in ({"version": 2, "hopLimit": 3}, {"version": 1, "hopLimit": 0}, {"version": 1, "hopLimit": True},
                {"version": 1}, "yes", [1]):
        message = CapabilitiesMessage.model_validate({"name": A, "capabilities": [], ANNOUNCE_KEY: bad})
        assert announced_hop_limit(message) is None
    odd = capability("NO00001", None)
    odd_wire = odd.to_json() | {ROUTE_KEY: {"via": [1, 2]}}
    assert route_of(Capability.model_validate(odd_wire)) == ()


def test_reexport_follows_split_horizon_loops_and_the_hop_limit() -> None:
    own_a, own_d = capability("NO00001"), capability("SE00001")
    offers = {A: [own_a], D: [own_d], C: [capability("NO00001", (A, B))]}
    # B re-exports to C what it learnt from A and D, each with its route; never C's offer back to C.
    to_c = reexported(B, C, offers, {A: 4, C: 4, D: 4}, hop_limit=4)
    assert [(c.application.publicationId, route_of(c)) for c in to_c] == [("NO00001:denm-1", (A,)),
                                                                          ("SE00001:denm-1", (D,))]
    # to A: not A's own back (split horizon), C's route passes B itself (loop): only D's
    to_a = reexported(B, A, offers, {A: 4, C: 4, D: 4}, hop_limit=4)
    assert [(c.application.publicationId, route_of(c)) for c in to_a] == [("SE00001:denm-1", (D,))]
    # only from neighbours that announced multi-hop
    assert [c.application.publicationId for c in reexported(B, C, offers, {C: 4, D: 4}, 4)] == ["SE00001:denm-1"]
    # hop limit: origin A -> B -> C is 2 hops; a limit of 1 (ours or the neighbour's) allows none
    assert reexported(B, C, offers, {A: 4, C: 4, D: 4}, hop_limit=1) == []
    assert [c.application.publicationId for c in reexported(B, C, offers, {A: 1, C: 4, D: 4}, 4)] == [
        "SE00001:denm-1"]


def test_reexport_announces_the_shortest_route() -> None:
    offers = {A: [capability("NO00001")], D: [capability("NO00001", (A, C))]}
    to_c = reexported(B, "e.interchange.test", offers, {A: 4, D: 4}, hop_limit=4)
    assert [route_of(c) for c in to_c] == [(A,)]


def test_best_offers_prefers_short_routes_then_names() -> None:
    offers = {B: [capability("NO00001", (A,))], A: [capability("NO00001")],
              C: [capability("SE00001", (D,))], D: [capability("SE00001", (D, C))]}
    assert best_offers(offers) == {"NO00001:denm-1": A, "SE00001:denm-1": C}
    tie = {C: [capability("NO00001", (A,))], B: [capability("NO00001", (A,))]}
    assert best_offers(tie) == {"NO00001:denm-1": B}


def test_subscriptions_go_over_the_shortest_route_only() -> None:
    # ring A-B-C seen from C: A's DENM direct from A and via B; B's own only from B.
    offers = {A: [capability("NO00001"), capability("SE00001", (B,))],
              B: [capability("SE00001"), capability("NO00001", (A,))]}
    local = [LocalSubscriptionView(1, "actor-c", DENM)]
    assert desired_routes(local, offers) == {
        OutgoingKey(A, granted_selector(DENM, ["NO00001:denm-1"]), None): frozenset({1}),
        OutgoingKey(B, granted_selector(DENM, ["SE00001:denm-1"]), None): frozenset({1})}
    # the one-hop planner would ask both neighbours for both: every message twice
    assert set(desired_outgoing(local, offers)) == {OutgoingKey(A, DENM, None), OutgoingKey(B, DENM, None)}


def test_without_competing_routes_selectors_are_unchanged() -> None:
    offers = {A: [capability("NO00001")], B: [capability("SE00001")]}
    local = [LocalSubscriptionView(1, "actor-c", DENM), LocalSubscriptionView(2, "actor-d", DENM)]
    assert desired_routes(local, offers) == desired_outgoing(local, offers)


def test_a_reexport_want_is_never_planned_at_its_own_neighbour() -> None:
    offers = {A: [capability("NO00001")], C: [capability("NO00001", (A,)), capability("SE00001")]}
    want = ReexportWant(-7, C, DENM, False, neighbour=C)  # C's subscription at B, for what B re-exports
    assert desired_routes([want], offers) == {OutgoingKey(A, DENM, None): frozenset({-7})}


def test_restricted_takes_a_grant_restriction_off_exactly() -> None:
    no, se = "NO00001:denm-1", "SE00001:denm-1"
    once = granted_selector(DENM, [no, se])
    assert restricted(DENM) == (DENM, None)
    assert restricted(once) == (DENM, frozenset({no, se}))
    assert restricted(granted_selector(once, [no])) == (DENM, frozenset({no}))  # restricted twice: intersected
    assert restricted(granted_selector(DENM, ["NO00001:it's"])) == (DENM, frozenset({"NO00001:it's"}))
    # anything granted_selector does not make exactly is kept whole
    for other in ("(causeCode = 1) OR (causeCode = 2\n) AND publicationId IN ('x')",  # inner is no selector
                  f"({DENM}\n) AND publicationId IN ('b', 'a')",  # not sorted
                  f"({DENM}\n) AND publicationId IN ('a') OR TRUE", f"({DENM}\n) AND FALSE"):
        assert restricted(other) == (other, None), other


def test_wants_that_need_the_same_from_a_neighbour_share_one_subscription() -> None:
    # B on a line A-B-C: its actor's subscription and C's here (which wants A's data re-exported)
    # need the same from A: one subscription there serves both.
    no, no2 = "NO00001:denm-1", "NO00001:denm-2"
    offers = {A: [capability("NO00001")], C: [capability("SE00001")]}
    actor = LocalSubscriptionView(1, "actor-b", DENM)
    want = ReexportWant(-7, C, granted_selector(DENM, [no]), False, neighbour=C)
    assert desired_routes([actor, want], offers) == {OutgoingKey(A, DENM, None): frozenset({1, -7}),
                                                     OutgoingKey(C, DENM, None): frozenset({1})}
    # the want takes less from A than the actor: each its own subscription there (no source gets
    # a publication twice)
    wider = {A: [capability("NO00001"), capability("NO00001", publication="denm-2")], C: offers[C]}
    assert desired_routes([actor, want], wider) == {OutgoingKey(A, DENM, None): frozenset({1}),
                                                    OutgoingKey(A, granted_selector(DENM, [no]), None): frozenset({-7}),
                                                    OutgoingKey(C, DENM, None): frozenset({1})}
    # two wants restricted to the same publications share, whatever the root took at other neighbours
    other = ReexportWant(-8, C, granted_selector(granted_selector(DENM, [no, no2]), [no2]), False, neighbour=C)
    shared = desired_routes([ReexportWant(-9, C, granted_selector(DENM, [no2]), False, neighbour=C), other], wider)
    assert shared == {OutgoingKey(A, granted_selector(DENM, [no2]), None): frozenset({-8, -9})}
    # another root selector: its own subscription
    cause = "messageType = 'DENM' AND causeCode = 1"
    assert OutgoingKey(A, cause, None) in desired_routes([actor, LocalSubscriptionView(2, "actor-x", cause)], offers)
