"""Crash recovery: torn writes at every byte, lost unsynced tails, corruption detected and never served."""

from __future__ import annotations

import logging
import os

import pytest

from tidelog.core.errors import OffsetOutOfRangeError
from tidelog.records import SimpleRecord
from tidelog.records.batch import build_batch
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.errors import CorruptSegmentError
from tidelog.storage.log import Log
from tidelog.storage.segment import LogSegment

from .conftest import T0_MS, batch, check_log_consistency, read_all

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=100)


def fresh(root, name: str) -> tuple[CrashableFileSystem, str]:
    path = os.path.join(str(root), name)
    os.makedirs(path)
    return CrashableFileSystem(path), os.path.join(path, "orders-0")


def values(log: Log) -> list[tuple[int, bytes]]:
    return read_all(log)


def test_a_tear_at_every_byte_of_the_last_batch_keeps_exactly_the_whole_batches(tmp_path, clock):
    earlier = [batch(f"early-{i}", "x") for i in range(3)]
    last = build_batch([b"last-1", b"last-2", b"last-3"], timestamp_ms=T0_MS)
    expected_before = [(2 * i + j, v) for i in range(3) for j, v in enumerate([f"early-{i}".encode(), b"x"])]
    for keep in range(len(last) + 1):
        fs, log_dir = fresh(tmp_path, f"keep-{keep}")
        log = Log.open(log_dir, CONFIG, clock, fs)
        for data in earlier:
            log.append_as_leader(data, leader_epoch=1)
        log.flush()
        recovery_point = log.recovery_point
        log.append_as_leader(last, leader_epoch=2)
        fs.tear_last_write(log.active_segment.log.path, keep)
        fs.crash()

        log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=recovery_point)
        if keep == len(last):
            assert values(log) == expected_before + [(6, b"last-1"), (7, b"last-2"), (8, b"last-3")]
            assert log.leader_epoch_cache.entries == [(1, 0), (2, 6)]
        else:
            assert values(log) == expected_before, keep
            assert log.log_end_offset == 6
            assert log.size_bytes == sum(len(d) for d in earlier)
            assert log.leader_epoch_cache.entries == [(1, 0)]
        check_log_consistency(log)
        assert log.append_as_leader(batch("again"), leader_epoch=3).first_offset == log.log_end_offset - 1


def test_a_tear_inside_a_multi_batch_write_keeps_the_batches_written_whole(tmp_path, clock):
    first, second = batch("one"), batch("two", "three")
    for keep in range(len(first) + len(second) + 1):
        fs, log_dir = fresh(tmp_path, f"keep-{keep}")
        log = Log.open(log_dir, CONFIG, clock, fs)
        log.append_as_leader(first + second, leader_epoch=0)
        fs.tear_last_write(log.active_segment.log.path, keep)
        fs.crash()
        log = Log.open(log_dir, CONFIG, clock, fs)
        expected = []
        if keep >= len(first):
            expected.append((0, b"one"))
        if keep == len(first) + len(second):
            expected += [(1, b"two"), (2, b"three")]
        assert values(log) == expected, keep
        check_log_consistency(log)


def test_a_tear_of_the_first_batch_of_a_new_segment(tmp_path, clock):
    big = batch(b"b" * 400)
    for keep in range(0, len(big) + 1, 3):
        fs, log_dir = fresh(tmp_path, f"keep-{keep}")
        log = Log.open(log_dir, CONFIG, clock, fs)
        for _ in range(3):
            log.append_as_leader(big, leader_epoch=0)  # the third rolls a new segment
        assert len(log.segments) == 2
        fs.tear_last_write(log.active_segment.log.path, keep)
        fs.crash()
        log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=2)
        assert log.log_end_offset == (3 if keep == len(big) else 2)
        assert [o for o, _ in values(log)] == list(range(log.log_end_offset))
        check_log_consistency(log)


