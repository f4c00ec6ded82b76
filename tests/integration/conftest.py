"""The integration part: tests over real sockets and real third-party programs (node processes,
dnsmasq, RabbitMQ, PySpark on its JVM, Chromium, rhea on Node.js). Every test in this directory is
marked ``integration``. Fixtures: the DNS server, the Spark session, the TLEX simulator, the IF2
RabbitMQ and the IF2 back-office (``if2_backoffice``, the counterpart written from the IF2 spec)
pointed at it, the interop kit's ``--self`` federation (the PKIs are in tests/conftest.py)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from certs import TestPki, create_test_pki
from if2_backoffice import BackOffice, Broker, ConnectBackOffice, definitions
from interchange.app.selfnode import SelfFederation, start_self
from interchange.testing import rabbitmq
from interchange.testing.broker_harness import BROKER_CN, NodeProcess
from interchange.testing.dns_fixtures import DnsmasqServer, find_dnsmasq
from interchange.testing.if2_harness import BACKOFFICE, BRIDGE, IF2_ACTORS, IF2_NEIGHBOUR, IF2_NODE, RABBITMQ_CN
from interchange.testing.stalled_clients import deadline_node_config
from interchange.testing.tlex_harness import Sim, make_sim_pki, start_sim

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
            if "spark" in getattr(item, "fixturenames", ()):
                # pytest-xdist (--dist loadgroup) runs these on one worker: one Spark session per run
                item.add_marker(pytest.mark.xdist_group("spark"))


# ------------------------------------------------------------------------------ DNS
@pytest.fixture
def dnsmasq(tmp_path: Path) -> Iterator[DnsmasqServer]:
    """A stopped :class:`~interchange.testing.dns_fixtures.DnsmasqServer`; call ``.start(DnsRecords(...))``.
    Stopped after the test."""
    server = DnsmasqServer(tmp_path / "dnsmasq", find_dnsmasq())
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------ Spark
#: Tiny test logs: compiling generated code for each query costs more than interpreting a few rows
#: (the rule plans are large), so the tests' session interprets; results are the same by design. Sorts
#: spill every 1,000 rows, so that a test can give one more rows than they hold (the validate walk's).
TEST_CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.codegen.wholeStage": "false",
             "spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.shuffle.spill.numElementsForceSpillThreshold": "1000"}


@pytest.fixture(scope="module")
def deadline_node(pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node process with the stage deadlines of the stalled-client tests (3-4.5 s), one per module."""
    running = NodeProcess(deadline_node_config(pki, BROKER_CN, tmp_path_factory.mktemp("deadlines")))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession (local[2]) for the whole test run: start-up costs ~10 s, so it is paid once."""
    from spark.session import build_session  # imports pyspark: only when a test asks for the session

    session = build_session("local[2]", "interchange-tests", TEST_CONF)
    yield session
    session.stop()


# ------------------------------------------------------------------------------ TLEX / UDAP
@pytest.fixture(scope="session")
def sim_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    """The streaming-service simulator's RSA PKI (:func:`interchange.testing.tlex_harness.make_sim_pki`)."""
    return make_sim_pki(tmp_path_factory.mktemp("tlex-pki"))


@pytest.fixture
async def sim(sim_pki: TestPki) -> AsyncIterator[Sim]:
    """A running streaming-service simulator with its accounts (:func:`interchange.testing.tlex_harness.start_sim`)."""
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


@pytest.fixture
async def connect_backoffice(if2_pki: TestPki, rabbitmq_if2: rabbitmq.RabbitMQ) -> AsyncIterator[ConnectBackOffice]:
    """Connects IF2 back-offices (``if2_backoffice``) to a virtual host of ``rabbitmq_if2`` with the
    back-office's certificate; each is closed after the test (if the test did not close it)."""
    offices: list[BackOffice] = []
    identity = if2_pki.identity(BACKOFFICE)

    async def connect(vhost: str = "/") -> BackOffice:
        office = await BackOffice.connect(Broker("127.0.0.1", rabbitmq_if2.port, vhost, RABBITMQ_CN, identity.chain,
                                                 identity.key, if2_pki.trust_bundle))
        offices.append(office)
        return office

    yield connect
    for office in offices:
        await office.close()


@pytest.fixture
async def backoffice(connect_backoffice: ConnectBackOffice) -> BackOffice:
    """An IF2 back-office on the broker's default virtual host."""
    return await connect_backoffice()


@pytest.fixture
def if2_vhost(rabbitmq_if2: rabbitmq.RabbitMQ) -> Callable[..., Awaitable[str]]:
    """Sets up a virtual host as an IF2 operator would (``if2_backoffice.definitions``: Table 2's
    exchanges, a queue policy, a dead-letter exchange unless ``dead_letters=False``) for the bridge
    and the back-office; returns its name."""
    async def make(name: str, *, dead_letters: bool = True) -> str:
        await asyncio.to_thread(rabbitmq_if2.import_definitions,
                                definitions(name, [BRIDGE, BACKOFFICE], dead_letters=dead_letters))
        return name

    return make


# ------------------------------------------------------------------------------ interop kit
@pytest.fixture
async def interop_self(tmp_path: Path) -> AsyncIterator[SelfFederation]:
    """The kit's ``--self`` federation (the demo's nodes A and B, DNS, actor-1's delivery), correctly configured."""
    federation = await start_self(tmp_path / "self")
    try:
        yield federation
    finally:
        await federation.close()
