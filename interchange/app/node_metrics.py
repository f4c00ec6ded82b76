"""Node-level Prometheus metrics beside each broker process's own (IP_137: application vitals, and
what the alert rules in ``deploy/monitoring/`` need).

``interchange_process_info``; the data directory's free and total bytes; the expiry of the node's
certificate chain, of every peer on this process's BI and (node process) of every neighbour
behind a federation link; the CRLs' lastUpdate and nextUpdate (IP_051); in the node process, the
II's federation state from a :class:`~interchange.app.federation_view.FederationSnapshot`. Files
are parsed again only when their size or mtime changes. The metrics and their labels:
docs/monitoring.md ("What is scraped").
"""
from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID
from prometheus_client.core import GaugeMetricFamily, Metric

from interchange.app.federation_view import FederationSnapshot

#: parsed peer certificates kept (a node has a few hundred peers at most)
PEER_CACHE = 4096


def _cn(name: x509.Name) -> str:
    names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else name.rfc4514_string()


@dataclass(frozen=True)
class CertificateFacts:
    subject: str
    not_after: float  #: Unix seconds


@dataclass(frozen=True)
class CrlFacts:
    issuer: str
    last_update: float
    next_update: float | None


def scrape_targets(node: str, host: str, admin_port: int, processes: int) -> list[dict[str, object]]:
    """Prometheus file-based service discovery entries: broker process k's admin endpoint is on
    ``admin_port + k``, labelled ``node`` and ``process`` (the rules and the dashboard group by them)."""
    address = f"[{host}]" if ":" in host else host
    return [{"targets": [f"{address}:{admin_port + k}"], "labels": {"node": node, "process": str(k)}}
            for k in range(processes)]


class ParsedFiles:
    """PEM certificate chains and CRL files, parsed again only when the file changed."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[tuple[int, int], object]] = {}

    def _load(self, path: Path, parse: Callable[[bytes], object]) -> object:
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        seen = self._seen.get(path)
        if seen is None or seen[0] != stamp:
            try:
                seen = (stamp, parse(path.read_bytes()))
            except (OSError, ValueError):
                seen = (stamp, None)
            self._seen[path] = seen
        return seen[1]

    def chain(self, path: Path) -> list[CertificateFacts]:
        facts = self._load(path, lambda data: [CertificateFacts(_cn(c.subject), c.not_valid_after_utc.timestamp())
                                               for c in x509.load_pem_x509_certificates(data)])
        return facts if isinstance(facts, list) else []

    def crl(self, path: Path) -> CrlFacts | None:
        def parse(data: bytes) -> CrlFacts:
            crl = (x509.load_pem_x509_crl(data) if data.lstrip().startswith(b"-----")
                   else x509.load_der_x509_crl(data))
            next_update = crl.next_update_utc
            return CrlFacts(_cn(crl.issuer), crl.last_update_utc.timestamp(),
                            next_update.timestamp() if next_update is not None else None)
        facts = self._load(path, parse)
        return facts if isinstance(facts, CrlFacts) else None


class PeerCertificates:
    """Subject and expiry of peer certificates (DER), parsed once each."""

    def __init__(self) -> None:
        self._parsed: dict[bytes, CertificateFacts | None] = {}

    def facts(self, der: bytes) -> CertificateFacts | None:
        if der not in self._parsed:
            if len(self._parsed) >= PEER_CACHE:
                self._parsed.clear()
            try:
                cert = x509.load_der_x509_certificate(der)
                self._parsed[der] = CertificateFacts(_cn(cert.subject), cert.not_valid_after_utc.timestamp())
            except ValueError:
                self._parsed[der] = None
        return self._parsed[der]


@dataclass(frozen=True)
class TlsPaths:
    cert_chain: Path
    crls: tuple[Path, ...]


class NodeCollector:
    """One broker process's node-level metrics (every process: each has its own BI peers)."""

    def __init__(self, node: str, process: int, processes: int, data_dir: Path, tls: Callable[[], TlsPaths | None],
                 bi_peers: Callable[[], Iterable[bytes]]) -> None:
        self._labels = [node, str(process), str(processes)]
        self._data_dir = data_dir
        self._tls = tls
        self._bi_peers = bi_peers
        self._files = ParsedFiles()
        self._peers = PeerCertificates()

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("interchange_process_info", "This broker process: its interchange's name, its "
                                 "index k and the node's process count (1; the scrape target adds node, process)",
                                 labels=["interchange", "broker_process", "processes"])
        info.add_metric(self._labels, 1)
        yield info
        yield from self._disk()
        yield from self._certificates()

    def _disk(self) -> Iterator[Metric]:
        try:
            vfs = os.statvfs(self._data_dir)
        except OSError:
            return  # not there (yet): the DataDirMissing case is the store's and the II's to report
        free = GaugeMetricFamily("interchange_data_dir_free_bytes", "Bytes available to the node in its data "
                                 "directory's file system (durable store, II database, logs)", labels=["path"])
        free.add_metric([str(self._data_dir)], vfs.f_bavail * vfs.f_frsize)
        size = GaugeMetricFamily("interchange_data_dir_size_bytes", "Size of the data directory's file system",
                                 labels=["path"])
        size.add_metric([str(self._data_dir)], vfs.f_blocks * vfs.f_frsize)
        yield free
        yield size

    def _certificates(self) -> Iterator[Metric]:
        paths = self._tls()
        own = GaugeMetricFamily("interchange_tls_certificate_expiry_timestamp_seconds", "notAfter of each "
                                "certificate in the node's own chain file (position 0: the node's)",
                                labels=["subject", "position"])
        last = GaugeMetricFamily("interchange_tls_crl_last_update_timestamp_seconds", "lastUpdate of each CRL the "
                                 "node checks peers against", labels=["issuer", "file"])
        next_ = GaugeMetricFamily("interchange_tls_crl_next_update_timestamp_seconds", "nextUpdate of each CRL "
                                  "(past it, the CRL is stale: fetch a new one)", labels=["issuer", "file"])
        if paths is not None:
            for position, cert in enumerate(self._files.chain(paths.cert_chain)):
                own.add_metric([cert.subject, str(position)], cert.not_after)
            for path in paths.crls:
                crl = self._files.crl(path)
                if crl is not None:
                    last.add_metric([crl.issuer, path.name], crl.last_update)
                    if crl.next_update is not None:
                        next_.add_metric([crl.issuer, path.name], crl.next_update)
        peers = GaugeMetricFamily("interchange_tls_peer_certificate_expiry_timestamp_seconds", "notAfter of the "
                                  "certificate of each peer connected to this process's BI (actors, neighbours)",
                                  labels=["peer"])
        soonest: dict[str, float] = {}
        for der in self._bi_peers():
            facts = self._peers.facts(der)
            if facts is not None:
                soonest[facts.subject] = min(facts.not_after, soonest.get(facts.subject, facts.not_after))
        for subject, not_after in sorted(soonest.items()):
            peers.add_metric([subject], not_after)
        yield from (own, last, next_, peers)


