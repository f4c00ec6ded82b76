"""Subscription logic of the Improved Interface, sans-I/O (IP_078-082, IP_095-097, IP_106-110, IP_127, IP_133/134).

Nothing here touches sockets, the disk or the clock: functions and state machines take values
(selectors, capabilities, responses, ``now`` in seconds of a monotonic clock) and return decisions
or *actions* that :mod:`ii_api.resources.incoming`, :mod:`ii_api.resources.outgoing` and
:mod:`ii_api.resources.local_actors` carry out. Incoming: :func:`decide_incoming` gives a requested
subscription its first status (Table 14: NOT_VALID, ILLEGAL, NO_OVERLAP, or CREATED with its
*grant*, IP_134), :func:`recheck_incoming` turns it RESUBSCRIBE. Outgoing (IP_079):
:func:`desired_outgoing` says what to request from whom (IP_133, IP_106),
:class:`OutgoingSubscriptionMachine` runs one, :func:`local_subscription_state` aggregates a local
subscription's status. States and rules: docs/improved-interface.md ("Subscriptions at ...").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Union

import jms_selectors
from ii_api.decisions.capability_selector import granted_selector
from ii_api.decisions.slices import Steps, run_to_end
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.selectors.policy import SubscriptionPolicy
from ii_api.wire.models import Capability, Endpoint, LocalEndpoint, RedirectPolicy, SubscriptionStatus
from interchange.ground.timing import backoff_s

__all__ = [
    "Action", "DeleteRemote", "Finished", "IncomingDecision", "LocalSubscriptionView", "OutgoingKey",
    "OutgoingSubscriptionMachine", "OutgoingView", "Persist", "Phase", "PollStatus", "PostRequest", "Schedule",
    "StartFederation", "StopFederation", "Timing", "compile_selector", "decide_incoming", "desired_outgoing",
    "grant_for", "local_subscription_state", "plan_outgoing", "recheck_incoming", "redirect_compliant",
    "same_cn", "wants_redirect",
]

#: Remote statuses a local subscription reports as a failure of the request (ERROR aggregate).
MATCH_CHUNK = 256  #: capabilities matched against one selector between turns of the loop
FAILED_STATUSES = frozenset({SubscriptionStatus.ILLEGAL, SubscriptionStatus.NOT_VALID, SubscriptionStatus.ERROR})


# ------------------------------------------------------------------------ redirects (IP_133/134)
def same_cn(a: str, b: str) -> bool:
    """Common Names compared case-insensitively (interchange names are DNS names)."""
    return a.casefold() == b.casefold()


def wants_redirect(consumer_cn: str | None, requester_cn: str) -> bool:
    """Table 13: omitting consumerCommonName, or giving the requester's own CN, is no redirect."""
    return consumer_cn is not None and not same_cn(consumer_cn, requester_cn)


def redirect_compliant(capability: Capability, redirect: bool) -> bool:
    """Table 12 redirectPolicy: MANDATORY needs a redirect, NOT_AVAILABLE forbids one."""
    policy = capability.metadata.effective_redirect_policy
    if policy is RedirectPolicy.MANDATORY:
        return redirect
    if policy is RedirectPolicy.NOT_AVAILABLE:
        return not redirect
    return True


# ------------------------------------------------------------------------ selectors
def compile_selector(text: str) -> tuple[jms_selectors.Selector | None, str | None]:
    """(compiled selector, None) or (None, readable reason) for NOT_VALID."""
    try:
        return jms_selectors.compile(text), None
    except jms_selectors.SelectorError as exc:
        return None, str(exc)


def _matching(selector: str | CapabilityMatcher, capabilities: Iterable[Capability]) -> list[Capability]:
    matcher = selector if isinstance(selector, CapabilityMatcher) else CapabilityMatcher(selector)
    return [c for c in capabilities if matcher.matches(c.application, c.metadata, domains=c.domains, shape=c.shape)]


# ------------------------------------------------------------------------ incoming side
@dataclass(frozen=True)
class IncomingDecision:
    """The first status of a requested subscription and, if CREATED, what its source serves."""

    status: SubscriptionStatus
    consumer: str  #: who may consume from the source: consumerCommonName or the requester
    error: str | None = None
    grant: frozenset[str] = frozenset()  #: publicationIds served
    source_selector: str | None = None


def grant_for(selector: str, consumer_cn: str | None, requester_cn: str,
              capabilities: Iterable[Capability]) -> tuple[list[Capability], frozenset[str]]:
    """(matching capabilities, publicationIds of those whose redirect policy allows the request)."""
    return run_to_end(_grant_steps(selector, consumer_cn, requester_cn, list(capabilities)))


