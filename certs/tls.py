"""The node's TLS settings, in one place (chapter 5): every TLS context is built here.

The BI broker, the II (aiohttp) and proton-based clients all get their settings from the same
:class:`TlsFiles`: mutual X.509 authentication against a trust bundle holding the common root only
(IP_050, IP_115-117); TLS 1.3 only (IP_053-055); the whole chain sent (IP_057); the server name
checked by clients, the SRV target (IP_125); strict X.509 checks; no session tickets. When CRLs are
given, OpenSSL requires a current one for the issuer of every peer certificate, so give the CRL of
every intermediate CA (:meth:`TlsFiles.from_pki` does) or none. :class:`ReloadingTls` makes a new
CRL take effect for new connections. Each setting and why: docs/pki-and-tls.md.
"""
from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cryptography import x509
from cryptography.x509.oid import NameOID

from certs.errors import PeerIdentityError
from certs.pki import Pki

if TYPE_CHECKING:  # pragma: no cover
    import proton

_log = logging.getLogger(__name__)

#: IP_053/IP_054: the only protocol version the node speaks.
TLS_VERSION = ssl.TLSVersion.TLSv1_3
#: The same, spelled for proton's ``pn_ssl_domain_set_protocols``.
PROTON_PROTOCOLS = "TLSv1.3"

Role = Literal["server", "client"]


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files one TLS endpoint needs.

    ``cert_chain``: own certificate followed by the intermediate (IP_057); ``key``: own private key;
    ``trust_bundle``: the common root (IP_115/116); ``crls``: one CRL per intermediate CA, or
    none to skip revocation checking (see the module docstring).
    """

    cert_chain: Path
    key: Path
    trust_bundle: Path
    crls: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cert_chain", Path(self.cert_chain))
        object.__setattr__(self, "key", Path(self.key))
        object.__setattr__(self, "trust_bundle", Path(self.trust_bundle))
        object.__setattr__(self, "crls", tuple(Path(crl) for crl in self.crls))

    @classmethod
    def from_identity_dir(
        cls, directory: str | Path, *, trust_bundle: str | Path | None = None, crls: Sequence[str | Path] = ()
    ) -> TlsFiles:
        """From a PKI-issued identity directory (``chain.pem``, ``key.pem``, ``trust.pem``)."""
        folder = Path(directory)
        return cls(
            cert_chain=folder / "chain.pem",
            key=folder / "key.pem",
            trust_bundle=Path(trust_bundle) if trust_bundle is not None else folder / "trust.pem",
            crls=tuple(Path(crl) for crl in crls),
        )

    @classmethod
    def from_pki(cls, pki_dir: str | Path, cn: str, *, with_crls: bool = True) -> TlsFiles:
        """Identity ``cn`` of the PKI in ``pki_dir``, its ``trust.pem`` and every intermediate's CRL."""
        pki = Pki(pki_dir)
        identity = pki.identity(cn)
        return cls.from_identity_dir(
            identity.directory, trust_bundle=pki.trust_bundle, crls=pki.crl_paths() if with_crls else ()
        )

    def with_crls(self, crls: Sequence[str | Path]) -> TlsFiles:
        """A copy checking revocation against ``crls`` instead."""
        return replace(self, crls=tuple(Path(crl) for crl in crls))

    def paths(self) -> tuple[Path, ...]:
        """Every file these settings read."""
        return (self.cert_chain, self.key, self.trust_bundle, *self.crls)

    def check(self) -> None:
        """Raise FileNotFoundError naming the first missing file."""
        for path in self.paths():
            if not path.is_file():
                raise FileNotFoundError(f"TLS file not found: {path}")


def _configure(context: ssl.SSLContext, files: TlsFiles) -> ssl.SSLContext:
    files.check()
    context.minimum_version = TLS_VERSION  # IP_053
    context.maximum_version = TLS_VERSION  # IP_054
    context.verify_mode = ssl.CERT_REQUIRED  # IP_050: mutual authentication
    context.load_cert_chain(certfile=files.cert_chain, keyfile=files.key)  # IP_057: leaf + intermediate
    context.load_verify_locations(cafile=files.trust_bundle)  # IP_115/116: the common root
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    if files.crls:
        for crl in files.crls:
            # A PEM file given as cafile may hold CRLs; OpenSSL adds them to the store.
            context.load_verify_locations(cafile=crl)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """TLS 1.3 server side (BI broker, II HTTPS): client certificate required and verified."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, files)
    context.num_tickets = 0  # no resumption: each connection is checked against the current CRL
    return context


class _ServerNameContext(ssl.SSLContext):
    """A client context that verifies one configured server name whatever host a library connects
    to (the IF2 bridge's RabbitMQ address may be an IP address while the certificate names a host)."""

    server_name: str

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None, session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)


