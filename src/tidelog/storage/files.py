"""The file layer every storage write goes through.

Theory of operation. Storage never calls ``open``/``os.write`` directly; it asks a
``FileSystem`` for a ``FileHandle`` and uses a handful of operations: ``append``
(one ``os.write`` of the whole buffer, returning where it landed), ``pread``,
``truncate``, ``fsync``, ``size``. Directory changes (create, ``rename``,
``remove``, ``mkdir``, ``rmtree``) are made durable by ``fsync_dir``.

Two implementations share that API:

* ``RealFileSystem``: raw file descriptors, no Python buffering. A handle caches
  the file size so appends and size checks cost no system call beyond the write.
* ``CrashableFileSystem`` (in ``tidelog.testing.crashable``, built on this
  module): the same over real files, plus ``crash()`` and ``tear_last_write()``
  so tests (and later the simulator) can lose exactly what a power cut would
  lose, then reopen the directory.

Durability contract the rest of storage relies on: bytes are durable once their
file is fsynced; a directory entry (a new file, a rename, a removal) is durable
once its directory is fsynced. ``write_file_atomically`` packages the temp-file /
fsync / rename / fsync-dir dance for checkpoints.

Write-behind (``RealFileSystem(write_behind)`` with a ``server/write_behind.py``
``WriteBehind``, what ``tidelog serve`` uses for the log directories): ``append``
hands the bytes to one writer thread and returns at once (a small one is written at
once when nothing of its file is queued: a thread is not worth its hand-over, and
only a file's own writes need an order; ``WriteBehind.inline_bytes``; ``behind=False``
always writes at once), so the event loop goes on reading and validating requests
while the kernel copies (or, once the page cache is full of dirty pages, throttles)
the write. Nothing may see the file differ from a synchronous one: ``pread`` of a
range not yet written takes it from the file's queued bytes; ``fileno`` (a sendfile
region), ``truncate``, ``fsync`` and ``close`` first wait for this file's writes;
``sync_later``'s function waits in its own thread. The queue holds at most
``WriteBehind.max_bytes`` (an append past it waits for the writer). A failed write
fails every later operation on its file with an ``OSError`` (so the log takes its
directory offline), and no response may confirm a write that has not landed: the
network layer holds a response until the writes it may confirm are made
(``WriteBehind.when_written``), and closes the connection instead if one of them
failed (``failed_between``).

I/O failures surface as ``OSError``; the log layer turns them into
``StorageError`` and takes the directory offline. Using a closed handle is a bug
in the caller and raises ``ValueError`` (never ``OSError``, so it cannot take a
healthy directory offline, and never an I/O on a recycled descriptor).
"""

from __future__ import annotations

import collections
import errno
import fcntl
import os
import shutil
from typing import Callable, Protocol

from tidelog.storage.errors import LogDirLockedError

_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class FileHandle(Protocol):
    path: str

    def append(self, data, behind: bool = True) -> int:
        """Write all of ``data`` at the end; return the position it starts at. The
        caller gives ``data`` up: it must not change it afterwards (a write-behind
        file writes it later). ``behind=False``: written before this returns (after
        the file's queued writes), as a follower's append must be."""

    def pread(self, size: int, position: int) -> bytes:
        """Read up to ``size`` bytes at ``position`` (short only at end of file)."""

    def truncate(self, size: int) -> None: ...

    def fsync(self) -> None: ...

    def sync_later(self) -> Callable[[], None]:
        """A function that makes the bytes written so far durable, safe to call from
        another thread and after this handle is closed (the log's background flush)."""

    def size(self) -> int: ...

    def close(self) -> None: ...

    def fileno(self, end: int | None = None) -> int:
        """The descriptor, once the bytes before ``end`` (default: all) are in the file."""

    def written_through(self, end: int) -> bool:
        """Whether the bytes before ``end`` are in the file already (none still queued)."""


class FileLock(Protocol):
    def release(self) -> None: ...