def _grant_steps(selector: str, consumer_cn: str | None, requester_cn: str,
                 capabilities: Sequence[Capability]) -> Steps[tuple[list[Capability], frozenset[str]]]:
    """:func:`grant_for`, yielding after each chunk of capabilities (see :mod:`ii_api.decisions.slices`)."""
    matcher = CapabilityMatcher(selector)
    matching: list[Capability] = []
    for start in range(0, len(capabilities), MATCH_CHUNK):
        matching += [c for c in capabilities[start:start + MATCH_CHUNK]
                     if matcher.matches(c.application, c.metadata, domains=c.domains, shape=c.shape)]
        yield
    redirect = wants_redirect(consumer_cn, requester_cn)
    grant = frozenset(c.application.publicationId for c in matching if redirect_compliant(c, redirect))
    return matching, grant


def decide_incoming(selector: str, consumer_cn: str | None, requester_cn: str, capabilities: Sequence[Capability],
                    policy: SubscriptionPolicy, *, existing: int = 0, own_name: str = "this interchange") -> IncomingDecision:
    """IP_097/IP_134: NOT_VALID, ILLEGAL, NO_OVERLAP or CREATED (with grant) for one request."""
    return run_to_end(decide_incoming_steps(selector, consumer_cn, requester_cn, capabilities, policy,
                                            existing=existing, own_name=own_name))


def decide_incoming_steps(selector: str, consumer_cn: str | None, requester_cn: str,
                          capabilities: Sequence[Capability], policy: SubscriptionPolicy, *, existing: int = 0,
                          own_name: str = "this interchange") -> Steps[IncomingDecision]:
    """:func:`decide_incoming`, yielding between chunks of capabilities (run by
    :func:`ii_api.decisions.slices.in_slices` on the loop: thousands of capabilities)."""
    consumer = consumer_cn or requester_cn
    compiled, problem = compile_selector(selector)
    if compiled is None:
        return IncomingDecision(SubscriptionStatus.NOT_VALID, consumer, problem)
    illegal = policy.check(selector, compiled.ast, existing=existing)
    if illegal is not None:
        return IncomingDecision(SubscriptionStatus.ILLEGAL, consumer, illegal)
    matching, grant = yield from _grant_steps(selector, consumer_cn, requester_cn, capabilities)
    if not matching:
        return IncomingDecision(SubscriptionStatus.NO_OVERLAP, consumer,
                                f"no capability of {own_name} matches the selector")
    if not grant:
        mode = "a redirect" if wants_redirect(consumer_cn, requester_cn) else "no redirect"
        return IncomingDecision(SubscriptionStatus.NO_OVERLAP, consumer,
                                f"the redirectPolicy of every matching capability forbids {mode} (IP_134)")
    return IncomingDecision(SubscriptionStatus.CREATED, consumer, None, grant, granted_selector(selector, grant))


def recheck_incoming(status: SubscriptionStatus, grant: frozenset[str], selector: str, consumer_cn: str | None,
                     requester_cn: str, capabilities: Sequence[Capability]) -> SubscriptionStatus | None:
    """RESUBSCRIBE when a new relevant capability appeared after CREATED / NO_OVERLAP, else None."""
    if status not in (SubscriptionStatus.CREATED, SubscriptionStatus.NO_OVERLAP):
        return None
    if compile_selector(selector)[0] is None:
        return None
    _, now_granted = grant_for(selector, consumer_cn, requester_cn, capabilities)
    return SubscriptionStatus.RESUBSCRIBE if now_granted - grant else None


# ------------------------------------------------------------------------ sending side: what to request
@dataclass(frozen=True, order=True)
class OutgoingKey:
    """One subscription at a neighbour: IP_106, never requested twice."""

    neighbour: str
    selector: str
    consumer_common_name: str | None = None  #: set for a redirect on behalf of an actor


@dataclass(frozen=True)
class LocalSubscriptionView:
    """What :func:`desired_outgoing` needs of a local actor's subscription."""

    id: int
    actor_cn: str
    selector: str
    redirect: bool = False
    #: the selector already parsed (by its owner, once); None: parsed here
    matcher: CapabilityMatcher | None = field(default=None, compare=False, repr=False)