def client_context(files: TlsFiles, check_hostname: bool = True, server_name: str | None = None) -> ssl.SSLContext:
    """TLS 1.3 client side (actor -> interchange, interchange -> interchange).

    With ``check_hostname`` the server's certificate must name the host connected to
    (``server_hostname``), i.e. the SRV target (IP_125); with ``server_name`` it must name that.
    """
    if server_name is not None:
        named = _ServerNameContext(ssl.PROTOCOL_TLS_CLIENT)
        named.server_name = server_name
        context: ssl.SSLContext = named
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    return _configure(context, files)


def build_context(files: TlsFiles, role: Role, *, check_hostname: bool = True) -> ssl.SSLContext:
    """server_context or client_context by ``role``."""
    if role == "server":
        return server_context(files)
    return client_context(files, check_hostname=check_hostname)


def _names_from_der(der: bytes) -> list[str]:
    cert = x509.load_der_x509_certificate(der)
    return [str(attr.value) for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def peer_common_name(source: Any) -> str:
    """The common name of the verified peer certificate: the connection's identity (BI and II).

    ``source`` may be an ``ssl.SSLObject``/``ssl.SSLSocket``, an asyncio transport or
    ``StreamWriter`` (its ``ssl_object`` is used), the dict of ``getpeercert()``, DER bytes or a
    ``cryptography`` certificate. Raises PeerIdentityError without exactly one CN.
    """
    if source is not None and hasattr(source, "get_extra_info"):
        source = source.get_extra_info("ssl_object")
    if isinstance(source, (ssl.SSLObject, ssl.SSLSocket)):
        source = source.getpeercert(binary_form=True)
    if isinstance(source, x509.Certificate):
        names = [str(a.value) for a in source.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    elif isinstance(source, (bytes, bytearray, memoryview)) and source:
        names = _names_from_der(bytes(source))
    elif isinstance(source, dict) and source.get("subject"):
        names = [value for rdn in source["subject"] for key, value in rdn if key == "commonName"]
    else:
        raise PeerIdentityError("the TLS peer presented no certificate")
    if len(names) != 1 or not names[0]:
        raise PeerIdentityError(f"the peer certificate must carry exactly one common name (found {len(names)})")
    return names[0]


def certificate_lifetime_problem(source: Any, max_days: int) -> str | None:
    """IP_051: certificates are renewed at least yearly, so none is valid for more than
    ``max_days`` (366 in the production example). Why ``source`` (as for
    :func:`peer_common_name`, or a PEM file path) is refused, or None."""
    if isinstance(source, (ssl.SSLObject, ssl.SSLSocket)):
        source = source.getpeercert(binary_form=True)
    if isinstance(source, Path):
        cert = x509.load_pem_x509_certificate(source.read_bytes())
    elif isinstance(source, (bytes, bytearray)) and source:
        cert = x509.load_der_x509_certificate(bytes(source))
    elif isinstance(source, x509.Certificate):
        cert = source
    else:
        return "no certificate"
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() / 86400
    if days > max_days:
        return f"certificate valid for {days:.0f} days, more than {max_days} (IP_051: renewed at least yearly)"
    return None


def proton_ssl_domain(files: TlsFiles, mode: int) -> proton.SSLDomain:
    """A proton ``SSLDomain`` with the node's settings, for proton-based clients and listeners.

    ``mode`` is ``SSLDomain.MODE_CLIENT`` (the server's name is verified: VERIFY_PEER_NAME; set
    it with ``sni=``/``virtual_host=`` when connecting by address) or ``SSLDomain.MODE_SERVER``
    (client certificate required: VERIFY_PEER). Credentials are chain + key (IP_057), the trusted
    CA db is the trust bundle, and only TLS 1.3 is enabled (``pn_ssl_domain_set_protocols``,
    which the Python wrapper does not expose, is called on the domain's handle).

    Proton's domain cannot check CRLs: ``files.crls`` is ignored here. Revocation is enforced by
    the node's own ``ssl`` listeners (server_context), which see every actor and interchange.
    """
    # here, not at the top: the II, Spark and the PKI tools use this module without proton
    import cproton  # noqa: PLC0415
    from proton import SSLDomain, SSLException  # noqa: PLC0415

    files.check()
    domain = SSLDomain(mode)
    domain.set_credentials(str(files.cert_chain), str(files.key), None)
    domain.set_trusted_ca_db(str(files.trust_bundle))
    if mode == SSLDomain.MODE_CLIENT:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    else:
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER, str(files.trust_bundle))
    if cproton.pn_ssl_domain_set_protocols(domain._domain, PROTON_PROTOCOLS) != 0:  # noqa: SLF001
        raise SSLException(f"proton refused to restrict the protocols to {PROTON_PROTOCOLS}")
    return domain


class ReloadingTls:
    """The current context for one role, rebuilt when any of its files changes (e.g. a new CRL).

    ``current()`` compares the files' (mtime, size, inode) with those the context was built
    from; the PKI writes files atomically, so a change is always a complete file. If a rebuild
    fails, the previous context stays in use (its CRL still binds until its nextUpdate) and the
    error is logged once per change. ``listener_context()`` gives a server context to hand to
    ``asyncio.start_server``/aiohttp once: each new connection is switched to ``current()``.
    """

    def __init__(self, files: TlsFiles, role: Role, *, check_hostname: bool = True) -> None:
        self._role: Role = role
        self._check_hostname = check_hostname
        self._files = files
        self._stamp = self._fingerprint()
        self._context = build_context(files, role, check_hostname=check_hostname)
        self._failed_stamp: tuple[object, ...] | None = None

    @property
    def files(self) -> TlsFiles:
        return self._files

    def _fingerprint(self) -> tuple[object, ...]:
        stamp: list[object] = []
        for path in self._files.paths():
            try:
                info = path.stat()
                stamp.append((info.st_ino, info.st_mtime_ns, info.st_size))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def reload(self, files: TlsFiles | None = None) -> ssl.SSLContext:
        """Build a new context now (from ``files`` if given); errors propagate."""
        if files is not None:
            self._files = files
        return self.install(self.build())

    def build(self) -> tuple[tuple[object, ...], ssl.SSLContext]:
        """A context from the files as they are now, not yet in use (see :meth:`install`); errors propagate."""
        stamp = self._fingerprint()
        return stamp, build_context(self._files, self._role, check_hostname=self._check_hostname)

    def install(self, built: tuple[tuple[object, ...], ssl.SSLContext]) -> ssl.SSLContext:
        """Use a context from :meth:`build` for every new connection from now on."""
        (self._stamp, self._context), self._failed_stamp = built, None
        return self._context

    def current(self) -> ssl.SSLContext:
        """The context to use for a new connection, rebuilt first if a file changed."""
        stamp = self._fingerprint()
        if stamp != self._stamp and stamp != self._failed_stamp:
            try:
                self.reload()
            except (OSError, ValueError) as exc:
                self._failed_stamp = stamp
                _log.warning("TLS files changed but the new context cannot be built (%s); keeping the previous one", exc)
        return self._context

    def listener_context(self) -> ssl.SSLContext:
        """A server context whose connections each switch to ``current()`` during the handshake."""
        if self._role != "server":
            raise ValueError("listener_context() is for server-side ReloadingTls")
        entry = server_context(self._files)

        def switch(ssl_object: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
            ssl_object.context = self.current()

        entry.sni_callback = switch
        return entry


# --- Streaming services (TLEX / UDAP) -------------------------------------------------------------
# Not C-Roads interfaces: TLEX-BROKER-SYSTEM 6.1 and UDAP 3.1 fix TLS 1.2, the single cipher suite
# TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (so the service's key is RSA) and server authentication
# only. Their REST APIs are ordinary HTTPS with server authentication.

#: TLEX 6.1 / UDAP 3.1: the only version and cipher suite of TCPStreaming over TLS.
STREAMING_TLS_VERSION = ssl.TLSVersion.TLSv1_2
STREAMING_CIPHER = "ECDHE-RSA-AES128-GCM-SHA256"  # OpenSSL's name of TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256


def _streaming(context: ssl.SSLContext) -> ssl.SSLContext:
    context.minimum_version = STREAMING_TLS_VERSION
    context.maximum_version = STREAMING_TLS_VERSION
    context.set_ciphers(STREAMING_CIPHER)
    return context


def streaming_client_context(trust_bundle: Path | None = None, *, check_hostname: bool = True) -> ssl.SSLContext:
    """TCPStreaming client (Broker or TLC system): TLS 1.2, the one cipher suite, the service verified
    against ``trust_bundle`` (the system's CAs when None); no client certificate."""
    context = ssl.create_default_context(cafile=str(trust_bundle) if trust_bundle is not None else None)
    context.check_hostname = check_hostname
    return _streaming(context)


def streaming_server_context(cert_chain: Path, key: Path) -> ssl.SSLContext:
    """TCPStreaming listener of a streaming service (the simulator): RSA certificate, no client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile=cert_chain, keyfile=key)
    return _streaming(context)


def web_client_context(trust_bundle: Path | None = None) -> ssl.SSLContext:
    """HTTPS client for a third party's REST API (TLEX/UDAP sessions): TLS 1.2 or later, server verified."""
    context = ssl.create_default_context(cafile=str(trust_bundle) if trust_bundle is not None else None)
    context.minimum_version = STREAMING_TLS_VERSION
    return context


def web_server_context(cert_chain: Path, key: Path) -> ssl.SSLContext:
    """HTTPS server of such an API (the simulator's REST side): TLS 1.2 or later, no client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = STREAMING_TLS_VERSION
    context.load_cert_chain(certfile=cert_chain, keyfile=key)
    return context
