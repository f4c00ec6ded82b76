"""Fixtures both parts of the suite use: the test PKIs.

The suite has two parts, each with its own conftest that marks its tests and holds its fixtures:
``tests/unit`` (marker ``unit``: no network socket, no process, no JVM; ``scripts/test.sh unit``)
and ``tests/integration`` (marker ``integration``: real sockets, node processes, dnsmasq, RabbitMQ,
PySpark, Chromium). Helpers (builders, clients, harnesses) are the installed package
:mod:`interchange.testing`, which the benchmarks import too; fixtures are defined in conftests only,
so test modules use them without imports. A test outside both directories, or marked with the
other part's marker, is refused.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from certs import TestPki, create_test_pki
from interchange.testing.harness import make_pki
from interchange.testing.pki_fixtures import ACTOR, SERVER, build_main_pki

PARTS = ("unit", "integration")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """After the parts' conftests marked their tests: every test is in exactly one part."""
    stray = [item.nodeid for item in items if sum(item.get_closest_marker(part) is not None for part in PARTS) != 1]
    if stray:
        raise pytest.UsageError("tests not in exactly one part (a file in tests/unit or tests/integration, "
                                f"no part's marker by hand): {', '.join(stray[:5])}")


# ------------------------------------------------------------------------------ PKIs
@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The PKI of the broker and II tests (:func:`interchange.testing.harness.make_pki`); tests must not change it."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def pki_main(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The PKI of the certs and TLS tests (:func:`interchange.testing.pki_fixtures.build_main_pki`); tests
    must not change it (use ``pki_fresh`` for that)."""
    return build_main_pki(tmp_path_factory.mktemp("pki-main"))


@pytest.fixture(scope="session")
def pki_other(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """A second, unrelated trust domain using the same names as ``pki_main``."""
    return create_test_pki(tmp_path_factory.mktemp("pki-other"), [SERVER], [ACTOR])


@pytest.fixture
def pki_fresh(tmp_path: Path) -> TestPki:
    """A private test PKI a test may revoke in, re-issue in, etc."""
    return create_test_pki(tmp_path / "pki", [SERVER], [ACTOR, "actor-2"])
