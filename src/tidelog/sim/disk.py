"""The simulated disk: ``CrashableFileSystem`` plus a full disk and a process exit.

Theory of operation. A broker's data lives in real files under a temporary
directory, written through ``tidelog.testing.crashable.CrashableFileSystem``,
which models what a power cut keeps (see its docstring). ``SimDisk`` adds the
faults the simulator needs on top of it:

* ``process_exit()`` — kill -9 of the process on a machine that stays up: file
  handles and locks close, every written byte stays (the page cache survives);
* ``power_cut(rng)`` — the machine loses power: optionally the newest unsynced
  append of one segment is torn (only a prefix of it reached the platter), then
  every unsynced byte and directory change is lost (``crash()``); returns the
  partitions that lost bytes, so the checker knows whose disk forgot what;
* ``fill(prefix)`` / ``drain(prefix)`` — a full disk: creating files and
  appending fail with ``ENOSPC`` (reads still work); the log layer takes the
  directory offline as it does for any I/O error;
* ``fail(prefix)`` — a failed log directory (``EIO`` on every operation),
  inherited; ``replace(prefix)`` swaps the failed disk for an empty one (what an
  operator does; a disk that came back with its old data after the broker had
  re-created its partitions elsewhere would hold duplicate logs, which Kafka,
  and tidelog, refuse at start-up).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import tempfile
from contextlib import contextmanager, nullcontext

from tidelog.testing.crashable import CrashableFile, CrashableFileSystem


class _SimFile(CrashableFile):
    """A crashable handle whose writes fail while its disk is full."""

    __slots__ = ()

    def append(self, data, behind: bool = True) -> int:
        self._fs.check_space(self._file.path)
        return super().append(data, behind)


_NOTHING_TO_LIFT = nullcontext()
MEMORY_DIRECTORY = "/dev/shm"


def scratch_directory(prefix: str) -> str:
    """A new directory for a run's files: in memory (``/dev/shm``) where the machine
    has it, else in the temporary directory. A seed creates thousands of small files
    (segments, indexes, checkpoints), and on a journaling file system creating them
    costs about as much as the rest of the run."""
    memory = MEMORY_DIRECTORY if os.path.isdir(MEMORY_DIRECTORY) and os.access(MEMORY_DIRECTORY, os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=memory)


class SimDisk(CrashableFileSystem):
    def __init__(self, root: str):
        super().__init__(root)
        self.full: set[str] = set()

    # ------------------------------------------------------------ full disk

    def fill(self, prefix: str) -> None:
        self.full.add(os.path.abspath(prefix))

    def drain(self, prefix: str) -> None:
        self.full.discard(os.path.abspath(prefix))

    def check_space(self, path: str) -> None:
        for prefix in self.full:
            if path == prefix or path.startswith(prefix + os.sep):
                raise OSError(errno.ENOSPC, "injected: no space left on device", path)

    def open(self, path: str, create: bool = True):
        if not os.path.exists(os.path.abspath(path)):
            self.check_space(os.path.abspath(path))
        handle = super().open(path, create)
        handle.__class__ = _SimFile
        return handle

    def mkdir(self, path: str) -> None:
        self.check_space(os.path.abspath(path))
        super().mkdir(path)

    def faulted(self) -> bool:
        return bool(self.full or self._failing)

    def is_failing(self, prefix: str) -> bool:
        return os.path.abspath(prefix) in self._failing

    def replace(self, prefix: str) -> list[str]:
        """A failed disk swapped for a new, empty one (the process must be down).
        Returns the partition directories that were on it."""
        prefix = os.path.abspath(prefix)
        names = sorted(n for n in os.listdir(prefix) if os.path.isdir(os.path.join(prefix, n))) \
            if os.path.isdir(prefix) else []
        shutil.rmtree(prefix, ignore_errors=True)
        os.makedirs(prefix)
        for path in [p for p in self._files if p == prefix or p.startswith(prefix + os.sep)]:
            del self._files[path]
        self._pending = [e for e in self._pending if not (e.path == prefix or e.path.startswith(prefix + os.sep))]
        self._failing.discard(prefix)
        return names

    def unfaulted(self):
        """Let the checker read without tripping an injected fault (no side effects).
        (The checker asks after every event: with no fault on, nothing to lift.)"""
        return self._unfaulted() if self._failing else _NOTHING_TO_LIFT

    @contextmanager
    def _unfaulted(self):
        failing, self._failing = self._failing, set()
        try:
            yield
        finally:
            self._failing = failing

    # ------------------------------------------------------------ process and power

    def process_exit(self) -> None:
        """kill -9: handles and locks close; nothing written is lost."""
        self.close_all()

    def power_cut(self, rng: random.Random, tear: bool) -> dict[str, int]:
        """Lose every unsynced byte and every unsynced directory entry (tearing one
        unsynced append first if ``tear``). Returns ``{partition directory name: segment
        bytes lost}``, measured before and after: a log whose directory was never listed
        durably (a new log before its first flush) loses its synced bytes with it."""
        sizes: dict[str, int] = {}
        candidates = []
        for path in sorted(self._files):
            if not path.endswith(".log") or not os.path.isfile(path):
                continue
            sizes[path] = os.path.getsize(path)
            if self.unsynced_bytes(path) > 0:
                state = self._files[path]
                if state.last_write is not None and state.last_write[0] >= state.durable_prefix:
                    candidates.append(path)
        if tear and candidates:
            path = rng.choice(candidates)
            _, length = self._files[path].last_write
            self.tear_last_write(path, rng.randrange(length))
        self.crash()
        lost: dict[str, int] = {}
        for path, size in sizes.items():
            kept = os.path.getsize(path) if os.path.isfile(path) else 0
            if kept < size:
                name = os.path.basename(os.path.dirname(path))
                lost[name] = lost.get(name, 0) + size - kept
        return lost
