"""Subscriptions at neighbours (outgoing): requested for our local actors, polled, federated, withdrawn.

:class:`OutgoingSubscriptions` keeps one :class:`OutgoingRunner` per wanted
``(neighbour, selector, consumerCommonName)`` key (only new subscriptions are requested, IP_106).
Each runner drives the sans-I/O :class:`~ii_api.decisions.subscriptions.OutgoingSubscriptionMachine`
(its actions dispatched by ``match``): the HTTP requests to the neighbour (never holding the
service's lock), the answer's endpoints pulled through a :class:`~ii_api.peers.federation.Federation`
into the local sources that want them (:mod:`ii_api.resources.imports`), each result recorded in the
store. ``wanted()`` gives the local subscriptions a key serves; ``served_changed(ids)`` says which to
recompute. With multi-hop, :class:`~ii_api.decisions.handover.RouteHandover` plans route changes;
this object tells it which runners are ready. Design: docs/improved-interface.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from certs.revocation import Revocations
from ii_api.decisions.handover import RouteHandover
from ii_api.decisions.subscriptions import (
    Action,
    DeleteRemote,
    Finished,
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
    desired_outgoing,
    plan_outgoing,
    same_cn,
)
from ii_api.peers.client import IIClient, IIClientError
from ii_api.peers.doors import MessageSink
from ii_api.peers.federation import Federation, RemoteEndpoint
from ii_api.resources.doors import (
    EventSink,
    FederationFactory,
    ImportSink,
    NeighbourCapabilityView,
    NeighbourDirectory,
    Planner,
    ServedChanged,
    SourcesOf,
    WantedSubscriptions,
)
from ii_api.resources.imports import TargetedImport
from ii_api.storage.store import AsyncStore
from ii_api.storage.store import OutgoingSubscription as StoredOutgoing
from ii_api.wire.models import (
    Endpoint,
    Subscription,
    SubscriptionRequest,
    SubscriptionRequestItem,
    SubscriptionStatus,
)

log = logging.getLogger(__name__)

READY_CHECK_S = 0.02  #: during a handover: how often the new route's readiness is looked at (a flag, cheap)


class OutgoingRunner:
    """Drives one :class:`OutgoingSubscriptionMachine`: executes its actions, feeds back results."""

    def __init__(self, subscriptions: OutgoingSubscriptions, row_id: int,
                 machine: OutgoingSubscriptionMachine) -> None:
        self.subscriptions = subscriptions
        self.row_id = row_id
        self.machine = machine
        self.federation: Federation | None = None
        self._events: asyncio.Queue[Callable[[float], list[Action]]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.finished = False
        self.adopt = False  #: restored before its request was answered: look for it at the neighbour first

    @property
    def key(self) -> OutgoingKey:
        return self.machine.key

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"ii-outgoing-{self.row_id}")

    def send(self, event: Callable[[float], list[Action]]) -> None:
        """Queue an event (a machine method taking ``now``); never blocks."""
        self._events.put_nowait(event)

    @property
    def ready(self) -> bool:
        """CREATED at the neighbour and, unless a redirect, every federation link connected."""
        m = self.machine
        if m.phase is not Phase.ACTIVE or m.status is not SubscriptionStatus.CREATED:
            return False
        if not m.federates:
            return True
        links = self.links()
        return bool(links) and all(link.connected for link in links)

    def view(self) -> OutgoingView:
        m = self.machine
        return OutgoingView(m.key.neighbour, m.phase, m.status, m.endpoints, m.error)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pending: deque[Action] = deque(self.machine.start(loop.time()))
        try:
            while not self.finished:
                while pending and not self.finished:
                    more = await self._execute(pending.popleft())
                    pending.extendleft(reversed(more))
                if self.finished:
                    break
                next_at = self.machine.next_at
                timeout = None if next_at is None else max(0.0, next_at - loop.time())
                try:
                    async with asyncio.timeout(timeout):
                        event = await self._events.get()
                except TimeoutError:
                    pending.extend(self.machine.on_timer(loop.time()))
                else:
                    pending.extend(event(loop.time()))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not leave the subscription half-handled silently
            log.exception("ii: outgoing subscription %s failed", self.row_id)
        finally:
            await self.close_federation()

    async def _execute(self, action: Action) -> list[Action]:
        """One action of the machine; what it answers to the result."""
        match action:
            case PostRequest():
                return await self._post()
            case PollStatus(path=path):
                return await self._poll(path)
            case DeleteRemote(path=path):
                return await self._delete(path)
            case StartFederation(endpoints=endpoints):
                return self._start_federation(endpoints)
            case StopFederation():
                if self.federation is not None:
                    self.federation.stop("subscription")
                return []
            case Persist():
                await self.subscriptions.changed(self)
                return []
            case Schedule():
                return []  # the loop waits until machine.next_at
            case Finished(reason=reason):
                self.finished = True
                await self.close_federation()
                await self.subscriptions.finished(self, reason)
                return []
        raise AssertionError(f"unknown action {action!r}")

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def _post(self) -> list[Action]:
        """POST the subscription (IP_096/106); first adopt one requested before a crash."""
        owner, machine, key = self.subscriptions, self.machine, self.machine.key
        peer = owner.neighbours.neighbour(key.neighbour)
        if peer is None:
            return machine.post_failed(self._now(), f"{key.neighbour} is not a discovered neighbour")
        if self.adopt:
            self.adopt = False
            found = await owner.find_unclaimed(key)
            if found is not None:  # requested before a crash, its answer never recorded (IP_106)
                owner.event("info", "ii_subscription_adopted", {"neighbour": key.neighbour, "id": found.id})
                return machine.post_succeeded(self._now(), found.id, found.path, found.status, found.endpoints or (),
                                              found.errorMessage)
        request = SubscriptionRequest(name=owner.name, subscriptions=[
            SubscriptionRequestItem(selector=key.selector, consumerCommonName=key.consumer_common_name)])
        try:
            response = await owner.client.post_subscriptions(peer, request)
        except IIClientError as exc:
            owner.event("warning", "ii_subscription_request_failed",
                        {"neighbour": key.neighbour, "selector": key.selector, "error": str(exc)})
            return machine.post_failed(self._now(), str(exc), exc.status)
        if len(response.subscriptions) != 1:
            return machine.post_failed(self._now(), f"expected 1 subscription in the answer, got "
                                                    f"{len(response.subscriptions)}")
        sub = response.subscriptions[0]
        owner.event("info", "ii_subscription_requested", {"neighbour": key.neighbour, "selector": key.selector,
                                                          "id": sub.id, "status": sub.status.value})
        return machine.post_succeeded(self._now(), sub.id, sub.path, sub.status, sub.endpoints or (),
                                      sub.errorMessage)

    async def _poll(self, path: str) -> list[Action]:
        """GET the subscription's status (IP_108/127)."""
        machine, key = self.machine, self.machine.key
        peer = self.subscriptions.neighbours.neighbour(key.neighbour)
        if peer is None:
            return machine.poll_failed(self._now(), f"{key.neighbour} is not a discovered neighbour")
        try:
            poll = await self.subscriptions.client.poll_subscription(peer, path)
        except IIClientError as exc:
            return machine.poll_failed(self._now(), str(exc), exc.status)
        return machine.poll_succeeded(self._now(), poll.status, poll.endpoints, poll.errorMessage)

    async def _delete(self, path: str) -> list[Action]:
        """DELETE the subscription at the neighbour (IP_107)."""
        machine = self.machine
        peer = self.subscriptions.neighbours.neighbour(machine.key.neighbour)
        if peer is None:
            return machine.neighbour_gone(self._now())
        try:
            await self.subscriptions.client.delete_subscription(peer, path)
        except IIClientError as exc:
            return machine.delete_failed(self._now(), str(exc), exc.status)
        return machine.delete_succeeded(self._now())

    def _start_federation(self, endpoints: tuple[Endpoint, ...]) -> list[Action]:
        """Pull from the endpoints (chapter 4.2.8) into the local sources the subscription serves."""
        owner, key = self.subscriptions, self.machine.key
        if self.federation is None:
            self.federation = owner.federation(owner.import_sink(key), self._link_down)
        self.federation.pull("subscription", [self._remote(e) for e in endpoints])
        owner.event("info", "ii_federation_started", {"neighbour": key.neighbour, "selector": key.selector,
                                                      "endpoints": [e.to_json() for e in endpoints]})
        return []

    def _link_down(self, endpoint: RemoteEndpoint, reason: str) -> None:
        """A data link was refused or lost: poll the subscription now (a neighbour that restarted without
        its state answers 404, and the subscription is requested anew), not at the next poll."""
        if not self.finished:
            self.send(self.machine.nudge)

    def _remote(self, endpoint: Endpoint) -> RemoteEndpoint:
        """A complete endpoint (the machine federates only those) as a link's address."""
        neighbour = self.machine.key.neighbour
        assert endpoint.port is not None and endpoint.source is not None
        return RemoteEndpoint(neighbour, self.subscriptions.neighbours.endpoint_address(neighbour, endpoint.host),
                              endpoint.port, endpoint.source)

    async def close_federation(self) -> None:
        if self.federation is not None:
            await self.federation.close()
            self.federation = None

    def links(self) -> list[Any]:
        """Federation link statuses (for operators and tests)."""
        if self.federation is None:
            return []
        return list(self.federation.status.get("subscription", []))


