"""Chapter 4.3.2 checks: the target's DNS records, as discovery (IP_073/089) will see them.

IP_086: ``_ixc._tcp.<domain>`` has an SRV record whose target is the interchange (and whose port
is the II's); IP_085/087: that target has an A record (and, when ``--address`` is given, it is
that address); IP_125: the certificate the II presents names that SRV target. Lookups use
dnspython against ``--dns-server`` (default: the system's resolver), bounded by a lifetime.
"""
from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.resolver

from interop_kit.checks_tls import certificate_names, leaf_certificate
from interop_kit.model import Check, CheckFailed, CheckSkipped, Findings, Target

LOOKUP_LIFETIME_S = 5.0


def _resolver(target: Target) -> dns.asyncresolver.Resolver:
    if target.dns_server is None:
        return dns.asyncresolver.Resolver()
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [target.dns_server]
    resolver.port = target.dns_port
    return resolver


async def _lookup(target: Target, name: str, rdtype: str) -> list[str]:
    try:
        answer = await _resolver(target).resolve(name, rdtype, lifetime=LOOKUP_LIFETIME_S)
    except dns.resolver.NXDOMAIN:
        raise CheckFailed(f"{name} {rdtype}: NXDOMAIN") from None
    except dns.resolver.NoAnswer:
        raise CheckFailed(f"{name} has no {rdtype} record") from None
    except dns.exception.DNSException as exc:
        raise CheckFailed(f"{name} {rdtype}: {type(exc).__name__}: {exc}") from None
    return [rdata.to_text() for rdata in answer]


async def _srv(target: Target, findings: Findings) -> tuple[str, int]:
    """(target, port) of the SRV record naming the interchange; cached."""
    if target.domain is None:
        raise CheckSkipped("needs --domain (the trusted domain holding the _ixc._tcp SRV records)")
    if "srv" not in findings.values:
        name = f"_ixc._tcp.{target.domain}"
        records = [r.split() for r in await _lookup(target, name, "SRV")]
        ours = [(t.rstrip(".").lower(), int(port)) for _, _, port, t in records if t.rstrip(".").lower() == target.name.lower()]
        if not ours:
            raise CheckFailed(f"{name} SRV targets {[t for *_, t in records]} do not include {target.name}")
        findings.values["srv"] = ours[0]
    found: tuple[str, int] = findings.values["srv"]
    return found


async def srv_record(target: Target, findings: Findings) -> str:
    srv_target, port = await _srv(target, findings)
    if port != target.ii_port:
        raise CheckFailed(f"SRV record points at port {port}, the II listens on {target.ii_port}")
    return f"_ixc._tcp.{target.domain} -> {srv_target}:{port}"


async def a_record(target: Target, findings: Findings) -> str:
    srv_target, _ = await _srv(target, findings)
    addresses = await _lookup(target, srv_target, "A")
    if target.address is not None and target.address not in addresses:
        raise CheckFailed(f"{srv_target} A {addresses}, but the interchange is reached at {target.address}")
    return f"{srv_target} A {', '.join(addresses)}"


async def certificate_matches(target: Target, findings: Findings) -> str:
    srv_target, _ = await _srv(target, findings)
    cns, _ = certificate_names(await leaf_certificate("ii", target, findings))
    if [cn.lower() for cn in cns] != [srv_target]:
        raise CheckFailed(f"the II's certificate CN {cns} is not the SRV target {srv_target}")
    return f"II certificate CN = SRV target {srv_target}"


def dns_checks() -> list[Check]:
    return [
        Check("dns.srv", "IP_086", "SRV record _ixc._tcp.<domain> names the interchange and its II port", srv_record, "dns"),
        Check("dns.a", "IP_087", "the SRV target has an A record (the address the interchange is reached at)", a_record, "dns"),
        Check("dns.cert-matches-srv", "IP_125", "the II certificate's CN is the SRV target", certificate_matches, "dns"),
    ]

