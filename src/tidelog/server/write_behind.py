"""Write-behind: the log directories' appends made by a thread of their own.

Theory of operation. ``tidelog serve`` opens its log directories through
``RealFileSystem(write_behind)`` (storage/files.py): a file's ``append`` queues its
bytes here and returns, so the event loop goes on reading and checking requests
while the kernel copies the bytes into the page cache or, once the cache is full of
dirty pages, throttles the writer (Kafka's request handler threads overlap the same
way); an append under ``inline_bytes`` (64 KiB) to a file with none of its writes
queued is made by the caller (storage/files.py), as handing it over would cost more
than it saves: only a file's own writes need an order (a checkpoint or an index,
written and fsynced on the spot, does not wait for the queue). One thread makes the
writes in the order they were queued, at most
``max_bytes`` at a time (``tidelog.log.write.behind.max.bytes``; an append past it
waits). Writes are numbered from 1: ``submitted`` is the last queued, ``completed``
the last made.

    event loop: append ─▶ queue (≤ max_bytes) ─▶ writer thread: os.write ─▶ completed = n
                read of the unwritten tail: from memory; fsync, truncate, close: wait for n
    response ──▶ waits until the writes it may confirm are made (when_written), then
                 checks failed_between(last checked, them): a failure closes the connection

A follower's append is never behind (``Log.append_as_follower``): the offset its next
Fetch reports counts toward the leader's high watermark, so it must be in the page
cache, where a ``kill -9`` leaves it. A file never looks different from a
synchronously written one (a read of a range not yet written takes it from the
queued bytes, and a failed write fails every later operation on the file:
storage/files.py). The network layer (server/network.py) sends a Produce answer only
once the appends queued while it was handled are made, any other answer but a Fetch's
once every write queued so far is, and closes the connection instead when one of
them failed, so no acknowledgement confirms a write that did not land.
"""

from __future__ import annotations

import collections
import heapq
import logging
import threading
from typing import Callable

from tidelog.core.limits import WRITE_BEHIND_INLINE_BYTES, WRITE_BEHIND_MAX_BYTES

logger = logging.getLogger("tidelog.storage")


class WriteBehind:
    """One thread that makes the appends of write-behind files, in the order they were
    made. Writes are numbered from 1 (``submitted``); ``completed`` is the last one done."""

    def __init__(self, max_bytes: int = WRITE_BEHIND_MAX_BYTES, inline_bytes: int = WRITE_BEHIND_INLINE_BYTES):
        self.max_bytes = max_bytes
        self.inline_bytes = inline_bytes
        self.submitted = 0
        self.completed = 0
        self.full_waits = 0            # appends that waited for room (a metric)
        self._queue: collections.deque = collections.deque()   # (number, file, fd, data)
        self._queued_bytes = 0
        self._failed: collections.deque = collections.deque(maxlen=1024)   # numbers of failed writes
        self._waiters: list = []                                # heap of (number, tie, callback)
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, file, fd: int, data) -> int:
        """Queue one write (waiting while the queue is full); its number."""
        with self._condition:
            if self._closed:
                raise ValueError(f"write to {file.path} after the writer stopped")
            if self._queued_bytes and self._queued_bytes + len(data) > self.max_bytes:
                self.full_waits += 1
                while self._queued_bytes and self._queued_bytes + len(data) > self.max_bytes:
                    self._condition.wait()
            self.submitted += 1
            self._queue.append((self.submitted, file, fd, data))
            self._queued_bytes += len(data)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tidelog-write-behind", daemon=True)
                self._thread.start()
            self._condition.notify_all()
            return self.submitted

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def wait(self, number: int) -> None:
        """Block until write ``number`` (and every one before it) is done."""
        with self._condition:
            while self.completed < number:
                self._condition.wait()

    def when_written(self, number: int, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once write ``number`` is done: now, or from the writer's thread."""
        with self._condition:
            if self.completed < number:
                heapq.heappush(self._waiters, (number, id(callback), callback))
                return
        callback()

    def failed_between(self, after: int, upto: int) -> bool:
        """Whether a write numbered in ``(after, upto]`` failed (or was skipped after a failure)."""
        return any(after < number <= upto for number in self._failed)

    def close(self) -> None:
        """Finish the queued writes and stop the thread."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queue and not self._closed:
                    self._condition.wait()
                if not self._queue:
                    return
                number, file, fd, data = self._queue[0]
            ok = file._write_now(fd, data)
            with self._condition:
                self._queue.popleft()
                self._queued_bytes -= len(data)
                self.completed = number
                if not ok:
                    self._failed.append(number)
                ready = []
                while self._waiters and self._waiters[0][0] <= number:
                    ready.append(heapq.heappop(self._waiters)[2])
                self._condition.notify_all()
            for callback in ready:
                try:
                    callback()
                except Exception:           # the writer outlives a broken waiter
                    logger.exception("a write-behind waiter failed")
