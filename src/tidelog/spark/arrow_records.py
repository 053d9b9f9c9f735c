"""Kafka record batches to Arrow record batches, without a Python object per record.

Theory of operation. A Fetch response holds whole record batches (magic v2).
Decoding them record by record into Python objects costs microseconds per
record, more than Spark needs to move the rows. So the work is split:

1. Per batch (Python, cheap): skip batches outside ``[start, end)``, those of
   aborted transactions (read_committed), and control
   batches, check the CRC, decompress, and remember the batch's base offset,
   timestamps and timestamp type.
2. Where each record starts: the chain of record length varints. Records come
   in runs of one size (fixed-size keys and values; the size steps where the
   offset or timestamp delta needs another varint byte), so a run's starts are
   guessed in C++ and proved by comparing the length varint's bytes at every
   guessed start; where sizes vary, a short Python loop follows the chain (a
   few bytecodes per record; ``_record_starts``).
3. Per column (pyarrow.compute, C++): decode the varints of all records at once
   (length, timestamp delta, offset delta, key length, value length, header
   count), check that every record's fields fit inside its length, and gather
   keys and values into Arrow binary arrays straight from the decompressed
   bytes. Offsets and timestamps are base plus delta.

What producers send takes a shorter way (``_uniform_columns``): runs of records of
one layout (same-sized keys and values, the same varint widths, no headers) are
viewed as 2-D byte arrays, a record a row, so each field is a column that numpy
checks and decodes for the whole run, and keys and values are copied out as
blocks. It accepts only what it proves uniform and leaves everything else,
including everything malformed, to steps 2 and 3, so both ways accept exactly the
same bytes.

Headers are decoded in Python, only when ``includeHeaders`` asks for them.
Records are returned in offset order, exactly those with ``start <= offset < end``.
The output schema is Spark's Kafka source schema (``arrow_schema``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy
import pyarrow as pa
import pyarrow.compute as pc

from tidelog.core.errors import CorruptRecordError
from tidelog.core.limits import RECORD_HEADER_COUNT_MAX
from tidelog.records import BATCH_HEADER_SIZE_BYTES, TimestampType, iter_batches, validate_batch
from tidelog.records.batch import CONTROL_ABORT, read_control
from tidelog.records.compression import Compression, decompress
from tidelog.records.varint import decode_varint

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
_BASE_FIELDS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]
_I32, _I64, _U64 = pa.int32(), pa.int64(), pa.uint64()
_VARINT_BYTES_MAX, _VARLONG_BYTES_MAX = 5, 10
# Runs of same-size records (``_record_starts``): a guess covers up to 64Ki records (1Ki
# right after walking) and counts if it proves 32; after a failed guess 256 records,
# doubling to 8Ki while guesses keep failing, are walked in Python.
_GUESS_RECORDS_MIN, _GUESS_RECORDS_MAX, _GUESS_PROVED_MIN = 64, 65536, 32
_WALK_RECORDS_MIN, _WALK_RECORDS_MAX = 256, 8192
# The fast path (``_uniform_columns``) gives up on more runs than 4 plus one per 64 records.
_UNIFORM_RUNS_MAX, _UNIFORM_RECORDS_PER_RUN_MIN = 4, 64
_BINARY_BYTES_MAX = (1 << 31) - 1     # an Arrow binary array's int32 offsets


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema in Arrow terms (what Spark's to_arrow_schema gives)."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)


class Decoded:
    """What one Fetch response yielded: rows in range, and where to fetch next."""

    __slots__ = ("rows", "next_offset")

    def __init__(self, rows: pa.RecordBatch | None, next_offset: int | None):
        self.rows = rows                # None when no record of the response is in range
        self.next_offset = next_offset  # after the last complete batch; None if there was none


def decode_fetched(records, topic: str, partition: int, start: int, end: int,
                   include_headers: bool = False, check_crcs: bool = True,
                   aborted: list[tuple[int, int]] | None = None) -> Decoded:
    """Decode the records of a Fetch response for one partition. ``aborted`` is a
    read_committed response's aborted transactions, (producer id, first offset):
    their records are dropped up to each one's ABORT marker, as Kafka's consumer does."""
    buf = memoryview(records) if records else memoryview(b"")
    bodies: list = []
    runs: list = []
    next_offset = None
    pending = sorted(aborted or (), key=lambda a: a[1])
    aborting: set[int] = set()
    for pos, header in iter_batches(buf):
        if header.base_offset >= end:
            break
        next_offset = header.next_offset
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.is_control:
            if header.producer_id in aborting and read_control(buf, pos)[0] == CONTROL_ABORT:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        if header.next_offset <= start or header.record_count == 0:
            continue
        if check_crcs:
            validate_batch(buf, pos, strict=False)
        body = buf[pos + BATCH_HEADER_SIZE_BYTES:pos + header.size_bytes]
        if header.compression != Compression.NONE:
            body = decompress(header.compression, body)
        bodies.append(body)
        runs.append(header)
    if not runs:
        return Decoded(None, next_offset)
    rows = _uniform_columns(bodies, runs, topic, partition, include_headers)
    if rows is not None:
        return Decoded(_in_range(rows, start, end), next_offset)
    data = bodies[0] if len(bodies) == 1 else b"".join(bodies)
    buffer = pa.py_buffer(data)
    u8 = pa.Array.from_buffers(pa.uint8(), len(data), [None, buffer])
    starts = _record_starts(data, u8, bodies, runs)
    rows = _columns(data, buffer, u8, starts, runs, topic, partition, include_headers)
    return Decoded(_in_range(rows, start, end), next_offset)


# -- the fast path: runs of records of one layout, as 2-D byte arrays ----------------

class _Layout(NamedTuple):
    """Where the fields of a record lie, relative to its start: each varint's column
    and width (``size`` is the whole record, length varint included)."""

    size: int
    length_width: int
    timestamp_at: int
    timestamp_width: int
    offset_at: int
    offset_width: int
    key_at: int              # the key length varint; the key follows it
    key_width: int
    key_length: int          # -1: null
    value_at: int
    value_width: int
    value_length: int
    headers_at: int          # the header count: one byte 0 (no headers) ends the record


def _layout(body, pos: int, end: int) -> _Layout | None:
    """The layout of the record at ``pos``, or None if the fast path does not take it
    (headers, a varint wider than 5 bytes, or anything malformed: the exact path then
    decides, and says what is wrong)."""
    fields = []
    p = pos
    try:
        for index in range(6):      # length, [attributes], timestamp, offset, key, value lengths
            if index == 1:
                p += 1              # the attributes byte
                continue
            at = p
            while body[p] & 0x80:
                p += 1
            p += 1
            if p - at > _VARINT_BYTES_MAX:
                return None
            fields.append((at - pos, p - at))
            if index >= 4:
                length, _ = decode_varint(body, at, end)
                if length < -1:
                    return None
                fields[-1] += (length,)
                p += max(length, 0)
        (_, length_width), timestamp, offset, key, value = fields
        length, _ = decode_varint(body, pos, end)
        size = length_width + length
        if length < 1 or p - pos + 1 != size or pos + size > end or body[p] != 0:
            return None
    except (IndexError, CorruptRecordError):
        return None
    return _Layout(size, length_width, *timestamp, *offset, *key, *value, p - pos)


def _column_varint(rows, at: int, width: int):
    """The zig-zag varints of ``width`` bytes at column ``at`` of every row (int64), or
    None if one of them is not exactly ``width`` bytes long."""
    last = rows[:, at + width - 1]
    if last.max() >= 0x80 or width > 1 and rows[:, at:at + width - 1].min() < 0x80:
        return None
    value = last.astype(numpy.int64) << (7 * (width - 1))
    for i in range(width - 1):
        value |= (rows[:, at + i] & 0x7F).astype(numpy.int64) << (7 * i)
    return (value >> 1) ^ -(value & 1)      # 5 bytes at most: 35 bits, no sign to lose


def _run_head(rows, layout: _Layout):
    """The bytes of every row of ``rows`` up to the end of its value length varint, the
    key's bytes left out, packed into a contiguous ``(rows, 8 × words)`` array (one pass
    over them)."""
    key_end = layout.key_at + layout.key_width
    width = key_end + layout.value_width
    head = numpy.zeros((len(rows), -(-width // 8) * 8), numpy.uint8)
    head[:, :key_end] = rows[:, :key_end]
    head[:, key_end:width] = rows[:, layout.value_at:layout.value_at + layout.value_width]
    return head


def _run(data, pos: int, count: int, layout: _Layout):
    """The run of ``layout`` at ``pos``: its rows (at most ``count``) and their
    ``_run_head``, or None if a row of the same size has another layout.

    The run ends at the first row whose record length differs from the first row's
    (another size: the next run); every row before it must have the first row's key
    and value lengths too. The first 65 rows are looked at first, so the short run a
    producer's batch starts with (64 records, before offset deltas need two bytes)
    costs its own rows, not the batch's; then all the others at once."""
    rows = data[pos:pos + count * layout.size].reshape(count, layout.size)
    heads: list = []
    done, step = 0, _UNIFORM_RECORDS_PER_RUN_MIN + 1
    while done < count:
        head = _run_head(rows[done:done + step], layout)
        if not heads:
            mask = numpy.zeros(head.shape[1], numpy.uint8)   # record, key and value lengths
            mask[:layout.length_width] = mask[layout.key_at:layout.key_at + layout.key_width
                                              + layout.value_width] = 0xFF
            first = head[0].copy()
            mask_words, first_words = mask.view("<u8"), first.view("<u8")
        differ = (head.view("<u8") ^ first_words) & mask_words
        differ = numpy.bitwise_or.reduce(differ, axis=1) != 0 if differ.shape[1] > 1 else differ[:, 0] != 0
        cut = int(differ.argmax())
        if differ[cut]:             # the first row unlike the run's first
            if (head[cut, :layout.length_width] == first[:layout.length_width]).all():
                return None         # the same size, another layout
            heads.append(head[:cut])
            done += cut
            break
        heads.append(head)
        done += len(head)
        step = count
    return rows[:done], heads[0] if len(heads) == 1 else numpy.concatenate(heads)


