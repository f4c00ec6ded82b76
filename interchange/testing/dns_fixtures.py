"""A real DNS server for the discovery tests: dnsmasq on 127.0.0.1 at a free port.

Records are described in Python (:class:`DnsRecords`) and written to a generated dnsmasq
configuration (SRV, addresses, and ``local=`` zones: unknown names there are NXDOMAIN, names
outside every zone REFUSED). :meth:`DnsmasqServer.reconfigure` restarts it on the same port with
new records. Needs the dnsmasq binary (installed by scripts/setup.sh); without it the tests fail
saying so, never skipped. The ``dnsmasq`` fixture (``conftest.py``) gives a test a stopped server.
Details: docs/testing.md ("A real DNS server").
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dns.exception
import dns.resolver
import pytest

from interchange.ground.ports import free_port

LISTEN = "127.0.0.1"
READY_NAME = "ready.dns-fixture.internal"  # answered once dnsmasq serves the generated config
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Srv:
    """``_ixc._tcp.<domain>`` SRV record pointing at ``target``:``port`` (IP_086)."""

    domain: str
    target: str
    port: int
    priority: int = 10
    weight: int = 10
    service: str = "_ixc._tcp"


@dataclass
class DnsRecords:
    """What the server answers.

    ``hosts`` maps a name to its addresses (IPv4 gives A records, IPv6 AAAA).
    ``zones`` are extra domains answered authoritatively (e.g. an empty one, to get
    NXDOMAIN); the domain of every SRV record is a zone as well.
    """

    srv: Sequence[Srv] = ()
    hosts: Mapping[str, Sequence[str] | str] = field(default_factory=dict)
    zones: Sequence[str] = ()

    def config_lines(self) -> list[str]:
        zones = dict.fromkeys([*self.zones, *(s.domain for s in self.srv), "dns-fixture.internal"])
        lines = [f"local=/{zone}/" for zone in zones]
        lines += [f"srv-host={s.service}.{s.domain},{s.target},{s.port},{s.priority},{s.weight}" for s in self.srv]
        lines.append(f"host-record={READY_NAME},127.0.0.1")
        for name, addresses in self.hosts.items():
            for address in [addresses] if isinstance(addresses, str) else addresses:
                ipaddress.ip_address(address)  # a typo in a test should fail here, not as a DNS mystery
                lines.append(f"host-record={name},{address}")
        return lines


def find_dnsmasq() -> str:
    """The dnsmasq binary, or a test failure saying how to install it."""
    found = shutil.which("dnsmasq") or next(
        (p for p in ("/usr/sbin/dnsmasq", "/usr/local/sbin/dnsmasq") if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.fail("dnsmasq is not installed: the DNS discovery tests need a real DNS server. "
                    "Install it with 'apt-get install dnsmasq-base' (scripts/setup.sh does).", pytrace=False)
    return found


class DnsmasqError(RuntimeError):
    """dnsmasq did not start or serve in time; the message holds its log."""


class DnsmasqServer:
    """One dnsmasq process serving :class:`DnsRecords` on ``127.0.0.1:<port>`` (UDP and TCP)."""

    def __init__(self, directory: Path, binary: str) -> None:
        self.directory = directory
        self.binary = binary
        self.host = LISTEN
        self.port: int | None = None
        self.records = DnsRecords()
        self._process: subprocess.Popen[bytes] | None = None
        self._conf = directory / "dnsmasq.conf"
        self._log = directory / "dnsmasq.log"
        self._pid = directory / "dnsmasq.pid"
        self._stderr = directory / "dnsmasq.stderr"
        directory.mkdir(parents=True, exist_ok=True)

    def command(self, port: int) -> list[str]:
        command = [
            self.binary, "--keep-in-foreground", f"--port={port}", f"--listen-address={LISTEN}",
            "--bind-interfaces", "--no-resolv", "--no-hosts", "--no-poll", f"--conf-file={self._conf}",
            f"--pid-file={self._pid}", f"--log-facility={self._log}", "--log-queries",
        ]
        if os.geteuid() == 0:  # stay root so it can write into the test's private tmp directory
            command += ["--user=root", "--group=root"]
        return command

    def log_text(self) -> str:
        """dnsmasq's own error output and its log (queries included), for failure messages."""
        texts = []
        for path in (self._stderr, self._log):
            with contextlib.suppress(OSError):
                texts.append(path.read_text(errors="replace").strip())
        return "\n".join(t for t in texts if t)

    def start(self, records: DnsRecords | None = None) -> DnsmasqServer:
        """Start serving ``records`` (the previous ones if None) and return once it answers."""
        if records is not None:
            self.records = records
        if self._process is not None:
            raise DnsmasqError("dnsmasq is already running")
        self._conf.write_text("\n".join(self.records.config_lines()) + "\n")
        keep_port = self.port is not None
        last_error: DnsmasqError | None = None
        for _ in range(5):
            port = self.port if keep_port and self.port is not None else free_port()
            try:
                self._spawn_and_wait(port)
                self.port = port
                return self
            except DnsmasqError as exc:  # mostly: the port was taken in between; try again
                last_error = exc
        assert last_error is not None
        raise last_error

    def reconfigure(self, records: DnsRecords) -> DnsmasqServer:
        """Serve ``records`` instead: restart on the same port (srv-host lines are not reloadable)."""
        self.stop()
        return self.start(records)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)

    def _spawn_and_wait(self, port: int) -> None:
        with contextlib.suppress(OSError):
            self._log.unlink()
        with self._stderr.open("wb") as stderr:
            process = subprocess.Popen(self.command(port), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=stderr)
        self._process = process
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [LISTEN]
        resolver.port = port
        resolver.lifetime = resolver.timeout = 0.5
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._process = None
                raise DnsmasqError(f"dnsmasq exited with status {process.returncode} on port {port}:\n"
                                   f"{self.log_text()}")
            try:
                resolver.resolve(f"{READY_NAME}.", "A", search=False)
                return
            except (dns.exception.DNSException, OSError):
                time.sleep(0.05)
        self.stop()
        raise DnsmasqError(f"dnsmasq did not answer on {LISTEN}:{port} within {START_TIMEOUT_S:g} s\n"
                           f"{self.log_text()}")
