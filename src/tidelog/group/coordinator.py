"""The group coordinator of one broker: the shards of the ``__consumer_offsets`` partitions it leads.

Theory of operation. A group lives on partition ``partition_for(group_id, N)``
of ``__consumer_offsets`` and its coordinator is that partition's leader.
``reconcile(now_ms)`` — called after every metadata change and every tick —
compares the partitions this broker leads with the shards it has:

    leads p, no shard (or one of an older leader epoch)  → a new shard, LOADING
    a LOADING shard whose replay reached the log end at election → serving
    no longer leads p                                    → unload (NOT_COORDINATOR
                                                           to every waiting client)

A shard's state is the replay of the partition's committed records
(``_catch_up`` reads from where it stopped up to the high watermark). Loading
ends when the replay reaches the log end offset the partition had when this
broker became leader, so no offset acknowledged by an earlier leader is missing
(and none goes backwards) when the shard starts answering; meanwhile requests
get COORDINATOR_LOAD_IN_PROGRESS. A shard's writes are one record batch
appended through the replica manager with acks=all; when it commits, the
shard replays up to the new high watermark and only then is the client answered.

Nothing here does I/O of its own: the log is the replica manager's, time is
``now_ms`` from the caller, member ids come from an injected source. ``now_ms``
is the runtime's ``now_ms()``, the monotonic clock: both coordinators' timers
(sessions, join and sync deadlines; marker retries, the timeout and expiration
checks) run on it, as Kafka's do, so a wall-clock step neither fires nor
postpones them. The shards read wall time from an injected ``wall_ms`` for what
Kafka keeps in wall time: the timestamps in records, and the decisions that
compare with them (offset retention, transaction timeouts, id expiration).
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from tidelog.controller.messages import CreatableTopic
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode, StorageError
from tidelog.core.ids import TopicPartition, partition_summary
from tidelog.group.records import partition_for
from tidelog.group.shard import GroupConfig, GroupShard, Record
from tidelog.records.batch import (
    CONTROL_COMMIT,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    read_control,
)
from tidelog.replication.partition import Partition
from tidelog.replication.replica_manager import ReplicaManager

logger = logging.getLogger("tidelog.group")

OFFSETS_TOPIC = "__consumer_offsets"
_READ_MAX_BYTES = 1 << 20


def offsets_topic(settings, alive_brokers: int) -> CreatableTopic:
    """``__consumer_offsets`` as Kafka creates it on first use: compacted, its replication
    factor capped to the brokers alive (a development cluster may have fewer than 3)."""
    replication = max(1, min(settings["offsets.topic.replication.factor"], alive_brokers))
    if replication < settings["offsets.topic.replication.factor"]:
        logger.warning("creating %s with replication factor %d: only %d brokers are alive "
                    "(offsets.topic.replication.factor=%d)", OFFSETS_TOPIC, replication, alive_brokers,
                    settings["offsets.topic.replication.factor"])
    return CreatableTopic(OFFSETS_TOPIC, settings["offsets.topic.num.partitions"], replication,
                          configs={"cleanup.policy": "compact", "compression.type": "producer",
                                   "segment.bytes": str(settings["offsets.topic.segment.bytes"])})


class _Loaded:
    """A shard and what it needs to know about its partition."""

    def __init__(self, shard, leader_epoch: int, load_end_offset: int, next_offset: int):
        self.shard = shard
        self.leader_epoch = leader_epoch
        self.load_end_offset = load_end_offset       # the log end offset at election
        self.next_offset = next_offset               # the next record to replay


class CoordinatorRuntime:
    """The shards of one internal topic's partitions this broker leads: loading,
    replay, writes and timers (shared by the group and transaction coordinators).

    A shard has ``loading``, ``replay(key, value, now_ms)``, ``loaded(now_ms)``,
    ``unload()``, ``on_tick(now_ms)`` and ``next_deadline_ms()``; a shard that
    takes transactional writes also has ``replay_transactional(producer_id, key,
    value, now_ms)`` and ``replay_marker(producer_id, commit, now_ms)``."""

    topic = ""

    def __init__(self, replica_manager: ReplicaManager, clock: Clock, partition_count: Callable[[], int],
                 commit_timeout_ms: int):
        self.replica_manager = replica_manager
        self.clock = clock
        self._partition_count = partition_count
        self._commit_timeout_ms = commit_timeout_ms
        self.loaded: dict[int, _Loaded] = {}

    def _new_shard(self, index: int, leader_epoch: int):
        raise NotImplementedError

    def now_ms(self) -> int:
        """The clock the shards' ``now_ms`` and ``next_deadline_ms()`` are on: the monotonic
        clock, as Kafka's coordinator timers (DelayedJoin, DelayedHeartbeat, the transaction
        marker channel's retries); the shards read wall time for timestamps themselves."""
        return self.clock.monotonic_ms()

    # ============================================================ routing

    def partition_for(self, key: str) -> int:
        return partition_for(key, self._partition_count())

    def shard_for(self, key: str):
        """The serving shard of ``key``, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        loaded = self.loaded.get(self.partition_for(key))
        if loaded is None:
            return ErrorCode.NOT_COORDINATOR
        if loaded.shard.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return loaded.shard

    def shards(self) -> tuple[list, bool]:
        """Every serving shard, and whether one is still loading."""
        serving = [loaded.shard for loaded in self.loaded.values() if not loaded.shard.loading]
        return serving, len(serving) != len(self.loaded)

    # ======================================================= leadership

    def reconcile(self, now_ms: int) -> None:
        led: dict[int, Partition] = {}
        for index, hosted in self.replica_manager.partitions_of(self.topic).items():
            if isinstance(hosted, Partition) and hosted.is_leader and not hosted.log.is_offline:
                led[index] = hosted
        unloaded, loading = [], []
        for index in list(self.loaded):
            partition = led.get(index)
            if partition is None or partition.leader_epoch != self.loaded[index].leader_epoch:
                logger.debug("unloading %s-%d: no longer its leader", self.topic, index)
                unloaded.append(TopicPartition(self.topic, index))
                self.loaded.pop(index).shard.unload()
        for index, partition in led.items():
            if index not in self.loaded:
                shard = self._new_shard(index, partition.leader_epoch)
                self.loaded[index] = _Loaded(shard, partition.leader_epoch, partition.log.log_end_offset,
                                             partition.log.log_start_offset)
                loading.append(TopicPartition(self.topic, index))
                logger.debug("loading %s-%d (leader epoch %d, up to offset %d)", self.topic,
                          index, partition.leader_epoch, partition.log.log_end_offset)
        if unloaded:
            logger.info("no longer the leader of %s: unloading them", partition_summary(unloaded))
        if loading:
            logger.info("now the leader of %s: loading them", partition_summary(loading))
        for index in list(self.loaded):
            self._catch_up(index, now_ms)

    def _catch_up(self, index: int, now_ms: int) -> None:
        """Replay the partition's records from where the shard stopped up to the high watermark."""
        loaded = self.loaded.get(index)
        partition = self.replica_manager.get_partition(TopicPartition(self.topic, index))
        if loaded is None or partition is None:
            return
        log_ = partition.log
        loaded.next_offset = max(loaded.next_offset, log_.log_start_offset)
        high_watermark = log_.high_watermark
        shard = loaded.shard
        while loaded.next_offset < high_watermark:
            try:
                data = log_.read(loaded.next_offset, _READ_MAX_BYTES,
                                 max_offset=high_watermark).records.read_bytes()
            except (StorageError, OSError) as e:
                # The partition's log directory failed (the broker takes the partition
                # offline at its next tick): its shard is unloaded, not served.
                logger.error("cannot read %s-%d: %s; unloading it", self.topic, index, e)
                self.loaded.pop(index).shard.unload()
                return
            if not data:
                break
            for position, header in iter_batches(data):
                if header.is_control:
                    if header.base_offset >= loaded.next_offset and hasattr(shard, "replay_marker"):
                        control_type, _ = read_control(data, position)
                        shard.replay_marker(header.producer_id, control_type == CONTROL_COMMIT, now_ms)
                    loaded.next_offset = header.next_offset
                    continue
                transactional = header.is_transactional and hasattr(shard, "replay_transactional")
                for record in iter_records(data, position):
                    if record.offset >= loaded.next_offset and record.key is not None:
                        if transactional:
                            shard.replay_transactional(header.producer_id, record.key, record.value, now_ms)
                        else:
                            shard.replay(record.key, record.value, now_ms)
                loaded.next_offset = header.next_offset
        if shard.loading and loaded.next_offset >= loaded.load_end_offset:
            shard.loaded(now_ms)

    def _writer(self, index: int):
        tp = TopicPartition(self.topic, index)

        def write(records: list[Record], on_done: Callable[[ErrorCode], None],
                  producer: tuple[int, int] | None = None) -> None:
            """Append ``records`` with acks=all; ``producer`` = (id, epoch) makes the batch
            part of that producer's transaction (TxnOffsetCommit)."""
            fields = {} if producer is None else {"producer_id": producer[0], "producer_epoch": producer[1],
                                                  "is_transactional": True}
            batch = build_batch([SimpleRecord(value, key) for key, value in records],
                                timestamp_ms=self.clock.now_ms(), **fields)

            def appended(responses: dict) -> None:
                error = ErrorCode(responses[tp]["error_code"])
                if error == ErrorCode.NONE:
                    self._catch_up(index, self.now_ms())
                on_done(error)
            self.replica_manager.append_records(-1, self._commit_timeout_ms, {tp: batch},
                                                appended, internal=True)
        return write

    # ============================================================ time

    def on_tick(self, now_ms: int) -> None:
        self.reconcile(now_ms)
        for loaded in list(self.loaded.values()):
            if not loaded.shard.loading:
                loaded.shard.on_tick(now_ms)

    def next_wakeup_ms(self) -> int | None:
        deadlines = [loaded.shard.next_deadline_ms() for loaded in self.loaded.values()
                     if not loaded.shard.loading]
        deadlines = [d for d in deadlines if d is not None]
        return min(deadlines) if deadlines else None

    def unload_all(self) -> None:
        for loaded in self.loaded.values():
            loaded.shard.unload()
        self.loaded.clear()


class GroupCoordinator(CoordinatorRuntime):
    """The consumer-group shards of the ``__consumer_offsets`` partitions this broker leads."""

    topic = OFFSETS_TOPIC

    def __init__(self, config: GroupConfig, replica_manager: ReplicaManager, clock: Clock,
                 partition_count: Callable[[], int], new_member_id: Callable[[str], str] | None = None):
        super().__init__(replica_manager, clock, partition_count, config.offsets_commit_timeout_ms)
        self.config = config
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")

    def _new_shard(self, index: int, leader_epoch: int) -> GroupShard:
        return GroupShard(index, self.config, self._writer(index), self._new_member_id, self.clock.now_ms)
