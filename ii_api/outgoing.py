"""Subscriptions at neighbours (outgoing): requested for our local actors, polled, federated, withdrawn.

:class:`OutgoingSubscriptions` keeps one :class:`OutgoingRunner` per wanted
``(neighbour, selector, consumerCommonName)`` key (:func:`~ii_api.subscriptions.desired_outgoing`
and :func:`~ii_api.subscriptions.plan_outgoing`: only new subscriptions are requested, IP_106).
Each runner drives the sans-I/O :class:`~ii_api.subscriptions.OutgoingSubscriptionMachine`: it
makes the HTTP requests to the neighbour (never holding the service's lock), pulls the answer's
endpoints through a :class:`~ii_api.federation.Federation` into the local sources that want them
(:mod:`ii_api.imports`), and records each result in the store.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ii_api.client import IIClientError
from ii_api.federation import Federation, RemoteEndpoint
from ii_api.imports import TargetedImport
from ii_api.local_actors import LIVE_LOCAL, local_source_address
from ii_api.models import Endpoint, Subscription, SubscriptionRequest, SubscriptionRequestItem
from ii_api.store import OutgoingSubscription as StoredOutgoing
from ii_api.subscriptions import (
    Action,
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
    desired_outgoing,
    plan_outgoing,
    same_cn,
)

if TYPE_CHECKING:  # pragma: no cover
    from ii_api.service import IIService

log = logging.getLogger(__name__)


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
                    event = await asyncio.wait_for(self._events.get(), timeout)
                except TimeoutError:
                    pending.extend(self.machine.on_timer(loop.time()))
                else:
                    pending.extend(event(loop.time()))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not leave the subscription half-handled silently
            log.exception("ii: outgoing subscription %s failed", self.row_id)
        finally:
            if self.federation is not None:
                await self.federation.close()
                self.federation = None

    async def _execute(self, action: Action) -> list[Action]:
        subscriptions, machine, now = self.subscriptions, self.machine, asyncio.get_running_loop().time
        service = subscriptions.service
        key = machine.key
        if isinstance(action, PostRequest):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.post_failed(now(), f"{key.neighbour} is not a discovered neighbour")
            if self.adopt:
                self.adopt = False
                found = await subscriptions.find_unclaimed(key)
                if found is not None:  # requested before a crash, its answer never recorded (IP_106)
                    service.event("info", "ii_subscription_adopted", {"neighbour": key.neighbour, "id": found.id})
                    return machine.post_succeeded(now(), found.id, found.path, found.status, found.endpoints or (),
                                                  found.errorMessage)
            request = SubscriptionRequest(name=service.name, subscriptions=[
                SubscriptionRequestItem(selector=key.selector, consumerCommonName=key.consumer_common_name)])
            try:
                response = await service.client.post_subscriptions(peer, request)
            except IIClientError as exc:
                service.event("warning", "ii_subscription_request_failed",
                              {"neighbour": key.neighbour, "selector": key.selector, "error": str(exc)})
                return machine.post_failed(now(), str(exc), exc.status)
            if len(response.subscriptions) != 1:
                return machine.post_failed(now(), f"expected 1 subscription in the answer, got "
                                                  f"{len(response.subscriptions)}")
            sub = response.subscriptions[0]
            service.event("info", "ii_subscription_requested",
                          {"neighbour": key.neighbour, "selector": key.selector, "id": sub.id,
                           "status": sub.status.value})
            return machine.post_succeeded(now(), sub.id, sub.path, sub.status, sub.endpoints or (), sub.errorMessage)
        if isinstance(action, PollStatus):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.poll_failed(now(), f"{key.neighbour} is not a discovered neighbour")
            try:
                poll = await service.client.poll_subscription(peer, action.path)
            except IIClientError as exc:
                return machine.poll_failed(now(), str(exc), exc.status)
            return machine.poll_succeeded(now(), poll.status, poll.endpoints, poll.errorMessage)
        if isinstance(action, DeleteRemote):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.neighbour_gone(now())
            try:
                await service.client.delete_subscription(peer, action.path)
            except IIClientError as exc:
                return machine.delete_failed(now(), str(exc), exc.status)
            return machine.delete_succeeded(now())
        if isinstance(action, StartFederation):
            if self.federation is None:
                sink = TargetedImport(service.core, lambda: subscriptions.import_targets(key))
                self.federation = Federation(sink, service.client_context, service.name,  # type: ignore[arg-type]
                                             min_backoff=service.config.federation_backoff_s)
            self.federation.pull("subscription", [RemoteEndpoint(key.neighbour, service.endpoint_address(
                key.neighbour, e.host), e.port, e.source) for e in action.endpoints])  # type: ignore[arg-type]
            service.event("info", "ii_federation_started",
                          {"neighbour": key.neighbour, "selector": key.selector,
                           "endpoints": [e.to_json() for e in action.endpoints]})
            return []
        if isinstance(action, StopFederation):
            if self.federation is not None:
                self.federation.stop("subscription")
            return []
        if isinstance(action, Persist):
            await subscriptions.changed(self)
            return []
        if isinstance(action, Schedule):
            return []  # the loop waits until machine.next_at
        if isinstance(action, Finished):
            self.finished = True
            if self.federation is not None:
                await self.federation.close()
                self.federation = None
            await subscriptions.finished(self, action.reason)
            return []
        raise AssertionError(f"unknown action {action!r}")

    def links(self) -> list[Any]:
        """Federation link statuses (for operators and tests)."""
        if self.federation is None:
            return []
        return list(self.federation.status.get("subscription", []))


class OutgoingSubscriptions:
    """The runners: one per wanted key (``active``), and those still withdrawing (``retiring``)."""

    def __init__(self, service: IIService) -> None:
        self.service = service
        self.active: dict[OutgoingKey, OutgoingRunner] = {}
        self.retiring: set[OutgoingRunner] = set()
        self.serves: dict[OutgoingKey, frozenset[int]] = {}  #: the local subscriptions each key serves

    def runners(self) -> list[OutgoingRunner]:
        """The active runners, in key order."""
        return [self.active[k] for k in sorted(self.active)]

    def nudge(self, neighbour: str) -> None:
        """The neighbour's capabilities changed: poll its subscriptions now (RESUBSCRIBE)."""
        for runner in self.active.values():
            if runner.key.neighbour == neighbour:
                runner.send(runner.machine.nudge)

    async def reconcile(self) -> None:
        """Request what is wanted and not yet requested (IP_106); withdraw what is no longer wanted.
        Caller holds the lock."""
        service = self.service
        if service.closed:
            return
        views = [LocalSubscriptionView(r.id, r.actor_cn, r.selector, r.consumer_common_name is not None)
                 for r in service.local_subs.values() if r.status in LIVE_LOCAL and local_source_address(r)]
        caps = {n: c for n, c in service.neighbour_caps.items() if n in service.neighbours_by_name}
        desired = desired_outgoing(views, caps)
        self.serves = desired
        create, withdraw = plan_outgoing(desired, self.active)
        for key in withdraw:
            runner = self.active.pop(key)
            self.retiring.add(runner)
            runner.send(runner.machine.withdraw)
            service.event("info", "ii_subscription_withdrawn", {"neighbour": key.neighbour, "selector": key.selector})
        for key in create:
            row = await service.store.add_outgoing_subscription(key.neighbour, key.selector, status=Phase.NEW.value,
                                                                consumer_common_name=key.consumer_common_name)
            runner = OutgoingRunner(self, row.id, OutgoingSubscriptionMachine(key, service.timing))
            self.active[key] = runner
            runner.start()
        await service.actor_subscriptions.refresh(service.local_subs)

    async def find_unclaimed(self, key: OutgoingKey) -> Subscription | None:
        """A subscription of ours at the neighbour with this selector and consumer that no row of ours
        knows (IP_107 list), or None; errors mean None (it is then requested anew)."""
        service = self.service
        peer = service.neighbour(key.neighbour)
        if peer is None:
            return None
        try:
            listed = await service.client.list_subscriptions(peer, service.name)
        except IIClientError:
            return None
        async with service.lock:  # after the restore: every row's remote id is known
            claimed = {r.machine.remote_id for r in (*self.active.values(), *self.retiring)
                       if r.key.neighbour == key.neighbour and r.machine.remote_id is not None}
        wanted = key.consumer_common_name or service.name
        for sub in listed.subscriptions:
            if (sub.id not in claimed and sub.selector == key.selector
                    and same_cn(sub.consumerCommonName or service.name, wanted)):
                return sub
        return None

    async def changed(self, runner: OutgoingRunner) -> None:
        """The runner's machine asks for its state to be recorded (and the local subscriptions updated)."""
        service, m = self.service, runner.machine
        endpoints = [e.to_json() for e in m.endpoints]
        async with service.lock:
            with contextlib.suppress(LookupError):
                await service.store.update_outgoing_subscription(runner.row_id, status=m.stored_status,
                                                                 remote_id=m.remote_id, remote_path=m.remote_path,
                                                                 endpoints=endpoints, error=m.error)
            if self.active.get(m.key) is runner:
                await service.actor_subscriptions.refresh(self.serves.get(m.key, ()))
        service.event("info", "ii_subscription_status", {"neighbour": m.key.neighbour, "selector": m.key.selector,
                                                         "phase": m.phase.value,
                                                         "status": m.status.value if m.status else None,
                                                         "error": m.error})

    async def finished(self, runner: OutgoingRunner, reason: str) -> None:
        """The runner is done (deleted, or gone at the neighbour): its row goes; requested anew if still wanted."""
        service = self.service
        async with service.lock:
            await service.store.delete_outgoing_subscription(runner.row_id)
            self.retiring.discard(runner)
            if self.active.get(runner.key) is runner:
                del self.active[runner.key]
                await self.reconcile()  # still wanted (RESUBSCRIBE, forgotten): requested anew
        service.event("info", "ii_subscription_finished", {"neighbour": runner.key.neighbour,
                                                           "selector": runner.key.selector, "reason": reason})

    def import_targets(self, key: OutgoingKey) -> list[str]:
        """Local sources that receive what the subscription ``key`` brings (see ii_api.imports)."""
        addresses = []
        for sub_id in self.serves.get(key, ()):
            row = self.service.local_subs.get(sub_id)
            if row is not None:
                address = local_source_address(row)
                if address:
                    addresses.append(address)
        return addresses

    async def restore(self) -> None:
        """Runners for the stored outgoing subscriptions, resumed where they were (caller holds the lock)."""
        for row in await self.service.store.list_outgoing_subscriptions():
            self._restore(row)

    def _restore(self, row: StoredOutgoing) -> None:
        key = OutgoingKey(row.neighbour, row.selector, row.consumer_common_name)
        endpoints = []
        for item in row.endpoints or []:
            with contextlib.suppress(ValidationError):
                endpoints.append(Endpoint.model_validate(item))
        machine = OutgoingSubscriptionMachine.restore(key, row.status, row.remote_id, row.remote_path, endpoints,
                                                      row.error, self.service.timing)
        runner = OutgoingRunner(self, row.id, machine)
        runner.adopt = machine.phase is Phase.NEW
        if key in self.active or machine.phase is Phase.DELETING:
            machine.withdrawn = True  # a duplicate, or being deleted when we stopped: finish deleting it
            self.retiring.add(runner)
        else:
            self.active[key] = runner
        runner.start()
