"""A file system that can crash: what tests and the simulator use to lose data.

Theory of operation. ``CrashableFileSystem(root)`` works on real files under
``root`` with the same API as ``RealFileSystem`` and keeps, beside them, a model
of what a power cut would leave:

* File contents. For every file it knows the *durable image*: a prefix of the
  current bytes (``durable_prefix``) plus any durable bytes a later ``truncate``
  cut off (``durable_tail``). ``fsync`` makes the current bytes the durable
  image. ``crash()`` rewrites every file to its durable image: bytes appended
  since the last fsync vanish, and an unsynced truncation comes undone.
* Directory entries. Creating a file, ``mkdir``, ``rename``, ``remove`` and
  ``rmtree`` are recorded as pending until ``fsync_dir`` of every directory they
  touch; ``crash()`` undoes the pending ones, newest first (a removed file is kept
  aside in ``root/.crashfs`` until its removal is durable).
* ``tear_last_write(path, keep_bytes)``: the crash hit in the middle of the last
  append to ``path``: only its first ``keep_bytes`` reached the disk. Those bytes
  become durable; call ``crash()`` (or just reopen) afterwards.
* ``fail(prefix)`` / ``heal(prefix)``: every operation on a path under ``prefix``
  raises ``OSError(EIO)``, as a dying disk would.

Not modelled: reordering of writes within one file (a torn write keeps a prefix),
partially persisted fsyncs, metadata such as mtimes. ``fsync`` does not reach the
real disk unless ``real_fsync=True``: the model, not the kernel, decides what
survives, which keeps tests fast. After ``crash()`` every handle and lock obtained
before is closed; reopen the directory with ``Log.open``/``LogManager``.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
from dataclasses import dataclass, field

from tidelog.storage.files import RealFile, RealFileSystem

_STASH = ".crashfs"


@dataclass
class _Durability:
    durable_prefix: int = 0
    durable_tail: bytes = b""
    last_write: tuple[int, int] | None = None  # (position, length) of the newest append


@dataclass
class _PendingEntry:
    """A directory change not yet made durable; ``undo`` reverts it on crash."""

    kind: str                       # create | mkdir | rename | remove | rmtree
    path: str                       # the path as it is after the change
    source: str | None = None       # rename: where it came from
    stash: str | None = None        # remove/rmtree/rename-over: where the old entry waits
    dirs: set[str] = field(default_factory=set)


class CrashableFile:
    """A handle that reports appends, truncations and fsyncs to its file system."""

    __slots__ = ("_fs", "_file")

    def __init__(self, fs: "CrashableFileSystem", real: RealFile):
        self._fs = fs
        self._file = real

    @property
    def path(self) -> str:
        return self._file.path

    def append(self, data, behind: bool = True) -> int:
        self._fs._check(self._file.path)
        position = self._file.append(data, behind)
        self._fs._state(self._file.path).last_write = (position, len(data))
        return position

    def pread(self, size: int, position: int) -> bytes:
        self._fs._check(self._file.path)
        return self._file.pread(size, position)

    def truncate(self, size: int) -> None:
        self._fs._check(self._file.path)
        state = self._fs._state(self._file.path)
        if size < state.durable_prefix:
            lost = self._file.pread(state.durable_prefix - size, size)
            state.durable_tail = lost + state.durable_tail
            state.durable_prefix = size
        self._file.truncate(size)
        state.last_write = None

    def fsync(self) -> None:
        self._fs._check(self._file.path)
        if self._fs.real_fsync:
            self._file.fsync()
        state = self._fs._state(self._file.path)
        state.durable_prefix = self._file.size()
        state.durable_tail = b""

    def sync_later(self):
        """What an ``fsync`` on a duplicate descriptor does when the returned function
        runs: the file's content at that moment becomes durable; a file removed or
        renamed away meanwhile has nothing left at its path to make durable."""
        path = self._file.path

        def sync() -> None:
            self._fs._check(path)
            state = self._fs._files.get(path)
            if state is None or not os.path.isfile(path):
                return
            if self._fs.real_fsync:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            state.durable_prefix, state.durable_tail = os.path.getsize(path), b""
        return sync

    def size(self) -> int:
        return self._file.size()

    def fileno(self, end: int | None = None) -> int:
        return self._file.fileno(end)

    def written_through(self, end: int) -> bool:
        return self._file.written_through(end)

    def close(self) -> None:
        self._file.close()
        self._fs._handles.discard(self)


class CrashableFileSystem:
    def __init__(self, root: str, real_fsync: bool = False):
        self.root = os.path.abspath(root)
        self.real_fsync = real_fsync
        self._real = RealFileSystem()
        self._files: dict[str, _Durability] = {}
        self._pending: list[_PendingEntry] = []
        self._handles: set[CrashableFile] = set()
        self._locks: list = []
        self._failing: set[str] = set()
        self._stash_ids = itertools.count()
        os.makedirs(os.path.join(self.root, _STASH), exist_ok=True)

    # -- the FileSystem API ---------------------------------------------------

    def open(self, path: str, create: bool = True) -> CrashableFile:
        path = self._abs(path)
        self._check(path)
        existed = os.path.exists(path)
        handle = CrashableFile(self, self._real.open(path, create))
        if existed:
            self._state(path)  # pin the durable image before any write
        else:
            self._files[path] = _Durability()
            self._record(_PendingEntry("create", path, dirs={os.path.dirname(path)}))
        self._handles.add(handle)
        return handle

    def rename(self, source: str, destination: str) -> None:
        source, destination = self._abs(source), self._abs(destination)
        self._check(source)
        self._check(destination)
        stash = self._stash_away(destination) if os.path.exists(destination) else None
        os.rename(source, destination)
        self._move_states(source, destination)
        self._record(_PendingEntry("rename", destination, source=source, stash=stash,
                                   dirs={os.path.dirname(source), os.path.dirname(destination)}))

    def remove(self, path: str) -> None:
        path = self._abs(path)
        self._check(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, "No such file", path)
        stash = self._stash_away(path)
        self._record(_PendingEntry("remove", path, stash=stash, dirs={os.path.dirname(path)}))

    def rmtree(self, path: str) -> None:
        path = self._abs(path)
        self._check(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(errno.ENOENT, "No such directory", path)
        stash = self._stash_away(path)
        self._record(_PendingEntry("rmtree", path, stash=stash, dirs={os.path.dirname(path)}))

    def mkdir(self, path: str) -> None:
        path = self._abs(path)
        self._check(path)
        missing = []
        while not os.path.exists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for created in reversed(missing):
            os.mkdir(created)
            self._record(_PendingEntry("mkdir", created, dirs={os.path.dirname(created)}))

    def listdir(self, path: str) -> list[str]:
        path = self._abs(path)
        self._check(path)
        return sorted(name for name in os.listdir(path)
                      if not (path == self.root and name == _STASH))

    def exists(self, path: str) -> bool:
        path = self._abs(path)
        self._check(path)
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        path = self._abs(path)
        self._check(path)
        return os.path.isdir(path)

    def fsync_dir(self, path: str) -> None:
        path = self._abs(path)
        self._check(path)
        still_pending = []
        for entry in self._pending:
            entry.dirs.discard(path)
            if entry.dirs:
                still_pending.append(entry)
            elif entry.stash is not None:
                self._discard_stash(entry.stash)
        self._pending = still_pending

    def lock(self, path: str):
        path = self._abs(path)
        self._check(path)
        lock = self._real.lock(path)
        self._locks.append(lock)
        return lock

    # -- faults -----------------------------------------------------------------

    def close_all(self) -> None:
        """Close every handle and release every lock, as a process's exit does."""
        for handle in list(self._handles):
            handle._file.close()
        self._handles.clear()
        for lock in self._locks:
            lock.release()
        self._locks.clear()

    def crash(self) -> None:
        """Lose everything not made durable, close every handle and lock."""
        self.close_all()
        for path, state in self._files.items():
            self._restore_durable_image(path, state)
        for entry in reversed(self._pending):
            self._undo(entry)
        self._pending.clear()
        for path, state in self._files.items():
            state.durable_prefix = os.path.getsize(path) if os.path.isfile(path) else 0
            state.durable_tail, state.last_write = b"", None

    def tear_last_write(self, path: str, keep_bytes: int) -> None:
        """Keep only the first ``keep_bytes`` of the newest append to ``path``, durably."""
        path = self._abs(path)
        state = self._files.get(path)
        assert state is not None and state.last_write is not None, f"no write to tear in {path}"
        position, length = state.last_write
        assert 0 <= keep_bytes <= length, (keep_bytes, length)
        with open(path, "r+b") as f:
            f.truncate(position + keep_bytes)
        for handle in self._handles:
            if handle.path == path:
                handle._file._size = position + keep_bytes
        state.durable_prefix, state.durable_tail = position + keep_bytes, b""
        state.last_write = None

    def fail(self, prefix: str) -> None:
        self._failing.add(self._abs(prefix))

    def heal(self, prefix: str) -> None:
        self._failing.discard(self._abs(prefix))

    def unsynced_bytes(self, path: str) -> int:
        """How many bytes of ``path`` a crash would drop (for assertions in tests)."""
        path = self._abs(path)
        state = self._files.get(path)
        return 0 if state is None else os.path.getsize(path) - state.durable_prefix

    # -- internals ----------------------------------------------------------------

    def _abs(self, path: str) -> str:
        path = os.path.abspath(path)
        assert path == self.root or path.startswith(self.root + os.sep), \
            f"{path} is outside the crashable root {self.root}"
        return path

    def _check(self, path: str) -> None:
        for prefix in self._failing:
            if path == prefix or path.startswith(prefix + os.sep):
                raise OSError(errno.EIO, "injected I/O error", path)

    def _state(self, path: str) -> _Durability:
        state = self._files.get(path)
        if state is None:  # a file that predates this model counts as durable
            state = self._files[path] = _Durability(os.path.getsize(path))
        return state

    def _record(self, entry: _PendingEntry) -> None:
        self._pending.append(entry)

    def _stash_away(self, path: str) -> str:
        stash = os.path.join(self.root, _STASH, str(next(self._stash_ids)))
        os.rename(path, stash)
        self._move_states(path, stash)
        return stash

    def _discard_stash(self, stash: str) -> None:
        self._drop_states(stash)
        if os.path.isdir(stash):
            shutil.rmtree(stash)
        elif os.path.exists(stash):
            os.unlink(stash)

    def _move_states(self, source: str, destination: str) -> None:
        for path in [p for p in self._files if p == source or p.startswith(source + os.sep)]:
            self._files[destination + path[len(source):]] = self._files.pop(path)

    def _drop_states(self, prefix: str) -> None:
        for path in [p for p in self._files if p == prefix or p.startswith(prefix + os.sep)]:
            del self._files[path]

    def _restore_durable_image(self, path: str, state: _Durability) -> None:
        if not os.path.isfile(path):
            return
        with open(path, "r+b") as f:
            f.truncate(state.durable_prefix)
            if state.durable_tail:
                f.seek(state.durable_prefix)
                f.write(state.durable_tail)

    def _undo(self, entry: _PendingEntry) -> None:
        if entry.kind in ("create", "mkdir"):
            self._drop_states(entry.path)
            if os.path.isdir(entry.path):
                shutil.rmtree(entry.path)
            elif os.path.exists(entry.path):
                os.unlink(entry.path)
        elif entry.kind in ("remove", "rmtree"):
            self._put_back(entry.stash, entry.path)
        elif entry.kind == "rename":
            if os.path.exists(entry.path):
                self._put_back(entry.path, entry.source)
            if entry.stash is not None:
                self._put_back(entry.stash, entry.path)

    def _put_back(self, source: str, destination: str) -> None:
        if not os.path.exists(source) or not os.path.isdir(os.path.dirname(destination)):
            return  # its directory itself was undone; nothing left to restore into
        if os.path.isdir(destination):
            shutil.rmtree(destination)
        elif os.path.exists(destination):
            os.unlink(destination)
        os.rename(source, destination)
        self._drop_states(destination)
        self._move_states(source, destination)
