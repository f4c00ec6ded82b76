"""Shared test fixtures: the test PKIs, the DNS server, the Spark session, the TLEX simulator, the
IF2 RabbitMQ.

Helpers (builders, clients, harnesses) live in modules next to this file (``harness.py``,
``broker_harness.py``, ``ii_harness.py``, ``pki_fixtures.py``, ``dns_fixtures.py``) and are
imported by name; fixtures are defined here only, so test modules use them without imports.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from certs import TestPki, create_test_pki
from dns_fixtures import DnsmasqServer, find_dnsmasq
from harness import make_pki
from if2_harness import BACKOFFICE, BRIDGE, IF2_ACTORS, IF2_NEIGHBOUR, IF2_NODE, RABBITMQ_CN
from interchange.app.selfnode import SelfFederation, start_self
from interchange.testing import rabbitmq
from pki_fixtures import ACTOR, SERVER, build_main_pki
from spark.session import build_session
from tlex_harness import Sim, make_sim_pki, start_sim


# ------------------------------------------------------------------------------ PKIs
@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The PKI of the broker and II tests (:func:`harness.make_pki`); tests must not change it."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def pki_main(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The PKI of the certs and TLS tests (:func:`pki_fixtures.build_main_pki`); tests must not change
    it (use ``pki_fresh`` for that)."""
    return build_main_pki(tmp_path_factory.mktemp("pki-main"))


@pytest.fixture(scope="session")
def pki_other(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """A second, unrelated trust domain using the same names as ``pki_main``."""
    return create_test_pki(tmp_path_factory.mktemp("pki-other"), [SERVER], [ACTOR])


@pytest.fixture
def pki_fresh(tmp_path: Path) -> TestPki:
    """A private test PKI a test may revoke in, re-issue in, etc."""
    return create_test_pki(tmp_path / "pki", [SERVER], [ACTOR, "actor-2"])


# ------------------------------------------------------------------------------ DNS
@pytest.fixture
def dnsmasq(tmp_path: Path) -> Iterator[DnsmasqServer]:
    """A stopped :class:`~dns_fixtures.DnsmasqServer`; call ``.start(DnsRecords(...))``. Stopped after the test."""
    server = DnsmasqServer(tmp_path / "dnsmasq", find_dnsmasq())
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------ Spark
#: Tiny test logs: compiling generated code for each query costs more than interpreting a few rows
#: (the rule plans are large), so the tests' session interprets; results are the same by design.
TEST_CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.codegen.wholeStage": "false",
             "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession (local[2]) for the whole test run: start-up costs ~10 s, so it is paid once."""
    session = build_session("local[2]", "interchange-tests", TEST_CONF)
    yield session
    session.stop()


# ------------------------------------------------------------------------------ TLEX / UDAP
@pytest.fixture(scope="session")
def sim_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The streaming-service simulator's RSA PKI (:func:`tlex_harness.make_sim_pki`)."""
    return make_sim_pki(tmp_path_factory.mktemp("tlex-pki"))


@pytest.fixture
async def sim(sim_pki: TestPki) -> AsyncIterator[Sim]:
    """A running streaming-service simulator with its accounts (:func:`tlex_harness.start_sim`)."""
    running = await start_sim(sim_pki)
    try:
        yield running
    finally:
        await running.service.close()


# ------------------------------------------------------------------------------ IF2 (RabbitMQ)
@pytest.fixture(scope="session")
def if2_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The IF2 bridge tests' PKI: the node, the RabbitMQ broker, the bridge, a back-office, a C-ITS actor."""
    return create_test_pki(tmp_path_factory.mktemp("pki-if2"), [IF2_NODE, IF2_NEIGHBOUR, RABBITMQ_CN],
                           list(IF2_ACTORS))


@pytest.fixture(scope="session")
def rabbitmq_if2(if2_pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[rabbitmq.RabbitMQ]:
    """One private RabbitMQ (Debian's rabbitmq-server, installed by scripts/setup.sh) for the whole run:
    TLS 1.3 on a loopback port, SASL EXTERNAL for the bridge and the back-office. A test that restarts
    it leaves it running."""
    if not rabbitmq.RABBITMQ_SERVER.exists():
        pytest.fail(f"{rabbitmq.RABBITMQ_SERVER} is missing: run scripts/setup.sh (it installs rabbitmq-server)")
    identity = if2_pki.identity(RABBITMQ_CN)
    broker = rabbitmq.RabbitMQ(tmp_path_factory.mktemp("rabbitmq"), pki_files={
        "chain": identity.chain, "key": identity.key, "trust": if2_pki.trust_bundle}, user=BRIDGE, users=(BACKOFFICE,),
        log=lambda *_: None)
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


# ------------------------------------------------------------------------------ interop kit
@pytest.fixture
async def interop_self(tmp_path: Path) -> AsyncIterator[SelfFederation]:
    """The kit's ``--self`` federation (the demo's nodes A and B, DNS, actor-1's delivery), correctly configured."""
    federation = await start_self(tmp_path / "self")
    try:
        yield federation
    finally:
        await federation.close()
