"""The unit part: tests that open no network socket, start no process and no JVM (so no RabbitMQ,
dnsmasq, browser or node process), and together run in well under a minute.

Every test in this directory is marked ``unit`` and held to that while its fixtures are set up, while
it runs and while they are torn down:

- network sockets: pytest-socket's ``disable_socket`` marker (with ``--allow-unix-socket`` from
  pyproject's addopts: asyncio's event loop wakes itself through a Unix socketpair). Creating an
  internet socket, or resolving a name, raises ``SocketBlockedError``;
- processes: an audit hook (PEP 578) refuses ``subprocess.Popen``, ``os.system``, ``os.fork``, the
  ``exec``/``spawn``/``posix_spawn`` families, and ``_posixsubprocess.fork_exec`` is wrapped for
  multiprocessing's spawn and forkserver starts, which raise no audit event;
- the JVM: ``pyspark`` (and ``py4j``) cannot be imported, here or while the modules of this
  directory are collected. That is exact when the unit part runs on its own (``scripts/test.sh``
  runs the parts one after the other, ``scripts/test.sh unit``, ``pytest tests/unit``); in one run
  with the integration part, pyspark may already be loaded and an import of it is not seen.

A test that needs any of these belongs in tests/integration, and so do the sans-I/O sweeps that take
seconds each (the C accelerator's differential tests, the routing coverage's property tests, runs of
store faults from every call, selector differentials, 5,000-term selectors), so that this part runs
in under a minute.
"""
from __future__ import annotations

import _posixsubprocess
import ast
import functools
import sys
from collections.abc import Callable, Generator, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).parent

#: Audit events that start a process (https://docs.python.org/3/library/audit_events.html).
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec", "os.spawn",
                            "os.posix_spawn", "os.startfile"})
#: Packages whose import would start (or talk to) a JVM.
JVM_PACKAGES = frozenset({"pyspark", "py4j"})


class UnitRuleBroken(RuntimeError):
    """A unit test (or its fixture) did what only integration tests may."""


class _Guard:
    """On while a unit test's phases run or a unit module is collected (the audit hook cannot be
    removed once added, so it asks this object)."""

    def __init__(self) -> None:
        self.on = False
        self.real_fork_exec = _posixsubprocess.fork_exec

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.on and event in PROCESS_EVENTS:
            raise UnitRuleBroken(f"a unit test may start no process ({event} {args[:2]!r}): "
                                 "move the test to tests/integration")

    def fork_exec(self, *args: Any, **kwargs: Any) -> Any:
        if self.on:
            raise UnitRuleBroken("a unit test may start no process (_posixsubprocess.fork_exec): "
                                 "move the test to tests/integration")
        return self.real_fork_exec(*args, **kwargs)

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if self.on and name.split(".")[0] in JVM_PACKAGES:
            raise UnitRuleBroken(f"a unit test may not import {name} (it runs on a JVM): "
                                 "move the test to tests/integration")
        return None  # everything else: the next finder

    def __enter__(self) -> None:
        self.on = True
        _posixsubprocess.fork_exec = self.fork_exec

    def __exit__(self, *_: object) -> None:
        self.on = False
        _posixsubprocess.fork_exec = self.real_fork_exec


GUARD = _Guard()
sys.addaudithook(GUARD.audit)
sys.meta_path.insert(0, GUARD)  # type: ignore[arg-type]


def _ours(path: Path | None) -> bool:
    return path is not None and path.is_relative_to(HERE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _ours(item.path):
            item.add_marker(pytest.mark.unit)
            item.add_marker(pytest.mark.disable_socket)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    if not _ours(collector.path):
        return (yield)
    with GUARD:
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with GUARD:
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with GUARD:
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    if nextitem is None:  # the run's last test also tears down the session's fixtures, integration ones too
        return (yield)
    with GUARD:
        return (yield)


@pytest.fixture(scope="session")
def source_tree() -> Callable[[Path], ast.Module]:
    """The syntax tree of a Python file, read and parsed once per test process (the layer and size
    checks each walk the whole library); trees are shared, so a test must not change one."""
    @functools.cache
    def parse(path: Path) -> ast.Module:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    return parse
