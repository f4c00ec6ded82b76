"""Prometheus metrics of the IF2 bridge, on the node's admin endpoint next to the broker's (IP_137).

Messages in each direction by outcome (IF2 -> C-Roads: accepted, refused, expired, gave_up), sends
to the BI made again and those left unanswered, republished copies (IF2 6.4), capabilities
registered and withdrawn, the RabbitMQ and BI connections, messages in flight. Reads the bridge
through :class:`If2View`, so this module needs no AMQP 0-9-1 codec (pamqp is the bridge's extra)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["If2Collector", "If2View"]

#: (counts key, direction, outcome) of the messages counter
_MESSAGES = (("imported", "if2_to_croads", "accepted"), ("import_refused", "if2_to_croads", "refused"),
             ("import_expired", "if2_to_croads", "expired"), ("import_gave_up", "if2_to_croads", "gave_up"),
             ("exported", "croads_to_if2", "published"), ("export_refused", "croads_to_if2", "refused"))


class If2View(Protocol):
    """What the collector reads of a running bridge."""

    @property
    def counts(self) -> Mapping[str, int]: ...
    @property
    def rabbitmq_connected(self) -> bool: ...
    @property
    def bi_connected(self) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def capabilities_registered(self) -> int: ...
    @property
    def republish_tracked(self) -> int: ...
    @property
    def republish_suppressed(self) -> int: ...


class If2Collector:
    def __init__(self, bridge: If2View) -> None:
        self._bridge = bridge

    def collect(self) -> Iterator[Metric]:
        bridge = self._bridge
        counts = bridge.counts
        messages = CounterMetricFamily("if2_messages", "Messages through the IF2 bridge, by direction and outcome",
                                       labels=["direction", "outcome"])
        for key, direction, outcome in _MESSAGES:
            messages.add_metric([direction, outcome], counts.get(key, 0))
        yield messages
        yield CounterMetricFamily("if2_bi_retried", "IF2 messages sent to the BI again after an attempt went "
                                  "unanswered or was released", value=counts.get("bi_retried", 0))
        yield CounterMetricFamily("if2_bi_unanswered", "Attempts to the BI whose outcome never came (the connection "
                                  "or link went first): each a possible duplicate", value=counts.get("bi_unanswered", 0))
        yield CounterMetricFamily("if2_export_unsettled", "C-Roads messages published to IF2 whose BI settlement was "
                                  "lost with the link (the source gives them out again: a possible duplicate at IF2)",
                                  value=counts.get("export_unsettled", 0))
        yield CounterMetricFamily("if2_export_redelivered", "Of those, copies the BI gave out again and the bridge "
                                  "settled without publishing them twice", value=counts.get("export_redelivered", 0))
        yield CounterMetricFamily("if2_republished", "Copies published again to IF2 (6.4 rules 2 and 3)",
                                  value=counts.get("republished", 0))
        yield CounterMetricFamily("if2_republish_suppressed", "Bit-identical copies not published to IF2 (6.4 rule 1)",
                                  value=bridge.republish_suppressed)
        yield GaugeMetricFamily("if2_republish_tracked", "C-Roads messages whose IF2 copy is kept valid",
                                value=bridge.republish_tracked)
        yield GaugeMetricFamily("if2_capabilities_registered", "Capabilities registered for IF2 data",
                                value=bridge.capabilities_registered)
        yield CounterMetricFamily("if2_capabilities_withdrawn", "Capabilities withdrawn after their IF2 data stopped",
                                  value=counts.get("capabilities_withdrawn", 0))
        yield GaugeMetricFamily("if2_rabbitmq_connected", "1 while the bridge is connected to the IF2 RabbitMQ",
                                value=int(bridge.rabbitmq_connected))
        yield GaugeMetricFamily("if2_bi_connected", "1 while the bridge's AMQP 1.0 link to the node is up",
                                value=int(bridge.bi_connected))
        yield GaugeMetricFamily("if2_in_flight", "Messages handed over but not yet settled on the other side",
                                value=bridge.in_flight)
