"""Record batches -> Arrow: the vectorised decoder agrees with the reference decoder."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from tidelog.core.errors import CorruptRecordError
from tidelog.records import Compression, SimpleRecord, build_batch, iter_batches, iter_records, set_log_append_time
from tidelog.records.batch import encode_records, pack_batch
from tidelog.records.varint import decode_varint
from tidelog.spark.arrow_records import arrow_schema, decode_fetched
from tidelog.spark.source import source_schema

T0 = 1_700_000_000_000


def batch(records, base_offset, compression=Compression.NONE, **kwargs) -> bytes:
    return build_batch(records, base_offset=base_offset, compression=compression, **kwargs)


def reference(buf: bytes, start: int, end: int) -> list[dict]:
    """What decode_fetched must return, from tidelog.records' record-by-record decoder."""
    out = []
    for pos, header in iter_batches(buf):
        if header.is_control:
            continue
        for r in iter_records(buf, pos):
            if start <= r.offset < end:
                out.append({"key": r.key, "value": r.value, "offset": r.offset, "timestamp_ms": r.timestamp,
                            "timestampType": int(header.timestamp_type),
                            "headers": [{"key": k, "value": v} for k, v in r.headers] or None})
    return out


def decoded(buf: bytes, start: int, end: int, include_headers: bool = True) -> list[dict]:
    result = decode_fetched(buf, "topic", 7, start, end, include_headers=include_headers)
    if result.rows is None:
        return []
    assert result.rows.schema.equals(arrow_schema(include_headers))
    rows = result.rows.to_pylist()
    assert all(r["topic"] == "topic" and r["partition"] == 7 for r in rows)
    for r in rows:
        r["timestamp_ms"] = int(r.pop("timestamp").timestamp() * 1000)
        del r["topic"], r["partition"]
    return rows


def test_arrow_schema_is_exactly_what_spark_expects():
    for include_headers in (False, True):
        spark_side = to_arrow_schema(source_schema(include_headers), timezone="UTC")
        assert arrow_schema(include_headers).equals(spark_side)


record = st.builds(
    SimpleRecord,
    value=st.one_of(st.none(), st.binary(max_size=300)),
    key=st.one_of(st.none(), st.binary(max_size=40)),
    headers=st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
    timestamp_ms=st.integers(T0 - 10**9, T0 + 10**10))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(record, min_size=1, max_size=40), st.sampled_from(list(Compression)),
                          st.booleans()), min_size=1, max_size=5),
       st.integers(0, 60), st.integers(0, 250))
def test_any_batches_any_range_match_the_reference(batches, start, length):
    buf, base = bytearray(), 0
    for records, compression, log_append in batches:
        data = bytearray(batch(records, base, compression))
        if log_append:
            set_log_append_time(data, 0, T0 + 5)
        buf += data
        base += len(records) + 3       # gaps between batches, as after compaction
    assert decoded(bytes(buf), start, start + length) == reference(bytes(buf), start, start + length)


def test_a_million_offsets_later_and_wide_varints_still_decode():
    records = [SimpleRecord(bytes([i % 256]) * (i * 37 % 20_000), key=b"k" * (i % 3),
                            timestamp_ms=T0 + i * 1_000_000) for i in range(300)]
    buf = batch(records, 1_000_000_000_000, Compression.ZSTD)
    assert decoded(buf, 0, 1 << 62) == reference(buf, 0, 1 << 62)


