"""interchange.ground.ports: a chosen port is outside the kernel's ephemeral range and free for TCP and UDP."""
from __future__ import annotations

import socket

from interchange.ground.ports import free_port, listen_range


def ephemeral() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
        first, last = (int(x) for x in f.read().split())
    return first, last


def test_the_port_is_outside_the_kernels_ephemeral_range_and_free_for_tcp_and_udp() -> None:
    first, last = ephemeral()
    room = bool(listen_range())  # a kernel whose range covers 10000-65535 leaves none: it chooses, as before
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # drawn at random, not one fixed port
    for port in ports:
        assert not (room and first <= port <= last)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            tcp.bind(("127.0.0.1", port))
            udp.bind(("127.0.0.1", port))
