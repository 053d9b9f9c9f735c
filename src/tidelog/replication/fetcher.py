"""Follower fetchers, sans-IO (Kafka's ``AbstractFetcherThread``; docs/replication.md).

Theory of operation. A broker follows partitions by pulling from their leaders.
For every (source broker, fetcher id) there is one ``FetcherState``; it owns the
``partition_states`` of the partitions it fetches, in insertion order, and it
decides what to send and what a response means. It never touches a socket,
a timer or asyncio: a *driver* (an asyncio task in ``server/fetcher_driver.py``,
or the simulator's ``sim/broker.py``) runs this loop, one request at a time like Kafka's
fetcher thread::

    while running:
        request = fetcher.poll(now_ms)          # a plan, or None
        if request is None:
            sleep until fetcher.next_wakeup_ms(now_ms) or fetcher.wakeup() is called
            continue
        try:
            results = send(request)             # Fetch / OffsetsForLeaderEpoch / ListOffsets
        except ConnectionError:
            fetcher.on_request_failed(request, now_ms)
            continue
        fetcher.on_response(request, results, now_ms)

A partition's fetch state (``PartitionFetchState``) is immutable and replaced on
every change; its ``state`` is one of

* ``TRUNCATING`` — it must find where its log stops agreeing with the leader's
  before it fetches: with a leader epoch in its log by OffsetsForLeaderEpoch
  (multi-round, KIP-279), without one by truncating to its high watermark;
* ``FETCHING`` — it fetches from ``fetch_offset``. With truncate-on-fetch
  (``FetcherConfig.truncate_on_fetch``, Kafka's normal mode since IBP 2.7) the
  fetch carries ``last_fetched_epoch`` and the leader answers a divergence with
  ``diverging_epoch`` instead of data; the follower truncates and goes on;
* ``OUT_OF_RANGE`` — the leader said the fetch offset is outside its log; the
  fetcher asks the leader for its log start and end offsets (ListOffsets
  earliest/latest as a replica) and picks a new fetch offset (Kafka's
  ``fetchOffsetAndTruncate``). Kafka does
  this with blocking calls inside its thread; here it is a state, so that
  every exchange with the leader is a request the driver sends.

and a partition may be *delayed* (a deadline; errors back off by
``replica.fetch.backoff.ms``). Fairness (as in Kafka's ``PartitionStates``):
whenever a partition's data is processed it moves to the end of the order, and
the leader fills a response in request order, so every partition gets its turn at
the response size budget.

Failures are per partition (Kafka's ``markPartitionFailed``): an exception while
truncating or appending one partition — a storage error or anything unexpected —
removes that partition into ``failed_partitions`` (logged; back when new metadata
re-adds it) and the other partitions of the same answer go on. Corrupt or invalid
batches only back off (they may be transient). An ``AssertionError`` (a broken
invariant, ``IllegalTransition`` included) is a bug and is never caught here: the
driver's fault handler stops the broker. An OffsetsForLeaderEpoch answer naming a
partition that was not asked about is a protocol error: the request counts as
failed and nothing in it is used.

Invariants: at most one request is in flight per fetcher; a response is applied
to a partition only if it still has the state the request was built from (same
fetch offset and current leader epoch, still ready) — a response that raced with
a leader change, a removal or a truncation is dropped; appends happen only at
the local log end offset (it equals ``fetch_offset`` while FETCHING).

Replication throttle (KIP-73, broker/replication_quota.py). While the follower quota
is exceeded, ``build_fetch`` leaves out its throttled partitions that lag (Kafka's
``shouldFollowerThrottle``); the bytes appended for throttled partitions are recorded
against it. A fetch left empty that way is retried after ``next_wakeup_ms``.

``ReplicaFetcherManager`` maps partitions to fetchers: fetcher id =
``hash(topic, partition) % num.replica.fetchers`` (Kafka's hash, so the spread
matches Kafka's), per source broker; it adds and removes partitions on
become-follower / become-leader and shuts down fetchers left without partitions.

The local side of a partition is reached through ``get_partition(tp)`` and the
follower methods of ``Partition`` (``append_records_as_follower``,
``update_follower_high_watermark``, ``update_follower_log_start_offset``,
``truncate_to``, ``truncate_fully_and_start_at``), which write the local log.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from tidelog.core.errors import CorruptRecordError, ErrorCode, InvalidRecordError, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.core.states import transition
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.partition import UNDEFINED_EPOCH, UNDEFINED_OFFSET, Isolation, ReadResult

logger = logging.getLogger("tidelog.fetcher")


# --------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class FetcherConfig:
    """The broker settings a follower fetcher obeys (Kafka's config names and defaults)."""

    num_replica_fetchers: int = 1                   # num.replica.fetchers
    replica_fetch_max_bytes: int = 1_048_576        # replica.fetch.max.bytes (per partition)
    replica_fetch_response_max_bytes: int = 10_485_760  # replica.fetch.response.max.bytes
    replica_fetch_wait_max_ms: int = 500            # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int = 1                # replica.fetch.min.bytes
    replica_fetch_backoff_ms: int = 1000            # replica.fetch.backoff.ms
    truncate_on_fetch: bool = True                  # IBP >= 2.7: diverging epochs in Fetch

    def __post_init__(self):
        assert self.num_replica_fetchers >= 1, self
        assert self.replica_fetch_max_bytes > 0 and self.replica_fetch_response_max_bytes > 0, self
        assert self.replica_fetch_wait_max_ms >= 0 and self.replica_fetch_backoff_ms >= 0, self

    @classmethod
    def from_properties(cls, properties: Mapping[str, object], **overrides) -> "FetcherConfig":
        """From a broker config mapping with Kafka's dotted names (missing keys: defaults)."""
        names = {"num.replica.fetchers": "num_replica_fetchers",
                 "replica.fetch.max.bytes": "replica_fetch_max_bytes",
                 "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
                 "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
                 "replica.fetch.min.bytes": "replica_fetch_min_bytes",
                 "replica.fetch.backoff.ms": "replica_fetch_backoff_ms"}
        values = {}
        for key, name in names.items():
            try:
                values[name] = int(properties[key])
            except KeyError:
                pass
        values.update(overrides)
        return cls(**values)


# --------------------------------------------------------------------- partition states


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    OUT_OF_RANGE = "out_of_range"


class FetchEvent(enum.Enum):
    FETCHED = "fetched"                              # records (or none) appended from a fetch
    OUT_OF_RANGE = "offset out of range"             # the leader answered OFFSET_OUT_OF_RANGE
    TRUNCATED = "truncated"                          # truncation done (or continues on fetch)
    TRUNCATION_INCOMPLETE = "truncation incomplete"  # the leader's answer needs another round
    RESET = "reset from leader offsets"              # ListOffsets answered: restart in range


# The one table a partition's fetch state moves by (a new partition starts in the
# state ``FetcherState._initial_state`` picks; delays and lag do not change it).
FETCH_TRANSITIONS = {
    FetchState.TRUNCATING: {FetchEvent.TRUNCATED: FetchState.FETCHING,
                            FetchEvent.TRUNCATION_INCOMPLETE: FetchState.TRUNCATING},
    FetchState.FETCHING: {FetchEvent.FETCHED: FetchState.FETCHING,
                          FetchEvent.OUT_OF_RANGE: FetchState.OUT_OF_RANGE,
                          FetchEvent.TRUNCATED: FetchState.FETCHING},      # a diverging epoch, KIP-320
    FetchState.OUT_OF_RANGE: {FetchEvent.RESET: FetchState.FETCHING},
}


@dataclass(frozen=True)
class PartitionFetchState:
    """One partition's place in a fetcher (Kafka's ``PartitionFetchState``). Immutable:
    replaced on change."""

    fetch_offset: int
    current_leader_epoch: int
    state: FetchState
    lag: int | None = None
    delay_until_ms: int | None = None      # backing off until then (monotonic ms)
    last_fetched_epoch: int | None = None  # the epoch of the last batch we hold

    def is_delayed(self, now_ms: int) -> bool:
        return self.delay_until_ms is not None and now_ms < self.delay_until_ms

    def is_ready_for_fetch(self, now_ms: int) -> bool:
        return self.state == FetchState.FETCHING and not self.is_delayed(now_ms)

    def is_truncating(self, now_ms: int) -> bool:
        return self.state == FetchState.TRUNCATING and not self.is_delayed(now_ms)

    def needs_leader_offsets(self, now_ms: int) -> bool:
        return self.state == FetchState.OUT_OF_RANGE and not self.is_delayed(now_ms)


@dataclass(frozen=True)
class InitialFetchState:
    """Where a partition starts fetching when it is added (Kafka's ``InitialFetchState``)."""

    leader_id: int
    current_leader_epoch: int
    initial_fetch_offset: int   # < 0: ask the leader (OUT_OF_RANGE)


# --------------------------------------------------------------------- requests and results
#
# The server translates these to and from Kafka's wire messages; the simulator
# hands them to a leader's ReplicaManager as message bodies.


@dataclass(frozen=True)
class FetchPartitionPlan:
    """One partition of a follower Fetch (Kafka FetchRequest.PartitionData, v12+ names)."""

    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int = UNDEFINED_EPOCH   # -1: not sent (no epoch, or no truncate-on-fetch)


@dataclass(frozen=True, eq=False)
class FetchRequestPlan:
    """A follower Fetch: ``replica_id`` (``replica_state.replica_id`` from v15, with
    ``replica_epoch`` = ``broker_epoch``), a full fetch (session id 0, epoch -1),
    isolation level 0, partitions in this order."""

    source_broker_id: int
    fetcher_id: int
    replica_id: int
    broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: Mapping[TopicPartition, FetchPartitionPlan]
    isolation_level: int = 0
    session_id: int = 0
    session_epoch: int = -1

    def to_fetch_params(self) -> FetchParams:
        """The leader ReplicaManager's input for this request (in-process delivery)."""
        return FetchParams(
            replica_id=self.replica_id, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
            max_bytes=self.max_bytes, isolation=Isolation.LOG_END, broker_epoch=self.broker_epoch,
            partitions={tp: FetchPartitionRequest(p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                                  p.last_fetched_epoch, p.log_start_offset)
                        for tp, p in self.partitions.items()})


@dataclass(frozen=True)
class FetchPartitionResult:
    """One partition of a Fetch response. ``diverging_epoch`` is ``(epoch, end_offset)``
    or None (the wire's ``{-1, -1}``); ``records`` the raw batches."""

    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = UNDEFINED_OFFSET
    log_start_offset: int = UNDEFINED_OFFSET
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None

    @classmethod
    def from_read_result(cls, result: ReadResult) -> "FetchPartitionResult":
        """Copy a leader's ``ReadResult`` (its records read now: a slice goes stale)."""
        records = b"" if result.records is None else result.records.read_bytes()
        return cls(result.error, result.high_watermark, result.log_start_offset, records,
                   result.diverging_epoch)


@dataclass(frozen=True)
class OffsetsForLeaderEpochPartition:
    current_leader_epoch: int
    leader_epoch: int            # the follower's latest epoch: where does it end on the leader?


@dataclass(frozen=True, eq=False)
class OffsetsForLeaderEpochPlan:
    """An OffsetForLeaderEpoch request sent as a replica (``replica_id`` >= 0)."""

    source_broker_id: int
    fetcher_id: int
    replica_id: int
    partitions: Mapping[TopicPartition, OffsetsForLeaderEpochPartition]


@dataclass(frozen=True)
class EpochEndOffset:
    error: ErrorCode = ErrorCode.NONE
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_OFFSET


@dataclass(frozen=True, eq=False)
class ListOffsetsPlan:
    """The leader's log start and end offsets for partitions out of range: a
    ListOffsets as a replica (``replica_id`` >= 0, so "latest" is the LEO), once with
    timestamp -2 (earliest) and once with -1 (latest) — Kafka refuses a partition
    twice in one request. ``partitions`` maps to the current leader epoch."""

    source_broker_id: int
    fetcher_id: int
    replica_id: int
    partitions: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class LeaderOffsets:
    error: ErrorCode = ErrorCode.NONE
    log_start_offset: int = UNDEFINED_OFFSET
    log_end_offset: int = UNDEFINED_OFFSET


Plan = FetchRequestPlan | OffsetsForLeaderEpochPlan | ListOffsetsPlan


# --------------------------------------------------------------------- one fetcher


class FetcherState:
    def __init__(self, source_broker_id: int, fetcher_id: int, replica_id: int, config: FetcherConfig,
                 get_partition: Callable[[TopicPartition], object | None],
                 broker_epoch: Callable[[], int] = lambda: -1,
                 on_high_watermark_moved: Callable[[list[TopicPartition]], None] | None = None,
                 on_partition_failed: Callable[[TopicPartition, Exception | None], None] | None = None,
                 quota=None):
        self.source_broker_id = source_broker_id
        # The follower replication throttle (broker/replication_quota.py), or None; whether
        # the last fetch built left partitions out for it (they are due when it falls back).
        self.quota = quota
        self.held_back = False
        self.fetcher_id = fetcher_id
        self.replica_id = replica_id
        self.config = config
        self._get_partition = get_partition
        self._broker_epoch = broker_epoch
        self._on_high_watermark_moved = on_high_watermark_moved
        self._on_partition_failed = on_partition_failed
        # Insertion order is the fetch order (fairness: processed partitions move to the end).
        self.partition_states: dict[TopicPartition, PartitionFetchState] = {}
        # Removed after a fenced epoch or a local failure; wait for new metadata (add_partitions).
        self.failed_partitions: set[TopicPartition] = set()
        self.in_flight: Plan | None = None
        self.failed_requests_in_a_row = 0
        # Set by the driver: called when there may be new work (partitions added).
        self.wakeup: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return (f"FetcherState(source={self.source_broker_id}, id={self.fetcher_id}, "
                f"partitions={len(self.partition_states)})")

    # ------------------------------------------------------------ membership

    def add_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or keep) fetching these partitions. The same current leader epoch as
        the existing state keeps that state: no reset, no truncation (as Kafka's
        ``AbstractFetcherThread.addPartitions``)."""
        for tp, initial in initial_states.items():
            assert initial.leader_id == self.source_broker_id, (tp, initial, self)
            self.failed_partitions.discard(tp)
            current = self.partition_states.pop(tp, None)
            if current is not None and current.current_leader_epoch == initial.current_leader_epoch:
                self.partition_states[tp] = current
                continue
            self.partition_states[tp] = self._initial_state(tp, initial)
            logger.debug("%s: fetching from broker %d at leader epoch %d: %s", tp, self.source_broker_id,
                         initial.current_leader_epoch, self.partition_states[tp])
        if initial_states and self.wakeup is not None:
            self.wakeup()

    def _initial_state(self, tp: TopicPartition, initial: InitialFetchState) -> PartitionFetchState:
        epoch = initial.current_leader_epoch
        if initial.initial_fetch_offset < 0:
            return PartitionFetchState(0, epoch, FetchState.OUT_OF_RANGE)
        latest_epoch = self._latest_epoch(tp)
        if self.config.truncate_on_fetch and latest_epoch is not None:
            return PartitionFetchState(initial.initial_fetch_offset, epoch, FetchState.FETCHING,
                                       last_fetched_epoch=latest_epoch)
        return PartitionFetchState(initial.initial_fetch_offset, epoch, FetchState.TRUNCATING)

    def remove_partitions(self, topic_partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, PartitionFetchState]:
        removed = {}
        for tp in topic_partitions:
            state = self.partition_states.pop(tp, None)
            self.failed_partitions.discard(tp)
            if state is not None:
                removed[tp] = state
        return removed

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self.partition_states.get(tp)

    # ------------------------------------------------------------ what to send

    def poll(self, now_ms: int) -> Plan | None:
        """The next request to send (Kafka's ``doWork``: truncate, then fetch), or None.

        Truncations that need no leader (to the high watermark) happen here, locally.
        """
        if self.in_flight is not None:
            return None
        self.maybe_truncate_to_high_watermark(now_ms)
        return (self.build_offsets_for_leader_epoch(now_ms) or self.build_list_offsets(now_ms)
                or self.build_fetch(now_ms))

    def next_wakeup_ms(self, now_ms: int) -> int | None:
        """When ``poll`` may have something to send, if it has nothing now: the end of
        the nearest partition delay, or of the follower throttle holding partitions back,
        at most ``replica.fetch.backoff.ms`` away. None
        while a request is in flight (its response comes first)."""
        if self.in_flight is not None:
            return None
        wakeup = now_ms + self.config.replica_fetch_backoff_ms
        for state in self.partition_states.values():
            if state.is_delayed(now_ms):
                wakeup = min(wakeup, state.delay_until_ms)
        if self.held_back:       # partitions wait for the follower throttle: until its rate is back
            wakeup = min(wakeup, now_ms + self.quota.quota_exceeded_for_ms(now_ms))
        return wakeup

    def maybe_truncate_to_high_watermark(self, now_ms: int) -> list[TopicPartition]:
        """TRUNCATING partitions whose log holds no leader epoch truncate to their
        initial fetch offset (the high watermark) and start fetching (Kafka's
        ``AbstractFetcherThread.truncateToHighWatermark``)."""
        done = []
        for tp, state in list(self.partition_states.items()):
            if not state.is_truncating(now_ms) or self._latest_epoch(tp) is not None:
                continue
            if self._truncate(tp, state.fetch_offset):
                self._finish_truncation(tp, state, completed=True)
                done.append(tp)
        return done

    def build_offsets_for_leader_epoch(self, now_ms: int) -> OffsetsForLeaderEpochPlan | None:
        """TRUNCATING partitions with a leader epoch ask where it ends on the leader."""
        if self.in_flight is not None:
            return None
        partitions = {}
        for tp, state in self.partition_states.items():
            if state.is_truncating(now_ms):
                latest_epoch = self._latest_epoch(tp)
                if latest_epoch is not None:
                    partitions[tp] = OffsetsForLeaderEpochPartition(state.current_leader_epoch, latest_epoch)
        if not partitions:
            return None
        self.in_flight = OffsetsForLeaderEpochPlan(self.source_broker_id, self.fetcher_id, self.replica_id,
                                                   partitions)
        return self.in_flight

    def build_list_offsets(self, now_ms: int) -> ListOffsetsPlan | None:
        if self.in_flight is not None:
            return None
        partitions = {tp: state.current_leader_epoch for tp, state in self.partition_states.items()
                      if state.needs_leader_offsets(now_ms)}
        if not partitions:
            return None
        self.in_flight = ListOffsetsPlan(self.source_broker_id, self.fetcher_id, self.replica_id, partitions)
        return self.in_flight

    def build_fetch(self, now_ms: int) -> FetchRequestPlan | None:
        """One Fetch with every partition ready for it, in fetch order."""
        if self.in_flight is not None:
            return None
        config = self.config
        partitions: dict[TopicPartition, FetchPartitionPlan] = {}
        unavailable = []
        quota = self.quota
        quota_exceeded = quota is not None and bool(quota.throttled_partitions) and quota.is_quota_exceeded(now_ms)
        self.held_back = False
        for tp, state in self.partition_states.items():
            if not state.is_ready_for_fetch(now_ms):
                continue
            if quota_exceeded and self.should_follower_throttle(tp, state):
                quota.throttled_total += 1
                self.held_back = True
                continue        # over the follower throttle: this lagging replica waits (Kafka's shouldFollowerThrottle)
            partition = self._get_partition(tp)
            if partition is None or partition.log.is_offline:
                unavailable.append(tp)   # going offline; the replica manager removes it soon
                continue
            last_fetched_epoch = state.last_fetched_epoch if config.truncate_on_fetch else None
            partitions[tp] = FetchPartitionPlan(
                state.fetch_offset, partition.log.log_start_offset, config.replica_fetch_max_bytes,
                state.current_leader_epoch, UNDEFINED_EPOCH if last_fetched_epoch is None else last_fetched_epoch)
        self._delay(unavailable, now_ms)
        if not partitions:
            return None
        self.in_flight = FetchRequestPlan(
            self.source_broker_id, self.fetcher_id, self.replica_id, self._broker_epoch(),
            config.replica_fetch_wait_max_ms, config.replica_fetch_min_bytes,
            config.replica_fetch_response_max_bytes, partitions)
        return self.in_flight

    def should_follower_throttle(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """A throttled partition that is not caught up (lag unknown or > 0: Kafka's
        ``PartitionFetchState.isReplicaInSync`` false); the caller checked the quota."""
        return self.quota.is_throttled(tp) and (state.lag is None or state.lag > 0)

    # ------------------------------------------------------------ what came back

    def on_response(self, plan: Plan, results: Mapping, now_ms: int) -> None:
        if isinstance(plan, FetchRequestPlan):
            self.on_fetch_response(plan, results, now_ms)
        elif isinstance(plan, OffsetsForLeaderEpochPlan):
            self.on_offsets_for_leader_epoch_response(plan, results, now_ms)
        elif isinstance(plan, ListOffsetsPlan):
            self.on_list_offsets_response(plan, results, now_ms)
        else:
            raise TypeError(f"not a fetcher request: {plan!r}")

    def on_request_failed(self, plan: Plan, now_ms: int) -> None:
        """The request got no response (connection error, timeout, a request-level
        error). A failed Fetch backs off every partition of this fetcher, as Kafka
        does; a failed offsets request backs off the partitions it asked about."""
        if self.in_flight is plan:
            self.in_flight = None
        self.failed_requests_in_a_row += 1
        if isinstance(plan, FetchRequestPlan):
            level = logging.WARNING if self.failed_requests_in_a_row == 1 else logging.DEBUG
            logger.log(level, "fetch from broker %d failed (%d in a row); backing off %d partitions",
                       self.source_broker_id, self.failed_requests_in_a_row, len(self.partition_states))
            self._delay(list(self.partition_states), now_ms)
        else:
            self._delay(list(plan.partitions), now_ms)

    def on_fetch_response(self, plan: FetchRequestPlan, results: Mapping[TopicPartition, FetchPartitionResult],
                          now_ms: int) -> None:
        """Apply a Fetch response per partition (Kafka's
        ``AbstractFetcherThread.processFetchRequest``)."""
        self._done(plan)
        diverging: dict[TopicPartition, tuple[int, int]] = {}
        retry: list[TopicPartition] = []
        high_watermark_moved: list[TopicPartition] = []
        notes = _ResponseNotes("Fetch", self.source_broker_id)
        for tp, request in plan.partitions.items():
            result = results.get(tp)
            state = self.partition_states.get(tp)
            if (result is None or state is None or state.fetch_offset != request.fetch_offset
                    or state.current_leader_epoch != request.current_leader_epoch
                    or not state.is_ready_for_fetch(now_ms)):
                continue   # removed, re-added, truncated or moved while in flight: drop it
            error = result.error
            if error == ErrorCode.NONE:
                if result.diverging_epoch is not None:
                    diverging[tp] = result.diverging_epoch   # truncation only (KAFKA-14704)
                    continue
                outcome = self._process_partition_data(tp, state, result, now_ms)
                if outcome == "moved":
                    high_watermark_moved.append(tp)
                elif outcome == "retry":
                    retry.append(tp)
            elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
                notes.info("out of range; asking for the leader's offsets", tp, f"offset {state.fetch_offset}")
                self._update_and_move_to_end(tp, self._moved(tp, state, FetchEvent.OUT_OF_RANGE))
            elif error == ErrorCode.FENCED_LEADER_EPOCH:
                # The request carried the current epoch (checked above): our metadata is
                # stale. Stop until a new leader epoch arrives.
                self._mark_fenced(tp, state.current_leader_epoch, notes)
            else:
                notes.info(f"{error.name}; backing off", tp)
                retry.append(tp)
        for tp, (leader_epoch, end_offset) in diverging.items():
            self._truncate_on_epoch(tp, leader_epoch, end_offset)
        self._delay(retry, now_ms)
        notes.emit()
        if high_watermark_moved and self._on_high_watermark_moved is not None:
            self._on_high_watermark_moved(high_watermark_moved)

    def _process_partition_data(self, tp: TopicPartition, state: PartitionFetchState,
                                result: FetchPartitionResult, now_ms: int) -> str:
        """Steps 8–9 of the nine steps (docs/replication.md). Returns "moved" (HW changed),
        "ok", "retry" or "failed"."""
        partition = self._get_partition(tp)
        if partition is None:
            self._mark_failed(tp, None, "the partition is gone")
            return "failed"
        log = partition.log
        try:
            # An invariant, not an input check: a violation stops the broker.
            assert state.fetch_offset == log.log_end_offset, (
                f"{tp}: fetch offset {state.fetch_offset} != log end offset {log.log_end_offset}")
            appended = 0
            if result.records:
                appended = partition.append_records_as_follower(result.records).valid_bytes
                if self.quota is not None and self.quota.is_throttled(tp):
                    self.quota.record(len(result.records), now_ms)
            moved = partition.update_follower_high_watermark(result.high_watermark)
            if result.log_start_offset >= 0:
                partition.update_follower_log_start_offset(result.log_start_offset)
        except AssertionError:
            raise                 # a broken invariant (IllegalTransition too): the driver stops the broker
        except (CorruptRecordError, InvalidRecordError) as e:   # retry later (may be transient)
            logger.error("%s: invalid records at offset %d from broker %d: %s", tp, state.fetch_offset,
                         self.source_broker_id, e)
            return "retry"
        except Exception as e:    # this partition only; the rest of the response goes on
            self._failed_locally(tp, e, f"appending at offset {state.fetch_offset}")
            return "failed"
        next_offset = log.log_end_offset
        lag = max(0, result.high_watermark - next_offset)
        if appended > 0 or next_offset != state.fetch_offset:
            # The epoch of the last batch we hold (the append recorded it in the cache).
            self._update_and_move_to_end(tp, self._moved(
                tp, state, FetchEvent.FETCHED, fetch_offset=next_offset, lag=lag, delay_until_ms=None,
                last_fetched_epoch=log.latest_epoch))
        else:
            self.partition_states[tp] = dataclasses.replace(state, lag=lag)
        return "moved" if moved else "ok"

    def on_offsets_for_leader_epoch_response(self, plan: OffsetsForLeaderEpochPlan,
                                             results: Mapping[TopicPartition, EpochEndOffset],
                                             now_ms: int) -> None:
        """Truncate to where the leader's epoch ends (KIP-101); if the leader
        named an epoch we never had, truncate part way and ask again (KIP-279)."""
        unasked = sorted(set(results) - set(plan.partitions))
        if unasked:
            # Kafka's truncateToEpochEndOffsets refuses such an answer (IllegalStateException):
            # it is a protocol error, and nothing in it is used.
            logger.error("OffsetsForLeaderEpoch answer from broker %d names partitions it was not asked "
                         "about (%s): a protocol error; the request counts as failed", self.source_broker_id,
                         ", ".join(map(str, unasked)))
            self.on_request_failed(plan, now_ms)
            return
        self._done(plan)
        retry = []
        notes = _ResponseNotes("OffsetsForLeaderEpoch", self.source_broker_id)
        for tp, request in plan.partitions.items():
            state = self.partition_states.get(tp)
            if (state is None or state.current_leader_epoch != request.current_leader_epoch
                    or state.state != FetchState.TRUNCATING):
                continue   # the leader epoch changed while in flight: ignore
            result = results.get(tp, EpochEndOffset(ErrorCode.UNKNOWN_SERVER_ERROR))
            if result.error == ErrorCode.NONE:
                self._truncate_on_epoch(tp, result.leader_epoch, result.end_offset)
            elif result.error == ErrorCode.FENCED_LEADER_EPOCH:
                self._mark_fenced(tp, state.current_leader_epoch, notes)
            else:
                notes.info(f"{result.error.name}; retrying", tp)
                retry.append(tp)
        self._delay(retry, now_ms)
        notes.emit()

    def on_list_offsets_response(self, plan: ListOffsetsPlan, results: Mapping[TopicPartition, LeaderOffsets],
                                 now_ms: int) -> None:
        """Pick a new fetch offset for partitions out of range (Kafka's
        ``fetchOffsetAndTruncate``)."""
        self._done(plan)
        retry = []
        notes = _ResponseNotes("ListOffsets", self.source_broker_id)
        for tp, current_leader_epoch in plan.partitions.items():
            state = self.partition_states.get(tp)
            if (state is None or state.current_leader_epoch != current_leader_epoch
                    or state.state != FetchState.OUT_OF_RANGE):
                continue
            result = results.get(tp, LeaderOffsets(ErrorCode.UNKNOWN_SERVER_ERROR))
            if result.error == ErrorCode.NONE:
                if not self._reset_out_of_range(tp, state, result):
                    retry.append(tp)
            elif result.error == ErrorCode.FENCED_LEADER_EPOCH:
                self._mark_fenced(tp, state.current_leader_epoch, notes)
            else:
                retry.append(tp)
        self._delay(retry, now_ms)
        notes.emit()

    # ------------------------------------------------------------ truncation

    def truncation_offset(self, tp: TopicPartition, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
        """``(offset to truncate to, truncation complete)`` for the leader's answer
        ``(leader_epoch, leader_end_offset)`` — Kafka's
        ``AbstractFetcherThread.getOffsetTruncationState``, rule by rule."""
        partition = self._get_partition(tp)
        log_end_offset = partition.log.log_end_offset
        if leader_end_offset == UNDEFINED_OFFSET:
            return self.partition_states[tp].fetch_offset, True
        if leader_epoch == UNDEFINED_EPOCH:
            return min(leader_end_offset, log_end_offset), True
        follower_epoch, follower_end_offset = partition.log.end_offset_for_epoch(leader_epoch)
        if follower_epoch == UNDEFINED_EPOCH or follower_end_offset == UNDEFINED_OFFSET:
            return min(leader_end_offset, log_end_offset), True
        if follower_epoch != leader_epoch:
            # We never had the leader's epoch: cut back to the end of our largest epoch
            # below it, and ask again with our new latest epoch (KIP-279).
            return min(follower_end_offset, log_end_offset), False
        return min(leader_end_offset, follower_end_offset, log_end_offset), True

    def _truncate_on_epoch(self, tp: TopicPartition, leader_epoch: int, leader_end_offset: int) -> None:
        state = self.partition_states.get(tp)
        if state is None:
            return
        if self._get_partition(tp) is None:
            self._mark_failed(tp, None, "the partition is gone")
            return
        try:
            offset, completed = self.truncation_offset(tp, leader_epoch, leader_end_offset)
        except AssertionError:
            raise
        except Exception as e:    # reading our own epoch cache failed: this partition only
            self._failed_locally(tp, e, f"finding where to truncate (leader epoch {leader_epoch} ends at "
                                        f"{leader_end_offset})")
            return
        logger.info("%s: leader broker %d says epoch %d ends at %d; truncating to %d%s", tp,
                    self.source_broker_id, leader_epoch, leader_end_offset, offset,
                    "" if completed else " and asking again")
        if self._truncate(tp, offset):
            self._finish_truncation(tp, state, completed)

    def _finish_truncation(self, tp: TopicPartition, state: PartitionFetchState, completed: bool) -> None:
        """Kafka's updateFetchOffsetAndMaybeMarkTruncationComplete: fetch from the new log
        end; with truncate-on-fetch keep fetching (the next fetch carries the new last
        fetched epoch), else stay TRUNCATING until the truncation is complete."""
        log = self._get_partition(tp).log
        fetching = self.config.truncate_on_fetch or completed
        self.partition_states[tp] = self._moved(
            tp, state, FetchEvent.TRUNCATED if fetching else FetchEvent.TRUNCATION_INCOMPLETE,
            fetch_offset=log.log_end_offset, last_fetched_epoch=log.latest_epoch)

    def _reset_out_of_range(self, tp: TopicPartition, state: PartitionFetchState, leader: LeaderOffsets) -> bool:
        """Returns False to ask again after a backoff: an unexpected failure here is not
        final (Kafka's ``handleOutOfRangeError``), unlike one in a fetch answer."""
        partition = self._get_partition(tp)
        if partition is None:
            self._mark_failed(tp, None, "the partition is gone")
            return True
        log_end_offset = partition.log.log_end_offset
        try:
            if leader.log_end_offset < log_end_offset:
                # The leader has less than we do (an unclean election): drop our excess.
                logger.warning("%s: leader broker %d ends at %d, below our log end offset %d; truncating",
                               tp, self.source_broker_id, leader.log_end_offset, log_end_offset)
                partition.truncate_to(leader.log_end_offset)
            elif leader.log_start_offset > log_end_offset:
                logger.info("%s: leader broker %d starts at %d, above our log end offset %d", tp,
                            self.source_broker_id, leader.log_start_offset, log_end_offset)
                partition.truncate_fully_and_start_at(leader.log_start_offset)
        except StorageError as e:
            self._mark_failed(tp, e, f"storage error: {e}")
            return True
        except AssertionError:
            raise
        except Exception:
            logger.exception("%s: unexpected error resetting the fetch offset after OFFSET_OUT_OF_RANGE "
                             "(leader log start %d, end %d); asking again", tp, leader.log_start_offset,
                             leader.log_end_offset)
            return False
        log = partition.log
        self._update_and_move_to_end(tp, self._moved(
            tp, state, FetchEvent.RESET, fetch_offset=log.log_end_offset,
            lag=max(0, leader.log_end_offset - log.log_end_offset), delay_until_ms=None,
            last_fetched_epoch=log.latest_epoch))
        return True

    def _truncate(self, tp: TopicPartition, offset: int) -> bool:
        partition = self._get_partition(tp)
        if partition is None:
            self._mark_failed(tp, None, "the partition is gone")
            return False
        try:
            partition.truncate_to(offset)
        except AssertionError:
            raise                 # a broken invariant (IllegalTransition too): the driver stops the broker
        except Exception as e:    # this partition only (Kafka's doTruncate)
            self._failed_locally(tp, e, f"truncating to offset {offset}")
            return False
        return True

    # ------------------------------------------------------------ helpers

    def _latest_epoch(self, tp: TopicPartition) -> int | None:
        partition = self._get_partition(tp)
        return None if partition is None else partition.log.latest_epoch

    def _done(self, plan: Plan) -> None:
        if self.in_flight is plan:
            self.in_flight = None
        self.failed_requests_in_a_row = 0

    @staticmethod
    def _moved(tp: TopicPartition, state: PartitionFetchState, event: FetchEvent, **changes) -> PartitionFetchState:
        """``state`` after ``event`` (``FETCH_TRANSITIONS``), with ``changes`` applied."""
        target = transition(FETCH_TRANSITIONS, state.state, event, f"{tp} fetch state")
        return dataclasses.replace(state, state=target, **changes)

    def _update_and_move_to_end(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        self.partition_states.pop(tp, None)
        self.partition_states[tp] = state

    def _delay(self, topic_partitions: Iterable[TopicPartition], now_ms: int) -> None:
        """Back off (Kafka's delayPartitions): not-yet-delayed partitions wait
        ``replica.fetch.backoff.ms`` and move to the end."""
        for tp in topic_partitions:
            state = self.partition_states.get(tp)
            if state is not None and not state.is_delayed(now_ms):
                self._update_and_move_to_end(tp, dataclasses.replace(
                    state, delay_until_ms=now_ms + self.config.replica_fetch_backoff_ms))

    def _failed_locally(self, tp: TopicPartition, error: Exception, doing: str) -> None:
        """Truncating or appending one partition failed (Kafka's ``markPartitionFailed``
        after ``processPartitionData`` / ``doTruncate`` threw): only this partition stops,
        until new metadata re-adds it. A storage error takes its log directory offline
        (the replica manager's ``on_partition_failed``); anything else is unexpected and
        logged with its traceback. ``AssertionError`` never gets here: it is a bug."""
        if isinstance(error, StorageError):
            self._mark_failed(tp, error, f"storage error {doing}: {error}")
            return
        logger.error("%s: unexpected error %s from broker %d; marking the partition failed", tp, doing,
                     self.source_broker_id, exc_info=error)
        self._mark_failed(tp, error, f"unexpected {type(error).__name__} {doing}: {error}")

    def _mark_fenced(self, tp: TopicPartition, epoch: int, notes: "_ResponseNotes") -> None:
        """The leader fenced our ``epoch``: our metadata is stale. One line for the whole
        response names every such partition."""
        notes.warning("fenced leader epoch; stopped fetching until new metadata", tp, f"epoch {epoch}")
        self._stop(tp, None)

    def _mark_failed(self, tp: TopicPartition, error: Exception | None, reason: str) -> None:
        logger.warning("%s: stop fetching from broker %d (%s); waiting for new metadata", tp,
                       self.source_broker_id, reason)
        self._stop(tp, error)

    def _stop(self, tp: TopicPartition, error: Exception | None) -> None:
        self.partition_states.pop(tp, None)
        self.failed_partitions.add(tp)
        if self._on_partition_failed is not None:
            self._on_partition_failed(tp, error)


class _ResponseNotes:
    """What one response did to its partitions, logged as one line per outcome and
    level: a leader change at 10,000 partitions answers thousands of partitions alike,
    and a line for each held the loop and buried the rest of the log."""

    SHOWN = 5      # partitions named per line; the rest counted

    def __init__(self, api: str, broker_id: int):
        self.api, self.broker_id = api, broker_id
        self._notes: dict[tuple[int, str], list[str]] = {}

    def info(self, outcome: str, tp: TopicPartition, detail: str = "") -> None:
        self._add(logging.INFO, outcome, tp, detail)

    def warning(self, outcome: str, tp: TopicPartition, detail: str = "") -> None:
        self._add(logging.WARNING, outcome, tp, detail)

    def _add(self, level: int, outcome: str, tp: TopicPartition, detail: str) -> None:
        self._notes.setdefault((level, outcome), []).append(f"{tp} ({detail})" if detail else str(tp))

    def emit(self) -> None:
        for (level, outcome), partitions in self._notes.items():
            more = len(partitions) - self.SHOWN
            named = ", ".join(partitions[:self.SHOWN]) + (f" and {more} more" if more > 0 else "")
            logger.log(level, "%s from broker %d: %s: %d partition%s: %s", self.api, self.broker_id, outcome,
                       len(partitions), "" if len(partitions) == 1 else "s", named)
        self._notes.clear()


# --------------------------------------------------------------------- the fetcher manager


def fetcher_id_for(tp: TopicPartition, num_replica_fetchers: int) -> int:
    """Kafka's spread: ``abs(31 * topic.hashCode() + partition) % num.replica.fetchers``
    with Java's 32-bit String hash, so the same partitions share a fetcher as in Kafka
    (and the choice does not depend on Python's per-process string hashing)."""
    h = 0
    for unit in _utf16_units(tp.topic):
        h = (31 * h + unit) & 0xFFFFFFFF
    value = (31 * _int32(h) + tp.partition) & 0xFFFFFFFF
    value = _int32(value)
    return (value & 0x7FFFFFFF if value == -2**31 else abs(value)) % num_replica_fetchers


def _int32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def _utf16_units(text: str):
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        yield (data[i] << 8) | data[i + 1]


@dataclass(eq=False)
class ReplicaFetcherManager:
    """The fetchers of one broker, by (source broker, fetcher id) (Kafka's
    ``ReplicaFetcherManager``).

    ``on_fetcher_added`` / ``on_fetcher_removed`` let the driver start and stop the
    task that runs a fetcher.
    """

    broker_id: int
    config: FetcherConfig
    get_partition: Callable[[TopicPartition], object | None]
    broker_epoch: Callable[[], int] = lambda: -1
    on_high_watermark_moved: Callable[[list[TopicPartition]], None] | None = None
    on_partition_failed: Callable[[TopicPartition, Exception | None], None] | None = None
    on_fetcher_added: Callable[[FetcherState], None] | None = None
    on_fetcher_removed: Callable[[FetcherState], None] | None = None
    quota: object = None        # the follower replication throttle (broker/replication_quota.py), or None
    fetchers: dict[tuple[int, int], FetcherState] = field(default_factory=dict)

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id_for(tp, self.config.num_replica_fetchers)

    def add_fetcher_for_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> None:
        by_fetcher: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, initial in initial_states.items():
            by_fetcher.setdefault((initial.leader_id, self.fetcher_id(tp)), {})[tp] = initial
        for key, states in by_fetcher.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = FetcherState(key[0], key[1], self.broker_id, self.config, self.get_partition,
                                       self.broker_epoch, self.on_high_watermark_moved, self.on_partition_failed,
                                       self.quota)
                self.fetchers[key] = fetcher
                logger.info("broker %d: started fetcher %d for source broker %d", self.broker_id, key[1], key[0])
                if self.on_fetcher_added is not None:
                    self.on_fetcher_added(fetcher)
            fetcher.add_partitions(states)

    def remove_fetcher_for_partitions(self, topic_partitions: Iterable[TopicPartition]
                                      ) -> dict[TopicPartition, PartitionFetchState]:
        topic_partitions = set(topic_partitions)
        removed = {}
        for fetcher in self.fetchers.values():
            removed.update(fetcher.remove_partitions(topic_partitions))
        return removed

    def shutdown_idle_fetchers(self) -> list[FetcherState]:
        idle = [key for key, fetcher in self.fetchers.items() if not fetcher.partition_states]
        stopped = [self.fetchers.pop(key) for key in idle]
        for fetcher in stopped:
            logger.info("broker %d: stopped idle fetcher %d for source broker %d", self.broker_id,
                        fetcher.fetcher_id, fetcher.source_broker_id)
            if self.on_fetcher_removed is not None:
                self.on_fetcher_removed(fetcher)
        return stopped

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            state = fetcher.fetch_state(tp)
            if state is not None:
                return state
        return None

    def fetcher_of(self, tp: TopicPartition) -> FetcherState | None:
        for fetcher in self.fetchers.values():
            if tp in fetcher.partition_states:
                return fetcher
        return None

    @property
    def failed_partitions(self) -> set[TopicPartition]:
        return set().union(*(f.failed_partitions for f in self.fetchers.values()))

    def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove_partitions(list(fetcher.partition_states))
        self.shutdown_idle_fetchers()
