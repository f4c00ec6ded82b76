"""The server's CPU per TLS 1.3 handshake, by step and by TLS setting: what an arriving connection
costs the node's loop before it does anything else.

In memory (a client ``SSLObject`` over memory BIOs, the server's
:class:`~interchange.broker.tls_stream.TlsSession` as both interfaces use it), one process, CPU time
(``time.process_time``) of the server's two steps: the ClientHello (key share, signature, its flight
up to Finished) and the client's flight (certificate chain and its checks, CertificateVerify,
Finished). Variants, alternated round by round:

- ``node``: the node's listener context (``ReloadingTls.listener_context``: each handshake switches
  to the current context, after checking its files, so that a new CRL applies);
- ``fixed``: one server context, no switch;
- ``no-crl``: as ``fixed``, without the CRL check (not an option for the node: IP_050/IP_116);
- ``p256-kex``: as ``fixed``, with the client offering P-256 for the key exchange instead of X25519.

    flock /work/bench.lock .venv/bin/python benchmarks/bench_handshake_cpu.py --count 300 --rounds 2
"""
from __future__ import annotations

import argparse
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from certs.tls import ReloadingTls, client_context, server_context
from interchange.broker.tls_stream import TlsSession
from interchange.testing.pki_fixtures import ACTOR, SERVER, build_main_pki, files_for


def _advance(client: ssl.SSLObject) -> None:
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass


def handshake(server: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[float, float]:
    """One handshake; the server's CPU seconds for its two steps."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(incoming, outgoing, server_hostname=SERVER)
    _advance(client)
    session = TlsSession(server)
    started = time.process_time()
    step = session.receive(outgoing.read())
    first = time.process_time() - started
    incoming.write(step.send)
    _advance(client)
    started = time.process_time()
    step = session.receive(outgoing.read())
    second = time.process_time() - started
    if not step.established:
        raise RuntimeError(f"the handshake did not complete: {step.error}")
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="handshakes per variant and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pki = build_main_pki(Path(tmp))
        server_files, client_files = files_for(pki, SERVER), files_for(pki, ACTOR)
        client = client_context(client_files)
        p256 = client_context(client_files)
        p256.set_ecdh_curve("prime256v1")
        variants: dict[str, Callable[[], tuple[ssl.SSLContext, ssl.SSLContext]]] = {
            "node": lambda: (ReloadingTls(server_files, "server").listener_context(), client),
            "fixed": lambda: (server_context(server_files), client),
            "no-crl": lambda: (server_context(files_for(pki, SERVER, crls=False)), client),
            "p256-kex": lambda: (server_context(server_files), p256),
        }
        print(f"server CPU µs per handshake, mean of {args.count} ({ssl.OPENSSL_VERSION})")
        print(f"{'round':<6}{'variant':<10}{'ClientHello':>12}{'client flight':>14}{'total':>8}")
        for round_ in range(1, args.rounds + 1):
            for name, make in variants.items():
                server, client_ctx = make()
                for _ in range(10):
                    handshake(server, client_ctx)
                steps = [handshake(server, client_ctx) for _ in range(args.count)]
                first = sum(s[0] for s in steps) / len(steps) * 1e6
                second = sum(s[1] for s in steps) / len(steps) * 1e6
                print(f"{round_:<6}{name:<10}{first:>12.0f}{second:>14.0f}{first + second:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
