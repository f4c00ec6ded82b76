"""The TLEX/UDAP bridge: traffic-light controllers in and out of this interchange.

A local C-ITS actor of its node with its own certificate (IP_050), through the node's public
doors only: registers one capability per controller and message type (IP_077), a delivery and
SREM subscriptions (:mod:`.registration`), keeps a Broker session at the streaming service up
(:class:`~.stream.SessionSupervisor`) and moves payloads <-> BI messages
(:class:`~.publication.Translator`, :class:`~.outbound.Outbound`). AMQP reconnects with back-off;
an SREM it cannot pass on is rejected at the broker with the reason. Metrics:
:class:`TlexCollector`; dropped payloads are counted by cause and warned at most once a minute per
controller and type byte. Details: docs/tlex-bridge.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from proton import Message

from certs.tls import TlsFiles, client_context, peer_common_name, streaming_client_context, web_client_context
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import MAPEM, SPATEM, TlexBridgeConfig
from interchange.bridges.tlex.limits import ActorLimits
from interchange.bridges.tlex.mapem_store import MapemStore
from interchange.bridges.tlex.door import DoorSender
from interchange.bridges.tlex.outbound import Outbound
from interchange.bridges.tlex.payloads import Identified
from interchange.bridges.tlex.publication import (
    MAPEM_SUPPRESSED,
    NOT_BRIDGED,
    UNIDENTIFIED,
    UNKNOWN_TLC,
    WAITS_FOR_MAPEM,
    BiMessage,
    Dropped,
    Translator,
)
from interchange.bridges.tlex.registration import Registration
from interchange.bridges.tlex.rest import StreamingServiceClient, session_request
from interchange.bridges.tlex.stream import Backoff, SessionSupervisor, read_now
from interchange.broker.client import ClientConnection
from interchange.broker.engine import AttachRefused
from interchange.broker.local_door import Door
from interchange.ground.throttle import Throttle

EventSink = Callable[[str, str, dict], None]  #: (level, event, fields), JsonLog.event
WARNING_INTERVAL_S = 60.0  #: a recurring warning, per controller and type byte, at most this often


class BridgeReloadError(ValueError):
    """A ``[tlex]`` change that needs a restart of the node."""


@dataclass
class TlcCounters:
    payloads_in: int = 0  #: received from the controller through the service
    published: int = 0  #: handed to the broker
    dropped: int = 0  #: not published (IP_104, unknown kind), or dropped from a full queue
    refused: int = 0  #: refused by the broker for good (too large, rejected, not accepted after retries)
    held_for_mapem: int = 0  #: SPATEMs not published: no MAPEM of the controller published yet (IP_104)
    srem_out: int = 0  #: SREMs sent to the controller


@dataclass
class BridgeCounters:
    tlcs: dict[str, TlcCounters] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  #: payloads not published, by Dropped.cause
    unidentified: dict[tuple[str, int], int] = field(default_factory=dict)  #: by (TLC, type byte)
    srem_dropped: int = 0
    queue_dropped_total: int = 0
    amqp_connects: int = 0

    def tlc(self, tlc: str | None) -> TlcCounters:
        key = tlc or "?"
        counters = self.tlcs.get(key)  # not setdefault: that builds a TlcCounters per payload, twice
        if counters is None:
            counters = self.tlcs[key] = TlcCounters()
        return counters

    def published(self, tlc: str) -> None:
        self.tlc(tlc).published += 1

    def queue_dropped(self, tlc: str) -> None:
        self.tlc(tlc).dropped += 1
        self.queue_dropped_total += 1


class TlexBridge:
    def __init__(self, config: TlexBridgeConfig, *, node_name: str, ii_port: int, amqps_port: int,
                 event: EventSink, host: str = "127.0.0.1", ii_base_path: str = "",
                 state_dir: Path | None = None, limits: ActorLimits = ActorLimits(),
                 translator: Translator | None = None, door: Door | None = None) -> None:
        self._mapems = MapemStore(state_dir) if state_dir is not None else None
        self._store_interval_ms = round(config.mapem_store_interval_s * 1000)
        self.config, self.node_name, self.host = config, node_name, host
        self._registration = Registration(TlsFiles.from_identity_dir(config.actor), node_name=node_name,
                                          ii_url=f"https://{host}:{ii_port}{ii_base_path}", limits=limits,
                                          publisher_id=config.publisher_id)
        self._amqps_port, self._event = amqps_port, event
        self._door = door  #: the broker's in-process door, when the node runs one (else AMQPS publishes)
        #: the node builds it off the event loop (thousands of controllers take a second); else built here
        self.translator = translator if translator is not None else Translator(config)
        self.counters = BridgeCounters()
        self._files = TlsFiles.from_identity_dir(config.actor)
        self.actor_cn = peer_common_name(x509.load_pem_x509_certificate(self._files.cert_chain.read_bytes()))
        self.outbound = Outbound(self.counters, self._refused, lambda: read_now().utc_ms)
        self._amqp: ClientConnection | None = None
        self._drain_scheduled = False
        self._warnings = Throttle(WARNING_INTERVAL_S)
        self._waiting: dict[str, int] = {}  #: controllers whose SPATEMs wait for a MAPEM (said once): held since
        self._unsaved: dict[str, tuple[int, bytes]] = {}  #: MAPEMs for the store, the latest per TLC
        self._stored_ms: dict[str, int] = {}  #: when each controller's MAPEM last went to the store
        self._deferred: dict[str, tuple[int, bytes]] = {}  #: newer copies within mapem_store_interval_s
        self._saving: asyncio.Future[None] | None = None  #: the store's one write in progress
        self._tasks: list[asyncio.Task] = []
        self._api: StreamingServiceClient | None = None
        self.supervisor: SessionSupervisor | None = None
        self.target: str | None = None
        self.srem_sources: list[str] = []

    # --- start and stop ---------------------------------------------------------------------

    async def start(self) -> None:
        await self._restore_mapems()
        self.target, self.srem_sources = await self._registration.register(self.translator)
        config = self.config
        self._api = StreamingServiceClient(config.api_url, config.token(), server_hostname=config.server_name,
                                           ssl_context=web_client_context(config.trust_bundle))
        await self._api.__aenter__()
        request = session_request(config.domain, "broker", [c.tlc_id for c in config.controllers],
                                  config.security_mode)
        self.supervisor = SessionSupervisor(
            self._api, request, stream_ssl=streaming_client_context(config.trust_bundle),
            on_payload=self._from_controller, on_event=self._stream_event, server_hostname=config.server_name,
            backoff=Backoff(config.backoff_initial, config.backoff_max))
        self._tasks = [asyncio.create_task(self._amqp_loop(), name="tlex-amqp"),
                       asyncio.create_task(self.supervisor.run(), name="tlex-session")]
        self._event("info", "tlex_bridge_started", {"actor": self.actor_cn, "target": self.target,
                                                    "srem_sources": self.srem_sources,
                                                    "tlcs": [c.tlc_id for c in config.controllers]})

    async def _restore_mapems(self) -> None:
        """Stored MAPEMs younger than 9 minutes go first into the publish queue (IP_049, IP_104)."""
        if self._mapems is None:
            return
        now = read_now().utc_ms
        stored = await asyncio.to_thread(self._mapems.load, [c.tlc_id for c in self.config.controllers], now)
        for tlc, (received, payload) in sorted(stored.items()):
            self.outbound.offer(self.translator.restored_mapem(tlc, payload, now - received, now))
        if stored:
            self._event("info", "tlex_mapem_restored", {"tlcs": sorted(stored)})

    # --- controllers changed at run time ----------------------------------------------------

    async def update(self, config: TlexBridgeConfig) -> dict[str, Any]:
        """New ``[tlex]`` controllers without a restart (SIGHUP): capabilities and SREM subscriptions
        follow at the node, the Broker session's TLC identifiers are updated with PUT (5.2.1.4), and
        continuing controllers keep their IP_104/IP_048 state. Any other changed setting raises
        :class:`BridgeReloadError` (it needs a restart) and changes nothing."""
        fixed = {name for name in TlexBridgeConfig.model_fields if name != "controllers"
                 and getattr(config, name) != getattr(self.config, name)}
        if fixed:
            raise BridgeReloadError(f"[tlex] {', '.join(sorted(fixed))} changed: restart the node to apply")
        before = {c.tlc_id: c for c in self.config.controllers}
        after = {c.tlc_id: c for c in config.controllers}
        summary: dict[str, Any] = {"added": sorted(after.keys() - before.keys()),
                                   "removed": sorted(before.keys() - after.keys()),
                                   "moved": sorted(t for t in before.keys() & after.keys() if before[t] != after[t])}
        if not any(summary.values()):
            return {**summary, "session": "unchanged"}
        translator = (await asyncio.to_thread(Translator, config)).carrying_over(self.translator)
        sources = await self._registration.update(translator)
        self.config, self.translator = config, translator
        self._open_srem_receivers([source for source in sources if source not in self.srem_sources])
        self.srem_sources = sources
        if self.supervisor is not None:
            summary["session"] = await self.supervisor.update_request(session_request(
                config.domain, "broker", list(after), config.security_mode))
        self._event("info", "tlex_controllers_updated", summary)
        return summary

    def _open_srem_receivers(self, sources: list[str]) -> None:
        """On the live AMQP connection (a later one opens all of ``srem_sources``). Receivers of
        terminated subscriptions are detached by the broker when their source goes."""
        if self._amqp is not None:
            for source in sources:
                self._amqp.open_receiver(source, self._from_broker, credit=100)

    async def close(self) -> None:
        self.log_tlc_records()
        if self.supervisor is not None:
            self.supervisor.close_stream("interchange bridge stopping")
            await asyncio.sleep(0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._amqp is not None:
            await self._amqp.close()
        if self._api is not None:
            await self._api.close()
        await self._store_unsaved_mapems()

    # --- controller -> C-Roads --------------------------------------------------------------

    def _from_controller(self, payload: Payload) -> None:
        counters = self.counters.tlc(payload.tlc)
        counters.payloads_in += 1
        translator = self.translator
        result = translator.to_bi(payload, read_now().utc_ms)
        if translator.mismatch is not None:
            self._mismatched(payload, *translator.mismatch)
            translator.mismatch = None
        if isinstance(result, Dropped):
            counters.dropped += 1
            self._dropped(payload, result)
            return
        for message in result:
            self._enqueue(message)
        if not self._drain_scheduled:  # once per loop turn, after everything this read delivered
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        self.outbound.drain()

    def _refused(self, message: BiMessage, reason: str) -> None:
        """The broker refused a message for good (:class:`~.outbound.Outbound`): counted, said, and a
        refused MAPEM no longer lets its controller's SPATEMs through (IP_104)."""
        self.counters.tlc(message.tlc).refused += 1
        self.counters.dropped["refused"] = self.counters.dropped.get("refused", 0) + 1
        waits = message.kind == MAPEM and self.translator.mapem_refused(message.tlc, message.body)
        if waits:  # SPATEMs queued behind it while the broker's limit was not known yet: not published now
            for _ in self.outbound.withdraw(message.tlc, SPATEM):
                self.counters.tlc(message.tlc).dropped += 1
                self.counters.dropped[WAITS_FOR_MAPEM] = self.counters.dropped.get(WAITS_FOR_MAPEM, 0) + 1
                self._held_for_mapem(message.tlc)
        self._warn("tlex_message_refused", (message.tlc, message.kind, reason.split(":")[0]), {
            "tlc": message.tlc, "message_type": message.kind, "reason": reason, "spatems_wait": waits})

    def _dropped(self, payload: Payload, dropped: Dropped) -> None:
        """Count a payload not published by cause; say why (see the module docstring)."""
        cause, tlc = dropped.cause, payload.tlc or "?"
        self.counters.dropped[cause] = self.counters.dropped.get(cause, 0) + 1
        fields = {"tlc": tlc, "payload_type": f"0x{payload.payload_type:02x}", "reason": dropped.reason}
        if cause == UNIDENTIFIED:
            key = (tlc, payload.payload_type)
            self.counters.unidentified[key] = self.counters.unidentified.get(key, 0) + 1
            self._warn("tlex_payload_unidentified", key, fields)
        elif cause in (NOT_BRIDGED, UNKNOWN_TLC):
            self._warn("tlex_payload_dropped", (tlc, payload.payload_type, cause), {**fields, "cause": cause})
        elif cause == WAITS_FOR_MAPEM:
            self._held_for_mapem(tlc)
        elif cause == MAPEM_SUPPRESSED:
            self._event("debug", "tlex_payload_dropped", {**fields, "cause": cause})

    def _held_for_mapem(self, tlc: str) -> None:
        """IP_104: said at info level once per controller while its SPATEMs wait, counted each."""
        self.counters.tlc(tlc).held_for_mapem += 1
        held = self._waiting.get(tlc)
        if held is None:
            self._event("info", "tlex_spatems_wait_for_mapem", {
                "tlc": tlc, "reason": "IP_104: a SPATEM is published only after its controller's MAPEM; they are "
                                      "held back until the controller sends one (its MAPEM interval)"})
        self._waiting[tlc] = (held or 0) + 1

    def _mismatched(self, payload: Payload, payload_type: int, found: Identified) -> None:
        self._warn("tlex_payload_type_mismatch", (payload.tlc, payload_type), {
            "tlc": payload.tlc, "payload_type": f"0x{payload_type:02x}", "mapped": found.mapped, "header": found.kind,
            "reason": f"type byte 0x{payload_type:02x} is mapped to {found.mapped} but the payload's ITS PDU header "
                      f"says {found.kind}: published as {found.kind}; check tlex.payload_types"})

    def _warn(self, event: str, key: tuple, fields: dict[str, Any]) -> None:
        """A warning at most once per WARNING_INTERVAL_S per key, with how many it stands for."""
        count = self._warnings.hit((event, *key), read_now().mono)
        if count is not None:
            self._event("warning", event, {**fields, "count": count})

    def _enqueue(self, message: BiMessage) -> None:
        if not self.outbound.offer(message):
            return
        if self._waiting and message.kind == MAPEM and message.tlc in self._waiting:
            self._event("info", "tlex_spatems_flow", {"tlc": message.tlc, "held": self._waiting.pop(message.tlc)})
        if message.kind == MAPEM and self._mapems is not None:  # repeats too: kept 9 min from the last copy
            self._save_mapem(message)

    def _save_mapem(self, message: BiMessage) -> None:
        """One write to the store at a time, of the latest MAPEM per controller, and a controller's
        MAPEM at most once per ``mapem_store_interval_s`` (the newest copy meanwhile is written at
        stop): a file written and renamed costs ~0.2 ms of CPU, mostly the kernel's, and 1,000
        controllers sending MAPEM every second would spend a fifth of a core on it. A restart after
        a crash then finds a copy at most that much older: its age is counted from when it was
        stored, so it is repeated for less time, never past IP_049's 9 minutes."""
        now = read_now().utc_ms
        tlc = message.tlc
        stored = self._stored_ms.get(tlc)
        if stored is not None and now - stored < self._store_interval_ms:
            self._deferred[tlc] = (now, message.body)
            return
        self._stored_ms[tlc] = now
        self._deferred.pop(tlc, None)
        self._unsaved[tlc] = (now, message.body)
        if self._saving is None:
            self._write_mapems()

    def _write_mapems(self) -> None:
        assert self._mapems is not None
        batch, self._unsaved = self._unsaved, {}
        self._saving = asyncio.get_running_loop().run_in_executor(None, self._mapems.save_all, batch)
        self._saving.add_done_callback(self._saved)

    def _saved(self, future: asyncio.Future[None]) -> None:
        self._saving = None
        if not future.cancelled() and future.exception() is not None:
            self._event("warning", "tlex_mapem_not_stored", {"error": str(future.exception())})
        if self._unsaved and not future.cancelled():
            self._write_mapems()

    async def _store_unsaved_mapems(self) -> None:
        """At stop: the writes in progress (each done one starts the next), then anything left, with
        the newest copies that waited for their controller's store interval."""
        self._unsaved.update(self._deferred)
        self._deferred = {}
        while self._saving is not None:
            saving = self._saving
            with contextlib.suppress(Exception):  # reported by _saved
                await asyncio.shield(saving)
            await asyncio.sleep(0)  # _saved runs (it may start the next write)
            if self._saving is saving:
                break
        if self._unsaved and self._mapems is not None:
            batch, self._unsaved = self._unsaved, {}
            try:
                await asyncio.to_thread(self._mapems.save_all, batch)
            except OSError as exc:
                self._event("warning", "tlex_mapem_not_stored", {"error": str(exc)})

    async def _amqp_loop(self) -> None:
        """Keep the AMQP connection (publish target + SREM source) up; again after a loss with
        back-off (the messages in flight then are sent again: :class:`~.outbound.Outbound`)."""
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        while True:
            try:
                await self._amqp_session(backoff)
            except (OSError, ssl.SSLError, ConnectionError, TimeoutError) as exc:
                self._event("warning", "tlex_amqp_failed", {"error": str(exc) or type(exc).__name__})
            self._amqp = None
            self.outbound.detach()
            await asyncio.sleep(backoff.next_delay())

    async def _amqp_session(self, backoff: Backoff) -> None:
        assert self.target is not None
        connection = await ClientConnection.open(self.host, self._amqps_port, client_context(self._files),
                                                 self.node_name, f"tlex-bridge-{self.actor_cn}")
        self.counters.amqp_connects += 1
        backoff.reset()
        self._amqp = connection
        connection.on_receive = self._drain
        door = self._attach_publisher(connection)
        for source in self.srem_sources:
            connection.open_receiver(source, self._from_broker, credit=100)
        self._event("info", "tlex_amqp_connected", {"target": self.target, "sources": self.srem_sources,
                                                    "publish": "in-process door" if door is not None else "amqps"})
        closed: asyncio.Future[Any] = asyncio.ensure_future(connection.link_closed.wait())
        door_closed = asyncio.Event()
        if door is not None:
            door.publisher.on_closed = door_closed.set
        door_closing: asyncio.Future[Any] = asyncio.ensure_future(door_closed.wait())
        lost: asyncio.Future[Any] = connection.lost
        try:  # a link the broker detached (its source or target went) comes back with a new connection
            await asyncio.wait([lost, closed, door_closing], return_when=asyncio.FIRST_COMPLETED)
            if closed.done() or door_closing.done():
                error = door.publisher.error if door is not None and door.closed else connection.engine.remote_error
                self._event("info", "tlex_amqp_link_closed", {"error": error})
        finally:
            closed.cancel()
            door_closing.cancel()
            if door is not None:
                door.close()
            await connection.close()

    def _attach_publisher(self, connection: ClientConnection) -> DoorSender | None:
        """Publish through the broker's in-process door when the node has one and the broker lets this
        actor through it (the same authorization as a link attach); else (another broker process serves
        the target, say) over the AMQPS connection's sender link."""
        assert self.target is not None
        if self._door is not None:
            try:
                door = DoorSender(self._door.open(self.actor_cn, self.target))
            except AttachRefused as exc:
                self._event("info", "tlex_door_refused", {"target": self.target, "condition": exc.condition,
                                                          "reason": exc.description})
            else:
                self.outbound.attach(door, door, door)
                return door
        self.outbound.attach(connection, connection.engine, connection.open_sender(self.target))
        return None

    # --- C-Roads -> controller --------------------------------------------------------------

    def _from_broker(self, raw: bytes) -> str | None:
        message = Message()
        message.decode(raw)
        body = message.body
        data = bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else None
        if data is None:
            self.counters.srem_dropped += 1
            return "SREM body must be the binary payload (an AMQP data section)"
        result = self.translator.to_controllers(dict(message.properties or {}), data, read_now().utc_ms)
        if isinstance(result, Dropped):
            self.counters.srem_dropped += 1
            self._warn("tlex_srem_refused", (result.cause,), {"reason": result.reason, "cause": result.cause})
            return result.reason
        assert self.supervisor is not None
        refusals = []
        for payload in result:
            refusal = self.supervisor.send(payload)
            if refusal is None:
                self.counters.tlc(payload.tlc).srem_out += 1
            else:
                refusals.append(f"{payload.tlc}: {refusal}")
        if len(refusals) == len(result):  # nowhere to go: rejected at the broker, with why
            self.counters.srem_dropped += 1
            self._warn("tlex_srem_refused", ("stream",), {"reason": "; ".join(refusals), "cause": "stream"})
            return "; ".join(refusals)
        return None

    def _stream_event(self, name: str, fields: dict) -> None:
        level = "warning" if name in ("session_refused", "stream_connect_failed") else "info"
        self._event(level, f"tlex_{name}", fields)
        if name == "stream_closed":
            self.log_tlc_records()

    def log_tlc_records(self) -> None:
        """One ``tlex_tlc`` record per controller: its counters so far (at each stream end and at stop)."""
        connected = self.supervisor is not None and self.supervisor.stats.connected
        for controller in self.config.controllers:
            counters = self.counters.tlc(controller.tlc_id)
            self._event("info", "tlex_tlc", {"tlc": controller.tlc_id, "stream_connected": connected,
                                             "payloads_in": counters.payloads_in, "published": counters.published,
                                             "dropped": counters.dropped, "refused": counters.refused,
                                             "held_for_mapem": counters.held_for_mapem,
                                             "srem_out": counters.srem_out})


