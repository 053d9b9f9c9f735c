"""EventLoopMonitor (server/loop_monitor.py): a step that holds the loop shows as a stall."""

import asyncio
import time

from tidelog.server.loop_monitor import PROBE_INTERVAL_S, STALL_RECORDED_MS, EventLoopMonitor


def test_a_blocking_step_is_recorded_as_a_stall_with_its_end_on_the_monotonic_clock():
    monitor = EventLoopMonitor()

    async def main():
        probe = asyncio.create_task(monitor.run())
        await asyncio.sleep(3 * PROBE_INTERVAL_S)       # the probe is sleeping
        blocked_from = time.monotonic()
        time.sleep(0.3)                                  # holds the loop
        blocked_until = time.monotonic()
        await asyncio.sleep(3 * PROBE_INTERVAL_S)        # the probe wakes, late
        probe.cancel()
        return blocked_from, blocked_until

    blocked_from, blocked_until = asyncio.run(main())
    summary = monitor.summary()
    assert summary["stall_max_ms"] >= 250
    [(end_s, stall_ms)] = [s for s in summary["stalls"] if s[1] >= 250]
    # summary() rounds the end to 1 ms and the stall to 0.1 ms: 1 ms of slack each way.
    assert blocked_until <= end_s + 0.001 and end_s - stall_ms / 1000 <= blocked_from + PROBE_INTERVAL_S + 0.001


def test_a_probe_on_time_records_nothing():
    monitor = EventLoopMonitor()
    monitor.on_wakeup(10.0, 10.0 + PROBE_INTERVAL_S + (STALL_RECORDED_MS - 1) / 1000)
    assert monitor.summary()["stalls"] == []
    monitor.on_wakeup(20.0, 20.0 + PROBE_INTERVAL_S + STALL_RECORDED_MS / 1000)
    assert [ms for _, ms in monitor.summary()["stalls"]] == [STALL_RECORDED_MS]
