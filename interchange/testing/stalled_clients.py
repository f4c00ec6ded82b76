"""Clients that never finish their preamble, for the tests and the soak (no node imports this).

Each connection stops at one stage, idle or trickling a byte (a header line) every ``trickle_s``, and
reports when it reached that stage (``stalled``, loop seconds) and when the server closed it
(``closed``). Basic Interface stalls (:data:`BI_STALLS`): a TCP connection without TLS, TLS then
nothing, the protocol header trickled, the SASL header alone, part of a sasl-init, SASL done and the
AMQP header without an open, and an open trickled. Improved Interface stalls (:data:`II_STALLS`): TCP
alone, TLS then nothing, request headers trickled, a body trickled after complete headers.

Command line (one JSON object per line on stdout: ``{"ready": n}`` once every connection stalled,
then one result per connection as it closes, with its local ``port`` (the ``peer`` of the node's
records), then ``{"done": n, "cpu_s": s}``, the CPU seconds from the first connection on)::

    python -m interchange.testing.stalled_clients --bi 127.0.0.1:5671 --ii 127.0.0.1:8443 \\
        --count 500 --pki pki --server-name ixc-a ...

The same clients in C (``benchmarks/loadgen/stalled.c``, the same command line and output, about half
the CPU per connection: :func:`command` with ``kind="c"``, built by :func:`ensure_c_clients`) stand for
actors on other hosts in the benchmarks. :func:`check_closed` checks each connection's result against the node's log:
closed by its stage's deadline, the record of that stage for its port.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import select
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.app.config import BrokerConfig, LimitsConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.sasl import AMQP_HEADER, SASL_HEADER, init_frame
from interchange.ground.logformat import Level
from interchange.testing.paths import REPO_ROOT
from ii_api.settings.config import IIConfig, RequestLimits

BI_STALLS = ("tcp", "tls-idle", "header-trickle", "sasl-header", "sasl-init-part", "open-missing", "open-trickle")
II_STALLS = ("tcp", "tls-idle", "header-trickle", "body-trickle")
#: An open frame (container-id "stalled-client"), trickled a byte at a time.
_OPEN = bytes.fromhex("0000002202000000005310c01501a1127374616c6c65642d636c69656e742d303030")
#: Short preamble deadlines, so that a test's stalled connections are closed within seconds.
BI_DEADLINES = LimitsConfig(handshake_timeout_s=3.0, header_timeout_s=4.0, sasl_timeout_s=3.5, open_timeout_s=4.5)
II_DEADLINES = RequestLimits(handshake_timeout_s=3.0, header_timeout_s=4.0, body_timeout_s=3.5)
#: How many connections are being set up at once (the II's listen backlog is asyncio's default, 100).
_CONNECTING = 50
#: The deadline each stall runs into, the node's record of it (event, its stage or reason), and whether
#: the node answers it (SASL header and mechanisms, the SASL outcome and the close; the II's 408 to a
#: request begun). A partial protocol header is, to the node, no header: header-trickle and tls-idle
#: look alike to it on the BI.
EXPECTED: dict[tuple[str, str], tuple[float, str, str, bool]] = {
    ("bi", "tcp"): (BI_DEADLINES.handshake_timeout_s, "tls_refused", "handshake timeout", False),
    ("bi", "tls-idle"): (BI_DEADLINES.header_timeout_s, "preamble_timeout", "protocol header", False),
    ("bi", "header-trickle"): (BI_DEADLINES.header_timeout_s, "preamble_timeout", "protocol header", False),
    ("bi", "sasl-header"): (BI_DEADLINES.sasl_timeout_s, "preamble_timeout", "SASL exchange (sasl-init)", True),
    ("bi", "sasl-init-part"): (BI_DEADLINES.sasl_timeout_s, "preamble_timeout", "SASL exchange (sasl-init)", True),
    ("bi", "open-missing"): (BI_DEADLINES.open_timeout_s, "preamble_timeout", "open", True),
    ("bi", "open-trickle"): (BI_DEADLINES.open_timeout_s, "preamble_timeout", "open", True),
    ("ii", "tcp"): (II_DEADLINES.handshake_timeout_s, "tls_refused", "handshake timeout", False),
    ("ii", "tls-idle"): (II_DEADLINES.header_timeout_s, "request_timeout", "request headers", False),
    ("ii", "header-trickle"): (II_DEADLINES.header_timeout_s, "request_timeout", "request headers", True),
    ("ii", "body-trickle"): (II_DEADLINES.body_timeout_s, "request_timeout", "request body", True),
}
#: The C clients' source and the binary :func:`ensure_c_clients` builds (build/ is not in git).
C_SOURCE = REPO_ROOT / "benchmarks" / "loadgen" / "stalled.c"
C_BINARY = REPO_ROOT / "build" / "stalled"
#: The C steady client (proton-C: one round trip at a time, its times as JSON lines) and where
#: :func:`ensure_c_steady` builds it.
C_STEADY_SOURCE = REPO_ROOT / "benchmarks" / "loadgen" / "steady.c"
C_STEADY = REPO_ROOT / "build" / "steady"


@dataclass
class Stalled:
    """One stalled connection's report (times in the client loop's seconds)."""

    interface: str
    mode: str
    stalled: float | None = None
    closed: float | None = None
    error: str | None = None
    port: int | None = None  #: the local port (the node's records name it in their ``peer``)
    received: int = 0  #: plaintext bytes the server sent


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    context: ssl.SSLContext
    server_name: str
    trickle_s: float
    path: str = "/"  #: II: the path of the body-trickle POST (one whose handler reads its body)


async def _wait_closed(reader: asyncio.StreamReader, result: Stalled) -> None:
    """Until the server closes (EOF or reset); what it sends meanwhile is read, counted and dropped."""
    with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            result.received += len(data)


async def _trickle(writer: asyncio.StreamWriter, pieces: list[bytes], every_s: float) -> None:
    with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
        for piece in pieces:
            await asyncio.sleep(every_s)
            if writer.is_closing():
                return
            writer.write(piece)


async def _sasl_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, result: Stalled) -> None:
    """Run SASL EXTERNAL to its outcome (the server's header, mechanisms, outcome: read until it came)."""
    writer.write(SASL_HEADER + init_frame("EXTERNAL"))
    seen = b""
    while b"\x00\x53\x44" not in seen:  # the sasl-outcome performative
        chunk = await reader.read(4096)
        if not chunk:
            raise ConnectionError("closed during SASL")
        seen += chunk
    result.received += len(seen)


async def _bi_stage(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    result: Stalled) -> list[bytes]:
    """Bring a TLS connection to the BI to its stall; the bytes to trickle from there."""
    match mode:
        case "header-trickle":
            return [SASL_HEADER[i:i + 1] for i in range(7)]
        case "sasl-header":
            writer.write(SASL_HEADER)
        case "sasl-init-part":
            writer.write(SASL_HEADER + init_frame("EXTERNAL")[:6])
        case "open-missing" | "open-trickle":
            await _sasl_done(reader, writer, result)
            writer.write(AMQP_HEADER)
            if mode == "open-trickle":
                return [_OPEN[i:i + 1] for i in range(len(_OPEN) - 1)]
    return []


async def _ii_stage(mode: str, writer: asyncio.StreamWriter, target: Target) -> list[bytes]:
    host = f"Host: {target.server_name}\r\n".encode()
    match mode:
        case "header-trickle":
            writer.write(b"GET / HTTP/1.1\r\n" + host)
            return [b"X-Slow-%d: 1\r\n" % i for i in range(1000)]
        case "body-trickle":
            writer.write(f"POST {target.path} HTTP/1.1\r\n".encode() + host
                         + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
            return [b" "] * 998
    return []


async def stall(interface: str, mode: str, target: Target, limit: asyncio.Semaphore,
                reached: Callable[[], None] = lambda: None) -> Stalled:
    """One connection to ``interface`` ("bi" or "ii") stalled at ``mode``, until the server closes it;
    ``reached()`` is called once it stalled (or failed before)."""
    result = Stalled(interface, mode)
    loop = asyncio.get_running_loop()
    writer: asyncio.StreamWriter | None = None
    trickler: asyncio.Task[None] | None = None
    try:
        async with limit:
            context = None if mode == "tcp" else target.context
            reader, writer = await asyncio.open_connection(target.host, target.port, ssl=context,
                                                           server_hostname=target.server_name if context else None)
            result.port = writer.get_extra_info("sockname")[1]
            stage: Callable[[], Awaitable[list[bytes]]] = (
                (lambda: _bi_stage(mode, reader, writer, result)) if interface == "bi"
                else (lambda: _ii_stage(mode, writer, target)))
            pieces = await stage()
            await writer.drain()
            result.stalled = loop.time()
        reached()
        if pieces:
            trickler = loop.create_task(_trickle(writer, pieces, target.trickle_s))
        await _wait_closed(reader, result)
        result.closed = loop.time()
    except (OSError, ssl.SSLError, ConnectionError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.closed = loop.time()
        if result.stalled is None:
            reached()
    finally:
        if trickler is not None:
            trickler.cancel()
        if writer is not None:
            writer.close()
    return result


async def run(targets: dict[str, list[Target]], count: int, out: Callable[[dict], None]) -> list[Stalled]:
    """``count`` connections to each target interface, spread over its stalls and its addresses
    (connection i to address i % n); ``out`` gets the ready line, each result as it comes, then the done
    line."""
    limit = asyncio.Semaphore(_CONNECTING)
    cpu = time.process_time()  # the connections' CPU, without the interpreter's start
    total = count * len(targets)
    waiting = [total]

    def reached() -> None:
        waiting[0] -= 1
        if not waiting[0]:
            out({"ready": total, "at": asyncio.get_running_loop().time()})

    async def reported(interface: str, mode: str, target: Target) -> Stalled:
        result = await stall(interface, mode, target, limit, reached)
        out(asdict(result))
        return result

    tasks = []
    for interface, addresses in targets.items():
        modes = BI_STALLS if interface == "bi" else II_STALLS
        tasks += [reported(interface, modes[i % len(modes)], addresses[i % len(addresses)]) for i in range(count)]
    results = list(await asyncio.gather(*tasks))
    out({"done": len(results), "cpu_s": time.process_time() - cpu})
    return results


def _target(spec: str, context: ssl.SSLContext, args: argparse.Namespace) -> Target:
    host, _, port = spec.rpartition(":")
    return Target(host, int(port), context, args.server_name, args.trickle_s, args.path)


def ensure_c_clients(binary: Path = C_BINARY, cflags: str = "") -> Path:
    """The C clients at ``binary``, built by ``benchmarks/loadgen/build.sh --stalled`` when missing or older
    than their source (gcc and libssl-dev; ``cflags``: extra gcc flags, e.g. a mutant's ``-DMUTE_MODE``)."""
    if cflags or not binary.exists() or binary.stat().st_mtime < C_SOURCE.stat().st_mtime:
        subprocess.run(["sh", str(C_SOURCE.parent / "build.sh"), "--stalled", str(binary)], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ, "STALLED_CFLAGS": cflags})
    return binary


def ensure_c_steady(binary: Path = C_STEADY) -> Path:
    """The C steady client at ``binary``, built by ``benchmarks/loadgen/build.sh --steady`` when missing or
    older than its source (gcc and libqpid-proton-dev)."""
    if not binary.exists() or binary.stat().st_mtime < C_STEADY_SOURCE.stat().st_mtime:
        subprocess.run(["sh", str(C_STEADY_SOURCE.parent / "build.sh"), "--steady", str(binary)], check=True,
                       stdout=subprocess.DEVNULL)
    return binary


def steady_command(port: int, pki: Path, server_name: str, *, count: int | None = None, pace_ms: float = 0.0,
                   watch: dict[str, str] | None = None, binary: Path | None = None) -> list[str]:
    """The command line of the C steady client against the BI on 127.0.0.1:``port`` (actor-1 publishes to
    ``in``, actor-2 consumes ``all``: :func:`deadline_node_config`'s), ``count`` round trips (None: until
    "stop" or the end of its stdin), one per ``pace_ms`` (0: back to back), with the schedstat files of
    ``watch`` (name: path) read around each round trip."""
    start = [str(binary or ensure_c_steady()), "--port", str(port), "--pki", str(pki), "--server-name", server_name,
             "--pace-ms", str(pace_ms)]
    if count is not None:
        start += ["--count", str(count)]
    for name, path in (watch or {}).items():
        start += ["--watch", f"{name}={path}"]
    return start


class JsonLines:
    """A child process's JSON lines on its stdout, read without blocking: what has come so far."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self._partial, self.eof = b"", False

    def read(self) -> list[dict]:
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return []
        self.eof = not data
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [json.loads(line) for line in lines if line]


class SteadyProcess:
    """The C steady client running (:func:`steady_command` without a count): its round trips as they come
    (``{"at", "rtt", "d"}``), commands to it (``watch NAME PATH``, ``stop``), its CPU once stopped."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines = JsonLines(self.process)
        self.cpu_s = float("nan")

    def trips(self, timeout: float = 30.0) -> list[dict]:
        """The round trips reported by now, waiting up to ``timeout`` for a line; an error line, an exit
        other than 0 or ``timeout`` without a line raise RuntimeError."""
        if not select.select([self.lines.fd], [], [], timeout)[0]:
            raise RuntimeError(f"the C steady client said nothing for {timeout} s")
        got = []
        for record in self.lines.read():
            if "error" in record:
                raise RuntimeError(f"C steady client: {record['error']}")
            if "done" in record:
                self.cpu_s = record["cpu_s"]
            elif "rtt" in record:
                got.append(record)
        if self.lines.eof and self.process.wait(30) != 0:
            raise RuntimeError(f"the C steady client exited {self.process.returncode}")
        return got

    def until(self, count: int, since: float = 0.0) -> list[dict]:
        """At least ``count`` more round trips begun at or after ``since`` (monotonic), and any between."""
        got: list[dict] = []
        while sum(trip["at"] >= since for trip in got) < count:
            got += self.trips()
        return got

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def stop(self) -> list[dict]:
        """Stop it; the round trips reported meanwhile."""
        got: list[dict] = []
        if self.process.poll() is None:
            self.tell("stop")
            while not self.lines.eof:
                got += self.trips()
        self.process.wait(30)
        return got

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


def command(kind: str, ports: dict[str, int | list[int]], count: int, pki: Path, server_name: str,
            trickle_s: float = 0.5, path: str = "/actor-1/subscriptions", binary: Path | None = None) -> list[str]:
    """The command line of ``count`` stalled clients per interface in ``ports`` ("bi", "ii": a port on
    127.0.0.1, or several: the connections spread over them): ``kind`` "python" (this module) or "c"
    (``binary``, else :func:`ensure_c_clients`' one)."""
    start = ([sys.executable, "-m", "interchange.testing.stalled_clients"] if kind == "python"
             else [str(binary or ensure_c_clients())])
    start += ["--count", str(count), "--pki", str(pki), "--server-name", server_name,
              "--trickle-s", str(trickle_s), "--path", path]
    for interface, given in ports.items():
        for port in given if isinstance(given, list) else [given]:
            start += [f"--{interface}", f"127.0.0.1:{port}"]
    return start


def check_closed(results: Iterable[dict], records: Iterable[dict] | None, slack_s: float = 2.0) -> list[str]:
    """What is wrong with the stalled connections' ``results`` given the node's log ``records``: each must
    have reached its stall, been closed within its deadline + ``slack_s`` of that (and not a second or more
    before the deadline), the node must have logged that stage's record for its port, and answered it
    or not as :data:`EXPECTED` says. ``records`` None: a node that logs errors only (the stages' records
    are info), whose log is not checked."""
    logged: dict[str, set[tuple[str, str]]] = {}
    for record in records or ():
        details = record.get("details") or {}
        peer = details.get("peer")
        if peer:
            logged.setdefault(peer, set()).add((record["event"], details.get("stage") or details.get("reason") or ""))
    problems = []
    for result in results:
        key = (result["interface"], result["mode"])
        deadline, event, stage, answered = EXPECTED[key]
        if result["stalled"] is None or result["closed"] is None:
            problems.append(f"{key} did not reach its stall: {result}")
            continue
        held = result["closed"] - result["stalled"]
        if not deadline - 1.0 <= held <= deadline + slack_s:
            problems.append(f"{key} held {held:.2f} s, its deadline {deadline} s ({result['error']})")
        if (result["received"] > 0) != answered:
            problems.append(f"{key} port {result['port']}: {result['received']} bytes from the node, "
                            f"{'an answer' if answered else 'none'} expected")
        seen = logged.get(f"127.0.0.1:{result['port']}", set())
        if records is not None and (event, stage) not in seen:
            problems.append(f"{key} port {result['port']}: no {event} {stage!r} record, but {sorted(seen)}")
    return problems


def deadline_node_config(pki: TestPki, name: str, directory: Path, level: Level = "info") -> NodeConfig:
    """A node with BI and II under :data:`BI_DEADLINES` / :data:`II_DEADLINES`, a target ``in`` for
    ``actor-1`` and a source ``all`` for ``actor-2`` (the steady client beside the stalled ones)."""
    identity = pki.identity(name)
    return NodeConfig(
        name=name, data_dir=directory,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=0, limits=BI_DEADLINES,
                            targets=[TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                            sources=[SourceSpec(address="all", consumers=frozenset({"actor-2"}))]),
        log=LogConfig(path=directory / "node.log", level=level),
        ii=IIConfig(host="127.0.0.1", port=0, public_host="127.0.0.1", limits=II_DEADLINES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interchange.testing.stalled_clients", description=__doc__)
    parser.add_argument("--bi", action="append", help="host:port of the BI (AMQPS); given again: the "
                        "connections are spread over the addresses (a node's broker processes)")
    parser.add_argument("--ii", action="append", help="host:port of the II (HTTPS); given again: spread likewise")
    parser.add_argument("--count", type=int, default=500, help="connections per interface")
    parser.add_argument("--pki", type=Path, required=True, help="the test PKI's directory")
    parser.add_argument("--cn", default="actor-1", help="the client certificate's CN in the PKI")
    parser.add_argument("--server-name", required=True)
    parser.add_argument("--trickle-s", type=float, default=1.0)
    parser.add_argument("--path", default="/", help="II: the path of the body-trickle POST")
    args = parser.parse_args(argv)
    context = client_context(TlsFiles.from_pki(args.pki, args.cn, with_crls=False))
    targets = {name: [_target(spec, context, args) for spec in specs]
               for name, specs in (("bi", args.bi), ("ii", args.ii)) if specs}

    def out(record: dict) -> None:
        print(json.dumps(record), flush=True)

    asyncio.run(run(targets, args.count, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

