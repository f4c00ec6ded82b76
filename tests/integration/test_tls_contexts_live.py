"""certs.tls CRL handling over real TLS handshakes: a CRL is needed for every issuing CA, an expired
CRL refuses peers, a listener picks up a new CRL without a restart."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from certs import TestPki
from certs.tls import ReloadingTls, client_context, server_context
from interchange.testing.pki_fixtures import (
    ACTOR,
    SERVER,
    ProbeServer,
    files_for,
    probe_client,
)


async def test_crl_is_required_for_every_issuing_ca(pki_fresh: TestPki) -> None:
    """With CRL checking on, a peer whose issuer has no loaded CRL is refused (fail closed)."""
    pki = pki_fresh.pki
    pki.add_intermediate("nl")
    pki.issue_client("actor-nl", ca="nl")
    only_test_crl = files_for(pki_fresh, SERVER).with_crls([pki.crl_path("test")])
    async with ProbeServer(server_context(only_test_crl)) as server:
        refused = await probe_client(server.port, client_context(files_for(pki_fresh, "actor-nl", crls=False)))
        accepted = await probe_client(server.port, client_context(files_for(pki_fresh, ACTOR, crls=False)))
        await server.log.wait(2)
    assert not refused.ok and accepted.ok
    assert "unable to get certificate CRL" in server.log.error_text()
    assert server.log.accepted == [(ACTOR, "TLSv1.3")]
    # Loading every intermediate's CRL (what from_pki does) accepts both.
    async with ProbeServer(server_context(files_for(pki_fresh, SERVER))) as server:
        assert (await probe_client(server.port, client_context(files_for(pki_fresh, "actor-nl")))).ok


async def test_expired_crl_refuses_peers(pki_fresh: TestPki) -> None:
    past = datetime.now(timezone.utc) - timedelta(days=10)
    pki_fresh.pki.write_crl("test", days=1, now=past)  # nextUpdate nine days ago
    async with ProbeServer(server_context(files_for(pki_fresh, SERVER))) as server:
        outcome = await probe_client(server.port, client_context(files_for(pki_fresh, ACTOR, crls=False)))
        await server.log.wait()
    assert not outcome.ok
    assert "CRL has expired" in server.log.error_text()


async def test_listener_picks_up_a_new_crl_without_restart(pki_fresh: TestPki) -> None:
    reloading = ReloadingTls(files_for(pki_fresh, SERVER), "server")
    first = reloading.current()
    assert reloading.current() is first  # nothing changed, nothing rebuilt
    async with ProbeServer(reloading.listener_context()) as server:
        before = await probe_client(server.port, client_context(files_for(pki_fresh, ACTOR)))
        await server.log.wait(1)
        pki_fresh.pki.revoke(pki_fresh.clients[ACTOR].serial)
        after = await probe_client(server.port, client_context(files_for(pki_fresh, ACTOR)))
        other = await probe_client(server.port, client_context(files_for(pki_fresh, "actor-2")))
        no_sni = await probe_client(  # the switch also happens when the client sends no SNI
            server.port, client_context(files_for(pki_fresh, ACTOR), check_hostname=False), server_hostname=""
        )
        await server.log.wait(4)
    assert before.ok and not after.ok and other.ok and not no_sni.ok
    assert "certificate revoked" in server.log.error_text()
    assert server.log.accepted == [(ACTOR, "TLSv1.3"), ("actor-2", "TLSv1.3")]
    assert reloading.current() is not first
