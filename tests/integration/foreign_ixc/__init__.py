"""A small foreign C-Roads interchange, written for the tests from the IP Based Interface Profile.

It is the counterpart the interop kit is tested against: an independent implementation that shares
no code with this project (only the standard library, aiohttp, dnspython, python-qpid-proton's
engine and codec, and ``cryptography``; ``tests/integration/test_interop_foreign.py`` checks its imports). What
it implements, and from where:

- chapter 5 / appendix E (:func:`server_context`): TLS 1.3 only (IP_053/054), mutual
  authentication (IP_050) against the roots it trusts (its own and, as a test deployment would,
  the kit's test PKI's), revocation checked against the CRLs it loaded at start, the whole chain
  sent (IP_057), a certificate of its own PKI (:mod:`foreign_ixc.pki`);
- chapter 4.3 / appendices C and D: the II over aiohttp (:mod:`foreign_ixc.ii`);
- chapter 3.3: the BI, AMQP 1.0 with SASL EXTERNAL over proton's engine (:mod:`foreign_ixc.bi`,
  :mod:`foreign_ixc.sasl`), selectors on sources in a small subset (:mod:`foreign_ixc.selectors`).

Its DNS entries (IP_085-087) are the test's dnsmasq's. :class:`Faults` makes the broken variants
(mutants) the kit must catch.
"""
from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from foreign_ixc.bi import Router, RoutingFaults, serve_bi
from foreign_ixc.ii import IIFaults, IIState, build_app
from foreign_ixc.pki import ForeignPki

__all__ = ["Faults", "ForeignConfig", "ForeignInterchange", "IIFaults", "RoutingFaults", "start"]


@dataclass(frozen=True)
class Faults:
    """Ways to break the foreign interchange on purpose; the default breaks nothing."""

    tls12: bool = False  #: TLS 1.2 accepted too
    extra_roots: tuple[Path, ...] = ()  #: further roots trusted for clients (with their CRLs in extra_crls)
    extra_crls: tuple[Path, ...] = ()
    no_revocation: bool = False  #: no CRL loaded, revocation not checked
    ii: IIFaults = IIFaults()
    routing: RoutingFaults = RoutingFaults()


@dataclass(frozen=True)
class ForeignConfig:
    name: str  #: FQDN: certificate CN, SRV target
    domain: str  #: the trusted domain with the _ixc._tcp SRV records
    dns: tuple[str, int]
    ii_port: int
    bi_port: int
    pki: ForeignPki
    client_roots: tuple[Path, ...]  #: roots trusted for client certificates besides its own
    client_crls: tuple[Path, ...]  #: their intermediates' CRLs (loaded once, at start)
    publisher: str  #: the client allowed to publish to the delivery target
    delivery_address: str
    capabilities: list[dict[str, Any]]
    base: str = "/ii"
    host: str = "127.0.0.1"


def server_context(config: ForeignConfig, faults: Faults) -> ssl.SSLContext:
    """The TLS settings of both interfaces (chapter 5)."""
    identity = config.pki.identities[config.name]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2 if faults.tls12 else ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(identity.chain, identity.key)
    for root in (config.pki.root, *config.client_roots, *faults.extra_roots):
        context.load_verify_locations(cafile=root)
    if not faults.no_revocation:
        for crl in (config.pki.crl, *config.client_crls, *faults.extra_crls):
            context.load_verify_locations(cafile=crl)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context


@dataclass
class ForeignInterchange:
    config: ForeignConfig
    router: Router
    runner: web.AppRunner
    bi: asyncio.Server | None = None

    @property
    def ii_url(self) -> str:
        return f"https://{self.config.name}:{self.config.ii_port}{self.config.base}"

    async def close(self) -> None:
        if self.bi is not None:
            self.bi.close()
            await self.bi.wait_closed()
        await self.runner.cleanup()


async def start(config: ForeignConfig, faults: Faults = Faults()) -> ForeignInterchange:
    """Both interfaces listening on ``config.host``."""
    context = server_context(config, faults)
    router = Router(config.delivery_address, config.publisher, faults.routing)
    state = IIState(config.name, config.domain, config.dns, config.base, config.bi_port, config.capabilities, router,
                    faults.ii)
    runner = web.AppRunner(build_app(state), access_log=None)
    await runner.setup()
    running = ForeignInterchange(config, router, runner)
    try:
        await web.TCPSite(runner, config.host, config.ii_port, ssl_context=context).start()
        running.bi = await serve_bi(router, context, config.host, config.bi_port)
    except BaseException:
        await running.close()
        raise
    return running