def desired_outgoing(local_subscriptions: Iterable[LocalSubscriptionView],
                     neighbour_capabilities: Mapping[str, Sequence[Capability]]) -> dict[OutgoingKey, frozenset[int]]:
    """IP_079/IP_133: the subscriptions to request from neighbours, each with the local ones it serves.

    A neighbour is asked when one of its capabilities matches the selector and allows the redirect
    mode (redirect: consumerCommonName = the actor's CN; otherwise none, the data is imported).
    """
    wanted: dict[OutgoingKey, set[int]] = {}
    for sub in local_subscriptions:
        matcher = sub.matcher
        if matcher is None:
            compiled = compile_selector(sub.selector)[0]
            if compiled is None:
                continue
            matcher = CapabilityMatcher(compiled)  # parsed once per subscription
        for neighbour, capabilities in neighbour_capabilities.items():
            matching = _matching(matcher, capabilities)
            if any(redirect_compliant(c, sub.redirect) for c in matching):
                key = OutgoingKey(neighbour, sub.selector, sub.actor_cn if sub.redirect else None)
                wanted.setdefault(key, set()).add(sub.id)
    return {key: frozenset(ids) for key, ids in wanted.items()}


def plan_outgoing(desired: Iterable[OutgoingKey],
                  existing: Iterable[OutgoingKey]) -> tuple[list[OutgoingKey], list[OutgoingKey]]:
    """(keys to request, keys to withdraw), sorted: only new subscriptions are requested (IP_106)."""
    want, have = set(desired), set(existing)
    return sorted(want - have), sorted(have - want)


# ------------------------------------------------------------------------ the outgoing state machine
class Phase(StrEnum):
    NEW = "NEW"  #: to be requested (POST <base>/subscriptions)
    ACTIVE = "ACTIVE"  #: known at the neighbour, polled (IP_110/127)
    DELETING = "DELETING"  #: to be deleted at the neighbour (DELETE <path>)
    DONE = "DONE"  #: nothing left to do; the service forgets it


@dataclass(frozen=True)
class Timing:
    """Intervals of the outgoing machine, in seconds."""

    poll_interval_s: float = 300.0  #: IP_127: at least every 5 minutes
    first_poll_s: float = 0.05  #: while REQUESTED: first re-poll, doubling up to the poll interval
    retry_min_s: float = 0.5  #: after a failed request: first retry, doubling
    retry_max_s: float = 60.0
    delete_attempts: int = 5


@dataclass(frozen=True)
class PostRequest:
    """POST <base>/subscriptions with this subscription (IP_096/106)."""


@dataclass(frozen=True)
class PollStatus:
    path: str  #: GET it (IP_110)


@dataclass(frozen=True)
class DeleteRemote:
    path: str  #: DELETE it


@dataclass(frozen=True)
class StartFederation:
    endpoints: tuple[Endpoint, ...]  #: (re)open receiver links to exactly these


@dataclass(frozen=True)
class StopFederation:
    pass


@dataclass(frozen=True)
class Persist:
    """Save the machine's state (status, remote id/path, endpoints, error)."""


@dataclass(frozen=True)
class Schedule:
    at: float | None  #: next timer (monotonic seconds), None for none


@dataclass(frozen=True)
class Finished:
    reason: str  #: forget the subscription (the service re-plans what is wanted)


Action = Union[PostRequest, PollStatus, DeleteRemote, StartFederation, StopFederation, Persist, Schedule, Finished]


def _endpoint_key(e: Endpoint) -> tuple[str | None, int | None, str | None]:
    return (e.host, e.port, e.source)


