"""Prometheus metrics of the broker (IP_137): connections, sources with their depths and limits
(IP_032), message counters (rates come from Prometheus' rate()), accepted messages per message type
and peer, routing latency (IP_012), the durable store, warning and error log records (IP_138) and
process vitals. The alert rules and dashboard in ``deploy/monitoring/`` read these names.

Read at scrape time from the broker's own counters (a custom collector), so the hot path
pays nothing for metrics.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from interchange.broker.observer import LATENCY_BUCKETS

if TYPE_CHECKING:
    from interchange.broker.router import BrokerCore
    from interchange.broker.server import BrokerServer


class BrokerCollector:
    """A prometheus-client collector reading one broker's state."""

    def __init__(self, core: "BrokerCore", server: "BrokerServer") -> None:
        self._core = core
        self._server = server

    def collect(self) -> Iterator[Metric]:
        core, obs = self._core, self._core.observer
        yield GaugeMetricFamily("interchange_connections", "Open AMQP connections", value=len(self._server.connections))
        handshakes = self._server.handshakes
        yield GaugeMetricFamily("interchange_handshakes_waiting", "Arriving connections whose TLS handshake "
                                "step waits for its turn (interchange.broker.handshake_queue)", value=len(handshakes))
        yield GaugeMetricFamily("interchange_handshakes_waiting_max", "The most arriving connections that have "
                                "waited at once for a TLS handshake step", value=handshakes.most_waiting)
        yield CounterMetricFamily("interchange_handshake_steps", "TLS handshake steps run", value=handshakes.stepped)
        yield CounterMetricFamily("interchange_handshake_paced_turns", "Handshake turns that waited for the "
                                  "handshake CPU budget (broker.limits.handshake_cpu_share)",
                                  value=handshakes.paced_turns)
        yield CounterMetricFamily("interchange_handshake_rescued_turns", "TLS handshake steps run on the rescue thread "
                                  "because the low-priority worker got no CPU (broker.limits.handshake_thread)",
                                  value=handshakes.rescued_turns)
        yield GaugeMetricFamily("interchange_sources", "Number of sources (message queues)", value=len(core.sources))
        yield GaugeMetricFamily("interchange_targets", "Number of targets", value=len(core.addresses.targets))
        yield from self._sources()
        yield CounterMetricFamily("interchange_messages_received", "Messages accepted from publishers",
                                  value=obs.received_count)
        by_type = CounterMetricFamily("interchange_messages_received_by_type", "Messages accepted, per messageType "
                                      "and peer (the publishing actor, or the neighbour they were imported from)",
                                      labels=["message_type", "peer", "origin"])
        for (message_type, peer, federated), count in list(obs.received_by.items()):
            by_type.add_metric([str(message_type), peer, "federation" if federated else "local"], count)
        yield by_type
        yield CounterMetricFamily("interchange_messages_rejected", "Malformed messages rejected (IP_016)",
                                  value=obs.rejected_count)
        yield CounterMetricFamily("interchange_messages_routed", "Messages routed to at least one source",
                                  value=obs.routed_count)
        yield CounterMetricFamily("interchange_messages_unroutable", "Messages no source wanted",
                                  value=obs.unroutable)
        yield CounterMetricFamily("interchange_messages_expired", "Messages dropped on TTL expiry (IP_033)",
                                  value=obs.expired_count)
        hop_dropped = CounterMetricFamily("interchange_messages_hop_dropped", "Imported messages dropped by loop "
                                          "prevention (IP_109): looped back or over the hop limit", labels=["reason"])
        for reason, count in obs.hop_dropped_count.items():
            hop_dropped.add_metric([reason], count)
        yield hop_dropped
        yield CounterMetricFamily("interchange_messages_duplicate_dropped", "Second copies of imported messages "
                                  "kept from a source (multi-hop route changes)", value=obs.duplicate_dropped_count)
        yield CounterMetricFamily("interchange_messages_delivered", "Messages handed to consumers",
                                  value=sum(s.delivered for s in core.sources.values()))
        budget = core.budget
        yield GaugeMetricFamily("interchange_memory_budget_used_bytes", "What all sources' buffers are counted "
                                "for (their messages' bytes and bookkeeping)", value=budget.used)
        yield GaugeMetricFamily("interchange_memory_budget_bytes", "The node's budget across sources (this "
                                "process's share)", value=budget.limit)
        yield CounterMetricFamily("interchange_memory_budget_evicted", "Messages the fullest sources evicted "
                                  "because all together held more than the budget", value=budget.evicted)
        yield from self._durable()
        cumulative, buckets = 0, []
        for bound, count in zip(LATENCY_BUCKETS, obs.latency_counts):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        cumulative += obs.latency_counts[-1]
        buckets.append(("+Inf", cumulative))
        yield HistogramMetricFamily("interchange_routing_latency_seconds",
                                    "Time from arrival to availability on the sources (IP_012)",
                                    buckets=buckets, sum_value=obs.latency_sum)


    def _sources(self) -> Iterator[Metric]:
        """Per source: depth, limits (IP_032), consumers and its counters."""
        def family(kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, text: str) -> Metric:
            return kind(name, text, labels=["source"])
        families = (
            (family(GaugeMetricFamily, "interchange_source_depth", "Messages buffered in a source"),
             lambda s: s.depth),
            (family(GaugeMetricFamily, "interchange_source_bytes", "Bytes buffered in a source"),
             lambda s: s.depth_bytes),
            (family(GaugeMetricFamily, "interchange_source_max_messages", "A source's buffer limit in messages "
                    "(IP_032: the oldest is dropped beyond it)"), lambda s: s.spec.max_messages),
            (family(GaugeMetricFamily, "interchange_source_max_bytes", "A source's buffer limit in bytes"),
             lambda s: s.max_bytes),
            (family(GaugeMetricFamily, "interchange_source_consumers", "Consumer links on a source"),
             lambda s: len(s.links)),
            (family(CounterMetricFamily, "interchange_source_dropped", "Messages dropped because a source was full"),
             lambda s: s.dropped),
            (family(CounterMetricFamily, "interchange_source_delivered", "Messages a source handed to consumers"),
             lambda s: s.delivered),
            (family(CounterMetricFamily, "interchange_source_expired", "Messages that expired in a source "
                    "undelivered (IP_033)"), lambda s: s.expired),
        )
        sources = list(self._core.sources.items())
        for metric, read in families:
            for address, source in sources:
                metric.add_metric([address], read(source))  # type: ignore[attr-defined]
            yield metric

    def _durable(self) -> Iterator[Metric]:
        """Durable messages, when the store is on."""
        durability = self._core.durability
        if durability is None:
            return
        yield CounterMetricFamily("interchange_durable_stored", "Durable messages stored (accepted once fsync'd)",
                                  value=durability.stored)
        yield GaugeMetricFamily("interchange_durable_live", "Durable messages some source still holds (they come "
                                "back after a restart)", value=durability.store_live())
        yield GaugeMetricFamily("interchange_durable_recovered", "Durable messages recovered when this broker "
                                "process started", value=durability.recovered)
        yield CounterMetricFamily("interchange_durable_refused", "Durable messages refused because the store could "
                                  "not write (full or failing disk)", value=durability.refused)
        fault = durability.store.fault
        yield GaugeMetricFamily("interchange_durable_store_writable", "1 while the durable store can write; 0 while "
                                "its disk is full or failing (store_write_failed in the log)", value=int(fault is None))
        yield CounterMetricFamily("interchange_durable_duplicate_imports", "Imported durable messages a neighbour "
                                  "sent again after a restart (at-least-once)", value=durability.duplicate_imports)


