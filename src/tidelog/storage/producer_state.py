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
derived from the log: ``Log`` rebuilds it by scanning batch headers when it opens
and after a truncation (Kafka loads a ``.snapshot`` first; tidelog has no
snapshots yet, so opening scans every segment's headers). Pure Python: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tidelog.core.errors import ErrorCode, KafkaError

PRODUCER_BATCHES_RETAINED = 5
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
        if entry is None or header.producer_epoch > entry.producer_epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        elif header.producer_epoch < entry.producer_epoch:
            return                                       # a zombie's batch a follower copied: keep the newer epoch
        entry.batches.append(BatchMetadata(
            header.base_sequence, _last_sequence(header.base_sequence, header.last_offset_delta),
            first_offset, first_offset + header.last_offset_delta, header.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for ``producer.id.expiration.ms`` (measured, as in
        Kafka, from the largest timestamp of their last batch); returns how many."""
        expired = [pid for pid, entry in self.producers.items() if now_ms - entry.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
