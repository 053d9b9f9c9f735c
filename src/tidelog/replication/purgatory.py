"""Delayed operations waiting on a condition (Kafka's ``DelayedOperationPurgatory``).

Theory of operation. An operation is *watched* under keys (topic-partitions).
Events that may satisfy a waiter — an append, a high-watermark move, a leader or
ISR change — call ``check_and_complete(key)``, which asks every operation
watching that key to ``try_complete`` (``check_and_complete_all(keys)``: each
operation watching any of the keys, once). ``expire(now_ms)`` completes operations
whose deadline passed with their timeout outcome. ``on_complete`` runs exactly
once, whichever path gets there first. An operation tried because of an event on
one of its keys is marked ``woken``; one that expires unwoken saw no such event
while it waited (a delayed fetch then answers with what it read on arrival:
``ReplicaManager.fetch_messages``).

Kafka tries an operation a second time right after watching it, for an event
another thread may have slipped in between the first try and the watch. Here every
event runs on one thread, so nothing can: the operation is tried once (a delayed
follower fetch's try walks every partition it asked for).

Sans-IO: time comes in as arguments; the asyncio shell calls ``expire`` at
``next_deadline_ms()``. The purgatory is bounded: ``try_complete_else_watch``
raises ``PurgatoryFullError`` rather than let waiters pile up.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Hashable, Iterable

from tidelog.core.limits import PURGATORY_OPERATIONS_MAX


class PurgatoryFullError(Exception):
    pass


class DelayedOperation:
    """Subclasses implement ``try_complete`` (call ``force_complete`` when the
    condition holds, return whether it completed) and ``on_complete``."""

    def __init__(self, deadline_ms: int):
        self.deadline_ms = deadline_ms
        self.completed = False
        self.expired = False
        self.woken = False       # tried for an event on one of its keys (not only on arrival)

    def force_complete(self) -> bool:
        """Complete now, exactly once; returns True only for the first call."""
        if self.completed:
            return False
        self.completed = True
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError


class Purgatory:
    def __init__(self, name: str, capacity: int = PURGATORY_OPERATIONS_MAX):
        self.name = name
        self.capacity = capacity
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._deadlines: list[tuple[int, int, DelayedOperation]] = []
        self._sequence = itertools.count()

    @property
    def pending(self) -> int:
        """Operations watched and not yet completed."""
        return sum(1 for entry in self._deadlines if not entry[2].completed)

    def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Try once; if not complete, watch it under ``keys`` (no second try: see the
        module docstring). Returns whether it completed."""
        if operation.try_complete():
            return True
        if len(self._deadlines) >= self.capacity:
            self._purge_completed()
            if len(self._deadlines) >= self.capacity:
                raise PurgatoryFullError(f"{self.name} purgatory holds {self.capacity} operations")
        keys = list(keys)
        for key in keys:
            self._watchers.setdefault(key, []).append(operation)
        heapq.heappush(self._deadlines, (operation.deadline_ms, next(self._sequence), operation))
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching ``key``; return how many completed.

        Completing an operation can re-enter for the same key (a delayed follower
        fetch re-reads, which can move the high watermark, which wakes the key
        again): the list is taken out while it is walked, and whatever was watched
        meanwhile is kept (found by the simulator: a KeyError, or watchers lost).
        """
        watchers = self._watchers.pop(key, None)
        if not watchers:
            return 0
        completed = 0
        remaining = []
        for operation in watchers:
            if operation.completed:
                continue
            operation.woken = True
            if operation.try_complete():
                completed += 1
            else:
                remaining.append(operation)
        remaining += self._watchers.pop(key, [])
        if remaining:
            self._watchers[key] = remaining
        return completed

    def check_and_complete_all(self, keys: Iterable[Hashable]) -> int:
        """``check_and_complete`` for many keys at once, trying each operation watching
        any of them once (in the order the keys and their watchers come); returns how
        many completed. A delayed follower fetch watches every partition it asked for:
        waking its partitions one at a time after a metadata change tried it once per
        partition, each try walking all of them (at 10,000 partitions, a million
        ``_bytes_available`` calls and 36 s in one become-follower step)."""
        keys = list(keys)
        operations: dict[int, DelayedOperation] = {}
        for key in keys:
            for operation in self._watchers.get(key, ()):
                if not operation.completed:
                    operations.setdefault(id(operation), operation)
        completed = 0
        for operation in operations.values():
            operation.woken = True
            if not operation.completed and operation.try_complete():
                completed += 1
        if completed:
            for key in keys:       # completed operations leave these keys' lists now
                watchers = self._watchers.get(key)
                if watchers is not None:
                    alive = [operation for operation in watchers if not operation.completed]
                    if alive:
                        self._watchers[key] = alive
                    else:
                        del self._watchers[key]
        return completed

    def expire(self, now_ms: int) -> int:
        """Complete every operation whose deadline is ``<= now_ms``."""
        expired = 0
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, operation = heapq.heappop(self._deadlines)
            if not operation.completed:
                operation.expired = True
                if operation.force_complete():
                    expired += 1
        if expired:
            self._purge_completed()
        return expired

    def next_deadline_ms(self) -> int | None:
        while self._deadlines and self._deadlines[0][2].completed:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def complete_all(self) -> int:
        """Force every waiting operation to complete (shutdown)."""
        count = 0
        for _, _, operation in self._deadlines:
            if operation.force_complete():
                count += 1
        self._deadlines.clear()
        self._watchers.clear()
        return count

    def _purge_completed(self) -> None:
        for key in list(self._watchers):
            alive = [op for op in self._watchers[key] if not op.completed]
            if alive:
                self._watchers[key] = alive
            else:
                del self._watchers[key]
        self._deadlines = [entry for entry in self._deadlines if not entry[2].completed]
        heapq.heapify(self._deadlines)
