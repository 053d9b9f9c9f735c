"""The partitions a broker hosts and the produce/fetch paths (Kafka's ``ReplicaManager``).

Theory of operation. ``partitions`` maps a TopicPartition to its hosted state:
a ``Partition`` (online) or ``OFFLINE`` (its log directory failed). Metadata
changes arrive as become-leader / become-follower calls (``apply_partition_states``,
Kafka's ``applyDelta``). ``append_records`` and ``fetch_messages`` validate, act on the local
logs, and either answer at once or park a delayed operation in a purgatory
(``purgatory.py``); events that can satisfy waiters call ``check_and_complete``. Results
are delivered through callbacks so this stays free of asyncio; the shell turns
them into futures and calls ``on_tick(now_ms)`` for expiry and periodic work.

Follower side: ``fetcher_manager`` (``fetcher.py``) holds this broker's fetchers.
Becoming leader removes a partition from them; becoming follower with a new
leader epoch re-adds it at Kafka's initial fetch offset (``initial_fetch_offset``)
and completes the partition's delayed operations (they fail with
``NOT_LEADER_OR_FOLLOWER``). During a controlled shutdown
(``begin_controlled_shutdown``) a follower partition that has no leader or whose ISR
this broker has left is removed from its fetcher instead, and stays removed. The
server drives each fetcher (``FetcherState.poll``
/ ``on_response``) and answers other brokers' fetcher requests with
``fetch_messages``, ``last_offset_for_leader_epoch`` and ``fetch_leader_offsets``.
A consumer's Fetch v11+ (``FetchParams.fetch_only_leader`` false) may also read a
follower partition, up to its high watermark (KIP-392; the leader's preferred read
replica answer is decided in broker/requests/fetch.py); with a replica selector,
``high_watermark_unsent`` answers a follower's waiting fetch once the leader's high
watermark moved past what it was last sent.

ISR changes: leaders put ``IsrProposal``s in ``pending_isr_proposals`` (a plain
dict, one entry per partition); the server drains it into batched AlterPartition
requests and routes each answer to ``on_alter_partition_response``.
"""

from __future__ import annotations

import enum
import logging
from typing import Callable

from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode, KafkaError, RecordValidationError, StorageError
from tidelog.core.ids import TopicPartition, partition_summary
from tidelog.core.states import transition
from tidelog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tidelog.replication.delayed import (
    DelayedFetch,
    DelayedProduce,
    FetchParams,
    ProducePartitionStatus,
)
from tidelog.replication.fetcher import (
    EpochEndOffset,
    FetcherConfig,
    InitialFetchState,
    LeaderOffsets,
    OffsetsForLeaderEpochPartition,
    ReplicaFetcherManager,
)
from tidelog.replication.partition import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    Isolation,
    IsrProposal,
    IsrState,
    Partition,
    PartitionState,
    ReadResult,
    ReplicationSettings,
)
from tidelog.replication.purgatory import Purgatory, PurgatoryFullError

logger = logging.getLogger("tidelog.replica_manager")

OFFLINE = "offline"


class Hosting(enum.Enum):
    """How this broker holds a partition (Kafka's HostedPartition: None / Online / Offline)."""

    NONE = "none"
    ONLINE = "online"
    OFFLINE = "offline"


class HostingEvent(enum.Enum):
    CREATE = "create"                    # become leader / follower: the log is opened or created
    STORAGE_FAILURE = "storage failure"  # its log directory failed (Kafka's markPartitionOffline)
    STOP = "stop"                        # no longer a replica (deleted, reassigned away)


