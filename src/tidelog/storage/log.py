"""A partition's log: offsets, producers and epochs over its segments (Kafka's ``UnifiedLog``).

Theory of operation. A ``Log`` owns one partition directory ``<topic>-<partition>``
in two layers, as Kafka's ``UnifiedLog`` over its ``LocalLog``: the segments,
the log end offset, the recovery point, rolls and flushes are the ``LocalLog``'s
(local_log.py); this class keeps what lies on top and decides for both::

    log_start_offset <= high_watermark <= log_end_offset      (asserted on change)
    recovery_point <= log_end_offset

* ``append_as_leader`` validates client batches, gives them offsets from the log
  end offset by rewriting ``baseOffset`` in place, stamps the leader epoch (and
  LogAppendTime), checks idempotent producers' sequences, and has the local log
  write the whole buffer with one write. ``append_as_follower`` takes batches
  that already carry offsets and epochs, at or after the log end offset.
* The ``LeaderEpochCache``, the producer state and the aborted-transaction index
  (producer_state_files.py) follow every append, truncation and retention.
* ``read`` checks the fetch offset against ``[log_start_offset, log_end_offset]``;
  the local log returns a ``FileSlice`` of whole batches from one segment.
* ``truncate_to``, ``truncate_fully_and_start_at``, ``maybe_increment_log_start_offset``
  and ``delete_old_segments`` (retention.py, when ``cleanup.policy`` has
  ``delete``) remove data at either end; the high watermark, log start offset,
  epoch cache and producer state follow.
* Compaction (``cleanup.policy`` has ``compact``, docs/compaction.md): a leader
  refuses records without a key; the log cleaner (``cleaner.py``) rewrites
  inactive segments below the high watermark and swaps them in through
  ``replace_segments``; ``cleaner_checkpoint`` is where the clean section ends.

Everything below the recovery point is durable, so ``Log.open`` recovers only from
there (``log_loader.py``). An ``OSError`` takes the log offline: it raises
``StorageError`` now and on every later call, and reports its directory through
``on_io_error`` so the ``LogManager`` can take the whole directory offline.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Callable, NamedTuple

from tidelog.core.clock import Clock
from tidelog.core.errors import (
    ErrorCode,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import (
    read_control,
    recompress,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from tidelog.records.compression import Compression
from tidelog.records.validator import validate_records
from tidelog.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from tidelog.storage.config import PRODUCER, LogConfig
from tidelog.storage.epoch_cache import LeaderEpochCache
from tidelog.storage.errors import OfflineLogDirError
from tidelog.storage.files import FileSystem, RealFileSystem
from tidelog.storage.local_log import (  # noqa: F401  (FileSlice: re-exported, part of this module's API)
    Background,
    FetchDataInfo,
    FileSlice,
    LocalLog,
    LogOffsetMetadata,
)
from tidelog.storage.log_loader import load_log
from tidelog.storage.producer_state import AbortedTxn, DuplicateSequenceError, ProducerStateManager, is_idempotent
from tidelog.storage.producer_state_files import (
    TransactionIndex,
    rebuild_producer_state,
    take_snapshot,
    update_producer_state,
)
from tidelog.storage.retention import (
    Rule,
    below_log_start_offset,
    deletable_segment_count,
    retention_bytes_breached,
    retention_ms_breached,
)
from tidelog.storage.segment import BatchInfo, LogSegment, OffsetAndTimestamp

logger = logging.getLogger(__name__)

# Kafka's special ListOffsets timestamps (ListOffsetsRequest).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int          # -1 unless the log uses LogAppendTime
    record_count: int
    batch_count: int
    valid_bytes: int
    log_start_offset: int


def _io_guard(method):
    """Turn an ``OSError`` into ``StorageError`` and take the log offline."""

    @functools.wraps(method)
    def guarded(self: "Log", *args, **kwargs):
        local_log = self._local_log
        if local_log.offline:
            raise OfflineLogDirError(f"{self.topic_partition}: the log directory is offline")
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            local_log.go_offline(e)
            raise StorageError(f"{self.topic_partition}: I/O error in {self.directory}: {e}") from e

    return guarded


def _in_topic_codec(buffer: bytearray, compression_type: str) -> bytearray:
    """The batches of a produce request stored in the topic's ``compression.type``
    (recompressed where the producer used another codec; control batches as they are)."""
    codec = Compression.NONE if compression_type == "uncompressed" else Compression.from_name(compression_type)
    out, position, changed = bytearray(), 0, False
    while position < len(buffer):
        header = validate_batch(buffer, position, strict=True)
        if header.compression != codec and not header.is_control:
            out += recompress(buffer, position, codec)
            changed = True
        else:
            out += buffer[position:position + header.size_bytes]
        position += header.size_bytes
    return out if changed else buffer


class Log:
    def __init__(self, directory: str, config: LogConfig, clock: Clock, fs: FileSystem,
                 segments: list[LogSegment], leader_epoch_cache: LeaderEpochCache, *,
                 log_start_offset: int, log_end_offset: int, high_watermark: int, recovery_point: int,
                 cleaner_checkpoint: int = 0, on_io_error: Callable[[str, OSError], None] | None = None,
                 background: Background | None = None, topic_partition: TopicPartition | None = None,
                 on_recovery_point_lowered: Callable[[Log], None] | None = None,
                 unsynced_dirs: tuple[str, ...] = ()):
        self.directory = directory
        # A future log's directory is <tp>.<unique>-future (log_manager.py): its partition is given.
        self.topic_partition = topic_partition or TopicPartition.parse(os.path.basename(directory))
        self.config = config
        self.clock = clock
        self.fs = fs
        # The LogManager's: called after a truncation (``_recovery_point_lowered``).
        self.on_recovery_point_lowered = on_recovery_point_lowered
        self._local_log = LocalLog(directory, self.topic_partition, config, clock, fs, segments,
                                   log_end_offset=log_end_offset, recovery_point=recovery_point,
                                   on_roll_durable=self._take_snapshot, on_io_error=on_io_error,
                                   background=background, unsynced_dirs=unsynced_dirs)
        self._leader_epoch_cache = leader_epoch_cache
        if leader_epoch_cache.checkpoint is not None:
            leader_epoch_cache.checkpoint.defer = self._local_log.defer_if_pending
        self._log_start_offset = log_start_offset
        self._high_watermark = min(max(high_watermark, log_start_offset), log_end_offset)
        self._cleaner_checkpoint = min(cleaner_checkpoint, log_end_offset)
        self._check_segments()
        self._producer_state = ProducerStateManager()
        self._txn_index = TransactionIndex(self._local_log)
        self._rebuild_producer_state()

    @classmethod
    def open(cls, directory: str, config: LogConfig, clock: Clock, fs: FileSystem | None = None,
             recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0, *,
             cleaner_checkpoint: int = 0, had_clean_shutdown: bool = False,
             on_io_error: Callable[[str, OSError], None] | None = None,
             background: Background | None = None, topic_partition: TopicPartition | None = None,
             on_recovery_point_lowered: Callable[["Log"], None] | None = None,
             defer_new_entries: bool = False, gaps_between_segments: bool = False) -> "Log":
        """Load (or create) the log in ``directory``, recovering what needs it.

        ``high_watermark`` is clamped to ``[log_start_offset, log_end_offset]`` (as in
        Kafka, a restarted partition's HW is ``min(checkpointed HW, LEO)``), the
        ``cleaner_checkpoint`` (from ``cleaner-offset-checkpoint``) to the log end offset.
        ``gaps_between_segments``: see ``load_log``.
        """
        fs = fs or RealFileSystem()
        if topic_partition is None:
            TopicPartition.parse(os.path.basename(directory))  # fail before touching the disk
        loaded = load_log(fs, directory, config, clock.now_ms(), recovery_point=recovery_point,
                          log_start_offset=log_start_offset, had_clean_shutdown=had_clean_shutdown,
                          defer_new_entries=defer_new_entries, gaps_between_segments=gaps_between_segments)
        epoch_file = LeaderEpochCheckpointFile(fs, os.path.join(directory, LEADER_EPOCH_CHECKPOINT))
        cache = LeaderEpochCache.load(epoch_file)
        cache.truncate_from_end(loaded.log_end_offset)
        cache.truncate_from_start(loaded.log_start_offset)
        # Kafka's LogSegment.recover: a recovered batch of a newer leader epoch than the
        # cache's latest starts that epoch (a checkpoint written unsynced may have lost it).
        for epoch, start_offset in loaded.recovered_epochs:
            if start_offset >= loaded.log_start_offset and (cache.latest_epoch is None or epoch > cache.latest_epoch):
                cache.assign(epoch, start_offset)
        return cls(directory, config, clock, fs, loaded.segments, cache,
                   log_start_offset=loaded.log_start_offset, log_end_offset=loaded.log_end_offset,
                   high_watermark=high_watermark, recovery_point=loaded.recovery_point,
                   cleaner_checkpoint=cleaner_checkpoint, on_io_error=on_io_error, background=background,
                   topic_partition=topic_partition, on_recovery_point_lowered=on_recovery_point_lowered,
                   unsynced_dirs=loaded.unsynced_dirs)

    # -- state ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local_log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None."""
        return self._producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """The bound of read_committed reads: the high watermark, or the first offset of
        an open transaction below it (Kafka's ``UnifiedLog.lastStableOffset``)."""
        unstable = self._producer_state.first_unstable_offset()
        return self._high_watermark if unstable is None else min(unstable, self._high_watermark)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[start_offset, upper_bound_offset)``
        (what a read_committed fetch tells the client to drop)."""
        return self._txn_index.collect(start_offset, upper_bound_offset)

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp, coordinator epoch, open
        transaction's first offset or -1) of every producer this partition remembers
        (DescribeProducers)."""
        return [(pid, entry.producer_epoch, entry.last_sequence, entry.last_timestamp, entry.coordinator_epoch,
                 entry.current_txn_first_offset)
                for pid, entry in sorted(self._producer_state.producers.items())]

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id → first offset of its open transaction (DescribeProducers)."""
        return dict(self._producer_state.ongoing)

    def open_transaction_epoch(self, producer_id: int) -> int | None:
        """The epoch of the producer's transaction open here; None if none is open."""
        entry = self._producer_state.producers.get(producer_id)
        return entry.producer_epoch if entry is not None and producer_id in self._producer_state.ongoing else None

    @property
    def has_open_transactions(self) -> bool:
        return bool(self._producer_state.ongoing)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open here at this epoch (Kafka's
        ``hasOngoingTransaction``): a TV2 producer's next transaction comes at a bumped
        epoch, which the partition must not take for the previous, still open one."""
        entry = self._producer_state.producers.get(producer_id)
        return (producer_id in self._producer_state.ongoing and entry is not None
                and entry.producer_epoch == producer_epoch)

    @property
    def recovery_point(self) -> int:
        return self._local_log.recovery_point

    @property
    def cleaner_checkpoint(self) -> int:
        """Where the clean section ends (Kafka's cleaner checkpoint): the log cleaner has
        deduplicated everything below it. Lowered by truncation."""
        return self._cleaner_checkpoint

    def set_cleaner_checkpoint(self, offset: int) -> None:
        assert 0 <= offset <= self.log_end_offset, (offset, self.log_end_offset)
        self._cleaner_checkpoint = offset

    @property
    def truncations(self) -> int:
        """How many times data was removed from the end; the cleaner abandons a pass
        whose offset map a truncation may have made wrong."""
        return self._local_log.truncations

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._leader_epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        return self._leader_epoch_cache.latest_epoch

    @property
    def size_bytes(self) -> int:
        return self._local_log.size_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy; for tools and tests)."""
        return list(self._local_log.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local_log.active_segment

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._local_log.log_end_offset_metadata

    @property
    def is_offline(self) -> bool:
        return self._local_log.offline

    config_changes = 0      # update_config calls in this process, any log (LogManager.flush_dirty_logs)

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config; takes effect from the next append/roll/retention."""
        self.config = self._local_log.config = config
        Log.config_changes += 1

    # -- appends ----------------------------------------------------------------------

    @_io_guard
    def append_as_leader(self, records, leader_epoch: int, from_coordinator: bool = False,
                         validate: bool = True) -> LogAppendInfo:
        """Validate, assign offsets from the log end offset, stamp the epoch, write once.

        Control batches (transaction markers) are accepted only ``from_coordinator``
        (WriteTxnMarkers); a client's are refused with INVALID_RECORD."""
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} is negative")
        buffer = records if isinstance(records, bytearray) else bytearray(records)
        now_ms = self.clock.now_ms()
        config = self.config
        if config.compression_type != PRODUCER:
            buffer = _in_topic_codec(buffer, config.compression_type)
        log_append_time = now_ms if config.uses_log_append_time else -1
        first_offset = next_offset = self._local_log.log_end_offset
        batches: list[BatchInfo] = []
        appended_producers: list = []       # (header, first offset) of idempotent batches
        in_request: dict[int, tuple[int, int]] = {}   # producer id → (epoch, last sequence) so far
        max_timestamp, offset_of_max_timestamp, record_count = -1, first_offset, 0
        position, end = 0, len(buffer)
        while position < end:
            header = validate_batch(buffer, position, strict=True)
            if validate:    # records refused one by one (keys of a compacted topic too): RecordValidationError
                validate_records(buffer, position, header, now_ms, config.message_timestamp_before_max_ms,
                                 config.message_timestamp_after_max_ms,
                                 check_timestamps=not config.uses_log_append_time, compacted=config.compact,
                                 topic_partition=str(self.topic_partition))
            size_bytes = header.size_bytes
            if size_bytes > config.max_message_bytes:
                raise RecordTooLargeError(f"{self.topic_partition}: batch of {size_bytes} bytes is above "
                                          f"max.message.bytes {config.max_message_bytes}")
            if header.is_control:
                if not from_coordinator:
                    raise InvalidRecordError(f"{self.topic_partition}: a client cannot write a control batch")
                control_type, coordinator_epoch = read_control(buffer, position)
                self._producer_state.check_marker(header, coordinator_epoch, str(self.topic_partition))
                appended_producers.append((header, next_offset, (control_type, coordinator_epoch)))
            elif is_idempotent(header):
                duplicate = self._producer_state.check_leader_batch(header, in_request, str(self.topic_partition))
                if duplicate is not None:
                    if position == 0 and size_bytes == end:     # the whole request is a retry
                        # As Kafka's UnifiedLog: the answer's log append time is the remembered
                        # batch's timestamp (whatever the topic's timestamp type).
                        return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                             duplicate.max_timestamp, duplicate.last_offset,
                                             duplicate.max_timestamp, 0, 0, 0, self._log_start_offset)
                    raise DuplicateSequenceError(f"{self.topic_partition}: producer {header.producer_id} "
                                                 f"batch at sequence {header.base_sequence} was written before")
                appended_producers.append((header, next_offset, None))
            set_base_offset(buffer, position, next_offset)
            set_partition_leader_epoch(buffer, position, leader_epoch)
            batch_max_timestamp = header.max_timestamp
            if log_append_time >= 0:
                set_log_append_time(buffer, position, now_ms)
                batch_max_timestamp = now_ms
            last_offset = next_offset + header.last_offset_delta
            batches.append(BatchInfo(position, size_bytes, last_offset, batch_max_timestamp))
            if batch_max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = batch_max_timestamp, last_offset
            record_count += header.record_count
            next_offset = last_offset + 1
            position += size_bytes
        if batches:
            self._check_append_size(end)
            self._leader_epoch_cache.assign(leader_epoch, first_offset)
            self._local_log.append(buffer, batches, first_offset, next_offset, max_timestamp, now_ms)
            for header, batch_first_offset, control in appended_producers:
                update_producer_state(self._producer_state, self._txn_index, header, batch_first_offset, control)
        return LogAppendInfo(first_offset, next_offset - 1, max_timestamp, offset_of_max_timestamp,
                             log_append_time, record_count, len(batches), end, self._log_start_offset)

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """``producer.id.expiration.ms``: forget idempotent producers silent that long."""
        return self._producer_state.remove_expired(self.clock.now_ms(), expiration_ms)

    def _rebuild_producer_state(self) -> None:
        """Derive the producer state, at open and after a truncation (producer_state_files.py)."""
        rebuild_producer_state(self._producer_state, self._txn_index, self._local_log,
                               self._log_start_offset, self._high_watermark)

    def _take_snapshot(self) -> None:
        """Save the producer state as of the log end offset (Kafka does it at each roll
        and at a clean shutdown)."""
        take_snapshot(self._producer_state, self._txn_index, self._local_log)

    @_io_guard
    def append_as_follower(self, records) -> LogAppendInfo:
        """Write batches the leader already numbered; they must start at or after the LEO."""
        now_ms = self.clock.now_ms()
        first_offset = expected_offset = self._local_log.log_end_offset
        batches: list[BatchInfo] = []
        epochs: list[tuple[int, int]] = []
        follower_producers: list = []
        max_timestamp, offset_of_max_timestamp, record_count = -1, expected_offset, 0
        position, end = 0, len(records)
        while position < end:
            header = validate_batch(records, position, strict=False)
            if header.base_offset < expected_offset:
                where = "the previous batch's end" if batches else "the log end offset"
                message = (f"{self.topic_partition}: follower batch at offset {header.base_offset} "
                           f"is below {where} {expected_offset}")
                if not batches:
                    raise UnexpectedAppendOffsetError(message, header.base_offset, header.last_offset)
                raise InvalidRecordError(message)
            if not batches:
                first_offset = header.base_offset
            if header.partition_leader_epoch >= 0:
                epochs.append((header.partition_leader_epoch, header.base_offset))
            if header.is_control and header.producer_id >= 0:   # a transaction marker
                follower_producers.append((header, read_control(records, position)))
            elif is_idempotent(header):
                follower_producers.append((header, None))
            batches.append(BatchInfo(position, header.size_bytes, header.last_offset, header.max_timestamp))
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = header.max_timestamp, header.last_offset
            record_count += header.record_count
            expected_offset = header.next_offset
            position += header.size_bytes
        if batches:
            # No segment.bytes check here (Kafka has one): the leader's log holds these
            # bytes already, and a leader's cleaned segment may be larger than segment.bytes
            # (a tombstone batch marked with its delete horizon re-encodes its timestamps
            # as deltas from it, each a few bytes longer), so a follower that refused a
            # fetch above segment.bytes would stop replicating the partition for good.
            # The append is bounded by the fetch (replica.fetch.max.bytes, or one batch);
            # a roll before it starts a segment of its own.
            for epoch, start_offset in epochs:
                self._leader_epoch_cache.assign(epoch, start_offset)
            # Written before the next Fetch reports it: the leader counts that offset
            # toward the high watermark, so it must be in this broker's page cache, as
            # Kafka's followers' are (never behind: a kill -9 would lose it).
            self._local_log.append(records, batches, first_offset, expected_offset, max_timestamp, now_ms,
                                   behind=False)
            for header, control in follower_producers:
                update_producer_state(self._producer_state, self._txn_index, header, header.base_offset, control)
        return LogAppendInfo(first_offset, expected_offset - 1, max_timestamp, offset_of_max_timestamp,
                             -1, record_count, len(batches), end, self._log_start_offset)

    def _check_append_size(self, size_bytes: int) -> None:
        if size_bytes > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"{self.topic_partition}: an append of {size_bytes} bytes is above segment.bytes "
                f"{self.config.segment_bytes}", ErrorCode.RECORD_LIST_TOO_LARGE)

    # -- reads ------------------------------------------------------------------------

    @_io_guard
    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, from one segment.

        Up to ``max_bytes`` (but the first batch regardless if ``min_one_batch``,
        KIP-74); only batches whose last offset is below ``max_offset`` (the
        isolation bound: no record at or above it is ever returned). A fetch at the
        log end offset, or at/after ``max_offset``, is empty; outside
        ``[log_start_offset, log_end_offset]`` raises ``OffsetOutOfRangeError``.
        """
        local_log = self._local_log
        log_end_offset = local_log.log_end_offset
        if fetch_offset < self._log_start_offset or fetch_offset > log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.topic_partition}: offset {fetch_offset} is outside the log "
                f"[{self._log_start_offset}, {log_end_offset}]")
        return local_log.read(fetch_offset, max_bytes, max_offset, min_one_batch)

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` lives (Kafka's convertToOffsetMetadataOrThrow)."""
        return self.read(offset, 1, min_one_batch=False).fetch_offset_metadata

    @_io_guard
    def fetch_offset_by_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """ListOffsets: the first record with timestamp ``>= timestamp_ms``, or None.

        Kafka's special values: ``EARLIEST_TIMESTAMP`` (-2) and
        ``EARLIEST_LOCAL_TIMESTAMP`` (-4) give the log start offset,
        ``LATEST_TIMESTAMP`` (-1) the log end offset (timestamp -1 for both), and
        ``MAX_TIMESTAMP`` (-3) the first record carrying the largest timestamp.
        """
        cache = self._leader_epoch_cache
        if timestamp_ms in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self._log_start_offset
            return OffsetAndTimestamp(start, -1, cache.epoch_for_offset(start))
        if timestamp_ms == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self._local_log.log_end_offset, -1, cache.latest_epoch)
        if timestamp_ms == MAX_TIMESTAMP:
            return self._local_log.find_offset_of_max_timestamp(self._log_start_offset)
        if timestamp_ms < 0:
            raise ValueError(f"timestamp {timestamp_ms} is neither a time nor a special value")
        return self._local_log.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` as Kafka's ``LeaderEpochFileCache.endOffsetFor`` gives it;
        ``(-1, -1)`` when undefined."""
        return self._leader_epoch_cache.end_offset_for(leader_epoch, self._local_log.log_end_offset)

    @_io_guard
    def assign_leader_epoch(self, leader_epoch: int, start_offset: int) -> bool:
        """Record that ``leader_epoch`` starts at ``start_offset`` (a new leader's first act,
        as in Kafka's ``Partition.makeLeader``). The cache's checkpoint write is I/O like
        any other: a failure takes the log offline and raises ``StorageError`` (found by
        the simulator, seed 24)."""
        return self._leader_epoch_cache.assign(leader_epoch, start_offset)

    # -- offsets moved by replication ---------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to ``[log_start_offset, log_end_offset]``; returns it."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._local_log.log_end_offset)
        self._producer_state.on_high_watermark_updated(self._high_watermark)
        self._check_invariants()
        return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the HW to ``offset`` if that is higher (a leader's HW never goes back)."""
        assert offset <= self.log_end_offset, f"HW {offset} above the log end offset {self.log_end_offset}"
        if offset <= self._high_watermark:
            return False
        self._high_watermark = offset
        self._producer_state.on_high_watermark_updated(offset)
        self._check_invariants()
        return True

    @_io_guard
    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (DeleteRecords, retention); never lowers it.

        Above the high watermark raises ``OffsetOutOfRangeError`` (Kafka's rule).
        Segments wholly below the new start are deleted.
        """
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.topic_partition}: cannot move the log start offset to {offset}, "
                f"above the high watermark {self._high_watermark}")
        if offset <= self._log_start_offset:
            return False
        self._set_log_start_offset(offset)
        self._delete_segments(below_log_start_offset(offset))
        return True

    def _set_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self._producer_state.truncate_head(offset)
        self._txn_index.truncate_head(offset)
        self._local_log.raise_recovery_point(offset)  # nothing below needs recovery
        self._leader_epoch_cache.truncate_from_start(offset)
        self._check_segments()

    @_io_guard
    def delete_old_segments(self) -> int:
        """Retention (Kafka's deleteOldSegments): returns the number of segments deleted.

        Deletes, oldest first and never past the high watermark: segments wholly
        below the log start offset; and, when ``cleanup.policy`` includes
        ``delete``, segments whose largest timestamp is older than ``retention.ms``
        and the oldest segments while the log is above ``retention.bytes``. The
        active segment goes too when everything is due (a new empty one replaces
        it), unless it is empty.
        """
        now_ms = self.clock.now_ms()
        config = self.config
        deleted = self._delete_segments(below_log_start_offset(self._log_start_offset))
        if not config.delete:
            return deleted
        if config.retention_ms >= 0:
            deleted += self._delete_segments(retention_ms_breached(config.retention_ms, now_ms))
        if config.retention_bytes >= 0:
            deleted += self._delete_segments(retention_bytes_breached(config.retention_bytes, self.size_bytes))
        return deleted

    def _delete_segments(self, rule: Rule) -> int:
        local_log = self._local_log
        count = deletable_segment_count(local_log.segments, local_log.log_end_offset, self._high_watermark, rule)
        if count == 0:
            return 0
        local_log.delete_oldest_segments(count)
        first_base_offset = local_log.segments[0].base_offset
        if first_base_offset > self._log_start_offset:
            self._set_log_start_offset(first_base_offset)
        return count

    # -- compaction -------------------------------------------------------------------

    @_io_guard
    def replace_segments(self, replaced: list[LogSegment]) -> LogSegment:
        """The log cleaner's crash-safe swap (``LocalLog.replace_segments``), then the
        segment checks. Returns the new segment."""
        cleaned = self._local_log.replace_segments(replaced)
        self._check_segments()
        return cleaned

    def producer_last_offsets(self) -> dict[int, int]:
        """Producer id → last offset of its latest batch, for every producer the log
        remembers: the cleaner keeps that batch (its header at least), so a rebuilt
        producer state still knows the producer's last sequence."""
        return {producer_id: entry.batches[-1].last_offset
                for producer_id, entry in self._producer_state.producers.items() if entry.batches}

    # -- truncation -------------------------------------------------------------------

    def _recovery_point_lowered(self) -> None:
        """After a truncation: the recovery point on disk (``recovery-point-offset-checkpoint``)
        may now be above this log's, and records appended again below it would be
        trusted, unscanned, after a power cut that lost them — a hole in the middle of
        the log (simulator seed 20116). ``on_recovery_point_lowered`` (the LogManager)
        writes it before anything is appended again, as Kafka's ``LogManager.truncateTo``
        checkpoints the recovery offsets of the directories it truncated in."""
        if self.on_recovery_point_lowered is not None:
            self.on_recovery_point_lowered(self)

    @_io_guard
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets ``>= offset``; returns whether anything went.

        A batch holding ``offset`` goes whole, so the log end offset becomes
        ``min(offset, that batch's base offset)``. The epoch cache is truncated from
        the end, the high watermark and recovery point clamped, and the log start
        offset lowered if needed (Kafka's rule). The cut is durable on return.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        local_log = self._local_log
        if offset >= local_log.log_end_offset:
            # Kafka's UnifiedLog.truncateTo: the epoch cache is truncated at the log end
            # all the same. A broker that became leader (assigning (epoch, LEO)) and
            # appended nothing before another took over holds an entry no record backs;
            # kept, it is sent as the last fetched epoch forever and the leader answers
            # the same diverging epoch forever (found by the simulator, seed 46).
            self._leader_epoch_cache.truncate_from_end(local_log.log_end_offset)
            return False
        if offset < local_log.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        new_end = local_log.truncate_to(offset)
        self._leader_epoch_cache.truncate_from_end(new_end)
        self._log_start_offset = min(self._log_start_offset, new_end)
        self._high_watermark = min(self._high_watermark, new_end)
        self._cleaner_checkpoint = min(self._cleaner_checkpoint, new_end)
        self._check_segments()
        self._rebuild_producer_state()       # truncation rolls the producer state back
        self._recovery_point_lowered()
        return True

    @_io_guard
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower out of range)."""
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._local_log.truncate_fully_and_start_at(offset)
        self._recovery_point_lowered()
        self._txn_index.aborted = []
        self._leader_epoch_cache.clear()
        self._producer_state.clear()
        self._log_start_offset = self._high_watermark = offset
        self._cleaner_checkpoint = min(self._cleaner_checkpoint, offset)
        logger.info("%s: truncated fully, restarting at offset %d", self.topic_partition, offset)
        self._check_segments()

    # -- durability and lifecycle -------------------------------------------------------

    @property
    def defers_entries(self) -> bool:
        """A new log whose directory entries wait for its first flush (``LogManager``)."""
        return self._local_log.defers_entries

    def defer_if_pending(self, path: str) -> bool:
        return self._local_log.defer_if_pending(path)

    @_io_guard
    def flush(self, up_to_offset: int | None = None) -> None:
        """Fsync everything below ``up_to_offset`` (default: the log end offset)."""
        end = self._local_log.log_end_offset
        self._local_log.flush(end if up_to_offset is None else min(up_to_offset, end))

    @_io_guard
    def maybe_flush(self) -> bool:
        """Flush if ``flush.messages`` or ``flush.ms`` says so (also checked on every append;
        call this periodically so ``flush.ms`` holds on an idle log). Returns whether it did."""
        return self._local_log.maybe_flush(self.clock.now_ms())

    def close(self) -> None:
        """Write index files and the producer snapshot, and close every file (no fsync
        of the segments: flush first for durability)."""
        local_log = self._local_log
        if not local_log.offline and local_log.rolls_durable:   # (flush() first makes it so)
            try:
                self._take_snapshot()
            except OSError as e:
                logger.warning("%s: cannot write the producer snapshot: %s", self.topic_partition, e)
        local_log.close()

    @_io_guard
    def delete(self) -> None:
        """Remove the whole partition directory."""
        self._local_log.delete()

    def mark_offline(self) -> None:
        """Refuse every later call (the directory went offline through another log)."""
        self._local_log.offline = True

    def _check_invariants(self) -> None:
        local_log = self._local_log
        log_end_offset = local_log.log_end_offset
        assert 0 <= self._log_start_offset <= self._high_watermark <= log_end_offset, \
            (self._log_start_offset, self._high_watermark, log_end_offset)
        assert local_log.recovery_point <= log_end_offset, (local_log.recovery_point, log_end_offset)

    def _check_segments(self) -> None:
        """The structural invariants, checked after segments come or go."""
        self._check_invariants()
        local_log = self._local_log
        local_log.check_segments()
        assert local_log.base_offsets[0] <= self._log_start_offset or len(local_log.segments) == 1

    def __repr__(self) -> str:
        return (f"Log({self.topic_partition}, log_start_offset={self._log_start_offset}, "
                f"high_watermark={self._high_watermark}, log_end_offset={self.log_end_offset})")