def test_a_crash_drops_what_was_not_flushed(log_dir, clock, fs):
    log = Log.open(log_dir, LogConfig(), clock, fs)
    for i in range(10):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=0)
    log.flush()
    for i in range(10, 15):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=1)
    fs.crash()
    log = Log.open(log_dir, LogConfig(), clock, fs, recovery_point=10)
    assert values(log) == [(i, f"v{i}".encode()) for i in range(10)]
    assert log.leader_epoch_cache.entries == [(0, 0)]  # the epoch-1 entry pointed past the end
    check_log_consistency(log)


def test_rolled_segments_survive_a_crash_because_a_roll_fsyncs(log_dir, clock, fs):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(60):
        log.append_as_leader(batch(f"value-{i}" * 5), leader_epoch=0)
    active_base = log.active_segment.base_offset
    assert log.recovery_point == active_base > 0
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=active_base)
    assert log.log_end_offset == active_base
    assert [o for o, _ in values(log)] == list(range(active_base))
    check_log_consistency(log)


def test_a_crash_before_the_partition_directory_was_made_durable(tmp_path, clock):
    fs = CrashableFileSystem(str(tmp_path))
    log_dir = os.path.join(str(tmp_path), "orders-0")
    log = Log.open(log_dir, CONFIG, clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    log.flush()
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs)
    assert values(log) == [(0, b"a")]  # Log.open fsyncs the parent after creating it


def corrupt_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x55]))


def three_segment_log(log_dir, clock, fs) -> tuple[Log, list[int]]:
    log = Log.open(log_dir, CONFIG, clock, fs)
    i = 0
    while len(log.segments) < 4:
        log.append_as_leader(batch(f"value-{i}" * 6), leader_epoch=0)
        i += 1
    return log, [s.base_offset for s in log.segments]


def test_a_corrupt_middle_segment_is_detected_reported_and_never_served(log_dir, clock, fs, caplog):
    log, bases = three_segment_log(log_dir, clock, fs)
    end = log.log_end_offset
    middle = log.segments[1]
    batch_size = len(batch("value-0" * 6))
    corrupt_offset = bases[1] + 2
    position = 2 * batch_size + 70  # inside the payload of the batch at base + 2
    middle_path = middle.log.path
    log.close()
    corrupt_byte(middle_path, position)

    with caplog.at_level(logging.INFO):
        log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=0)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "corrupt" in errors[0].getMessage() and f"segment {bases[1]}" in errors[0].getMessage()
    assert log.log_end_offset == corrupt_offset < end
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert not any(name.startswith(f"{bases[2]:020d}") for name in os.listdir(log_dir))
    assert [o for o, _ in values(log)] == list(range(corrupt_offset))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(corrupt_offset + 1, 1000)
    check_log_consistency(log)


def test_a_corrupt_last_batch_is_cut_with_a_warning(log_dir, clock, fs, caplog):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(5):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=0)
    path, size = log.active_segment.log.path, log.active_segment.size_bytes
    log.close()
    corrupt_byte(path, size - 3)
    with caplog.at_level(logging.WARNING):
        log = Log.open(log_dir, CONFIG, clock, fs)
    assert log.log_end_offset == 4
    assert any("CRC" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_damaged_header_below_the_recovery_point_fails_reads_loudly(log_dir, clock, fs, caplog):
    log, bases = three_segment_log(log_dir, clock, fs)
    log.flush()
    recovery_point, path = log.recovery_point, log.segments[1].log.path
    log.close()
    corrupt_byte(path, 16)  # the magic byte of the segment's first batch
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=recovery_point, had_clean_shutdown=True)
    with caplog.at_level(logging.ERROR), pytest.raises(CorruptSegmentError):
        log.read(bases[1], 1000)
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert log.read(0, 100).records.read_bytes()  # the healthy segment still serves


