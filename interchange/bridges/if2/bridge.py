"""The IF2 bridge: InterCor IF2 back-offices (AMQP 0-9-1 on RabbitMQ) in and out of this interchange.

IF2 -> C-Roads: a queue per import exchange (IF2 Table 3, 6.3); each message mapped (:mod:`.keys`),
its capability registered on first arrival (IP_077/091), sent to the BI and acknowledged at
RabbitMQ only once the BI accepted it (at least once; refusals, retries, ttl: :mod:`.attempts`); a
capability idle for ``capability_idle_s`` is withdrawn. C-Roads -> IF2: a subscription with the
export keys' selector (:mod:`.bindings`) minus what came from IF2 (IP_109), the republishing
rules (:mod:`.republish`), durable topic exchanges (IF2 Table 2) with publisher confirms, the BI
settled after the confirm, a copy IF2 has not published twice (:mod:`.copies`). RabbitMQ through
the bridge's own AMQP 0-9-1 client (:mod:`.rabbit`, on pamqp's codec) in the node's event loop;
the deliveries of one read are mapped and sent through the broker's in-process door (the default)
as one batch, without a task, and the accepted ones acked together; any other BI outcome and
RabbitMQ's confirms come back as callbacks. Details and the choice
of client: docs/if2-bridge.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import operator
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from certs.tls import TlsFiles, client_context
from ii_api.wire.models import Capability
from interchange.actor.areas import Tiles
from interchange.actor.capabilities import build_capability
from interchange.actor.errors import ActorError
from interchange.bridges.if2 import bi_message
from interchange.bridges.if2.actor_api import ActorApi, ActorApiError
from interchange.bridges.if2.amqp091 import Delivery
from interchange.bridges.if2.backoff import NackBackoff
from interchange.bridges.if2.attempts import Answer, Attempts, Decision, Fate, RetryPolicy
from interchange.bridges.if2.bi_link import BiLink
from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.copies import IF2Copies, Publishing
from interchange.bridges.if2.keys import (
    AreaCover,
    If2Envelope,
    SUBTYPE_PROPERTY,
    If2KeyError,
    ProviderTable,
    croads_properties,
    envelope_of,
    if2_envelope,
    table4_headers,
    ttl_of,
)
from interchange.bridges.if2.rabbit import RabbitLink, Session, outgoing
from interchange.bridges.if2.republish import RepublishPolicy
from interchange.broker.client import RELEASE, ReceiverState
from interchange.broker.local_door import ConsumingDoor, LocalConsumer

__all__ = ["If2Bridge", "NodeView"]

EventSink = Callable[[str, str, dict[str, Any]], None]
#: publicationIds of what came from IF2 (keys.publication_id), not sent back to IF2.
NOT_FROM_IF2 = "(publicationId IS NULL OR publicationId NOT LIKE '%:if2-%')"
#: IF2 -> C-Roads mappings kept (exchange, routing key, lat, lon -> properties); lat/lon of these types only
MAPPINGS, _PLAIN = 4096, (int, float, Decimal, str, type(None))
#: what :func:`if2_envelope` reads of a C-Roads message
_ENVELOPE_PROPERTIES = ("messageType", "protocolVersion", "publisherId", "causeCode", SUBTYPE_PROPERTY, "latitude",
                        "longitude", "quadTree")
#: An IF2 message not taken by the BI: the count and the log event, by its fate (:mod:`.attempts`).
_REFUSAL_COUNTS = {Fate.REFUSE: "import_refused", Fate.EXPIRED: "import_expired", Fate.GIVE_UP: "import_gave_up"}
_ACCEPTED, _DELIVERY = operator.attrgetter("accepted"), operator.itemgetter(0)  #: (an answer's; a ready one's)
_REFUSAL_EVENTS = {Fate.REFUSE: "if2_import_refused", Fate.EXPIRED: "if2_import_expired",
                   Fate.GIVE_UP: "if2_import_gave_up"}


class NodeView:
    """Where the bridge finds its node: the BI's host/port, the II's base URL, the node's name."""

    def __init__(self, name: str, bi_host: str, bi_port: int, ii_url: str, door: ConsumingDoor | None = None) -> None:
        self.name, self.bi_host, self.bi_port, self.ii_url = name, bi_host, bi_port, ii_url
        self.door = door  #: the broker's in-process door, for ``bi_door = "in-process"``


