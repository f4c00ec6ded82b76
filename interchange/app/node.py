"""The node runtime: builds the broker and, when configured, the Improved Interface from a
:class:`NodeConfig` and runs them in one asyncio event loop.

- SIGHUP or the admin ``POST /tls/reload`` re-reads certificate, key, trust bundle and CRLs in
  every broker process for new connections on BI and II; open ones stay unless the new CRLs
  revoke them (closed, logged). SIGHUP also applies a re-read ``[tlex]`` controllers list to the
  running bridge; other changed settings are refused (``tlex_reload_failed``).
- Start-up and shutdown go through one exit stack: a start that fails half way stops what had
  started, in reverse order, before the error reaches the caller; :meth:`RunningNode.close`
  unwinds the same stack.
- :meth:`RunningNode.freeze_startup_heap`: full GC collections then walk only what the node made
  since start, instead of stalling the event loop for tens of milliseconds.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from dataclasses import dataclass, field
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry

from certs.node_tls import NodeTls, TlsReloadError
from certs.tls import TlsFiles, certificate_lifetime_problem
from ii_api.node.runtime import RunningII, start_ii
from ii_api.node.service import IIService
from ii_api.settings.config import MultihopConfig
from interchange.app.admin import start_admin
from interchange.app.config import NodeConfig, tlex_limits
from interchange.app.federation_view import bridge_links, take_snapshot
from interchange.app.node_metrics import FederationCollector, NodeCollector, TlsPaths
from interchange.app.processes import BrokerProcesses
from interchange.broker.cpu_placement import place_process, thread_cpus, usable_cpus
from interchange.bridges.if2.metrics import If2Collector
from interchange.bridges.tlex.bridge import BridgeReloadError, TlexBridge, TlexCollector
from interchange.bridges.tlex.publication import Translator
from interchange.bridges.tlex.registration import BridgeSetupError
from interchange.broker.addresses import AddressBook
from interchange.broker.admission import Admission
from interchange.broker.durable import Durability
from interchange.broker.hop_trace import HopGuard
from interchange.broker.import_duplicates import ImportDuplicates
from interchange.broker.local_door import LocalDoor
from interchange.broker.message_log import JsonLog
from interchange.broker.metrics import broker_registry
from interchange.broker.observer import BrokerObserver
from interchange.broker.placement import Placement
from interchange.broker.router import BrokerCore
from interchange.broker.server import BrokerServer
from interchange.broker.store import JournalStore
from interchange.ground.timing import now_ms


NOTHING_TO_LISTEN_ON = "nothing to listen on: configure [tls] (AMQPS) or broker.plain_port"


@dataclass
class RunningNode:
    """Handles of a started node (for the CLI, the demo and the tests)."""

    config: NodeConfig
    addresses: AddressBook
    core: BrokerCore
    server: BrokerServer
    log: JsonLog
    amqps_port: int | None = None
    amqp_port: int | None = None
    admin_port: int | None = None
    ii: IIService | None = None
    ii_port: int | None = None
    ii_runtime: RunningII | None = None
    tls: NodeTls | None = None  #: this process's TLS contexts (BI and II, server and client side)
    placement: Placement = Placement()
    workers: BrokerProcesses | None = None  #: broker processes 1..N-1 (process 0 only)
    #: AMQPS ports of broker processes 0..N-1 (this process first); see interchange.broker.placement
    amqps_ports: list[int] = field(default_factory=list)
    amqp_ports: list[int] = field(default_factory=list)  #: plain AMQP (development), likewise
    tlex: TlexBridge | None = None  #: the traffic-light bridge ([tlex])
    if2: Any = None  #: the IF2 bridge ([if2], interchange.bridges.if2.bridge.If2Bridge; pamqp is an extra)
    metrics: CollectorRegistry | None = None  #: what the admin endpoint's /metrics shows
    #: how every started part stops, unwound in reverse order by close() (or by a failed start)
    _exit: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def on_close(self, callback: Callable[[], Awaitable[object]]) -> None:
        """Have ``close`` await ``callback`` (before what was registered earlier)."""
        self._exit.push_async_callback(callback)

    async def close(self) -> None:
        await self._exit.aclose()

    def freeze_startup_heap(self) -> None:
        """Collect once, then move every surviving object (modules, config, PKI, II state, ...) to
        the collector's permanent generation (``gc.freeze``): a full (generation 2) collection
        walks the whole tracked heap, and on the TLEX benchmark's node that stalled the event loop
        for 65-92 ms, inside the measurement window, delaying every payload behind it. Once, after
        start-up, before traffic: the one collection here costs the same."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self.log.event("info", "heap_frozen", {"objects": gc.get_freeze_count(),
                                               "collect_ms": round((time.perf_counter() - started) * 1e3, 1)})

    async def shutdown(self) -> None:
        """Graceful stop (SIGTERM), then :meth:`close`: stop accepting (no new connections,
        new messages released), let the store finish what it was writing (those publishers get
        their ``accepted``), detach every link and close every connection with conditions clients
        act on, and log what stays buffered per source; bounded by ``broker.shutdown_timeout_s``.
        Broker workers stop the same way, at the same time."""
        self.server.stop_accepting()
        workers = asyncio.ensure_future(self.workers.close()) if self.workers is not None else None
        timeout = self.config.broker.shutdown_timeout_s
        closed: list[int] = []
        try:
            async with asyncio.timeout(timeout):
                await self._quiesce(timeout, closed)
            timed_out = False
        except TimeoutError:
            timed_out = True
        self.log.event("warning" if timed_out else "info", "shutdown", {
            "process": self.placement.index, "timed_out": timed_out, "connections_closed": sum(closed),
            "buffered": self.core.held(), "stored": self.core.durability.store_live() if self.core.durability else 0})
        if workers is not None:
            await workers
        await self.close()

    async def _quiesce(self, timeout_s: float, closed: list[int]) -> None:
        if self.core.durability is not None:
            await self.core.durability.store.drain()
        closed.append(await self.server.close_connections(timeout_s))

    async def reload_tls(self) -> dict[str, Any]:
        """Re-read the TLS files here and in the broker processes; close the connections the new
        CRLs revoke. Raises TlsReloadError (logged) with the reason if the files are unusable."""
        if self.tls is None:
            raise TlsReloadError("this node has no [tls] section: there is nothing to reload")
        try:
            reloaded = await asyncio.to_thread(self.tls.reload)  # file reads and key checks, off the loop
        except TlsReloadError as exc:
            self.log.event("error", "tls_reload_failed", {"error": str(exc), "process": self.placement.index})
            raise
        closed = {"bi": self.server.close_revoked(reloaded.revocations),
                  "ii": self.ii_runtime.close_revoked(reloaded.revocations) if self.ii_runtime is not None else 0}
        notified = self.workers.reload_tls() if self.workers is not None else 0
        summary = {**reloaded.summary(), "closed": closed, "process": self.placement.index,
                   "broker_processes_notified": notified}
        self.log.event("info", "tls_reloaded", summary)
        return summary

    async def reload_tlex(self, load_config: Callable[[], NodeConfig]) -> dict[str, Any]:
        """Apply the ``[tlex]`` controllers of the config file as it is now (read off the loop).
        Raises ValueError (logged ``tlex_reload_failed``) for an unreadable file or a change that
        needs a restart; BridgeSetupError if the node refused a capability or subscription."""
        try:
            if self.tlex is None:
                raise BridgeReloadError("this node runs no [tlex] bridge: adding one needs a restart")
            config = await asyncio.to_thread(load_config)
            if config.tlex is None:
                raise BridgeReloadError("[tlex] was removed: stopping the bridge needs a restart")
            return await self.tlex.update(config.tlex)
        except (OSError, ValueError, BridgeSetupError) as exc:
            self.log.event("error", "tlex_reload_failed", {"error": str(exc)})
            raise


