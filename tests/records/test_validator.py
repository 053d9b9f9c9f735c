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

from tidelog.core.errors import CorruptRecordError, InvalidRecordError, KafkaError
from tidelog.records.batch import SimpleRecord, build_batch, iter_records, read_header
from tidelog.records.compression import Compression
from tidelog.records.validator import validate_records, walk_records

NOW = 1_800_000_000_000
HOUR = 3_600_000


def check(batch: bytes, now_ms: int = NOW, before: int = (1 << 63) - 1, after: int = HOUR) -> None:
    validate_records(batch, 0, read_header(batch), now_ms, before, after, check_timestamps=True)


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


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
    with pytest.raises(InvalidRecordError, match="offset delta 5"):
        check(recrc(offsets))
    short = build_batch([b"a", b"b"], timestamp_ms=NOW)
    with pytest.raises(CorruptRecordError, match="declares 3 records"):
        walk_records(memoryview(short)[61:], 3)


def test_timestamps_outside_the_configured_bounds_are_invalid_records():
    with pytest.raises(InvalidRecordError, match="after.max.ms"):
        check(build_batch([b"x"], timestamp_ms=NOW + 2 * HOUR))
    check(build_batch([b"x"], timestamp_ms=NOW + HOUR // 2))
    with pytest.raises(InvalidRecordError, match="before.max.ms"):
        check(build_batch([b"x"], timestamp_ms=NOW - 10 * HOUR), before=HOUR)


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