class If2Bridge:
    def __init__(self, config: If2Config, node: NodeView, event: EventSink) -> None:
        self.config = config
        self.node = node
        self._event = event
        self.providers = config.provider_table()
        files = TlsFiles(cert_chain=config.tls.cert_chain, key=config.tls.key, trust_bundle=config.tls.trust_bundle)
        self._node_context = client_context(files)
        rabbit_context = client_context(files, server_name=config.server_name) if config.server_name \
            else client_context(files)
        self.api = ActorApi(node.ii_url, node.name, config.tls.cert_chain, config.tls.key, config.tls.trust_bundle)
        self.bi = BiLink(node.bi_host, node.bi_port, node.name, self._node_context, f"if2-bridge-{config.actor}",
                         event, backoff=(config.reconnect_min_s, config.reconnect_max_s), credit=config.prefetch,
                         door=node.door if config.bi_door == "in-process" else None, identity=config.actor)
        self.app_id = f"{node.name}/if2"  # marks what we publish, so that our import queue skips it
        self.policy: RepublishPolicy[If2Envelope] = RepublishPolicy(config.republish_interval_s,
                                                                    config.default_validity_s)
        self._registered: set[str] = set()
        self._register_lock = asyncio.Lock()
        self._delivery_known = False
        self.rabbit = RabbitLink(config, rabbit_context, event, self._on_if2, self._on_confirmed)
        self._loops: list[asyncio.Task[None]] = []
        #: the few messages that wait (a capability's first registration, a copy being published,
        #: RabbitMQ down); every other message is handled as it is read, without a task
        self._tasks: set[asyncio.Task[None]] = set()
        #: what the same properties map to, kept (:data:`MAPPINGS` each): IF2 -> C-Roads (:class:`_ImportMaps`);
        #: C-Roads -> IF2 (:class:`_ExportMaps`), and the 0-9-1 properties by lat, lon, ttl
        self._export_maps = _ExportMaps(self.providers)
        self._outgoing = _Outgoing(self.app_id)  #: the 0-9-1 properties of what the bridge publishes
        self._exporting = 0  #: BI deliveries published to RabbitMQ and not confirmed yet
        self._closing = False
        self.retry = RetryPolicy(config.bi_attempts, config.reconnect_min_s, config.reconnect_max_s)
        self.counts = {"imported": 0, "import_refused": 0, "import_expired": 0, "import_gave_up": 0, "exported": 0,
                       "export_refused": 0, "republished": 0, "capabilities_withdrawn": 0, "bi_retried": 0,
                       "bi_unanswered": 0, "export_unsettled": 0, "export_redelivered": 0, "export_nacked": 0}
        self.nack_backoff = NackBackoff()  #: when a nacked export goes back to the BI (:mod:`.backoff`)
        self._held: set[asyncio.TimerHandle] = set()  #: nacked exports' releases, due later
        self._last_import: dict[str, float] = {}  #: publicationId -> when its last message came (monotonic)
        self.areas = AreaCover()  #: the area tiles of IF2 messages by tile (IP_112/113)
        self._import_maps = _ImportMaps(self.providers, config.area_radius_m, self.areas)
        self.copies = IF2Copies()  #: what IF2 has of C-Roads messages the BI may give out again

    # ------------------------------------------------------------------ what metrics read (If2View)
    @property
    def rabbitmq_connected(self) -> bool:
        return self.rabbit.up.is_set()

    @property
    def bi_connected(self) -> bool:
        return self.bi.connected

    @property
    def in_flight(self) -> int:
        """IF2 deliveries not acknowledged yet, and BI deliveries whose publish is not confirmed."""
        session = self.rabbit.session
        return (len(session.window) if session is not None else 0) + self._exporting

    @property
    def capabilities_registered(self) -> int:
        return len(self._registered)

    @property
    def republish_tracked(self) -> int:
        return len(self.policy)

    @property
    def republish_suppressed(self) -> int:
        return self.policy.suppressed

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        """Delivery and subscription at the node, then the links; ValueError if the node refuses them."""
        try:
            await self._setup()
        except ActorApiError as exc:
            raise ValueError(f"the IF2 bridge could not set up at the node: {exc}") from None
        self.bi.start()
        self.rabbit.start()
        self._loops = [asyncio.create_task(self._republish_loop(), name="if2-republish")]
        if self.config.capability_idle_s is not None:
            self._loops.append(asyncio.create_task(self._withdraw_loop(self.config.capability_idle_s),
                                                   name="if2-withdraw"))

    async def _setup(self) -> None:
        self._registered = await self.api.publication_ids()
        now = time.monotonic()  # registered before a restart: idle from now on
        self._last_import = {pid: now for pid in self._registered}
        delivery = await self.api.delivery()
        self._use_delivery(delivery)
        selector = self.config.export_selector()
        if selector != "FALSE":
            subscription = await self.api.subscription(f"({selector}\n) AND {NOT_FROM_IF2}")
            if not subscription.endpoints:
                raise ActorApiError(f"subscription {subscription.id} has no endpoint: {subscription.errorMessage}")
            self.bi.set_source(subscription.endpoints[0].source, None,
                               lambda raw, delivery: self._on_croads_all([raw], [delivery]), self._on_croads_all)

    async def close(self) -> None:
        self._closing = True
        for handle in self._held:  # (their deliveries are unsettled: the BI gives them out again)
            handle.cancel()
        self._held.clear()
        tasks = (*self._loops, *self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.rabbit.close()
        await self.bi.close()
        await self.api.close()

    def _use_delivery(self, delivery: Any) -> None:
        if delivery.endpoints:
            self.bi.set_target(delivery.endpoints[0].target)
            self._delivery_known = True

    # ------------------------------------------------------------------ IF2 -> C-Roads
    def _on_if2(self, session: Session, deliveries: list[Delivery]) -> None:
        """The deliveries of one read, in order: each mapped; those whose capability is registered sent
        to the BI as one batch (:meth:`_send_all`, no task); a message of a capability not registered
        yet waits for its registration in a task; what the bridge exported itself is acked."""
        taken = time.monotonic()
        maps, last_import, registered, app_id = self._import_maps.map, self._last_import, self._registered, self.app_id
        ready: list[_Ready] = []
        own: list[Delivery] = []
        # a run of deliveries of one exchange, routing key and properties object maps to one mapping and ttl
        # (:meth:`_ImportMaps.map`): looked up once for the run
        last: tuple[Any, ...] | None = None
        ready_now = False
        raws: list[bytes] = []  #: the BI message of each ready one (:func:`bi_message.message`'s bytes)
        prefixes: dict[tuple[int, int | None], bytes] = {}
        prefix = b""
        pack8, pack32, descriptor, join = bi_message.DATA8.pack, bi_message.DATA32.pack, bi_message.DATA, b"".join
        for delivery in deliveries:
            properties = delivery.properties
            if last is None or properties is not last[0] or delivery.routing_key != last[1] \
                    or delivery.exchange != last[2]:
                if properties.app_id == app_id:  # what we exported ourselves
                    own.append(delivery)
                    last = None
                    continue
                try:
                    mapping, ttl_ms = maps(delivery)
                except (If2KeyError, ValueError) as exc:
                    self._refuse(session, delivery, Decision(Fate.REFUSE, str(exc)))
                    last = None
                    continue
                last = (properties, delivery.routing_key, delivery.exchange)
                pid = mapping.publication_id
                last_import[pid] = taken
                ready_now = pid in registered and self._delivery_known
                # (by the section's id: the mapping stays in ``ready`` for the read)
                if ready_now:
                    known = prefixes.get((id(mapping.section), ttl_ms))
                    if known is None:
                        known = prefixes[(id(mapping.section), ttl_ms)] = bi_message.prefix(mapping.section, ttl_ms)
                    prefix = known
            if ready_now:
                ready.append((delivery, mapping, ttl_ms))
                body = delivery.body
                size = len(body)
                raws.append(join((prefix, pack8(descriptor, 0xA0, size) if size < 256
                                  else pack32(descriptor, 0xB0, size), body)))
                continue
            flight = _Import(session, delivery, mapping, Attempts(self.retry, taken, ttl_ms), self._answered)
            task = asyncio.get_running_loop().create_task(self._register_first(mapping.envelope, flight))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if own:
            session.settle_all(own, True)
        if ready and not self._closing:
            self._send_all(session, ready, raws, taken)

    def _send_all(self, session: Session, ready: list["_Ready"], raws: list[bytes], taken: float) -> None:
        """The first send of each message of one read (``raws``, their BI messages), as one batch
        through the door (:meth:`BiLink.submit_all`): the accepted ones acked together; a message the
        BI did not accept at once, or answers later, gets its :class:`_Import` (retries, refusal) only then."""

        def flight(i: int) -> Callable[[Answer], None]:
            delivery, mapping, ttl_ms = ready[i]
            return _Import(session, delivery, mapping, Attempts(self.retry, taken, ttl_ms), self._answered).answered

        answers = self.bi.submit_all(raws, flight)
        # (the usual read: every one accepted; ``all(answers)``: none is None, without an answer's __eq__)
        if all(answers) and all(map(_ACCEPTED, answers)):
            self.counts["imported"] += len(ready)
            session.settle_all(list(map(_DELIVERY, ready)), True)
            return
        accepted = [entry[0] for entry, answer in zip(ready, answers) if answer is not None and answer.accepted]
        if accepted:
            self.counts["imported"] += len(accepted)
            session.settle_all(accepted, True)
        if len(accepted) < len(ready):  # (refused or released at once: what :meth:`_answered` decides)
            for i, answer in enumerate(answers):
                if answer is not None and not answer.accepted:
                    flight(i)(answer)

    async def _register_first(self, envelope: If2Envelope, flight: "_Import") -> None:
        try:
            await self._register(envelope, flight.mapping.properties)
        except (If2KeyError, ValueError, ActorApiError) as exc:
            self._refuse(flight.session, flight.delivery, Decision(Fate.REFUSE, str(exc)))
            return
        self._attempt(flight)

    def _attempt(self, flight: "_Import", now: float | None = None) -> None:
        """One send to the BI (:meth:`BiLink.submit`), unless the message's TTL ran out meanwhile
        (``now``: monotonic, when the caller just read the clock)."""
        if self._closing:
            return
        if now is None:
            now = time.monotonic()
        attempts = flight.attempts
        if attempts.made and (stop := attempts.before_send(now)) is not None:  # (none before the first)
            self._refuse(flight.session, flight.delivery, stop)
            return
        raw = bi_message.message(flight.mapping.section, flight.delivery.body, attempts.ttl_ms(now))
        self.bi.submit(raw, flight.answered)

    def _answered(self, flight: "_Import", outcome: Answer) -> None:
        """Acked once the BI accepted, sent again after a back-off, or rejected without requeue (:mod:`.attempts`)."""
        if outcome.accepted:  # (the usual answer: no clock needed)
            flight.attempts.made += 1
            self.counts["imported"] += 1
            flight.session.settle(flight.delivery, True)
            return
        decision = flight.attempts.after(outcome, time.monotonic())
        if decision.unanswered:
            self.counts["bi_unanswered"] += 1
        if decision.fate is Fate.RETRY:
            self.counts["bi_retried"] += 1
            asyncio.get_running_loop().call_later(decision.delay_s, self._attempt, flight)
        else:
            self._refuse(flight.session, flight.delivery, decision)

    def _refuse(self, session: Session, delivery: Delivery, decision: Decision) -> None:
        """Reject at RabbitMQ without requeue (a dead-letter exchange gets it), logged and counted."""
        self.counts[_REFUSAL_COUNTS[decision.fate]] += 1
        self._event("warning", _REFUSAL_EVENTS[decision.fate], {
            "routing_key": delivery.routing_key, "bytes": len(delivery.body), "error": decision.reason})
        session.settle(delivery, False)

    async def _register(self, envelope: If2Envelope, properties: dict[str, Any]) -> None:
        """The capability of the message's provider, type and version, once (IP_077)."""
        pid = properties["publicationId"]
        self._last_import[pid] = time.monotonic()
        if pid in self._registered and self._delivery_known:
            return
        async with self._register_lock:
            if pid not in self._registered:
                coverage = next(p.coverage for p in self.config.providers if p.name == envelope.key.provider)
                if not any(envelope.key.tile.startswith(tile) for tile in coverage):
                    raise If2KeyError(f"tile {envelope.key.tile} is outside provider "
                                      f"{envelope.key.provider!r}'s coverage {coverage}")
                await self.api.add_capability(_capability(properties, coverage))
                self._registered.add(pid)
                self._event("info", "if2_capability_registered", {"publicationId": pid})
            if not self._delivery_known:
                self._use_delivery(await self.api.refresh_delivery(await self.api.delivery()))

    async def _withdraw_loop(self, idle_s: float) -> None:
        """Withdraw the capabilities whose IF2 messages stopped (checked a few times per ``idle_s``)."""
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 60.0))
            now = time.monotonic()
            if any(now - self._last_import.get(pid, now) > idle_s for pid in self._registered):
                try:
                    await self._withdraw_idle(idle_s)
                except ActorApiError as exc:  # the node is busy or restarting: next round
                    self._event("warning", "if2_capability_withdrawal_failed", {"error": str(exc)})

    async def _withdraw_idle(self, idle_s: float) -> None:
        async with self._register_lock:  # not while a message of it is being registered
            now = time.monotonic()
            idle = {pid for pid in self._registered if now - self._last_import.get(pid, now) > idle_s}
            ids = await self.api.capability_ids() if idle else {}
            for pid in sorted(idle):
                if pid in ids:
                    await self.api.remove_capability(ids[pid])
                self._registered.discard(pid)
                self._last_import.pop(pid, None)
                self.counts["capabilities_withdrawn"] += 1
                self._event("info", "if2_capability_withdrawn", {"publicationId": pid, "idle_s": idle_s})

    # ------------------------------------------------------------------ C-Roads -> IF2
    def _on_croads_all(self, raws: list[bytes | bytearray], deliveries: list[Any]) -> None:
        """A loop turn's BI deliveries (the door's in one call, the AMQPS link's one at a time), in order:
        each mapped and, when new for IF2, published (no task; the confirm settles it, :meth:`_on_confirmed`),
        those to publish in runs of one envelope (:meth:`_publish_exports`); one whose copy is being
        published already waits for it in a task."""
        receiver = self.bi.receiver
        assert receiver is not None
        now, known, publishing, offer, map_ = time.monotonic(), self.copies.known, self.copies.publishing, \
            self.policy.offer, self._export_maps.map
        ready: list[_Export] = []
        for raw, delivery in zip(raws, deliveries):
            try:
                envelope, body, identity, ttl_ms = map_(raw)
            except (If2KeyError, ValueError, TypeError) as exc:  # (not mappable to IF2: rejected at the BI)
                self.counts["export_refused"] += 1
                self._event("warning", "if2_export_refused", {"error": str(exc)})
                self.bi.settle(receiver, delivery, f"not mappable to IF2: {exc}")
                continue
            export = _Export(receiver, delivery, envelope, body, identity, ttl_ms)
            at_if2 = known(export.copy)
            if at_if2 is False:  # (the usual delivery: a copy IF2 does not have; :meth:`_export` inline)
                if offer(identity, body, envelope, ttl_ms, now):
                    publishing(export.copy, export)
                    export.published_at = now
                    ready.append(export)
                else:
                    self.bi.settle(receiver, delivery, None)  # IF2 6.4 rule 1: nothing new for IF2
                continue
            if isinstance(at_if2, asyncio.Future):  # being published by an earlier delivery: wait for it
                then = functools.partial(self._export, export)
                task = asyncio.get_running_loop().create_task(_then(at_if2, then))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                continue
            if self._export(export, at_if2, now, publish=False):
                ready.append(export)
        if ready:
            self._exporting += len(ready)
            self._publish_exports(ready)

    def _export(self, export: "_Export", at_if2: bool, now: float | None = None, publish: bool = True) -> bool:
        """Settled when IF2 has the copy or nothing new for IF2 is in it (False), else recorded as being
        published (its copy, the republishing rules: True) and, with ``publish``, published and counted in
        :attr:`_exporting` (else the caller does both). ``now``: monotonic, when the caller read the clock."""
        if now is None:
            now = time.monotonic()
        if at_if2 is True and not self.policy.holds(export.identity, export.body):
            # given out again after a lost settlement, and newer content went out since: IF2 has it
            self.copies.forget(export.copy)
            self.counts["export_redelivered"] += 1
            self.bi.settle(export.receiver, export.delivery, None)
            return False
        if at_if2 is True:
            self.copies.forget(export.copy)
        if not self.policy.offer(export.identity, export.body, export.envelope, export.ttl_ms, now):
            self.bi.settle(export.receiver, export.delivery, None)  # IF2 6.4 rule 1: nothing new for IF2
            return False
        self.copies.publishing(export.copy, export)
        export.published_at = now
        if publish:
            self._exporting += 1
            self._publish(export.envelope, export.body, export)
        return True

    def _publish_exports(self, exports: "list[_Export]") -> None:
        """:meth:`_publish` of each export, in order: each run of one envelope (a publisher's messages of one
        key, position and ttl) published in one call while RabbitMQ is up."""
        session = self.rabbit.session
        if session is None or not session.open:
            for export in exports:
                self._publish(export.envelope, export.body, export)
            return
        start, count = 0, len(exports)
        while start < count:
            envelope = exports[start].envelope
            end = start + 1
            while end < count and exports[end].envelope is envelope:
                end += 1
            run = exports[start:end] if start or end < count else exports
            start = end
            if envelope.key.message_type not in session.exchanges:
                self._on_confirmed(run, False, warn=False)
                continue
            session.publish_run(envelope.key.message_type, envelope.key.text, self._outgoing.of(envelope),
                                [export.body for export in run], run)

    def _on_confirmed(self, tokens: Sequence[Any], ack: bool, warn: bool = True) -> None:
        """RabbitMQ's confirms of one ack or nack frame (or every unconfirmed publish of a lost connection,
        or a publish that never reached RabbitMQ: ``warn`` False, logged before): the exports' BI
        deliveries accepted together (:meth:`_exported`), a nacked one held (:meth:`_nacked`); any other
        publish's (the republishing loop's) callback called."""
        exports: list[_Export] = [token for token in tokens if type(token) is _Export]
        if len(exports) < len(tokens):
            for token in tokens:
                if type(token) is not _Export:
                    token(ack)
        if ack:
            if exports:
                self._exported(exports)
            return
        for export in exports:
            if warn:
                self._event("warning", "if2_publish_failed", {"routing_key": str(export.envelope.key),
                                                              "error": "not confirmed"})
            self._nacked(export)

    def _exported(self, exports: "list[_Export]") -> None:
        """RabbitMQ confirmed these copies: IF2 has them, and their BI deliveries are accepted (those of one
        receiver in one call)."""
        self.copies.published_all(exports)
        self._exporting -= len(exports)
        self.nack_backoff.confirmed()
        receiver = exports[0].receiver
        if all(export.receiver is receiver for export in exports):  # (the usual frame: one receiver)
            settled = self.bi.accept_all(receiver, [export.delivery for export in exports])
        else:  # (across a re-attach) each receiver's run in one call
            settled = 0
            for _, run in itertools.groupby(exports, key=lambda export: id(export.receiver)):
                run_exports = list(run)
                settled += self.bi.accept_all(run_exports[0].receiver, [export.delivery for export in run_exports])
        self.counts["exported"] += len(exports)
        self.counts["export_unsettled"] += len(exports) - settled

    def _nacked(self, export: "_Export") -> None:
        """Not confirmed: the BI delivery is released (given out again) after the back-off's hold
        (:mod:`.backoff`), not at once."""
        self.copies.published(export.copy, export, False)
        self.policy.failed(export.identity)
        self.counts["export_nacked"] += 1
        now = time.monotonic()
        delay = self.nack_backoff.nacked(export.published_at, now) - now
        handle = asyncio.get_running_loop().call_later(delay, self._release, export)
        self._held.add(handle)
        export.held = handle

    def _release(self, export: "_Export") -> None:
        """A nacked export's hold is over: the BI gives it out again."""
        if export.held is not None:
            self._held.discard(export.held)
        self._exporting -= 1
        self.bi.settle(export.receiver, export.delivery, RELEASE)

    def _publish(self, envelope: If2Envelope, body: bytes, done: "Callable[[bool], None] | _Export") -> None:
        """Publish to the envelope's exchange; ``done`` with the publisher confirm (False: not confirmed,
        nacked, or RabbitMQ not reachable within 10 s), an export through :meth:`_on_confirmed`."""
        session = self.rabbit.session
        if session is None or not session.open:
            task = asyncio.get_running_loop().create_task(self._publish_when_up(envelope, body, done))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        if envelope.key.message_type not in session.exchanges:
            self._on_confirmed((done,), False, warn=False)
            return
        properties = self._outgoing.of(envelope)
        key = envelope.key.text
        if isinstance(done, _Export):  # (its confirm comes to :meth:`_on_confirmed` with the others of its frame)
            session.publish(envelope.key.message_type, key, properties, body, done)
            return

        def confirmed(ack: bool) -> None:
            if not ack:
                self._event("warning", "if2_publish_failed", {"routing_key": key, "error": "not confirmed"})
            done(ack)

        session.publish(envelope.key.message_type, key, properties, body, confirmed)

    async def _publish_when_up(self, envelope: If2Envelope, body: bytes,
                               done: "Callable[[bool], None] | _Export") -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10.0):
                await self.rabbit.up.wait()
        session = self.rabbit.session
        if session is None or not session.open:
            self._event("warning", "if2_publish_failed", {"routing_key": str(envelope.key),
                                                          "error": "RabbitMQ not connected"})
            self._on_confirmed((done,), False, warn=False)
            return
        self._publish(envelope, body, done)

    async def _republish_loop(self) -> None:
        """IF2 6.4 rules 2 and 3 between copies from C-Roads (:meth:`RepublishPolicy.due`)."""
        while True:
            now = time.monotonic()
            for due in self.policy.due(now):
                envelope = due.payload
                again = If2Envelope(envelope.key, due.ttl_ms, envelope.lat, envelope.lon)
                answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
                self._publish(again, due.body, functools.partial(_answer, answer))
                if await answer:
                    self.counts["republished"] += 1
                else:
                    self.policy.failed(due.key)
            next_due = self.policy.next_due()
            await asyncio.sleep(1.0 if next_due is None else min(max(next_due - time.monotonic(), 0.05), 1.0))