def test_a_clean_shutdown_skips_recovery(log_dir, clock, fs, monkeypatch):
    log, bases = three_segment_log(log_dir, clock, fs)
    log.flush()
    end, expected = log.log_end_offset, values(log)
    log.close()

    def no_recovery(self, next_segment_base_offset=None):
        raise AssertionError("recovery must not run after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=end, had_clean_shutdown=True)
    assert log.log_end_offset == end and values(log) == expected
    assert log.append_as_leader(batch("more"), leader_epoch=0).first_offset == end
    check_log_consistency(log)


def test_a_clean_shutdown_claim_with_a_torn_tail_still_recovers(log_dir, clock, fs, caplog):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(4):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=0)
    path = log.active_segment.log.path
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    with caplog.at_level(logging.WARNING):
        log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=4, had_clean_shutdown=True)
    assert log.log_end_offset == 4 and any("not whole" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_missing_or_bad_index_files_are_rebuilt(log_dir, clock, fs, damage, caplog):
    log, bases = three_segment_log(log_dir, clock, fs)
    log.flush()
    end, expected = log.log_end_offset, values(log)
    log.close()
    for name in os.listdir(log_dir):
        if name.endswith((".index", ".timeindex")):
            if damage == "delete":
                os.remove(os.path.join(log_dir, name))
            else:
                with open(os.path.join(log_dir, name), "wb") as f:
                    f.write(b"\x7f" * 13)
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=end, had_clean_shutdown=True)
    assert values(log) == expected
    check_log_consistency(log)


def test_leftover_files_are_cleaned_on_open(log_dir, clock, fs):
    log = Log.open(log_dir, CONFIG, clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    log.close()
    for name in ("00000000000000000000.log.deleted", "leader-epoch-checkpoint.tmp",
                 "00000000000000000099.index", "00000000000000000099.timeindex"):
        open(os.path.join(log_dir, name), "wb").close()
    log = Log.open(log_dir, CONFIG, clock, fs)
    assert sorted(os.listdir(log_dir)) == ["00000000000000000000.index", "00000000000000000000.log",
                                           "00000000000000000000.timeindex", "00000000000000000001.snapshot",
                                           "leader-epoch-checkpoint"]
    assert values(log) == [(0, b"a")]


def test_a_log_start_offset_above_the_recovered_end_restarts_the_log_there(log_dir, clock, fs, caplog):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(10):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=0)
    log.update_high_watermark(10)
    log.maybe_increment_log_start_offset(8)
    fs.crash()  # nothing was flushed
    with caplog.at_level(logging.WARNING):
        log = Log.open(log_dir, CONFIG, clock, fs, log_start_offset=8, high_watermark=10)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (8, 8, 8)
    assert log.append_as_leader(batch("x"), leader_epoch=1).first_offset == 8


def test_a_batch_whose_offsets_go_back_is_treated_as_corruption(log_dir, clock, fs):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(3):
        log.append_as_leader(batch(f"v{i}"), leader_epoch=0)
    path = log.active_segment.log.path
    log.close()
    with open(path, "ab") as f:
        f.write(batch("stale", base_offset=1))  # valid CRC, but offset 1 again
    log = Log.open(log_dir, CONFIG, clock, fs)
    assert log.log_end_offset == 3 and [o for o, _ in values(log)] == [0, 1, 2]


def test_timestamp_lookups_after_a_crash_see_every_rolled_segments_newest_record(log_dir, clock, fs):
    log = Log.open(log_dir, CONFIG, clock, fs)
    for i in range(40):
        log.append_as_leader(batch(f"v{i}" * 8, timestamp_ms=T0_MS + i), leader_epoch=0)
    recovery_point = log.recovery_point
    assert len(log.segments) > 2
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=recovery_point)
    for offset in range(log.log_end_offset):
        assert log.fetch_offset_by_timestamp(T0_MS + offset).offset == offset


class QueuedBackground:
    """A background runner that holds the work until the test lets it run."""

    def __init__(self):
        self.queued = []

    def __call__(self, work, done):
        self.queued.append((work, done))

    def run_all(self, error: BaseException | None = None) -> None:
        queued, self.queued = self.queued, []
        for work, done in queued:
            if error is None:
                work()
            done(error)