def test_runs_of_same_size_records_and_varying_sizes_decode_exactly():
    """Runs of one record size take the guess-and-prove path, varying sizes the walk;
    mixtures, runs interrupted by one odd record, and sizes that step where offset
    and timestamp deltas need another varint byte all match the reference."""
    rng = random.Random(3)
    shapes = {
        "one size": [SimpleRecord(b"v" * 90, timestamp_ms=T0) for _ in range(9000)],   # offset deltas step at 64, 8192
        "timestamps step": [SimpleRecord(b"v" * 90, key=b"k", timestamp_ms=T0 + i * 3) for i in range(3000)],
        "varying": [SimpleRecord(b"v" * rng.randrange(0, 300), timestamp_ms=T0) for _ in range(2000)],
        "odd ones out": [SimpleRecord(b"v" * (90 if i % 500 else 91), timestamp_ms=T0) for i in range(3000)],
        "runs": [SimpleRecord(b"v" * (10 * (i // 700)), timestamp_ms=T0) for i in range(4000)],
        "value bytes look like lengths": [SimpleRecord(b"\x02" * (1 + (i % 3)), timestamp_ms=T0) for i in range(500)],
    }
    for name, records in shapes.items():
        for compression in (Compression.NONE, Compression.LZ4):
            buf = batch(records[:100], 0, compression) + batch(records, 100, compression)
            end = 100 + len(records)
            assert decoded(buf, 0, end) == reference(buf, 0, end), name
            assert decoded(buf, 70, end - 30) == reference(buf, 70, end - 30), name


def test_a_wrong_record_length_inside_a_run_is_corruption():
    records = [SimpleRecord(b"v" * 90, timestamp_ms=T0) for _ in range(1000)]
    good = batch(records, 0)
    starts, pos = [], 61                           # the records follow the 61-byte batch header
    while pos < len(good):
        starts.append(pos)
        length, after = decode_varint(good, pos, len(good))
        pos = after + length
    assert len(starts) == 1000
    for index in (10, 500, 999):
        damaged = bytearray(good)
        damaged[starts[index]] ^= 0x02           # one record's length, one more or less
        with pytest.raises(CorruptRecordError):
            decode_fetched(bytes(damaged), "t", 0, 0, 2000, check_crcs=False)


def test_next_offset_skips_records_before_start_and_stops_at_a_partial_batch():
    first, second = batch([b"a", b"b", b"c"], 10), batch([b"d", b"e"], 13)
    result = decode_fetched(first + second[:-5], "t", 0, 11, 100)
    assert result.rows.column("offset").to_pylist() == [11, 12]
    assert result.next_offset == 13
    assert decode_fetched(second[:30], "t", 0, 0, 100).next_offset is None
    assert decode_fetched(first, "t", 0, 13, 100).rows is None


def test_control_batches_are_skipped():
    control = batch([SimpleRecord(b"\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")], 5, is_control=True,
                    is_transactional=True)
    data = batch([b"x"], 4) + control + batch([b"y"], 6)
    result = decode_fetched(data, "t", 0, 0, 100)
    assert result.rows.column("value").to_pylist() == [b"x", b"y"]
    assert result.next_offset == 7


def test_corruption_is_reported_not_decoded():
    good = bytearray(batch([b"hello", b"world"], 0))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_fetched(bytes(bad_crc), "t", 0, 0, 10)
    random.seed(7)
    for _ in range(200):   # with CRC checks off, damage inside records is still caught
        damaged = bytearray(good)
        position = random.randrange(61, len(damaged))
        damaged[position] = random.randrange(256)
        try:
            result = decode_fetched(bytes(damaged), "t", 0, 0, 10, check_crcs=False)
        except CorruptRecordError:
            continue
        rows = result.rows.to_pylist() if result.rows is not None else []
        assert len(rows) <= 2 and all(0 <= row["offset"] <= 1 for row in rows)


def fast_path_only(monkeypatch):
    """Make the general path fail, so a decode that succeeds took the uniform runs."""
    import tidelog.spark.arrow_records as arrow_records

    def refuse(*args):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(arrow_records, "_record_starts", refuse)


def test_a_producers_same_sized_records_take_the_uniform_runs_and_match_the_reference(monkeypatch):
    """What producers send (fixed-size keys and values, null keys, LogAppendTime, offset
    deltas past 64 and 8192, timestamp deltas past 64 ms) is decoded as runs of one layout
    (no record-by-record walk), exactly as the reference decoder reads it."""
    fast_path_only(monkeypatch)
    shapes = {
        "null keys": [SimpleRecord(b"v" * 100, timestamp_ms=T0) for _ in range(9000)],
        "keys": [SimpleRecord(b"%08d" % i + b"w" * 50, key=b"k%05d" % i, timestamp_ms=T0 + i) for i in range(3000)],
        "empty values": [SimpleRecord(b"", key=b"key", timestamp_ms=T0) for _ in range(200)],
        "null values": [SimpleRecord(None, key=b"key", timestamp_ms=T0) for _ in range(200)],
    }
    for name, records in shapes.items():
        for compression, log_append in ((Compression.NONE, False), (Compression.LZ4, True)):
            buf = bytearray()
            for base in (0, 1_000_000_000):
                data = bytearray(batch(records, base, compression))
                if log_append:
                    set_log_append_time(data, 0, T0 + 5)
                buf += data
            buf = bytes(buf)
            end = 1_000_000_000 + len(records)
            for start, stop in ((0, end), (70, end - 30), (1_000_000_005, end)):
                assert decoded(buf, start, stop, include_headers=False) == \
                    [{k: v for k, v in r.items() if k != "headers"} for r in reference(buf, start, stop)], name
                assert decoded(buf, start, stop) == reference(buf, start, stop), name


def test_records_of_one_size_but_another_layout_are_not_taken_for_a_run():
    """Records as long as their neighbours can still have their fields elsewhere: a key one
    byte longer and a value one byte shorter, or a two-byte timestamp delta where the
    next record has a two-byte offset delta (offset delta 63 is one byte, 64 two). The
    uniform runs must notice and leave them to the general path."""
    shifted = [SimpleRecord(b"v" * (50 - i % 2), key=b"k" * (5 + i % 2), timestamp_ms=T0) for i in range(300)]
    widths = [SimpleRecord(b"v" * 50, timestamp_ms=T0 + (100 if i == 63 else 0)) for i in range(300)]
    for name, records in (("key and value lengths", shifted), ("delta widths", widths)):
        buf = batch(records, 0)
        assert decoded(buf, 0, 300) == reference(buf, 0, 300), name
    # As the cleaner leaves a batch: offset deltas 0-63, then 128-191 (two bytes, the second
    # 0x02). Record 63's two-byte timestamp delta makes it as long as those after it.
    kept = [(SimpleRecord(b"v" * 50), delta, 100 if delta == 63 else 0) for delta in [*range(64), *range(128, 192)]]
    compacted = pack_batch(base_offset=0, last_offset_delta=191, partition_leader_epoch=0, attributes=0,
                           base_timestamp=T0, max_timestamp=T0 + 100, producer_id=-1, producer_epoch=-1,
                           base_sequence=-1, record_count=len(kept), payload=encode_records(kept))
    assert decoded(compacted, 0, 300) == reference(compacted, 0, 300), "compacted"


def test_damage_the_uniform_runs_accept_is_read_as_the_general_path_reads_it(monkeypatch):
    """With CRC checks off, a byte changed anywhere in a producer's batch: whatever the
    uniform runs accept, the general path accepts too, with the same rows; whatever it
    refuses, the general path decides (here: refuses the same way or reads the same)."""
    import tidelog.spark.arrow_records as arrow_records
    records = [SimpleRecord(b"v" * 40, key=b"key-%d" % (i % 10), timestamp_ms=T0 + i) for i in range(200)]
    good = batch(records, 0)
    general = arrow_records._uniform_columns
    rng = random.Random(11)
    for _ in range(400):
        damaged = bytearray(good)
        damaged[rng.randrange(61, len(damaged))] = rng.randrange(256)
        outcomes = []
        for uniform in (general, lambda *args: None):
            monkeypatch.setattr(arrow_records, "_uniform_columns", uniform)
            try:
                result = decode_fetched(bytes(damaged), "t", 0, 0, 500, check_crcs=False)
                outcomes.append(result.rows.to_pylist() if result.rows is not None else [])
            except CorruptRecordError:
                outcomes.append("corrupt")
        assert outcomes[0] == outcomes[1]