def _batch_runs(body, record_count: int, runs_max: int) -> list | None:
    """A batch body of ``record_count`` records as at most ``runs_max`` runs of one layout each,
    ``(rows, layout, head)`` with ``rows`` a 2-D view (a record a row) and ``head`` its
    ``_run_head``; None if it is not."""
    data = numpy.frombuffer(body, numpy.uint8)
    runs: list = []
    pos, end, left = 0, len(body), record_count
    while left > 0:
        layout = _layout(body, pos, end)
        if layout is None or len(runs) >= runs_max:
            return None             # not uniform, or sizes vary record to record: the general path
        run = _run(data, pos, min(left, (end - pos) // layout.size), layout)
        if run is None or run[0][:, layout.headers_at].any():
            return None
        runs.append((run[0], layout, run[1]))
        left -= len(run[0])
        pos += len(run[0]) * layout.size
    return runs if pos == end else None


def _uniform_columns(bodies, batches, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch | None:
    """Spark's columns for records that come in runs of one layout, or None (then the
    general path decodes, and finds what is wrong if anything is).

    A producer's batch of same-sized values is a few runs of records whose fields all
    lie at the same places: record length, key and value lengths are the same bytes
    in every record, the timestamp and offset deltas have the same widths, and the
    header count is 0. Such a run is a 2-D byte array (a record a row), viewed over
    the fetched bytes without a copy; a field is a column, checked and decoded for
    every record at once, and keys and values are copied out as blocks of columns.
    A run is found where the record length's bytes change (the record there has
    another size), then proved: every row's varint widths, key and value lengths and
    header count must be those of its first row."""
    total = sum(h.record_count for h in batches)
    timestamp_delta = numpy.empty(total, numpy.int64)
    offset_delta = numpy.empty(total, numpy.int64)
    runs = []                       # (rows, layout, first record index)
    done = 0
    runs_max = _UNIFORM_RUNS_MAX + total // _UNIFORM_RECORDS_PER_RUN_MIN
    for body, header in zip(bodies, batches):
        batch_runs = _batch_runs(body, header.record_count, runs_max - len(runs))
        if batch_runs is None:
            return None
        for rows, layout, head in batch_runs:
            deltas = _column_varint(head, layout.timestamp_at, layout.timestamp_width)
            offsets = _column_varint(head, layout.offset_at, layout.offset_width)
            if deltas is None or offsets is None:
                return None
            count = len(rows)
            timestamp_delta[done:done + count] = deltas
            offset_delta[done:done + count] = offsets
            runs.append((rows, layout, done))
            done += count
    counts = [h.record_count for h in batches]
    offsets = numpy.repeat(numpy.array([h.base_offset for h in batches], numpy.int64), counts) + offset_delta
    last = numpy.repeat(numpy.array([h.last_offset for h in batches], numpy.int64), counts)
    if (offset_delta < 0).any() or (offsets > last).any():
        return None
    log_append = numpy.repeat(numpy.array([h.timestamp_type == TimestampType.LOG_APPEND_TIME for h in batches]),
                              counts)
    base = numpy.repeat(numpy.array([h.max_timestamp if h.timestamp_type == TimestampType.LOG_APPEND_TIME
                                     else h.base_timestamp for h in batches], numpy.int64), counts)
    timestamps_ms = numpy.where(log_append, base, base + timestamp_delta)
    columns = [
        _run_binary(runs, total, "key"),
        _run_binary(runs, total, "value"),
        pa.repeat(pa.scalar(topic, pa.string()), total),
        pa.repeat(pa.scalar(partition, _I32), total),
        pa.array(offsets, _I64),
        pa.array(timestamps_ms * 1000, _I64).view(pa.timestamp("us", tz="UTC")),
        pa.array(numpy.repeat(numpy.array([int(h.timestamp_type) for h in batches], numpy.int32), counts), _I32),
    ]
    if include_headers:
        columns.append(pa.nulls(total, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _run_binary(runs, total: int, field: str) -> pa.Array:
    """The key or value column of uniform runs: each run's block of columns copied
    into one buffer (null where the run's length is -1)."""
    sizes = [len(rows) * max(getattr(layout, field + "_length"), 0) for rows, layout, _ in runs]
    if sum(sizes) > _BINARY_BYTES_MAX:
        raise CorruptRecordError(f"the fetched {field}s exceed {_BINARY_BYTES_MAX} bytes")
    data = numpy.empty(sum(sizes), numpy.uint8)
    offsets = numpy.empty(total + 1, numpy.int32)
    valid = numpy.ones(total, numpy.bool_) if any(getattr(l, field + "_length") < 0 for _, l, _ in runs) else None
    at = 0
    for (rows, layout, first), size in zip(runs, sizes):
        count = len(rows)
        length = getattr(layout, field + "_length")
        start = getattr(layout, field + "_at") + getattr(layout, field + "_width")
        if length < 0:
            valid[first:first + count] = False
            offsets[first:first + count] = at
            continue
        data[at:at + size].reshape(count, length)[:] = rows[:, start:start + length]
        offsets[first:first + count] = numpy.arange(at, at + size, length, numpy.int32) if length else at
        at += size
    offsets[total] = at
    if valid is not None and not valid.any():
        return pa.nulls(total, pa.binary())
    validity = pa.array(valid).buffers()[1] if valid is not None else None
    null_count = total - int(valid.sum()) if valid is not None else 0
    return pa.Array.from_buffers(pa.binary(), total, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count)


def _record_starts(data, u8: pa.Array, bodies, runs) -> pa.Array:
    """Where each record begins in ``data`` (int64): the chain of record length varints.

    Records of a batch often come in runs of one size (fixed-size keys and values;
    the size steps only where the offset or timestamp delta needs another varint
    byte). So a run's starts are guessed in C++, as the size of the record at hand
    repeated, and proved there by decoding the length of every guessed record: the
    guess holds up to the first record of another size, which is where the next
    guess starts. Where sizes vary from record to record, guesses prove little and
    the chain is followed in Python instead (``_walk``), for longer and longer
    stretches while guessing keeps failing.
    """
    pieces: list[pa.Array] = []
    pos = 0
    last = len(data) - 1
    for body, header in zip(bodies, runs):
        body_end = pos + len(body)
        left = header.record_count
        window, walk = _GUESS_RECORDS_MAX, _WALK_RECORDS_MIN
        while left > 0:
            run = _same_size_run(data, u8, pos, body_end, min(window, left), last) \
                if left >= _GUESS_RECORDS_MIN else None
            if run is not None and len(run[0]) >= _GUESS_PROVED_MIN:
                starts, size = run
                pieces.append(starts)
                left -= len(starts)
                pos += len(starts) * size
                window, walk = _GUESS_RECORDS_MAX, _WALK_RECORDS_MIN
                continue
            count = min(walk, left)
            walked: list[int] = []
            pos = _walk(data, pos, body_end, count, walked)
            pieces.append(pa.array(walked, _I64))
            left -= count
            window, walk = _GUESS_RECORDS_MIN * 16, min(walk * 2, _WALK_RECORDS_MAX)
        if pos != body_end:
            raise CorruptRecordError(
                f"record batch at offset {header.base_offset}: its {header.record_count} records do not "
                "end where its body does")
    if not pieces:
        return pa.array([], _I64)
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def _same_size_run(data, u8: pa.Array, pos: int, body_end: int, count: int, last: int
                   ) -> tuple[pa.Array, int] | None:
    """The starts of the records from ``pos`` that have the size of the one at ``pos``
    (at most ``count``, at least one) and that size, or None if it cannot tell.

    A record has that size exactly when its length varint has the same bytes as
    the first's, so the proof is a byte comparison at every guessed start."""
    b0 = data[pos]
    if b0 < 0x80:
        width, length = 1, b0 >> 1
    elif pos + 1 < body_end and data[pos + 1] < 0x80:
        width, length = 2, ((b0 & 0x7F) | (data[pos + 1] << 7)) >> 1
    else:
        return None   # records of 8 KiB and more: few per batch, walking is cheap
    size = width + length
    if b0 & 1 or length < 1 or width == 2 and data[pos + 1] == 0:
        return None   # negative or non-canonical lengths are for _walk to reject
    count = min(count, (body_end - pos) // size)
    if count < 1:
        return None
    starts = pc.add(pc.cumulative_sum(pa.repeat(pa.scalar(size, _I64), count)), pa.scalar(pos - size, _I64))
    same = pc.equal(pc.take(u8, starts), pa.scalar(b0, pa.uint8()))
    if width == 2:
        second = pc.take(u8, pc.add(starts, pa.scalar(1, _I64)))
        same = pc.and_(same, pc.equal(second, pa.scalar(data[pos + 1], pa.uint8())))
    other = pc.index(same, False).as_py()
    # Records 0 .. other-1 have the guessed size, so starts 0 .. other are right; the
    # record at ``other`` starts the next run.
    return (starts if other < 0 else starts.slice(0, other)), size


def _walk(data, pos: int, body_end: int, count: int, starts: list[int]) -> int:
    """Follow ``count`` record lengths from ``pos`` in Python; returns the next position."""
    append = starts.append
    try:
        for _ in range(count):
            append(pos)
            b0 = data[pos]
            if b0 < 0x80:
                pos += 1 + (b0 >> 1)
            else:
                b1 = data[pos + 1]
                if b1 < 0x80:
                    pos += 2 + (((b0 & 0x7F) | (b1 << 7)) >> 1)
                else:
                    length, after = decode_varint(data, pos, body_end)
                    pos = after + max(length, 0)
    except IndexError:
        raise CorruptRecordError("record length runs past the record batch") from None
    if pos > body_end:
        raise CorruptRecordError("record length runs past the record batch")
    return pos


def _varints(u8: pa.Array, pos: pa.Array, last: int, bytes_max: int) -> tuple[pa.Array, pa.Array]:
    """Decode the zig-zag varint starting at each position: (values int64, widths int64).

    Positions past the data (only possible in a corrupt batch) read the last
    byte instead; the caller's length checks then reject the record.
    """
    pos = pc.min_element_wise(pos, pa.scalar(last, _I64))
    byte = pc.take(u8, pos)
    value = pc.cast(pc.bit_wise_and(byte, pa.scalar(0x7F, pa.uint8())), _U64)
    more = pc.greater_equal(byte, pa.scalar(0x80, pa.uint8()))
    width = None
    for i in range(1, bytes_max):
        if not pc.any(more).as_py():
            break
        byte = pc.take(u8, pc.min_element_wise(pc.add(pos, pa.scalar(i, _I64)), pa.scalar(last, _I64)))
        part = pc.shift_left(pc.cast(pc.bit_wise_and(byte, pa.scalar(0x7F, pa.uint8())), _U64),
                             pa.scalar(7 * i, _U64))
        value = pc.bit_wise_or(value, pc.if_else(more, part, pa.scalar(0, _U64)))
        step = pc.cast(more, _I64)
        width = step if width is None else pc.add(width, step)
        more = pc.and_(more, pc.greater_equal(byte, pa.scalar(0x80, pa.uint8())))
    else:
        if pc.any(more).as_py():
            raise CorruptRecordError(f"varint longer than {bytes_max} bytes")
    one = pa.scalar(1, _U64)
    signed = pc.bit_wise_xor(pc.shift_right(value, one),
                             pc.subtract(pa.scalar(0, _U64), pc.bit_wise_and(value, one)))
    widths = pc.add(width, pa.scalar(1, _I64)) if width is not None else pa.repeat(pa.scalar(1, _I64), len(pos))
    return signed.view(_I64), widths


def _per_record(values: list, counts: list[int], type_: pa.DataType) -> pa.Array:
    """Each batch's value repeated for each of its records (run-end decoded in C++)."""
    if len(values) == 1 or all(v == values[0] for v in values):
        return pa.repeat(pa.scalar(values[0], type_), sum(counts))
    run_ends, total = [], 0
    for count in counts:
        total += count
        run_ends.append(total)
    encoded = pa.RunEndEncodedArray.from_arrays(pa.array(run_ends, _I32), pa.array(values, type_))
    return pc.run_end_decode(encoded)


def _check(condition: pa.Array, message: str) -> None:
    if not pc.all(condition).as_py():
        raise CorruptRecordError(message)


def _columns(data, buffer: pa.Buffer, u8: pa.Array, start: pa.Array, runs, topic: str, partition: int,
             include_headers: bool) -> pa.RecordBatch:
    n = len(start)
    last = len(data) - 1
    zero = pa.scalar(0, _I64)

    length, w = _varints(u8, start, last, _VARINT_BYTES_MAX)
    record_end = pc.add(pc.add(start, w), length)
    pos = pc.add(pc.add(start, w), pa.scalar(1, _I64))        # skip the attributes byte
    timestamp_delta, w = _varints(u8, pos, last, _VARLONG_BYTES_MAX)
    pos = pc.add(pos, w)
    offset_delta, w = _varints(u8, pos, last, _VARINT_BYTES_MAX)
    pos = pc.add(pos, w)
    key_length, w = _varints(u8, pos, last, _VARINT_BYTES_MAX)
    key_start = pc.add(pos, w)
    pos = pc.add(key_start, pc.max_element_wise(key_length, zero))
    value_length, w = _varints(u8, pos, last, _VARINT_BYTES_MAX)
    value_start = pc.add(pos, w)
    pos = pc.add(value_start, pc.max_element_wise(value_length, zero))
    header_count, w = _varints(u8, pos, last, _VARINT_BYTES_MAX)
    headers_start = pc.add(pos, w)

    _check(pc.greater_equal(length, pa.scalar(1, _I64)), "record length below 1")
    _check(pc.and_(pc.greater_equal(key_length, pa.scalar(-1, _I64)),
                   pc.greater_equal(value_length, pa.scalar(-1, _I64))), "record key or value length below -1")
    _check(pc.and_(pc.greater_equal(header_count, zero),
                   pc.less_equal(header_count, pa.scalar(RECORD_HEADER_COUNT_MAX, _I64))),
           "record header count out of range")
    _check(pc.less_equal(headers_start, record_end), "record fields run past the record length")
    any_headers = pc.any(pc.greater(header_count, zero)).as_py()
    if not any_headers:
        _check(pc.equal(headers_start, record_end), "record has unexplained bytes")

    counts = [h.record_count for h in runs]
    offsets = pc.add(_per_record([h.base_offset for h in runs], counts, _I64), offset_delta)
    _check(pc.and_(pc.greater_equal(offset_delta, zero),
                   pc.less_equal(offsets, _per_record([h.last_offset for h in runs], counts, _I64))),
           "record offset delta outside its batch")
    log_append = [h.timestamp_type == TimestampType.LOG_APPEND_TIME for h in runs]
    if any(log_append):
        base = _per_record([h.max_timestamp if la else h.base_timestamp for h, la in zip(runs, log_append)],
                           counts, _I64)
        use_delta = _per_record([0 if la else 1 for la in log_append], counts, _I64)
        timestamps_ms = pc.add(base, pc.multiply(timestamp_delta, use_delta))
    else:
        timestamps_ms = pc.add(_per_record([h.base_timestamp for h in runs], counts, _I64), timestamp_delta)
    timestamps = pc.multiply(timestamps_ms, pa.scalar(1000, _I64)).view(pa.timestamp("us", tz="UTC"))

    columns = [
        _binary(buffer, key_start, key_length),
        _binary(buffer, value_start, value_length),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, _I32), n),
        offsets,
        timestamps,
        _per_record([int(h.timestamp_type) for h in runs], counts, _I32),
    ]
    if include_headers:
        columns.append(_headers(data, header_count, headers_start, record_end) if any_headers
                       else pa.nulls(n, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _binary(buffer: pa.Buffer, starts: pa.Array, lengths: pa.Array) -> pa.Array:
    """A binary array of ``buffer[start:start+length]`` (null where length is -1).

    Arrow binary values must be contiguous, but ours have record framing between
    them. So build a binary array over the whole buffer whose elements alternate
    value, gap, value, gap… (offsets s0, e0, s1, e1, …) and take the even ones;
    the take copies the values out in C++.
    """
    n = len(starts)
    nulls = pc.less(lengths, pa.scalar(0, _I64))
    null_count = pc.sum(pc.cast(nulls, _I64)).as_py() or 0
    if null_count == n:
        return pa.nulls(n, pa.binary())
    ends = pc.add(starts, pc.max_element_wise(lengths, pa.scalar(0, _I64)))
    index = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, _I64), 2 * n)), pa.scalar(1, _I64))
    interleave = pc.add(pc.shift_right(index, pa.scalar(1, _I64)),
                        pc.multiply(pc.bit_wise_and(index, pa.scalar(1, _I64)), pa.scalar(n, _I64)))
    bounds = pc.cast(pc.take(pa.concat_arrays([starts, ends]), interleave), _I32)
    pieces = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, bounds.buffers()[1], buffer])
    even = pc.multiply(pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, _I64), n)),
                                   pa.scalar(1, _I64)), pa.scalar(2, _I64))
    if null_count:
        even = pc.if_else(nulls, pa.scalar(None, _I64), even)
    return pc.take(pieces, even)