def tls_files(config: NodeConfig) -> TlsFiles:
    assert config.tls is not None
    return TlsFiles(cert_chain=config.tls.cert_chain, key=config.tls.key,
                    trust_bundle=config.tls.trust_bundle, crls=tuple(config.tls.crls or ()))


def check_tls_choices(config: NodeConfig, event: Callable[[str, str, dict], None]) -> None:
    """Revocation and certificate lifetime are explicit choices (IP_051, IP_050).

    No ``tls.crls`` at all refuses to start (revocation would silently go unchecked);
    ``crls = []`` starts with a warning. With ``tls.max_certificate_days`` the node's own
    certificate must not be valid for longer either.
    """
    tls = config.tls
    if tls is None:
        return
    if tls.crls is None:
        raise ValueError("tls.crls is not set: peer certificates would not be checked for revocation; "
                         "list the CAs' CRL files, or set crls = [] to run without revocation checks on purpose")
    if not tls.crls:
        event("warning", "tls_revocation_unchecked", {"reason": "tls.crls = []: revoked peer certificates are accepted"})
    if tls.max_certificate_days is not None:
        problem = certificate_lifetime_problem(tls.cert_chain, tls.max_certificate_days)
        if problem is not None:
            raise ValueError(f"the node's own certificate {tls.cert_chain}: {problem}")


