"""The leader's record validator: what it accepts every consumer can parse, and what
it refuses names the problem."""

from __future__ import annotations

import os
import random
import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.core.errors import CorruptRecordError, ErrorCode, InvalidRecordError, KafkaError, RecordValidationError
from tidelog.records.batch import SimpleRecord, TimestampType, build_batch, iter_records, read_header
from tidelog.records.compression import Compression
from tidelog.records.validator import accept_records, accept_records_vectorized, validate_records, walk_records

NOW = 1_800_000_000_000
HOUR = 3_600_000


def check(batch: bytes, now_ms: int = NOW, before: int = (1 << 63) - 1, after: int = HOUR,
          create_time: bool = True, compacted: bool = False) -> None:
    validate_records(batch, 0, read_header(batch), now_ms, before, after, check_timestamps=create_time,
                     compacted=compacted, topic_partition="t-0")


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def damage(body: bytearray, rng: random.Random, flips: int) -> None:
    """``flips`` bytes changed, inserted or dropped at random."""
    for _ in range(flips):
        at, change = rng.randrange(len(body)), rng.randrange(3)
        if change == 0:
            body[at] = rng.randrange(256)
        elif change == 1:
            body.insert(at, rng.randrange(256))
        elif len(body) > 1:
            del body[at]


@pytest.mark.parametrize("codec", list(Compression))
def test_well_formed_batches_of_every_codec_pass(codec):
    records = [SimpleRecord(b"v" * i, None if i % 3 else b"k%d" % i, headers=(("h", b"1"), ("n", None)))
               for i in range(50)]
    check(build_batch(records, compression=codec, timestamp_ms=NOW))


def test_unknown_codec_garbage_and_bad_offsets_are_refused():
    codec7 = bytearray(build_batch([b"x"], timestamp_ms=NOW))
    struct.pack_into(">h", codec7, 21, 7)
    with pytest.raises(CorruptRecordError, match="compression codec 7"):
        check(recrc(codec7))
    offsets = bytearray(build_batch([b"a", b"b"], timestamp_ms=NOW))
    offsets[61 + 3] = 2 * 5
    with pytest.raises(InvalidRecordError, match="offset delta 5") as refused:
        check(recrc(offsets))
    assert [index for index, _ in refused.value.record_errors] == [0]          # the first record
    short = build_batch([b"a", b"b"], timestamp_ms=NOW)
    with pytest.raises(CorruptRecordError, match="declares 3 records"):
        walk_records(memoryview(short)[61:], 3)


