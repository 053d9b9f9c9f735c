"""Appending to and reading from a Log, as the replication layer will."""

from __future__ import annotations

import os

import pytest

from tidelog.core.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import build_batch, iter_batches, read_header, validate_batch
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFile
from tidelog.storage.log import Log

from .conftest import T0_MS, batch, check_log_consistency, read_all, records_of


def open_log(log_dir, config, clock, fs, **kwargs) -> Log:
    return Log.open(log_dir, config, clock, fs, **kwargs)


def test_a_new_log_is_empty(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 0, 0)
    assert log.topic_partition == TopicPartition("orders", 0)
    assert log.latest_epoch is None and log.size_bytes == 0
    assert os.listdir(log_dir) == ["00000000000000000000.log"]
    empty = log.read(0, 1000)
    assert empty.records.read_bytes() == b"" and len(empty.records) == 0


def test_append_as_leader_assigns_offsets_and_stamps_the_epoch(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    first = log.append_as_leader(batch("a", "b", "c"), leader_epoch=5)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert first.log_append_time == -1 and first.max_timestamp == T0_MS
    second = log.append_as_leader(batch("d", "e"), leader_epoch=5)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5 and log.latest_epoch == 5
    data = log.read(0, 10_000).records.read_bytes()
    headers = [h for _, h in iter_batches(data)]
    assert [h.base_offset for h in headers] == [0, 3]
    assert {h.partition_leader_epoch for h in headers} == {5}
    for position, _ in iter_batches(data):
        validate_batch(data, position)  # offsets and epoch sit outside the CRC
    assert records_of(data) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]