async def start_node(config: NodeConfig, placement: Placement | None = None) -> RunningNode:
    """Start the broker listeners (and the admin endpoint, II and bridges when configured).

    With ``broker.processes`` > 1 this process is broker process 0 and starts the others
    (:class:`BrokerProcesses`); ``placement`` is given only to those others. If any part fails
    to start, the parts already started are stopped before the error is raised.
    """
    exit_stack = contextlib.AsyncExitStack()
    try:
        return await _start(config, placement, exit_stack)
    except BaseException:
        await exit_stack.aclose()
        raise


async def _start(config: NodeConfig, placement: Placement | None, exit_stack: contextlib.AsyncExitStack) -> RunningNode:
    """The parts in the order they depend on each other: the log, the broker core and its server,
    the listeners, the admin endpoint, the other broker processes (process 0), the II, the bridges."""
    main = placement is None
    if placement is None:
        placement = config.broker.placement()
    cpus = usable_cpus()  # before anything confines a thread: what workers run on without process_cpus
    if main and config.broker.process_cpus is not None:  # a worker placed itself before its config check
        place_process(frozenset(config.broker.process_cpus[0]))
    log = JsonLog(config.name, path=config.log.path, settings=config.log.settings(), process=placement.index,
                  rotation=config.log.rotation())
    exit_stack.callback(log.close)
    _log_placement(config, placement, log)
    check_tls_choices(config, log.event)
    addresses, core = await _broker_core(config, placement, log, exit_stack)
    server = BrokerServer(core, config.broker.engine_limits(), event=log.event)
    server.max_peer_certificate_days = config.tls.max_certificate_days if config.tls is not None else None
    exit_stack.push_async_callback(server.close)
    node = RunningNode(config, addresses, core, server, log, placement=placement, _exit=exit_stack)
    await _listen(node)
    if config.admin.port is not None:
        node.metrics, federation = node_registry(node, main)
        runner, node.admin_port = await start_admin(config.admin.host, config.admin.port, core, server, log,
                                                    node.metrics, node.reload_tls, federation,
                                                    config.admin.debug)
        node.on_close(runner.cleanup)
    await _start_processes(node, main, cpus)
    if config.ii is not None:
        await _start_ii(node)
    if config.tlex is not None and main:
        await _start_tlex(node)
    if config.if2 is not None and main:
        await _start_if2(node)
    log.event("info", "node_started", {"amqps_port": node.amqps_port, "amqp_port": node.amqp_port,
                                       "admin_port": node.admin_port, "ii_port": node.ii_port,
                                       "process": placement.index, "amqps_ports": node.amqps_ports,
                                       "memory_budget_bytes": core.budget.limit})
    return node