class FederationCollector:
    """The II's federation state, from the snapshot :meth:`refresh` took (the admin endpoint refreshes
    it before each scrape: the store is read asynchronously, a collector cannot await)."""

    def __init__(self, take: Callable[[], Awaitable[FederationSnapshot]]) -> None:
        self._take = take
        self.snapshot: FederationSnapshot | None = None
        self._peers = PeerCertificates()

    async def refresh(self) -> FederationSnapshot:
        self.snapshot = await self._take()
        return self.snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot
        if snapshot is None:
            return
        bridges = GaugeMetricFamily("interchange_bridge_link_up", "1 while a bridge's link is up (tlex-session: "
                                    "the TLEX stream; rabbitmq: IF2's RabbitMQ; bi: the bridge's AMQP link to the "
                                    "node)", labels=["bridge", "link"])
        for b in snapshot.bridges:
            bridges.add_metric([b.bridge, b.link], int(b.connected))
        yield bridges
        if snapshot.has_ii:
            yield from self._ii(snapshot)

    def _ii(self, snapshot: FederationSnapshot) -> Iterator[Metric]:
        neighbours = GaugeMetricFamily("interchange_ii_neighbour_reachable", "1 if the last capability exchange "
                                       "with a neighbour succeeded, 0 if it failed (absent before the first)",
                                       labels=["neighbour"])
        for n in snapshot.neighbours:
            if n.reachable is not None:
                neighbours.add_metric([n.name], int(n.reachable))
        yield neighbours
        yield GaugeMetricFamily("interchange_ii_neighbours", "Neighbours the II knows", value=len(snapshot.neighbours))
        status = GaugeMetricFamily("interchange_ii_subscription_status", "1 for each subscription with a neighbour, "
                                   "labelled with its status (outgoing: ours at the neighbour; incoming: theirs here)",
                                   labels=["direction", "neighbour", "id", "status"])
        for s in (*snapshot.outgoing, *snapshot.incoming):
            status.add_metric([s.direction, s.neighbour, s.id, s.status], 1)
        yield status
        links = GaugeMetricFamily("interchange_ii_federation_link_up", "1 while a federation link (a receiver on a "
                                  "neighbour's source) is connected", labels=["neighbour", "source"])
        for link in (link for s in snapshot.outgoing for link in s.links):
            links.add_metric([link.neighbour, link.source], int(link.connected))
        yield links
        actors = GaugeMetricFamily("interchange_ii_actor_endpoints", "Local actors' deliveries and subscriptions, "
                                   "by kind and status", labels=["kind", "status"])
        counted: dict[tuple[str, str], int] = {}
        for d in snapshot.actors:
            counted[(d.kind, d.status)] = counted.get((d.kind, d.status), 0) + 1
        for (kind, state), count in sorted(counted.items()):
            actors.add_metric([kind, state], count)
        yield actors
        expiry = GaugeMetricFamily("interchange_tls_neighbour_certificate_expiry_timestamp_seconds", "notAfter of the "
                                   "server certificate of each neighbour behind an open federation link",
                                   labels=["neighbour"])
        soonest: dict[str, float] = {}
        for neighbour, _source, der in snapshot.neighbour_certificates:
            facts = self._peers.facts(der)
            if facts is not None:
                soonest[neighbour] = min(facts.not_after, soonest.get(neighbour, facts.not_after))
        for neighbour, not_after in sorted(soonest.items()):
            expiry.add_metric([neighbour], not_after)
        yield expiry
