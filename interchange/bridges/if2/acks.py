"""Acknowledgements of one AMQP 0-9-1 consumer channel, batched: ``basic.ack multiple=true`` once
the BI accepted a contiguous run of deliveries, instead of one ack frame per message.

Sans-I/O: :meth:`AckWindow.received` in delivery order, :meth:`AckWindow.settled` when a message's
fate is known (accepted, or refused: reject without requeue), :meth:`AckWindow.flush` returns what
to send for the longest settled prefix. A delivery still in flight holds back every later ack, so
an ack never covers a message the BI has not accepted (AMQP 0-9-1 basic.ack ``multiple`` acks all
unacknowledged tags up to and including the one given); a refused one is rejected alone, after the
accepted ones before it are acked. Delivery tags are per channel: one window per channel.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Ack", "AckWindow", "Reject"]

M = TypeVar("M")


@dataclass(frozen=True)
class Ack(Generic[M]):
    """Ack ``message`` and every earlier unacknowledged delivery of the channel (``multiple``)."""
    message: M
    multiple: bool


@dataclass(frozen=True)
class Reject(Generic[M]):
    """Reject ``message`` alone, without requeue."""
    message: M


class AckWindow(Generic[M]):
    def __init__(self) -> None:
        self._order: deque[M] = deque()  # unacknowledged deliveries, in delivery order
        self._fate: dict[int, bool] = {}  # id(message) -> accepted? (absent: in flight)

    def __len__(self) -> int:
        return len(self._order)

    def received(self, message: M) -> None:
        self._order.append(message)

    @property
    def settled_count(self) -> int:
        """Deliveries whose fate is known and not sent yet (some may wait behind one still in flight)."""
        return len(self._fate)

    def received_all(self, messages: list[M]) -> None:
        """:meth:`received` for each, in delivery order."""
        self._order.extend(messages)

    def settled(self, message: M, accepted: bool) -> None:
        self._fate[id(message)] = accepted

    def settled_all(self, messages: list[M], accepted: bool) -> None:
        """:meth:`settled` for each (one fate for all)."""
        self._fate.update(dict.fromkeys(map(id, messages), accepted))

    def flush(self) -> list[Ack[M] | Reject[M]]:
        """What to send now: one ack (multiple when it covers several) per run of accepted deliveries,
        a reject per refused one, in delivery order; nothing past the first one still in flight."""
        order, known = self._order, self._fate
        if order:  # (the usual case, every one accepted: one ack, no Python step per delivery)
            ids = list(map(id, order))
            fates = list(map(known.get, ids))
            if None not in fates and False not in fates:
                deque(map(known.pop, ids), maxlen=0)
                last, count = order[-1], len(order)
                order.clear()
                return [Ack(last, count > 1)]
        actions: list[Ack[M] | Reject[M]] = []
        run: list[M] = []
        while self._order and (fate := self._fate.pop(id(self._order[0]), None)) is not None:
            message = self._order.popleft()
            if fate:
                run.append(message)
                continue
            if run:
                actions.append(Ack(run[-1], len(run) > 1))
                run = []
            actions.append(Reject(message))
        if run:
            actions.append(Ack(run[-1], len(run) > 1))
        return actions
