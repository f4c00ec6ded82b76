"""Helpers of the TLEX/UDAP tests: the simulator's accounts and limits, its RSA test PKI (TLS 1.2,
ECDHE-RSA), and :class:`Sim`, what the ``sim`` fixture of ``conftest.py`` yields: a running
simulator with a Broker, a second Broker, a TLC-system and a Monitor account.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from certs import TestPki, create_test_pki
from certs.keys import KeySpec
from certs.tls import streaming_client_context, streaming_server_context, web_client_context, web_server_context
from interchange.bridges.tlex.controllers import ControllerSpec, VirtualControllers
from interchange.bridges.tlex.rest import StreamingServiceClient
from interchange.bridges.tlex.service import Account, Limits, ServiceRegistry
from interchange.bridges.tlex.simulator import StreamingServiceSimulator
from interchange.bridges.tlex.stream import SessionSupervisor

SIM_HOST = "tlex-sim.test"
DOMAIN = "test"
TLCS = ("NLZH0023", "NLZH0024", "NLZH0025")
TEST_LIMITS = Limits(listener_expiry=2.0, keepalive_timeout=1.5, payload_rate=200.0, payload_rate_duration=2.0,
                     throughput_kb=200.0, throughput_duration=2.0)


@dataclass
class Sim:
    service: StreamingServiceSimulator
    pki: TestPki
    broker: Account
    other_broker: Account
    tlc_system: Account
    monitor: Account

    def api(self, account: Account) -> StreamingServiceClient:
        return StreamingServiceClient(self.service.api_url, account.authorization,
                                      ssl_context=web_client_context(self.pki.trust_bundle), server_hostname=SIM_HOST)

    def stream_ssl(self):  # noqa: ANN201
        return streaming_client_context(self.pki.trust_bundle)


def make_sim_pki(directory: Path) -> TestPki:
    """TLEX 6.1 needs an RSA service key (ECDHE_RSA); the whole test PKI is RSA."""
    return create_test_pki(directory, [SIM_HOST], [], key_spec=KeySpec("rsa"))


def build_registry(limits: Limits = TEST_LIMITS) -> tuple[ServiceRegistry, dict[str, Account]]:
    registry = ServiceRegistry(limits, {})
    accounts = {
        "broker": registry.add_account("bridge", "BROKER_SYSTEM", "broker-secret"),
        "other_broker": registry.add_account("other", "BROKER_SYSTEM", "other-secret"),
        "tlc_system": registry.add_account("vri-operator", "TLC_SYSTEM", "tlc-secret"),
        "monitor": registry.add_account("governance", "MONITOR", "monitor-secret"),
    }
    for tlc in TLCS:
        registry.register_tlc(accounts["tlc_system"], tlc, DOMAIN)
    return registry, accounts


async def start_sim(sim_pki: TestPki, limits: Limits = TEST_LIMITS) -> Sim:
    registry, accounts = build_registry(limits)
    server = sim_pki.servers[SIM_HOST]
    service = StreamingServiceSimulator(
        registry, stream_tls=streaming_server_context(server.chain, server.key),
        api_tls=web_server_context(server.chain, server.key), timestamps_interval=0.5)
    await service.start()
    return Sim(service, sim_pki, **accounts)


async def start_virtual_sim(sim_pki: TestPki, specs: list[ControllerSpec], *, spatem_hz: float,
                            mapem_interval: float) -> tuple[Sim, VirtualControllers]:
    """A simulator whose service plays ``specs`` itself (registered to the TLC-system account)."""
    registry, accounts = build_registry(Limits())
    for spec in specs:
        registry.register_tlc(accounts["tlc_system"], spec.tlc_id, DOMAIN)
    server = sim_pki.servers[SIM_HOST]
    service = StreamingServiceSimulator(
        registry, stream_tls=streaming_server_context(server.chain, server.key),
        api_tls=web_server_context(server.chain, server.key))
    await service.start()
    controllers = VirtualControllers(specs, spatem_hz=spatem_hz, mapem_interval=mapem_interval)
    controllers.start(service.play(controllers, DOMAIN, [spec.tlc_id for spec in specs]))
    return Sim(service, sim_pki, **accounts), controllers


async def eventually(check: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def up(sim: Sim, supervisor: SessionSupervisor, sessions: int) -> bool:
    """The supervisor's ``sessions``-th session is streaming and the service has authenticated it."""
    return (supervisor.stats.sessions == sessions and supervisor.stats.connected and supervisor.session is not None
            and supervisor.session.token in sim.service.connections)
