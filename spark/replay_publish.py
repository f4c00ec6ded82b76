"""Publishing a replay plan through a node's Basic Interface as a C-ITS actor (IP_050, IP_057).

One AMQP connection over mutual TLS 1.3 with SASL EXTERNAL (the actor's certificate is its
identity), one sender link per target address, the plan's messages sent in order (each shard
keeps its order, IP_128-130) at their due times, each delivery unsettled so that the broker's
outcome (accepted, or rejected with its error condition, IP_016) is counted per message.
Refusals — TLS, authentication, an unknown or forbidden target, no credit — end as a
:class:`ReplayError` or as counted ``notSent`` messages with the broker's reason, never a crash.
No pyspark here: the plan comes from :mod:`spark.replay_plan`.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel

from interchange.broker.client import ClientConnection, Outcome, SenderState
from spark.replay_plan import EXACT, Plan, PlannedMessage

#: The most per-message problems listed in a summary (all are counted).
MAX_PROBLEMS = 50


class ReplayError(Exception):
    """The replay could not run at all (no connection): a clear message for the command line."""


class Problem(BaseModel):
    messageId: str | None
    outcome: str  #: rejected, released, modified, settled, unsettled, notSent or skipped
    error: str | None = None


class ReplaySummary(BaseModel):
    """What a replay did (printed as JSON with ``--json``, else as text)."""

    dryRun: bool
    selected: int
    planned: int
    byteExact: int
    rebuilt: int
    skipped: int
    mapemMoved: int
    mapemAdded: int
    spatemWithoutMapem: int
    speed: float | None
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    released: int = 0
    modified: int = 0
    settled: int = 0
    unsettled: int = 0
    notSent: int = 0
    durationS: float = 0.0
    problems: list[Problem] = []

    def text(self) -> str:
        pace = "as fast as possible" if self.speed is None else f"logged timing x{self.speed:g}"
        lines = [f"replay{' (dry run)' if self.dryRun else ''}: {self.selected} messages selected, "
                 f"{self.planned} planned ({self.byteExact} byte-exact from rawMessageHex, "
                 f"{self.rebuilt} rebuilt from applicationProperties + bodyContentHex), {self.skipped} skipped; {pace}",
                 f"IP_104: {self.mapemMoved} MAPEM moved ahead of their SPATEM, {self.mapemAdded} added from "
                 f"before the slice, {self.spatemWithoutMapem} SPATEM intersections without any MAPEM in the log"]
        if not self.dryRun:
            lines.append(f"sent {self.sent}: accepted {self.accepted}, rejected {self.rejected}, released "
                         f"{self.released}, modified {self.modified}, settled without outcome {self.settled}, "
                         f"no answer {self.unsettled}; not sent {self.notSent}; {self.durationS:.3f} s")
        lines += [f"  {p.outcome}: {p.messageId}: {p.error or ''}" for p in self.problems]
        return "\n".join(lines)


def summary_of(plan: Plan, selected: int, speed: float | None, dry_run: bool) -> ReplaySummary:
    exact = sum(1 for planned in plan.messages if planned.how == EXACT)
    return ReplaySummary(dryRun=dry_run, selected=selected, planned=len(plan.messages), byteExact=exact,
                         rebuilt=len(plan.messages) - exact, skipped=len(plan.skipped),
                         mapemMoved=plan.mapem_moved, mapemAdded=plan.mapem_added,
                         spatemWithoutMapem=plan.spatem_without_mapem, speed=speed,
                         problems=[Problem(messageId=mid, outcome="skipped", error=why)
                                   for mid, why in plan.skipped[:MAX_PROBLEMS]])


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to publish."""

    host: str
    port: int
    context: ssl.SSLContext
    server_name: str  #: the node's certificate name (TLS server name and AMQP hostname)
    container_id: str = "interchange-replay"
    timeout: float = 10.0  #: connecting, attaching, waiting for credit and for the last outcomes


def outcome_name(outcome: Outcome) -> tuple[str, str | None]:
    """(accepted | rejected | released | modified | unsettled, the broker's error condition)."""
    if outcome.accepted:
        return "accepted", None
    kind, _, condition = (outcome.error or "").partition(": ")
    if kind in ("rejected", "released", "modified"):
        return kind, condition or None
    return "unsettled", outcome.error