class TlexCollector:
    """Prometheus metrics of one bridge: the session and each TLC."""

    def __init__(self, bridge: TlexBridge) -> None:
        self._bridge = bridge

    def collect(self) -> Iterator[Metric]:
        bridge, supervisor = self._bridge, self._bridge.supervisor
        stats = supervisor.stats if supervisor is not None else None
        yield GaugeMetricFamily("tlex_session_connected", "1 while the Broker session's stream is up",
                                value=int(bool(stats and stats.connected)))
        yield CounterMetricFamily("tlex_sessions_created", "Streaming sessions created", value=stats.sessions if stats else 0)
        closes = CounterMetricFamily("tlex_stream_closes", "Streams ended, by cause (bye, reconnect, framing, ...)",
                                     labels=["cause"])
        for cause, count in sorted((stats.closes if stats else {}).items()):
            closes.add_metric([cause], count)
        yield closes
        yield GaugeMetricFamily("tlex_publish_queue", "BI messages waiting for broker credit",
                                value=len(bridge.outbound.queue))
        yield CounterMetricFamily("tlex_bi_resent", "BI messages sent again after their link or connection went",
                                  value=bridge.outbound.retried)
        yield CounterMetricFamily("tlex_srem_dropped", "SREMs from the broker not sent to a controller",
                                  value=bridge.counters.srem_dropped)
        dropped = CounterMetricFamily("tlex_payloads_dropped", "Payloads from controllers not published, by cause "
                                      "(unidentified, not_bridged, waits_for_mapem, ...)", labels=["cause"])
        for cause, count in sorted(bridge.counters.dropped.items()):
            dropped.add_metric([cause], count)
        yield dropped
        unidentified = CounterMetricFamily("tlex_payloads_unidentified", "Payloads whose ITS PDU header and type byte "
                                           "name no message type, by controller and type byte",
                                           labels=["tlc", "payload_type"])
        for (tlc, payload_type), count in sorted(bridge.counters.unidentified.items()):
            unidentified.add_metric([tlc, f"0x{payload_type:02x}"], count)
        yield unidentified
        mapems = bridge.translator.mapems
        yield CounterMetricFamily("tlex_mapem_repeated", "MAPEMs published again while valid (IP_048)",
                                  value=mapems.repeated)
        yield CounterMetricFamily("tlex_mapem_suppressed", "Identical MAPEMs not published (mapem_min_interval_ms)",
                                  value=mapems.suppressed)
        per_tlc = {name: CounterMetricFamily(f"tlex_tlc_{name}", text, labels=["tlc"]) for name, text in (
            ("payloads_in", "Payloads received from a controller"), ("published", "BI messages published"),
            ("dropped", "Payloads not published (IP_104, unknown type, full queue, identical MAPEM)"),
            ("refused", "BI messages the broker refused for good (too large, rejected, not accepted after retries)"),
            ("held_for_mapem", "SPATEMs not published before the controller's first MAPEM (IP_104)"),
            ("srem_out", "SREMs sent to a controller"))}
        for tlc, counters in sorted(bridge.counters.tlcs.items()):
            for name, family in per_tlc.items():
                family.add_metric([tlc], getattr(counters, name))
        yield from per_tlc.values()