class _ImportMaps:
    """IF2 -> C-Roads: what a delivery maps to (:func:`~.keys.croads_properties` and the section
    :mod:`.bi_message` encodes), kept (:data:`MAPPINGS` each) by exchange, routing key and position,
    and in front of that by exchange, routing key and 0-9-1 properties object."""

    def __init__(self, providers: ProviderTable, area_radius_m: dict[str, float], areas: AreaCover) -> None:
        self.providers, self.area_radius_m, self.areas = providers, area_radius_m, areas
        self._mappings: OrderedDict[tuple[Any, ...], _Mapping] = OrderedDict()
        #: (exchange, routing key, id of the 0-9-1 properties) -> (those properties, mapping, ttl)
        self._by_properties: OrderedDict[tuple[Any, ...], tuple[Any, _Mapping, int | None]] = OrderedDict()

    def map(self, delivery: Delivery) -> tuple["_Mapping", int | None]:
        """The C-Roads properties (their section encoded) of a delivery, and its ttl. The mapping of a
        routing key and position is kept (at most :data:`MAPPINGS`): IF2 publishers repeat messages.
        So is the mapping and ttl of an exchange, routing key and properties object: the 0-9-1
        connection gives the same read-only object for the same encoded properties (:mod:`.amqp091`),
        and the mapping and ttl depend on nothing else."""
        properties = delivery.properties
        same = (delivery.exchange, delivery.routing_key, id(properties))
        known = self._by_properties.get(same)
        if known is not None and known[0] is properties:
            return known[1], known[2]
        mapping, ttl_ms = self._map_properties(delivery)
        _keep(self._by_properties, same, (properties, mapping, ttl_ms))  # (kept with it: its id is no other's)
        return mapping, ttl_ms

    def _map_properties(self, delivery: Delivery) -> tuple["_Mapping", int | None]:
        properties = delivery.properties
        headers = properties.headers or {}
        expiration = properties.expiration
        ttl_ms = ttl_of(int(expiration) if expiration is not None else None, headers)
        lat, lon = headers.get("lat"), headers.get("lon")
        cached = (delivery.exchange, delivery.routing_key, lat, lon, type(lat), type(lon)) \
            if isinstance(lat, _PLAIN) and isinstance(lon, _PLAIN) else None
        if cached is not None and (mapping := self._mappings.get(cached)) is not None:
            return mapping, ttl_ms
        envelope = envelope_of(delivery.routing_key, ttl_ms, headers)
        if envelope.key.message_type != delivery.exchange:
            raise If2KeyError(f"a {envelope.key.message_type} key on exchange {delivery.exchange} (IF2 6.2: "
                              "the exchange is named after the message type)")
        croads = croads_properties(envelope, self.providers, self.area_radius_m.get(envelope.key.message_type, 0.0),
                                   self.areas)
        mapping = _Mapping(envelope, croads, bi_message.application_properties(croads), croads["publicationId"])
        if cached is not None:
            _keep(self._mappings, cached, mapping)
        return mapping, ttl_ms


