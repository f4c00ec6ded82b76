"""Prometheus metrics of the broker (IP_137): connections, sources and their depths, message
counters (rates come from Prometheus' rate()), routing latency and process vitals.

Read at scrape time from the broker's own counters (a custom collector), so the hot path
pays nothing for metrics.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

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
        yield GaugeMetricFamily("interchange_sources", "Number of sources (message queues)", value=len(core.sources))
        yield GaugeMetricFamily("interchange_targets", "Number of targets", value=len(core.addresses.targets))
        depth = GaugeMetricFamily("interchange_source_depth", "Messages buffered in a source", labels=["source"])
        depth_bytes = GaugeMetricFamily("interchange_source_bytes", "Bytes buffered in a source", labels=["source"])
        dropped = CounterMetricFamily("interchange_source_dropped", "Messages dropped because a source was full",
                                      labels=["source"])
        consumers = GaugeMetricFamily("interchange_source_consumers", "Consumer links on a source", labels=["source"])
        for address, source in core.sources.items():
            depth.add_metric([address], source.depth)
            depth_bytes.add_metric([address], source.depth_bytes)
            dropped.add_metric([address], source.dropped)
            consumers.add_metric([address], len(source.links))
        yield depth
        yield depth_bytes
        yield dropped
        yield consumers
        yield CounterMetricFamily("interchange_messages_received", "Messages accepted from publishers",
                                  value=obs.received_count)
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


    def _durable(self) -> Iterator[Metric]:
        """Durable messages (issue 11), when the store is on."""
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
        yield CounterMetricFamily("interchange_durable_duplicate_imports", "Imported durable messages a neighbour "
                                  "sent again after a restart (at-least-once)", value=durability.duplicate_imports)


def broker_registry(core: "BrokerCore", server: "BrokerServer") -> CollectorRegistry:
    """A registry with the broker's metrics and the process vitals (CPU, memory, fds)."""
    registry = CollectorRegistry()
    registry.register(BrokerCollector(core, server))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
