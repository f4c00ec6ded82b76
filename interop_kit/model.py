"""What the kit works on: the target, one check's definition and one check's result.

A :class:`Target` is what an operator gives: the interchange's name (its certificate CN and SRV
target, IP_125), its II base URL and BI endpoint, the trust bundle the target's certificate is
verified against (the common root, IP_115) and a neighbour-like client identity; optionally the DNS
domain and server (IP_086), a test PKI the target trusts for client certificates (``--pki``,
prepared before the run), an actor identity (IP_126) and a delivery endpoint for BI traffic.
"""
from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from certs.tls import TlsFiles


class Outcome(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class CheckFailed(Exception):
    """A check's assertion did not hold; the message says what was expected and what came."""


class CheckSkipped(Exception):
    """A check cannot run against this target (missing input); the message says why."""


@dataclass(frozen=True)
class Delivery:
    """Where and as whom the kit publishes (a delivery's target address at the BI, IP_020)."""

    identity: TlsFiles
    address: str
    host: str
    port: int


@dataclass(frozen=True)
class Traffic:
    """The subscription selector and the two messages' application properties (Table 1):
    ``matching`` must reach a subscriber of ``selector``, ``matching | mismatching`` must not."""

    selector: str
    matching: dict[str, Any]
    mismatching: dict[str, Any]


@dataclass(frozen=True)
class Target:
    """The interchange under test and the kit's own credentials."""

    name: str  #: the interchange's FQDN: certificate CN = SRV target (IP_125)
    ii_url: str  #: II base URL, https://host:port[/base]
    bi_host: str
    bi_port: int
    identity: TlsFiles  #: a neighbour-like client certificate (an SRV target the target knows)
    address: str | None = None  #: connect here instead of resolving the URL's host
    domain: str | None = None  #: trusted domain holding _ixc._tcp SRV records (IP_086)
    dns_server: str | None = None
    dns_port: int = 53
    pki: Path | None = None  #: a test PKI the target trusts, readied by `interop prepare`: the refusal checks
    actor: TlsFiles | None = None  #: a client certificate that is not an SRV target (IP_126)
    delivery: Delivery | None = None
    traffic: Traffic | None = None

    @property
    def ii_host(self) -> str:
        return urlsplit(self.ii_url).hostname or self.name

    @property
    def ii_port(self) -> int:
        return urlsplit(self.ii_url).port or 443

    @property
    def ii_base_path(self) -> str:
        return urlsplit(self.ii_url).path.rstrip("/")

    def connect_host(self, host: str) -> str:
        """Where to open a socket for ``host``: the ``address`` override, else the host itself."""
        return self.address or host


@dataclass
class Findings:
    """What earlier checks learned that later ones use (e.g. a CREATED subscription's endpoint)."""

    workdir: Path  #: scratch files of this run (root-only bundles, test certificates)
    values: dict[str, Any] = field(default_factory=dict)


CheckFunction = Callable[[Target, Findings], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    """One conformance check: ``run`` returns a pass message or raises CheckFailed/CheckSkipped."""

    name: str
    requirement: str  #: e.g. "IP_054"
    summary: str
    run: CheckFunction
    group: str = ""


class CheckResult(BaseModel):
    """One check's outcome, as written to the JSON report."""

    model_config = ConfigDict(extra="forbid")

    name: str
    group: str
    requirement: str
    summary: str
    outcome: Outcome
    message: str
    duration_s: float


class Report(BaseModel):
    """The whole run: target, results and counts."""

    model_config = ConfigDict(extra="forbid")

    target: str
    ii_url: str
    bi_endpoint: str
    started: str
    duration_s: float
    results: list[CheckResult]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for result in self.results if result.outcome is outcome)

    @property
    def failed(self) -> bool:
        return self.count(Outcome.FAILED) > 0
