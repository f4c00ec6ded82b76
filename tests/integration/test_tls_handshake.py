"""Real TLS 1.3 handshakes over loopback with the contexts of certs.tls (chapter 5)."""
from __future__ import annotations

import ssl

import pytest

from certs import TestPki
from certs.tls import TlsFiles, client_context, server_context
from interchange.testing.pki_fixtures import (
    ACTOR,
    EXPIRED_ACTOR,
    OTHER_SERVER,
    REVOKED_ACTOR,
    SERVER,
    ClientOutcome,
    ProbeServer,
    files_for,
    plain_client_context,
    probe_client,
)

pytestmark = pytest.mark.timeout(60)


async def test_mutual_tls13_handshake_both_sides_see_the_peer_cn(pki_main: TestPki) -> None:
    async with ProbeServer(server_context(files_for(pki_main, SERVER))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, ACTOR)))
        await server.log.wait()
    assert outcome.ok, outcome.error
    assert outcome.server_cn == SERVER
    assert outcome.version == "TLSv1.3"
    assert outcome.line == f"{ACTOR} TLSv1.3\n".encode()
    assert server.log.accepted == [(ACTOR, "TLSv1.3")]


async def test_interchange_to_interchange_uses_the_server_certificate_as_client(pki_main: TestPki) -> None:
    # An interchange is also a client of other interchanges (EKU serverAuth + clientAuth).
    async with ProbeServer(server_context(files_for(pki_main, SERVER))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, OTHER_SERVER)))
        await server.log.wait()
    assert outcome.ok, outcome.error
    assert server.log.accepted == [(OTHER_SERVER, "TLSv1.3")]


async def test_identity_without_crls_still_verifies(pki_main: TestPki) -> None:
    async with ProbeServer(server_context(files_for(pki_main, SERVER, crls=False))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, ACTOR, crls=False)))
        await server.log.wait()
    assert outcome.ok, outcome.error


async def _refused_client(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[ClientOutcome, str]:
    async with ProbeServer(server_ctx) as server:
        outcome = await probe_client(server.port, client_ctx)
        await server.log.wait()
    assert not outcome.ok, "the server accepted a client it must refuse"
    assert server.log.accepted == []
    assert server.log.errors, "the server recorded no rejection"
    return outcome, server.log.error_text()


async def test_client_certificate_from_another_root_is_refused(pki_main: TestPki, pki_other: TestPki) -> None:
    foreign = TlsFiles.from_pki(pki_other.directory, ACTOR, with_crls=False)
    # The foreign client trusts our root so that only the server's verdict matters.
    foreign = TlsFiles(foreign.cert_chain, foreign.key, pki_main.trust_bundle)
    _, server_error = await _refused_client(server_context(files_for(pki_main, SERVER)), client_context(foreign))
    assert "unable to get local issuer certificate" in server_error


async def test_expired_client_certificate_is_refused(pki_main: TestPki) -> None:
    _, server_error = await _refused_client(
        server_context(files_for(pki_main, SERVER)), client_context(files_for(pki_main, EXPIRED_ACTOR))
    )
    assert "certificate has expired" in server_error


async def test_revoked_client_certificate_is_refused_when_the_crl_is_loaded(pki_main: TestPki) -> None:
    _, server_error = await _refused_client(
        server_context(files_for(pki_main, SERVER)), client_context(files_for(pki_main, REVOKED_ACTOR))
    )
    assert "certificate revoked" in server_error


async def test_revoked_client_certificate_passes_without_crl(pki_main: TestPki) -> None:
    # Documents why the node must load CRLs: without them revocation is invisible.
    async with ProbeServer(server_context(files_for(pki_main, SERVER, crls=False))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, REVOKED_ACTOR)))
        await server.log.wait()
    assert outcome.ok and server.log.accepted == [(REVOKED_ACTOR, "TLSv1.3")]


async def test_tls12_only_client_is_refused(pki_main: TestPki) -> None:
    client = client_context(files_for(pki_main, ACTOR))
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    outcome, server_error = await _refused_client(server_context(files_for(pki_main, SERVER)), client)
    assert outcome.error is not None and outcome.server_cn is None  # no handshake at all
    assert "unsupported protocol" in server_error


async def test_client_without_certificate_is_refused(pki_main: TestPki) -> None:
    _, server_error = await _refused_client(
        server_context(files_for(pki_main, SERVER)), plain_client_context(pki_main.trust_bundle)
    )
    assert "peer did not return a certificate" in server_error


async def test_client_refuses_server_certificate_from_another_root(pki_main: TestPki, pki_other: TestPki) -> None:
    foreign = TlsFiles.from_pki(pki_other.directory, SERVER, with_crls=False)
    foreign = TlsFiles(foreign.cert_chain, foreign.key, pki_main.trust_bundle)  # it would accept our client
    async with ProbeServer(server_context(foreign)) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, ACTOR)))
        await server.log.wait()
    assert isinstance(outcome.error, ssl.SSLCertVerificationError)
    assert "unable to get local issuer certificate" in str(outcome.error)
    assert outcome.server_cn is None and server.log.accepted == []


async def test_client_refuses_server_with_another_name(pki_main: TestPki) -> None:
    # IP_125: the server certificate names the SRV target; connecting to another name fails.
    async with ProbeServer(server_context(files_for(pki_main, OTHER_SERVER))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_main, ACTOR)), server_hostname=SERVER)
        await server.log.wait()
    assert isinstance(outcome.error, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in str(outcome.error)


async def test_client_refuses_a_client_only_certificate_on_a_server(pki_main: TestPki) -> None:
    # An actor's certificate (EKU clientAuth only) cannot act as a server.
    async with ProbeServer(server_context(files_for(pki_main, ACTOR))) as server:
        outcome = await probe_client(
            server.port, client_context(files_for(pki_main, SERVER), check_hostname=False)
        )
        await server.log.wait()
    assert isinstance(outcome.error, ssl.SSLCertVerificationError)
    assert "unsuitable certificate purpose" in str(outcome.error)
