"""The unit part's rules hold while its tests run (tests/unit/conftest.py): no network socket, no
name lookup, no process by any route, no JVM package; asyncio (which needs a Unix socketpair) works."""
from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import socket
import subprocess
import sys

import pytest
from pytest_socket import SocketBlockedError

NO_PROCESS = "a unit test may start no process"


def test_this_test_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("integration") is None


@pytest.mark.filterwarnings("ignore:A test tried to use socket")  # pytest-socket warns as it refuses
@pytest.mark.parametrize("family, kind", [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                                          (socket.AF_INET6, socket.SOCK_STREAM)], ids=["tcp", "udp", "tcp6"])
def test_no_network_socket(family: int, kind: int) -> None:
    with pytest.raises(SocketBlockedError):
        socket.socket(family, kind)


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_no_name_lookup() -> None:
    with pytest.raises(SocketBlockedError):
        socket.getaddrinfo("localhost", 80)


async def test_asyncio_still_runs() -> None:
    """The event loop's self-pipe is a Unix socketpair: allowed, so async unit tests work."""
    assert await asyncio.sleep(0, result=7) == 7
    left, right = socket.socketpair()
    left.close()
    right.close()


def test_no_subprocess() -> None:
    with pytest.raises(RuntimeError, match=NO_PROCESS):
        subprocess.run(["true"], check=False)


async def test_no_asyncio_subprocess() -> None:
    with pytest.raises(RuntimeError, match=NO_PROCESS):
        await asyncio.create_subprocess_exec("true")


def test_no_system() -> None:
    with pytest.raises(RuntimeError, match=NO_PROCESS):
        os.system("true")


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_no_multiprocessing(method: str) -> None:
    """fork is refused by its audit event; spawn and forkserver start through _posixsubprocess.fork_exec,
    which raises none."""
    process = multiprocessing.get_context(method).Process(target=print)
    with pytest.raises(RuntimeError, match=NO_PROCESS):
        process.start()


def test_no_jvm_package(request: pytest.FixtureRequest) -> None:
    with pytest.raises(RuntimeError, match="may not import pyspark"):
        importlib.import_module("pyspark.sql.functions_not_a_module")
    with pytest.raises(RuntimeError, match="may not import py4j"):
        importlib.import_module("py4j.java_gateway_not_a_module")
    if not any(item.get_closest_marker("integration") for item in request.session.items):
        # the unit part on its own: pyspark was never imported, and cannot be
        assert not [name for name in sys.modules if name.split(".")[0] in ("pyspark", "py4j")]
        with pytest.raises(RuntimeError, match="may not import pyspark"):
            importlib.import_module("pyspark")