class _ExportMaps:
    """C-Roads -> IF2: what a BI message maps to (its envelope, body, republishing identity and ttl), the
    envelope kept (:data:`MAPPINGS`) by the values of the properties it reads, and in front of that by
    the properties object: the reader gives one per distinct section, read-only."""

    def __init__(self, providers: ProviderTable) -> None:
        self.providers = providers
        self._reader = bi_message.Reader(MAPPINGS)  #: BI messages read, their properties decoded once per section
        self._envelopes: OrderedDict[tuple[Any, ...], If2Envelope] = OrderedDict()
        #: id -> (properties, the last envelope made for them, the republishing identity)
        self._by_section: OrderedDict[int, tuple[dict[str, Any], If2Envelope, tuple[str, Any]]] = OrderedDict()
        #: the application-properties section's bytes and the ttl (:meth:`map`) -> (envelope, identity, ttl)
        self._by_read: OrderedDict[tuple[bytes, int | None], tuple[If2Envelope, tuple[str, Any], int | None]] = \
            OrderedDict()

    def map(self, raw: bytes | bytearray) -> tuple[If2Envelope, bytes, tuple[str, Any], int | None]:
        """The envelope, body, identity and ttl of a BI message; If2KeyError, ValueError or TypeError when
        it cannot be mapped to IF2. A message of the usual shape (:meth:`~.bi_message.Reader.split`) whose
        application properties and ttl came before maps as they did (the same envelope object): a publisher
        repeats them, only the body (and a message-id, a creation time) changes."""
        split = self._reader.split(raw)
        if split is None:
            return self._map(raw)
        read, body = split
        known = self._by_read.get(read)
        if known is None:
            envelope, _, identity, ttl_ms = self._map(raw)
            known = (envelope, identity, ttl_ms)
            _keep(self._by_read, read, known)
        return known[0], body, known[1], known[2]

    def _map(self, raw: bytes | bytearray) -> tuple[If2Envelope, bytes, tuple[str, Any], int | None]:
        properties, ttl_ms, body = self._reader.read(raw)
        section = self._by_section.get(id(properties))
        if section is None or section[0] is not properties:
            envelope = self._envelope(properties, ttl_ms)
            section = (properties, envelope, (str(envelope.key), properties.get("publicationId")))
            _keep(self._by_section, id(properties), section)
        envelope = section[1]
        if envelope.ttl_ms != ttl_ms:  # (the section keeps the last one: a publisher repeats its ttl too)
            envelope = If2Envelope(envelope.key, ttl_ms, envelope.lat, envelope.lon)
            _keep(self._by_section, id(properties), (properties, envelope, section[2]))
        return envelope, body, section[2], ttl_ms

    def _envelope(self, properties: dict[str, Any], ttl_ms: int | None) -> If2Envelope:
        """:func:`if2_envelope`, kept for the last :data:`MAPPINGS` combinations of the properties it reads."""
        values = tuple(map(properties.get, _ENVELOPE_PROPERTIES))
        cached = (values, tuple(map(type, values)))
        try:
            known = self._envelopes.get(cached)
        except TypeError:  # (a value that is not hashable: not kept)
            return if2_envelope(properties, self.providers, ttl_ms)
        if known is not None:
            return If2Envelope(known.key, ttl_ms, known.lat, known.lon)
        envelope = if2_envelope(properties, self.providers, ttl_ms)
        _keep(self._envelopes, cached, envelope)
        return envelope


