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

and, record by record (Kafka's ``validateRecord``):

* offset deltas run 0, 1, 2, … (consumers compute offsets from them);
* a compacted topic's records have a key;
* timestamps (CreateTime topics; a record without one, -1, passes) lie within
  ``log.message.timestamp.before.max.ms`` / ``after.max.ms`` of the broker's
  clock (KIP-937), and a client's batch is not marked LogAppendTime.

A body that is not records raises ``CorruptRecordError`` (CORRUPT_MESSAGE), as
Kafka answers. Records refused one by one raise ``RecordValidationError`` with
each offending record's index and Kafka's message for it (the produce
response's ``record_errors``, KIP-467): INVALID_TIMESTAMP if a timestamp is
among them, else INVALID_RECORD; clients then fail those records with the code
and the batch's others as INVALID_DIFFERENT_RECORD.

Fast walks that only accept, one exact walk that explains. The produce path
asks ``accept_records_vectorized`` (a batch of ``VECTORIZED_RECORDS_MIN``
records or more: a Python loop finds each record's start, numpy checks every
record's fields at once) and then, for what it leaves, ``accept_records`` (one
pass in Python that builds no object per record and decodes a varint inline
when it is one or two bytes, as nearly every length, delta and count is). They
answer only "every record is fine, and these are the smallest and largest
timestamp deltas" or "not so" (``None``). Only then does ``walk_records``, the
exact walk, run again over the same bytes to find what is wrong and say it in
Kafka's words, so a refused batch is answered exactly as before, index by
index. ``accept_records`` accepts exactly the bodies ``walk_records`` finds
nothing wrong with, and the vectorized walk accepts none other
(tests/records/test_validator.py checks both on random and damaged batches).
The per-record timestamps are read again only when the batch's smallest or
largest is out of range.
"""

from __future__ import annotations

from tidelog.core.errors import CorruptRecordError, RecordValidationError
from tidelog.core.limits import RECORD_HEADER_COUNT_MAX
from tidelog.records.batch import TimestampType, iter_records
from tidelog.records.compression import Compression, decompress
from tidelog.records.varint import decode_varint

MISPLACED, KEYLESS = "offset", "key"        # why walk_records refuses a record
VECTORIZED_RECORDS_MIN = 64      # below, numpy's cost per call outweighs what it saves per record


def walk_records(body, count: int, keys_required: bool = False) -> tuple[int, int, dict[int, tuple[str, int]]]:
    """Check that ``body`` is exactly ``count`` well-formed records (else raises
    ``CorruptRecordError``); returns the (smallest, largest) timestamp delta and the
    records to refuse, {index: (MISPLACED, its offset delta)} for an offset delta that is
    not the record's index, {index: (KEYLESS, -1)} for a null key where ``keys_required``."""
    pos, end = 0, len(body)
    n = 0
    low = high = 0
    refused: dict[int, tuple[str, int]] = {}
    varint = _walk_varint
    while pos < end:
        length, p = varint(body, pos, end, n)
        record_end = p + length
        if length < 6 or record_end > end:     # attributes + 5 one-byte varints at least
            raise CorruptRecordError(f"record {n} declares {length} bytes; {end - p} remain in the batch")
        p += 1                                  # attributes: unused in v2 records
        timestamp_delta, p = varint(body, p, end, n)
        offset_delta, p = varint(body, p, end, n)
        if offset_delta != n:
            refused[n] = (MISPLACED, offset_delta)
        key_length, p = varint(body, p, end, n)
        if key_length >= 0:
            p += key_length
        elif key_length != -1:
            raise CorruptRecordError(f"record {n} has key length {key_length}")
        elif keys_required and n not in refused:
            refused[n] = (KEYLESS, -1)
        value_length, p = varint(body, p, end, n)
        if value_length >= 0:
            p += value_length
        elif value_length != -1:
            raise CorruptRecordError(f"record {n} has value length {value_length}")
        if p > record_end:
            raise CorruptRecordError(f"record {n}'s key and value run past its length")
        header_count, p = varint(body, p, end, n)
        if not 0 <= header_count <= RECORD_HEADER_COUNT_MAX:       # what iter_records can read back
            raise CorruptRecordError(f"record {n} has {header_count} headers (at most {RECORD_HEADER_COUNT_MAX})")
        for _ in range(header_count):
            name_length, p = varint(body, p, end, n)
            if name_length < 0:
                raise CorruptRecordError(f"record {n} has a header with a null key")
            try:
                str(body[p:p + name_length], "utf-8")        # consumers decode header keys as strings
            except UnicodeDecodeError:
                raise CorruptRecordError(f"record {n} has a header key that is not UTF-8") from None
            p += name_length
            header_value_length, p = varint(body, p, end, n)
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
    return low, high, refused


def _walk_varint(body, p: int, end: int, n: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``p`` in record ``n`` (``walk_records``'s
    reader: a varint cut off by ``end`` or longer than 10 bytes is CORRUPT_MESSAGE)."""
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


def _varint_raw(body, pos: int) -> tuple[int, int]:
    """(zig-zag encoded value, next position) of the varint at ``pos``; ValueError past
    10 bytes, IndexError past the body (both mean ``accept_records`` answers ``None``)."""
    result = shift = 0
    while True:
        b = body[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError


def accept_records(body, count: int, keys_required: bool = False) -> tuple[int, int] | None:
    """The (smallest, largest) timestamp delta of ``body`` if it is exactly ``count``
    well-formed records with offset deltas 0, 1, 2, ... (and a key each where
    ``keys_required``); else ``None``, and ``walk_records`` says why. Varints are kept
    zig-zag encoded (``z``): odd is negative, 1 is -1 (null), ``z >> 1`` a length."""
    end = len(body)
    pos = n = low = high = 0
    try:
        while pos < end:
            z = body[pos]                           # record length
            if z < 0x80:
                pos += 1
            elif body[pos + 1] < 0x80:
                z = (z & 0x7F) | (body[pos + 1] << 7)
                pos += 2
            else:
                z, pos = _varint_raw(body, pos)
            record_end = pos + (z >> 1)
            if z & 1 or z < 12 or record_end > end:
                return None
            p = pos + 1                             # after the attributes byte
            for field in (0, 1, 2, 3):              # timestamp delta, offset delta, key, value
                z = body[p]
                if z < 0x80:
                    p += 1
                elif body[p + 1] < 0x80:
                    z = (z & 0x7F) | (body[p + 1] << 7)
                    p += 2
                else:
                    z, p = _varint_raw(body, p)
                if field == 0:
                    delta = (z >> 1) ^ -(z & 1)
                    if delta < low:
                        low = delta
                    elif delta > high:
                        high = delta
                elif field == 1:
                    if z != n << 1:                 # offset delta n is zig-zag 2n
                        return None
                elif z & 1:
                    if z != 1 or (field == 2 and keys_required):
                        return None
                else:
                    p += z >> 1
            if body[p]:                             # header count
                if not _accept_headers(body, p, record_end):
                    return None
            elif p + 1 != record_end:
                return None
            pos = record_end
            n += 1
    except (IndexError, ValueError):     # UnicodeDecodeError is a ValueError
        return None
    if n != count:
        return None
    return low, high


def _accept_headers(body, p: int, record_end: int) -> bool:
    """Whether the headers at ``p`` (a count, then key and value of each) are well
    formed, keys UTF-8 and not null, and end exactly at ``record_end``."""
    z, p = _varint_raw(body, p)
    if z & 1 or z >> 1 > RECORD_HEADER_COUNT_MAX:
        return False
    for _ in range(z >> 1):
        z, p = _varint_raw(body, p)
        if z & 1:
            return False
        str(body[p:p + (z >> 1)], "utf-8")
        p += z >> 1
        z, p = _varint_raw(body, p)
        if z & 1:
            if z != 1:
                return False
        else:
            p += z >> 1
        if p > record_end:
            return False
    return p == record_end


def _decode_each(numpy, data, positions):
    """The zig-zag encoded values of the varints at ``positions`` and their widths, if
    every one is one or two bytes; else (None, None)."""
    first = data[positions]
    two = first >= 0x80
    second = data.take(positions + 1, mode="clip")     # past the end: the last byte again, >= 0x80
    if (two & (second >= 0x80)).any():
        return None, None
    z = numpy.where(two, (first & 0x7F) | (second.astype(numpy.int64) << 7), first)
    return z, 1 + two


def _walked_starts(numpy, body, count: int):
    """Where each record starts, found by the one loop in Python: a length varint a record."""
    starts, end, pos = [], len(body), 0
    append = starts.append
    try:
        while pos < end:
            append(pos)
            z = body[pos]
            if z < 0x80:
                pos += 1 + (z >> 1)
            else:
                pos += 2 + (((z & 0x7F) | (body[pos + 1] << 7)) >> 1)
    except IndexError:
        return None
    if pos != end or len(starts) != count or not starts:
        return None
    return numpy.array(starts, numpy.int64)


def _guessed_starts(numpy, body, count: int):
    """Where each record starts, guessed without a loop for a producer's batch of
    same-sized values: each record as long as the first, one byte longer from the 65th
    on (its offset delta takes a second varint byte). Only a guess that fills the body
    exactly is returned; ``accept_records_vectorized`` then checks every record's length
    against it (each must end where the next starts) and walks to the starts if one does
    not: a wrong guess costs one vectorized check, never a wrong answer. None (the loop
    finds them) otherwise."""
    z = body[0]
    if z < 0x80:
        length = z >> 1
    elif len(body) > 1 and body[1] < 0x80:
        length = ((z & 0x7F) | (body[1] << 7)) >> 1
    else:
        return None
    if not 0 < count <= 8192:
        return None
    lengths = numpy.full(count, length, numpy.int64)
    lengths[64:] += 1
    strides = 1 + (lengths >= 64) + lengths           # the zig-zag length varint, then the record
    ends = numpy.cumsum(strides)
    return ends - strides if ends[-1] == len(body) else None


def accept_records_vectorized(body, count: int, keys_required: bool = False) -> tuple[int, int] | None:
    """``accept_records`` for a batch of many records without headers: where each record
    starts is guessed for a producer's batch of same-sized values (``_guessed_starts``,
    checked), else found by the only loop in Python (one length varint a record); every field of
    every record is then decoded and checked at once with numpy (C loops over arrays).
    ``None`` (then ``accept_records`` decides) for what it does not accept, and for
    headers or a varint of three bytes or more, which it leaves to the scalar walk."""
    end = len(body)
    # A batch whose first record carries headers (its last byte, the header count or a
    # header's value, is not 0) goes to the scalar walk at once, before any decoding here.
    try:
        z = body[0]
        first_end = 1 + (z >> 1) if z < 0x80 else 2 + (((z & 0x7F) | (body[1] << 7)) >> 1)
        if body[first_end - 1] != 0:
            return None
    except IndexError:
        return None
    import numpy                    # here, not at import: tidelog's commands start without it
    data = numpy.frombuffer(body, numpy.uint8)
    record_starts = _guessed_starts(numpy, body, count)
    if record_starts is not None:
        z, width = _decode_each(numpy, data, record_starts)
        if z is None or ((record_starts + width + (z >> 1))[:-1] != record_starts[1:]).any():
            record_starts = None            # a wrong guess: walk to them
    if record_starts is None:
        record_starts = _walked_starts(numpy, body, count)
        if record_starts is None:
            return None
        z, width = _decode_each(numpy, data, record_starts)
    if z is None or (z & 1).any() or (z < 12).any():
        return None
    ends = record_starts + width + (z >> 1)
    if (ends[:-1] != record_starts[1:]).any() or ends[-1] != end:
        return None
    p = record_starts + width + 1                        # after the attributes byte
    z, width = _decode_each(numpy, data, p)             # timestamp delta
    if z is None:
        return None
    deltas = (z >> 1) ^ -(z & 1)
    p += width
    z, width = _decode_each(numpy, data, p)             # offset delta: zig-zag 2n
    if z is None or (z != numpy.arange(0, 2 * count, 2)).any():
        return None
    p += width
    for key in (True, False):                           # key length, then value length
        z, width = _decode_each(numpy, data, p)
        if z is None:
            return None
        null = (z & 1).astype(bool)
        if null.any() and ((z[null] != 1).any() or (key and keys_required)):
            return None
        p += width + numpy.where(null, 0, z >> 1)
        if (p >= ends).any():
            return None
    if data[p].any() or (p + 1 != ends).any():          # no headers (else the scalar walk), nothing after
        return None
    return min(0, int(deltas.min())), max(0, int(deltas.max()))


def _timestamp_deltas(body):
    """The timestamp delta of each record of a body ``walk_records`` accepted."""
    pos, end = 0, len(body)
    while pos < end:
        length, p = decode_varint(body, pos, end)
        yield decode_varint(body, p + 1, end)[0]       # after the attributes byte
        pos = p + length


def validate_records(buf, pos: int, header, now_ms: int, before_max_ms: int, after_max_ms: int,
                     check_timestamps: bool, compacted: bool = False, topic_partition: str = "") -> None:
    """Every record of the (CRC-checked) batch at ``pos``; raises naming what is wrong.
    ``check_timestamps``: the topic keeps CreateTime; ``compacted``: records need a key."""
    try:
        codec = Compression(header.compression)
    except ValueError:
        raise CorruptRecordError(f"record batch uses unknown compression codec {header.compression}") from None
    body = memoryview(buf)[pos + 61:pos + header.size_bytes]
    if codec != Compression.NONE:
        body = decompress(codec, body)
    accepted = None
    if header.record_count >= VECTORIZED_RECORDS_MIN:
        accepted = accept_records_vectorized(body, header.record_count, compacted)
    if accepted is None:
        accepted = accept_records(body, header.record_count, compacted)
    if accepted is not None:
        (low, high), refused = accepted, {}
    else:
        low, high, refused = walk_records(body, header.record_count, keys_required=compacted)
    errors = {}
    for index, (reason, offset_delta) in refused.items():
        errors[index] = (f"Record {index} has offset delta {offset_delta}: offset deltas must run 0, 1, 2, ... "
                         f"in topic partition {topic_partition}" if reason == MISPLACED else
                         f"Compacted topic cannot accept message without key in topic partition {topic_partition}.")
    bad_timestamps = []
    if not header.is_control:
        bad_timestamps = _timestamp_errors(buf, pos, header, body, low, high, now_ms, before_max_ms,
                                           after_max_ms, check_timestamps)
    invalid_timestamp = False
    for index, message in bad_timestamps:
        if index not in errors:            # one error a record: its key's before its timestamp's
            errors[index] = message
            invalid_timestamp = True
    if errors:
        raise RecordValidationError(sorted(errors.items()), invalid_timestamp)


def _timestamp_errors(buf, pos: int, header, body, low: int, high: int, now_ms: int, before_max_ms: int,
                      after_max_ms: int, create_time_topic: bool) -> list[tuple[int, str]]:
    """(index, message) of each record whose timestamp Kafka refuses: out of the bounds in
    a CreateTime topic, or in a batch the client marked LogAppendTime (only the broker may)
    where no CreateTime timestamp is checked. Records are read one by one only when the
    batch's smallest or largest timestamp is out of range."""
    log_append_batch = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    if log_append_batch:            # its records' timestamps are the batch's max timestamp
        first = last = header.max_timestamp
    else:
        first, last = header.base_timestamp + low, header.base_timestamp + high
    lowest, highest = now_ms - before_max_ms, now_ms + after_max_ms
    if create_time_topic:
        if lowest <= first and last <= highest and not (log_append_batch and first == -1):
            return []
    elif not log_append_batch:
        return []
    if log_append_batch:
        records = list(iter_records(buf, pos))
        timestamps = [header.max_timestamp] * len(records)
    else:
        timestamps = [header.base_timestamp + delta for delta in _timestamp_deltas(body)]
    out = []
    for index, timestamp in enumerate(timestamps):
        if create_time_topic and timestamp != -1:
            if not lowest <= timestamp <= highest:
                out.append((index, f"Timestamp {timestamp} of message with offset {header.base_offset + index} "
                                   f"is out of range. The timestamp should be within [{lowest}, {highest}]"))
        elif log_append_batch:
            out.append((index, f"Invalid timestamp type in message {_describe(records[index])}. Producer should "
                               f"not set timestamp type to LogAppendTime."))
    return out


def _describe(record) -> str:
    """A record as Kafka's ``DefaultRecord.toString`` shows it."""
    return (f"DefaultRecord(offset={record.offset}, timestamp={record.timestamp}, "
            f"key={len(record.key or b'')} bytes, value={len(record.value or b'')} bytes)")