def fill_until_roll(log: Log, start: int = 0) -> int:
    """Append until the log rolls once more; returns the new active segment's base."""
    segments, i = len(log.segments), start
    while len(log.segments) == segments:
        log.append_as_leader(batch(f"value-{i}" * 5), leader_epoch=0)
        i += 1
    return log.active_segment.base_offset


def test_a_roll_flushed_in_the_background_moves_the_recovery_point_only_once_durable(tmp_path, clock):
    fs, log_dir = fresh(tmp_path, "not-yet")
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    fill_until_roll(log)
    assert log.recovery_point == 0 and len(background.queued) == 1   # the append did not wait
    fs.crash()                                                          # before the fsync ran: lost
    assert values(Log.open(log_dir, CONFIG, clock, fs, recovery_point=0)) == []

    fs, log_dir = fresh(tmp_path, "done")
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    active_base = fill_until_roll(log)
    background.run_all()
    assert log.recovery_point == active_base > 0
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=active_base)
    assert [o for o, _ in values(log)] == list(range(active_base))
    check_log_consistency(log)


def test_a_truncation_while_the_background_flush_runs_keeps_the_recovery_point(log_dir, clock, fs):
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    active_base = fill_until_roll(log)
    log.truncate_to(active_base - 3)                  # a follower dropping what the leader never had
    background.run_all()
    assert log.recovery_point <= active_base - 3
    check_log_consistency(log)


def test_a_failed_background_flush_takes_the_log_offline(log_dir, clock, fs):
    background, reported = QueuedBackground(), []
    log = Log.open(log_dir, CONFIG, clock, fs, background=background,
                   on_io_error=lambda directory, error: reported.append(error))
    fill_until_roll(log)
    background.run_all(OSError(5, "Input/output error"))
    assert log.recovery_point == 0 and len(reported) == 1
    with pytest.raises(Exception, match="offline"):
        log.append_as_leader(batch("after"), leader_epoch=0)


def test_a_crash_before_the_background_flush_leaves_no_hole(tmp_path, clock):
    """The new segment's file must not outlive the old segment's unsynced data: a crash
    between the roll and its background fsync keeps the log contiguous (it loses the
    tail, never a middle), so a leader cannot serve offsets that skip lost ones."""
    fs, log_dir = fresh(tmp_path, "hole")
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    log.flush()                                                 # the directory entry itself is durable
    fill_until_roll(log)
    for i in range(3):
        log.append_as_leader(batch(f"after-roll-{i}"), leader_epoch=0)
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=0)
    assert [o for o, _ in values(log)] == list(range(log.log_start_offset, log.log_end_offset))
    check_log_consistency(log)


def test_a_flush_while_the_background_flush_is_pending_makes_the_new_segment_durable(tmp_path, clock):
    """flush() (flush.messages / flush.ms, shutdown) must leave the new segment's file in the
    directory too, not only its bytes."""
    fs, log_dir = fresh(tmp_path, "flushed")
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    log.flush()
    fill_until_roll(log)
    log.append_as_leader(batch("after-roll"), leader_epoch=0)
    end = log.log_end_offset
    log.flush()
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=end)
    assert log.log_end_offset == end
    assert [o for o, _ in values(log)] == list(range(end))


def test_an_earlier_rolls_flush_does_not_list_a_later_rolls_file(tmp_path, clock):
    """Two rolls in flight: the first one's flush must not make the second new file durable
    while the segment before it (the first roll's new one) still has unsynced bytes."""
    fs, log_dir = fresh(tmp_path, "two-rolls")
    background = QueuedBackground()
    log = Log.open(log_dir, CONFIG, clock, fs, background=background)
    log.flush()
    fill_until_roll(log)
    fill_until_roll(log, start=100)
    log.append_as_leader(batch("in-the-third-segment"), leader_epoch=0)
    first, _ = background.queued
    background.queued = [first]
    background.run_all()                          # only the first roll's flush is done
    fs.crash()
    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=0)
    assert [o for o, _ in values(log)] == list(range(log.log_start_offset, log.log_end_offset))
    check_log_consistency(log)