@dataclass
class _Run:
    """The state of one replay while it is sent."""

    connection: ClientConnection
    timeout: float
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    senders: dict[str, SenderState] = field(default_factory=dict)
    in_flight: int = 0
    progress: asyncio.Event = field(default_factory=asyncio.Event)  #: bytes arrived or the connection ended

    def __post_init__(self) -> None:
        self.connection.on_receive = self.progress.set
        self.connection.lost.add_done_callback(lambda _: self.progress.set())

    def problem(self, planned: PlannedMessage, outcome: str, error: str | None) -> None:
        self.outcomes[outcome] += 1
        if outcome != "accepted" and len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(messageId=planned.logged.message_id, outcome=outcome, error=error))

    def on_outcome(self, planned: PlannedMessage) -> Callable[[Outcome], None]:
        def record(outcome: Outcome) -> None:
            self.in_flight -= 1
            self.problem(planned, *outcome_name(outcome))
        return record

    async def wait(self, ready: Callable[[], bool], what: str) -> None:
        """Wait until ``ready()`` holds, the connection ends, or the timeout (then ReplayError)."""
        deadline = time.monotonic() + self.timeout
        while not ready():
            if self.connection.lost.done():
                raise ReplayError(f"connection lost while waiting for {what}: "
                                  f"{self.connection.engine.remote_error or 'closed by the node'}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplayError(f"no {what} within {self.timeout:g} s")
            self.progress.clear()
            try:
                async with asyncio.timeout(left):
                    await self.progress.wait()
            except TimeoutError:
                pass

    async def sender(self, address: str) -> SenderState:
        state = self.senders.get(address)
        if state is None:
            state = self.connection.open_sender(address)
            self.senders[address] = state
            await self.wait(lambda: state.opened or state.closed, f"answer to the attach of target {address!r}")
        return state

    async def send(self, planned: PlannedMessage) -> None:
        state = await self.sender(planned.address)
        if not state.closed:
            await self.wait(lambda: state.closed or state.credit > 0, f"credit on target {planned.address!r}")
        # the send is pipelined: outcomes arrive later through on_outcome
        if state.closed or not self.connection.engine.send(state, planned.raw, self.on_outcome(planned)):
            self.problem(planned, "notSent", f"target {planned.address!r} refused: {state.error or 'link closed'}")
            return
        self.connection.flush()
        self.in_flight += 1
        self.outcomes["sent"] += 1


async def _connect(endpoint: Endpoint) -> ClientConnection:
    where = f"{endpoint.host}:{endpoint.port}"
    try:
        return await ClientConnection.open(endpoint.host, endpoint.port, endpoint.context, endpoint.server_name,
                                           endpoint.container_id, endpoint.timeout)
    except ssl.SSLCertVerificationError as exc:
        raise ReplayError(f"TLS: the node at {where} is not trusted as {endpoint.server_name!r}: "
                          f"{exc.verify_message}") from None
    except ssl.SSLError as exc:
        raise ReplayError(f"TLS handshake with {where} failed (is the client certificate trusted "
                          f"there?): {exc.reason or exc}") from None
    except TimeoutError:
        raise ReplayError(f"no AMQP connection to {where} within {endpoint.timeout:g} s") from None
    except ConnectionRefusedError as exc:
        raise ReplayError(f"cannot connect to {where}: {exc.strerror or exc}") from None
    except ConnectionError as exc:
        raise ReplayError(f"AMQP connection to {where} refused (TLS or SASL EXTERNAL): {exc or 'closed'}") from None
    except OSError as exc:
        raise ReplayError(f"cannot connect to {where}: {exc.strerror or exc}") from None


async def _pace(start: float, planned: PlannedMessage) -> None:
    delay = start + planned.due_s - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _send_all(run: _Run, messages: Sequence[PlannedMessage]) -> None:
    start = time.monotonic()
    for planned in messages:
        await _pace(start, planned)
        if run.connection.lost.done():
            run.problem(planned, "notSent", "connection lost")
            continue
        await run.send(planned)
    try:
        await run.wait(lambda: run.in_flight <= 0, "outcome of every message sent")
    except ReplayError as exc:  # the rest are counted as unsettled
        run.outcomes["unsettled"] += run.in_flight
        run.problems.append(Problem(messageId=None, outcome="unsettled", error=f"{run.in_flight} messages: {exc}"))


async def publish(plan: Plan, endpoint: Endpoint, summary: ReplaySummary) -> ReplaySummary:
    """Send ``plan`` to ``endpoint``; returns ``summary`` with the counts filled in."""
    began = time.monotonic()
    connection = await _connect(endpoint)
    run = _Run(connection, endpoint.timeout)
    try:
        await _send_all(run, plan.messages)
    finally:
        await connection.close()
    outcomes = run.outcomes
    return summary.model_copy(update={
        "sent": outcomes["sent"], "accepted": outcomes["accepted"], "rejected": outcomes["rejected"],
        "released": outcomes["released"], "modified": outcomes["modified"], "settled": outcomes["settled"],
        "unsettled": outcomes["unsettled"], "notSent": outcomes["notSent"],
        "durationS": round(time.monotonic() - began, 3), "problems": (summary.problems + run.problems)[:MAX_PROBLEMS],
    })
