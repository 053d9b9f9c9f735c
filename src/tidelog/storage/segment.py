"""One segment of a partition's log: ``<base_offset:020d>.log`` plus its indexes.

Theory of operation. A segment is a file of record batches, stored byte for byte
as the wire carries them, whose offsets are all ``>= base_offset``; an
``OffsetIndex`` and a ``TimeIndex`` make lookups cheap. The segment never
decodes records on the append or read path: it reads batch *headers* only
(``read_header``), a few KiB around the position an index lookup gives.

* ``append(buffer, batches)``: one write of the whole buffer; index entries are
  added every ``index_interval_bytes`` (an entry names the batch's last offset and
  its start position, as Kafka does).
* ``read(...)``: the file range of whole batches for a fetch (see the method).
* ``translate_offset(offset)``: the batch holding ``offset`` (or the first after).
* ``truncate_to(offset)``: drop every batch whose last offset is ``>= offset``.
* ``recover()``: validate every batch from the start (header, CRC, offsets
  increasing and inside the segment), cut the file at the first bad or torn one,
  rebuild both indexes; returns the bytes cut.

Invariants: batches are back to back from position 0, base offsets increase
(``>=`` the previous next offset), relative offsets and positions fit in int32;
after ``recover`` or for a segment below the recovery point, every byte of the
file belongs to a valid batch.
"""

from __future__ import annotations

import logging
import os
from typing import Iterator, NamedTuple

from crc32c import crc32c

from tidelog.core.errors import CorruptRecordError
from tidelog.records.batch import (
    BATCH_HEADER_SIZE_BYTES,
    BatchHeader,
    iter_records,
    read_header,
    validate_batch,
)
from tidelog.storage.files import FileHandle, FileSystem
from tidelog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
RELATIVE_OFFSET_MAX = (1 << 31) - 1
SCAN_CHUNK_BYTES = 4096           # bytes read at once when walking batch headers
RECOVERY_CHUNK_BYTES = 1 << 20    # bytes read at once when validating a segment
READ_POSITIONS_MAX = 16           # remembered "next fetch starts here" positions per segment
_OFFSET_MAX = 1 << 63
_CRC_START = 21                   # the CRC-32C covers a batch from ``attributes`` on