class _Outgoing:
    """The 0-9-1 properties of the copies the bridge publishes (Table 4, :func:`~.rabbit.outgoing`), one
    object kept per position and ttl (:data:`MAPPINGS`): the 0-9-1 connection encodes each object once."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self._kept: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def of(self, envelope: If2Envelope) -> Any:
        cached = (envelope.lat, envelope.lon, envelope.ttl_ms)
        properties = self._kept.get(cached)
        if properties is None:
            properties = outgoing(_wire_headers(table4_headers(envelope)), envelope.ttl_ms, self.app_id)
            _keep(self._kept, cached, properties)
        return properties


class _Mapping(NamedTuple):
    """What an IF2 routing key and position map to: the envelope (its ttl not kept), the C-Roads
    properties and their application-properties section (:mod:`.bi_message`)."""
    envelope: If2Envelope
    properties: dict[str, Any]
    section: bytes
    publication_id: str  #: (``properties["publicationId"]``)


#: an IF2 message ready for its first send: the delivery, its mapping and its ttl (ms)
_Ready = tuple[Delivery, _Mapping, int | None]


class _Import:
    """An IF2 message on its way to the BI: where to settle it, what to send, its attempts, and where
    the BI's answer to each goes (:meth:`answered`: no partial or closure made per attempt)."""
    __slots__ = ("session", "delivery", "mapping", "attempts", "_on_answer")

    def __init__(self, session: Session, delivery: Delivery, mapping: _Mapping, attempts: Attempts,
                 on_answer: Callable[["_Import", Answer], None]) -> None:
        self.session, self.delivery, self.mapping, self.attempts = session, delivery, mapping, attempts
        self._on_answer = on_answer

    def answered(self, outcome: Answer) -> None:
        self._on_answer(self, outcome)


