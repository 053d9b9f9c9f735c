"""A leader's check of a client's record batch before it is appended (Kafka's ``LogValidator``).

Theory of operation. The batch header, its size and CRC are checked by
``batch.validate_batch``; a CRC only proves the bytes arrived as the client
computed them, not that they are records. So the leader also checks what every
consumer will parse, and refuses the batch (nothing of the request is appended)
if any of it is wrong:

* the compression codec is one of the four Kafka knows (else
  CORRUPT_MESSAGE) and a compressed body decompresses, within
  ``RECORD_BATCH_DECOMPRESSED_SIZE_MAX_BYTES`` (a zip bomb is refused);
* the body is exactly ``record_count`` records, each one whole: its length
  varint covers attributes, timestamp delta, offset delta, key, value and
  headers exactly, lengths are -1 (null) or more, header keys are UTF-8 and not
  null, varints are at most 10 bytes;
* offset deltas run 0, 1, 2, … (consumers compute offsets from them);
* timestamps (CreateTime) lie within ``log.message.timestamp.before.max.ms`` /
  ``after.max.ms`` of the broker's clock (KIP-937).

A failure raises ``InvalidRecordError`` (INVALID_RECORD) naming the record, or
``CorruptRecordError`` (CORRUPT_MESSAGE) for a body that is not records at all,
as Kafka answers. ``walk_records`` is the per-record loop: plain Python, about a
microsecond per record.
"""

from __future__ import annotations

from tidelog.core.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.compression import Compression, decompress


def walk_records(body, count: int) -> tuple[int, int]:
    """Check that ``body`` is exactly ``count`` well-formed records with offset deltas
    0..count-1; returns (smallest, largest) timestamp delta. Raises ``CorruptRecordError``."""
    pos, end = 0, len(body)
    n = 0
    low = high = 0

    def varint(p: int) -> tuple[int, int]:
        if p >= end:
            raise CorruptRecordError(f"record {n} ends inside a varint")
        b = body[p]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), p + 1
        result, shift = b & 0x7F, 7
        p += 1
        while True:
            if p >= end:
                raise CorruptRecordError(f"record {n} ends inside a varint")
            b = body[p]
            p += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return (result >> 1) ^ -(result & 1), p
            shift += 7
            if shift > 63:
                raise CorruptRecordError(f"record {n} has a varint longer than 10 bytes")

    while pos < end:
        length, p = varint(pos)
        record_end = p + length
        if length < 6 or record_end > end:     # attributes + 5 one-byte varints at least
            raise CorruptRecordError(f"record {n} declares {length} bytes; {end - p} remain in the batch")
        p += 1                                  # attributes: unused in v2 records
        timestamp_delta, p = varint(p)
        offset_delta, p = varint(p)
        if offset_delta != n:
            raise InvalidRecordError(f"record {n} has offset delta {offset_delta}")
        key_length, p = varint(p)
        if key_length >= 0:
            p += key_length
        elif key_length != -1:
            raise CorruptRecordError(f"record {n} has key length {key_length}")
        value_length, p = varint(p)
        if value_length >= 0:
            p += value_length
        elif value_length != -1:
            raise CorruptRecordError(f"record {n} has value length {value_length}")
        if p > record_end:
            raise CorruptRecordError(f"record {n}'s key and value run past its length")
        header_count, p = varint(p)
        if header_count < 0:
            raise CorruptRecordError(f"record {n} has {header_count} headers")
        for _ in range(header_count):
            name_length, p = varint(p)
            if name_length < 0:
                raise CorruptRecordError(f"record {n} has a header with a null key")
            try:
                str(body[p:p + name_length], "utf-8")        # consumers decode header keys as strings
            except UnicodeDecodeError:
                raise CorruptRecordError(f"record {n} has a header key that is not UTF-8") from None
            p += name_length
            header_value_length, p = varint(p)
            if header_value_length >= 0:
                p += header_value_length
            elif header_value_length != -1:
                raise CorruptRecordError(f"record {n} has header value length {header_value_length}")
            if p > record_end:
                raise CorruptRecordError(f"record {n}'s headers run past its length")
        if p != record_end:
            raise CorruptRecordError(f"record {n} is {length} bytes but its fields take {p - (record_end - length)}")
        if timestamp_delta < low:
            low = timestamp_delta
        elif timestamp_delta > high:
            high = timestamp_delta
        pos = record_end
        n += 1
    if n != count:
        raise CorruptRecordError(f"record batch declares {count} records but holds {n}")
    return low, high


def validate_records(buf, pos: int, header, now_ms: int, before_max_ms: int, after_max_ms: int,
                     check_timestamps: bool) -> None:
    """Every record of the (CRC-checked) batch at ``pos``; raises naming what is wrong."""
    try:
        codec = Compression(header.compression)
    except ValueError:
        raise CorruptRecordError(f"record batch uses unknown compression codec {header.compression}") from None
    body = memoryview(buf)[pos + 61:pos + header.size_bytes]
    if codec != Compression.NONE:
        body = decompress(codec, body)
    low, high = walk_records(body, header.record_count)
    if check_timestamps and not header.is_control:
        first, last = header.base_timestamp + low, header.base_timestamp + high
        if now_ms - first > before_max_ms:
            raise InvalidRecordError(f"timestamp {first} is more than log.message.timestamp.before.max.ms "
                                     f"({before_max_ms}) before the broker's clock ({now_ms})")
        if last - now_ms > after_max_ms:
            raise InvalidRecordError(f"timestamp {last} is more than log.message.timestamp.after.max.ms "
                                     f"({after_max_ms}) after the broker's clock ({now_ms})")