def test_timestamps_outside_the_configured_bounds_are_refused_record_by_record():
    """Kafka's LogValidator: INVALID_TIMESTAMP naming each record out of
    [now - before.max.ms, now + after.max.ms]; a record without a timestamp (-1) passes."""
    with pytest.raises(RecordValidationError) as refused:
        check(build_batch([b"x"], timestamp_ms=NOW + 2 * HOUR))
    assert refused.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert str(refused.value) == "One or more records have been rejected due to invalid timestamp"
    assert refused.value.record_errors == [(0, f"Timestamp {NOW + 2 * HOUR} of message with offset 0 is out of "
                                               f"range. The timestamp should be within [{NOW - (1 << 63) + 1}, {NOW + HOUR}]")]
    check(build_batch([b"x"], timestamp_ms=NOW + HOUR // 2))
    with pytest.raises(RecordValidationError, match="invalid timestamp"):
        check(build_batch([b"x"], timestamp_ms=NOW - 10 * HOUR), before=HOUR)
    check(build_batch([b"x"], timestamp_ms=-1), before=HOUR)
    # Only the records out of range are named, by their index in the batch.
    records = [SimpleRecord(b"v%d" % i, timestamp_ms=NOW - (10 * HOUR if i % 4 == 1 else 0)) for i in range(9)]
    with pytest.raises(RecordValidationError) as refused:
        check(build_batch(records, timestamp_ms=NOW), before=HOUR)
    assert [index for index, _ in refused.value.record_errors] == [1, 5]
    # A LogAppendTime topic checks no CreateTime bounds.
    check(build_batch([b"x"], timestamp_ms=NOW - 10 * HOUR), before=HOUR, create_time=False)


def test_a_client_batch_marked_log_append_time_is_an_invalid_timestamp():
    batch = build_batch([b"a", b"b"], timestamp_ms=-1, timestamp_type=TimestampType.LOG_APPEND_TIME)
    for create_time in (True, False):
        with pytest.raises(RecordValidationError) as refused:
            check(batch, create_time=create_time)
        assert refused.value.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [index for index, _ in refused.value.record_errors] == [0, 1]
        assert "Producer should not set timestamp type to LogAppendTime." in refused.value.record_errors[0][1]


@pytest.mark.parametrize("codec", list(Compression))
def test_a_compacted_topic_refuses_exactly_the_records_without_a_key(codec):
    records = [SimpleRecord(b"v%d" % i, None if i % 10 == 3 else b"k%d" % i) for i in range(100)]
    batch = build_batch(records, compression=codec, timestamp_ms=NOW)
    check(batch)                                       # any key will do elsewhere
    with pytest.raises(RecordValidationError) as refused:
        check(batch, compacted=True)
    error = refused.value
    assert error.error_code == ErrorCode.INVALID_RECORD
    message = "Compacted topic cannot accept message without key in topic partition t-0."
    assert error.record_errors == [(i, message) for i in range(3, 100, 10)]
    assert str(error) == ("One or more records have been rejected due to 10 record errors in total, and only "
                          "showing the first three errors at most: [" + ", ".join(
                              f"RecordError(batchIndex={i}, message='{message}')" for i in (3, 13, 23)) + "]")
    # A record refused for its key is not named again for its timestamp, and the batch's
    # code is INVALID_TIMESTAMP as soon as one record's timestamp is refused.
    records[3] = SimpleRecord(b"late", None, timestamp_ms=NOW + 2 * HOUR)
    records[4] = SimpleRecord(b"late", b"k", timestamp_ms=NOW + 2 * HOUR)
    with pytest.raises(RecordValidationError) as refused:
        check(build_batch(records, compression=codec, timestamp_ms=NOW), compacted=True)
    assert refused.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert dict(refused.value.record_errors)[3] == message
    assert dict(refused.value.record_errors)[4].startswith(f"Timestamp {NOW + 2 * HOUR} of message with offset 4")
    assert len(refused.value.record_errors) == 11


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=20))
def test_whatever_is_accepted_decodes_whole(seed, flips):
    """Random byte changes in the records (CRC recomputed): either refused, or every
    record decodes and there are exactly as many as the batch declares."""
    rng = random.Random(seed)
    records = [SimpleRecord(os.urandom(rng.randrange(0, 30)), rng.choice([None, b"key"]),
                            headers=tuple(("h%d" % j, rng.choice([None, b"x"])) for j in range(rng.randrange(3))))
               for _ in range(rng.randrange(1, 6))]
    batch = bytearray(build_batch(records, timestamp_ms=NOW))
    for _ in range(flips):
        batch[rng.randrange(61, len(batch))] = rng.randrange(256)
    batch = recrc(batch)
    try:
        check(batch)
    except KafkaError:
        return
    decoded = list(iter_records(batch))
    assert len(decoded) == read_header(batch).record_count


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=0, max_value=4), st.booleans())
def test_the_fast_walk_accepts_exactly_what_the_exact_walk_accepts(seed, flips, keys_required):
    """accept_records (the produce path's walk) answers (low, high) exactly when
    walk_records finds nothing wrong and refuses no record, with the same timestamp
    range: varints of one, two and three bytes (records past 63 and 8191 bytes, offset
    deltas past 63, timestamp deltas either way), null keys and values, headers, and
    bytes changed, inserted and dropped at random. accept_records_vectorized never
    answers otherwise, and answers too for an undamaged batch without headers or
    varints of three bytes."""
    rng = random.Random(seed)
    sizes = [0, 1, 30, 100, 1024, 9000]
    count = rng.choice([1, 3, 70, 140])
    records = [SimpleRecord(None if rng.random() < 0.05 else os.urandom(rng.choice(sizes)),
                            rng.choice([None, b"k", b"key-%d" % i]) if rng.random() < 0.3 else b"key",
                            headers=tuple(("h%d" % j, rng.choice([None, b"x" * rng.choice([0, 70])]))
                                          for j in range(rng.choice([0, 0, 1, 2]))),
                            timestamp_ms=NOW + rng.choice([0, 1, -1, 5_000, -70_000_000, 2**40]))
               for i in range(count)]
    body = bytearray(build_batch(records, timestamp_ms=NOW)[61:])
    damage(body, rng, flips)
    for candidate in (body, body + b"\x00"):       # and with a trailing byte
        try:
            low, high, refused = walk_records(bytes(candidate), count, keys_required)
            exact = None if refused else (low, high)
        except CorruptRecordError:
            exact = None
        assert accept_records(memoryview(candidate), count, keys_required) == exact
        vectorized = accept_records_vectorized(memoryview(candidate), count, keys_required)
        assert vectorized in (None, exact)
        base_timestamp = records[0].timestamp_ms
        if flips == 0 and candidate is body and not any(r.headers for r in records) \
                and max(len(r.value or b"") for r in records) < 8000 \
                and max(abs(r.timestamp_ms - base_timestamp) for r in records) < 8000:   # else: the scalar walk's
            assert vectorized == exact