class _Export(Publishing):
    """A BI delivery on its way to IF2: where to settle it, what to publish, its copy (:mod:`.copies`); while
    it is published, itself the :class:`~.copies.Publishing` of its copy."""
    __slots__ = ("receiver", "delivery", "envelope", "body", "identity", "ttl_ms", "published_at", "held")

    def __init__(self, receiver: ReceiverState | LocalConsumer, delivery: Any, envelope: If2Envelope, body: bytes,
                 identity: tuple[str, Any], ttl_ms: int | None) -> None:
        self._future = None
        self.receiver, self.delivery, self.envelope, self.body = receiver, delivery, envelope, body
        self.identity, self.ttl_ms = identity, ttl_ms
        # (SHA-256, not BLAKE2: OpenSSL's runs on the CPU's SHA instructions, twice as fast for a 1.5 KB body)
        self.copy = (identity, hashlib.sha256(body).digest()[:16])
        self.published_at = 0.0  #: when it was last published (monotonic)
        self.held: asyncio.TimerHandle | None = None  #: its release, while a nack holds it


def _answer(future: "asyncio.Future[bool]", ok: bool) -> None:
    if not future.done():
        future.set_result(ok)


async def _then(future: "asyncio.Future[bool]", call: Callable[[bool], object]) -> None:
    """``call`` with the future's result once it is done (the future itself not cancelled with the task)."""
    call(await asyncio.shield(future))