async def _broker_core(config: NodeConfig, placement: Placement, log: JsonLog,
                       exit_stack: contextlib.AsyncExitStack) -> tuple[AddressBook, BrokerCore]:
    """The configured addresses and the core routing between them: admission, hop guard, durable
    store (opened and recovered here) and, with multi-hop federation, the import duplicates' window."""
    addresses = AddressBook()
    addresses.load(config.broker.targets, config.broker.sources)
    if config.tls is None and config.broker.plain_port is None:  # before the store is opened or created
        raise ValueError(NOTHING_TO_LISTEN_ON)
    multihop = config.ii.multihop if config.ii is not None else MultihopConfig()
    hops = HopGuard(config.name, multihop.hop_limit, stamp=multihop.enabled)
    admission = Admission(config.broker.ttl)
    durability = await _open_store(config, placement, admission, log, exit_stack)
    duplicates = (ImportDuplicates(round(multihop.duplicate_window_s * 1000), multihop.duplicate_window_entries)
                  if multihop.enabled else None)  # one path per message without multi-hop: nothing to drop
    core = BrokerCore(addresses, admission, BrokerObserver(log), placement=placement, hops=hops, durability=durability,
                      duplicates=duplicates, buffers=config.broker.buffer_limits())
    return addresses, core


async def _listen(node: RunningNode) -> None:
    """The AMQPS listener (with this process's TLS contexts) and the plain development one, as configured."""
    config, server = node.config, node.server
    if config.tls is not None:
        node.tls = NodeTls(tls_files(config), config.tls.max_certificate_days)
        node.amqps_port = await server.listen_tls(config.broker.host, config.broker.port,
                                                  node.tls.server.current)
    if config.broker.plain_port is not None:
        if not config.broker.plain_identity:
            raise ValueError("broker.plain_port needs broker.plain_identity (the identity of plain connections)")
        node.amqp_port = await server.listen_plain(config.broker.host, config.broker.plain_port,
                                                   config.broker.plain_identity)
    if node.amqps_port is None and node.amqp_port is None:
        raise ValueError(NOTHING_TO_LISTEN_ON)


def _log_placement(config: NodeConfig, placement: Placement, log: JsonLog) -> None:
    """With process_cpus, once per broker process: where its threads run (``broker_process_cpus``)."""
    if config.broker.process_cpus is None:
        return
    handshake = config.broker.limits.handshake_cpus
    log.event("info", "broker_process_cpus", {
        "process": placement.index, "process_cpus": sorted(config.broker.process_cpus[placement.index]),
        "cpus": sorted(usable_cpus() or ()), "handshake_cpus": None if handshake is None else sorted(handshake),
        "threads": thread_cpus()})


async def _start_processes(node: RunningNode, main: bool, cpus: frozenset[int] | None) -> None:
    """Process 0 of several starts broker processes 1..N-1 (``cpus``: the node's at start, theirs without
    process_cpus); the ports of all of them, this one first."""
    if main and node.placement.processes > 1:
        workers = await BrokerProcesses.start(node.config.model_dump(mode="json"), node.placement.processes,
                                              node.addresses, node.log, cpus=cpus)
        node.workers = workers
        node.on_close(workers.close)
        if node.amqps_port is not None:
            node.amqps_ports = [node.amqps_port] + [r.amqps_port for r in workers.ready if r.amqps_port is not None]
        if node.amqp_port is not None:
            node.amqp_ports = [node.amqp_port] + [r.amqp_port for r in workers.ready if r.amqp_port is not None]
    else:
        node.amqps_ports = [node.amqps_port] if node.amqps_port is not None else []
        node.amqp_ports = [node.amqp_port] if node.amqp_port is not None else []