def _headers(data, header_count: pa.Array, headers_start: pa.Array, record_end: pa.Array) -> pa.Array:
    """The headers column (null for a record without headers), decoded in Python."""
    out: list = []
    for count, pos, end in zip(header_count.to_pylist(), headers_start.to_pylist(), record_end.to_pylist()):
        if count == 0:
            out.append(None)
            continue
        headers = []
        for _ in range(count):
            key_length, pos = decode_varint(data, pos, end)
            if key_length < 0 or pos + key_length > end:
                raise CorruptRecordError("record header key runs past the record")
            try:
                key = bytes(data[pos:pos + key_length]).decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("record header key is not UTF-8") from None
            pos += key_length
            value_length, pos = decode_varint(data, pos, end)
            if value_length < 0:
                value = None
            elif pos + value_length > end:
                raise CorruptRecordError("record header value runs past the record")
            else:
                value = bytes(data[pos:pos + value_length])
                pos += value_length
            headers.append({"key": key, "value": value})
        if pos != end:
            raise CorruptRecordError("record has unexplained bytes after its headers")
        out.append(headers)
    return pa.array(out, HEADERS_TYPE)


def _in_range(rows: pa.RecordBatch, start: int, end: int) -> pa.RecordBatch | None:
    offsets = rows.column(4)
    first = pc.sum(pc.cast(pc.less(offsets, pa.scalar(start, _I64)), _I64)).as_py() or 0
    stop = pc.sum(pc.cast(pc.less(offsets, pa.scalar(end, _I64)), _I64)).as_py() or 0
    if first == 0 and stop == rows.num_rows:
        return rows
    if stop <= first:
        return None
    return rows.slice(first, stop - first)