def test_one_append_may_carry_several_batches_written_with_one_write(log_dir, small_config, clock, fs,
                                                                    monkeypatch):
    log = open_log(log_dir, small_config, clock, fs)
    buffer = batch("a") + batch("b", "c") + batch("d")
    writes = []
    original = CrashableFile.append
    monkeypatch.setattr(CrashableFile, "append",
                        lambda self, data, behind=True: (writes.append((self.path, len(data)))
                                                         or original(self, data, behind)))
    info = log.append_as_leader(buffer, leader_epoch=0)
    assert [size for path, size in writes if path.endswith(".log")] == [len(buffer)]
    assert (info.first_offset, info.last_offset, info.batch_count, info.valid_bytes) == (0, 3, 3, len(buffer))
    assert read_all(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_log_append_time_stamps_the_clock_time(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(message_timestamp_type="LogAppendTime"), clock, fs)
    clock.advance(5000)
    info = log.append_as_leader(batch("a", timestamp_ms=1), leader_epoch=0)
    assert info.log_append_time == T0_MS + 5000 == info.max_timestamp
    data = log.read(0, 1000).records.read_bytes()
    validate_batch(data, 0)  # CRC recomputed
    assert read_header(data).max_timestamp == T0_MS + 5000


def test_invalid_appends_write_nothing(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    good, damaged = batch("ok"), bytearray(batch("bad"))
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + bytes(damaged), leader_epoch=0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(good + b"\x00" * 10, leader_epoch=0)  # trailing bytes
    assert log.log_end_offset == 1 and log.size_bytes == len(batch("a"))
    assert log.leader_epoch_cache.entries == [(0, 0)]


def test_batches_above_max_message_bytes_are_rejected(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(max_message_bytes=100), clock, fs)
    with pytest.raises(RecordTooLargeError) as info:
        log.append_as_leader(batch(b"x" * 200), leader_epoch=0)
    assert info.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    log.append_as_leader(batch(b"x"), leader_epoch=0)


def test_an_append_larger_than_a_segment_is_rejected(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(segment_bytes=200), clock, fs)
    with pytest.raises(RecordTooLargeError) as info:
        log.append_as_leader(batch("a") * 1 + batch(b"y" * 150), leader_epoch=0)
    assert info.value.error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0 and log.latest_epoch is None


def test_a_follower_appends_what_the_leader_holds_even_above_segment_bytes(log_dir, clock, fs):
    """A leader's cleaned segment can be larger than segment.bytes (tombstone batches
    marked with a delete horizon grow); a follower fetching it whole must append it, not
    stop replicating (simulator seed 1581 --compact: the follower stayed out of the ISR)."""
    log = open_log(log_dir, LogConfig(segment_bytes=200), clock, fs)
    log.append_as_follower(batch("a", base_offset=0, epoch=0))
    fetched = batch(b"x" * 90, base_offset=1, epoch=0) + batch(b"y" * 90, base_offset=5, epoch=0)
    assert len(fetched) > 200
    info = log.append_as_follower(fetched)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (1, 5, 6)
    assert [s.base_offset for s in log.segments] == [0, 1]     # rolled first, where the data ended
    assert log.read(1, 10_000).records.read_bytes() == fetched
    check_log_consistency(log)


def test_an_empty_append_is_a_no_op(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    info = log.append_as_leader(b"", leader_epoch=0)
    assert info.record_count == 0 and log.log_end_offset == 0 and log.latest_epoch is None


def test_round_trip_across_many_segment_rolls(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    expected = []
    for i in range(300):
        values = [f"r{i}-{j}".encode() * (1 + i % 5) for j in range(1 + i % 3)]
        info = log.append_as_leader(build_batch(values, timestamp_ms=T0_MS + i), leader_epoch=i // 100)
        expected += list(zip(range(info.first_offset, info.last_offset + 1), values))
    assert len(log.segments) > 30
    names = sorted(os.listdir(log_dir))
    assert "00000000000000000000.log" in names and "leader-epoch-checkpoint" in names
    assert all(s.size_bytes <= small_config.segment_bytes for s in log.segments)
    for max_bytes in (1, 100, 333, 1000, 5000):
        assert read_all(log, max_bytes=max_bytes) == expected
    check_log_consistency(log)
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0, 1, 2]


def test_every_offset_reads_from_the_batch_that_holds_it(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    for i in range(60):
        log.append_as_leader(batch(*[f"{i}.{j}" for j in range(i % 4 + 1)]), leader_epoch=0)
    for offset in range(log.log_end_offset):
        fetched = log.read(offset, 1, min_one_batch=True)
        header = read_header(fetched.records.read_bytes())
        assert header.base_offset <= offset <= header.last_offset
        metadata = fetched.fetch_offset_metadata
        assert metadata.message_offset == offset
        segment = next(s for s in log.segments if s.base_offset == metadata.segment_base_offset)
        stored = segment.log.pread(8, metadata.relative_position_in_segment)
        assert stored == header.base_offset.to_bytes(8, "big")


def test_read_honours_max_bytes_with_whole_batches(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(index_interval_bytes=50), clock, fs)
    sizes = []
    for i in range(20):
        data = batch(f"value-{i}" * (i + 1))
        sizes.append(len(data))
        log.append_as_leader(data, leader_epoch=0)
    for start in (0, 7):
        for max_bytes in range(sizes[start], sum(sizes) + 10, 7):
            got = log.read(start, max_bytes).records
            fitting, total = 0, 0
            for size in sizes[start:]:
                if total + size > max_bytes:
                    break
                total, fitting = total + size, fitting + 1
            assert len(got) == total, max_bytes
            bases = [h.base_offset for _, h in iter_batches(got.read_bytes())]
            assert bases == list(range(start, start + fitting))


def test_min_one_batch_returns_a_batch_larger_than_max_bytes(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    log.append_as_leader(batch(b"x" * 500), leader_epoch=0)
    log.append_as_leader(batch("y"), leader_epoch=0)
    assert len(log.read(0, 10, min_one_batch=True).records) == len(batch(b"x" * 500))
    assert len(log.read(0, 10, min_one_batch=False).records) == 0
    assert len(log.read(0, 0, min_one_batch=True).records) == len(batch(b"x" * 500))


def test_read_never_returns_a_batch_reaching_max_offset(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    for _ in range(10):
        log.append_as_leader(batch("a", "b"), leader_epoch=0)  # offsets 2k, 2k+1
    for max_offset in range(0, 21):
        for fetch_offset in range(0, 20):
            got = records_of(log.read(fetch_offset, 10_000, max_offset=max_offset).records.read_bytes())
            assert all(offset < max_offset for offset, _ in got)
            whole_batches_below = (max_offset // 2) * 2
            assert [o for o, _ in got] == list(range(fetch_offset - fetch_offset % 2, whole_batches_below))
    # min_one_batch does not override the isolation bound
    assert len(log.read(4, 10, max_offset=5, min_one_batch=True).records) == 0


def test_read_out_of_range(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    for _ in range(5):
        log.append_as_leader(batch("a"), leader_epoch=0)
    assert len(log.read(5, 100).records) == 0  # exactly at the log end: empty
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(6, 100)
    assert info.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.update_high_watermark(5)
    log.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert records_of(log.read(3, 100).records.read_bytes())[0][0] == 3


def test_file_slice_exposes_a_descriptor_for_sendfile(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    log.append_as_leader(batch("abc"), leader_epoch=0)
    records = log.read(0, 1000).records
    assert os.pread(records.fileno(), records.length, records.position) == records.read_bytes()


def test_append_as_follower_keeps_the_leaders_offsets_and_epochs(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    data = batch("a", "b", base_offset=0, epoch=3) + batch("c", base_offset=2, epoch=4)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 2, 3)
    assert log.read(0, 1000).records.read_bytes() == data  # byte for byte
    assert log.leader_epoch_cache.entries == [(3, 0), (4, 2)]
    # A gap forward is allowed (the leader's log may be compacted); going back is not.
    log.append_as_follower(batch("d", base_offset=10, epoch=4))
    assert log.log_end_offset == 11
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(batch("e", base_offset=10, epoch=4))
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(batch("f", base_offset=11, epoch=4) + batch("g", base_offset=11, epoch=4))
    assert log.log_end_offset == 11
    check_log_consistency(log)


def test_follower_appends_roll_segments_at_the_batch_offset(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    offset = 0
    for i in range(40):
        log.append_as_follower(batch(b"v" * 60, base_offset=offset, epoch=1))
        offset += 1
    assert len(log.segments) > 2
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    check_log_consistency(log)


def test_segments_roll_when_the_index_is_full(log_dir, clock, fs):
    config = LogConfig(index_interval_bytes=0, segment_index_bytes=24)  # 3 offset entries, 1 time entry
    log = open_log(log_dir, config, clock, fs)
    for i in range(30):
        log.append_as_leader(batch(f"{i}", timestamp_ms=T0_MS + i), leader_epoch=0)
    assert len(log.segments) > 5
    check_log_consistency(log)


def test_segments_roll_by_age(log_dir, clock, fs):
    config = LogConfig(segment_ms=1000)
    log = open_log(log_dir, config, clock, fs)
    log.append_as_leader(batch("a", timestamp_ms=-1), leader_epoch=0)  # no record time: wall clock
    clock.advance(999)
    log.append_as_leader(batch("b", timestamp_ms=-1), leader_epoch=0)
    assert len(log.segments) == 1
    clock.advance(2)
    log.append_as_leader(batch("c", timestamp_ms=-1), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segment_age_is_measured_in_record_time_when_the_first_batch_has_one(tmp_path, clock, fs):
    log = open_log(str(tmp_path / "t-1"), LogConfig(segment_ms=1000), clock, fs)
    log.append_as_leader(batch("d", timestamp_ms=T0_MS), leader_epoch=0)
    log.append_as_leader(batch("e", timestamp_ms=T0_MS + 1000), leader_epoch=0)
    assert len(log.segments) == 1
    log.append_as_leader(batch("f", timestamp_ms=T0_MS + 1001), leader_epoch=0)  # wall clock never moved
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_a_roll_fsyncs_the_old_segment_and_moves_the_recovery_point(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    while len(log.segments) < 3:
        log.append_as_leader(batch(b"z" * 100), leader_epoch=0)
    assert log.recovery_point == log.segments[-1].base_offset
    for segment in log.segments[:-1]:
        assert fs.unsynced_bytes(segment.log.path) == 0


def test_flush_messages_flushes_after_that_many_messages(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(flush_messages=3), clock, fs)
    log.append_as_leader(batch("a", "b"), leader_epoch=0)
    assert log.recovery_point == 0
    log.append_as_leader(batch("c"), leader_epoch=0)
    assert log.recovery_point == 3 and fs.unsynced_bytes(log.active_segment.log.path) == 0


def test_flush_ms_flushes_on_the_first_append_after_the_interval(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(flush_ms=100), clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    assert log.recovery_point == 0
    clock.advance(100)
    log.append_as_leader(batch("b"), leader_epoch=0)
    assert log.recovery_point == 2


def test_explicit_flush_moves_the_recovery_point(log_dir, small_config, clock, fs):
    log = open_log(log_dir, small_config, clock, fs)
    for _ in range(4):
        log.append_as_leader(batch("a"), leader_epoch=0)
    log.flush(up_to_offset=2)
    assert log.recovery_point == 2
    log.flush()
    assert log.recovery_point == 4 and fs.unsynced_bytes(log.active_segment.log.path) == 0


def test_maybe_flush_honours_flush_ms_on_an_idle_log(log_dir, clock, fs):
    log = open_log(log_dir, LogConfig(flush_ms=100), clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    assert not log.maybe_flush()
    clock.advance(100)
    assert log.maybe_flush() and log.recovery_point == 1
    clock.advance(100)
    assert not log.maybe_flush()  # nothing new to flush
