"""The records of ``__transaction_state``, in Kafka's on-disk formats.

Theory of operation. Every record is a key and a value, each starting with an
int16 version (Kafka's ``TransactionLogKey`` / ``TransactionLogValue``), so that
Kafka's tools (``kafka-dump-log --transaction-log-decoder``) read what tidelog
writes:

    key    version 0   transactional_id (string)
    value  version 0   producer_id int64 · producer_epoch int16 ·
                       transaction_timeout_ms int32 · transaction_status int8 ·
                       transaction_partitions [topic string, [partition int32]] (nullable) ·
                       transaction_last_update_timestamp_ms int64 ·
                       transaction_start_timestamp_ms int64
           version 1   the same, flexible (compact strings and arrays, tagged fields)
    value absent       a tombstone: the transactional id expired

Version 0 is written; 0 and 1 are read. A malformed record raises
``CorruptGroupRecord`` (shared with ``__consumer_offsets``) naming the problem.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tidelog.core.ids import TopicPartition
from tidelog.group.records import CorruptGroupRecord, _Reader, _Writer


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as stored."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """The name DescribeTransactions and ListTransactions answer (Kafka's ``stateName``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset = field(default_factory=frozenset)     # TopicPartition
    last_update_ms: int = -1
    start_ms: int = -1


def encode_key(transactional_id: str) -> bytes:
    writer = _Writer()
    writer.int16(0)
    writer.string(transactional_id)
    return bytes(writer.out)


def decode_key(data: bytes) -> str:
    reader = _Reader(data, "transaction log key")
    version = reader.int16()
    if version != 0:
        raise CorruptGroupRecord(f"transaction log key: unknown version {version}")
    transactional_id = reader.string()
    reader.done()
    return transactional_id


def encode_value(value: TxnLogValue) -> bytes:
    writer = _Writer()
    writer.int16(0)
    writer.int64(value.producer_id)
    writer.int16(value.producer_epoch)
    writer.int32(value.timeout_ms)
    writer.out.append(int(value.state))
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(value.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    writer.int32(len(by_topic))
    for topic, partitions in by_topic.items():
        writer.string(topic)
        writer.int32(len(partitions))
        for partition in partitions:
            writer.int32(partition)
    writer.int64(value.last_update_ms)
    writer.int64(value.start_ms)
    return bytes(writer.out)


def decode_value(data: bytes) -> TxnLogValue:
    reader = _Reader(data, "transaction log value")
    version = reader.int16()
    if version not in (0, 1):
        raise CorruptGroupRecord(f"transaction log value: unknown version {version}")
    reader.flexible = version >= 1
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader._take(1)[0]
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptGroupRecord(f"transaction log value: unknown status {status}") from None
    partitions = set()
    count = reader._uvarint() - 1 if reader.flexible else reader.int32()
    for _ in range(max(count, 0)):                   # -1: null, no partitions
        topic = reader.string()
        for _ in range(reader.array_length()):
            partitions.add(TopicPartition(topic, reader.int32()))
        reader.tagged_fields()
    last_update_ms = reader.int64()
    start_ms = reader.int64()
    reader.tagged_fields()
    reader.done()
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                       last_update_ms, start_ms)