def _keep(cache: "OrderedDict[Any, Any]", key: Hashable, value: Any) -> None:
    """Remember ``value``, forgetting the oldest beyond :data:`MAPPINGS`."""
    cache[key] = value
    if len(cache) > MAPPINGS:
        cache.popitem(last=False)


def _wire_headers(headers: dict[str, Any]) -> dict[str, Any]:
    """lat/lon as AMQP decimals with 7 places (1 cm): pamqp, the 0-9-1 codec, would write a Python
    float as a 32-bit float (0.4 m steps at 51 N, enough to move a point into the next zoom-18 tile)."""
    return {k: Decimal(f"{v:.7f}") if isinstance(v, float) else v for k, v in headers.items()}


def _capability(properties: dict[str, Any], coverage: list[str]) -> Capability:
    """The capability of an IF2 provider's messages of one type and version (the actors' toolkit's,
    checked with the II's models), its quadTree the provider's coverage."""
    try:
        return build_capability(message_type=properties["messageType"], publisher_id=properties["publisherId"],
                                publication_id=properties["publicationId"],
                                protocol_version=properties["protocolVersion"],
                                originating_country=properties["originatingCountry"], area=Tiles(tuple(coverage)))
    except ActorError as exc:
        raise If2KeyError(f"capability: {exc}") from None
