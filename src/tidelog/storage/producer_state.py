"""Idempotent producers: per-partition producer state (Kafka's ``ProducerStateManager``).

Theory of operation. A batch written by an idempotent producer carries its
producer id, producer epoch and the sequence number of its first record. The
partition remembers, per producer id, its epoch and the metadata of its last
``PRODUCER_BATCHES_RETAINED`` (5, as Kafka; a producer keeps at most 5 requests in
flight) batches: first/last sequence and first/last offset. A leader checks each
new batch against it before assigning offsets:

* the same epoch and sequence range as a remembered batch → a *duplicate* (a
  retry whose first attempt was written): answered with the original offsets,
  nothing written;
* an older epoch → INVALID_PRODUCER_EPOCH (a zombie producer);
* a newer epoch → the sequence must restart at 0 (or the producer is unknown here);
* the same epoch → the sequence must follow the last one (wrapping at 2^31 - 1);
  else OUT_OF_ORDER_SEQUENCE_NUMBER. A producer this partition has no state for
  (its records were deleted or expired) is accepted at any sequence, as Kafka
  does since KIP-360.

Every replica — leader or follower, live or recovering — updates the state from
the batches it appends, so deduplication survives a leader failover. The state is
derived from the log, and saved beside it as Kafka's ``<offset>.snapshot`` files
(``encode_snapshot`` / ``decode_snapshot``: the state of every producer as of
that offset) at each segment roll and at a clean shutdown; ``Log`` loads the
newest snapshot at or below its end and scans only the batch headers after it
(at open and after a truncation). A snapshot keeps each producer's last batch,
as Kafka's does. Producers whose last batch is below the log start offset are
forgotten (``truncate_head``). Pure Python: no I/O.

Transactions. A batch with the transactional attribute opens a transaction for
its producer at its first offset (``current_txn_first_offset``) unless one is
open; a control batch (a COMMIT or ABORT marker written by the transaction
coordinator, ``update_marker``) closes it. The open transactions' first offsets
give the *first unstable offset*: a read_committed consumer reads no further than
``min(high watermark, first unstable offset)``, the last stable offset (LSO). An
ABORT marker yields an ``AbortedTxn`` that the log keeps in its aborted-transaction
index (``.txnindex``), so read_committed fetches can tell clients which records
to drop. Markers must carry the producer's current epoch or a newer one (else
INVALID_PRODUCER_EPOCH) and a coordinator epoch no older than the last marker's
(else TRANSACTION_COORDINATOR_FENCED: a deposed coordinator).

Snapshot format (Kafka's ``ProducerStateManager`` v1, big-endian)::

    version int16 = 1 · crc uint32 (CRC-32C of what follows) · count int32
    count × { producer_id int64 · producer_epoch int16 · last_sequence int32 ·
              last_offset int64 · offset_delta int32 · timestamp int64 ·
              coordinator_epoch int32 · current_txn_first_offset int64 }
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from crc32c import crc32c

from tidelog.core.errors import ErrorCode, KafkaError

PRODUCER_BATCHES_RETAINED = 5
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
SEQUENCE_MAX = 0x7FFFFFFF


class ProducerStateError(KafkaError):
    pass


class OutOfOrderSequenceError(ProducerStateError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class DuplicateSequenceError(ProducerStateError):
    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class CorruptSnapshotError(ValueError):
    pass


class TransactionCoordinatorFencedError(ProducerStateError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


CONTROL_ABORT, CONTROL_COMMIT = 0, 1


@dataclass(frozen=True)
class AbortedTxn:
    """One entry of the aborted-transaction index (Kafka's ``AbortedTxn``)."""
    producer_id: int
    first_offset: int
    last_offset: int           # the ABORT marker's offset
    last_stable_offset: int    # the LSO once the marker was written


@dataclass(frozen=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass
class ProducerEntry:
    producer_epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=PRODUCER_BATCHES_RETAINED))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


def _last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequences wrap at 2^31 - 1 back to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    return (base_sequence + last_offset_delta) % (SEQUENCE_MAX + 1)


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (last_sequence == SEQUENCE_MAX and next_sequence == 0)