async def _start_ii(node: RunningNode) -> None:
    """The Improved Interface ([ii]) in this process, over this broker's addresses and core."""
    config = node.config
    assert config.ii is not None
    if node.tls is None or node.amqps_port is None:
        raise ValueError("[ii] needs [tls]: the Improved Interface is HTTPS with client certificates "
                         "and advertises the AMQPS listener")
    running_ii = await start_ii(config.name, config.ii, config.data_dir, node.tls, node.addresses, node.core,
                                node.amqps_ports, node.placement, node.log.event,
                                handshakes=node.server.handshakes)
    node.ii, node.ii_port, node.ii_runtime = running_ii.service, running_ii.port, running_ii
    node.on_close(running_ii.close)


def node_registry(node: RunningNode, main: bool) -> tuple[CollectorRegistry, FederationCollector | None]:
    """The admin endpoint's metrics: the broker's, the log's counts, the node-level ones, and in the
    node process the federation state (the bridges' collectors join when they start)."""
    registry = broker_registry(node.core, node.server, node.log)

    def tls_paths() -> TlsPaths | None:
        files = node.tls.files if node.tls is not None else None
        return TlsPaths(files.cert_chain, tuple(files.crls)) if files is not None else None

    def bi_peers() -> list[bytes]:
        return [der for connection in node.server.connections if (der := connection.peer_certificate())]

    registry.register(NodeCollector(node.config.name, node.placement.index, node.placement.processes,
                                    node.config.data_dir, tls_paths, bi_peers))
    if not main:
        return registry, None
    federation = FederationCollector(lambda: take_snapshot(node.config.name, node.ii_runtime,
                                                           bridge_links(node.tlex, node.if2)))
    registry.register(federation)
    return registry, federation


async def _open_store(config: NodeConfig, placement: Placement, admission: Admission, log: JsonLog,
                      exit_stack: contextlib.AsyncExitStack) -> Durability | None:
    """Open this broker process's durable store and recover it; what was damaged is logged,
    never refused, and a full disk does not stop the start (durable messages are refused until there
    is space). It closes (after a last fsync) once the listeners have closed."""
    settings = config.broker.store
    if not settings.enabled:
        return None
    directory = config.data_dir / "store" / f"p{placement.index}"
    process = placement.index
    store, recovery = await JournalStore.open(
        directory, segment_bytes=settings.segment_bytes, fsync=settings.fsync, now_ms=now_ms(),
        event=lambda level, event, details: log.event(level, event, {**details, "process": process}))
    exit_stack.push_async_callback(store.close)
    if recovery.unreadable is not None:  # nothing touched: a restart with the disk mended recovers it all
        log.event("error", "store_unreadable", {"reason": recovery.unreadable, "process": process,
                                                "durable": "refused until restarted with a readable store"})
    for repair in recovery.corrupt:
        log.event("warning", "store_repaired", {"file": repair.file, "kept_bytes": repair.kept_bytes,
                                                "reason": repair.reason, "repair_failed": repair.error,
                                                "process": process})
    durability = Durability(store)
    counts = durability.recover(
        recovery.messages, lambda raw, publisher, federated: admission.admit(raw, publisher, federated, None, now_ms()))
    if recovery.segments:  # a fresh store has nothing to say
        log.event("info", "store_recovered", {"directory": str(directory), "messages": len(recovery.messages),
                                              "per_source": counts, "segments": recovery.segments,
                                              "records": recovery.records, "unreadable": durability.unreadable,
                                              "process": placement.index})
    return durability


