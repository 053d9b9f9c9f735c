"""The producer state's files: ``.snapshot`` and ``.txnindex`` (docs/storage.md).

Theory of operation. The producer state (``producer_state.py``, Kafka's
``ProducerStateManager``) and the aborted transactions are derived from the log;
saving them beside the segments only spares a scan at open. This module holds
what ``Log`` (Kafka's ``UnifiedLog``) does with those files, over the directory
and segments of its ``LocalLog``:

* ``TransactionIndex`` keeps every aborted transaction whose ABORT marker is in
  the log, by marker offset (Kafka's per-segment ``TransactionIndex``, held for
  the whole log): in memory for read_committed fetches, on disk as one
  ``<base>.txnindex`` per segment in Kafka's 34-byte ``AbortedTxn`` entry format.
* ``take_snapshot`` writes the ``.txnindex`` files, then ``<log end>.snapshot``
  (at each roll and at a clean shutdown; Kafka's ``takeSnapshot``), and drops
  snapshots below the first segment.
* ``rebuild_producer_state`` (at open and after a truncation; Kafka's
  ``UnifiedLog.rebuildProducerState``) loads the newest snapshot at or below the
  log end offset, the ``.txnindex`` entries below it, then reads only the batch
  headers after it. Snapshots above the log end (a truncation, a lost tail) are
  deleted; a damaged one is deleted and an older one, or the whole log, used.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left, bisect_right

from tidelog.core.errors import CorruptRecordError
from tidelog.records.batch import read_control
from tidelog.storage.files import read_whole_file, write_file_atomically
from tidelog.storage.local_log import LocalLog
from tidelog.storage.producer_state import AbortedTxn, CorruptSnapshotError, ProducerStateManager, is_idempotent

logger = logging.getLogger(__name__)

SNAPSHOT_SIZE_MAX_BYTES = 64 << 20          # a producer snapshot (producer_state.py)
TXN_INDEX_SIZE_MAX_BYTES = 256 << 20        # one segment's aborted-transaction index
_TXN_INDEX_ENTRY = struct.Struct(">hqqqq")  # Kafka's AbortedTxn: version, producer id, first, last, LSO


class TransactionIndex:
    """The aborted transactions of one log, sorted by marker (last) offset.

    Written to disk with the producer snapshot and rewritten when truncation,
    retention or compaction changes it; markers after the newest snapshot are found
    again by the header scan at open."""

    def __init__(self, local_log: LocalLog):
        self._local_log = local_log
        self.aborted: list[AbortedTxn] = []

    def collect(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[start_offset, upper_bound_offset)``."""
        i = bisect_left([txn.last_offset for txn in self.aborted], start_offset)
        return [txn for txn in self.aborted[i:] if txn.first_offset < upper_bound_offset]

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget the transactions wholly below the log start offset."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            self.aborted = [txn for txn in self.aborted if txn.last_offset >= log_start_offset]

    def load(self, log_start_offset: int, below_offset: int) -> None:
        """The aborted transactions recorded on disk whose markers lie in
        ``[log_start_offset, below_offset)``."""
        local_log = self._local_log
        self.aborted = []
        for base in local_log.txn_index_bases():
            path = local_log.txn_index_path(base)
            data = read_whole_file(local_log.fs, path, TXN_INDEX_SIZE_MAX_BYTES)
            if len(data) % _TXN_INDEX_ENTRY.size:
                logger.warning("%s: %s has a partial entry; ignoring its tail", local_log.topic_partition, path)
            for _version, producer_id, first, last, stable in _TXN_INDEX_ENTRY.iter_unpack(
                    data[:len(data) - len(data) % _TXN_INDEX_ENTRY.size]):
                if log_start_offset <= last < below_offset:
                    self.aborted.append(AbortedTxn(producer_id, first, last, stable))
        self.aborted.sort(key=lambda txn: txn.last_offset)

    def write(self) -> None:
        """Make every segment's ``.txnindex`` match ``aborted`` (absent when empty)."""
        local_log = self._local_log
        fs, base_offsets = local_log.fs, local_log.base_offsets
        wanted: dict[int, list[AbortedTxn]] = {}
        for txn in self.aborted:
            i = bisect_right(base_offsets, txn.last_offset) - 1
            if i >= 0:
                wanted.setdefault(base_offsets[i], []).append(txn)
        for base in local_log.txn_index_bases():
            if base not in wanted:
                fs.remove(local_log.txn_index_path(base))
        for base, entries in wanted.items():
            data = b"".join(_TXN_INDEX_ENTRY.pack(0, t.producer_id, t.first_offset, t.last_offset,
                                                  t.last_stable_offset) for t in entries)
            path = local_log.txn_index_path(base)
            if not fs.exists(path) or read_whole_file(fs, path, TXN_INDEX_SIZE_MAX_BYTES) != data:
                write_file_atomically(fs, path, data)


