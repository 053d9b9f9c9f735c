"""The leader-epoch cache (Kafka's ``LeaderEpochFileCache``; KIP-101, KIP-279).

Theory of operation. A partition remembers, for every leader epoch its log has
seen, the first offset written in that epoch: an ordered list of
``(epoch, start_offset)``. Followers use it to find where their log diverges from
a new leader's (``end_offset_for``), so the rules below are Kafka's exactly:

* ``assign(epoch, start_offset)``: a no-op when the latest entry has the same
  epoch and a start offset ``<=`` the new one; otherwise every trailing entry with
  ``epoch >= new epoch`` or ``start_offset >= new start_offset`` is removed, then
  the new entry appended. Negative values are a caller bug (``ValueError``).
* ``end_offset_for(requested, log_end_offset)``: see the method.
* ``truncate_from_end(offset)`` drops entries starting at or after ``offset``;
  ``truncate_from_start(offset)`` drops entries starting at or before ``offset``
  and re-inserts the last dropped one as ``(its epoch, offset)``. Negative
  offsets are no-ops.

Invariant (asserted after each change): epochs and start offsets both strictly
increase along the list. Every change is written to the partition's
``leader-epoch-checkpoint`` atomically before the method returns.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable

from tidelog.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, entries: Iterable[tuple[int, int]] = (),
                 checkpoint: LeaderEpochCheckpointFile | None = None):
        self._entries = [EpochEntry(*entry) for entry in entries]
        self._checkpoint = checkpoint
        self._check_invariant()

    @classmethod
    def load(cls, checkpoint: LeaderEpochCheckpointFile) -> "LeaderEpochCache":
        """Read the checkpoint file. A file breaking the ordering raises CheckpointFormatError."""
        from tidelog.storage.errors import CheckpointFormatError

        entries = checkpoint.read()
        for previous, entry in zip(entries, entries[1:]):
            if not (entry.epoch > previous.epoch and entry.start_offset > previous.start_offset):
                raise CheckpointFormatError(
                    f"{checkpoint.path}: entries {previous} and {entry} are not increasing")
        return cls(entries, checkpoint)

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile | None:
        return self._checkpoint

    # -- reading ----------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(largest epoch <= requested, end offset of that epoch)``, Kafka's rules.

        * requested is UNDEFINED → ``(-1, -1)``;
        * requested is the latest epoch → ``(requested, log_end_offset)``;
        * no epoch above requested (an empty cache included) → ``(-1, -1)``;
        * no epoch at or below requested → ``(requested, start of the first higher)``;
        * otherwise ``(floor epoch, start of the first higher epoch)``.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._entries, requested_epoch, key=_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset``: the last entry starting at or before it."""
        index = bisect_right(self._entries, offset, key=_start_offset)
        return self._entries[index - 1].epoch if index else None

    # -- changing ---------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        entries = self._entries
        if entries and entries[-1].epoch == epoch and start_offset >= entries[-1].start_offset:
            return False
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
        entries.append(EpochEntry(epoch, start_offset))
        self._changed()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop every entry starting at or after ``end_offset``."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return False
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._changed()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop entries starting at or before ``start_offset``; the last of them restarts there."""
        if start_offset < 0:
            return False
        removed = bisect_right(self._entries, start_offset, key=_start_offset)
        if removed == 0:
            return False
        first = EpochEntry(self._entries[removed - 1].epoch, start_offset)
        if removed == 1 and self._entries[0] == first:
            return False
        self._entries[:removed] = [first]
        self._changed()
        return True

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._changed()

    # -- internals ----------------------------------------------------------------

    def _changed(self) -> None:
        self._check_invariant()
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries)

    def _check_invariant(self) -> None:
        for previous, entry in zip(self._entries, self._entries[1:]):
            assert entry.epoch > previous.epoch and entry.start_offset > previous.start_offset, \
                f"leader epoch cache out of order: {self._entries}"

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries})"


def _epoch(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset(entry: EpochEntry) -> int:
    return entry.start_offset
