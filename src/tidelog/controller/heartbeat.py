"""Broker heartbeats: soft session state and the broker state table.

Theory of operation. Only the active controller keeps this state and it is never
written to the metadata log: after a failover the new active controller starts
every registered broker with a fresh session (``touch`` at activation). Time comes
from the injected clock.

Sessions (Kafka's ``BrokerHeartbeatManager``): a session is valid iff the broker
is unfenced and ``last_contact_ms + session_timeout_ms >= now`` — so a broker is
*stale* strictly after that instant. Unfenced brokers are kept in order of last
contact (a touch moves a broker to the end), so ``find_one_stale_broker`` looks
only at the first one: if the oldest is fresh, all are. ``next_check_time_ms`` is the first instant
the oldest session can be stale (``last_contact_ms + session_timeout_ms + 1``: with
millisecond time, firing at exactly ``+ timeout`` would find nothing and reschedule
for the same instant).

The same soft state holds what each broker's latest heartbeat said of where its
leaderless replicas end (``report_log_ends``) and since when an election has
waited for those reports (``may_await_log_ends``: at most one session timeout
for brokers that are up, ``UNCLEAN_RECOVERY_WAIT_MS`` for one that is down):
the controller's longest-log rule (``partition_change.py``, KIP-966 unclean
recovery) reads both.

The next-state table (Kafka's ``calculateNextBrokerState``) is
``next_broker_state`` below; docs/controller.md draws it. One row is tidelog's: a
broker already told SHUTDOWN_NOW (fenced while in controlled shutdown) stays
SHUTDOWN_NOW until a new incarnation registers — Kafka gets the same effect from
its soft ``controlledShutdownOffset``, which tidelog reads from the registration.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from typing import Callable

from tidelog.core.clock import Clock

NO_DEADLINE = sys.maxsize
# How long, by default, an election without ISR and ELR waits for a replica whose broker
# is down to come back and report its log end (partition_change.py;
# ``tidelog.unclean.recovery.wait.ms``); KIP-966 proposed five minutes for its unclean
# recovery timeout.
UNCLEAN_RECOVERY_WAIT_MS = 300_000


class BrokerControlState(enum.Enum):
    """(fenced, in_controlled_shutdown, should_shut_down) as the heartbeat reply says."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


def next_broker_state(current: BrokerControlState, *, want_fence: bool, want_shut_down: bool,
                      current_metadata_offset: int, registration_offset: int,
                      has_leaderships: Callable[[], bool],
                      controlled_shutdown_offset: int, lowest_active_offset: int
                      ) -> BrokerControlState:
    """Kafka's ``BrokerHeartbeatManager.calculateNextBrokerState``, row by row."""
    S = BrokerControlState
    if current == S.FENCED:
        if want_shut_down:
            return S.SHUTDOWN_NOW
        if not want_fence and current_metadata_offset >= registration_offset:
            return S.UNFENCED
        return S.FENCED
    if current == S.UNFENCED:
        if want_fence:
            return S.SHUTDOWN_NOW if want_shut_down else S.FENCED
        if want_shut_down:
            return S.CONTROLLED_SHUTDOWN if has_leaderships() else S.SHUTDOWN_NOW
        return S.UNFENCED
    if current == S.CONTROLLED_SHUTDOWN:
        if has_leaderships():
            return S.CONTROLLED_SHUTDOWN
        if 0 <= controlled_shutdown_offset <= lowest_active_offset:
            return S.SHUTDOWN_NOW
        return S.CONTROLLED_SHUTDOWN
    assert current == S.SHUTDOWN_NOW, current
    return S.SHUTDOWN_NOW   # told to shut down already: only a new incarnation may return