class OutgoingSubscriptions:
    """The runners: one per wanted key (``active``), and those still withdrawing (``retiring``)."""

    def __init__(self, *, name: str, store: AsyncStore, timing: Timing, client: IIClient,
                 neighbours: NeighbourDirectory, offers: NeighbourCapabilityView,
                 wanted: WantedSubscriptions, sources: SourcesOf,
                 imports: ImportSink, federation: FederationFactory,
                 served_changed: ServedChanged, lock: asyncio.Lock,
                 event: EventSink, plan: Planner = desired_outgoing, handover: RouteHandover | None = None) -> None:
        self.name = name
        self._rows = store.outgoing
        self._timing = timing
        self.client = client
        self.neighbours = neighbours
        self._offers = offers
        self._wanted = wanted
        self._sources = sources
        self._imports = imports
        self.federation = federation
        self._served_changed = served_changed
        self._plan = plan
        self._handover = handover  #: make-before-break route changes (multi-hop); None: withdraw at once
        self._replan: asyncio.Task[None] | None = None  #: the handover's next planning round
        self._lock = lock
        self.event = event
        self.closed = False
        self.active: dict[OutgoingKey, OutgoingRunner] = {}
        self.retiring: set[OutgoingRunner] = set()
        self.serves: dict[OutgoingKey, frozenset[int]] = {}  #: the local subscriptions each key serves
        self._kept: set[OutgoingKey] = set()  #: old routes kept until their new ones are ready (logged once)

    def runners(self) -> list[OutgoingRunner]:
        """The active runners, in key order."""
        return [self.active[k] for k in sorted(self.active)]

    def close_revoked(self, revocations: Revocations) -> list[tuple[RemoteEndpoint, str]]:
        """Drop the federation links to neighbours whose certificate ``revocations`` lists."""
        return [dropped for runner in (*self.active.values(), *self.retiring) if runner.federation is not None
                for dropped in runner.federation.close_revoked(revocations)]

    def tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in (*self.active.values(), *self.retiring) if r.task is not None]

    def views(self) -> dict[int, list[OutgoingView]]:
        """By local subscription id: the views of the active subscriptions at neighbours serving it."""
        views: dict[int, list[OutgoingView]] = {}
        for key, ids in self.serves.items():
            runner = self.active.get(key)
            if runner is not None:
                for sub_id in ids:
                    views.setdefault(sub_id, []).append(runner.view())
        return views

    def import_sink(self, key: OutgoingKey) -> MessageSink:
        """Where the messages the subscription ``key`` brings go: the sources of the local
        subscriptions it serves when each arrives (see ii_api.resources.imports)."""
        return TargetedImport(self._imports, lambda: self._sources(self.serves.get(key, ())))

    def nudge(self, neighbour: str) -> None:
        """The neighbour's capabilities changed: poll its subscriptions now (RESUBSCRIBE)."""
        for runner in self.active.values():
            if runner.key.neighbour == neighbour:
                runner.send(runner.machine.nudge)

    def _offered(self) -> Mapping[str, list[Any]]:
        """The capabilities of the current neighbours."""
        return {n: c for n, c in self._offers.by_neighbour().items() if self.neighbours.neighbour(n) is not None}

    async def reconcile(self) -> None:
        """Request what is wanted and not yet requested (IP_106); withdraw what is no longer wanted.
        Caller holds the lock."""
        if self.closed:
            return
        wanted = self._wanted()
        offered = self._offered()
        desired = self._plan(wanted, offered)
        if self._handover is None:
            self.serves = desired
            create, withdraw = plan_outgoing(desired, self.active)
        else:
            create, withdraw = self._hand_over(desired, offered)
        for key in withdraw:
            runner = self.active.pop(key)
            self.retiring.add(runner)
            runner.send(runner.machine.withdraw)
            self.event("info", "ii_subscription_withdrawn", {"neighbour": key.neighbour, "selector": key.selector})
        for key in create:
            row = await self._rows.add(neighbour=key.neighbour, selector=key.selector, status=Phase.NEW.value,
                                       consumer_common_name=key.consumer_common_name)
            runner = OutgoingRunner(self, row.id, OutgoingSubscriptionMachine(key, self._timing))
            self.active[key] = runner
            runner.start()
        await self._served_changed([w.id for w in wanted])

    def _hand_over(self, desired: dict[OutgoingKey, frozenset[int]],
                   offered: Mapping[str, Any]) -> tuple[list[OutgoingKey], list[OutgoingKey]]:
        """Make-before-break (:mod:`ii_api.decisions.handover`): (keys to request, keys to withdraw now)."""
        assert self._handover is not None
        loop = asyncio.get_running_loop()
        active = {key: self.serves.get(key, frozenset()) for key in self.active}
        plan = self._handover.plan(loop.time(), desired, active,
                                   [k for k, r in self.active.items() if r.ready], offered.keys())
        for key, waiting in plan.kept.items():
            if key not in self._kept:
                self.event("info", "ii_subscription_kept", {
                    "neighbour": key.neighbour, "selector": key.selector,
                    "until_ready": [{"neighbour": n.neighbour, "selector": n.selector} for n in sorted(waiting)]})
        self._kept = set(plan.kept)
        self.serves = plan.serves
        if self._replan is not None:
            self._replan.cancel()
            self._replan = None
        if plan.wake_at is not None or plan.not_ready:
            self._replan = loop.create_task(self._plan_again(plan.wake_at, plan.not_ready),
                                            name="ii-outgoing-handover")
        return plan.create, plan.withdraw

    async def _plan_again(self, at: float | None, not_ready: frozenset[OutgoingKey]) -> None:
        """Plan again at ``at`` (a handover's overlap ends, or it times out) or as soon as one of the
        ``not_ready`` subscriptions is ready (looked at every :data:`READY_CHECK_S`)."""
        loop = asyncio.get_running_loop()
        deadline = float("inf") if at is None else at
        while loop.time() < deadline and not any(
                (runner := self.active.get(key)) is not None and runner.ready for key in not_ready):
            await asyncio.sleep(min(READY_CHECK_S, deadline - loop.time()))
        async with self._lock:
            if self._replan is asyncio.current_task():
                self._replan = None
            await self.reconcile()

    async def find_unclaimed(self, key: OutgoingKey) -> Subscription | None:
        """A subscription of ours at the neighbour with this selector and consumer that no row of ours
        knows (IP_107 list), or None; errors mean None (it is then requested anew)."""
        peer = self.neighbours.neighbour(key.neighbour)
        if peer is None:
            return None
        try:
            listed = await self.client.list_subscriptions(peer, self.name)
        except IIClientError:
            return None
        async with self._lock:  # after the restore: every row's remote id is known
            claimed = {r.machine.remote_id for r in (*self.active.values(), *self.retiring)
                       if r.key.neighbour == key.neighbour and r.machine.remote_id is not None}
        wanted = key.consumer_common_name or self.name
        for sub in listed.subscriptions:
            if (sub.id not in claimed and sub.selector == key.selector
                    and same_cn(sub.consumerCommonName or self.name, wanted)):
                return sub
        return None

    async def changed(self, runner: OutgoingRunner) -> None:
        """The runner's machine asks for its state to be recorded (and the local subscriptions updated)."""
        m = runner.machine
        endpoints = [e.to_json() for e in m.endpoints]
        async with self._lock:
            with contextlib.suppress(LookupError):
                await self._rows.update(runner.row_id, status=m.stored_status, remote_id=m.remote_id,
                                        remote_path=m.remote_path, endpoints=endpoints, error=m.error)
            if self.active.get(m.key) is runner:
                await self._served_changed(self.serves.get(m.key, ()))
        self.event("info", "ii_subscription_status", {"neighbour": m.key.neighbour, "selector": m.key.selector,
                                                      "phase": m.phase.value,
                                                      "status": m.status.value if m.status else None,
                                                      "error": m.error})

    async def finished(self, runner: OutgoingRunner, reason: str) -> None:
        """The runner is done (deleted, or gone at the neighbour): its row goes; requested anew if still wanted."""
        async with self._lock:
            await self._rows.delete(runner.row_id)
            self.retiring.discard(runner)
            if self.active.get(runner.key) is runner:
                del self.active[runner.key]
                await self.reconcile()  # still wanted (RESUBSCRIBE, forgotten): requested anew
        self.event("info", "ii_subscription_finished", {"neighbour": runner.key.neighbour,
                                                        "selector": runner.key.selector, "reason": reason})

    async def close(self) -> None:
        """Stop every runner and its federation links."""
        self.closed = True
        runners = [*self.active.values(), *self.retiring]
        tasks = self.tasks()
        if self._replan is not None:
            tasks.append(self._replan)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runner in runners:
            await runner.close_federation()

    async def restore(self) -> None:
        """Runners for the stored outgoing subscriptions, resumed where they were (caller holds the lock)."""
        for row in await self._rows.list():
            self._restore(row)

    def _restore(self, row: StoredOutgoing) -> None:
        key = OutgoingKey(row.neighbour, row.selector, row.consumer_common_name)
        endpoints = []
        for item in row.endpoints or []:
            with contextlib.suppress(ValidationError):
                endpoints.append(Endpoint.model_validate(item))
        machine = OutgoingSubscriptionMachine.restore(key, row.status, row.remote_id, row.remote_path, endpoints,
                                                      row.error, self._timing)
        runner = OutgoingRunner(self, row.id, machine)
        runner.adopt = machine.phase is Phase.NEW
        if key in self.active or machine.phase is Phase.DELETING:
            machine.withdrawn = True  # a duplicate, or being deleted when we stopped: finish deleting it
            self.retiring.add(runner)
        else:
            self.active[key] = runner
        runner.start()
