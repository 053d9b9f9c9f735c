"""Record batch v2: the unit of storage and replication (docs/storage.md, "File formats").

Theory of operation. A batch is stored and replicated byte for byte as a client
sent it; the broker touches only two header fields that lie *outside* the CRC
(``baseOffset`` and ``partitionLeaderEpoch``), so assigning offsets and stamping
epochs never re-checksums. The broker reads headers (``read_header``), validates
whole batches (``validate_batch``), and decodes individual records only when asked
(``iter_records``: tools, tests, the metadata log) — never on the produce/fetch
hot path.

Layout (big-endian), offsets from the start of the batch::

     0 baseOffset int64        27 baseTimestamp int64
     8 batchLength int32       35 maxTimestamp int64
    12 partitionLeaderEpoch    43 producerId int64
    16 magic int8 (= 2)        51 producerEpoch int16
    17 crc uint32              53 baseSequence int32
    21 attributes int16        57 recordCount int32
    23 lastOffsetDelta int32   61 records...

``batchLength`` counts the bytes after itself; the CRC-32C covers everything from
``attributes`` to the end. Malformed bytes raise ``CorruptRecordError`` naming the
problem and nothing else.
"""

from __future__ import annotations

import enum
import struct
from typing import Iterable, Iterator, NamedTuple, Sequence

from crc32c import crc32c

from tidelog.core.errors import CorruptRecordError
from tidelog.core.limits import (
    RECORD_BATCH_RECORD_COUNT_MAX,
    RECORD_BATCH_SIZE_MAX_BYTES,
    RECORD_HEADER_COUNT_MAX,
)
from tidelog.records.compression import Compression, compress, decompress
from tidelog.records.varint import decode_varint, encode_varint

MAGIC_V2 = 2
LOG_OVERHEAD_BYTES = 12          # baseOffset + batchLength
BATCH_HEADER_SIZE_BYTES = 61     # everything before the first record
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")

_LENGTH_OFFSET = 8
_PARTITION_LEADER_EPOCH_OFFSET = 12
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a batch, decoded; no records touched."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)


class Record(NamedTuple):
    """One record, decoded. ``offset`` and ``timestamp`` are absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos``, checking only what the header itself says.

    Does not look at the CRC or require the whole batch to be present.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE_BYTES:
        raise CorruptRecordError(
            f"record batch header needs {BATCH_HEADER_SIZE_BYTES} bytes, "
            f"only {max(0, len(buf) - pos)} present")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"record batch magic is {header.magic}, only 2 is supported")
    if header.batch_length < BATCH_HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"record batch length {header.batch_length} is below the header size")
    if header.batch_length > RECORD_BATCH_SIZE_MAX_BYTES:
        raise CorruptRecordError(f"record batch length {header.batch_length} exceeds the limit")
    if header.last_offset_delta < 0:
        raise CorruptRecordError(f"record batch lastOffsetDelta {header.last_offset_delta} is negative")
    if not 0 <= header.record_count <= RECORD_BATCH_RECORD_COUNT_MAX:
        raise CorruptRecordError(f"record batch declares {header.record_count} records")
    return header


def validate_batch(buf, pos: int = 0, strict: bool = True) -> BatchHeader:
    """Fully validate the batch at ``pos``: header, presence, size, CRC.

    ``strict`` (a leader validating a client's batch) also requires at least one
    record and ``recordCount == lastOffsetDelta + 1``; a follower copying a
    compacted batch passes ``strict=False``.
    """
    header = read_header(buf, pos)
    end = pos + header.size_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"record batch is {header.size_bytes} bytes, only {len(buf) - pos} present")
    expected = crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET:end])
    if expected != header.crc:
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} has CRC {header.crc:#010x}, "
            f"computed {expected:#010x}")
    if strict:
        if header.record_count == 0:
            raise CorruptRecordError("record batch has no records")
        if header.record_count != header.last_offset_delta + 1:
            raise CorruptRecordError(
                f"record batch declares {header.record_count} records but "
                f"lastOffsetDelta {header.last_offset_delta}")
    return header


def iter_batches(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf[pos:end]``.

    A partial batch at the end is not yielded (a fetch response may end in one);
    headers are not CRC-checked here.
    """
    end = len(buf) if end is None else end
    while end - pos >= BATCH_HEADER_SIZE_BYTES:
        header = read_header(buf, pos)
        if pos + header.size_bytes > end:
            return
        yield pos, header
        pos += header.size_bytes


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf, pos: int, leader_epoch: int) -> None:
    _INT32.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)


