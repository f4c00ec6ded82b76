"""A free loopback port to listen on later, for the demos, the interop kit, benchmarks and tests.

Asking the kernel for port 0 and closing the socket gives a port from its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default). That is the range it also
draws the local port of every outgoing connection from, so between choosing the port and binding
it, any connection the process makes (a DNS query over TCP, a federation link) may take it, and the
bind fails with "address already in use" (seen in CI). So the port is drawn at random from below
(or above) that range, where the kernel never puts an outgoing connection, and checked free for
TCP and UDP (dnsmasq serves both on one port).

A port is often bound seconds after it is chosen (a node told its neighbour's port before that
neighbour starts), and meanwhile another process choosing the same way (a parallel test worker, a
benchmark) could draw and bind it (seen in CI: "address already in use"). So every port handed out is
reserved for this machine's user for :data:`RESERVED_S` to :data:`RESERVED_S` x 2: a file created
exclusively (``O_EXCL``, atomic) in :func:`reservations`, named by the port and the current slot of
that length; a port with a file of the current or the previous slot is not handed out again. Only a
program binding a fixed port of its own can still take it.
"""
from __future__ import annotations

import os
import secrets
import socket
import tempfile
import time
from pathlib import Path

__all__ = ["free_port", "listen_range"]

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10000  #: below: well-known and registered service ports (RabbitMQ's epmd 4369, AMQP 5672, ...)
HIGHEST = 65535
ATTEMPTS = 200
RESERVED_S = 600  #: a port handed out is not handed out again for this long (up to twice as long)


def listen_range(ephemeral: tuple[int, int] | None = None) -> range:
    """The ports to choose from: the larger stretch outside the ephemeral range ``(first, last)``
    (the kernel's own, read from /proc, by default); empty when there is none."""
    first, last = ephemeral if ephemeral is not None else _ephemeral_range()
    below = range(LOWEST, max(LOWEST, first))
    above = range(min(max(LOWEST, last + 1), HIGHEST + 1), HIGHEST + 1)
    return max(below, above, key=len)


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` free for both TCP and UDP now and reserved (:func:`reserve`), outside the
    ephemeral range when the kernel leaves any room (else the kernel's choice)."""
    ports = listen_range()
    if ports:
        for _ in range(ATTEMPTS):
            port = ports[secrets.randbelow(len(ports))]
            if _free(host, port) and reserve(port):
                return port
    return _kernel_choice(host)


def reservations() -> Path:
    """The directory of the reservations: one per user, in the system's temporary directory."""
    return Path(tempfile.gettempdir()) / f"interchange-ports-{os.getuid()}"


def reserve(port: int, now_s: float | None = None, directory: Path | None = None) -> bool:
    """Reserve ``port`` for :data:`RESERVED_S` at least; False when another choice holds it."""
    where = reservations() if directory is None else directory
    where.mkdir(mode=0o700, exist_ok=True)
    slot = int((time.time() if now_s is None else now_s) // RESERVED_S)
    if (where / f"{port}.{slot - 1}").exists():
        return False
    try:
        os.close(os.open(where / f"{port}.{slot}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    _forget(where, port, slot)
    return True


def _forget(where: Path, port: int, slot: int) -> None:
    """Remove the port's reservations older than the previous slot (no longer read)."""
    for old in where.glob(f"{port}.*"):
        if int(old.suffix[1:]) < slot - 1:
            old.unlink(missing_ok=True)


def _ephemeral_range() -> tuple[int, int]:
    try:
        first, last = (int(field) for field in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):  # not Linux, or /proc not mounted: Linux's default
        return 32768, 60999
    return first, last


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            tcp.bind((host, port))
            udp.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_choice(host: str) -> int:
    for _ in range(ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port = int(tcp.getsockname()[1])
        if _free(host, port) and reserve(port):
            return port
    raise RuntimeError(f"no port free for both TCP and UDP on {host}")
