"""Time helpers every layer shares: the wall clock in milliseconds, and exponential back-off.

A leaf module (it imports nothing of the project), so the data plane, the control plane and
the node runtime all use the same two definitions.
"""
from __future__ import annotations

import time

__all__ = ["backoff_s", "now_ms"]


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch (timestamps of logs, rows and messages)."""
    return time.time_ns() // 1_000_000


def backoff_s(failures: int, first_s: float, max_s: float) -> float:
    """The delay before retrying after ``failures`` consecutive failures (1, 2, ...): ``first_s``,
    doubling each time, at most ``max_s``."""
    return min(first_s * 2.0 ** min(max(failures - 1, 0), 64), max_s)
