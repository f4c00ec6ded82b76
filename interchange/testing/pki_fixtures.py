"""Helpers for the certs tests: the names and builder of their test PKI (the ``pki_main``,
``pki_other`` and ``pki_fresh`` fixtures of ``conftest.py``) and real TLS endpoints on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, peer_common_name

SERVER = "a.interchange.test"
OTHER_SERVER = "b.interchange.test"
ACTOR = "actor-1"
EXPIRED_ACTOR = "actor-expired"
REVOKED_ACTOR = "actor-revoked"
STEP_TIMEOUT = 5.0  # seconds for any single network step


def build_main_pki(directory: Path) -> TestPki:
    """Two interchanges, an actor, an expired actor and a revoked actor (CRL rewritten)."""
    made = create_test_pki(directory, [SERVER, OTHER_SERVER], [ACTOR, REVOKED_ACTOR])
    now = datetime.now(timezone.utc)
    made.pki.issue_client(EXPIRED_ACTOR, not_before=now - timedelta(days=30), not_after=now - timedelta(days=1))
    made.pki.revoke(made.clients[REVOKED_ACTOR].serial, reason="key_compromise")
    return made


def files_for(made: TestPki, cn: str, *, crls: bool = True) -> TlsFiles:
    """TlsFiles of identity ``cn`` in ``made`` (with every intermediate's CRL unless told not to)."""
    return TlsFiles.from_pki(made.directory, cn, with_crls=crls)


@dataclass
class ServerLog:
    """What a probe server saw: accepted peers (CN, TLS version) and handshake errors."""

    accepted: list[tuple[str, str]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, count: int = 1) -> None:
        """Wait until ``count`` connections have finished their handshake (either way)."""
        async def until() -> None:
            while len(self.accepted) + len(self.errors) < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), STEP_TIMEOUT)

    def error_text(self) -> str:
        return " | ".join(str(error) for error in self.errors)


class ProbeServer:
    """A TLS server on 127.0.0.1 (port 0): after the handshake it writes ``<peer CN> <version>``.

    TLS is started inside the connection handler (``StreamWriter.start_tls``) so that a failed
    handshake is recorded in ``log`` instead of being swallowed by asyncio.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.log = ServerLog()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ProbeServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.start_tls(self.context, ssl_handshake_timeout=STEP_TIMEOUT)
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            self.log.errors.append(exc)
            self.log.changed.set()
            writer.transport.abort()
            return
        ssl_object = writer.get_extra_info("ssl_object")
        peer, version = peer_common_name(ssl_object), ssl_object.version()
        self.log.accepted.append((peer, version))
        self.log.changed.set()
        try:
            writer.write(f"{peer} {version}\n".encode())
            await writer.drain()
            await asyncio.wait_for(reader.read(), STEP_TIMEOUT)  # until the client closes
        except (ssl.SSLError, OSError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()


@dataclass
class ClientOutcome:
    """What a probe client saw: the server's CN (if the handshake completed), the line read, errors."""

    server_cn: str | None = None
    line: bytes = b""
    version: str | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """True when the server accepted us: it sent its line after the handshake."""
        return bool(self.line)


async def probe_client(port: int, context: ssl.SSLContext, server_hostname: str = SERVER) -> ClientOutcome:
    """Connect, handshake, read the server's line. TLS 1.3 reports a rejected client certificate
    only after the client's handshake, so a refusal shows up as an error or EOF on the read."""
    outcome = ClientOutcome()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=server_hostname,
                ssl_handshake_timeout=STEP_TIMEOUT,
            ),
            STEP_TIMEOUT,
        )
    except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
        outcome.error = exc
        return outcome
    try:
        outcome.server_cn = peer_common_name(writer)
        outcome.version = writer.get_extra_info("ssl_object").version()
        outcome.line = await asyncio.wait_for(reader.readline(), STEP_TIMEOUT)
    except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
        outcome.error = exc
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, OSError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), STEP_TIMEOUT)
    return outcome


def plain_client_context(trust_bundle: Path, *, max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that trusts ``trust_bundle`` but presents no certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=trust_bundle)
    if max_version is not None:
        context.maximum_version = max_version
    return context
