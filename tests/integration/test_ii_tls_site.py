"""The II's HTTPS listener gives the BI's TLS diagnostics (ii_api/http/tls_site.py): a refused
handshake gets its alert (asyncio's TLS closed without one) and a ``tls_refused`` record with the
reason; a handshake that never finishes is dropped and logged; a client certificate valid for
longer than ``tls.max_certificate_days`` is refused (IP_051); accepted connections serve HTTP as
before (identity from the certificate, keep-alive, large bodies, close_notify); in a node, the II's
handshake steps run in the BI server's HandshakeQueue."""
from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509

from certs import TestPki
from certs.tls import TlsFiles, client_context, peer_common_name, server_context
from ii_api.http.tls_site import TlsSite
from interchange.testing.ii_harness import Https, node_config, start, wait_for
from interchange.testing.pki_fixtures import ACTOR, SERVER

BIG = b"x" * (3 * 1024 * 1024)  # several TLS records and socket buffers: flow control


class Site:
    def __init__(self, port: int, events: list[tuple[str, str, dict]]) -> None:
        self.port, self.events = port, events

    def refused(self) -> list[dict[str, Any]]:
        return [fields for _level, kind, fields in self.events if kind == "tls_refused"]


async def _serve(pki: TestPki, **site: Any) -> tuple[web.AppRunner, Site]:
    async def whoami(request: web.Request) -> web.Response:
        assert request.transport is not None
        return web.json_response({"cn": peer_common_name(request.transport.get_extra_info("ssl_object"))})

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=BIG)

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    app.router.add_get("/big", big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    events: list[tuple[str, str, dict]] = []
    tls = TlsSite(runner, "127.0.0.1", 0, server_context(TlsFiles.from_pki(pki.directory, SERVER)),
                  event=lambda level, kind, fields: events.append((level, kind, fields)), **site)
    await tls.start()
    return runner, Site(int(runner.addresses[0][1]), events)


@pytest.fixture
async def site(pki: TestPki) -> AsyncIterator[Site]:
    runner, made = await _serve(pki, handshake_timeout_s=0.5)
    try:
        yield made
    finally:
        await runner.cleanup()


def _handshake_then_read(port: int, context: ssl.SSLContext) -> str:
    """What a client sees on its first read after its side of the handshake: the server's alert."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=SERVER) as tls:
            try:
                tls.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
                return f"answered: {tls.recv(100)!r}"
            except ssl.SSLError as exc:
                return f"alert: {exc.reason}"
            except OSError as exc:
                return f"no alert: {exc}"


def _no_certificate(pki: TestPki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.trust_bundle))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


async def test_accepted_connections_serve_http(site: Site, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, ACTOR))
    async with aiohttp.ClientSession() as http:
        for _ in range(2):  # the same keep-alive connection twice
            async with http.get(f"https://127.0.0.1:{site.port}/whoami", ssl=context, server_hostname=SERVER) as r:
                assert r.status == 200 and await r.json() == {"cn": ACTOR}
        async with http.get(f"https://127.0.0.1:{site.port}/big", ssl=context, server_hostname=SERVER) as r:
            assert await r.read() == BIG
    assert site.refused() == []


async def test_refused_handshake_gets_its_alert_and_a_reason(site: Site, pki: TestPki) -> None:
    seen = await asyncio.to_thread(_handshake_then_read, site.port, _no_certificate(pki))
    assert seen == "alert: TLSV13_ALERT_CERTIFICATE_REQUIRED"  # asyncio's TLS closed without it
    await wait_for(site.refused, "the refusal record")
    assert site.refused()[0]["interface"] == "ii" and site.refused()[0]["reason"] == "no client certificate"


async def test_handshake_that_never_finishes_is_dropped_and_logged(site: Site) -> None:
    def idle() -> float:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", site.port), timeout=5) as raw:
            assert raw.recv(10) == b""  # closed by the server
        return time.monotonic() - start

    assert await asyncio.to_thread(idle) < 3
    assert [r["reason"] for r in site.refused()] == ["handshake timeout"]


async def test_long_lived_client_certificate_refused(pki: TestPki) -> None:
    actor = x509.load_pem_x509_certificate(pki.identity(ACTOR).chain.read_bytes())
    days = (actor.not_valid_after_utc - actor.not_valid_before_utc).days
    runner, site = await _serve(pki, max_certificate_days=days - 1)
    try:
        context = client_context(TlsFiles.from_pki(pki.directory, ACTOR))
        seen = await asyncio.to_thread(_handshake_then_read, site.port, context)
        assert "HTTP" not in seen  # closed before any request is served (the handshake itself had succeeded)
        await wait_for(site.refused, "the refusal record")
        assert "IP_051" in site.refused()[0]["reason"]
    finally:
        await runner.cleanup()


async def test_node_logs_ii_refusals(pki: TestPki, tmp_path: Path) -> None:
    node = await start(node_config(pki, SERVER, tmp_path))
    try:
        assert node.ii_port is not None
        stepped = node.server.handshakes.stepped
        seen = await asyncio.to_thread(_handshake_then_read, node.ii_port, _no_certificate(pki))
        assert seen == "alert: TLSV13_ALERT_CERTIFICATE_REQUIRED"
        await wait_for(lambda: '"tls_refused"' in (tmp_path / "node.log").read_text(), "tls_refused in the node log")
        https = Https(pki, ACTOR, node)  # and a good client is served
        try:
            assert (await https.get(f"/{ACTOR}/capabilities"))[0] == 200
        finally:
            await https.close()
        # both II handshakes (ClientHello, then the client's flight each) ran in the BI server's queue:
        # one bound of handshake work per loop turn for both interfaces
        assert node.server.handshakes.stepped - stepped >= 4
    finally:
        await node.close()