def is_idempotent(header) -> bool:
    return header.producer_id >= 0 and header.base_sequence >= 0


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}      # producer id → first offset of its open transaction
        # Transactions whose marker is written but not yet below the high watermark: first
        # offset → the marker's offset (Kafka's unreplicatedTxns). They stay unstable until
        # the marker is replicated, so a read_committed reader never sees a transaction a
        # leader change could still undo (ReplicaManagerTest testReadCommittedFetchLimitedAtLSO).
        self.unreplicated: dict[int, int] = {}

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open or not yet replicated, or None."""
        if not self.ongoing and not self.unreplicated:
            return None
        return min([*self.ongoing.values(), *self.unreplicated])

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is now below the high watermark."""
        if self.unreplicated:
            self.unreplicated = {first: marker for first, marker in self.unreplicated.items()
                                 if marker >= high_watermark}

    def check_marker(self, header, coordinator_epoch: int, partition: str = "") -> None:
        """A leader's validation of a transaction marker from the coordinator; raises."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"{partition}: marker for producer {header.producer_id} at epoch {header.producer_epoch}, "
                f"older than {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{partition}: marker from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}")

    def update_marker(self, header, offset: int, control_type: int, coordinator_epoch: int) -> AbortedTxn | None:
        """Record a COMMIT/ABORT marker at ``offset``; the aborted transaction it closed, if any."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        elif header.producer_epoch > entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        del self.ongoing[header.producer_id]
        self.unreplicated[first] = offset
        if control_type != CONTROL_ABORT:
            return None
        # The aborted-transaction index's stable offset counts the other open transactions
        # only (Kafka's lastStableOffset(completedTxn)).
        unstable = min(self.ongoing.values()) if self.ongoing else None
        return AbortedTxn(header.producer_id, first, offset, offset + 1 if unstable is None else unstable)

    def find_duplicate(self, header) -> BatchMetadata | None:
        """The remembered batch this one repeats (same producer, epoch and sequences)."""
        entry = self.producers.get(header.producer_id)
        if entry is None or entry.producer_epoch != header.producer_epoch:
            return None
        last_sequence = _last_sequence(header.base_sequence, header.last_offset_delta)
        for batch in entry.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def check_leader_batch(self, header, in_request: dict[int, tuple[int, int]],
                           partition: str = "") -> BatchMetadata | None:
        """A leader's look at one idempotent batch of a produce request: the batch it
        duplicates, or None once epoch and sequence are checked (raises). Earlier
        batches of the same request count: ``in_request`` maps producer id → (epoch,
        last sequence) for them, and is updated."""
        earlier = in_request.get(header.producer_id)
        if earlier is None:
            duplicate = self.find_duplicate(header)
            if duplicate is not None:
                return duplicate
            self.check(header, partition)
        elif header.producer_epoch != earlier[0] or not _in_sequence(earlier[1], header.base_sequence):
            raise OutOfOrderSequenceError(f"{partition}: producer {header.producer_id} batches out of order "
                                          f"within one request")
        in_request[header.producer_id] = (header.producer_epoch,
                                          _last_sequence(header.base_sequence, header.last_offset_delta))
        return None

    def check(self, header, partition: str = "") -> None:
        """A leader's validation of a new (non-duplicate) idempotent batch; raises."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return                                       # unknown here (KIP-360): any sequence
        epoch, sequence = header.producer_epoch, header.base_sequence
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"{partition}: producer {header.producer_id} epoch {epoch} is older than {entry.producer_epoch}")
        if epoch > entry.producer_epoch:
            if sequence != 0:
                raise OutOfOrderSequenceError(
                    f"{partition}: producer {header.producer_id} starts epoch {epoch} at sequence {sequence}, not 0")
            return
        if entry.batches and not _in_sequence(entry.last_sequence, sequence):
            raise OutOfOrderSequenceError(
                f"{partition}: producer {header.producer_id} epoch {epoch} sent sequence {sequence}; "
                f"expected {(entry.last_sequence + 1) % (SEQUENCE_MAX + 1)}")

    def update(self, header, first_offset: int) -> None:
        """Record an appended batch (leader, follower or recovery)."""
        if not is_idempotent(header):
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        elif header.producer_epoch > entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch     # a new epoch: sequences restart
            entry.batches.clear()
        elif header.producer_epoch < entry.producer_epoch:
            return                                       # a zombie's batch a follower copied: keep the newer epoch
        entry.batches.append(BatchMetadata(
            header.base_sequence, _last_sequence(header.base_sequence, header.last_offset_delta),
            first_offset, first_offset + header.last_offset_delta, header.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[header.producer_id] = first_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms`` (measured, as in
        Kafka, from the largest timestamp of their last batch); returns how many."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp >= expiration_ms and entry.current_txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> int:
        """Forget producers whose last batch lies below the log start offset (their
        records are gone, as Kafka's ``truncateHead``); returns how many."""
        gone = [pid for pid, entry in self.producers.items()
                if entry.batches and entry.batches[-1].last_offset < log_start_offset
                and entry.current_txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # ------------------------------------------------------------- snapshots

    def encode_snapshot(self) -> bytes:
        entries = bytearray()
        count = 0
        for producer_id, entry in sorted(self.producers.items()):
            if entry.batches:
                last = entry.batches[-1]
                sequence, offset, delta = last.last_sequence, last.last_offset, last.last_offset - last.first_offset
            else:                                        # known only from a marker
                sequence, offset, delta = NO_SEQUENCE, -1, 0
            entries += _SNAPSHOT_ENTRY.pack(producer_id, entry.producer_epoch, sequence, offset, delta,
                                            entry.last_timestamp, entry.coordinator_epoch,
                                            entry.current_txn_first_offset)
            count += 1
        body = struct.pack(">i", count) + bytes(entries)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body

    def load_snapshot(self, data: bytes) -> None:
        """Replace the state with a snapshot's; ``CorruptSnapshotError`` names what is wrong."""
        if len(data) < _SNAPSHOT_HEADER.size:
            raise CorruptSnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
        version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
        if version != SNAPSHOT_VERSION:
            raise CorruptSnapshotError(f"unknown snapshot version {version}")
        if crc32c(data[6:]) != crc:
            raise CorruptSnapshotError("CRC mismatch")
        if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
            raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
        self.clear()
        for i in range(count):
            (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp,
             coordinator_epoch, txn_first_offset) = _SNAPSHOT_ENTRY.unpack_from(
                data, _SNAPSHOT_HEADER.size + i * _SNAPSHOT_ENTRY.size)
            entry = self.producers[producer_id] = ProducerEntry(epoch, last_timestamp=timestamp,
                                                                coordinator_epoch=coordinator_epoch,
                                                                current_txn_first_offset=txn_first_offset)
            if last_sequence != NO_SEQUENCE:
                entry.batches.append(BatchMetadata((last_sequence - offset_delta) % (SEQUENCE_MAX + 1),
                                                   last_sequence, last_offset - offset_delta, last_offset, timestamp))
            if txn_first_offset >= 0:
                self.ongoing[producer_id] = txn_first_offset
