"""The simulator's event loop, node clocks and trace.

Theory of operation. Simulated time is one integer, ``EventLoop.now_ms``; it
moves only when the loop pops the next event from a heap of ``(time, seq,
event)``. ``seq`` is a global counter, so two events due at the same instant run
in the order they were scheduled and a run is a pure function of its seed: no
asyncio, no threads, no wall clock.

Every event may belong to a node *incarnation* (``owner``). When a node crashes
its incarnation number moves on and every event the old incarnation scheduled is
dropped when it comes due (a dead process runs no timers and reads no replies).
While a node is paused its events are parked in ``node.backlog`` and re-queued,
in their original order, when it resumes (a SIGSTOPped process wakes up with
every overdue timer and every buffered message at once).

Each node reads time through its own ``NodeClock``: the global time shifted by a
wall-clock offset and stretched by a drift in parts per million (clock skew).
Nodes schedule in their own milliseconds (``NodeClock.to_global_delay``).

The ``Trace`` keeps one readable line per event and a running SHA-256 of all of
them; two runs of one seed must produce the same digest (tested).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

T0_WALL_MS = 1_700_000_000_000   # wall time of simulated instant 0
T0_MONOTONIC_MS = 10_000_000     # monotonic time of simulated instant 0


class Trace:
    """One line per event; a digest of all lines and the last ``keep`` in memory."""

    def __init__(self, keep: int = 400, echo: bool = False, record_all: bool = False):
        self._hash = hashlib.sha256()
        self.recent: deque[str] = deque(maxlen=keep)
        self.lines: list[str] | None = [] if record_all else None
        self.echo = echo
        self.count = 0

    def add(self, now_ms: int, who: str, what: str) -> None:
        line = f"{now_ms:>9} {who:<6} {what}"
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        self.count += 1
        self.recent.append(line)
        if self.lines is not None:
            self.lines.append(line)
        if self.echo:
            print(line)

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()


class NodeClock:
    """A node's view of time (``tidelog.core.clock.Clock``): offset and drift."""

    def __init__(self, loop: "EventLoop", wall_offset_ms: int = 0, drift_ppm: int = 0):
        assert -100_000 < drift_ppm < 100_000, drift_ppm
        self.loop = loop
        self.wall_offset_ms = wall_offset_ms
        self.drift_ppm = drift_ppm

    def _local(self, global_ms: int) -> int:
        return global_ms + global_ms * self.drift_ppm // 1_000_000

    def now_ms(self) -> int:
        return T0_WALL_MS + self.wall_offset_ms + self._local(self.loop.now_ms)

    def monotonic_ms(self) -> int:
        return T0_MONOTONIC_MS + self._local(self.loop.now_ms)

    def to_global_delay(self, local_delay_ms: int) -> int:
        """How long, in simulated time, ``local_delay_ms`` on this clock lasts (>= 0)."""
        if local_delay_ms <= 0:
            return 0
        return -(-local_delay_ms * 1_000_000 // (1_000_000 + self.drift_ppm))


@dataclass(eq=False, slots=True)
class Event:
    time_ms: int
    seq: int
    action: Callable[[], None]
    label: str
    owner: "Owned | None" = None
    incarnation: int = 0
    cancelled: bool = False
    # A message on the wire (``Network``): its event changes no process's state, only
    # the network's, so the invariant checker need not look after it.
    transit: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(eq=False)
class Owned:
    """What the loop needs of a node: a name, an incarnation, a pause flag."""

    name: str
    incarnation: int = 0
    paused: bool = False
    backlog: list[Event] = field(default_factory=list)


class EventLoop:
    def __init__(self, trace: Trace):
        self.now_ms = 0
        self.trace = trace
        self._heap: list[tuple[int, int, Event]] = []
        self._seq = 0
        self.events_run = 0
        # Called after every event that ran (the invariant checker).
        self.after_event: Callable[[Event], None] | None = None

    def at(self, time_ms: int, action: Callable[[], None], label: str = "",
           owner: Owned | None = None, transit: bool = False) -> Event:
        assert time_ms >= self.now_ms, f"event {label!r} at {time_ms} is in the past ({self.now_ms})"
        self._seq += 1
        event = Event(time_ms, self._seq, action, label, owner, owner.incarnation if owner else 0, False, transit)
        heapq.heappush(self._heap, (time_ms, self._seq, event))
        return event

    def after(self, delay_ms: int, action: Callable[[], None], label: str = "",
              owner: Owned | None = None, transit: bool = False) -> Event:
        return self.at(self.now_ms + max(0, delay_ms), action, label, owner, transit)

    def resume(self, owner: Owned) -> None:
        """Re-queue what a paused node missed, in its original order, now."""
        owner.paused = False
        parked, owner.backlog = owner.backlog, []
        for event in parked:
            self._seq += 1
            event.time_ms, event.seq = self.now_ms, self._seq
            heapq.heappush(self._heap, (event.time_ms, event.seq, event))

    def next_time_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Run the next event; False when none is left."""
        while self._heap:
            time_ms, _, event = heapq.heappop(self._heap)
            self.now_ms = time_ms
            if event.cancelled:
                continue
            owner = event.owner
            if owner is not None:
                if owner.incarnation != event.incarnation:
                    continue          # scheduled by a process that has since died
                if owner.paused:
                    owner.backlog.append(event)
                    continue
            if event.label:
                self.trace.add(time_ms, owner.name if owner else "sim", event.label)
            event.action()
            self.events_run += 1
            if self.after_event is not None:
                self.after_event(event)
            return True
        return False

    def run_until(self, time_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Run events due up to ``time_ms`` (then set the time to it). Returns True
        if ``stop()`` became true first."""
        while self._heap and self._heap[0][0] <= time_ms:
            self.step()
            if stop is not None and stop():
                return True
        self.now_ms = max(self.now_ms, time_ms)
        return False
