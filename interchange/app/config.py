"""Node configuration (pydantic), read from a TOML or JSON file.

:func:`load_config` turns the file into a :class:`NodeConfig` or a CliError naming the problem;
relative paths are resolved against the config file's directory. The ``[ii]``, ``[tlex]`` and
``[if2]`` sections are modelled beside their code (``ii_api/settings/config.py``,
``interchange/bridges/tlex/config.py``, ``interchange/bridges/if2/config.py``).
An annotated example of a whole node: docs/configuration.md.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ii_api.settings.config import IIConfig
from interchange.bridges.if2.config import If2Config
from interchange.bridges.tlex.config import TlexBridgeConfig
from interchange.bridges.tlex.limits import ActorLimits, refusal
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.engine import EngineLimits
from interchange.broker.handshake_queue import (
    CPU_SHARE,
    HANDSHAKE_CPU_S,
    MIN_BURST_HANDSHAKES,
    THREAD,
    HandshakeThread,
    burst_capacity,
    cpus_problem,
)
from interchange.broker.cpu_placement import node_cpus, process_cpus_problem, usable_cpus
from interchange.broker.memory import DEFAULT_PROCESS_BUDGET, IP_032_FLOOR, MIB, BufferLimits, message_cost
from interchange.broker.ttl_policy import TtlPolicy
from interchange.broker.placement import Placement, target_processes_problem
from interchange.ground.errors import CliError
from interchange.ground.logfile import LogSettings, Rotation


class TlsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cert_chain: Path
    key: Path
    trust_bundle: Path
    #: CRL files checked for every peer certificate. Must be given: ``crls = []`` runs without
    #: revocation checks, on purpose (that choice is never made silently).
    crls: list[Path] | None = None
    #: IP_051: refuse certificates (peers' and the node's own) valid for more than this many days
    #: (the production example: 366); None does not check.
    max_certificate_days: int | None = Field(default=None, ge=1)


class LimitsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    publisher_credit: int = Field(default=1000, ge=1, le=100_000)
    max_message_size: int = Field(default=1024 * 1024, ge=1024)
    max_frame_size: int = Field(default=64 * 1024, ge=512)
    idle_timeout_ms: int = Field(default=60_000, ge=0)
    #: each stage of a connection's preamble, from its start (interchange.broker.deadlines)
    handshake_timeout_s: float = Field(default=10.0, gt=0, le=300, description="the TLS handshake")
    header_timeout_s: float = Field(default=10.0, gt=0, le=300, description="the AMQP/SASL protocol header, "
                                    "from the handshake")
    sasl_timeout_s: float = Field(default=10.0, gt=0, le=300, description="the SASL exchange, from the header")
    open_timeout_s: float = Field(default=10.0, gt=0, le=300, description="the peer's open frame, from SASL")
    #: interchange.broker.handshake_queue: the pace of arriving connections' TLS handshakes (BI and II)
    handshake_cpu_share: float = Field(default=CPU_SHARE, gt=0, le=1, description="seconds of TLS handshake CPU "
                                       "per second a broker process spends at most (of one core); the rest wait")
    handshake_thread: HandshakeThread = Field(default=THREAD, description="where TLS handshake steps run: a "
                                              "C thread scheduled SCHED_IDLE that never takes the GIL (native; "
                                              "idle where its self-test fails), a Python worker thread scheduled "
                                              "SCHED_IDLE (idle), at nice 19 (nice), or as the loop (normal); or "
                                              "in the event loop's turns (loop)")
    handshake_cpus: list[int] | None = Field(default=None, description="the CPUs the handshake worker (and its "
                                             "rescue thread) is confined to, the event loop's thread then to the "
                                             "others; CPUs this process may use, not all of them (None: no "
                                             "placement); with broker.process_cpus the loop stays on its "
                                             "entry and these may be any of the node's CPUs")

    def engine_limits(self) -> EngineLimits:
        return EngineLimits(publisher_credit=self.publisher_credit, max_message_size=self.max_message_size,
                            max_frame_size=self.max_frame_size, idle_timeout_ms=self.idle_timeout_ms,
                            handshake_timeout_s=self.handshake_timeout_s, header_timeout_s=self.header_timeout_s,
                            sasl_timeout_s=self.sasl_timeout_s, open_timeout_s=self.open_timeout_s,
                            handshake_cpu_share=self.handshake_cpu_share,
                            handshake_thread=self.handshake_thread,
                            handshake_cpus=None if self.handshake_cpus is None else frozenset(self.handshake_cpus))

    def handshake_pace_problem(self, handshake_timeout_s: float, where: str) -> str | None:
        """Why the handshake pace and a handshake deadline cannot both hold (None: they can): at
        ``handshake_cpu_share``, :data:`MIN_BURST_HANDSHAKES` connections arriving at once must all
        finish their handshakes within the deadline (the node's wait is not counted against a client's
        deadline, but it is the client's connect time: a burst is set up within what the node asks of a client)."""
        fits = burst_capacity(self.handshake_cpu_share, handshake_timeout_s)
        if fits >= MIN_BURST_HANDSHAKES:
            return None
        return (f"broker.limits.handshake_cpu_share {self.handshake_cpu_share} with {where} {handshake_timeout_s} s "
                f"lets only ~{fits} of {MIN_BURST_HANDSHAKES} connections arriving at once finish their TLS "
                f"handshakes (~{HANDSHAKE_CPU_S * 1000:.1f} ms of CPU each) before the deadline: raise one of them")

    @model_validator(mode="after")
    def _pace_fits_the_deadline(self) -> "LimitsConfig":
        problem = self.handshake_pace_problem(self.handshake_timeout_s, "broker.limits.handshake_timeout_s")
        if problem is not None:
            raise ValueError(problem)
        return self


class StoreConfig(BaseModel):
    """``[broker.store]``: durable messages, kept in ``<data_dir>/store/p<k>`` per broker process."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="honour the AMQP durable flag; off: every message is memory-only")
    segment_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, description="journal segment file size")
    fsync: bool = Field(default=True, description="fdatasync every group commit (off only for tests of other parts)")


class MemoryConfig(BaseModel):
    """``[broker.memory]``: the buffers' byte limits (interchange.broker.memory)."""

    model_config = ConfigDict(extra="forbid")

    source_max_bytes: int = Field(default=256 * MIB, ge=MIB, description="the byte limit of a source without "
                                  "its own (the II's): at least 200 messages of limits.max_message_size (IP_032)")
    node_max_bytes: int | None = Field(default=None, ge=MIB, description="the budget of all sources together, "
                                       "shared equally by the broker processes (None: 512 MiB for each, or 200 "
                                       "messages of limits.max_message_size if more); past it "
                                       "the source holding the most evicts its oldest messages (dropped_message, "
                                       "reason node_memory)")


class BrokerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=5671, ge=0, le=65535)
    plain_port: int | None = Field(default=None, ge=0, le=65535)
    plain_identity: str | None = None
    processes: int = Field(default=1, ge=1, le=64, description="broker processes (one per core): process k "
                           "listens on port + k (any free port when port is 0); see interchange.broker.placement")
    process_cpus: list[list[int]] | None = Field(default=None, description="entry k: the CPUs of broker process "
                                                 "k's event loop and its other threads (its TLS handshake threads "
                                                 "still go to limits.handshake_cpus when set, and may lie outside "
                                                 "it); one entry per process, CPUs this node may use (None: no "
                                                 "placement); see interchange.broker.cpu_placement")
    target_processes: list[int] | None = Field(default=None, description="the broker processes that host "
                                               "the targets with no process of their own (static and the II's), "
                                               "by a stable hash of the address (None: all); e.g. [1] keeps "
                                               "process 0, which hosts the II and the federation links, for "
                                               "imported data; see interchange.broker.placement")
    targets: list[TargetSpec] = Field(default_factory=list)
    sources: list[SourceSpec] = Field(default_factory=list)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    ttl: TtlPolicy = Field(default_factory=TtlPolicy)
    store: StoreConfig = Field(default_factory=StoreConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    shutdown_timeout_s: float = Field(default=5.0, ge=0, le=300, description="SIGTERM: how long to finish store "
                                      "writes and close connections before stopping anyway")

    def engine_limits(self) -> EngineLimits:
        """The broker's limits; with process_cpus the loop's thread stays on its process's CPUs."""
        return replace(self.limits.engine_limits(), handshake_loop_placed=self.process_cpus is not None)

    def buffer_limits(self) -> BufferLimits:
        size = self.limits.max_message_size
        budget = self.memory.node_max_bytes
        return BufferLimits(max_message_size=size, source_max_bytes=self.memory.source_max_bytes,
                            node_max_bytes=(max(DEFAULT_PROCESS_BUDGET, IP_032_FLOOR * message_cost(size))
                                            if budget is None else budget // self.processes))

    @model_validator(mode="after")
    def _floors(self) -> "BrokerConfig":
        """IP_032: no buffer limit may hold fewer than 200 messages of the largest accepted size."""
        problems = self.buffer_limits().problems(self.sources)
        if problems:
            raise ValueError("; ".join(problems) + ": raise the limit or lower broker.limits.max_message_size")
        return self

    @model_validator(mode="after")
    def _cpus_exist(self) -> "BrokerConfig":
        """process_cpus against the node's CPUs (its cgroup's, not this thread's: a worker started from a
        confined thread inherits a narrowed set); handshake_cpus against the CPUs the process may use, or
        with process_cpus against the node's (the loop keeps its entry, so it may overlap)."""
        if self.process_cpus is not None:
            problem = process_cpus_problem(self.process_cpus, self.processes, node_cpus())
            if problem is not None:
                raise ValueError(f"broker.process_cpus {self.process_cpus}: {problem}")
        cpus = self.limits.handshake_cpus
        if cpus is not None:
            placed = self.process_cpus is not None
            problem = cpus_problem(frozenset(cpus), node_cpus() if placed else usable_cpus(),
                                   self.limits.handshake_thread, loop_placed=placed)
            if problem is not None:
                raise ValueError(f"broker.limits.handshake_cpus {cpus}: {problem}")
        return self

    def placement(self, index: int = 0) -> Placement:
        """Where this node's targets live, as broker process ``index`` sees it."""
        hosts = tuple(self.target_processes) if self.target_processes is not None else None
        return Placement(self.processes, index, hosts)

    @model_validator(mode="after")
    def _targets_in_range(self) -> "BrokerConfig":
        if self.target_processes is not None:
            problem = target_processes_problem(self.target_processes, self.processes)
            if problem is not None:
                raise ValueError(f"broker.target_processes {self.target_processes}: {problem}")
        for target in self.targets:
            if target.process is not None and target.process >= self.processes:
                raise ValueError(f"target {target.address!r} names process {target.process}, "
                                 f"but broker.processes is {self.processes}")
        return self


class LogConfig(LogSettings, Rotation):
    """``[log]``: the switches (:class:`LogSettings`), the file, and its rotation (:class:`Rotation`)."""

    path: Path | None = None

    @model_validator(mode="after")
    def _active_file_not_jsonl(self) -> "LogConfig":
        if self.path is not None and self.enabled and self.path.suffix == ".jsonl":
            raise ValueError(f"log.path {str(self.path)!r}: the active file must not end in .jsonl when rotating "
                             "(readers of <dir>/*.jsonl would see it before it is complete); e.g. node.log")
        return self

    def settings(self) -> LogSettings:
        return LogSettings.model_validate(self.model_dump(include=set(LogSettings.model_fields)))

    def rotation(self) -> Rotation:
        return Rotation.model_validate(self.model_dump(include=set(Rotation.model_fields)))


class AdminConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=0, le=65535)
    #: ``GET /debug/heap``: a full garbage collection on the event loop, then the C heap in use (tests)
    debug: bool = False


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    data_dir: Path = Path("var")
    tls: TlsConfig | None = None
    broker: BrokerConfig = Field(default_factory=BrokerConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    ii: IIConfig | None = None  # the Improved Interface; needs [tls]
    tlex: TlexBridgeConfig | None = None  # traffic lights via TLEX/UDAP; needs [tls] and [ii]
    if2: If2Config | None = None  # the InterCor IF2 bridge (interchange/bridges/if2); needs [ii]

    def resolve(self, base: Path) -> "NodeConfig":
        """Make relative paths relative to ``base``."""
        def fix(p: Path) -> Path:
            return p if p.is_absolute() else base / p

        update: dict = {"data_dir": fix(self.data_dir)}
        if self.tls is not None:
            update["tls"] = self.tls.model_copy(update={
                "cert_chain": fix(self.tls.cert_chain), "key": fix(self.tls.key),
                "trust_bundle": fix(self.tls.trust_bundle),
                "crls": None if self.tls.crls is None else [fix(c) for c in self.tls.crls]})
        if self.tlex is not None:
            update["tlex"] = self.tlex.resolve(base)
        if self.log.path is not None:
            update["log"] = self.log.model_copy(update={"path": fix(self.log.path)})
        if self.if2 is not None:
            update["if2"] = self.if2.resolve(base)
        return self.model_copy(update=update)

    @model_validator(mode="after")
    def _listeners_apart(self) -> "NodeConfig":
        """Broker process k listens on port + k for each fixed port (interchange.app.worker), the II on its
        port in process 0 only: the ranges must fit below 65536 and not share a port on one host, or a
        process would fail to start."""
        count = self.broker.processes
        listeners = [(name, host, port, span) for name, host, port, span in (
            ("broker.port", self.broker.host, self.broker.port, count),
            ("broker.plain_port", self.broker.host, self.broker.plain_port, count),
            ("admin.port", self.admin.host, self.admin.port, count),
            ("ii.port", self.ii.host if self.ii else "", self.ii.port if self.ii else None, 1))
            if port]  # None: not listening; 0: any free port
        for name, _, port, span in listeners:
            if port + span - 1 > 65535:
                raise ValueError(f"{name} {port} with broker.processes {count} needs ports up to "
                                 f"{port + span - 1}, above 65535")
        for i, (name, host, port, span) in enumerate(listeners):
            for other, other_host, other_port, other_span in listeners[i + 1:]:
                overlap = port < other_port + other_span and other_port < port + span
                if overlap and _same_listener_host(host, other_host):
                    raise ValueError(f"{name} {port} and {other} {other_port} share a port with broker.processes "
                                     f"{count}: broker process k listens on port + k (the II in process 0 only)")
        return self

    @model_validator(mode="after")
    def _ii_handshakes_fit_the_pace(self) -> "NodeConfig":
        """The II's handshakes wait in the broker process's queue too, under its deadline."""
        if self.ii is not None:
            problem = self.broker.limits.handshake_pace_problem(self.ii.limits.handshake_timeout_s,
                                                                "ii.limits.handshake_timeout_s")
            if problem is not None:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _tlex_fits_the_ii(self) -> "NodeConfig":
        """The bridge's registrations within what this node's II accepts (refused before start)."""
        if self.tlex is not None and self.ii is not None:
            problem = refusal(self.tlex, tlex_limits(self.ii))
            if problem is not None:
                raise ValueError(f"tlex: {problem}")
        return self


def tlex_limits(ii: IIConfig) -> ActorLimits:
    """What this node's II takes from the TLEX bridge's actor (its ``[ii.limits]`` and ``[ii.policy]``)."""
    return ActorLimits(capabilities_per_request=ii.limits.capabilities_per_request,
                       capabilities_body_bytes=ii.limits.capabilities_body_bytes,
                       subscriptions_per_request=ii.limits.subscriptions_per_request,
                       max_selector_length=ii.policy.max_selector_length,
                       max_subscriptions=ii.policy.max_subscriptions_per_owner)


def _same_listener_host(host: str, other: str) -> bool:
    """Two listeners can clash on a port: same address, or one of them on every address."""
    return host == other or bool({host, other} & {"", "0.0.0.0", "::"})


def load_config(path: Path) -> NodeConfig:
    """Read and validate a node config file; errors become one readable CliError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CliError(f"config {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    try:
        config = NodeConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
                             for e in exc.errors())  # a check of the whole config has no location
        raise CliError(f"config {path}: {problems}") from None
    return config.resolve(path.parent.resolve())