class FileSystem(Protocol):
    def open(self, path: str, create: bool = True) -> FileHandle: ...

    def rename(self, source: str, destination: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def mkdir(self, path: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def fsync_dir(self, path: str) -> None: ...

    def rmtree(self, path: str) -> None: ...

    def lock(self, path: str) -> FileLock: ...


def _write_all(fd: int, data) -> None:
    length = len(data)
    written = os.write(fd, data)
    if written != length:  # a short write: rare (signals, quotas); finish it
        view = memoryview(data).cast("B")
        while written < length:
            written += os.write(fd, view[written:])


class RealFile:
    """A raw descriptor opened for reading and appending; its appends made by a
    ``WriteBehind`` (server/write_behind.py: ``submit`` and ``wait``) when it has one."""

    __slots__ = ("path", "_fd", "_size", "_write_behind", "_last_write", "_written", "_error", "_queued")

    def __init__(self, path: str, fd: int, write_behind=None):
        self.path = path
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._write_behind = write_behind
        self._last_write = 0           # the number of this file's last write-behind write
        self._written = self._size     # bytes on file (the writer thread moves it)
        self._error: OSError | None = None
        # This file's queued writes, (position, bytes), oldest first: a write leaves only
        # once it is on file, so a range not here and below the size is on file.
        self._queued: collections.deque = collections.deque()

    def append(self, data, behind: bool = True) -> int:
        fd = self._check_open()
        position = self._size
        length = len(data)
        if self._error is not None:
            raise self._failure()
        write_behind = self._write_behind
        if not behind and self._written < position:
            fd = self._settle()
        if (write_behind is None or not behind
                or (length < write_behind.inline_bytes and self._written == position)):
            _write_all(fd, data)        # nothing of this file queued to pass, too small to hand over
            self._written = position + length
        else:
            if type(data) is memoryview and not isinstance(data.obj, bytes):
                data = bytes(data)     # a view of a buffer someone may reuse
            self._queued.append((position, data))
            self._last_write = self._write_behind.submit(self, fd, data)
        self._size = position + length
        return position

    def _write_now(self, fd: int, data) -> bool:
        """The writer thread's part: the write, unless an earlier one failed."""
        try:
            if self._error is not None:
                return False
            try:
                _write_all(fd, data)
            except OSError as e:
                self._error = e
                return False
            except Exception as e:      # a bug, not the disk: still a write that did not land
                self._error = OSError(errno.EIO, f"write failed: {e!r}")
                return False
            self._written += len(data)
            return True
        finally:
            self._queued.popleft()

    def _settle(self) -> int:
        """Wait for this file's queued writes; its descriptor. Raises if one failed."""
        fd = self._check_open()
        if self._last_write:
            self._write_behind.wait(self._last_write)
            self._last_write = 0
        if self._error is not None:
            raise self._failure()
        return fd

    def _failure(self) -> OSError:
        e = self._error
        return OSError(e.errno, f"an earlier write to {self.path} failed: {e.strerror}")

    def pread(self, size: int, position: int) -> bytes:
        fd = self._check_open()
        if self._written < self._size and position + size > self._written:
            if self._error is not None:
                raise self._failure()
            queued = list(self._queued)     # the unwritten tail is read from memory
            if queued:
                return self._pread_queued(fd, size, position, queued)
        return self._pread_file(fd, size, position)

    def _pread_queued(self, fd: int, size: int, position: int, queued: list) -> bytes:
        """``pread`` of a range reaching into ``queued`` (this file's writes not yet
        made, contiguous up to its size): what lies before them from the file."""
        first, end = queued[0][0], min(position + size, self._size)
        parts = [self._pread_file(fd, min(end, first) - position, position)] if position < first else []
        for start, data in queued:
            stop = start + len(data)
            if start < end and stop > position:
                parts.append(bytes(memoryview(data)[max(position, start) - start:min(end, stop) - start]))
        return b"".join(parts)

    def written_through(self, end: int) -> bool:
        """Whether the bytes before ``end`` are in the file (not queued)."""
        return end <= self._written or self._written >= self._size

    @staticmethod
    def _pread_file(fd: int, size: int, position: int) -> bytes:
        data = os.pread(fd, size, position)
        if len(data) == size or not data:
            return data
        parts, got = [data], len(data)
        while got < size:
            more = os.pread(fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._settle(), size)
        self._size = self._written = size

    def fsync(self) -> None:
        os.fsync(self._settle())

    def sync_later(self) -> Callable[[], None]:
        fd = os.dup(self._check_open())  # its own descriptor: closing this handle cannot recycle it
        last_write, write_behind = self._last_write, self._write_behind

        def sync() -> None:
            try:
                if last_write:
                    write_behind.wait(last_write)
                if self._error is not None:
                    raise self._failure()
                os.fsync(fd)
            finally:
                os.close(fd)
        return sync

    def size(self) -> int:
        return self._size

    def fileno(self, end: int | None = None) -> int:
        if self._written < self._size and (end is None or end > self._written):
            return self._settle()
        return self._check_open()

    def close(self) -> None:
        if self._fd >= 0:
            try:
                if self._last_write or self._error is not None:
                    self._settle()      # raises if a write never made it
            finally:
                fd, self._fd = self._fd, -1
                os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def _check_open(self) -> int:
        if self._fd < 0:
            raise ValueError(f"I/O on closed file {self.path}")
        return self._fd

    def __repr__(self) -> str:
        return f"RealFile({self.path!r}, size={self._size})"


class RealFileLock:
    __slots__ = ("path", "_fd")

    def __init__(self, path: str, fd: int):
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)  # closing the descriptor drops the flock


class RealFileSystem:
    """The operating system's files, used directly; appends made by ``write_behind``
    when given."""

    def __init__(self, write_behind=None):
        self.write_behind = write_behind

    def open(self, path: str, create: bool = True) -> RealFile:
        flags = _OPEN_FLAGS | (os.O_CREAT if create else 0)
        return RealFile(path, os.open(path, flags, 0o644), self.write_behind)

    def rename(self, source: str, destination: str) -> None:
        os.replace(source, destination)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path)

    def lock(self, path: str) -> RealFileLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"{path} is held by another process or LogManager") from None
        except BaseException:
            os.close(fd)
            raise
        return RealFileLock(path, fd)


def write_file_atomically(fs: FileSystem, path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    Temp file, fsync, rename over the target, fsync the directory. ``durable=False``
    skips both fsyncs: the caller makes the file durable later (``fsync_file``, then
    the directory), and until then a crash may leave no file, the old one, or a new one
    that is empty or partly written.
    """
    temp_path = path + ".tmp"
    handle = fs.open(temp_path)
    try:
        handle.truncate(0)
        handle.append(data)
        if durable:
            handle.fsync()
    finally:
        handle.close()
    fs.rename(temp_path, path)
    if durable:
        fs.fsync_dir(os.path.dirname(path) or ".")


def fsync_file(fs: FileSystem, path: str) -> None:
    """Make ``path``'s bytes durable (not its directory entry: ``fsync_dir``)."""
    handle = fs.open(path, create=False)
    try:
        handle.fsync()
    finally:
        handle.close()


def read_whole_file(fs: FileSystem, path: str, size_max_bytes: int) -> bytes:
    """Read a small file completely; ``ValueError`` if it is larger than the bound."""
    handle = fs.open(path, create=False)
    try:
        size = handle.size()
        if size > size_max_bytes:
            raise ValueError(f"{path} is {size} bytes, more than the limit of {size_max_bytes}")
        return handle.pread(size, 0)
    finally:
        handle.close()

