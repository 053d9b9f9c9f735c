"""Helpers for storage tests: build batches, read a log back, check it against a full scan."""

from __future__ import annotations

import os

import pytest

from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.records.batch import build_batch, iter_batches, iter_records, validate_batch
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.log import Log

T0_MS = 1_700_000_000_000


def batch(*values: bytes | str, timestamp_ms: int = T0_MS, base_offset: int = 0, epoch: int = -1) -> bytes:
    """A batch of the given record values (str is encoded)."""
    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    return build_batch(encoded, base_offset=base_offset, partition_leader_epoch=epoch,
                       timestamp_ms=timestamp_ms)


def records_of(data: bytes) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record in ``data`` (whole batches)."""
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in iter_records(data, pos)]


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20,
             max_offset: int | None = None) -> list[tuple[int, bytes]]:
    """Every record from ``start`` (default: log start) up to LEO / max_offset, via Log.read."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes]] = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes, max_offset=max_offset).records.read_bytes()
        if not data:
            break
        got = [r for r in records_of(data) if r[0] >= offset]
        out += got
        offset = list(iter_batches(data))[-1][1].next_offset
    return out


def check_log_consistency(log: Log) -> None:
    """Full scan: batches valid and increasing, indexes agree with the scan, LEO right."""
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
    previous_next = None
    segments = log.segments
    for i, segment in enumerate(segments):
        segment.ensure_indexes()
        data = segment.log.pread(segment.size_bytes, 0)
        by_position, consumed = {}, 0
        for position, header in iter_batches(data):
            validate_batch(data, position, strict=False)
            assert header.base_offset >= segment.base_offset
            if previous_next is not None:
                assert header.base_offset >= previous_next, "offsets go back"
            previous_next = header.next_offset
            by_position[position] = header
            consumed = position + header.size_bytes
        assert consumed == len(data), f"segment {segment.base_offset} has {len(data) - consumed} stray bytes"
        for offset, position in segment.offset_index.items():
            assert position in by_position and by_position[position].last_offset == offset, (offset, position)
        last_offsets = {h.last_offset: h for h in by_position.values()}
        for timestamp, offset in segment.time_index.items():
            assert offset in last_offsets, f"time index entry {(timestamp, offset)} names no batch end"
            assert timestamp == max(h.max_timestamp for h in by_position.values() if h.last_offset <= offset)
        if i + 1 < len(segments) and previous_next is not None:
            assert previous_next <= segments[i + 1].base_offset
    if previous_next is not None:
        assert previous_next <= log.log_end_offset
    assert segments[-1].next_offset == log.log_end_offset


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0_MS)


@pytest.fixture
def fs(tmp_path) -> CrashableFileSystem:
    return CrashableFileSystem(str(tmp_path))


@pytest.fixture
def log_dir(tmp_path) -> str:
    return os.path.join(str(tmp_path), "orders-0")


@pytest.fixture
def small_config() -> LogConfig:
    """Segments of ~1 KiB and an index entry every ~100 bytes: many rolls, dense indexes."""
    return LogConfig(segment_bytes=1024, index_interval_bytes=100)


def code_of(call) -> ErrorCode:
    """The Kafka error code ``call()`` raises."""
    with pytest.raises(KafkaError) as e:
        call()
    return e.value.error_code


@pytest.fixture
def log(log_dir, small_config, clock, fs) -> Log:
    return Log.open(log_dir, small_config, clock, fs)