HOSTING_TRANSITIONS = {
    Hosting.NONE: {HostingEvent.CREATE: Hosting.ONLINE, HostingEvent.STORAGE_FAILURE: Hosting.OFFLINE,
                   HostingEvent.STOP: Hosting.NONE},
    Hosting.ONLINE: {HostingEvent.STORAGE_FAILURE: Hosting.OFFLINE, HostingEvent.STOP: Hosting.NONE},
    # An offline partition stays offline until the process restarts (the directory
    # is not re-read while running, as in Kafka); it can still be deleted.
    Hosting.OFFLINE: {HostingEvent.STORAGE_FAILURE: Hosting.OFFLINE, HostingEvent.STOP: Hosting.NONE},
}
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager, clock: Clock,
                 settings_for: Callable[[str], ReplicationSettings],
                 log_config_for: Callable[[str], object] = lambda topic: None,
                 alive_broker_epoch: Callable[[int], int | None] = lambda b: None,
                 fetcher_config: FetcherConfig | None = None,
                 is_broker_alive: Callable[[int], bool] | None = None):
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.clock = clock
        self._settings_for = settings_for
        self._log_config_for = log_config_for
        self._alive_broker_epoch = alive_broker_epoch
        # Whether a leader can be fetched from (Kafka: it is in the metadata image with
        # an endpoint). Default: any broker id >= 0.
        self._is_broker_alive = is_broker_alive or (lambda broker_id: broker_id >= 0)
        self.partitions: dict[TopicPartition, Partition | str] = {}
        # Whether the metadata knows a partition this broker does not host (set by the
        # broker): a request for it is answered NOT_LEADER_OR_FOLLOWER, as Kafka's
        # getPartitionOrError answers (not hosted yet, or no longer a replica here).
        self.in_metadata: Callable[[TopicPartition], bool] = lambda topic_partition: False
        # The same entries by topic, in the same order (the coordinators look at their
        # internal topic's partitions every tick: O(its partitions), not O(all)).
        self._partitions_by_topic: dict[str, dict[int, Partition | str]] = {}
        self.produce_purgatory = Purgatory("produce")
        self.fetch_purgatory = Purgatory("fetch")
        self.pending_isr_proposals: dict[TopicPartition, IsrProposal] = {}
        # This broker's epoch from its registration; sent in follower fetches (v15+).
        self.broker_epoch = -1
        # KIP-392: set when a replica selector sends consumers to followers; a follower's
        # waiting fetch is then answered as soon as the high watermark it last got is stale.
        self.prompt_follower_high_watermark = False
        # Set by begin_controlled_shutdown: followers out of the ISR stop fetching.
        self.in_controlled_shutdown = False
        # Plain event counts for server/metrics.py (Kafka's IsrShrinksPerSec / IsrExpandsPerSec,
        # and BrokerTopicMetrics' BytesInPerSec / MessagesInPerSec by topic).
        self.isr_shrinks = self.isr_expands = 0
        self.bytes_in: dict[str, int] = {}
        self.messages_in: dict[str, int] = {}
        self.fetcher_config = fetcher_config or FetcherConfig()
        self.fetcher_manager = ReplicaFetcherManager(
            broker_id, self.fetcher_config, self.get_partition, lambda: self.broker_epoch,
            self._on_follower_high_watermark_moved, self._on_fetcher_partition_failed)

    # ------------------------------------------------------------ hosting

    def get_partition(self, topic_partition: TopicPartition) -> Partition | None:
        hosted = self.partitions.get(topic_partition)
        return hosted if isinstance(hosted, Partition) else None

    def _partition_or_error(self, topic_partition: TopicPartition) -> Partition | ErrorCode:
        hosted = self.partitions.get(topic_partition)
        if hosted is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER if self.in_metadata(topic_partition) \
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if hosted == OFFLINE:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return hosted

    def partition_error(self, topic_partition: TopicPartition) -> ErrorCode:
        """Why ``get_partition`` returned None: unknown, or offline."""
        hosted = self._partition_or_error(topic_partition)
        return hosted if isinstance(hosted, ErrorCode) else ErrorCode.NONE

    def apply_partition_states(self, states: dict[TopicPartition, PartitionState]) -> None:
        """Become leader or follower for each partition (Kafka's ``Partition.makeLeader`` /
        ``makeFollower``)."""
        now_ms = self.clock.monotonic_ms()
        leaders: dict[TopicPartition, PartitionState] = {}
        followers: dict[TopicPartition, PartitionState] = {}
        for topic_partition, state in states.items():
            (leaders if state.leader == self.broker_id else followers)[topic_partition] = state
        self._make_leaders(leaders, now_ms)
        restart = self._make_followers(followers)
        for topic_partition in states:
            partition = self.get_partition(topic_partition)
            if partition is not None and partition.pending_proposal is None:
                self.pending_isr_proposals.pop(topic_partition, None)   # replaced by metadata
        self._wake_all(states)   # delayed operations see the new role
        self._start_fetching(restart)
        self.fetcher_manager.shutdown_idle_fetchers()

    def _make_leaders(self, leaders: dict[TopicPartition, PartitionState], now_ms: int) -> None:
        """Leaders: stop fetching first, then take over (Kafka's ``makeLeaders``)."""
        self.fetcher_manager.remove_fetcher_for_partitions(leaders)
        became: list[TopicPartition] = []
        for topic_partition, state in leaders.items():
            partition = self._hosted_for_state(topic_partition)
            if partition is None:
                continue
            pending, proposed = partition.isr_state, partition.pending_isr
            try:
                became_leader = partition.make_leader(state, now_ms)
            except StorageError as e:   # its log directory failed (Kafka: markPartitionOffline)
                logger.error("cannot become leader of %s: %s", topic_partition, e)
                self.mark_offline(topic_partition)
                continue
            if proposed is not None and partition.pending_isr is None and partition.isr == proposed:
                self._count_isr_change(pending)      # the metadata brought our proposal before its answer
            if became_leader:
                became.append(topic_partition)
                logger.debug("became leader of %s at leader epoch %d with ISR %s", topic_partition,
                          state.leader_epoch, list(state.isr))
        if became:
            logger.info("became leader of %s", partition_summary(became))

    def _make_followers(self, followers: dict[TopicPartition, PartitionState]) -> dict[TopicPartition, Partition]:
        """Followers: every state is applied; only a new leader epoch restarts fetching
        (Kafka's ``makeFollowers``), so this stops those fetchers and returns those
        partitions. In a controlled shutdown, a partition without a leader or whose ISR
        this broker has left stops fetching and is not restarted (Kafka's
        applyLocalFollowersDelta)."""
        restart: dict[TopicPartition, Partition] = {}
        stop_fetching: list[TopicPartition] = []
        for topic_partition, state in followers.items():
            partition = self._hosted_for_state(topic_partition)
            if partition is None:
                continue
            new_leader_epoch = partition.make_follower(state)
            if self.in_controlled_shutdown and (state.leader < 0 or self.broker_id not in state.isr):
                stop_fetching.append(topic_partition)
            elif new_leader_epoch:
                restart[topic_partition] = partition
        self.fetcher_manager.remove_fetcher_for_partitions([*restart, *stop_fetching])
        if stop_fetching:
            logger.info("controlled shutdown: stopped fetching %s, without a leader or out of the ISR",
                     partition_summary(stop_fetching))
        return restart

    def _start_fetching(self, restart: dict[TopicPartition, Partition]) -> None:
        """Fetch each partition from its leader, from ``initial_fetch_offset``; a partition
        whose leader is not alive waits (Kafka's ``addFetcherForPartitions``)."""
        initial_states = {}
        waiting: list[TopicPartition] = []
        for topic_partition, partition in restart.items():
            if self._is_broker_alive(partition.leader):
                initial_states[topic_partition] = InitialFetchState(
                    partition.leader, partition.leader_epoch, self.initial_fetch_offset(partition.log))
                logger.debug("following broker %d for %s at leader epoch %d from offset %d", partition.leader,
                          topic_partition, partition.leader_epoch,
                          initial_states[topic_partition].initial_fetch_offset)
            else:
                waiting.append(topic_partition)
                logger.debug("%s has no live leader (%d) at leader epoch %d; waiting", topic_partition,
                          partition.leader, partition.leader_epoch)
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic_partition, initial in initial_states.items():
            by_leader.setdefault(initial.leader_id, []).append(topic_partition)
        for leader in sorted(by_leader):
            logger.info("following broker %d for %s", leader, partition_summary(by_leader[leader]))
        if waiting:
            logger.info("no live leader yet for %s; waiting", partition_summary(waiting))
        self.fetcher_manager.add_fetcher_for_partitions(initial_states)

    def begin_controlled_shutdown(self) -> None:
        """The broker asked the controller to move its leaderships and ISR memberships
        away (Kafka's ``ReplicaManager.beginControlledShutdown``): from now on, a follower
        partition whose new state has no leader or leaves this broker out of the ISR stops
        fetching, and is not restarted by a later leader epoch."""
        self.in_controlled_shutdown = True

    def _hosted_for_state(self, topic_partition: TopicPartition) -> Partition | None:
        """The partition, created (with its log) if not hosted yet; None if offline."""
        hosted = self.partitions.get(topic_partition)
        if hosted == OFFLINE:
            return None
        if hosted is None:
            try:
                log_ = self.log_manager.get_or_create_log(
                    topic_partition, self._log_config_for(topic_partition.topic))
            except KafkaError as e:   # StorageError / OfflineLogDirError
                logger.error("cannot create the log of %s: %s", topic_partition, e)
                self.mark_offline(topic_partition)
                return None
            hosted = Partition(topic_partition, self.broker_id, log_,
                               self._settings_for(topic_partition.topic), self._alive_broker_epoch)
            self._host(topic_partition, HostingEvent.CREATE, hosted)
        else:
            hosted.settings = self._settings_for(topic_partition.topic)
        return hosted

    def initial_fetch_offset(self, log_) -> int:
        """Where a new follower starts (Kafka's initialFetchOffset): its log end offset
        when truncate-on-fetch can check it (the log holds a leader epoch), else its
        high watermark, from which a TRUNCATING partition truncates."""
        if self.fetcher_config.truncate_on_fetch and log_.latest_epoch is not None:
            return log_.log_end_offset
        return log_.high_watermark

    def stop_partitions(self, topic_partitions, delete: bool) -> None:
        topic_partitions = list(topic_partitions)
        self.fetcher_manager.remove_fetcher_for_partitions(topic_partitions)
        for topic_partition in topic_partitions:
            hosted = self.partitions.get(topic_partition)
            self._host(topic_partition, HostingEvent.STOP, None)
            self.pending_isr_proposals.pop(topic_partition, None)
            if delete and isinstance(hosted, Partition):
                self.log_manager.delete_log(topic_partition)
        self._wake_all(topic_partitions)      # waiting operations answer UNKNOWN_TOPIC_OR_PARTITION
        self.fetcher_manager.shutdown_idle_fetchers()

    def mark_offline(self, topic_partition: TopicPartition) -> None:
        self.fetcher_manager.remove_fetcher_for_partitions([topic_partition])
        self._host(topic_partition, HostingEvent.STORAGE_FAILURE, OFFLINE)
        self.pending_isr_proposals.pop(topic_partition, None)
        self._wake(topic_partition)

    def hosting(self, topic_partition: TopicPartition) -> Hosting:
        hosted = self.partitions.get(topic_partition)
        return Hosting.NONE if hosted is None else Hosting.OFFLINE if hosted == OFFLINE else Hosting.ONLINE

    def _host(self, topic_partition: TopicPartition, event: HostingEvent, hosted: "Partition | str | None") -> None:
        """The one place hosting changes (``HOSTING_TRANSITIONS``)."""
        target = transition(HOSTING_TRANSITIONS, self.hosting(topic_partition), event, f"{topic_partition} hosting")
        assert (target == Hosting.NONE) == (hosted is None) and (target == Hosting.OFFLINE) == (hosted == OFFLINE)
        by_topic = self._partitions_by_topic.setdefault(topic_partition.topic, {})
        if hosted is None:
            self.partitions.pop(topic_partition, None)
            by_topic.pop(topic_partition.partition, None)
            if not by_topic:
                del self._partitions_by_topic[topic_partition.topic]
        else:
            self.partitions[topic_partition] = hosted
            by_topic[topic_partition.partition] = hosted

    def partitions_of(self, topic: str) -> dict[int, "Partition | str"]:
        """The hosted partitions of ``topic`` by index (``partitions``' entries, in its
        order); read-only."""
        return self._partitions_by_topic.get(topic, {})

    def wake(self, topic_partition: TopicPartition) -> None:
        """Let delayed produce and fetch operations on the partition look again
        (after an HW, ISR or role change the caller made)."""
        self._wake(topic_partition)

    def _wake(self, topic_partition: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(topic_partition)
        self.fetch_purgatory.check_and_complete(topic_partition)

    def wake_all(self, topic_partitions) -> None:
        self._wake_all(topic_partitions)

    def _wake_all(self, topic_partitions) -> None:
        """``_wake`` for many partitions, each waiting operation tried once (linear in
        the partitions, where waking them one by one is quadratic: purgatory.py)."""
        self.produce_purgatory.check_and_complete_all(topic_partitions)
        self.fetch_purgatory.check_and_complete_all(topic_partitions)

    # ------------------------------------------------------------ produce

    def append_records(self, required_acks: int, timeout_ms: int,
                       entries: dict[TopicPartition, bytes],
                       on_done: Callable[[dict], None], internal: bool = False,
                       from_coordinator: bool = False) -> None:
        """Kafka's ``ReplicaManager.appendRecords``. ``on_done({tp: response dict})`` is called
        once (maybe later)."""
        if required_acks not in (-1, 0, 1):
            on_done({tp: _produce_response(ErrorCode.INVALID_REQUIRED_ACKS) for tp in entries})
            return
        responses: dict[TopicPartition, dict] = {}
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for topic_partition, records in entries.items():
            if topic_partition.topic.startswith("__") and not internal:
                responses[topic_partition] = _produce_response(ErrorCode.INVALID_TOPIC_EXCEPTION)
                continue
            partition = self._partition_or_error(topic_partition)
            if isinstance(partition, ErrorCode):
                responses[topic_partition] = _produce_response(partition)
                continue
            try:
                info = partition.append_records_to_leader(records, required_acks, self.clock.monotonic_ms(),
                                                          from_coordinator)
            except KafkaError as e:
                # Refused records are the client's affair: never logged above DEBUG (KIP-467:
                # the response names them, record_errors holding each one's index and reason).
                logger.debug("produce to %s refused: %s", topic_partition, e)
                # Only refused records come with a message, as in Kafka (its hasCustomErrorMessage):
                # a client shows the error code's own text for the rest.
                validation = isinstance(e, RecordValidationError)
                responses[topic_partition] = _produce_response(e.error_code, str(e) if validation else None,
                                                               getattr(e, "record_errors", ()))
                continue
            except OSError as e:
                logger.error("log directory failure appending to %s: %s", topic_partition, e)
                self.mark_offline(topic_partition)
                responses[topic_partition] = _produce_response(ErrorCode.KAFKA_STORAGE_ERROR)
                continue
            topic = topic_partition.topic
            self.bytes_in[topic] = self.bytes_in.get(topic, 0) + len(records)
            self.messages_in[topic] = self.messages_in.get(topic, 0) + info.record_count
            response = _produce_response(ErrorCode.NONE)
            response.update(base_offset=info.first_offset, log_append_time=info.log_append_time,
                            log_start_offset=partition.log.log_start_offset)
            responses[topic_partition] = response
            statuses[topic_partition] = ProducePartitionStatus(info.last_offset + 1, response)
            partition.maybe_increment_leader_high_watermark(self.clock.monotonic_ms())
            self._wake(topic_partition)
        if required_acks == -1 and statuses:
            operation = DelayedProduce(self.clock.monotonic_ms() + timeout_ms, statuses,
                                       self.get_partition, lambda done: on_done({**responses, **done}))
            try:
                self.produce_purgatory.try_complete_else_watch(operation, list(statuses))
            except PurgatoryFullError:
                for status in statuses.values():
                    status.response["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
                on_done(responses)
            return
        on_done(responses)

    # -------------------------------------------------------------- fetch

    def fetch_messages(self, params: FetchParams, on_done: Callable[[dict], None]) -> None:
        """Kafka's ``ReplicaManager.fetchMessages``. ``on_done({tp: ReadResult})`` is called
        once (maybe later).

        A fetch that waits is read again when it completes (Kafka's ``DelayedFetch.onComplete``)
        — except when it expires *unwoken*: no append, high-watermark, role or leader change
        on any of its partitions tried it while it waited, its arrival read found nothing
        to send and moved no high watermark (a follower's fetch that completes the high
        watermark read the old one: the re-read tells it the new one at once). Its answer
        is then that arrival read, as if it had been computed on arrival and spent the
        wait on the wire; every value in it was true then, and the follower bookkeeping
        was done then. That halves the work of the idle follower fetches of a big cluster
        (every partition of the session read twice per ``replica.fetch.wait.max.ms``;
        docs/replication.md)."""
        results, moved = self._read(params)
        bytes_readable = sum(r.records.length for r in results.values() if r.records is not None)
        errored = any(r.error != ErrorCode.NONE or r.diverging_epoch for r in results.values())
        if (params.max_wait_ms <= 0 or not params.partitions or bytes_readable >= params.min_bytes
                or errored):
            on_done(results)
            return

        def complete() -> None:       # DelayedFetch.on_complete
            if operation.expired and not operation.woken and not moved and bytes_readable == 0:
                on_done(_unread(results))
            else:
                on_done(self._read(params)[0])
        operation = DelayedFetch(self.clock.monotonic_ms() + params.max_wait_ms, params,
                                 self._bytes_available, complete)
        try:
            self.fetch_purgatory.try_complete_else_watch(operation, list(params.partitions))
        except PurgatoryFullError:
            on_done(results)

    def _read(self, params: FetchParams) -> tuple[dict, bool]:
        """The read, and whether it moved a high watermark of its own partitions (a
        follower's fetch does, after reading: its results carry the old one)."""
        results = {}
        is_follower = params.replica_id >= 0
        now_ms = self.clock.monotonic_ms()
        remaining = params.max_bytes
        woken: list[TopicPartition] = []     # a follower's fetch moved their high watermark
        for topic_partition, request in params.partitions.items():
            partition = self._partition_or_error(topic_partition)
            if isinstance(partition, ErrorCode):
                results[topic_partition] = ReadResult(partition)
                continue
            leader_log_end_offset = partition.log.log_end_offset
            try:
                result = partition.read_records(
                    request.fetch_offset, min(request.max_bytes, max(remaining, 0)),
                    Isolation.LOG_END if is_follower else params.isolation,
                    request.current_leader_epoch, request.last_fetched_epoch,
                    fetch_only_from_leader=params.fetch_only_leader, min_one_batch=(remaining == params.max_bytes),
                    replica_id=params.replica_id)
            except KafkaError as e:
                result = ReadResult(e.error_code)
            if (params.leader_throttle is not None and result.records is not None and result.error == ErrorCode.NONE
                    and result.diverging_epoch is None and params.leader_throttle(topic_partition, partition)):
                result.records = None       # throttled: the offsets, no records (Kafka: an empty set)
            if result.records is not None:
                remaining -= result.records.length
            if is_follower and result.error == ErrorCode.NONE and result.diverging_epoch is None:
                try:
                    moved = partition.update_follower_fetch_state(
                        params.replica_id, request.fetch_offset, request.log_start_offset, now_ms,
                        leader_log_end_offset, params.broker_epoch)
                except KafkaError as e:
                    result = ReadResult(e.error_code)
                    moved = False
                else:
                    partition.note_high_watermark_sent(params.replica_id, result.high_watermark)
                    proposal = partition.maybe_expand_isr(params.replica_id)
                    if proposal is not None:
                        self.pending_isr_proposals[topic_partition] = proposal
                if moved:
                    woken.append(topic_partition)
            results[topic_partition] = result
        if woken:       # once for the whole fetch: a rejoining follower moves all its partitions at once
            self._wake_all(woken)
            self._drop_offline_reads(results)
        return results, bool(woken)

    def _drop_offline_reads(self, results: dict) -> None:
        """A write made while reading (a follower's fetch moving a high watermark
        completes produces and checkpoints) may have failed a log directory: its logs
        are closed, and a slice read from one of them before can no longer be read. It
        answers KAFKA_STORAGE_ERROR, as the partition will from now on."""
        for topic_partition, result in results.items():
            if result.records is not None and self.log_manager.is_offline(topic_partition):
                results[topic_partition] = ReadResult(ErrorCode.KAFKA_STORAGE_ERROR)

    def _bytes_available(self, topic_partition, request, params: FetchParams) -> int | None:
        """What a waiting fetch could read of one partition now (Kafka's
        ``DelayedFetch.tryComplete``), or None when it must be answered at once: an error,
        a role or leader-epoch change, the fetch offset out of range, or a log that no
        longer agrees with the fetcher's last fetched epoch."""
        partition = self._partition_or_error(topic_partition)
        if isinstance(partition, ErrorCode) or (params.fetch_only_leader and not partition.is_leader):
            return None
        if params.replica_id >= 0 and self.high_watermark_unsent(partition, params.replica_id):
            return None
        if (request.current_leader_epoch not in (None, -1)
                and request.current_leader_epoch != partition.leader_epoch):
            return None
        log_ = partition.log
        end_offset = (log_.log_end_offset if params.replica_id >= 0 else
                      log_.last_stable_offset if params.isolation == Isolation.TXN_COMMITTED else log_.high_watermark)
        if request.fetch_offset > end_offset or request.fetch_offset < log_.log_start_offset:
            return None
        last_fetched_epoch = request.last_fetched_epoch
        if last_fetched_epoch is not None and last_fetched_epoch >= 0:
            # Kafka's case H: the epoch the fetcher last fetched is gone or ends before its
            # fetch offset (the log diverged while the fetch waited). Answer now, so that the
            # follower learns the diverging epoch and truncates at once, not after the max wait.
            epoch, epoch_end_offset = log_.end_offset_for_epoch(last_fetched_epoch)
            if (epoch == UNDEFINED_EPOCH or epoch_end_offset == UNDEFINED_OFFSET
                    or epoch < last_fetched_epoch or epoch_end_offset < request.fetch_offset):
                return None
        if request.fetch_offset == end_offset:
            return 0
        if params.leader_throttle is not None and params.leader_throttle(topic_partition, partition):
            return 0        # held back by a replication throttle: its bytes do not complete the fetch
        try:
            data = log_.read(request.fetch_offset, request.max_bytes,
                             max_offset=None if params.replica_id >= 0 else end_offset, min_one_batch=True)
        except KafkaError:   # the log directory failed (as in Kafka's DelayedFetch): answer now
            return None
        return data.records.length

    def high_watermark_unsent(self, partition: Partition, replica_id: int) -> bool:
        """KIP-392: consumers read from followers up to the follower's high watermark, which
        it learns from its fetches' answers. Kafka lets a follower's fetch wait for new
        records (up to ``replica.fetch.wait.max.ms``) even when the high watermark moved; with
        a replica selector configured tidelog answers it at once when the leader's high
        watermark is above the one that follower was last sent, so consumers of the
        follower see new records about one fetch round trip after the leader's consumers."""
        if not self.prompt_follower_high_watermark or not partition.is_leader:
            return False
        state = partition.replica_states.get(replica_id)
        return state is not None and partition.log.high_watermark > state.last_sent_high_watermark

    # ------------------------------------------- requests from other brokers' fetchers

    def last_offset_for_leader_epoch(self, requests: dict[TopicPartition, OffsetsForLeaderEpochPartition]
                                     ) -> dict[TopicPartition, EpochEndOffset]:
        """OffsetsForLeaderEpoch from a follower (KIP-101): where each
        requested epoch ends in the leader's log."""
        out = {}
        for topic_partition, request in requests.items():
            partition = self._partition_or_error(topic_partition)
            if isinstance(partition, ErrorCode):
                out[topic_partition] = EpochEndOffset(partition)
                continue
            error, epoch, end_offset = partition.last_offset_for_leader_epoch(
                request.current_leader_epoch, request.leader_epoch)
            out[topic_partition] = EpochEndOffset(error, epoch, end_offset)
        return out

    def fetch_leader_offsets(self, requests: dict[TopicPartition, int]) -> dict[TopicPartition, LeaderOffsets]:
        """A follower's ListOffsets earliest + latest (when it is out of range): the leader's
        log start and log end offsets, after the epoch and role checks."""
        out = {}
        for topic_partition, current_leader_epoch in requests.items():
            partition = self._partition_or_error(topic_partition)
            if isinstance(partition, ErrorCode):
                out[topic_partition] = LeaderOffsets(partition)
                continue
            # The same rule a follower's ListOffsets meets over the wire (isolation None: the LEO).
            error, _, log_start_offset, _ = partition.fetch_offset_for_timestamp(
                EARLIEST_TIMESTAMP, None, current_leader_epoch)
            if error == ErrorCode.NONE:
                error, _, log_end_offset, _ = partition.fetch_offset_for_timestamp(
                    LATEST_TIMESTAMP, None, current_leader_epoch)
                out[topic_partition] = LeaderOffsets(error, log_start_offset, log_end_offset)
            else:
                out[topic_partition] = LeaderOffsets(error)
        return out

    def fetch_offset_for_timestamp(self, topic_partition: TopicPartition, timestamp: int, replica_id: int,
                                   isolation: Isolation, current_leader_epoch: int = -1
                                   ) -> tuple[ErrorCode, int, int, int]:
        """ListOffsets for anyone (Kafka's ``ReplicaManager.fetchOffsetForTimestamp``):
        a consumer reads up to its isolation's bound, a replica up to the log end; only
        the debugging replica id (-2) may ask a follower. Returns ``(error, timestamp,
        offset, leader epoch)``."""
        partition = self._partition_or_error(topic_partition)
        if isinstance(partition, ErrorCode):
            return partition, -1, -1, -1
        return partition.fetch_offset_for_timestamp(
            timestamp, isolation if replica_id == CONSUMER_REPLICA_ID else None, current_leader_epoch,
            fetch_only_from_leader=replica_id != DEBUGGING_REPLICA_ID)

    # ------------------------------------------------------ follower callbacks

    def _on_follower_high_watermark_moved(self, topic_partitions: list[TopicPartition]) -> None:
        for topic_partition in topic_partitions:
            self.fetch_purgatory.check_and_complete(topic_partition)

    def _on_fetcher_partition_failed(self, topic_partition: TopicPartition, error: Exception | None) -> None:
        if isinstance(error, StorageError):
            self.mark_offline(topic_partition)

    # ------------------------------------------------------ AlterPartition

    def drain_isr_proposals(self) -> dict[TopicPartition, IsrProposal]:
        """Take every queued proposal (to send as one batched AlterPartition)."""
        proposals, self.pending_isr_proposals = self.pending_isr_proposals, {}
        return proposals

    def on_alter_partition_response(self, topic_partition: TopicPartition, error: ErrorCode,
                                    leader_epoch: int = -1, partition_epoch: int = -1,
                                    isr: tuple[int, ...] = (), proposal: IsrProposal | None = None,
                                    woken: list[TopicPartition] | None = None) -> bool:
        """Route one partition's AlterPartition answer to its ``Partition``. A retriable
        error queues the same proposal again; returns whether it did. With ``woken``, a
        partition whose waiting operations must look again is added to it (the caller
        wakes them all at once: ``wake_all``) instead of woken here."""
        partition = self.get_partition(topic_partition)
        if partition is None:
            return False
        before = partition.log.high_watermark
        pending = partition.isr_state
        retry = partition.on_alter_partition_response(error, leader_epoch, partition_epoch, tuple(isr),
                                                      self.clock.monotonic_ms(), proposal)
        if error == ErrorCode.NONE and partition.isr_state is not pending:   # accepted
            self._count_isr_change(pending)
        if retry and partition.pending_proposal is not None:
            self.pending_isr_proposals.setdefault(topic_partition, partition.pending_proposal)
        if partition.log.high_watermark != before or error == ErrorCode.NONE:
            if woken is None:
                self._wake(topic_partition)
            else:
                woken.append(topic_partition)
        return retry

    def _count_isr_change(self, pending: IsrState) -> None:
        """Kafka's markShrink / markExpand: an ISR change this leader proposed took effect."""
        self.isr_shrinks += pending is IsrState.PENDING_SHRINK
        self.isr_expands += pending is IsrState.PENDING_EXPAND

    # ------------------------------------------------------ delete records

    def delete_records(self, topic_partition: TopicPartition, offset: int) -> tuple[ErrorCode, int]:
        """Raise the log start offset on the leader (KIP-107 DeleteRecords): ``offset`` -1
        means the high watermark; above the high watermark is out of range.
        Returns (error, new low watermark)."""
        partition = self._partition_or_error(topic_partition)
        if isinstance(partition, ErrorCode):
            return partition, -1
        if not partition.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        log_ = partition.log
        target = log_.high_watermark if offset == -1 else offset
        if target < 0 or target > log_.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        if log_.maybe_increment_log_start_offset(target):
            logger.info("log start offset of %s moved to %d by DeleteRecords", topic_partition, target)
        self._wake(topic_partition)
        return ErrorCode.NONE, log_.log_start_offset

    # ----------------------------------------------------------- periodic

    def on_tick(self, now_ms: int) -> None:
        self.produce_purgatory.expire(now_ms)
        self.fetch_purgatory.expire(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.produce_purgatory.next_deadline_ms(),
                                 self.fetch_purgatory.next_deadline_ms()) if d is not None]
        return min(deadlines) if deadlines else None

    def maybe_shrink_isr(self) -> None:
        now_ms = self.clock.monotonic_ms()
        for topic_partition, hosted in self.partitions.items():
            if isinstance(hosted, Partition):
                proposal = hosted.maybe_shrink_isr(now_ms)
                if proposal is not None:
                    logger.info("proposing ISR %s for %s (shrink)", list(proposal.new_isr), topic_partition)
                    self.pending_isr_proposals[topic_partition] = proposal

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.log.high_watermark for tp, p in self.partitions.items() if isinstance(p, Partition)}

    def shutdown(self) -> None:
        self.fetcher_manager.shutdown()
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()


def _unread(results: dict) -> dict:
    """A delayed fetch's arrival read, answered as it stands when the fetch expires
    without any event on its partitions (``fetch_messages``). It read no bytes; its
    empty slices are dropped, as the files they name may be gone by now."""
    for result in results.values():
        if result.records is not None and result.records.length == 0:
            result.records = None
    return results


def _produce_response(error: ErrorCode, message: str | None = None, record_errors=()) -> dict:
    return {"error_code": int(error), "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "error_message": message,
            "record_errors": [{"batch_index": index, "batch_index_error_message": text}
                              for index, text in record_errors]}