@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=0, max_value=3), st.booleans())
def test_the_fast_walk_of_same_sized_records_accepts_exactly_what_the_exact_walk_accepts(seed, flips,
                                                                                        keys_required):
    """A producer's batch: values of one size, one key (or none), timestamps close
    together — the batches whose record starts the fast walk guesses instead of walking
    to them (one byte longer from the 65th record on). With bytes changed, inserted and
    dropped at random (a length among them, or none), it answers only what the exact
    walk answers; undamaged, it answers. A batch whose sizes differ is walked."""
    from tidelog.records import validator
    rng = random.Random(seed)
    count, size = rng.choice([64, 65, 100, 300, 900]), rng.choice([0, 20, 57, 58, 63, 64, 100, 1024, 8100, 9000])
    key = rng.choice([None, b"k", b"key"])
    # One record a byte longer (the guess cannot fill the body), or one longer and a later
    # one shorter (it fills it, and is wrong): either way the starts are walked to.
    shape = rng.choice(["same", "same", "same", "one longer", "longer and shorter"])
    longer, shorter = sorted(rng.sample(range(count), 2))
    grow = {"same": {}, "one longer": {longer: 1}, "longer and shorter": {longer: 1, shorter: -1}}[shape]
    records = [SimpleRecord(os.urandom(size + grow.get(i, 0) if size else 0), key,
                            timestamp_ms=NOW + rng.choice([0, 1, 5])) for i in range(count)]
    body = bytearray(build_batch(records, timestamp_ms=NOW)[61:])
    damage(body, rng, flips)
    try:
        low, high, refused = walk_records(bytes(body), count, keys_required)
        exact = None if refused else (low, high)
    except CorruptRecordError:
        exact = None
    vectorized = accept_records_vectorized(memoryview(body), count, keys_required)
    assert vectorized in (None, exact)
    if flips == 0:
        import numpy
        guessed = validator._guessed_starts(numpy, body, count)
        if shape == "same":                 # the guess is made for a producer's batch
            assert (guessed is None) == (size >= 9000)
        if size < 9000:
            assert vectorized == exact


def test_the_fast_walk_takes_varints_of_every_length():
    """Records long enough for a three-byte length, 200 records (two-byte offset
    deltas), a timestamp delta of nine bytes and 70 headers: accepted with the
    right range; a varint of eleven bytes is refused by both walks."""
    records = [SimpleRecord(b"v" * (10_000 if i == 5 else 10), b"k", timestamp_ms=NOW + (2**60 if i == 7 else -i),
                            headers=tuple(("h", b"x") for _ in range(70 if i == 9 else 0))) for i in range(200)]
    body = build_batch(records, timestamp_ms=NOW)[61:]
    assert accept_records(body, 200) == walk_records(body, 200)[:2] == (-199, 2**60)
    eleven = b"\xff" * 10 + b"\x01"
    assert accept_records(eleven, 1) is None
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        walk_records(eleven, 1)


@pytest.mark.parametrize("headers", [(), (("h", b"x"),)])
@pytest.mark.parametrize("extra", [b"\x00", b"\x00\x00\x00"])
def test_a_record_longer_than_its_fields_is_refused_by_both_walks(headers, extra):
    """The second record's length covers bytes its fields do not explain."""
    first, second = (build_batch([SimpleRecord(b"v" * 20, b"k", headers=headers)], timestamp_ms=NOW)[61:]
                     for _ in range(2))
    assert second[0] < 0x80                       # a one-byte length varint: 2 * length
    second = bytes([second[0] + 2 * len(extra)]) + second[1:] + extra
    second = second[:3] + b"\x02" + second[4:]    # offset delta 1 (after attributes, timestamp delta)
    body = first + second
    assert accept_records(body, 2) is None
    assert accept_records_vectorized(body, 2) is None
    assert accept_records_vectorized(first + first, 2) is None               # offset deltas 0, 0
    with pytest.raises(CorruptRecordError, match="record 1 is"):
        walk_records(body, 2)


def test_more_headers_than_a_reader_takes_are_refused_by_both_walks():
    """iter_records (the broker's own reader: compaction, coordinators, tools) takes at
    most RECORD_HEADER_COUNT_MAX headers a record: the leader refuses what it could not
    read back, and takes exactly that many."""
    from tidelog.core.limits import RECORD_HEADER_COUNT_MAX
    for count, accepted in ((RECORD_HEADER_COUNT_MAX, True), (RECORD_HEADER_COUNT_MAX + 1, False)):
        body = build_batch([SimpleRecord(b"v", b"k", headers=tuple(("", b"") for _ in range(count)))],
                           timestamp_ms=NOW)[61:]
        assert (accept_records(body, 1) is not None) == accepted
        if accepted:
            walk_records(body, 1)
            assert len(next(iter_records(build_batch([SimpleRecord(b"v", b"k", headers=tuple(
                ("", b"") for _ in range(count)))], timestamp_ms=NOW))).headers) == count
        else:
            with pytest.raises(CorruptRecordError, match="headers"):
                walk_records(body, 1)
