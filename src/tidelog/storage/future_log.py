"""A replica on its way to another log directory (Kafka's *future* replica, KIP-113).

Theory of operation. AlterReplicaLogDirs asks a broker to move its replica of a
partition to another of its log directories. The ``LogManager`` creates a *future
log* there, in ``<topic>-<partition>.<unique>-future``, and this class copies the
*current* log into it, one bounded step at a time, the way Kafka's
``ReplicaAlterLogDirsThread`` fetches from the local replica:

* ``catch_up(current, max_bytes)`` first makes the future a prefix of the current
  log — the current may have truncated (a follower meeting a new leader) or moved
  its log start offset (retention, DeleteRecords) since the last step — then
  appends the current's batches from the future's log end offset, as a follower
  appends a leader's (``append_as_follower``: offsets, leader epochs, producer
  state and transaction markers come with the batches), up to ``max_bytes``.
* ``caught_up(current)``: the two log end offsets are equal. The ``LogManager``
  swaps the logs right then, in the same call as the last copy, so no append
  comes between the check and the swap (Kafka holds the partition's write lock
  for that; one event loop needs nothing more).

Truncation follows Kafka's leader-epoch rule, with the current log as the leader:
the future keeps what lies below the end of its latest epoch *in the current
log*, so a truncation the future missed (it was not looking: the broker
restarted) is still found. The future's high watermark follows the current's.

Invariant, after each ``catch_up``: the future's records are the current's at the
same offsets, and ``future.log_end_offset <= current.log_end_offset``.
"""

from __future__ import annotations

import logging

from tidelog.core.errors import UnexpectedAppendOffsetError
from tidelog.storage.log import Log

logger = logging.getLogger(__name__)

UNDEFINED = -1


class FutureLog:
    """The future log of one partition and where it is going."""

    def __init__(self, log: Log, log_dir: str, unique: str):
        self.log = log
        self.log_dir = log_dir              # the destination log directory
        self.unique = unique                # the hex in the directory's name; the source's -delete reuses it
        self._current_truncations: int | None = None   # the current's truncation count at the last step
        self._current_size_bytes: int | None = None    # the current's size at the last step

    @property
    def topic_partition(self):
        return self.log.topic_partition

    def offset_lag(self, current: Log) -> int:
        """How far behind the current log the future is (DescribeLogDirs' ``offset_lag``)."""
        return max(0, current.log_end_offset - self.log.log_end_offset)

    def caught_up(self, current: Log) -> bool:
        return self.log.log_end_offset == current.log_end_offset

    def step_bytes(self, current: Log, chunk_bytes: int) -> int:
        """How much the next step may copy: ``chunk_bytes``, or twice what the current
        log grew since the previous step if that is more — so under any steady write
        load the lag shrinks step by step and the move ends (module docstring)."""
        size = current.size_bytes
        grown = 0 if self._current_size_bytes is None else max(0, size - self._current_size_bytes)
        self._current_size_bytes = size
        return max(chunk_bytes, 2 * grown)

    def catch_up(self, current: Log, max_bytes: int) -> int:
        """One step: reconcile with ``current``, then copy up to ``max_bytes`` (at least
        one batch when any is missing). Returns the bytes copied. Raises ``StorageError``
        when either log fails (the caller takes that directory offline)."""
        assert current.topic_partition == self.topic_partition
        self._reconcile(current)
        future = self.log
        copied = 0
        while copied < max_bytes and future.log_end_offset < current.log_end_offset:
            data = current.read(future.log_end_offset, max_bytes - copied, min_one_batch=True)
            records = data.records.read_bytes()
            if not records:
                break
            self._append(records)
            copied += len(records)
        future.update_high_watermark(min(current.high_watermark, future.log_end_offset))
        assert future.log_end_offset <= current.log_end_offset
        return copied

    def _append(self, records: bytes) -> None:
        future = self.log
        try:
            future.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            # The current log starts inside a batch (DeleteRecords) and the future is empty
            # at that start: begin it at the batch's base offset, as Kafka's
            # Partition.appendRecordsToFollowerOrFutureReplica does for a future replica.
            end = future.log_end_offset
            if not (end == future.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            future.truncate_fully_and_start_at(e.first_offset)
            future.append_as_follower(records)

    def _reconcile(self, current: Log) -> None:
        future = self.log
        truncations = current.truncations
        if self._current_truncations is None or truncations != self._current_truncations \
                or future.log_end_offset > current.log_end_offset:
            self._truncate_to_common_prefix(current)
        self._current_truncations = truncations
        if current.log_start_offset > future.log_end_offset:
            logger.info("%s: the current log starts at %d, past the future log's end %d: starting it there",
                        self.topic_partition, current.log_start_offset, future.log_end_offset)
            future.truncate_fully_and_start_at(current.log_start_offset)
            return
        future.update_high_watermark(min(current.high_watermark, future.log_end_offset))
        if current.log_start_offset > future.log_start_offset:
            future.maybe_increment_log_start_offset(min(current.log_start_offset, future.high_watermark))

    def _truncate_to_common_prefix(self, current: Log) -> None:
        """Kafka's truncation by leader epoch, the current log answering as the leader."""
        future = self.log
        offset = min(future.log_end_offset, current.log_end_offset)
        epoch = future.latest_epoch
        if epoch is not None:
            current_epoch, end_offset = current.end_offset_for_epoch(epoch)
            if current_epoch == UNDEFINED or end_offset == UNDEFINED:
                offset = min(offset, current.log_start_offset)     # nothing in common that we can tell
            elif current_epoch < epoch:
                # The current log has no record of our latest epoch: keep what both hold of its own.
                _, own_end_offset = future.end_offset_for_epoch(current_epoch)
                offset = min(offset, end_offset, own_end_offset if own_end_offset != UNDEFINED else end_offset)
            else:
                offset = min(offset, end_offset)
        if offset < future.log_end_offset:
            logger.info("%s: the current log changed under the future log: truncating it to %d",
                        self.topic_partition, offset)
            if offset < future.log_start_offset:
                future.truncate_fully_and_start_at(max(offset, current.log_start_offset))
            else:
                future.truncate_to(offset)
