"""Every check of the kit, in the order it runs: TLS, DNS, II, BI, then the II's closing DELETE."""
from __future__ import annotations

from interop_kit.checks_bi import bi_checks
from interop_kit.checks_dns import dns_checks
from interop_kit.checks_ii import ii_checks, ii_closing_checks
from interop_kit.checks_tls import tls_checks
from interop_kit.model import Check


def all_checks() -> list[Check]:
    return [*tls_checks("ii"), *tls_checks("bi"), *dns_checks(), *ii_checks(), *bi_checks(), *ii_closing_checks()]
