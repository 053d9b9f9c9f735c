"""Record batch v2: encode/decode round trips, validation, in-place rewrites."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.core.errors import CorruptRecordError, ErrorCode, UnsupportedCompressionError
from tidelog.records import (
    BATCH_HEADER_SIZE_BYTES,
    Compression,
    SimpleRecord,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from tidelog.records.compression import compress, decompress

header_names = st.text(min_size=0, max_size=8)
blobs = st.one_of(st.none(), st.binary(max_size=64))
records_strategy = st.lists(
    st.builds(
        SimpleRecord,
        value=blobs,
        key=blobs,
        headers=st.lists(st.tuples(header_names, blobs), max_size=3),
        timestamp_ms=st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(records=records_strategy,
       compression=st.sampled_from(list(Compression)),
       base_offset=st.integers(min_value=0, max_value=2**62),
       epoch=st.integers(min_value=-1, max_value=2**31 - 1))
def test_decode_of_encode_is_identity_in_every_codec(records, compression, base_offset, epoch):
    batch = build_batch(records, base_offset=base_offset, compression=compression,
                        partition_leader_epoch=epoch)
    header = validate_batch(batch)
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.record_count == len(records)
    assert header.last_offset == base_offset + len(records) - 1
    assert header.compression == compression
    assert header.max_timestamp == max(r.timestamp_ms for r in records)
    decoded = list(iter_records(batch))
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))
    for got, want in zip(decoded, records):
        assert got.key == want.key
        assert got.value == want.value
        assert list(got.headers) == list(want.headers)
        assert got.timestamp == want.timestamp_ms


def test_header_fields_and_size():
    batch = build_batch([b"a", b"bb"], base_offset=7, timestamp_ms=5)
    header = read_header(batch)
    assert header.size_bytes == len(batch)
    assert header.next_offset == 9
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert not header.is_control and not header.is_transactional
    assert header.producer_id == -1


def test_rewriting_base_offset_and_epoch_keeps_the_crc_valid():
    batch = bytearray(build_batch([b"x"] * 3))
    set_base_offset(batch, 0, 1234)
    set_partition_leader_epoch(batch, 0, 9)
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 9)
    assert [r.offset for r in iter_records(batch)] == [1234, 1235, 1236]


def test_log_append_time_rewrites_timestamps_and_crc():
    batch = bytearray(build_batch([SimpleRecord(b"x", timestamp_ms=10),
                                   SimpleRecord(b"y", timestamp_ms=20)]))
    set_log_append_time(batch, 0, 99_000)
    header = validate_batch(batch)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 99_000
    assert [r.timestamp for r in iter_records(batch)] == [99_000, 99_000]


def test_every_single_byte_flip_is_detected_or_harmless():
    """Flipping any byte in the CRC-covered region must be caught."""
    batch = build_batch([SimpleRecord(b"value-%d" % i, key=b"k") for i in range(4)])
    for position in range(17, len(batch)):  # crc field and everything it covers
        damaged = bytearray(batch)
        damaged[position] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            validate_batch(damaged)


def test_truncated_at_every_byte_raises_corrupt_record_error():
    batch = build_batch([SimpleRecord(b"v" * 30, key=b"k")] * 3, compression=Compression.LZ4)
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            validate_batch(batch[:cut])


def test_parsing_a_stream_byte_by_byte_yields_only_complete_batches():
    batches = [build_batch([b"a" * n], base_offset=n) for n in range(1, 6)]
    stream = b"".join(batches)
    for cut in range(len(stream) + 1):
        seen = list(iter_batches(stream[:cut]))
        complete = 0
        total = 0
        for b in batches:
            if total + len(b) <= cut:
                complete += 1
                total += len(b)
        assert len(seen) == complete
    # trailing garbage smaller than a header is ignored, like a partial batch
    assert len(list(iter_batches(stream + b"\x00" * 10))) == 5


def test_wrong_magic_and_bad_lengths_name_the_problem():
    batch = bytearray(build_batch([b"x"]))
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic is 1"):
        read_header(bad_magic)
    tiny = bytearray(batch)
    struct.pack_into(">i", tiny, 8, 10)
    with pytest.raises(CorruptRecordError, match="below the header size"):
        read_header(tiny)
    huge = bytearray(batch)
    struct.pack_into(">i", huge, 8, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        read_header(huge)
    assert CorruptRecordError("x").error_code == ErrorCode.CORRUPT_MESSAGE


def _with_fixed_crc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch


def test_strict_validation_checks_record_count_against_last_offset_delta():
    batch = bytearray(build_batch([b"x", b"y"]))
    struct.pack_into(">i", batch, 23, 5)  # lastOffsetDelta
    _with_fixed_crc(batch)
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta 5"):
        validate_batch(batch)
    # a follower copying a compacted batch accepts the gap
    assert validate_batch(batch, strict=False).last_offset_delta == 5


def test_record_level_damage_behind_a_valid_crc_raises_corrupt_record_error():
    batch = bytearray(build_batch([SimpleRecord(b"hello", key=b"k")]))
    batch[BATCH_HEADER_SIZE_BYTES] = 0x7F  # record length varint: now 63 bytes, runs past the batch
    _with_fixed_crc(batch)
    validate_batch(batch)  # the CRC matches; the damage is inside the record
    with pytest.raises(CorruptRecordError, match="runs past"):
        list(iter_records(batch))


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_garbage_compressed_payload_is_corrupt_not_a_crash(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00\x01\x02 definitely not compressed data \xff" * 3)


@pytest.mark.parametrize("codec", list(Compression))
def test_decompression_stops_at_the_limit(codec):
    data = b"z" * 100_000
    packed = compress(codec, data)
    assert decompress(codec, packed, limit=100_000) == data
    with pytest.raises(CorruptRecordError, match="exceed"):
        decompress(codec, packed, limit=50_000)


def test_unknown_codec_is_unsupported():
    batch = bytearray(build_batch([b"x"]))
    struct.pack_into(">h", batch, 21, 6)
    _with_fixed_crc(batch)
    with pytest.raises(UnsupportedCompressionError):
        list(iter_records(batch))


def test_raw_snappy_from_librdkafka_is_readable():
    import cramjam
    data = b"records section" * 10
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data
