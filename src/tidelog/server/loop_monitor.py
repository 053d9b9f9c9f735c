"""How long the event loop was held: the stalls heartbeats wait behind.

Theory of operation. Everything a ``tidelog serve`` process does for its clients,
its fetchers and its controller runs on one asyncio loop, heartbeats included; a
step that holds the loop for longer than ``broker.session.timeout.ms`` gets the
broker fenced. ``EventLoopMonitor.run`` sleeps ``PROBE_INTERVAL_S`` again and
again; how late each wake-up is, is how long something else held the loop
meanwhile (a stall). It keeps the longest stall since the start and the last
``STALLS_KEPT`` stalls of at least ``STALL_RECORDED_MS``, each with the moment it
ended on the machine's monotonic clock (``time.monotonic``, the same in every
process of the machine, so a benchmark can tell which step a stall belongs to).
A stall of ``STALL_WARNING_MS`` or more is logged. ``GET /event-loop`` on the
metrics port (runtime.py) answers ``summary()``.

This is a driver's diagnostic: it reads the process's clock, never the node's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

logger = logging.getLogger("tidelog.broker")

# 20 probes a second: a stall is measured to within 50 ms (it may have begun while the
# probe slept). Every 10 ms, as before, the probe alone was about half of an idle node's
# CPU (6 of 13 ms a second).
PROBE_INTERVAL_S = 0.05
STALL_RECORDED_MS = 100
STALL_WARNING_MS = 1_000
STALLS_KEPT = 256


class EventLoopMonitor:
    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.stall_max_ms = 0.0
        self.stalls: collections.deque[tuple[float, float]] = collections.deque(maxlen=STALLS_KEPT)

    def on_wakeup(self, slept_from_s: float, now_s: float) -> None:
        """One probe woke at ``now_s`` after sleeping from ``slept_from_s``."""
        stall_ms = max(0.0, (now_s - slept_from_s - PROBE_INTERVAL_S) * 1000)
        self.stall_max_ms = max(self.stall_max_ms, stall_ms)
        if stall_ms >= STALL_RECORDED_MS:
            self.stalls.append((now_s, stall_ms))
        if stall_ms >= STALL_WARNING_MS:
            logger.warning("event loop stalled %.0f ms", stall_ms)

    async def run(self) -> None:
        """Probe until cancelled: a timer callback, no task step per probe."""
        loop = asyncio.get_running_loop()
        handle = None

        def probe(slept_from_s: float) -> None:
            nonlocal handle
            now_s = self._clock()
            self.on_wakeup(slept_from_s, now_s)
            handle = loop.call_later(PROBE_INTERVAL_S, probe, now_s)

        handle = loop.call_later(PROBE_INTERVAL_S, probe, self._clock())
        try:
            await loop.create_future()          # until the node stops (cancelled)
        finally:
            handle.cancel()

    def summary(self) -> dict:
        return {"stall_max_ms": round(self.stall_max_ms, 1),
                "stalls": [[round(end_s, 3), round(ms, 1)] for end_s, ms in self.stalls]}
