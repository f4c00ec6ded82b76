"""interchange.ground.ports: listen ports chosen where no outgoing connection's local port can land."""
from __future__ import annotations

import socket

import pytest

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


@pytest.mark.parametrize(("ephemeral_range", "expected"), [
    ((32768, 60999), range(10000, 32768)),  # Linux's default: below it
    ((10000, 40000), range(40001, 65536)),  # more room above
    ((1024, 65535), range(0)),  # no room: the kernel chooses
    ((5000, 8000), range(10000, 65536)),  # wholly below the lowest port this module uses
])
def test_the_ports_to_choose_from_are_the_larger_stretch_outside_the_ephemeral_range(
        ephemeral_range: tuple[int, int], expected: range) -> None:
    assert listen_range(ephemeral_range) == expected