@dataclass
class OutgoingSubscriptionMachine:
    """One subscription of ours at a neighbour (see the module docstring for the phases)."""

    key: OutgoingKey
    timing: Timing = field(default_factory=Timing)
    phase: Phase = Phase.NEW
    status: SubscriptionStatus | None = None  #: the neighbour's last answer
    remote_id: str | None = None
    remote_path: str | None = None
    endpoints: tuple[Endpoint, ...] = ()
    error: str | None = None
    next_at: float | None = None
    withdrawn: bool = False
    federating: tuple[Endpoint, ...] = ()
    _failures: int = 0
    _requested_delay: float | None = None

    # ---- persistence
    @property
    def federates(self) -> bool:
        """Non-redirect subscriptions are pulled into the local broker; redirects are not."""
        return self.key.consumer_common_name is None

    @property
    def stored_status(self) -> str:
        """What the store's status column holds: NEW, DELETING or the neighbour's status."""
        if self.phase is Phase.ACTIVE and self.status is not None:
            return self.status.value
        return Phase.DELETING.value if self.phase in (Phase.DELETING, Phase.DONE) else Phase.NEW.value

    @classmethod
    def restore(cls, key: OutgoingKey, stored_status: str, remote_id: str | None, remote_path: str | None,
                endpoints: Sequence[Endpoint], error: str | None, timing: Timing) -> OutgoingSubscriptionMachine:
        machine = cls(key, timing, remote_id=remote_id, remote_path=remote_path, endpoints=tuple(endpoints),
                      error=error)
        if stored_status == Phase.DELETING.value:
            machine.phase = Phase.DELETING
        elif stored_status in {s.value for s in SubscriptionStatus} and remote_path:
            machine.phase, machine.status = Phase.ACTIVE, SubscriptionStatus(stored_status)
        return machine

    # ---- helpers
    def _schedule(self, at: float | None) -> Schedule:
        self.next_at = at
        return Schedule(at)

    def _backoff(self) -> float:
        self._failures += 1
        return backoff_s(self._failures, self.timing.retry_min_s, min(self.timing.retry_max_s,
                                                                      self.timing.poll_interval_s))

    def _federation(self, wanted: tuple[Endpoint, ...]) -> list[Action]:
        if not self.federates or [_endpoint_key(e) for e in wanted] == [_endpoint_key(e) for e in self.federating]:
            return []
        self.federating = wanted
        return [StartFederation(wanted)] if wanted else [StopFederation()]

    def _act(self) -> list[Action]:
        """The request the current phase calls for."""
        if self.phase is Phase.NEW:
            return [PostRequest()]
        if self.phase is Phase.ACTIVE and self.remote_path:
            return [PollStatus(self.remote_path)]
        if self.phase is Phase.DELETING:
            if self.remote_path:
                return [DeleteRemote(self.remote_path)]
            self.phase = Phase.DONE
            return [Finished("nothing to delete at the neighbour")]
        return []

    def _begin_delete(self) -> list[Action]:
        actions = self._federation(())
        self.phase = Phase.DELETING
        self._failures = 0
        return [*actions, Persist(), self._schedule(None), *self._act()]

    def _apply(self, now: float, status: SubscriptionStatus, endpoints: Sequence[Endpoint],
               error: str | None, *, changed: bool = False) -> list[Action]:
        endpoints = tuple(endpoints)
        changed = changed or (status, [_endpoint_key(e) for e in endpoints], error) != (
            self.status, [_endpoint_key(e) for e in self.endpoints], self.error)
        self.status, self.endpoints, self.error = status, endpoints, error
        if status is SubscriptionStatus.RESUBSCRIBE:  # delete, then the service requests it anew
            return self._begin_delete()
        usable = tuple(e for e in endpoints if e.complete) if status in (
            SubscriptionStatus.CREATED, SubscriptionStatus.ERROR) else ()
        actions = self._federation(usable)
        if status is SubscriptionStatus.REQUESTED:
            delay = self._requested_delay or self.timing.first_poll_s
            self._requested_delay = min(delay * 2, self.timing.poll_interval_s)
        else:
            delay, self._requested_delay = self.timing.poll_interval_s, None
        if changed:
            actions.append(Persist())
        actions.append(self._schedule(now + min(delay, self.timing.poll_interval_s)))
        return actions

    # ---- events
    def start(self, now: float) -> list[Action]:
        """Begin (or resume after a restart): request, poll at once, or delete."""
        if self.withdrawn and self.phase is Phase.NEW:
            self.phase = Phase.DONE
            return [Finished("withdrawn before it was requested")]
        if self.withdrawn and self.phase is Phase.ACTIVE:
            return self._begin_delete()
        actions: list[Action] = []
        if self.phase is Phase.ACTIVE and self.status in (SubscriptionStatus.CREATED, SubscriptionStatus.ERROR):
            actions += self._federation(tuple(e for e in self.endpoints if e.complete))
        return actions + self._act()

    def on_timer(self, now: float) -> list[Action]:
        if self.next_at is None or now < self.next_at:
            return []
        self.next_at = None
        return self._act()

    def nudge(self, now: float) -> list[Action]:
        """Something changed at the neighbour (new capabilities, rediscovered): ask now, not later."""
        if self.phase in (Phase.NEW, Phase.ACTIVE) and not self.withdrawn:
            self._failures = 0
            return [self._schedule(None), *self._act()]
        return []

    def post_succeeded(self, now: float, remote_id: str, path: str, status: SubscriptionStatus,
                       endpoints: Sequence[Endpoint] = (), error: str | None = None) -> list[Action]:
        self.remote_id, self.remote_path, self.phase, self._failures = remote_id, path, Phase.ACTIVE, 0
        if self.withdrawn:
            return self._begin_delete()
        return self._apply(now, status, endpoints, error, changed=True)

    def post_failed(self, now: float, error: str, http_status: int | None = None) -> list[Action]:
        if self.withdrawn:
            self.phase = Phase.DONE
            return [Finished("withdrawn before the neighbour accepted it")]
        self.error = error
        return [Persist(), self._schedule(now + self._backoff())]

    def poll_succeeded(self, now: float, status: SubscriptionStatus, endpoints: Sequence[Endpoint] = (),
                       error: str | None = None) -> list[Action]:
        if self.phase is not Phase.ACTIVE:
            return []
        self._failures = 0
        return self._apply(now, status, endpoints, error)

    def poll_failed(self, now: float, error: str, http_status: int | None = None) -> list[Action]:
        if self.phase is not Phase.ACTIVE:
            return []
        if http_status == 404:  # the neighbour no longer knows it: forget it, the service asks anew
            actions = self._federation(())
            self.phase = Phase.DONE
            return [*actions, Finished(f"the neighbour no longer knows subscription {self.remote_id}")]
        self.error = error  # keep the links: they reconnect on their own
        return [self._schedule(now + self._backoff())]

    def withdraw(self, now: float) -> list[Action]:
        """The local subscriptions it served are gone (or the neighbour's capabilities changed)."""
        self.withdrawn = True
        if self.phase is Phase.NEW:
            actions = self._federation(())
            self.phase = Phase.DONE
            return [*actions, Finished("withdrawn before it was requested")]
        if self.phase is Phase.ACTIVE:
            return self._begin_delete()
        return []

    def neighbour_gone(self, now: float) -> list[Action]:
        """The neighbour is no longer discovered: nothing can be asked of it any more (IP_090 connects
        to the address discovery found, IP_126 makes it refuse us too), so the subscription is
        forgotten at once instead of retrying a DELETE."""
        actions = self._federation(())
        self.phase = Phase.DONE
        return [*actions, Finished("the neighbour is no longer discovered in DNS")]

    def delete_succeeded(self, now: float) -> list[Action]:
        self.phase = Phase.DONE
        return [Finished("deleted at the neighbour")]

    def delete_failed(self, now: float, error: str, http_status: int | None = None) -> list[Action]:
        if http_status == 404:
            self.phase = Phase.DONE
            return [Finished("already gone at the neighbour")]
        self.error = error
        if self._failures + 1 >= self.timing.delete_attempts:
            self.phase = Phase.DONE
            return [Finished(f"gave up deleting at the neighbour after {self.timing.delete_attempts} attempts: {error}")]
        return [self._schedule(now + self._backoff())]