class CountedLog(Protocol):
    """What :class:`LogCollector` reads of the log (:class:`~interchange.broker.message_log.JsonLog`)."""

    @property
    def counts(self) -> dict[tuple[str, str], int]: ...


class LogCollector:
    """Warning and error log records (IP_137/138: errors are monitored), counted whatever level the
    file is written at: per level (both always present, from 0, so that the first error is an
    increase an alert sees) and per level and event (tls_refused present from 0 too: the TLS
    refusal alert's rate)."""

    #: (level, event) exported from 0 before the first record
    SEEDED = (("warning", "tls_refused"),)

    def __init__(self, log: CountedLog) -> None:
        self._log = log

    def collect(self) -> Iterator[Metric]:
        counts = dict.fromkeys(self.SEEDED, 0) | self._log.counts
        per_level = CounterMetricFamily("interchange_log_level_records", "Warning and error log records, by level",
                                        labels=["level"])
        for level in ("warning", "error"):
            per_level.add_metric([level], sum(n for (lvl, _), n in counts.items() if lvl == level))
        yield per_level
        records = CounterMetricFamily("interchange_log_records", "Warning and error log records, by level and event",
                                      labels=["level", "event"])
        for (level, event), count in sorted(counts.items()):
            records.add_metric([level, event], count)
        yield records


def broker_registry(core: "BrokerCore", server: "BrokerServer", log: CountedLog | None = None) -> CollectorRegistry:
    """A registry with the broker's metrics, the log's record counts and the process vitals (CPU,
    memory, fds)."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(core, server))
    if log is not None:
        registry.register(LogCollector(log))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
