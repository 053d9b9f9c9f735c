"""A partition's segments on disk (Kafka's ``LocalLog``).

Theory of operation. A ``LocalLog`` owns the files of one partition directory
``<topic>-<partition>``: the list of ``LogSegment`` sorted by base offset (the last
one is *active* and takes appends), the log end offset (where the next batch
goes), the recovery point (everything below it is fsynced) and the directory's
per-offset side files (producer ``.snapshot`` and ``.txnindex`` names). It knows
nothing of high watermarks, producers, epochs or retention rules: ``Log``
(log.py, Kafka's ``UnifiedLog``) decides, this class carries out::

    segments[0].base_offset < … < segments[-1].base_offset <= log_end_offset
    segments[-1].next_offset == log_end_offset           (checked after every change)
    recovery_point <= log_end_offset

* ``append`` writes batches that already carry offsets, rolling first when the
  active segment is full (``segment.bytes``, ``segment.ms``, a full index, or
  offsets that would overflow its int32 relative offsets).
* ``roll`` fsyncs the old segment (on the ``background`` runner when there is
  one, as Kafka's ``flush-log`` task), lists the new file durably after it, and
  then calls ``on_roll_durable`` (the ``Log`` takes its producer snapshot there).
* ``read`` returns a ``FileSlice`` of whole batches from one segment.
* ``truncate_to``, ``truncate_fully_and_start_at``, ``delete_oldest_segments``
  and ``replace_segments`` remove or swap segments, each durable on return.
* ``flush`` / ``maybe_flush`` move the recovery point (``flush.messages``,
  ``flush.ms``).

An ``OSError`` takes the log offline: ``go_offline`` reports the directory
through ``on_io_error`` (Kafka's ``LogDirFailureChannel``), and ``Log`` refuses
every later call.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Callable, NamedTuple

from tidelog.core.clock import Clock
from tidelog.core.errors import CorruptRecordError, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import CorruptSegmentError
from tidelog.storage.files import FileHandle, FileSystem, fsync_file
from tidelog.storage.log_loader import (
    CLEANED_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from tidelog.storage.segment import (
    RELATIVE_OFFSET_MAX,
    BatchInfo,
    LogSegment,
    OffsetAndTimestamp,
    segment_file_name,
)

logger = logging.getLogger(__name__)

# Runs ``work`` off the caller's thread, then ``done(error)`` back on it
# (``LocalLog._flush_in_background``); None means flush inline.
Background = Callable[[Callable[[], None], Callable[[BaseException | None], None]], None]


class LogOffsetMetadata(NamedTuple):
    """An offset with where it lives (Kafka's LogOffsetMetadata); -1 = unknown."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset < 0

    def on_older_segment(self, other: "LogOffsetMetadata") -> bool:
        assert not (self.message_offset_only or other.message_offset_only), "segment unknown"
        return self.segment_base_offset < other.segment_base_offset

    def on_same_segment(self, other: "LogOffsetMetadata") -> bool:
        assert not (self.message_offset_only or other.message_offset_only), "segment unknown"
        return self.segment_base_offset == other.segment_base_offset

    def position_diff(self, other: "LogOffsetMetadata") -> int:
        """Bytes from ``other`` to ``self``, both on the same segment."""
        assert self.on_same_segment(other), "positions on different segments"
        return self.relative_position_in_segment - other.relative_position_in_segment


class FileSlice:
    """``length`` bytes of a segment file from ``position``: what a fetch returns.

    Read it promptly: a slice of a segment that retention or truncation removed
    afterwards raises ``ValueError`` (closed file) or reads short (``StorageError``).
    Call ``fileno()`` at the moment of ``sendfile``, do not keep the number.
    """

    __slots__ = ("handle", "position", "length")

    def __init__(self, handle: FileHandle | None, position: int, length: int):
        self.handle = handle
        self.position = position
        self.length = length

    def read_bytes(self) -> bytes:
        if self.length == 0:
            return b""
        data = self.handle.pread(self.length, self.position)
        if len(data) != self.length:
            raise StorageError(f"{self.handle.path}: read {len(data)} of {self.length} bytes "
                               f"at {self.position}; the segment changed under the read")
        return data

    def on_file(self) -> bool:
        """Whether every byte of the slice is in the file (none still queued behind)."""
        return self.handle is None or self.handle.written_through(self.position + self.length)

    def fileno(self) -> int:
        if self.handle is None:
            raise ValueError("an empty slice has no file")
        return self.handle.fileno(self.position + self.length)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        path = self.handle.path if self.handle is not None else None
        return f"FileSlice({path!r}, position={self.position}, length={self.length})"


class FetchDataInfo(NamedTuple):
    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice


def _next_base_offset(active: LogSegment, first_offset: int, last_offset: int) -> int:
    """Where a segment rolled for a batch of offsets ``first_offset..last_offset`` begins:
    where the active segment's data ends, so that every segment begins where the one
    before it ends — in a compacted log too, whose batches skip offsets the cleaner
    removed (a follower of a compacted leader appends across such gaps, and a log
    truncated into one has its end above its data). Recovery relies on it: a segment
    that ends short of the next one's base lost its tail (log_loader). Only a batch too
    far past that end for the new segment's 32-bit relative offsets starts its own."""
    end = active.data_end
    return end if end is not None and last_offset - end <= RELATIVE_OFFSET_MAX else first_offset


class LocalLog:
    """The segments of one partition directory; see the module docstring.

    ``segments``, ``base_offsets``, ``log_end_offset`` and ``recovery_point`` are
    read by ``Log`` directly (the append and read paths) and changed only here."""

    def __init__(self, directory: str, topic_partition: TopicPartition, config: LogConfig, clock: Clock,
                 fs: FileSystem, segments: list[LogSegment], *, log_end_offset: int, recovery_point: int,
                 on_roll_durable: Callable[[], None],
                 on_io_error: Callable[[str, OSError], None] | None = None,
                 background: Background | None = None, unsynced_dirs: tuple[str, ...] = ()):
        self.directory = directory
        self.topic_partition = topic_partition
        self.config = config
        self.clock = clock
        self.fs = fs
        self.segments = segments                 # oldest first; the last is active
        self.base_offsets = [segment.base_offset for segment in segments]
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.truncations = 0                     # times data was removed from the end
        self.last_flush_ms = clock.now_ms()
        self.offline = False
        self.closed = False                      # closed (shut down, deleted, moved): flushes in flight end quietly
        self._on_roll_durable = on_roll_durable
        self._on_io_error = on_io_error
        self._background = background
        self._rolls = self._rolls_durable = 0    # rolls, and those whose new file is durably listed
        # A new log's entries not yet fsynced (``load_log``'s ``defer_new_entries``): files
        # written without fsync (``partition.metadata``), then directories, fsynced by its
        # first flush before any offset of it counts as durable (``sync_entries``).
        self._unsynced_files: list[str] = []
        self._unsynced_dirs: list[str] = list(unsynced_dirs)

    # -- state ----------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self.segments[-1]
        return LogOffsetMetadata(self.log_end_offset, active.base_offset, active.size_bytes)

    @property
    def defers_entries(self) -> bool:
        """Whether the log's directory entries still wait for its first flush."""
        return bool(self._unsynced_dirs)

    def defer_if_pending(self, path: str) -> bool:
        """Whether a write of ``path`` (in the log's directory) may skip its fsyncs: the
        log's entries still wait for its first flush, which then syncs ``path`` too.

        Otherwise the write is durable, and its fsync of the directory lists every file
        there: if a roll's flush is still in flight, the rolled segments' data is synced
        first, here, so that no segment file is listed before the data before it
        (simulator seed 43860: an epoch checkpoint's write listed segments 541 and 553
        while 541's data was unsynced, and a power cut left a hole)."""
        if not self._unsynced_dirs:
            self.sync_rolled_segments()
            return False
        if path not in self._unsynced_files:
            self._unsynced_files.append(path)
        return True

    def sync_rolled_segments(self) -> None:
        """Before a directory fsync that is not a roll's (a durable write, deleting or
        swapping segments, a producer snapshot): if a roll's flush is in flight, sync the
        rolled segments' data now (and list them), so the fsync cannot list a segment
        file before the data before it."""
        if self._rolls_durable < self._rolls and not self.offline and not self.closed:
            self.flush(self.segments[-1].base_offset)

    def sync_entries(self) -> None:
        """Fsync what a new log deferred: its files' bytes, then its directory, then the
        directory holding it. Before that, a crash may take the whole log away, which
        loses nothing: no offset of it was durable yet."""
        self._sync_entries(*self._take_entries())

    def _take_entries(self) -> tuple[list[str], list[str]]:
        taken = self._unsynced_files, self._unsynced_dirs
        self._unsynced_files, self._unsynced_dirs = [], []
        return taken

    def _sync_entries(self, files: list[str], dirs: list[str]) -> None:
        """(Also on the background runner.) A path gone meanwhile — the log deleted, a
        file replaced — has nothing left to make durable."""
        for path in files:
            try:
                fsync_file(self.fs, path)
            except FileNotFoundError:
                pass
        for directory in dirs:
            try:
                self.fs.fsync_dir(directory)
            except FileNotFoundError:
                pass

    @property
    def rolls_durable(self) -> bool:
        """Whether every rolled segment's file is durably listed (no roll's flush in flight)."""
        return self._rolls_durable == self._rolls

    def raise_recovery_point(self, offset: int) -> None:
        """Nothing below ``offset`` needs recovery (it moved below the log start offset)."""
        self.recovery_point = max(self.recovery_point, offset)

    def go_offline(self, error: OSError) -> None:
        if self.offline:
            return
        self.offline = True
        logger.error("%s: I/O error, taking the log offline: %s", self.topic_partition, error)
        if self._on_io_error is not None:
            self._on_io_error(os.path.dirname(self.directory), error)

    def check_segments(self) -> None:
        """The structural invariants, checked after segments come or go."""
        assert self.recovery_point <= self.log_end_offset, (self.recovery_point, self.log_end_offset)
        assert self.segments and self.segments[-1].next_offset == self.log_end_offset, \
            (self.segments[-1].next_offset, self.log_end_offset)
        assert self.base_offsets == [segment.base_offset for segment in self.segments]

    # -- side files: producer snapshots and aborted-transaction indexes -----------------

    def snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, segment_file_name(offset, SNAPSHOT_SUFFIX))

    def snapshot_offsets(self) -> list[int]:
        return self._offsets_of(SNAPSHOT_SUFFIX)

    def txn_index_path(self, base_offset: int) -> str:
        return os.path.join(self.directory, segment_file_name(base_offset, TXN_INDEX_SUFFIX))

    def txn_index_bases(self) -> list[int]:
        return self._offsets_of(TXN_INDEX_SUFFIX)

    def _offsets_of(self, suffix: str) -> list[int]:
        offsets = []
        for name in self.fs.listdir(self.directory):
            stem = name[:-len(suffix)]
            if name.endswith(suffix) and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    # -- appends and rolls ----------------------------------------------------------

    def append(self, buffer, batches: list[BatchInfo], first_offset: int, next_offset: int,
               max_timestamp: int, now_ms: int, behind: bool = True) -> None:
        """Write batches numbered ``[first_offset, next_offset)`` (rolling first if due)."""
        # Offsets only move forward (gaps are allowed: a follower copies compacted batches).
        assert self.log_end_offset <= first_offset < next_offset, (first_offset, next_offset, self.log_end_offset)
        segment = self._maybe_roll(len(buffer), max_timestamp, first_offset, next_offset - 1, now_ms)
        segment.append(buffer, batches, next_offset, now_ms, behind)
        self.log_end_offset = next_offset
        self.maybe_flush(now_ms)

    def _maybe_roll(self, append_bytes: int, max_timestamp: int, first_offset: int, last_offset: int,
                    now_ms: int) -> LogSegment:
        segment = self.segments[-1]
        size = segment.size_bytes
        config = self.config
        offsets_fit = last_offset - segment.base_offset <= RELATIVE_OFFSET_MAX
        if size == 0:
            if not offsets_fit:  # an empty active segment whose base is too far back
                self.roll(max(first_offset, self.log_end_offset))
        elif (size > config.segment_bytes - append_bytes
              or segment.offset_index.is_full or segment.time_index.is_full or not offsets_fit
              or segment.time_waited_for_roll(now_ms, max_timestamp) > config.max_segment_ms):
            self.roll(_next_base_offset(segment, first_offset, last_offset))
        return self.segments[-1]

    def roll(self, new_base_offset: int) -> None:
        """Start a new active segment; the old one is fsynced and the recovery point moves.

        Order on disk: the old segment's bytes, then the directory entry of the new one,
        then the producer snapshot (``on_roll_durable``). A new segment file that outlived
        its predecessor's unsynced tail would leave a hole after a crash (offsets served
        past lost ones), so with a background runner the directory is fsynced there,
        after the old data, and the snapshot taken when that is done."""
        roll = self._rolls + 1
        old = self.segments[-1]
        scheduled = False
        if old.size_bytes == 0:
            old.delete()
            self.segments.pop()
            self.base_offsets.pop()
        else:
            scheduled = self._flush_in_background(min(new_base_offset, self.log_end_offset), roll)
            old.on_become_inactive()
        self.segments.append(self._new_segment(new_base_offset))
        self.base_offsets.append(new_base_offset)
        self._rolls = roll
        if not scheduled and self._rolls_durable == roll - 1:   # nothing in flight before it
            self.fs.fsync_dir(self.directory)
            self._rolls_durable = self._rolls
            self._on_roll_durable()
        logger.debug("%s: rolled segment %d", self.topic_partition, new_base_offset)

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.create(self.fs, self.directory, base_offset,
                                 index_size_max_bytes=self.config.segment_index_bytes,
                                 index_interval_bytes=self.config.index_interval_bytes,
                                 now_ms=self.clock.now_ms())

    # -- durability -------------------------------------------------------------------

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if ``flush.messages`` or ``flush.ms`` says so; returns whether it did."""
        config = self.config
        if self.log_end_offset == self.recovery_point:
            return False
        if (self.log_end_offset - self.recovery_point >= config.flush_messages
                or now_ms - self.last_flush_ms >= config.flush_ms):
            self.flush(self.log_end_offset)
            return True
        return False

    def flush(self, offset: int) -> None:
        """Fsync the segments below ``offset`` (and a rolled file's directory entry, and a
        new log's deferred entries: an empty log keeps deferring them)."""
        if offset <= self.recovery_point:
            return
        if self._unsynced_dirs or self._unsynced_files:
            self.sync_entries()
        first = max(0, bisect_right(self.base_offsets, self.recovery_point) - 1)
        last = max(0, bisect_right(self.base_offsets, offset - 1) - 1)
        for segment in self.segments[first:last + 1]:
            segment.flush()
        if self._rolls_durable < self._rolls:          # a roll's new file, after the data before it
            self.fs.fsync_dir(self.directory)
            self._rolls_durable = self._rolls
        self.recovery_point = offset
        self.last_flush_ms = self.clock.now_ms()

    def _flush_in_background(self, offset: int, roll: int) -> bool:
        """Fsync the segments below ``offset`` on the background runner; the recovery point
        moves once they are durable; then, back on the caller's thread and unless a later
        roll came meanwhile, the directory is fsynced (the new file listed only after the
        bytes before it) and ``on_roll_durable`` called. Only the log files: the index
        files of segments that stopped being active are written and fsynced by
        ``on_become_inactive``, and a recovery rebuilds those above the recovery point
        anyway. Returns whether it was scheduled (else it was done inline)."""
        if self._background is None:
            self.flush(offset)
            return False
        first = max(0, bisect_right(self.base_offsets, self.recovery_point) - 1)
        last = max(0, bisect_right(self.base_offsets, offset - 1) - 1)
        syncs = [segment.log.sync_later() for segment in self.segments[first:last + 1]] \
            if offset > self.recovery_point else []
        files, dirs = self._take_entries() if syncs else ([], [])     # a new log's, with its first data
        # The log's own directory is listed by ``done``, as every roll's: by the time this
        # work runs, later rolls may have made files whose predecessors' data is not
        # synced, and a directory fsync here would list them (simulator seed 42622: a
        # power cut then left segment 12 empty and segment 26 listed, a hole).
        lists_own = self.directory in dirs
        dirs = [directory for directory in dirs if directory != self.directory]
        truncations = self.truncations

        def work() -> None:
            for sync in syncs:
                sync()
            self._sync_entries(files, dirs)

        def done(error: BaseException | None) -> None:
            if self.offline or self.closed:
                return      # closed meanwhile (deleted, moved): nothing left to list or to move
            if isinstance(error, OSError):
                self.go_offline(error)
                return
            if error is not None:
                logger.error("%s: background flush failed", self.topic_partition, exc_info=error)
                return
            if lists_own and self._rolls != roll:
                return      # the first segment's entry is listed by a later roll's flush: no offset is durable yet
            if self.truncations == truncations and offset > self.recovery_point:
                self.recovery_point = offset
                self.last_flush_ms = self.clock.now_ms()
            if self._rolls != roll:
                return      # a later roll's flush syncs the bytes before its file, then lists both
            try:
                self.fs.fsync_dir(self.directory)   # metadata only: the bytes before are durable
                self._rolls_durable = roll
                self._on_roll_durable()
            except OSError as e:
                self.go_offline(e)
        self._background(work, done)
        return True

    # -- reads ------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None,
             min_one_batch: bool) -> FetchDataInfo:
        """Whole batches from the segment holding ``fetch_offset`` (which the caller
        checked is in the log); empty at the log end or at/after ``max_offset``."""
        if fetch_offset == self.log_end_offset:
            return FetchDataInfo(self.log_end_offset_metadata, FileSlice(self.segments[-1].log, 0, 0))
        if max_offset is not None and fetch_offset >= max_offset:
            max_bytes, min_one_batch = 0, False  # only the offset metadata is wanted
        segments = self.segments
        i = bisect_right(self.base_offsets, fetch_offset) - 1
        assert i >= 0, f"offset {fetch_offset} is below the first segment"
        while i < len(segments):
            segment = segments[i]
            try:
                found = segment.read(fetch_offset, max_bytes, max_offset, min_one_batch)
            except CorruptRecordError as e:
                logger.error("%s: corrupt data while reading offset %d: %s",
                             self.topic_partition, fetch_offset, e)
                raise CorruptSegmentError(f"{self.topic_partition}: {e}") from None
            if found is not None:
                position, length = found
                return FetchDataInfo(LogOffsetMetadata(fetch_offset, segment.base_offset, position),
                                     FileSlice(segment.log, position, length))
            i += 1
        return FetchDataInfo(self.log_end_offset_metadata, FileSlice(self.segments[-1].log, 0, 0))

    def find_offset_by_timestamp(self, timestamp_ms: int, start_offset: int) -> OffsetAndTimestamp | None:
        """The first record at or after ``start_offset`` with timestamp ``>= timestamp_ms``."""
        for segment in self.segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, start_offset)
                if found is not None:
                    return found
        return None

    def find_offset_of_max_timestamp(self, start_offset: int) -> OffsetAndTimestamp | None:
        """The first record carrying the largest timestamp (None if no record has one)."""
        segment = max(self.segments, key=lambda s: s.max_timestamp)  # the first of equals
        if segment.max_timestamp < 0:
            return None
        return segment.find_offset_by_timestamp(segment.max_timestamp, start_offset)

    # -- removing and replacing segments ----------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets ``>= offset`` (``offset`` is inside the log,
        at or above the first segment's base); returns the new log end offset:
        ``min(offset, base offset of the batch holding it)``. Durable on return."""
        keep = bisect_right(self.base_offsets, offset)  # segments with base <= offset stay
        doomed = self.segments[keep:]
        if doomed:
            self.sync_rolled_segments()
            del self.segments[keep:]
            del self.base_offsets[keep:]
            for segment in doomed:
                segment.delete()
            self.fs.fsync_dir(self.directory)
        active = self.segments[-1]
        active.ensure_indexes()
        _, first_dropped_base = active.truncate_to(offset)
        new_end = min(offset, first_dropped_base if first_dropped_base is not None else offset)
        active.next_offset = new_end
        logger.info("%s: truncated to offset %d (asked %d), deleting %d segments", self.topic_partition,
                    new_end, offset, len(doomed))
        self.log_end_offset = new_end
        self.recovery_point = min(self.recovery_point, new_end)
        self.truncations += 1
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment, producer snapshot and transaction index, and start one
        empty segment at ``offset``; durable on return."""
        for segment in self.segments:
            segment.delete()
        for snapshot in self.snapshot_offsets():
            self.fs.remove(self.snapshot_path(snapshot))
        for base in self.txn_index_bases():
            self.fs.remove(self.txn_index_path(base))
        self.fs.fsync_dir(self.directory)
        self.segments = [self._new_segment(offset)]
        self.fs.fsync_dir(self.directory)
        self.base_offsets = [offset]
        self.log_end_offset = self.recovery_point = offset
        self.truncations += 1

    def delete_oldest_segments(self, count: int) -> None:
        """Delete the ``count`` oldest segments, durably; if that is all of them, roll
        first (a log always keeps one segment)."""
        assert 0 < count <= len(self.segments), (count, len(self.segments))
        self.sync_rolled_segments()
        if count == len(self.segments):
            self.roll(self.log_end_offset)
        doomed = self.segments[:count]
        del self.segments[:count]
        del self.base_offsets[:count]
        for segment in doomed:
            segment.delete()
        self.fs.fsync_dir(self.directory)
        logger.info("%s: deleted %d segments up to base offset %d", self.topic_partition, count,
                    self.segments[0].base_offset)

    def replace_segments(self, replaced: list[LogSegment]) -> LogSegment:
        """Swap in the cleaned copy of ``replaced`` (consecutive inactive segments) that the
        log cleaner wrote and fsynced as ``<base>.log.cleaned`` plus its two indexes.

        Crash-safe in three durable steps (docs/compaction.md): the ``.cleaned`` files
        become ``.swap`` (the commit point: ``Log.open`` finishes a swap it finds);
        the old segments are deleted oldest first, each durably; the ``.swap`` files
        take their final names. Returns the new segment.
        """
        first = next(i for i, segment in enumerate(self.segments) if segment is replaced[0])
        end = first + len(replaced)
        assert self.segments[first:end] == replaced and end < len(self.segments), "not inactive neighbours"
        base_offset = replaced[0].base_offset
        final = [os.path.join(self.directory, segment_file_name(base_offset, suffix))
                 for suffix in SEGMENT_FILE_SUFFIXES]      # the .log last
        self.sync_rolled_segments()
        for path in final:
            self.fs.rename(path + CLEANED_SUFFIX, path + SWAP_SUFFIX)
        self.fs.fsync_dir(self.directory)
        for segment in replaced:
            segment.delete()
            self.fs.fsync_dir(self.directory)   # oldest first: what a crash leaves is a consistent suffix
        for path in final:
            self.fs.rename(path + SWAP_SUFFIX, path)
        self.fs.fsync_dir(self.directory)
        cleaned = LogSegment.open_existing(self.fs, self.directory, base_offset,
                                           index_size_max_bytes=self.config.segment_index_bytes,
                                           index_interval_bytes=self.config.index_interval_bytes,
                                           now_ms=self.clock.now_ms())
        self.segments[first:end] = [cleaned]
        self.base_offsets[first:end] = [base_offset]
        return cleaned

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Write index files and close every file (no fsync: flush first for durability)."""
        self.closed = True
        for segment in self.segments:
            try:
                segment.close()
            except OSError as e:
                logger.warning("%s: closing %s: %s", self.topic_partition, segment, e)
                segment.log.close()

    def delete(self) -> None:
        """Remove the whole partition directory; the log is offline afterwards."""
        for segment in self.segments:
            segment.log.close()
        self.fs.rmtree(self.directory)
        self.fs.fsync_dir(os.path.dirname(self.directory))
        self.offline = True  # nothing left to serve