def test_a_logs_own_files_are_expected_and_loading_is_quiet(log_dir, clock, fs, caplog):
    """``quorum-state`` is the metadata partition's own Raft file: no warning for it (a
    stray file still gets one); one log's loading is a DEBUG line, not INFO."""
    log = Log.open(log_dir, CONFIG, clock, fs)
    log.append_as_leader(batch("a"), leader_epoch=0)
    log.close()
    for name in ("quorum-state", "stray.bin"):
        with open(os.path.join(log_dir, name), "w") as f:
            f.write("{}")
    with caplog.at_level(logging.DEBUG):
        Log.open(log_dir, CONFIG, clock, fs, had_clean_shutdown=True).close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"{log_dir}: ignoring unexpected file stray.bin"]
    loaded = [r for r in caplog.records if "loaded 1 segments" in r.getMessage()]
    assert loaded and all(r.levelno == logging.DEBUG for r in loaded)


COMPACTED = LogConfig(segment_bytes=1024, index_interval_bytes=100, cleanup_policy=("compact",))


def test_a_middle_segment_that_came_back_short_ends_the_log(log_dir, clock, fs, caplog):
    """Simulator seed 44352: a power cut lost the unsynced data of one segment but kept
    a later one's pages (a torn write), and recovery served a log with a hole (the
    earlier segment empty, the log's end at the later one's base). Segments are
    contiguous, in a compacted log too: one that ends short of the next one's base ends
    the log, and the later segments go (as after a corrupt batch). Only a directory an
    earlier tidelog stopped uncleanly (``gaps_between_segments``) keeps a compacted log's."""
    for name, config, gaps in (("delete", CONFIG, False), ("compact", COMPACTED, False),
                               ("legacy", COMPACTED, True)):
        directory = os.path.join(log_dir, name) + "-0"
        log, bases = three_segment_log(directory, clock, fs)   # written unkeyed; opened below as ``config``
        middle_path = log.segments[1].log.path
        log.close()
        os.truncate(middle_path, 0)                           # its data lost, the next file kept
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            log = Log.open(directory, config, clock, fs, recovery_point=0, gaps_between_segments=gaps)
        if not gaps:
            assert log.log_end_offset == bases[1], name
            assert [o for o, _ in values(log)] == list(range(bases[1]))
            assert any("ends short" in r.getMessage() for r in caplog.records)
        else:
            assert [s.base_offset for s in log.segments] == bases
        check_log_consistency(log)
        log.close()


def follower_of_a_compacted_leader(log_dir, clock, fs, segments: int = 4) -> Log:
    """A compacted log written as a follower: each batch begins 5 offsets past the end
    of the one before (the leader's cleaner removed those), across ``segments - 1`` rolls."""
    log = Log.open(log_dir, COMPACTED, clock, fs)
    offset = 0
    while len(log.segments) < segments:
        follower_append(log, offset)
        offset = log.log_end_offset + 5
    return log


def test_a_follower_of_a_compacted_leader_rolls_where_its_data_ends(log_dir, clock, fs):
    """Each new segment begins at the offset after the last batch of the one before, not
    at its own first batch (which the gap puts further on): after an unclean stop, the
    whole log comes back — no boundary taken for a hole."""
    log = follower_of_a_compacted_leader(log_dir, clock, fs)
    ends = [s.data_end for s in log.segments[:-1]]
    assert [s.base_offset for s in log.segments[1:]] == ends
    firsts = [next(s.headers(0, s.size_bytes))[1].base_offset for s in log.segments]
    assert all(base < first for base, first in zip(ends, firsts[1:]))     # each began in a gap
    before = values(log)
    end = log.log_end_offset
    log.close()
    log = Log.open(log_dir, COMPACTED, clock, fs, recovery_point=0)
    assert (values(log), log.log_end_offset) == (before, end)
    check_log_consistency(log)