def update_producer_state(state: ProducerStateManager, txn_index: TransactionIndex, header,
                          first_offset: int, control: tuple[int, int] | None) -> None:
    """One appended batch into the producer state; an ABORT marker that closes a
    transaction also goes into the transaction index."""
    if control is None:
        state.update(header, first_offset)
        return
    aborted = state.update_marker(header, first_offset, *control)
    if aborted is not None:
        txn_index.aborted.append(aborted)


def take_snapshot(state: ProducerStateManager, txn_index: TransactionIndex, local_log: LocalLog) -> None:
    """Save the producer state as of the log end offset, and drop snapshots below the
    first segment. Nothing is written when the newest snapshot (or, without one, offset 0)
    is at the log end already: nothing was appended since (Kafka's ``takeSnapshot`` rule;
    a broker closing thousands of empty logs writes no file for them)."""
    offset = local_log.log_end_offset
    if offset == max(local_log.snapshot_offsets(), default=0):
        return
    local_log.sync_rolled_segments()               # the writes below fsync the log's directory
    txn_index.write()                              # before the snapshot that lets a scan skip them
    write_file_atomically(local_log.fs, local_log.snapshot_path(offset), state.encode_snapshot())
    for old in local_log.snapshot_offsets():
        if old < min(local_log.base_offsets[0], offset):
            local_log.fs.remove(local_log.snapshot_path(old))


def rebuild_producer_state(state: ProducerStateManager, txn_index: TransactionIndex, local_log: LocalLog,
                           log_start_offset: int, high_watermark: int) -> None:
    """Derive the producer state and the transaction index from the newest usable
    snapshot and the batch headers after it (see the module docstring)."""
    state.clear()
    start = _load_newest_snapshot(state, local_log)
    txn_index.load(log_start_offset, below_offset=start)
    segments, base_offsets = local_log.segments, local_log.base_offsets
    for i, segment in enumerate(segments):
        following = base_offsets[i + 1] if i + 1 < len(segments) else None
        if following is not None and following <= start:
            continue                               # wholly covered by the snapshot
        try:
            for position, header in segment.headers(0, segment.size_bytes):
                if header.base_offset < start:
                    continue
                if header.is_control and header.producer_id >= 0:   # a transaction marker
                    batch = segment.log.pread(header.size_bytes, position)
                    update_producer_state(state, txn_index, header, header.base_offset, read_control(batch, 0))
                elif is_idempotent(header):
                    state.update(header, header.base_offset)
        except CorruptRecordError as e:   # reads report it; the state stops where the damage starts
            logger.warning("%s: producer state stops at damaged batch: %s", local_log.topic_partition, e)
            break
    state.truncate_head(log_start_offset)
    state.on_high_watermark_updated(high_watermark)


def _load_newest_snapshot(state: ProducerStateManager, local_log: LocalLog) -> int:
    """Load the newest usable snapshot at or below the log end offset; returns its
    offset (0 when none). Snapshots above the log end and damaged ones are deleted."""
    fs = local_log.fs
    for offset in reversed(local_log.snapshot_offsets()):
        path = local_log.snapshot_path(offset)
        if offset > local_log.log_end_offset:
            fs.remove(path)
            continue
        try:
            state.load_snapshot(read_whole_file(fs, path, SNAPSHOT_SIZE_MAX_BYTES))
            return offset
        except (CorruptSnapshotError, ValueError) as e:
            logger.warning("%s: deleting producer snapshot %s: %s", local_log.topic_partition, path, e)
            fs.remove(path)
            state.clear()
    return 0