@dataclass
class BrokerHeartbeatState:
    broker_id: int
    last_contact_ms: int
    fenced: bool
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1   # >= 0 once the controlled-shutdown records are written

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    def __init__(self, clock: Clock, session_timeout_ms: int,
                 recovery_wait_ms: int = UNCLEAN_RECOVERY_WAIT_MS):
        assert session_timeout_ms > 0
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.recovery_wait_ms = max(recovery_wait_ms, session_timeout_ms)
        self._brokers: dict[int, BrokerHeartbeatState] = {}
        self._unfenced: dict[int, None] = {}   # insertion order = order of last contact
        # broker → (topic id, partition) → (last epoch, log end offset), as its latest
        # heartbeat reported them (``replica_log_ends``); only its leaderless partitions.
        self._log_ends: dict[int, dict[tuple, tuple[int, int]]] = {}
        self._reporting: set[int] = set()   # brokers whose latest heartbeat carried the reports
        # brokers (this incarnation) that registered with, or heartbeat to, this controller
        # since it became active: until then it cannot tell "does not report" from "not
        # heard yet", nor know what a report to its predecessor said
        self._heard: set[int] = set()
        # partition → when its election began waiting for the replicas' reports
        self._awaiting: dict[tuple, int] = {}
        self._registered_ms: dict[int, int] = {}   # broker → when this incarnation registered

    def state(self, broker_id: int) -> BrokerHeartbeatState | None:
        return self._brokers.get(broker_id)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int) -> None:
        now_ms = self.clock.monotonic_ms()
        state = self._brokers.get(broker_id)
        if state is None:
            state = self._brokers[broker_id] = BrokerHeartbeatState(broker_id, now_ms, fenced)
        state.last_contact_ms = now_ms
        state.fenced = fenced
        if metadata_offset >= 0:
            state.metadata_offset = metadata_offset
        self._unfenced.pop(broker_id, None)
        if fenced:
            state.controlled_shutdown_offset = -1
        else:
            self._unfenced[broker_id] = None

    def fence(self, broker_id: int) -> None:
        state = self._brokers[broker_id]
        state.fenced = True
        state.controlled_shutdown_offset = -1
        self._unfenced.pop(broker_id, None)

    def remove(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)
        self._unfenced.pop(broker_id, None)
        self._log_ends.pop(broker_id, None)
        self._reporting.discard(broker_id)
        self._heard.discard(broker_id)
        self._registered_ms.pop(broker_id, None)

    def report_log_ends(self, broker_id: int, log_ends: dict[tuple, tuple[int, int]] | None) -> None:
        """What the broker's latest heartbeat says of its leaderless replicas (replaces
        the previous report; a new incarnation starts with none, see ``remove``); None
        from a broker that does not report them."""
        self._heard.add(broker_id)
        if log_ends is None:
            self._reporting.discard(broker_id)
        else:
            self._reporting.add(broker_id)
        if log_ends:
            self._log_ends[broker_id] = log_ends
        else:
            self._log_ends.pop(broker_id, None)

    def may_await_log_ends(self, key: tuple, absent: bool = False, registered_ms: int | None = None) -> bool:
        """Whether the election of ``key`` may still wait for replicas to report where
        their logs end, counted from the first time it waited: one broker session
        timeout for brokers that are up (every live broker heartbeats more often than
        that), ``recovery_wait_ms`` when it waits for one that is down. ``registered_ms``:
        when a replica it waits for registered, if later — the session timeout is then
        counted from there, a new incarnation's first report taking as long as any
        other's — but never past the longer of the two waits from the first."""
        now_ms = self.clock.monotonic_ms()
        since_ms = self._awaiting.setdefault(key, now_ms)
        if absent:
            return now_ms < since_ms + self.recovery_wait_ms
        start_ms = since_ms if registered_ms is None else max(since_ms, registered_ms)
        return now_ms < min(start_ms + self.session_timeout_ms,
                            since_ms + max(self.session_timeout_ms, self.recovery_wait_ms))

    def awaiting(self) -> list[tuple]:
        """Partitions whose election is waiting for reports (see ``may_await_log_ends``)."""
        return list(self._awaiting)

    def stop_awaiting(self, key: tuple) -> None:
        self._awaiting.pop(key, None)

    def reports_log_ends(self, broker_id: int) -> bool:
        """Whether the broker's latest heartbeat (this incarnation's) carried log-end reports."""
        return broker_id in self._reporting

    def registered(self, broker_id: int) -> None:
        """The broker's new incarnation registered with this controller: heard (it has
        reported nothing to anyone yet, so no report of it was lost with a failover)."""
        self._heard.add(broker_id)
        self._registered_ms[broker_id] = self.clock.monotonic_ms()

    def registered_ms(self, broker_id: int) -> int | None:
        """When the broker's incarnation registered with this controller, if it did."""
        return self._registered_ms.get(broker_id)

    def heard_from(self, broker_id: int) -> bool:
        """Whether the broker's incarnation registered with, or heartbeat to, this
        controller since it became active (the reports are soft state: a new active
        controller has none)."""
        return broker_id in self._heard

    def log_end(self, broker_id: int, key: tuple) -> tuple[int, int] | None:
        """(last epoch, log end offset) of ``broker_id``'s replica of ``key``, if reported."""
        reported = self._log_ends.get(broker_id)
        return None if reported is None else reported.get(key)

    def in_contact(self, broker_id: int) -> bool:
        """Heard from within a session timeout, fenced or not (a broker still starting)."""
        state = self._brokers.get(broker_id)
        return state is not None and state.last_contact_ms + self.session_timeout_ms >= self.clock.monotonic_ms()

    def has_valid_session(self, broker_id: int) -> bool:
        state = self._brokers.get(broker_id)
        if state is None or state.fenced:
            return False
        return state.last_contact_ms + self.session_timeout_ms >= self.clock.monotonic_ms()

    def find_one_stale_broker(self) -> int | None:
        """The unfenced broker with the oldest contact, if its session expired."""
        for broker_id in self._unfenced:
            return None if self.has_valid_session(broker_id) else broker_id
        return None

    def next_check_time_ms(self) -> int:
        """When the oldest unfenced session can first be stale; NO_DEADLINE if none."""
        for broker_id in self._unfenced:
            return self._brokers[broker_id].last_contact_ms + self.session_timeout_ms + 1
        return NO_DEADLINE

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> bool:
        """Remember the offset that put the broker in controlled shutdown (first time only)."""
        state = self._brokers[broker_id]
        assert not state.fenced, f"fenced broker {broker_id} cannot enter controlled shutdown"
        if state.controlled_shutdown_offset >= 0:
            return False
        state.controlled_shutdown_offset = offset
        return True

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset among unfenced brokers not shutting down
        (``sys.maxsize`` when there are none: nobody to wait for)."""
        offsets = [self._brokers[b].metadata_offset for b in self._unfenced
                   if not self._brokers[b].shutting_down]
        return min(offsets, default=sys.maxsize)
