"""Log compaction: Kafka's log cleaner, for ``cleanup.policy=compact`` and ``compact,delete``.

Theory of operation (docs/compaction.md). A compacted log keeps, for every key,
at least the last record written with it; older records with the same key may
go, and every record that stays keeps its offset. The log has two sections::

    log start      cleaner checkpoint         first uncleanable offset      log end
       │ clean: deduplicated │ dirty: written since │ the active segment, records │
       │ by an earlier pass  │ that pass            │ at/above the HW or too young│

``Log.cleaner_checkpoint`` is where the clean section ends (persisted in each log
directory's ``cleaner-offset-checkpoint``). The first uncleanable offset is
``min(active segment base, high watermark, recovery point)``
(``first_uncleanable_offset``), or earlier at the first segment
whose largest timestamp is within ``min.compaction.lag.ms`` of now; only whole
inactive segments below it are dirty and cleanable.

Selection (Kafka's grabFilthiestCompactedLog): among the compacted logs, those whose
dirty ratio (dirty bytes / clean + dirty bytes) is above
``min.cleanable.dirty.ratio``, or whose first dirty batch is older than
``max.compaction.lag.ms``; the one with the highest ratio goes first. With none,
the cleaner waits ``log.cleaner.backoff.ms``.

A pass (``Cleaning``) over one log:

1. Map: read the dirty section oldest first; for each key note the offset of its
   last record (``OffsetMap``: 16-byte MD5 digests of keys to offsets, at most
   ``log.cleaner.dedupe.buffer.size / MAP_ENTRY_BYTES`` entries). When the map is
   full it stops at a batch boundary and the pass cleans only that far.
2. Clean: rewrite every segment from the start of the log to where the map
   stopped (the clean section too: its keys may have newer records in the dirty
   one), consecutive segments merged while their sizes add up to at most
   ``segment.bytes`` (Kafka's groupSegmentsBySize). A record stays when no later
   record of its key is in the map, it has a key, and it is not a tombstone whose
   delete horizon has passed. A batch keeps its base and last offsets, producer
   fields, leader epoch and compression; one that lost records is re-encoded,
   one that lost all of them is dropped, except that the latest batch of each
   producer the log remembers stays as an empty header, so that a producer state
   rebuilt from the log still knows that producer's last sequence.
3. Swap: each group is written as ``<base>.log.cleaned`` plus its two indexes,
   fsynced, and swapped in by ``Log.replace_segments`` (``.cleaned`` → ``.swap``,
   the old segments deleted oldest first, ``.swap`` → final names; ``Log.open``
   completes a swap a crash interrupted and deletes ``.cleaned`` files). After the
   last group the cleaner checkpoint moves to where the map stopped.

Tombstones (KIP-534): the first pass that keeps a tombstone marks its batch with a
delete horizon, now + ``delete.retention.ms`` (attribute bit 6, the horizon in the
base timestamp; record timestamps are deltas from it, so they stay right); a later
pass at or after the horizon drops the batch's tombstones. So a consumer that
reads the log from the start within ``delete.retention.ms`` of that first pass
sees every delete.

Bounded work: ``LogCleaner.clean_one`` advances the current pass by about half
``log.cleaner.io.buffer.size`` bytes read (at least one batch; Kafka splits that
buffer into a read and a write half) and holds at most as much output before
writing it, so the broker's periodic work never blocks for long. Between steps the log may change: a pass whose segments went (retention,
truncation) or whose log was truncated, reconfigured or taken offline is dropped,
its half-written files with it. Everything runs on the caller's thread, with time
from the caller; a segment that does not read back (bad CRC) makes its log
uncleanable until the next start, as Kafka does.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple


from tidelog.core.errors import CorruptRecordError, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import (
    BATCH_HEADER_SIZE_BYTES,
    CONTROL_COMMIT,
    BatchHeader,
    Record,
    TimestampType,
    encode_records,
    iter_batches,
    read_control,
    iter_records,
    pack_batch,
    read_header,
    validate_batch,
)
from tidelog.records.compression import Compression, compress
from tidelog.storage.log import Log
from tidelog.storage.log_loader import CLEANED_SUFFIX
from tidelog.storage.segment import LOG_SUFFIX, RELATIVE_OFFSET_MAX, BatchInfo, LogSegment, segment_file_name

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# What one offset-map entry costs in CPython (a dict slot, a key of at most 16 bytes,
# an int offset), measured with tracemalloc: 120 to 127 bytes.
MAP_ENTRY_BYTES = 128
DELETE_HORIZON_MASK = 0x40        # batch attribute bit 6 (KIP-534): baseTimestamp is the delete horizon
_COMPRESSION_MASK = 0x07           # batch attribute bits 0-2


@dataclass(frozen=True)
class CleanerConfig:
    """The broker settings of the log cleaner (Kafka's names and defaults)."""

    enable: bool = True                                # log.cleaner.enable
    dedupe_buffer_size_bytes: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size: the offset map
    io_buffer_size_bytes: int = 512 * 1024             # log.cleaner.io.buffer.size: half read, half written
    backoff_ms: int = 15_000                           # log.cleaner.backoff.ms: idle wait

    @classmethod
    def from_settings(cls, settings) -> "CleanerConfig":
        """From a broker's settings (anything indexed by Kafka's config names)."""
        return cls(settings["log.cleaner.enable"], settings["log.cleaner.dedupe.buffer.size"],
                   settings["log.cleaner.io.buffer.size"], settings["log.cleaner.backoff.ms"])

    @property
    def offset_map_capacity(self) -> int:
        """Keys one pass can map."""
        return max(1, self.dedupe_buffer_size_bytes // MAP_ENTRY_BYTES)

    @property
    def step_bytes(self) -> int:
        """What one step reads: the read half of the I/O buffer, as Kafka splits it."""
        return max(1, self.io_buffer_size_bytes // 2)


class OffsetMap:
    """Key → offset of its last record seen. Keys shorter than 16 bytes are held as they
    are, longer ones by their 16-byte MD5 digest (as Kafka's SkimpyOffsetMap holds every
    key; a collision would need two keys with one 128-bit digest)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def has_room(self, count: int) -> bool:
        return len(self._offsets) + count <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[_slot(key)] = offset

    def get(self, key: bytes) -> int:
        """The offset of the key's last mapped record, -1 if none."""
        return self._offsets.get(_slot(key), -1)


def _slot(key: bytes) -> bytes:
    return key if len(key) < 16 else hashlib.md5(key, usedforsecurity=False).digest()


class LogToClean(NamedTuple):
    """A log's dirty section, as selection sees it (Kafka's LogToClean)."""

    log: Log
    first_dirty_offset: int
    dirty_segments: list[LogSegment]   # whole inactive segments, oldest first
    end_offset: int                    # where it ends: a segment boundary, at most the first uncleanable offset
    clean_bytes: int
    must_clean_now: bool               # max.compaction.lag.ms has passed

    @property
    def dirty_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.dirty_segments)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def first_uncleanable_offset(log: Log) -> int:
    """Where the cleaner must stop (Kafka's ``LogCleanerManager.cleanableOffsets``): the
    active segment, and what is not committed — and, in tidelog, what is not durable: a
    cleaned segment may end before the next one begins, which recovery takes for lost
    data above the recovery point (log_loader)."""
    return min(log.segments[-1].base_offset, log.high_watermark, log.recovery_point)


def find_dirty_section(log: Log, now_ms: int) -> LogToClean | None:
    """The dirty section of ``log``; None when no whole inactive segment is dirty."""
    config = log.config
    segments = log.segments
    first_dirty = max(log.cleaner_checkpoint, log.log_start_offset)
    uncleanable = first_uncleanable_offset(log)
    clean_bytes, dirty, end_offset = 0, [], first_dirty
    for segment, following in zip(segments, segments[1:]):
        if following.base_offset <= first_dirty:
            clean_bytes += segment.size_bytes
            continue
        if following.base_offset > uncleanable or (
                config.min_compaction_lag_ms > 0
                and segment.largest_timestamp > now_ms - config.min_compaction_lag_ms):
            break
        dirty.append(segment)
        end_offset = following.base_offset
    if not dirty:
        return None
    first_batch = next(dirty[0].headers(0, dirty[0].size_bytes), None)
    must_clean_now = (first_batch is not None and first_batch[1].max_timestamp >= 0
                      and now_ms - first_batch[1].max_timestamp > config.max_compaction_lag_ms)
    return LogToClean(log, first_dirty, dirty, end_offset, clean_bytes, must_clean_now)


def grab_filthiest_log(sections: Iterable[LogToClean]) -> LogToClean | None:
    """The dirty section to clean next: the highest dirty ratio among those above
    ``min.cleanable.dirty.ratio`` or past ``max.compaction.lag.ms``."""
    eligible = [section for section in sections
                if section.must_clean_now or section.dirty_ratio > section.log.config.min_cleanable_dirty_ratio]
    return max(eligible, key=lambda section: section.dirty_ratio, default=None)


def group_segments_by_size(segments: list[LogSegment], next_base_offset: int,
                           max_size_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments merged while their sizes add up to at most ``max_size_bytes``
    and their offsets fit one segment; ``next_base_offset``: the base after the last."""
    uppers = [segment.base_offset for segment in segments[1:]] + [next_base_offset]
    groups: list[list[LogSegment]] = []
    group_bytes = 0
    for segment, upper in zip(segments, uppers):
        if (groups and group_bytes + segment.size_bytes <= max_size_bytes
                and upper - 1 - groups[-1][0].base_offset <= RELATIVE_OFFSET_MAX):
            groups[-1].append(segment)
            group_bytes += segment.size_bytes
        else:
            groups.append([segment])
            group_bytes = segment.size_bytes
    return groups


def _new_cleaned_segment(log: Log, base_offset: int, now_ms: int) -> LogSegment:
    """A segment written as ``<base>.log.cleaned`` (``.index.cleaned``, ``.timeindex.cleaned``)."""
    path = os.path.join(log.directory, segment_file_name(base_offset, LOG_SUFFIX) + CLEANED_SUFFIX)
    handle = log.fs.open(path)
    if handle.size():
        handle.truncate(0)       # left by a pass this process gave up
    return LogSegment(log.fs, log.directory, base_offset, handle,
                      index_size_max_bytes=log.config.segment_index_bytes,
                      index_interval_bytes=log.config.index_interval_bytes, now_ms=now_ms, new=True,
                      file_suffix=CLEANED_SUFFIX)


def _seal(segment: LogSegment) -> None:
    """Make the log and both indexes durable and close the log file."""
    segment.log.fsync()
    segment.on_become_inactive()
    segment.log.close()


class Cleaning:
    """One pass over one log, advanced by ``step`` a bounded amount at a time."""

    def __init__(self, section: LogToClean, config: CleanerConfig, now_ms: int,
                 before_swap: Callable[[Log, int], None] | None = None):
        self.log = section.log
        self._before_swap = before_swap      # called once, before the first swap (LogCleaner)
        self.now_ms = now_ms                 # the pass's time: lag, delete horizons
        self.done = False
        self._first_dirty_offset = section.first_dirty_offset
        self._end_offset = section.end_offset
        self._map = OffsetMap(config.offset_map_capacity)
        self._truncations = self.log.truncations
        self._to_map = list(section.dirty_segments)
        self._position = 0                   # in the segment being read
        self._map_end_offset = -1            # known once the map is complete
        self._txn_pending: dict[int, list[tuple[bytes, int]]] = {}   # producer id → its open txn's keys
        self._groups: list[list[LogSegment]] = []
        self._source = 0                     # index of the segment being read in the current group
        self._writer: LogSegment | None = None
        self._producer_last_offsets: dict[int, int] = {}
        self._segments_before = self._segments_after = 0
        self._bytes_read = self._bytes_written = self._records_read = self._records_kept = 0

    def is_valid(self) -> bool:
        """Whether the log still is as the pass found it: compacted, online, not
        truncated, every segment still to be read in place and inactive."""
        log = self.log
        if log.is_offline or not log.config.compact or log.truncations != self._truncations:
            return False
        inactive = {id(segment) for segment in log.segments[:-1]}
        pending = self._to_map + [segment for group in self._groups for segment in group]
        return all(id(segment) in inactive for segment in pending)

    def step(self, max_bytes: int) -> bool:
        """Read about ``max_bytes`` (at least one batch) and act on it; True once done."""
        budget = max_bytes
        while budget > 0 and not self.done:
            if self._to_map:
                budget -= self._map_some(budget)
            elif self._groups:
                budget -= self._clean_some(budget)
            else:
                self._finish()
        return self.done

    def discard(self) -> None:
        """Give the pass up: its half-written segment goes (or is left to the next start
        when the disk refuses)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.delete()                  # closes the file first
        except OSError as e:
            logger.warning("%s: cannot remove the cleaned segment being written: %s", self.log.topic_partition, e)

    # -- map ------------------------------------------------------------------------

    def _map_some(self, budget: int) -> int:
        segment = self._to_map[0]
        data, batches = _read_batches(segment, self._position, budget)
        offset_map, first_dirty = self._map, self._first_dirty_offset
        pending = self._txn_pending
        for position, header in batches:
            if header.is_control:
                # A transaction's records count only once it committed: an aborted (or
                # still open) record must never shadow an earlier committed value.
                held = pending.pop(header.producer_id, [])
                if held and read_control(data, position)[0] == CONTROL_COMMIT:
                    for key, offset in held:
                        offset_map.put(key, offset)
            elif header.last_offset >= first_dirty:
                if len(offset_map) and not offset_map.has_room(header.record_count):
                    self._end_map(header.base_offset)
                    return len(data)
                for record in iter_records(data, position):
                    if record.key is not None and record.offset >= first_dirty:
                        if header.is_transactional:
                            pending.setdefault(header.producer_id, []).append((record.key, record.offset))
                        else:
                            offset_map.put(record.key, record.offset)
            self._position += header.size_bytes
        if self._position >= segment.size_bytes:
            self._to_map.pop(0)
            self._position = 0
            if not self._to_map:
                self._end_map(self._end_offset)
        return len(data)

    def _end_map(self, end_offset: int) -> None:
        """The map is complete up to ``end_offset``: plan the rewrite of everything below."""
        log = self.log
        self._to_map = []
        self._position = 0
        self._map_end_offset = end_offset
        segments = log.segments
        cleaned = [segment for segment in segments[:-1] if segment.base_offset < end_offset]
        self._groups = group_segments_by_size(cleaned, segments[len(cleaned)].base_offset,
                                              log.config.segment_bytes)
        self._segments_before = len(cleaned)
        self._producer_last_offsets = log.producer_last_offsets()

    # -- clean ------------------------------------------------------------------------

    def _clean_some(self, budget: int) -> int:
        group = self._groups[0]
        if self._writer is None:
            self._writer = _new_cleaned_segment(self.log, group[0].base_offset, self.now_ms)
            self._source = self._position = 0
        segment = group[self._source]
        data, batches = _read_batches(segment, self._position, budget)
        out, written = bytearray(), []
        for position, header in batches:
            kept = self._clean_batch(data, position, header)
            if kept is not None:
                kept_header = read_header(kept)
                written.append(BatchInfo(len(out), len(kept), kept_header.last_offset, kept_header.max_timestamp))
                out += kept
            self._position += header.size_bytes
        if written:
            self._writer.append(out, written, read_header(out, written[-1].position).next_offset, self.now_ms)
            self._bytes_written += len(out)
        self._bytes_read += len(data)
        if self._position >= segment.size_bytes:
            self._source += 1
            self._position = 0
        if self._source == len(group):
            self._swap(group)
        return len(data)

    def _clean_batch(self, data: bytes, position: int, header: BatchHeader) -> bytes | None:
        """The batch as it stays: its own bytes, re-encoded with fewer records or a
        delete horizon, an empty header (a producer's latest batch), or None."""
        end = position + header.size_bytes
        if header.is_control:
            return data[position:end]
        horizon_ms = header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None
        offset_map, now_ms = self._map, self.now_ms
        records = list(iter_records(data, position))
        kept = [record for record in records
                if record.key is not None and offset_map.get(record.key) <= record.offset
                and (record.value is not None or horizon_ms is None or now_ms < horizon_ms)]
        self._records_read += len(records)
        self._records_kept += len(kept)
        if not kept:
            if self._producer_last_offsets.get(header.producer_id) == header.last_offset:
                return _empty_batch(header)
            return None
        has_tombstones = any(record.value is None for record in kept)
        if len(kept) == len(records) and (horizon_ms is not None or not has_tombstones):
            return data[position:end]
        if not has_tombstones:
            horizon_ms = None
        elif horizon_ms is None:
            horizon_ms = now_ms + self.log.config.delete_retention_ms
        return _rebuild_batch(header, kept, horizon_ms)

    def _swap(self, group: list[LogSegment]) -> None:
        _seal(self._writer)
        self._writer = None
        if self._before_swap is not None:
            self._before_swap(self.log, self._end_offset)
            self._before_swap = None
        self.log.replace_segments(group)
        self._groups.pop(0)
        self._segments_after += 1

    def _finish(self) -> None:
        log = self.log
        log.set_cleaner_checkpoint(self._map_end_offset)
        self.done = True
        logger.info("%s: cleaned offsets %d..%d (%d keys mapped): %d segments into %d, %d bytes into %d, "
                    "%d of %d records kept", log.topic_partition, log.log_start_offset, self._map_end_offset,
                    len(self._map), self._segments_before, self._segments_after, self._bytes_read,
                    self._bytes_written, self._records_kept, self._records_read)


class LogCleaner:
    """Picks the filthiest compacted log and cleans it, one bounded step per call.

    An ``OSError`` takes the log's directory offline through ``on_io_error(log_dir,
    error)`` (the ``LogManager``'s handler, as for the log's own I/O).
    ``before_swap(log, end_offset)`` runs before a pass replaces its first segment: the
    LogManager makes the recovery point on disk reach ``end_offset`` there, so that
    recovery never checks the boundaries of cleaned segments (they may end early)."""

    def __init__(self, on_io_error: Callable[[str, OSError], None],
                 before_swap: Callable[[Log, int], None] | None = None):
        self._on_io_error = on_io_error
        self._before_swap = before_swap
        self._cleaning: Cleaning | None = None
        self._next_selection_ms = 0                       # monotonic: backoff when idle
        self._uncleanable: set[TopicPartition] = set()

    def clean_one(self, logs: Iterable[Log], config: CleanerConfig, now_ms: int,
                  monotonic_ms: int) -> Cleaning | None:
        """Advance the current pass by one step, starting one on the filthiest of ``logs``
        (compacted ones) if none is under way. Returns the pass advanced (its ``done``
        says whether it completed), None when there was nothing to do."""
        cleaning = self._cleaning
        if cleaning is not None and not cleaning.is_valid():
            logger.info("%s: the log changed under the cleaner; giving up this pass", cleaning.log.topic_partition)
            self.abort()
            cleaning = None
        if cleaning is None:
            if monotonic_ms < self._next_selection_ms:
                return None
            section = grab_filthiest_log(self._dirty_sections(logs, now_ms))
            if section is None:
                self._next_selection_ms = monotonic_ms + config.backoff_ms
                return None
            cleaning = Cleaning(section, config, now_ms, self._before_swap)
            self._cleaning = cleaning
        try:
            if cleaning.step(config.step_bytes):
                self._cleaning = None
        except CorruptRecordError as e:
            self.abort()
            self._give_up_on(cleaning.log, e)
        except OSError as e:
            self.abort()
            self._io_failed(cleaning.log, e)
        except StorageError:     # from the log's own I/O, which took its directory offline
            self.abort()
        return cleaning

    def abort(self, log: Log | None = None) -> Log | None:
        """Drop the pass under way (only if it is over ``log``, when given); returns its log."""
        cleaning = self._cleaning
        if cleaning is None or (log is not None and cleaning.log is not log):
            return None
        self._cleaning = None
        cleaning.discard()
        return cleaning.log

    def _dirty_sections(self, logs: Iterable[Log], now_ms: int) -> Iterator[LogToClean]:
        for log in logs:
            if log.is_offline or log.topic_partition in self._uncleanable:
                continue
            try:
                section = find_dirty_section(log, now_ms)
            except CorruptRecordError as e:
                self._give_up_on(log, e)
                continue
            except OSError as e:
                self._io_failed(log, e)
                continue
            if section is not None:
                yield section

    def _give_up_on(self, log: Log, error: CorruptRecordError) -> None:
        logger.error("%s: cannot clean, the log does not read back (%s); it stays uncleanable until "
                     "the next start", log.topic_partition, error)
        self._uncleanable.add(log.topic_partition)

    def _io_failed(self, log: Log, error: OSError) -> None:
        logger.error("%s: I/O error while cleaning: %s", log.topic_partition, error)
        self._on_io_error(os.path.dirname(log.directory), error)


# -- batches ------------------------------------------------------------------------------


def _read_batches(segment: LogSegment, position: int,
                  size_bytes: int) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """Whole batches of ``segment`` from ``position``, about ``size_bytes`` of them (at
    least one), CRC-checked: the bytes read and ``(position in them, header)`` of each."""
    remaining = segment.size_bytes - position
    if remaining <= 0:
        return b"", []
    data = segment.log.pread(min(max(size_bytes, BATCH_HEADER_SIZE_BYTES), remaining), position)
    if len(data) >= BATCH_HEADER_SIZE_BYTES:
        first_size_bytes = read_header(data).size_bytes
        if first_size_bytes > len(data):               # one batch above the budget: read it whole
            data = segment.log.pread(first_size_bytes, position)
    batches = list(iter_batches(data))
    if not batches:
        raise CorruptRecordError(f"segment {segment.base_offset} of {segment.directory}: "
                                 f"no whole batch at position {position}")
    for at, _ in batches:
        validate_batch(data, at, strict=False)
    return data, batches


def _rebuild_batch(header: BatchHeader, records: list[Record], horizon_ms: int | None) -> bytes:
    """``header``'s batch holding only ``records``: the same base and last offsets,
    producer fields, leader epoch and compression; ``horizon_ms`` as its delete horizon."""
    base_timestamp = records[0].timestamp if horizon_ms is None else horizon_ms
    body = encode_records((record, record.offset - header.base_offset, record.timestamp - base_timestamp)
                          for record in records)
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(record.timestamp for record in records)
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    payload = compress(Compression(header.compression), body)
    return _pack(header, attributes, base_timestamp, max_timestamp, len(records), payload)


def _empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with no records left (Kafka keeps such a header for producer state)."""
    attributes = header.attributes & ~(_COMPRESSION_MASK | DELETE_HORIZON_MASK)
    return _pack(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _pack(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int,
          record_count: int, payload: bytes) -> bytes:
    return pack_batch(base_offset=header.base_offset, last_offset_delta=header.last_offset_delta,
                      partition_leader_epoch=header.partition_leader_epoch, attributes=attributes,
                      base_timestamp=base_timestamp, max_timestamp=max_timestamp,
                      producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                      base_sequence=header.base_sequence, record_count=record_count, payload=payload)