async def _start_tlex(node: RunningNode) -> None:
    """The traffic-light bridge: a local actor of this node (actor API over HTTPS; BI publishes through the
    broker's in-process door, or over AMQPS with ``bi_door = "amqps"``; SREMs over AMQPS)."""
    config = node.config
    assert config.tlex is not None
    if node.ii_port is None or node.amqps_port is None:
        raise ValueError("[tlex] needs [tls] and [ii]: the bridge registers its capabilities through the "
                         "local actor API and publishes over AMQPS")
    assert config.ii is not None
    translator = await asyncio.to_thread(Translator, config.tlex)  # the controllers' properties: not on the loop
    bridge = TlexBridge(config.tlex, node_name=config.name, ii_port=node.ii_port, amqps_port=node.amqps_port,
                        event=node.log.event, ii_base_path=config.ii.base_path, state_dir=config.data_dir / "tlex",
                        limits=tlex_limits(config.ii), translator=translator,
                        door=LocalDoor(node.core, node.server.limits.max_message_size, lambda: node.server.accepting)
                        if config.tlex.bi_door == "in-process" else None)
    await _start_bridge(node, bridge)
    node.tlex = bridge
    if node.metrics is not None:
        node.metrics.register(TlexCollector(bridge))


async def _start_bridge(node: RunningNode, bridge: TlexBridge | Any) -> None:
    """Start a bridge: what it started is closed if it fails, and its close joins the node's stack."""
    try:
        await bridge.start()
    except BaseException:
        await bridge.close()
        raise
    node.on_close(bridge.close)


async def _start_if2(node: RunningNode) -> None:
    """The IF2 bridge, a local actor of this node (actor API over HTTPS, BI by the in-process door or AMQPS). Imported here:
    pamqp is the optional [if2] extra, needed only by nodes that run the bridge."""
    config = node.config
    assert config.if2 is not None
    if config.ii is None or node.ii is None or node.ii_port is None or node.amqps_port is None:
        raise ValueError("[if2] needs [tls] and [ii]: the bridge is a local actor of the node")
    from interchange.bridges.if2.bridge import If2Bridge, NodeView  # noqa: PLC0415 (pamqp: the if2 extra only)

    def local(host: str) -> str:
        return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host

    view = NodeView(config.name, local(config.broker.host), node.amqps_port,
                    f"https://{local(config.ii.host)}:{node.ii_port}{node.ii.base}",
                    LocalDoor(node.core, node.server.limits.max_message_size, lambda: node.server.accepting,
                              delivery_log=lambda: node.core.observer if node.server.delivery_log is not None else None))
    bridge = If2Bridge(config.if2, view, node.log.event)
    await _start_bridge(node, bridge)
    node.if2 = bridge
    if node.metrics is not None:
        node.metrics.register(If2Collector(bridge))


async def _reload_logged(node: RunningNode, load_config: Callable[[], NodeConfig] | None) -> None:
    """SIGHUP: reload; a failure is in the log already (tls_reload_failed, tlex_reload_failed), the
    node keeps running."""
    if node.tls is not None:
        with contextlib.suppress(TlsReloadError):
            await node.reload_tls()
    if node.tlex is not None and load_config is not None:
        with contextlib.suppress(ValueError, OSError, BridgeSetupError):
            await node.reload_tlex(load_config)


async def run_forever(config: NodeConfig, ready: asyncio.Event | None = None,
                      load_config: Callable[[], NodeConfig] | None = None) -> None:
    """Run a node until SIGINT/SIGTERM; SIGHUP reloads its TLS files and, with
    ``load_config`` (the config file read again), its [tlex] controllers."""
    node = await start_node(config)
    node.freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[None]] = set()  # the running reload tasks, kept until done

    def hangup() -> None:
        task = loop.create_task(_reload_logged(node, load_config))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    for sig, handler in ((signal.SIGINT, stop.set), (signal.SIGTERM, stop.set), (signal.SIGHUP, hangup)):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, handler)
    ports = ", ".join(map(str, node.amqps_ports)) if len(node.amqps_ports) > 1 else node.amqps_port
    print(f"interchange {config.name}: AMQPS port {ports}, plain AMQP port {node.amqp_port}, "  # noqa: T201 (the start line operators and tests read)
          f"admin port {node.admin_port}, II (HTTPS) port {node.ii_port}", flush=True)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        await node.shutdown()
