"""Offset and time indexes of one segment (Kafka's ``.index``/``.timeindex``).

Theory of operation. Both indexes are sparse: the segment adds an entry after
every ``index.interval.bytes`` of appended batches, so a lookup lands within a
few KiB of the batch it wants and the segment scans batch headers from there.

* ``OffsetIndex`` (``.index``): 8-byte entries, big-endian
  ``relative_offset int32, position int32``. An entry ``(o, p)`` says "the batch
  starting at file position ``p`` ends at offset ``o``" (Kafka indexes a batch by
  its last offset). ``lookup(target)`` returns the largest entry ``<= target``.
* ``TimeIndex`` (``.timeindex``): 12-byte entries, big-endian
  ``timestamp int64, relative_offset int32``: "up to offset ``o`` the largest
  timestamp is ``t``". An entry is added only if its timestamp is larger than the
  last one, so both columns increase. One slot is kept free for the entry a
  segment adds when it stops being active (as Kafka does).

Entries live in memory (``array`` columns searched with ``bisect``); the file is
loaded lazily on first use and written by ``flush``. Positions and relative
offsets must fit in int32 (``SEGMENT_SIZE_MAX_BYTES``).

Invariant relied on by recovery: the entries on disk are always a prefix of the
correct entries for the bytes on disk. ``flush`` is called only after the log
bytes it indexes are durable, and a truncation is written (``flush``) before the
log file is cut. A file that fails ``check`` on load raises ``IndexCorruptError``
and the segment rebuilds it from the log.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right

from tidelog.storage.files import FileSystem

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """An index file that cannot describe its segment; the segment rebuilds it."""


class _Index:
    """What both indexes share: two columns, lazy loading, incremental persistence."""

    entry_size_bytes: int
    _entry: struct.Struct
    _typecodes: tuple[str, str]

    def __init__(self, fs: FileSystem, path: str, base_offset: int, index_size_max_bytes: int,
                 load_from_file: bool):
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = index_size_max_bytes // self.entry_size_bytes
        self._keys = array(self._typecodes[0])     # relative offset or timestamp
        self._values = array(self._typecodes[1])   # position or relative offset
        self._loaded = not load_from_file
        self._persisted_entries = 0                 # entries known to be on disk, as a prefix
        self._file_needs_rewrite = False            # the file may hold entries beyond that prefix

    # -- loading and persistence ---------------------------------------------------

    def ensure_loaded(self, log_size_bytes: int) -> None:
        if self._loaded:
            return
        data = b""
        if self.fs.exists(self.path):
            handle = self.fs.open(self.path, create=False)
            try:
                data = handle.pread(handle.size(), 0)
            finally:
                handle.close()
        if len(data) % self.entry_size_bytes:
            raise IndexCorruptError(f"{self.path} is {len(data)} bytes, not whole entries")
        for key, value in self._entry.iter_unpack(data):
            self._keys.append(key)
            self._values.append(value)
        self._persisted_entries = len(self._keys)
        self._loaded = True
        try:
            self.check(log_size_bytes)
        except IndexCorruptError:
            self.reset()
            raise

    def flush(self, fsync: bool = True) -> None:
        """Write entries not yet on disk (rewriting the tail after a truncation)."""
        if not self._loaded:
            return
        count = len(self._keys)
        if self._persisted_entries == count and not self._file_needs_rewrite:
            if count == 0 and not self.fs.exists(self.path):
                self.fs.open(self.path).close()  # Kafka's layout always has both index files
            return
        handle = self.fs.open(self.path)
        try:
            persisted_bytes = self._persisted_entries * self.entry_size_bytes
            if self._file_needs_rewrite or handle.size() != persisted_bytes:
                handle.truncate(persisted_bytes)
            pack, keys, values = self._entry.pack, self._keys, self._values
            data = b"".join(pack(keys[i], values[i]) for i in range(self._persisted_entries, count))
            if data:
                handle.append(data)
            if fsync:
                handle.fsync()
        finally:
            handle.close()
        self._persisted_entries = count
        self._file_needs_rewrite = False

    def flush_truncation(self) -> None:
        """Make a truncation durable now, without writing any new entry."""
        if not self._file_needs_rewrite:
            return
        if self.fs.exists(self.path):
            handle = self.fs.open(self.path)
            try:
                handle.truncate(self._persisted_entries * self.entry_size_bytes)
                handle.fsync()
            finally:
                handle.close()
        self._file_needs_rewrite = False

    def reset(self) -> None:
        """Forget every entry (before a rebuild); the file is rewritten on the next flush."""
        self._keys = array(self._typecodes[0])
        self._values = array(self._typecodes[1])
        self._persisted_entries = 0
        self._file_needs_rewrite = True
        self._loaded = True

    def delete(self) -> None:
        if self.fs.exists(self.path):
            self.fs.remove(self.path)

    # -- common queries -----------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._keys)

    def _truncate_entries(self, count: int) -> None:
        if count < len(self._keys):
            del self._keys[count:]
            del self._values[count:]
            if count < self._persisted_entries:
                self._persisted_entries = count
                self._file_needs_rewrite = True

    def _check_increasing(self, column, strictly: bool, what: str) -> None:
        for i in range(1, len(column)):
            if column[i] < column[i - 1] or (strictly and column[i] == column[i - 1]):
                raise IndexCorruptError(f"{self.path}: {what} goes back at entry {i}")


class OffsetIndex(_Index):
    entry_size_bytes = 8
    _entry = _OFFSET_ENTRY
    _typecodes = ("i", "i")

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        return self.base_offset + self._keys[-1] if self._keys else self.base_offset

    def append(self, offset: int, position: int) -> None:
        relative_offset = offset - self.base_offset
        keys = self._keys
        assert not keys or (relative_offset > keys[-1] and position > self._values[-1]), \
            f"offset index {self.path}: entry ({offset}, {position}) does not follow the last one"
        assert len(keys) < self.max_entries, f"offset index {self.path} is full"
        keys.append(relative_offset)
        self._values.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, as ``(offset, position)``; else ``(base, 0)``."""
        i = bisect_right(self._keys, target_offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i - 1], self._values[i - 1]

    def lookup_by_position(self, position: int) -> tuple[int, int] | None:
        """Largest entry with position <= ``position``, or None."""
        i = bisect_right(self._values, position)
        if i == 0:
            return None
        return self.base_offset + self._keys[i - 1], self._values[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for a batch ending at or after ``offset``."""
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Remove every entry pointing at or after ``position``."""
        self._truncate_entries(bisect_left(self._values, position))

    def check(self, log_size_bytes: int) -> None:
        if self._keys and (self._keys[0] < 0 or self._values[0] < 0):
            raise IndexCorruptError(f"{self.path}: negative first entry")
        if self._values and self._values[-1] >= log_size_bytes:
            raise IndexCorruptError(
                f"{self.path}: last entry points at {self._values[-1]}, "
                f"the log has {log_size_bytes} bytes")
        self._check_increasing(self._keys, True, "offset")
        self._check_increasing(self._values, True, "position")

    def items(self) -> list[tuple[int, int]]:
        """Every entry as ``(offset, position)`` (tests, tools)."""
        return [(self.base_offset + k, v) for k, v in zip(self._keys, self._values)]


class TimeIndex(_Index):
    entry_size_bytes = 12
    _entry = _TIME_ENTRY
    _typecodes = ("q", "i")

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries - 1  # the last slot is kept for the roll

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base_offset)``."""
        if not self._keys:
            return -1, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if the timestamp is larger than the last entry's.

        A full index takes no entry, except the one kept for ``skip_full_check``
        (the segment's final entry when it stops being active).
        """
        keys = self._keys
        if timestamp <= (keys[-1] if keys else -1) or len(keys) >= self.max_entries:
            return  # an empty index acts as (-1, base offset): no-timestamp entries never go in
        if self.is_full and not skip_full_check:
            return
        relative_offset = offset - self.base_offset
        assert not keys or relative_offset >= self._values[-1], \
            f"time index {self.path}: offset {offset} goes back"
        keys.append(timestamp)
        self._values.append(relative_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target as ``(timestamp, offset)``; else ``(-1, base)``."""
        i = bisect_right(self._keys, target_timestamp)
        if i == 0:
            return -1, self.base_offset
        return self._keys[i - 1], self.base_offset + self._values[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is at or after ``offset``."""
        self._truncate_entries(bisect_left(self._values, offset - self.base_offset))

    def check(self, log_size_bytes: int) -> None:
        if self._values and self._values[0] < 0:
            raise IndexCorruptError(f"{self.path}: negative relative offset")
        if self._keys and log_size_bytes == 0:
            raise IndexCorruptError(f"{self.path}: entries for an empty segment")
        self._check_increasing(self._keys, True, "timestamp")
        self._check_increasing(self._values, False, "offset")

    def items(self) -> list[tuple[int, int]]:
        """Every entry as ``(timestamp, offset)`` (tests, tools)."""
        return [(k, self.base_offset + v) for k, v in zip(self._keys, self._values)]