# ------------------------------------------------------------------------ local subscription status
@dataclass(frozen=True)
class OutgoingView:
    """What a local subscription's status needs of one outgoing subscription serving it."""

    neighbour: str
    phase: Phase
    status: SubscriptionStatus | None
    endpoints: tuple[Endpoint, ...] = ()
    error: str | None = None


def local_subscription_state(redirect: bool, local_endpoints: Sequence[LocalEndpoint],
                             outgoing: Iterable[OutgoingView]) -> tuple[SubscriptionStatus, list[LocalEndpoint], str | None]:
    """(status, endpoints, errorMessage) of a valid local subscription.

    The local source (local data, plus imported data unless redirected; one endpoint per broker
    process) always comes first;
    a redirect adds the endpoints of its CREATED subscriptions at neighbours. ERROR (with the
    reasons) when a neighbour refused a request made on its behalf, otherwise CREATED.
    """
    endpoints = list(local_endpoints)
    failures: list[str] = []
    for view in sorted(outgoing, key=lambda v: v.neighbour):
        if view.phase is not Phase.ACTIVE or view.status is None:
            continue
        if view.status in FAILED_STATUSES:
            failures.append(f"{view.neighbour}: {view.status.value}" + (f" ({view.error})" if view.error else ""))
        if redirect and view.status in (SubscriptionStatus.CREATED, SubscriptionStatus.ERROR):
            endpoints += [LocalEndpoint(host=e.host, port=e.port, source=e.source, maxBandwidth=e.maxBandwidth,
                                        maxMessageRate=e.maxMessageRate)
                          for e in view.endpoints  # those e.complete, spelled out so that the types narrow
                          if e.host is not None and e.port is not None and e.source is not None]
    if failures:
        return SubscriptionStatus.ERROR, endpoints, "; ".join(failures)
    return SubscriptionStatus.CREATED, endpoints, None