def test_a_compacted_followers_segment_that_lost_its_tail_ends_the_log(log_dir, clock, fs, caplog):
    """The hole compaction used to hide: a segment's last batch lost (unsynced), the next
    segment's file kept. The log ends where the damaged segment's data now ends."""
    log = follower_of_a_compacted_leader(log_dir, clock, fs)
    middle = log.segments[1]
    positions = [position for position, _ in middle.headers(0, middle.size_bytes)]
    kept = [(o, v) for o, v in values(log) if o < next(middle.headers(positions[-1], middle.size_bytes))[1].base_offset]
    path = middle.log.path
    log.close()
    os.truncate(path, positions[-1])                            # its last batch lost
    with caplog.at_level(logging.ERROR):
        log = Log.open(log_dir, COMPACTED, clock, fs, recovery_point=0)
    assert any("ends short" in r.getMessage() for r in caplog.records)
    assert values(log) == kept and len(log.segments) == 2
    check_log_consistency(log)


def follower_append(log: Log, offset: int, value: bytes = b"value" * 12) -> None:
    log.append_as_follower(build_batch([SimpleRecord(value, b"key-%d" % offset)], base_offset=offset,
                                       partition_leader_epoch=0, timestamp_ms=T0_MS))


def test_a_roll_after_a_truncation_into_a_gap_begins_where_the_data_ends(log_dir, clock, fs):
    """Truncated to an offset the cleaner removed, a log's end is that offset, above its
    data; a roll right then begins the new segment at the data's end, so the boundary
    is contiguous for recovery."""
    log = follower_of_a_compacted_leader(log_dir, clock, fs, segments=2)
    for _ in range(3):
        follower_append(log, log.log_end_offset + 5)
    active = log.active_segment
    last_base = list(active.headers(0, active.size_bytes))[-1][1].base_offset
    log.truncate_to(last_base - 2)                               # into the gap before the last batch
    data_end = active.data_end
    assert data_end < last_base - 2 == log.log_end_offset
    follower_append(log, log.log_end_offset, b"v" * 900)        # too big for the active segment: rolls
    assert len(log.segments) == 3 and log.segments[-1].base_offset == data_end
    before = values(log)
    log.close()
    log = Log.open(log_dir, COMPACTED, clock, fs, recovery_point=0)
    assert ([s.base_offset for s in log.segments], values(log)) == ([0, log.segments[1].base_offset, data_end], before)
    check_log_consistency(log)


def test_a_segment_loaded_below_the_recovery_point_and_truncated_knows_where_its_data_ends(log_dir, clock, fs):
    """A directory an earlier tidelog wrote (a follower's segment named after its first
    batch, past a gap), later stopped cleanly: its first segment is never scanned. A
    truncation into the gap deletes the later segment and cuts nothing from the first,
    which becomes the active one; the segment rolled after it must begin where its data
    ends, or the next recovery takes the boundary for a hole and drops what followed."""
    log = follower_of_a_compacted_leader(log_dir, clock, fs, segments=2)
    first_end = log.segments[0].data_end
    second = log.segments[1]
    first_batch = next(second.headers(0, second.size_bytes))[1].base_offset
    assert first_end < first_batch
    log.close()
    for suffix in (".log", ".index", ".timeindex"):             # the earlier naming: at its first batch
        old = os.path.join(log_dir, f"{first_end:020d}{suffix}")
        if os.path.exists(old):
            os.rename(old, os.path.join(log_dir, f"{first_batch:020d}{suffix}"))
    log = Log.open(log_dir, COMPACTED, clock, fs, recovery_point=first_batch, gaps_between_segments=True)
    assert [s.base_offset for s in log.segments] == [0, first_batch] and log.segments[0].data_end is None
    log.truncate_to(first_end + 2)                              # into the gap: the second segment goes
    assert len(log.segments) == 1 and log.log_end_offset == first_end + 2
    follower_append(log, first_end + 2, b"v" * 900)            # rolls at once
    assert [s.base_offset for s in log.segments] == [0, first_end]
    before = values(log)
    log.close()
    log = Log.open(log_dir, COMPACTED, clock, fs, recovery_point=0)
    assert values(log) == before
    check_log_consistency(log)
