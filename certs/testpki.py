"""One call that builds a complete session-level test PKI (what the quick-start demo uses)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from certs.errors import PkiError
from certs.keys import KeySpec
from certs.names import validate_actor_cn, validate_fqdn
from certs.pki import IssuedIdentity, Pki

DEFAULT_INTERMEDIATE = "test"
DEMO_INTERCHANGES = ("a.interchange.test", "b.interchange.test")
DEMO_ACTORS = ("actor-1", "actor-2")


@dataclass(frozen=True)
class TestPki:
    """Paths of a test PKI: the root (trust bundle), one intermediate, leaves and CRLs.

    ``crls`` holds every intermediate's CRL (what certs.tls loads); the root's CRL, which lists
    revoked intermediates, is at ``pki.crl_path("root")``.
    """

    __test__ = False  # not a pytest test class

    directory: Path
    trust_bundle: Path
    intermediate: str
    intermediate_cert: Path
    crls: tuple[Path, ...]
    servers: dict[str, IssuedIdentity] = field(default_factory=dict)
    clients: dict[str, IssuedIdentity] = field(default_factory=dict)

    @property
    def pki(self) -> Pki:
        return Pki(self.directory)

    def identity(self, cn: str) -> IssuedIdentity:
        """The server or client identity called ``cn``."""
        found = self.servers.get(cn) or self.clients.get(cn)
        if found is None:
            raise KeyError(cn)
        return found


def _names(interchanges: Sequence[str], actors: Sequence[str]) -> tuple[list[str], list[str]]:
    """The interchange FQDNs and actor CNs, validated; a name may not be both."""
    servers = [validate_fqdn(name) for name in interchanges]
    clients = [validate_actor_cn(name) for name in actors]
    clash = set(servers) & set(clients)
    if clash:
        raise PkiError(f"names used both as interchange and actor: {', '.join(sorted(clash))}")
    return servers, clients


def _root_and_intermediate(pki: Pki, intermediate: str, key_spec: KeySpec, exist_ok: bool,
                           now: datetime | None) -> Pki:
    """``pki`` with a root (made unless it exists and ``exist_ok``) and the ``intermediate`` CA."""
    if pki.exists():
        if not exist_ok:
            raise PkiError(f"{pki.directory} already holds a PKI; choose an empty directory")
    else:
        pki.init_root(key_spec=key_spec, now=now)
    if intermediate not in pki.load_state().intermediates:
        pki.add_intermediate(intermediate, key_spec=key_spec, now=now)
    return pki


def create_test_pki(
    directory: str | Path,
    interchanges: Sequence[str],
    actors: Sequence[str],
    *,
    intermediate: str = DEFAULT_INTERMEDIATE,
    key_spec: KeySpec = KeySpec(),
    exist_ok: bool = False,
    now: datetime | None = None,
) -> TestPki:
    """Root + one intermediate + a server certificate per interchange FQDN + a client certificate
    per actor + an empty CRL per CA.

    With ``exist_ok`` an existing PKI in ``directory`` is reused: the intermediate is added if
    missing, names that already have a valid certificate from it keep it, the others get one,
    and every CRL is rewritten (fresh nextUpdate). Without it, an existing PKI is an error.
    """
    servers, clients = _names(interchanges, actors)
    pki = _root_and_intermediate(Pki(directory), intermediate, key_spec, exist_ok, now)
    state = pki.load_state()

    def current(cn: str, profile: str) -> IssuedIdentity | None:
        for record in reversed(state.issued):
            if record.cn == cn:
                usable = (
                    record.profile == profile and record.issuer == intermediate
                    and record.status(now) == "valid"
                )
                return pki.identity(cn) if usable else None
        return None

    issued_servers = {
        cn: current(cn, "server") or pki.issue_server(cn, ca=intermediate, key_spec=key_spec, now=now)
        for cn in servers
    }
    issued_clients = {
        cn: current(cn, "client") or pki.issue_client(cn, ca=intermediate, key_spec=key_spec, now=now)
        for cn in clients
    }
    pki.write_crl(now=now)
    return TestPki(
        directory=pki.directory,
        trust_bundle=pki.trust_bundle,
        intermediate=intermediate,
        intermediate_cert=pki.ca_dir(intermediate) / "cert.pem",
        crls=pki.crl_paths(),
        servers=issued_servers,
        clients=issued_clients,
    )
