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
           version 1   the same, flexible (compact strings and arrays), with three
                       tagged fields (KIP-890 part 2), each written only when it is
                       not its default:
                         tag 0  previous_producer_id int64 (-1): the producer id
                                before this record's transition
                         tag 1  next_producer_id int64 (-1): the id a TV2 commit or
                                abort rotates to when the epoch is exhausted
                         tag 2  client_transaction_version int16 (0): the
                                transaction.version the client runs (2: an epoch
                                bump with every EndTxn)
    value absent       a tombstone: the transactional id expired

Version 1 is written (as Kafka does once ``transaction.version`` is at least 1);
0 and 1 are read, so logs written before stay readable. Unknown tags are skipped.
A malformed record raises ``CorruptGroupRecord`` (shared with
``__consumer_offsets``) naming the problem.
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
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


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


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(writer: _Writer, value: str) -> None:
    data = value.encode("utf-8")
    writer.out += _uvarint(len(data) + 1) + data


def encode_value(value: TxnLogValue) -> bytes:
    """Version 1 (flexible), as Kafka writes it at transaction.version 1 and up."""
    writer = _Writer()
    writer.int16(1)
    writer.int64(value.producer_id)
    writer.int16(value.producer_epoch)
    writer.int32(value.timeout_ms)
    writer.out.append(int(value.state))
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(value.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if value.state == TxnState.EMPTY:
        writer.out += _uvarint(0)                   # null, as Kafka writes an Empty transaction's
    else:
        writer.out += _uvarint(len(by_topic) + 1)
        for topic, partitions in by_topic.items():
            _compact_string(writer, topic)
            writer.out += _uvarint(len(partitions) + 1)
            for partition in partitions:
                writer.int32(partition)
            writer.out += _uvarint(0)               # no tagged fields
    writer.int64(value.last_update_ms)
    writer.int64(value.start_ms)
    tagged = []
    if value.previous_producer_id != -1:
        tagged.append((0, value.previous_producer_id.to_bytes(8, "big", signed=True)))
    if value.next_producer_id != -1:
        tagged.append((1, value.next_producer_id.to_bytes(8, "big", signed=True)))
    if value.client_transaction_version != 0:
        tagged.append((2, value.client_transaction_version.to_bytes(2, "big", signed=True)))
    writer.out += _uvarint(len(tagged))
    for tag, data in tagged:
        writer.out += _uvarint(tag) + _uvarint(len(data)) + data
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
    tagged = _tagged_fields(reader) if reader.flexible else {}
    reader.done()
    return TxnLogValue(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                       last_update_ms, start_ms, tagged.get(0, -1), tagged.get(1, -1), tagged.get(2, 0))


_TAG_SIZES = {0: 8, 1: 8, 2: 2}      # tag -> the size of its int64 / int64 / int16


def _tagged_fields(reader: _Reader) -> dict[int, int]:
    """Version 1's tagged fields: the three this coordinator knows, the others skipped."""
    out = {}
    for _ in range(reader._uvarint()):
        tag, size = reader._uvarint(), reader._uvarint()
        data = bytes(reader._take(size))
        if tag in _TAG_SIZES:
            if size != _TAG_SIZES[tag]:
                raise CorruptGroupRecord(f"transaction log value: tagged field {tag} has {size} bytes, "
                                         f"not {_TAG_SIZES[tag]}")
            out[tag] = int.from_bytes(data, "big", signed=True)
    return out
