"""Removing data at both ends: truncation, log start offset, retention; timestamps lookups."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tidelog.core.errors import OffsetOutOfRangeError
from tidelog.records.batch import build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log

from .conftest import T0_MS, batch, check_log_consistency, read_all


def filled_log(log_dir, config, clock, fs, batches=40, records_per_batch=2, epoch_every=10) -> Log:
    """Batches of ``records_per_batch`` records; batch i has timestamp T0 + i*1000."""
    log = Log.open(log_dir, config, clock, fs)
    for i in range(batches):
        values = [f"{i}-{j}-".encode() * 8 for j in range(records_per_batch)]
        log.append_as_leader(build_batch(values, timestamp_ms=T0_MS + i * 1000), leader_epoch=i // epoch_every)
    return log


def offsets(log: Log) -> list[int]:
    return [offset for offset, _ in read_all(log)]


# -- truncate_to -------------------------------------------------------------------------


def test_truncate_at_a_batch_boundary_in_the_middle_of_a_segment(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    base = log.segments[2].base_offset
    assert log.truncate_to(base + 4)
    assert log.log_end_offset == base + 4 and offsets(log) == list(range(base + 4))
    assert len(log.segments) == 3
    check_log_consistency(log)


def test_truncate_inside_a_batch_removes_the_whole_batch(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    assert log.truncate_to(11)  # batch [10, 11]
    assert log.log_end_offset == 10 and offsets(log) == list(range(10))
    info = log.append_as_leader(batch("next"), leader_epoch=9)
    assert info.first_offset == 10  # contiguous
    check_log_consistency(log)


def test_truncate_at_exactly_a_segment_base_leaves_that_segment_empty(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    bases = [s.base_offset for s in log.segments]
    assert log.truncate_to(bases[3])
    assert [s.base_offset for s in log.segments] == bases[:4]
    assert log.segments[-1].size_bytes == 0 and log.log_end_offset == bases[3]
    assert sorted(f for f in os.listdir(log_dir) if f.endswith(".log")) == [f"{b:020d}.log" for b in bases[:4]]
    log.append_as_leader(batch("x"), leader_epoch=9)
    assert offsets(log)[-1] == bases[3]
    check_log_consistency(log)


def test_truncate_to_the_first_offset_empties_the_log(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    assert log.truncate_to(0)
    assert log.log_end_offset == 0 and len(log.segments) == 1 and log.size_bytes == 0
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_leader(batch("x"), leader_epoch=7).first_offset == 0
    check_log_consistency(log)


def test_truncate_at_or_beyond_the_log_end_does_nothing(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    end = log.log_end_offset
    assert not log.truncate_to(end)
    assert not log.truncate_to(end + 100)
    assert log.log_end_offset == end


def test_truncation_clamps_hw_recovery_point_and_the_epoch_cache(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)  # epochs 0..3 start at 0, 20, 40, 60
    log.update_high_watermark(70)
    log.flush()
    log.truncate_to(45)
    assert (log.high_watermark, log.recovery_point, log.log_end_offset) == (44, 44, 44)
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 20), (2, 40)]
    assert log.end_offset_for_epoch(2) == (2, 44)


def test_truncate_below_the_log_start_offset_lowers_it(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.update_high_watermark(log.log_end_offset)
    first_base = log.segments[0].base_offset
    log.maybe_increment_log_start_offset(first_base + 6)  # still inside the first segment
    log.truncate_to(first_base + 2)
    assert log.log_start_offset == log.log_end_offset == first_base + 2
    check_log_consistency(log)


def test_truncate_below_the_first_segment_restarts_the_log(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.update_high_watermark(log.log_end_offset)
    second = log.segments[1].base_offset
    log.maybe_increment_log_start_offset(second)
    assert log.segments[0].base_offset == second
    log.truncate_to(second - 3)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (second - 3, second - 3, 1)
    assert log.segments[0].base_offset == second - 3


def test_a_truncation_is_durable_even_with_a_stale_recovery_point(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.flush()
    stale_recovery_point = log.recovery_point
    log.truncate_to(31)
    log.append_as_leader(batch("after"), leader_epoch=9)  # not flushed
    fs.crash()
    reopened = Log.open(log_dir, small_config, clock, fs, recovery_point=stale_recovery_point)
    assert reopened.log_end_offset <= 31
    assert offsets(reopened) == list(range(reopened.log_end_offset))
    assert all(e.epoch <= 3 for e in reopened.leader_epoch_cache.entries)
    check_log_consistency(reopened)


def test_truncate_fully_and_start_at(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.truncate_fully_and_start_at(500)
    assert log.log_start_offset == log.high_watermark == log.log_end_offset == log.recovery_point == 500
    assert [f for f in os.listdir(log_dir) if f.endswith(".log")] == ["00000000000000000500.log"]
    assert log.leader_epoch_cache.entries == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.append_as_leader(batch("x"), leader_epoch=4).first_offset == 500
    fs.crash()
    reopened = Log.open(log_dir, small_config, clock, fs, log_start_offset=0)
    assert reopened.log_start_offset == 500  # the first segment's base wins over a stale checkpoint


# -- high watermark and log start offset ---------------------------------------------------


def test_high_watermark_is_clamped_between_log_start_and_end(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs, batches=5)
    assert log.update_high_watermark(1000) == 10
    assert log.update_high_watermark(-5) == 0
    assert log.maybe_increment_high_watermark(6)
    assert not log.maybe_increment_high_watermark(4)
    assert log.high_watermark == 6


def test_log_start_offset_never_goes_down_nor_above_the_high_watermark(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.update_high_watermark(30)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(31)
    assert log.maybe_increment_log_start_offset(25)
    assert not log.maybe_increment_log_start_offset(20)
    assert not log.maybe_increment_log_start_offset(25)
    assert log.log_start_offset == 25
    assert offsets(log)[0] == 25  # a read starts at the batch holding it, filtered here
    assert all(s.base_offset <= 25 for s in log.segments[:1])
    assert log.leader_epoch_cache.entries[0] == (1, 25)
    assert log.recovery_point >= 25


def test_log_start_offset_deletes_segments_wholly_below_it(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    log.maybe_increment_log_start_offset(bases[3])
    assert [s.base_offset for s in log.segments] == bases[3:]
    log.maybe_increment_log_start_offset(log.log_end_offset)
    assert len(log.segments) == 1  # the active segment always stays
    assert log.log_start_offset == log.log_end_offset
    assert log.read(log.log_end_offset, 100).records.length == 0


# -- retention ---------------------------------------------------------------------------


def test_retention_bytes_deletes_the_oldest_segments(log_dir, clock, fs):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, retention_bytes=3000, retention_ms=-1)
    log = filled_log(log_dir, config, clock, fs)
    log.update_high_watermark(log.log_end_offset)
    size_before = log.size_bytes
    deleted = log.delete_old_segments()
    # Kafka's rule: delete a segment only if the log stays at or above retention.bytes without it.
    assert deleted > 0 and log.size_bytes - log.segments[0].size_bytes < 3000 <= log.size_bytes
    assert log.log_start_offset == log.segments[0].base_offset
    assert size_before > log.size_bytes
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert not any(f.startswith("00000000000000000000") for f in os.listdir(log_dir))
    assert log.delete_old_segments() == 0


def test_retention_bytes_deletes_a_segment_that_leaves_the_log_exactly_at_the_limit(log_dir, clock, fs):
    # Kafka's deleteRetentionSizeBreachedSegments: a segment goes when the log without
    # it is still >= retention.bytes, so equality deletes; one byte more keeps it.
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, retention_ms=-1)
    sizes = [s.size_bytes for s in filled_log(log_dir, config, clock, fs).segments]
    for partition, extra, deleted in ((1, 0, 2), (2, 1, 1)):
        limit = sum(sizes[2:]) + extra
        log = filled_log(os.path.join(os.path.dirname(log_dir), f"orders-{partition}"),
                         dataclasses.replace(config, retention_bytes=limit), clock, fs)
        log.update_high_watermark(log.log_end_offset)
        assert log.delete_old_segments() == deleted
        assert log.size_bytes == sum(sizes[deleted:]) >= limit


def test_retention_ms_deletes_segments_whose_newest_record_is_too_old(log_dir, clock, fs):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, retention_ms=10_000)
    log = filled_log(log_dir, config, clock, fs)  # timestamps T0 .. T0 + 39s
    log.update_high_watermark(log.log_end_offset)
    clock.advance(25_000)  # now = T0 + 25s: records older than T0 + 15s are due
    log.delete_old_segments()
    assert all(s.largest_timestamp >= T0_MS + 15_000 for s in log.segments)
    first = log.segments[0]
    assert first.base_offset > 0
    check_log_consistency(log)


def test_retention_never_deletes_at_or_above_the_high_watermark(log_dir, clock, fs):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, retention_bytes=0)
    log = filled_log(log_dir, config, clock, fs)
    assert log.delete_old_segments() == 0  # HW is 0
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == log.segments[0].base_offset <= log.high_watermark


def test_retention_can_delete_the_active_segment_rolling_a_new_one(log_dir, clock, fs):
    config = LogConfig(retention_ms=1000)
    log = filled_log(log_dir, config, clock, fs, batches=3)
    end = log.log_end_offset
    log.update_high_watermark(end)
    clock.advance(10 ** 7)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [end]
    assert (log.log_start_offset, log.log_end_offset) == (end, end)
    assert log.delete_old_segments() == 0  # an empty active segment is never deleted


# -- timestamps -----------------------------------------------------------------------------


def test_fetch_offset_by_timestamp(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)  # batch i: offsets 2i, 2i+1, time T0 + i s
    assert log.fetch_offset_by_timestamp(T0_MS).offset == 0
    assert log.fetch_offset_by_timestamp(T0_MS + 17_000) == (34, T0_MS + 17_000, 1)
    assert log.fetch_offset_by_timestamp(T0_MS + 17_500).offset == 36
    assert log.fetch_offset_by_timestamp(0).offset == 0
    assert log.fetch_offset_by_timestamp(T0_MS + 40_000) is None
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (0, -1, 0)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (80, -1, 3)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (78, T0_MS + 39_000, 3)
    log.update_high_watermark(80)
    log.maybe_increment_log_start_offset(35)
    assert log.fetch_offset_by_timestamp(T0_MS).offset == 35
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 35


def test_timestamp_lookup_finds_the_first_record_at_or_after_the_time_within_a_batch(log_dir, clock, fs):
    from tidelog.records.batch import SimpleRecord
    log = Log.open(log_dir, LogConfig(index_interval_bytes=0), clock, fs)
    for i in range(10):
        records = [SimpleRecord(b"v", timestamp_ms=T0_MS + 10 * i + j) for j in range(5)]
        log.append_as_leader(build_batch(records), leader_epoch=2)
    # batch i holds offsets 5i..5i+4 stamped T0 + 10i + j
    assert log.fetch_offset_by_timestamp(T0_MS + 33) == (18, T0_MS + 33, 2)
    assert log.fetch_offset_by_timestamp(T0_MS + 35) == (20, T0_MS + 40, 2)


def test_timestamp_lookup_survives_a_clean_reopen(log_dir, small_config, clock, fs):
    log = filled_log(log_dir, small_config, clock, fs)
    log.flush()
    log.close()
    log = Log.open(log_dir, small_config, clock, fs, recovery_point=80, had_clean_shutdown=True)
    assert log.fetch_offset_by_timestamp(T0_MS + 17_000).offset == 34
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP).offset == 78