def _position_of(entry: tuple[int, int]) -> int:
    return entry[1]


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class BatchInfo(NamedTuple):
    """What an append tells the segment about each batch in its buffer."""

    position: int        # relative to the start of the buffer
    size_bytes: int
    last_offset: int
    max_timestamp: int


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer: unpacks as ``(offset, timestamp_ms, leader_epoch)``."""

    offset: int
    timestamp_ms: int
    leader_epoch: int | None


class LogSegment:
    def __init__(self, fs: FileSystem, directory: str, base_offset: int, log: FileHandle, *,
                 index_size_max_bytes: int, index_interval_bytes: int, now_ms: int,
                 new: bool, file_suffix: str = ""):
        self.fs = fs
        # Appended to every file name: ".cleaned" while the log cleaner writes a copy.
        self.file_suffix = file_suffix
        self.directory = directory
        self.base_offset = base_offset
        self.log = log
        self.index_interval_bytes = index_interval_bytes
        self.offset_index = OffsetIndex(fs, self._path(INDEX_SUFFIX), base_offset,
                                        index_size_max_bytes, load_from_file=not new)
        self.time_index = TimeIndex(fs, self._path(TIME_INDEX_SUFFIX), base_offset,
                                    index_size_max_bytes, load_from_file=not new)
        self.created_ms = now_ms
        self.last_modified_ms = now_ms
        self.bytes_since_last_index_entry = 0
        # The largest batch timestamp so far and the last offset of its batch; known
        # once the segment was appended to or scanned, else read from the time index.
        self._max_timestamp: int | None = -1 if new else None
        self._offset_of_max_timestamp = base_offset
        self._first_batch_timestamp: int | None = None  # for segment.ms, lazily read
        # (epoch, first offset) wherever a scan (recovery) found a newer leader epoch
        self.scanned_epochs: list[tuple[int, int]] = []
        self.next_offset: int | None = base_offset if new else None  # known when active
        # The offset after the last batch (the base offset when empty), known when active:
        # below next_offset after a truncation into offsets a compaction removed (the log
        # end is the offset asked for). A segment rolled next begins here (LocalLog.roll).
        self.data_end: int | None = base_offset if new else None
        # offset -> position of the batch that starts there, learned from reads;
        # valid until a truncation (which clears it).
        self._read_positions: dict[int, int] = {}

    @classmethod
    def create(cls, fs: FileSystem, directory: str, base_offset: int, *, index_size_max_bytes: int,
               index_interval_bytes: int, now_ms: int) -> "LogSegment":
        path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        log = fs.open(path)
        if log.size():
            log.truncate(0)  # a leftover file at the new base holds nothing we want
        return cls(fs, directory, base_offset, log, index_size_max_bytes=index_size_max_bytes,
                   index_interval_bytes=index_interval_bytes, now_ms=now_ms, new=True)

    @classmethod
    def open_existing(cls, fs: FileSystem, directory: str, base_offset: int, *,
                      index_size_max_bytes: int, index_interval_bytes: int, now_ms: int) -> "LogSegment":
        log = fs.open(os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX)), create=False)
        return cls(fs, directory, base_offset, log, index_size_max_bytes=index_size_max_bytes,
                   index_interval_bytes=index_interval_bytes, now_ms=now_ms, new=False)

    # -- state ----------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return self.log.size()

    @property
    def max_timestamp(self) -> int:
        """Largest batch timestamp in the segment, -1 if none (Kafka's maxTimestampSoFar)."""
        if self._max_timestamp is None:
            self.ensure_indexes()
            self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        self.max_timestamp
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention compares: the max timestamp, or the last-modified time without one."""
        max_timestamp = self.max_timestamp
        return max_timestamp if max_timestamp >= 0 else self.last_modified_ms

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_append: int) -> int:
        """Kafka's rule: by record time if the first batch has one, else by wall time."""
        if self._first_batch_timestamp is None and self.size_bytes >= BATCH_HEADER_SIZE_BYTES:
            self._first_batch_timestamp = self._header_at(0).max_timestamp
        if self._first_batch_timestamp is not None and self._first_batch_timestamp >= 0:
            return max_timestamp_in_append - self._first_batch_timestamp
        return now_ms - self.created_ms

    def ensure_indexes(self) -> None:
        """Load the index files; rebuild them from the log if they do not check out."""
        try:
            self.offset_index.ensure_loaded(self.size_bytes)
            self.time_index.ensure_loaded(self.size_bytes)
        except IndexCorruptError as e:
            logger.warning("%s; rebuilding the indexes of segment %s", e, self._path(LOG_SUFFIX))
            self.rebuild_indexes()

    # -- append -----------------------------------------------------------------------

    def append(self, buffer, batches: list[BatchInfo], next_offset: int, now_ms: int, behind: bool = True) -> int:
        """Write ``buffer`` (whole batches) with one write; returns its file position.
        ``behind``: the file may make the write later (storage/files.py)."""
        position = self.log.append(buffer, behind)
        if self._first_batch_timestamp is None and position == 0:
            self._first_batch_timestamp = batches[0].max_timestamp
        self._index_batches(position, batches)
        self.next_offset = self.data_end = next_offset
        self.last_modified_ms = now_ms
        return position

    def _index_batches(self, position: int, batches) -> None:
        max_timestamp = self.max_timestamp
        offset_index, time_index = self.offset_index, self.time_index
        for relative_position, size_bytes, last_offset, batch_max_timestamp in batches:
            if batch_max_timestamp > max_timestamp:
                max_timestamp = self._max_timestamp = batch_max_timestamp
                self._offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes and not offset_index.is_full:
                offset_index.append(last_offset, position + relative_position)
                time_index.maybe_append(max_timestamp, self._offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size_bytes

    def on_become_inactive(self) -> None:
        """The segment stops being active (its log already fsynced): the time index gets
        the final max entry, durably, so a reload knows the segment's largest timestamp."""
        self.ensure_indexes()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.flush()
        self.time_index.flush()

    # -- reading ------------------------------------------------------------------------

    def headers(self, position: int, end_position: int) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each batch lying wholly before ``end_position``.

        Reads ``SCAN_CHUNK_BYTES`` at a time. A damaged header raises
        ``CorruptRecordError``: this segment must not be served past it.
        """
        buffer, buffer_position = b"", position
        pread = self.log.pread
        while end_position - position >= BATCH_HEADER_SIZE_BYTES:
            offset_in_buffer = position - buffer_position
            if len(buffer) - offset_in_buffer < BATCH_HEADER_SIZE_BYTES:
                buffer = pread(min(SCAN_CHUNK_BYTES, end_position - position), position)
                buffer_position, offset_in_buffer = position, 0
                if len(buffer) < BATCH_HEADER_SIZE_BYTES:
                    return
            try:
                header = read_header(buffer, offset_in_buffer)
            except CorruptRecordError as e:
                raise self._corrupt_at(position, e) from None
            if position + header.size_bytes > end_position:
                return
            yield position, header
            position += header.size_bytes

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader | None] | None:
        """The first batch whose last offset is ``>= offset``, as ``(position, header)``.

        ``header`` is None when the offset index alone proved the position (an
        entry for exactly that offset). None when no batch qualifies.
        """
        self.ensure_indexes()
        entry_offset, position = self.offset_index.lookup(offset)
        if entry_offset == offset and position > 0:
            return position, None
        for batch_position, header in self.headers(position, self.size_bytes):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None,
             min_one_batch: bool) -> tuple[int, int] | None:
        """The file range ``(position, length)`` of whole batches for a fetch.

        Starts at the batch holding ``start_offset``; includes batches while they
        fit in ``max_bytes`` (the first one regardless when ``min_one_batch``) and
        only batches whose last offset is below ``max_offset``. None when no batch
        of this segment ends at or after ``start_offset``.
        """
        size = self.size_bytes
        start_position = self._read_positions.get(start_offset)
        if start_position is None:
            found = self.translate_offset(start_offset)
            if found is None:
                return None
            start_position = found[0]
        elif start_position >= size:
            return None
        limit = start_position + max_bytes
        if max_offset is None:
            max_offset = _OFFSET_MAX
        cut = start_position
        # Jump over the batches the offset index proves to fit, then walk headers.
        by_position = self.offset_index.lookup_by_position(limit)
        if by_position is not None and by_position[1] > start_position:
            entry_offset, entry_position = min(by_position, self.offset_index.lookup(max_offset - 1),
                                               key=_position_of)
            if entry_position > start_position and entry_offset < max_offset:
                cut = entry_position
        # The walk below is ``headers()`` inlined: this is the fetch hot path.
        last_included, position = None, cut
        buffer, buffer_start = b"", cut
        pread = self.log.pread
        while size - position >= BATCH_HEADER_SIZE_BYTES:
            offset_in_buffer = position - buffer_start
            if len(buffer) - offset_in_buffer < BATCH_HEADER_SIZE_BYTES:
                buffer = pread(min(SCAN_CHUNK_BYTES, size - position), position)
                buffer_start, offset_in_buffer = position, 0
            try:
                header = read_header(buffer, offset_in_buffer)
            except CorruptRecordError as e:
                raise self._corrupt_at(position, e) from None
            end = position + header.size_bytes
            if end > size or header.last_offset >= max_offset:
                break
            if end > limit and not (min_one_batch and position == start_position):
                break
            cut = position = end
            last_included = header
            if end >= limit:
                break
        if last_included is not None:
            self._remember_read_position(last_included.next_offset, cut)
        return start_position, cut - start_position

    def _remember_read_position(self, offset: int, position: int) -> None:
        """Where the next sequential fetch will start: saves it an index lookup and a scan."""
        positions = self._read_positions
        positions[offset] = position
        if len(positions) > READ_POSITIONS_MAX:
            del positions[next(iter(positions))]

    def find_offset_by_timestamp(self, timestamp_ms: int,
                                 starting_offset: int) -> OffsetAndTimestamp | None:
        """First record at or after ``starting_offset`` with timestamp ``>= timestamp_ms``."""
        self.ensure_indexes()
        _, entry_offset = self.time_index.lookup(timestamp_ms - 1)  # every record up to it is older
        _, position = self.offset_index.lookup(max(entry_offset, starting_offset))
        for batch_position, header in self.headers(position, self.size_bytes):
            if header.max_timestamp < timestamp_ms or header.last_offset < starting_offset:
                continue
            batch = self.log.pread(header.size_bytes, batch_position)
            for record in iter_records(batch):
                if record.timestamp >= timestamp_ms and record.offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return OffsetAndTimestamp(record.offset, record.timestamp,
                                              epoch if epoch >= 0 else None)
        return None

    def read_next_offset(self) -> tuple[int, int]:
        """``(next offset, end of the last whole batch)``, walking from the last index entry.

        The end equals ``size_bytes`` for a whole segment; anything else means a
        torn or damaged tail and the caller recovers the segment.
        """
        self.ensure_indexes()
        _, position = self.offset_index.lookup(RELATIVE_OFFSET_MAX + self.base_offset)
        next_offset, end = self.base_offset, position
        for batch_position, header in self.headers(position, self.size_bytes):
            next_offset, end = header.next_offset, batch_position + header.size_bytes
        return next_offset, end

    def _corrupt_at(self, position: int, error: CorruptRecordError) -> CorruptRecordError:
        return CorruptRecordError(f"segment {self._path(LOG_SUFFIX)} position {position}: {error}")

    def _header_at(self, position: int) -> BatchHeader:
        return read_header(self.log.pread(BATCH_HEADER_SIZE_BYTES, position))

    # -- truncation and recovery ------------------------------------------------------

    def truncate_to(self, offset: int) -> tuple[int, int | None]:
        """Drop every batch whose last offset is ``>= offset``.

        Returns ``(bytes dropped, base offset of the first dropped batch)``. The
        cut is durable (indexes first, then the log) when this returns.
        """
        found = self.translate_offset(offset)
        if found is None:
            if self.data_end is None:       # loaded unscanned; nothing to cut
                self.data_end = self.read_next_offset()[0]
            return 0, None
        position, header = found
        if header is None:
            header = self._header_at(position)
        dropped = self.size_bytes - position
        self._read_positions.clear()
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(header.base_offset)
        self.offset_index.flush_truncation()
        self.time_index.flush_truncation()
        self.log.truncate(position)
        self.log.fsync()
        self.next_offset = min(offset, header.base_offset)
        self.data_end = self.read_next_offset()[0] if position else self.base_offset
        self.bytes_since_last_index_entry = 0
        self._recompute_max_timestamp()
        if position == 0:
            self._first_batch_timestamp = None
        return dropped, header.base_offset

    def _recompute_max_timestamp(self) -> None:
        timestamp, offset = self.time_index.last_entry
        _, position = self.offset_index.lookup(offset)
        for _, header in self.headers(position, self.size_bytes):
            if header.max_timestamp > timestamp:
                timestamp, offset = header.max_timestamp, header.last_offset
        self._max_timestamp, self._offset_of_max_timestamp = timestamp, offset

    def recover(self, next_segment_base_offset: int | None = None) -> int:
        """Validate every batch, cut at the first bad or torn one, rebuild indexes.

        Returns the number of bytes cut (0 when the segment is whole). Logs what
        it finds. The cut itself is not fsynced: until the recovery point passes
        this segment, a crash brings it back here anyway.
        """
        valid_end, next_offset, problem = self._scan_and_index(next_segment_base_offset)
        size = self.size_bytes
        self.next_offset = self.data_end = next_offset
        if valid_end < size:
            logger.warning("segment %s: %s; truncating %d bytes at position %d (offset %d)",
                           self._path(LOG_SUFFIX), problem, size - valid_end, valid_end, next_offset)
            self.log.truncate(valid_end)
        return size - valid_end

    def rebuild_indexes(self) -> None:
        """Rebuild the indexes of a segment that must be whole (below the recovery point)."""
        valid_end, next_offset, problem = self._scan_and_index(None)
        if valid_end < self.size_bytes:
            logger.error("segment %s is corrupt below the recovery point: %s",
                         self._path(LOG_SUFFIX), problem)
            raise CorruptRecordError(f"segment {self._path(LOG_SUFFIX)} is corrupt: {problem}")

    def _scan_and_index(self, next_segment_base_offset: int | None) -> tuple[int, int, str | None]:
        """Walk and validate every batch, rebuilding both indexes as it goes, and note in
        ``scanned_epochs`` where each newer leader epoch starts.

        Returns ``(end of the last valid batch, next offset, what stopped the walk)``.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._read_positions.clear()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._first_batch_timestamp = None
        self.bytes_since_last_index_entry = 0
        self.scanned_epochs = []
        size = self.size_bytes
        position, next_offset = 0, self.base_offset
        buffer, buffer_end = b"", 0   # the buffer holds the file from buffer_end - len(buffer)
        while position < size:
            if size - position < BATCH_HEADER_SIZE_BYTES:
                return position, next_offset, f"{size - position} bytes at the end are a torn batch"
            if position + BATCH_HEADER_SIZE_BYTES > buffer_end:
                buffer = self.log.pread(min(RECOVERY_CHUNK_BYTES, size - position), position)
                buffer_end = position + len(buffer)
            try:
                header = read_header(buffer, position - (buffer_end - len(buffer)))
                batch_end = position + header.size_bytes
                if batch_end > size:
                    return position, next_offset, f"batch at offset {header.base_offset} is torn"
                if batch_end > buffer_end and header.size_bytes <= RECOVERY_CHUNK_BYTES:
                    buffer = self.log.pread(min(RECOVERY_CHUNK_BYTES, size - position), position)
                    buffer_end = position + len(buffer)
                if batch_end <= buffer_end:
                    validate_batch(buffer, position - (buffer_end - len(buffer)), strict=False)
                else:
                    self._validate_large_batch(position, header)
            except CorruptRecordError as e:
                return position, next_offset, str(e)
            problem = self._offset_problem(header, next_offset, next_segment_base_offset)
            if problem:
                return position, next_offset, problem
            if self._first_batch_timestamp is None:
                self._first_batch_timestamp = header.max_timestamp
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not self.scanned_epochs or epoch > self.scanned_epochs[-1][0]):
                self.scanned_epochs.append((epoch, header.base_offset))
            self._index_batches(0, (BatchInfo(position, header.size_bytes, header.last_offset,
                                              header.max_timestamp),))
            position = batch_end
            next_offset = header.next_offset
        return position, next_offset, None

    def _offset_problem(self, header: BatchHeader, next_offset: int,
                        next_segment_base_offset: int | None) -> str | None:
        if header.base_offset < next_offset:
            return f"batch at offset {header.base_offset} goes back (expected >= {next_offset})"
        if header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return f"batch at offset {header.base_offset} is out of the segment's offset range"
        if next_segment_base_offset is not None and header.last_offset >= next_segment_base_offset:
            return f"batch at offset {header.base_offset} overlaps the next segment"
        return None

    def _validate_large_batch(self, position: int, header: BatchHeader) -> None:
        """CRC-check a batch larger than a read chunk without holding it in memory."""
        crc, at, end = 0, position + _CRC_START, position + header.size_bytes
        while at < end:
            chunk = self.log.pread(min(RECOVERY_CHUNK_BYTES, end - at), at)
            if not chunk:
                raise CorruptRecordError(f"batch at offset {header.base_offset} is torn")
            crc = crc32c(chunk, crc)
            at += len(chunk)
        if crc != header.crc:
            raise CorruptRecordError(f"record batch at offset {header.base_offset} has a bad CRC")

    # -- durability and lifecycle -------------------------------------------------------

    def flush(self) -> None:
        """Make the log durable, then the index entries that point into it."""
        self.log.fsync()
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        """Write the indexes (with Kafka's final time-index entry) and close the file.

        The log itself is not fsynced here (a clean shutdown flushes first); the
        index files are, so the clean-shutdown marker written next covers them.
        """
        if self._max_timestamp is not None:
            if self._max_timestamp >= 0:
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp,
                                             skip_full_check=True)
            self.offset_index.flush()
            self.time_index.flush()
        self.log.close()

    def delete(self) -> None:
        """Remove the segment's files (the log first; orphan indexes are cleaned on load)."""
        self.log.close()
        path = self._path(LOG_SUFFIX)
        if self.fs.exists(path):
            self.fs.remove(path)
        self.offset_index.delete()
        self.time_index.delete()

    def _path(self, suffix: str) -> str:
        return os.path.join(self.directory, segment_file_name(self.base_offset, suffix) + self.file_suffix)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size_bytes={self.size_bytes})"
