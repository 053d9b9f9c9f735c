"""The injected clock. Core logic never reads wall-clock time itself.

Production passes ``SystemClock``; tests and the simulator pass ``ManualClock``
and move time explicitly, so runs are deterministic.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (wall time, as Kafka's timestamps)."""

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back (for timeouts)."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        assert ms >= 0, "time never goes back"
        self._now_ms += ms