def set_log_append_time(buf, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` and recompute its CRC."""
    (attributes,) = _INT16.unpack_from(buf, pos + _ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + _ATTRIBUTES_OFFSET, attributes | _TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_OFFSET, timestamp_ms)
    (batch_length,) = _INT32.unpack_from(buf, pos + _LENGTH_OFFSET)
    end = pos + LOG_OVERHEAD_BYTES + batch_length
    _UINT32.pack_into(buf, pos + _CRC_OFFSET, crc32c(memoryview(buf)[pos + _ATTRIBUTES_OFFSET:end]))


def iter_records(buf, pos: int = 0) -> Iterator[Record]:
    """Decode every record of the batch at ``pos`` (decompressing if needed).

    The batch must already be validated; record-level damage still raises
    ``CorruptRecordError``.
    """
    header = read_header(buf, pos)
    end = pos + header.size_bytes
    if end > len(buf):
        raise CorruptRecordError("record batch is truncated")
    body = memoryview(buf)[pos + BATCH_HEADER_SIZE_BYTES:end]
    if header.compression != Compression.NONE:
        body = memoryview(decompress(header.compression, body))
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    cursor, body_end = 0, len(body)
    for _ in range(header.record_count):
        record, cursor = _decode_record(body, cursor, body_end, header, log_append)
        yield record
    if cursor != body_end:
        raise CorruptRecordError(
            f"record batch has {body_end - cursor} bytes after its {header.record_count} records")


def _decode_record(body, pos: int, body_end: int, header: BatchHeader, log_append: bool):
    length, pos = decode_varint(body, pos, body_end)
    end = pos + length
    if length < 1 or end > body_end:
        raise CorruptRecordError(f"record length {length} runs past the batch")
    pos += 1  # attributes, unused in v2
    timestamp_delta, pos = decode_varint(body, pos, end)
    offset_delta, pos = decode_varint(body, pos, end)
    key, pos = _decode_bytes(body, pos, end)
    value, pos = _decode_bytes(body, pos, end)
    header_count, pos = decode_varint(body, pos, end)
    if not 0 <= header_count <= RECORD_HEADER_COUNT_MAX:
        raise CorruptRecordError(f"record declares {header_count} headers")
    headers = []
    for _ in range(header_count):
        raw_key, pos = _decode_bytes(body, pos, end)
        if raw_key is None:
            raise CorruptRecordError("record header key is null")
        try:
            name = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("record header key is not UTF-8") from None
        header_value, pos = _decode_bytes(body, pos, end)
        headers.append((name, header_value))
    if pos != end:
        raise CorruptRecordError(f"record has {end - pos} unexplained bytes")
    timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)), end


def _decode_bytes(body, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(body, pos, end)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise CorruptRecordError(f"record field of {length} bytes runs past the record")
    return bytes(body[pos:pos + length]), pos + length


class SimpleRecord(NamedTuple):
    """A record to build: what a producer sends."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None


def build_batch(
    records: Iterable[SimpleRecord | bytes],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_ms: int = NO_TIMESTAMP,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode ``records`` (consecutive offsets from ``base_offset``) as one batch.

    Bare ``bytes`` are taken as values. A record without its own timestamp gets
    ``timestamp_ms``.
    """
    records = [r if isinstance(r, SimpleRecord) else SimpleRecord(r) for r in records]
    if not records:
        raise ValueError("a record batch needs at least one record")
    timestamps = [timestamp_ms if r.timestamp_ms is None else r.timestamp_ms for r in records]
    base_timestamp = timestamps[0]
    payload = compress(compression, encode_records(
        (record, delta, timestamp - base_timestamp)
        for delta, (record, timestamp) in enumerate(zip(records, timestamps))))
    attributes = (int(compression) | (int(timestamp_type) << 3)
                  | (_TRANSACTIONAL_MASK if is_transactional else 0)
                  | (_CONTROL_MASK if is_control else 0))
    return pack_batch(base_offset=base_offset, last_offset_delta=len(records) - 1,
                      partition_leader_epoch=partition_leader_epoch, attributes=attributes,
                      base_timestamp=base_timestamp, max_timestamp=max(timestamps), producer_id=producer_id,
                      producer_epoch=producer_epoch, base_sequence=base_sequence, record_count=len(records),
                      payload=payload)


def recompress(buf, pos: int, compression: Compression) -> bytes:
    """The validated batch at ``pos`` with its records stored under ``compression``
    (Kafka's LogValidator does this when a topic's ``compression.type`` differs from
    the producer's): the same offsets, timestamps, producer fields and attributes."""
    header = read_header(buf, pos)
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    records = list(iter_records(buf, pos))
    body = encode_records((record, record.offset - header.base_offset,
                           0 if log_append else record.timestamp - header.base_timestamp) for record in records)
    attributes = (header.attributes & ~_COMPRESSION_MASK) | int(compression)
    return pack_batch(base_offset=header.base_offset, last_offset_delta=header.last_offset_delta,
                      partition_leader_epoch=header.partition_leader_epoch, attributes=attributes,
                      base_timestamp=header.base_timestamp, max_timestamp=header.max_timestamp,
                      producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                      base_sequence=header.base_sequence, record_count=header.record_count,
                      payload=compress(compression, body))


def encode_records(records: Iterable[tuple]) -> bytes:
    """The (uncompressed) records section: ``(record, offset_delta, timestamp_delta)``
    triples, each record anything with ``key``, ``value`` and ``headers``."""
    body = bytearray()
    for record, offset_delta, timestamp_delta in records:
        _encode_record(body, record, timestamp_delta, offset_delta)
    return bytes(body)


def pack_batch(*, base_offset: int, last_offset_delta: int, partition_leader_epoch: int, attributes: int,
               base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
               base_sequence: int, record_count: int, payload: bytes) -> bytes:
    """A v2 batch around an already encoded (and compressed) records section, its CRC computed."""
    batch = bytearray(BATCH_HEADER_SIZE_BYTES)
    _HEADER.pack_into(
        batch, 0, base_offset, BATCH_HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES + len(payload),
        partition_leader_epoch, MAGIC_V2, 0, attributes, last_offset_delta, base_timestamp,
        max_timestamp, producer_id, producer_epoch, base_sequence, record_count)
    batch += payload
    _UINT32.pack_into(batch, _CRC_OFFSET, crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _encode_record(out: bytearray, record, timestamp_delta: int, offset_delta: int) -> None:
    inner = bytearray(b"\x00")  # attributes
    encode_varint(timestamp_delta, inner)
    encode_varint(offset_delta, inner)
    _encode_bytes(inner, record.key)
    _encode_bytes(inner, record.value)
    encode_varint(len(record.headers), inner)
    for name, value in record.headers:
        _encode_bytes(inner, name.encode("utf-8"))
        _encode_bytes(inner, value)
    encode_varint(len(inner), out)
    out += inner


def _encode_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


# -- transaction markers (control batches) ---------------------------------------------
#
# A marker is a control batch of one record: key = (version int16 = 0, type int16:
# 0 ABORT, 1 COMMIT), value = (version int16 = 0, coordinator epoch int32), carrying
# the producer's id and epoch (Kafka's EndTransactionMarker / ControlRecordType).

_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
CONTROL_ABORT, CONTROL_COMMIT = 0, 1


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([SimpleRecord(value, key)], timestamp_ms=timestamp_ms, producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True, is_control=True)


def read_control(buf, pos: int) -> tuple[int, int]:
    """``(control type, coordinator epoch)`` of the control batch at ``pos``; a control
    record this version does not know raises ``CorruptRecordError``."""
    for record in iter_records(buf, pos):
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            raise CorruptRecordError("a control record without a valid key")
        _version, control_type = _CONTROL_KEY.unpack_from(record.key)
        coordinator_epoch = -1
        if record.value is not None and len(record.value) >= _MARKER_VALUE.size:
            coordinator_epoch = _MARKER_VALUE.unpack_from(record.value)[1]
        return control_type, coordinator_epoch
    raise CorruptRecordError("a control batch without records")
