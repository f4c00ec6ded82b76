"""Chapter 5 checks, on the II (HTTPS) and the BI (AMQPS) endpoint alike.

IP_053 TLS 1.3 handshake with the kit's client certificate; IP_054 TLS 1.2 refused; IP_050 a
client without certificate refused; IP_057 the whole chain sent (verified against the root
alone); IP_051/IP_063 the leaf is an X.509 v3 certificate, currently valid, for at most a year;
IP_125 its CN (and SAN dNSName) is the interchange's SRV target name. With ``--pki``: IP_050/117
refusals of the client certificates :mod:`interop_kit.badcerts` prepared before the run. Every
connection verifies the target's certificate against ``--trust``. A refusal check is skipped, saying
why, when the control certificate is not accepted (the kit cannot verify the target, or the target
does not trust the PKI) or when the target's CRL is older than the newest revocation.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import partial

from cryptography import x509
from cryptography.x509.oid import NameOID

from certs.tls import TlsFiles, client_context
from interop_kit import badcerts
from interop_kit.model import Check, CheckFailed, CheckSkipped, Findings, Target
from interop_kit.probes import (
    AMQP_SASL_HEADER,
    Endpoint,
    ProbeResult,
    client_tls12,
    client_without_certificate,
    http_probe_request,
    probe,
    roots_only,
)

MAX_LIFETIME = timedelta(days=366)  # IP_051 "maximum one year" (a leap year has 366 days)


def endpoint(target: Target, interface: str) -> Endpoint:
    if interface == "ii":
        return Endpoint(target.connect_host(target.ii_host), target.ii_port, target.name,
                        http_probe_request(target.name, f"{target.ii_base_path}/"))
    return Endpoint(target.connect_host(target.bi_host), target.bi_port, target.name, AMQP_SASL_HEADER)


async def _handshake(interface: str, target: Target, findings: Findings, *, roots: bool = False) -> ProbeResult:
    """The kit's valid connection (verified against the trust bundle, or its roots alone);
    cached: several checks read its certificate."""
    key = f"handshake.{interface}.{'roots' if roots else 'bundle'}"
    if key not in findings.values:
        files = target.identity
        if roots:
            files = TlsFiles(files.cert_chain, files.key, roots_only(files.trust_bundle, findings.workdir)[0])
        findings.values[key] = await probe(endpoint(target, interface), client_context(files))
    result: ProbeResult = findings.values[key]
    return result


async def leaf_certificate(interface: str, target: Target, findings: Findings) -> x509.Certificate:
    """The server's certificate, fetched without the host-name check so that a wrong name can be
    reported as such (the chain is still verified); cached."""
    key = f"leaf.{interface}"
    if key not in findings.values:
        findings.values[key] = await probe(endpoint(target, interface),
                                           client_context(target.identity, check_hostname=False))
    result: ProbeResult = findings.values[key]
    leaf = result.leaf()
    if not result.handshake or leaf is None:
        raise CheckSkipped(f"no TLS 1.3 handshake with the {interface.upper()} ({result.error})")
    return leaf


async def tls13_handshake(interface: str, target: Target, findings: Findings) -> str:
    result = await _handshake(interface, target, findings)
    if not result.handshake:
        raise CheckFailed(f"TLS 1.3 handshake with the kit's certificate failed: {result.error}")
    if result.version != "TLSv1.3":
        raise CheckFailed(f"negotiated {result.version}, not TLSv1.3")
    if not result.accepted:
        raise CheckFailed(f"handshake done but the kit's valid client certificate was refused: {result.error}")
    return f"{result.version}, server verified as {target.name}, client certificate accepted"


async def tls12_refused(interface: str, target: Target, findings: Findings) -> str:
    files = target.identity
    result = await probe(endpoint(target, interface), client_tls12(files.cert_chain, files.key, files.trust_bundle))
    if result.handshake:
        raise CheckFailed(f"a TLS 1.2 client completed the handshake ({result.version}); earlier versions "
                          "than TLS 1.3 must not be supported")
    return f"TLS 1.2 refused: {result.error}"


async def client_certificate_required(interface: str, target: Target, findings: Findings) -> str:
    result = await probe(endpoint(target, interface), client_without_certificate(target.identity.trust_bundle))
    if result.accepted:
        raise CheckFailed(f"a client without certificate was served (answer {result.answer[:40]!r}); mutual "
                          "authentication requires the client certificate")
    return f"client without certificate refused: {result.error}"


async def chain_sent(interface: str, target: Target, findings: Findings) -> str:
    first = await _handshake(interface, target, findings)
    if not first.handshake:
        raise CheckSkipped(f"no TLS 1.3 handshake with the {interface.upper()} ({first.error}); see tls.{interface}.tls13")
    result = await _handshake(interface, target, findings, roots=True)
    if result.handshake:
        return "server certificate verified against the root alone: the intermediate was sent"
    if "certificate verify failed" in (result.error or "") or "CERTIFICATE_VERIFY_FAILED" in (result.error or ""):
        raise CheckFailed(f"the server's certificate does not verify against the root alone ({result.error}): "
                          "the whole chain (leaf + intermediate) must be sent")
    raise CheckFailed(f"with the trust bundle's roots alone the handshake failed: {result.error}")


async def certificate_lifetime(interface: str, target: Target, findings: Findings) -> str:
    leaf = await leaf_certificate(interface, target, findings)
    now = datetime.now(timezone.utc)
    if leaf.version is not x509.Version.v3:
        raise CheckFailed(f"certificate version {leaf.version.name}, IP_063 requires v3")
    start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    if not start <= now <= end:
        raise CheckFailed(f"certificate not valid now (valid {start:%Y-%m-%d} to {end:%Y-%m-%d})")
    if end - start > MAX_LIFETIME:
        raise CheckFailed(f"certificate valid for {(end - start).days} days; renewal at most every year (IP_051)")
    return f"v3, valid {(end - start).days} days, {(end - now).days} days left"


def certificate_names(leaf: x509.Certificate) -> tuple[list[str], list[str]]:
    """(CNs, SAN dNSNames) of ``leaf``."""
    cns = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        sans = []
    return cns, sans


async def cn_is_srv_target(interface: str, target: Target, findings: Findings) -> str:
    leaf = await leaf_certificate(interface, target, findings)
    cns, sans = certificate_names(leaf)
    if [cn.lower() for cn in cns] != [target.name.lower()]:
        raise CheckFailed(f"certificate CN {cns} is not the interchange's SRV target {target.name!r}")
    if target.name.lower() not in (san.lower() for san in sans):
        raise CheckFailed(f"certificate SAN dNSNames {sans} do not include {target.name!r}")
    return f"CN = SAN = {target.name}"


def _server_unverified(error: str | None) -> bool:
    """Whether a failed handshake failed on the kit's side: the target's certificate did not verify."""
    return any(mark in (error or "") for mark in ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed",
                                                   "Hostname mismatch", "IP address mismatch"))


def _control_problem(interface: str, target: Target, prepared: badcerts.Prepared, result: ProbeResult) -> str:
    """Why the control was not accepted, as a skip message: the refusals cannot be judged then."""
    label = interface.upper()
    if not result.handshake and _server_unverified(result.error):
        return (f"the kit could not verify the {label}'s certificate against --trust ({result.error}); "
                f"see tls.{interface}.tls13")
    if not result.handshake:
        return f"no TLS handshake with the {label} ({result.error}); see tls.{interface}.tls13"
    control = prepared.identities["valid"]
    return (f"the control certificate {control.cn!r} (CA {prepared.ca!r} of --pki {target.pki}) is refused too "
            f"({result.error}): the refusal checks need a target that accepts client certificates of that PKI; "
            f"install {badcerts.prepared_path(target, prepared.root)} in its client trust list "
            "(see `interchange interop prepare --help`)")


async def _control(interface: str, target: Target, findings: Findings) -> tuple[badcerts.Prepared, dict[str, TlsFiles]]:
    """The prepared identities, once the control certificate was accepted (probed once per interface)."""
    prepared, identities = badcerts.identities_for(target, findings)
    key = f"control.{interface}"
    if key not in findings.values:
        findings.values[key] = await probe(endpoint(target, interface), client_context(identities["valid"]))
    control: ProbeResult = findings.values[key]
    if not control.accepted:
        raise CheckSkipped(_control_problem(interface, target, prepared, control))
    return prepared, identities


def _revocation(entry: badcerts.RevokedFile) -> str:
    return (f"revoked at {entry.revoked_at:%Y-%m-%d %H:%M:%S} UTC (serial {entry.serial:#x}, listed from CRL "
            f"number {entry.crl_number} of CA {entry.ca!r} on)")


async def refused_revoked(interface: str, target: Target, findings: Findings) -> str:
    """The newest revoked certificate is refused. If it is accepted while an earlier revoked one is
    refused, the target checks revocation against a CRL older than the newest revocation: the check
    cannot judge it then (skipped, saying which CRL to install)."""
    prepared, _ = await _control(interface, target, findings)
    where = endpoint(target, interface)
    newest = prepared.newest_revoked()
    result = await probe(where, client_context(badcerts.files(target, newest)))
    if not result.accepted:
        return f"client certificate {_revocation(newest)} refused: {result.error}"
    crl = badcerts.prepared_path(target, f"install/crl/{newest.ca}.pem")
    now = datetime.now(timezone.utc)
    for earlier in reversed([entry for entry in prepared.revoked[:-1] if entry.not_after > now]):
        if not (await probe(where, client_context(badcerts.files(target, earlier)))).accepted:
            raise CheckSkipped(f"the target refuses the certificate {_revocation(earlier)} but accepts the one "
                               f"{_revocation(newest)}: the CRL it loaded is older than that revocation; install "
                               f"{crl} on it and run again")
    raise CheckFailed(f"a client certificate {_revocation(newest)} was accepted: the target does not check "
                      f"revocation, or the CRL it loaded is older than that revocation ({crl}, from "
                      "`interchange interop prepare`, must be installed on it before the run)")


async def refused(kind: str, interface: str, target: Target, findings: Findings) -> str:
    _, identities = await _control(interface, target, findings)
    result = await probe(endpoint(target, interface), client_context(identities[kind]))
    if result.accepted:
        raise CheckFailed(f"a client certificate {REFUSALS[kind][1]} was accepted")
    return f"client certificate {REFUSALS[kind][1]} refused: {result.error}"


#: kind -> (requirement, what the certificate is)
REFUSALS = {
    "foreign-root": ("IP_115", "issued under a foreign root"),
    "expired": ("IP_050", "expired"),
    "not-yet-valid": ("IP_050", "not yet valid"),
    "revoked": ("IP_050", "revoked in a CRL the target loaded before the run"),
    "wrong-eku": ("IP_050", "without clientAuth extended key usage"),
    "missing-intermediate": ("IP_117", "sent without its intermediate"),
}


def tls_checks(interface: str) -> list[Check]:
    """The chapter 5 checks of one interface (``ii`` or ``bi``)."""
    label = "II (HTTPS)" if interface == "ii" else "BI (AMQPS)"
    table = [
        ("tls13", "IP_053", "TLS 1.3 handshake with mutual authentication", tls13_handshake),
        ("tls12-refused", "IP_054", "TLS 1.2 is refused", tls12_refused),
        ("client-cert-required", "IP_050", "a client without certificate is refused", client_certificate_required),
        ("chain-sent", "IP_057", "the whole certificate chain is sent", chain_sent),
        ("cert-lifetime", "IP_051", "X.509 v3 certificate, currently valid, at most one year", certificate_lifetime),
        ("cn-is-srv-target", "IP_125", "certificate CN is the SRV target name", cn_is_srv_target),
    ]
    checks = [Check(f"tls.{interface}.{name}", requirement, f"{label}: {summary}", partial(run, interface), "tls")
              for name, requirement, summary, run in table]
    checks += [Check(f"tls.{interface}.refuse-{kind}", REFUSALS[kind][0],
                     f"{label}: a client certificate {REFUSALS[kind][1]} is refused (--pki)",
                     partial(refused_revoked, interface) if kind == "revoked" else partial(refused, kind, interface),
                     "tls") for kind in badcerts.KINDS]
    return checks
