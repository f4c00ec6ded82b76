"""Interchange discovery over DNS SRV records (IP_070-073, IP_085-089, IP_125/126).

Every trusted domain (IP_088) is asked for the SRV records of the symbolic name
IXC, ``_ixc._tcp.<domain>`` (IP_086). Each SRV target is a neighbour's name, which
is also its A record (IP_087) and its certificate Common Name (IP_125); the SRV
port is its control-channel (HTTPS) port (IP_090). The lookup repeats at least
every 12 hours (IP_089).

The parse of DNS answers into :class:`Neighbour` values and the merge of a run into
the current neighbour set are pure functions; :class:`Discovery` does the I/O with
dnspython's asyncio resolver pointed at a configured server address and port.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import dns.asyncresolver
import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ii_api.peers.doors import DiscoveryListener

log = logging.getLogger(__name__)

IXC_SERVICE = "_ixc._tcp"
"""IP_086: the SRV owner name prefix of the symbolic name IXC."""

MAX_INTERVAL_S = 12 * 3600.0
"""IP_089: the next lookup is due no later than 12 hours after the previous one."""

DEFAULT_INTERVAL_S = 3600.0


# --------------------------------------------------------------------------- values

@dataclass(frozen=True)
class Neighbour:
    """Another interchange entity found in DNS.

    ``name`` is the SRV target (IP_087, no trailing dot, lower case) and so the
    Common Name its certificate must carry (IP_125); ``host`` is the IPv4 address of
    its A record (IP_085); ``port`` is the control-channel port from the SRV record.
    """

    name: str
    host: str
    port: int
    domain: str
    priority: int = 0
    weight: int = 0


@dataclass(frozen=True)
class SrvTarget:
    """One SRV record of ``_ixc._tcp.<domain>``, target normalised."""

    name: str
    port: int
    priority: int
    weight: int


@dataclass(frozen=True)
class DiscoveryResult:
    """The outcome of one lookup round over all trusted domains.

    ``neighbours`` holds what this round found; ``errors`` one readable line per
    problem. ``unsettled_domains`` / ``unsettled_names`` are domains and targets
    whose lookup failed for a reason that may pass (timeout, server failure): DNS
    gave no verdict on them, so :func:`merge_neighbours` keeps what was known.
    """

    neighbours: list[Neighbour] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unsettled_domains: frozenset[str] = frozenset()
    unsettled_names: frozenset[str] = frozenset()


class DiscoveryConfig(BaseModel):
    """Where and how often to look (IP_073, IP_089).

    ``dns_server``/``dns_port`` name the resolver to ask (an IP address; tests point
    it at a DNS server on a loopback port). ``domains`` are the trusted domain names
    (IP_088). ``own_name`` is this node's SRV target, left out of the neighbours.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dns_server: str
    dns_port: int = Field(default=53, ge=1, le=65535)
    domains: tuple[str, ...] = Field(min_length=1)
    own_name: str | None = None
    interval_s: float = Field(default=DEFAULT_INTERVAL_S, gt=0, le=MAX_INTERVAL_S)
    timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("dns_server")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueError(f"dns_server must be an IP address, got {value!r}") from None

    @field_validator("domains")
    @classmethod
    def _domains(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        normalised = tuple(dict.fromkeys(normalise_name(d) for d in value))
        if any(not d for d in normalised):
            raise ValueError("a trusted domain name must not be empty")
        return normalised

    @field_validator("own_name")
    @classmethod
    def _own_name(cls, value: str | None) -> str | None:
        return None if value is None else normalise_name(value)


# --------------------------------------------------------------------------- pure part

def normalise_name(name: str | dns.name.Name) -> str:
    """A DNS name as text, lower case, without the trailing dot ("" for the root).

    Raises ValueError for text that is not a valid DNS name.
    """
    if isinstance(name, str):
        try:
            name = dns.name.from_text(name.strip())
        except dns.exception.DNSException as exc:
            raise ValueError(f"invalid DNS name {name!r}: {exc}") from None
    return name.to_text(omit_final_dot=True).lower().rstrip(".")


def srv_query_name(domain: str) -> str:
    """IP_086: the SRV owner name of the IXC service in ``domain`` (absolute)."""
    return f"{IXC_SERVICE}.{normalise_name(domain)}."


class SrvRecord(Protocol):
    """What :func:`parse_srv` reads of an SRV record (dnspython's ``SRV`` rdata has it)."""

    @property
    def target(self) -> str | dns.name.Name: ...
    @property
    def port(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def weight(self) -> int: ...


def parse_srv(records: Iterable[SrvRecord]) -> list[SrvTarget]:
    """SRV rdata (anything with ``target``, ``port``, ``priority``, ``weight``) to targets.

    A target of "." means the service is decidedly not offered (RFC 2782) and is
    dropped. When one target has several records, the preferred one is kept (lowest
    priority, then highest weight). The order is priority, then weight descending,
    then name, so the outcome does not depend on the order of the answer.
    """
    best: dict[str, SrvTarget] = {}
    for record in records:
        name = normalise_name(record.target)
        if not name:
            continue
        target = SrvTarget(name, int(record.port), int(record.priority), int(record.weight))
        current = best.get(name)
        if current is None or (target.priority, -target.weight) < (current.priority, -current.weight):
            best[name] = target
    return sorted(best.values(), key=lambda t: (t.priority, -t.weight, t.name))


def first_ipv4(addresses: Iterable[str]) -> str | None:
    """The first valid IPv4 address of an A answer, or None."""
    for text in addresses:
        try:
            return str(ipaddress.IPv4Address(str(text)))
        except ValueError:
            continue
    return None


def build_neighbours(domain: str, targets: Sequence[SrvTarget],
                     addresses: Mapping[str, str | None]) -> list[Neighbour]:
    """Neighbours of ``domain`` from its SRV targets and their A addresses (IP_085/087).

    Targets without an address in ``addresses`` are left out (the caller reports them).
    """
    return [Neighbour(t.name, host, t.port, domain, t.priority, t.weight)
            for t in targets if (host := addresses.get(t.name)) is not None]


def merge_neighbours(previous: Iterable[Neighbour], result: DiscoveryResult) -> tuple[Neighbour, ...]:
    """The current neighbour set after ``result``.

    What DNS answered replaces what was known; a neighbour DNS no longer lists is
    dropped (IP_126 then refuses its requests). Neighbours of an unsettled domain or
    with an unsettled A lookup are kept from ``previous`` so a DNS outage does not
    cut off the network. A name found in several domains keeps its first finding.
    """
    merged: dict[str, Neighbour] = {}
    for n in result.neighbours:
        merged.setdefault(n.name, n)
    for n in previous:
        if n.name not in merged and (n.domain in result.unsettled_domains or n.name in result.unsettled_names):
            merged[n.name] = n
    return tuple(sorted(merged.values(), key=lambda n: (n.domain, n.name)))


def neighbour_changes(known: Mapping[str, Neighbour],
                      current: Mapping[str, Neighbour]) -> tuple[frozenset[str], frozenset[str]]:
    """(names gone, names new or moved) from the neighbour set ``known`` to ``current``, by name."""
    gone = frozenset(known) - frozenset(current)
    changed = frozenset(name for name, n in current.items()
                        if name not in known or (known[name].host, known[name].port) != (n.host, n.port))
    return gone, changed


def departure_delay_s(departed_ms: int, grace_s: float, now_ms: int) -> float:
    """Seconds until the subscriptions of a neighbour that left DNS at ``departed_ms`` (ms since the
    epoch) expire, after ``grace_s``; 0 when they are due."""
    return max(0.0, (departed_ms - now_ms) / 1000 + grace_s)


def is_discovered(cn: str, neighbours: Iterable[Neighbour]) -> bool:
    """IP_125/126: whether certificate Common Name ``cn`` is the target of a discovered SRV record."""
    try:
        wanted = normalise_name(cn)
    except ValueError:
        return False
    return bool(wanted) and any(n.name == wanted for n in neighbours)


# --------------------------------------------------------------------------- I/O part

def make_resolver(config: DiscoveryConfig) -> dns.asyncresolver.Resolver:
    """A resolver asking only the configured server; no system configuration, no search list."""
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [config.dns_server]
    resolver.port = config.dns_port
    resolver.timeout = config.timeout_s
    resolver.lifetime = config.timeout_s
    return resolver


def _describe(exc: Exception) -> tuple[str, bool]:
    """A short reason for a failed lookup, and whether it is a verdict (NXDOMAIN, no data)."""
    if isinstance(exc, OSError):
        return f"network error: {exc}", False
    if isinstance(exc, dns.resolver.NXDOMAIN):
        return "NXDOMAIN", True
    if isinstance(exc, dns.resolver.NoAnswer):
        return "no records", True
    if isinstance(exc, dns.exception.Timeout):
        return "timed out", False
    if isinstance(exc, dns.resolver.NoNameservers):
        return "the DNS server failed or refused the query", False
    return f"{type(exc).__name__}: {exc}", False


@dataclass(frozen=True)
class _DomainOutcome:
    neighbours: list[Neighbour]
    errors: list[str]
    unsettled_domain: bool = False
    unsettled_names: frozenset[str] = frozenset()


class Discovery:
    """Runs the lookup once or periodically and keeps the current neighbour set.

    ``on_result`` (optional, a :class:`~ii_api.peers.doors.DiscoveryListener`) is awaited after
    each round with the round's result, e.g. to persist neighbours; its failures are logged, not
    raised into the loop.
    """

    def __init__(self, config: DiscoveryConfig, *,
                 on_result: DiscoveryListener | None = None) -> None:
        self.config = config
        self._resolver = make_resolver(config)
        self._on_result = on_result
        self._neighbours: tuple[Neighbour, ...] = ()
        self._last_result: DiscoveryResult | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()

    @property
    def neighbours(self) -> tuple[Neighbour, ...]:
        """The current neighbour set (merged over rounds, see :func:`merge_neighbours`)."""
        return self._neighbours

    @property
    def last_result(self) -> DiscoveryResult | None:
        return self._last_result

    def is_discovered(self, cn: str) -> bool:
        """IP_126: False for a Common Name that is not a target of a discovered SRV record."""
        return is_discovered(cn, self._neighbours)

    def trigger(self) -> None:
        """Ask :meth:`run_periodically` for a round now (e.g. on start-up or on demand)."""
        self._wake.set()

    async def run_once(self) -> DiscoveryResult:
        """IP_073/089: look up every trusted domain; one domain's failure spares the others."""
        async with self._lock:
            outcomes = await asyncio.gather(*(self._lookup_domain(d) for d in self.config.domains))
            result = DiscoveryResult(
                neighbours=[n for o in outcomes for n in o.neighbours],
                errors=[e for o in outcomes for e in o.errors],
                unsettled_domains=frozenset(d for d, o in zip(self.config.domains, outcomes) if o.unsettled_domain),
                unsettled_names=frozenset(name for o in outcomes for name in o.unsettled_names),
            )
            self._neighbours = merge_neighbours(self._neighbours, result)
            self._last_result = result
        if self._on_result is not None:
            try:
                await self._on_result(result)
            except Exception:
                log.exception("discovery: handling the result failed")
        return result

    async def run_periodically(self, interval_s: float | None = None) -> None:
        """Run a round now and then every ``interval_s`` (default from the config) until cancelled.

        IP_089: rounds are scheduled from the start of the previous one, so the gap
        never exceeds the interval (at most 12 h). :meth:`trigger` runs one at once.
        """
        interval = self.config.interval_s if interval_s is None else float(interval_s)
        if not 0 < interval <= MAX_INTERVAL_S:
            raise ValueError(f"interval_s must be in (0, {MAX_INTERVAL_S:g}] seconds (IP_089), got {interval}")
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            due = loop.time() + interval
            try:
                result = await self.run_once()
            except Exception:  # a bug must not end discovery for good (IP_089)
                log.exception("discovery: round failed")
            else:
                for error in result.errors:
                    log.warning("discovery: %s", error)
            remaining = due - loop.time()
            if remaining > 0 and not self._wake.is_set():
                try:
                    async with asyncio.timeout(remaining):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    async def _lookup_domain(self, domain: str) -> _DomainOutcome:
        qname = srv_query_name(domain)
        try:
            answer = await self._resolver.resolve(qname, dns.rdatatype.SRV, search=False)
        except (dns.exception.DNSException, OSError) as exc:
            reason, verdict = _describe(exc)
            return _DomainOutcome([], [f"{domain}: SRV {qname.rstrip('.')}: {reason}"], unsettled_domain=not verdict)
        own = self.config.own_name
        targets = [t for t in parse_srv(answer) if t.name != own]
        looked_up = await asyncio.gather(*(self._lookup_a(t.name) for t in targets))
        addresses = {t.name: host for t, (host, _, _) in zip(targets, looked_up)}
        errors = [f"{domain}: target {t.name}: {error}" for t, (_, error, _) in zip(targets, looked_up) if error]
        unsettled = frozenset(t.name for t, (_, _, verdict) in zip(targets, looked_up) if not verdict)
        return _DomainOutcome(build_neighbours(domain, targets, addresses), errors, unsettled_names=unsettled)

    async def _lookup_a(self, name: str) -> tuple[str | None, str | None, bool]:
        """(IPv4 address, error, whether DNS gave a verdict) for target ``name`` (IP_085/087)."""
        try:
            answer = await self._resolver.resolve(f"{name}.", dns.rdatatype.A, search=False)
        except (dns.exception.DNSException, OSError) as exc:
            reason, verdict = _describe(exc)
            return None, f"no A record ({reason})", verdict
        host = first_ipv4(r.to_text() for r in answer)
        if host is None:
            return None, "no usable A record", True
        return host, None, True
