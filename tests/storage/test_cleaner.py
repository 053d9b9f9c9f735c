"""Log compaction (storage/cleaner.py, docs/compaction.md): the last record of every key
survives at its offset, tombstones go after delete.retention.ms, the active segment and
everything at/above the high watermark are never touched, lags and dirty ratios
choose what is cleaned, the offset map and each step are bounded, a crash at any
moment of a pass loses nothing, and a compacted topic refuses records without a key."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.broker.topic_configs import static_log_config
from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode, InvalidConfigError, InvalidRecordError
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches, iter_records
from tidelog.records.compression import Compression
from tidelog.storage.cleaner import (
    DELETE_HORIZON_MASK,
    MAP_ENTRY_BYTES,
    CleanerConfig,
    LogCleaner,
    find_dirty_section,
    grab_filthiest_log,
    group_segments_by_size,
)
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.log import Log
from tidelog.storage.log_manager import LogManager

from .conftest import T0_MS, check_log_consistency

COMPACTED = LogConfig(segment_bytes=1024, index_interval_bytes=100, cleanup_policy=("compact",),
                      min_cleanable_dirty_ratio=0.0)
DEFAULT_CLEANER = CleanerConfig()


def new_log(fs, root, clock, config: LogConfig = COMPACTED, name: str = "compacted-0") -> Log:
    return Log.open(os.path.join(str(root), name), config, clock, fs)


def put(log: Log, key: str, value: str | None, **batch_args) -> int:
    """Append one record as leader (value None: a tombstone); returns its offset. The high
    watermark follows the log end, as it does for a single replica."""
    record = SimpleRecord(None if value is None else value.encode(), key.encode())
    offset = log.append_as_leader(build_batch([record], timestamp_ms=log.clock.now_ms(), **batch_args),
                                  leader_epoch=0).first_offset
    log.update_high_watermark(log.log_end_offset)
    return offset


def fill(log: Log, keys: int, rounds: int, prefix: str = "v") -> dict[int, tuple[str, str | None]]:
    """``rounds`` updates of ``keys`` keys; returns offset → (key, value) of every write."""
    writes = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = f"key-{k}", f"{prefix}{r}-{k}-" + "x" * 20
            writes[put(log, key, value)] = (key, value)
    return writes


def contents(log: Log) -> list[tuple[int, str, str | None]]:
    """Every record a consumer reading from the log start gets: (offset, key, value)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records.read_bytes()
        if not data:
            break
        for position, header in iter_batches(data):
            out += [(r.offset, r.key.decode(), None if r.value is None else r.value.decode())
                    for r in iter_records(data, position) if r.offset >= offset]
            offset = header.next_offset
    return out


def latest(records) -> dict[str, tuple[int, str | None]]:
    """key → (offset, value) of its last record, from (offset, key, value) triples."""
    return {key: (offset, value) for offset, key, value in sorted(records)}


def clean(log: Log, clock: ManualClock, config: CleanerConfig = DEFAULT_CLEANER) -> int:
    """Run one whole pass over ``log`` if it is eligible; returns the number of steps (0: none)."""
    cleaner = LogCleaner(on_io_error=lambda log_dir, error: pytest.fail(f"I/O error {error}"))
    steps = 0
    while True:
        cleaning = cleaner.clean_one([log], config, clock.now_ms(), clock.monotonic_ms())
        if cleaning is None:
            return steps
        steps += 1
        if cleaning.done:
            return steps


def writes_as_records(writes: dict[int, tuple[str, str | None]]) -> list[tuple[int, str, str | None]]:
    return [(offset, key, value) for offset, (key, value) in sorted(writes.items())]


# -- what stays ------------------------------------------------------------------------------


def test_cleaning_keeps_the_last_record_of_each_key_at_its_offset(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    writes = fill(log, keys=7, rounds=40)
    active_base = log.active_segment.base_offset
    size_before, segments_before = log.size_bytes, len(log.segments)

    assert clean(log, clock) == 1

    got = contents(log)
    below = [r for r in writes_as_records(writes) if r[0] < active_base]
    above = [r for r in writes_as_records(writes) if r[0] >= active_base]
    expected_below = sorted((offset, key, value) for key, (offset, value) in latest(below).items())
    assert got == expected_below + above                  # the last per key below; the active segment as written
    assert latest(got) == latest(writes_as_records(writes))
    assert log.cleaner_checkpoint == active_base
    assert log.size_bytes < size_before / 5 and len(log.segments) == segments_before
    check_log_consistency(log)

    recovery_point = log.recovery_point      # on disk before the swap (LogManager): cleaned below it
    assert recovery_point >= active_base
    log.close()
    reopened = Log.open(log.directory, COMPACTED, clock, fs, cleaner_checkpoint=active_base,
                        recovery_point=recovery_point)
    assert contents(reopened) == got
    check_log_consistency(reopened)


def test_later_passes_merge_small_cleaned_segments_up_to_segment_bytes(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    writes = fill(log, keys=30, rounds=8)
    clean(log, clock)                                    # one cleaned segment per old segment
    first_end = log.cleaner_checkpoint
    cleaned = [s for s in log.segments if s.base_offset < first_end]
    assert len(cleaned) > 5 and sum(s.size_bytes for s in cleaned) < 3 * COMPACTED.segment_bytes
    writes.update(fill(log, keys=3, rounds=20, prefix="w"))   # other keys: the clean section stays
    assert clean(log, clock) == 1
    merged = [s for s in log.segments if s.base_offset < first_end]
    assert len(merged) <= 3
    assert all(segment.size_bytes <= COMPACTED.segment_bytes for segment in log.segments)
    assert latest(contents(log)) == latest(writes_as_records(writes))
    check_log_consistency(log)


def test_groups_respect_segment_bytes_and_the_int32_offset_range(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    fill(log, keys=3, rounds=60)
    segments = log.segments[:-1]
    sizes = [segment.size_bytes for segment in segments]
    groups = group_segments_by_size(segments, log.active_segment.base_offset, max_size_bytes=2 * max(sizes))
    assert [s for group in groups for s in group] == segments
    assert all(sum(s.size_bytes for s in group) <= 2 * max(sizes) for group in groups)
    assert any(len(group) > 1 for group in groups)
    near = group_segments_by_size(segments[:2], segments[2].base_offset, max_size_bytes=1 << 30)
    assert [len(group) for group in near] == [2]
    too_far = group_segments_by_size(segments[:2], segments[0].base_offset + (1 << 31) + 1, max_size_bytes=1 << 30)
    assert [len(group) for group in too_far] == [1, 1]


def test_multi_record_and_compressed_batches_keep_their_offsets_and_codec(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    writes = {}
    for round_ in range(12):
        for codec in (Compression.NONE, Compression.GZIP, Compression.ZSTD):
            records = [SimpleRecord(f"{codec.name}-{round_}-{i}".encode(), f"k{i % 4}".encode()) for i in range(6)]
            info = log.append_as_leader(build_batch(records, compression=codec, timestamp_ms=clock.now_ms()), 0)
            for i, record in enumerate(records):
                writes[info.first_offset + i] = (record.key.decode(), record.value.decode())
    log.update_high_watermark(log.log_end_offset)
    headers_before = {h.base_offset: h for s in log.segments for _, h in s.headers(0, s.size_bytes)}
    clean(log, clock)
    after = {h.base_offset: h for s in log.segments for _, h in s.headers(0, s.size_bytes)}
    assert set(after) < set(headers_before)
    for base, header in after.items():
        before = headers_before[base]
        assert (header.last_offset, header.compression) == (before.last_offset, before.compression)
    assert latest(contents(log)) == latest(writes_as_records(writes))
    assert {offset: (key, value) for offset, key, value in contents(log)}.items() <= writes.items()
    check_log_consistency(log)


# -- tombstones ---------------------------------------------------------------------------------


def test_tombstones_stay_for_delete_retention_ms_after_the_first_cleaning_then_go(tmp_path, clock, fs):
    config = COMPACTED
    log = new_log(fs, tmp_path, clock, config)
    put(log, "gone", "v1")
    put(log, "gone", "v2")
    tombstone = put(log, "gone", None)
    fill(log, keys=3, rounds=30)
    clean(log, clock)
    assert [(o, v) for o, k, v in contents(log) if k == "gone"] == [(tombstone, None)]
    marked = [h for s in log.segments for _, h in s.headers(0, s.size_bytes) if h.base_offset == tombstone]
    assert marked[0].attributes & DELETE_HORIZON_MASK
    assert marked[0].base_timestamp == clock.now_ms() + config.delete_retention_ms

    clock.advance(config.delete_retention_ms - 1)
    fill(log, keys=3, rounds=10, prefix="w")
    clean(log, clock)
    assert [(o, v) for o, k, v in contents(log) if k == "gone"] == [(tombstone, None)]

    clock.advance(1)
    fill(log, keys=3, rounds=10, prefix="z")
    clean(log, clock)
    assert [(o, k) for o, k, v in contents(log) if k == "gone"] == []
    check_log_consistency(log)


def test_a_tombstone_record_timestamp_survives_the_delete_horizon(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    written_at = clock.now_ms()
    tombstone = put(log, "gone", None)
    clock.advance(5)
    fill(log, keys=3, rounds=30)
    clean(log, clock)
    data = log.read(tombstone, 1 << 20).records.read_bytes()
    record = next(r for p, _ in iter_batches(data) for r in iter_records(data, p) if r.offset == tombstone)
    assert (record.value, record.timestamp) == (None, written_at)


# -- what is never touched -------------------------------------------------------------------


def test_the_active_segment_and_segments_at_or_above_the_high_watermark_are_not_cleaned(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    writes = fill(log, keys=4, rounds=50)
    segments = log.segments
    high_watermark = segments[len(segments) // 2].base_offset + 1        # inside the middle segment
    log.update_high_watermark(high_watermark)
    untouched = {s.base_offset: s.log.pread(s.size_bytes, 0) for s in segments[len(segments) // 2:]}

    clean(log, clock)

    for segment in log.segments:
        if segment.base_offset in untouched:
            assert segment.log.pread(segment.size_bytes, 0) == untouched[segment.base_offset]
    assert log.cleaner_checkpoint == segments[len(segments) // 2].base_offset
    assert latest(contents(log)) == latest(writes_as_records(writes))


def test_min_compaction_lag_ms_keeps_young_segments_dirty(tmp_path, clock, fs):
    lag_ms = 60_000
    log = new_log(fs, tmp_path, clock, dataclasses.replace(COMPACTED, min_compaction_lag_ms=lag_ms))
    fill(log, keys=4, rounds=20)
    old_end = log.active_segment.base_offset
    clock.advance(lag_ms + 1)
    fill(log, keys=4, rounds=20, prefix="young")        # records younger than the lag
    clean(log, clock)
    assert old_end <= log.cleaner_checkpoint < log.active_segment.base_offset
    young = [s for s in log.segments[:-1] if s.base_offset >= log.cleaner_checkpoint]
    assert young and all(s.max_timestamp > clock.now_ms() - lag_ms for s in young)

    clock.advance(lag_ms + 1)
    clean(log, clock)
    assert log.cleaner_checkpoint == log.active_segment.base_offset


def test_max_compaction_lag_ms_makes_a_log_eligible_whatever_its_dirty_ratio(tmp_path, clock, fs):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, cleanup_policy=("compact",),
                       min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=60_000)
    log = new_log(fs, tmp_path, clock, config)
    fill(log, keys=4, rounds=20)
    assert clean(log, clock) == 0                        # a ratio of 1.0 is never above min 1.0
    clock.advance(60_001)
    assert clean(log, clock) == 1
    assert log.cleaner_checkpoint == log.active_segment.base_offset


def test_max_compaction_lag_ms_rolls_the_active_segment(tmp_path, clock, fs):
    config = LogConfig(cleanup_policy=("compact",), max_compaction_lag_ms=60_000)
    assert config.max_segment_ms == 60_000 and LogConfig(max_compaction_lag_ms=60_000).max_segment_ms == config.segment_ms
    log = new_log(fs, tmp_path, clock, config)
    put(log, "k", "v1")
    clock.advance(60_001)
    put(log, "k", "v2")
    assert len(log.segments) == 2


# -- selection ---------------------------------------------------------------------------------


def test_the_dirtiest_log_above_min_cleanable_dirty_ratio_is_cleaned_first(tmp_path, clock, fs):
    half = LogConfig(segment_bytes=1024, index_interval_bytes=100, cleanup_policy=("compact",),
                     min_cleanable_dirty_ratio=0.5)
    a = new_log(fs, tmp_path, clock, half, "a-0")
    b = new_log(fs, tmp_path, clock, half, "b-0")
    fill(a, keys=3, rounds=40)
    fill(b, keys=80, rounds=2)
    clean(a, clock)
    clean(b, clock)
    fill(a, keys=3, rounds=20, prefix="w")               # a: little clean data, lots of dirty
    fill(b, keys=3, rounds=8, prefix="w")                # b: a few dirty segments over a larger clean section
    sections = {s.log: s for s in (find_dirty_section(a, clock.now_ms()), find_dirty_section(b, clock.now_ms()))}
    assert sections[a].dirty_ratio > 0.5 > sections[b].dirty_ratio
    assert grab_filthiest_log(sections.values()).log is a
    assert clean(b, clock) == 0                          # below its ratio: not eligible
    quiet = new_log(fs, tmp_path, clock, half, "c-0")
    fill(quiet, keys=3, rounds=40)                       # never cleaned: every byte dirty
    assert grab_filthiest_log([find_dirty_section(log, clock.now_ms()) for log in (a, b, quiet)]).log is quiet


def test_only_compacted_logs_are_cleaned_and_only_while_the_cleaner_is_enabled(tmp_path, clock, fs):
    manager = LogManager([str(tmp_path / "d")], clock, fs, default_config=LogConfig(segment_bytes=1024),
                         topic_configs={"compacted": COMPACTED})
    plain = manager.get_or_create_log(TopicPartition("plain", 0))
    compacted = manager.get_or_create_log(TopicPartition("compacted", 0))
    for log in (plain, compacted):
        fill(log, keys=3, rounds=40)
    plain_bytes, compacted_bytes = plain.size_bytes, compacted.size_bytes
    assert manager.clean_logs(BrokerConfig({"log.cleaner.enable": "false"})) is False
    assert compacted.size_bytes == compacted_bytes
    while manager.clean_logs(BrokerConfig({"log.cleaner.backoff.ms": "0"})):
        pass
    assert compacted.size_bytes < compacted_bytes / 5 and plain.size_bytes == plain_bytes
    assert plain.cleaner_checkpoint == 0


# -- bounds ------------------------------------------------------------------------------------


def test_a_small_offset_map_cleans_part_of_the_dirty_section_per_pass(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    writes = {}
    for r in range(3):
        for k in range(40):
            writes[put(log, f"key-{k}", f"v{r}-{k}")] = (f"key-{k}", f"v{r}-{k}")
    small = CleanerConfig(dedupe_buffer_size_bytes=10 * MAP_ENTRY_BYTES)
    assert small.offset_map_capacity == 10
    end = log.active_segment.base_offset
    checkpoints = []
    while log.cleaner_checkpoint < end:
        assert clean(log, clock, small) >= 1
        checkpoints.append(log.cleaner_checkpoint)
        assert latest(contents(log)) == latest(writes_as_records(writes))
        check_log_consistency(log)
    assert checkpoints == sorted(checkpoints) and len(checkpoints) >= 100 // 10
    assert checkpoints[0] - 0 <= 10                      # the first pass mapped at most 10 keys' worth
    below = [r for r in writes_as_records(writes) if r[0] < end]
    assert [r for r in contents(log) if r[0] < end] == sorted(
        (offset, key, value) for key, (offset, value) in latest(below).items())


class _CountingHandle:
    """A file handle that adds the bytes it reads to its file system's count."""

    def __init__(self, handle, fs: "CountingFileSystem"):
        self._handle = handle
        self._fs = fs

    def pread(self, size: int, position: int) -> bytes:
        data = self._handle.pread(size, position)
        self._fs.bytes_read += len(data)
        return data

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


class CountingFileSystem(CrashableFileSystem):
    bytes_read = 0

    def open(self, path: str, create: bool = True):
        return _CountingHandle(super().open(path, create), self)


def test_each_step_reads_about_half_the_io_buffer(tmp_path, clock):
    fs = CountingFileSystem(str(tmp_path))
    log = new_log(fs, tmp_path, clock, LogConfig(segment_bytes=64 * 1024, index_interval_bytes=4096,
                                                 cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0))
    for i in range(2000):
        put(log, f"key-{i % 50}", f"value-{i}-" + "y" * 100)
    config = CleanerConfig(io_buffer_size_bytes=16 * 1024)
    step_bytes = config.step_bytes
    cleaner = LogCleaner(on_io_error=lambda log_dir, error: pytest.fail(str(error)))
    reads, total = [], log.size_bytes
    while True:
        before = fs.bytes_read
        cleaning = cleaner.clean_one([log], config, clock.now_ms(), clock.monotonic_ms())
        reads.append(fs.bytes_read - before)
        if cleaning.done:
            break
    largest_batch = max(h.size_bytes for s in log.segments for _, h in s.headers(0, s.size_bytes))
    assert step_bytes == 8 * 1024 and len(reads) > total // step_bytes
    assert max(reads) <= step_bytes + 2 * largest_batch + 4096    # + the first dirty header, at selection


# -- crashes ---------------------------------------------------------------------------------------


class PowerCut(Exception):
    pass


class CrashAt(CrashableFileSystem):
    """A crashable file system that cuts the power just before its N-th operation."""

    def __init__(self, root: str):
        super().__init__(root)
        self.countdown: int | None = None

    def _check(self, path: str) -> None:
        super()._check(path)
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown < 0:
                self.countdown = None
                raise PowerCut(path)


def _check_recovered(log: Log, writes: dict) -> None:
    """What a crash may leave: every record at its offset, unchanged; for each key its
    last value (or, for a deleted key, its tombstone or nothing, never an older value)."""
    got = contents(log)
    assert [offset for offset, _, _ in got] == sorted({offset for offset, _, _ in got}), "offsets repeat or go back"
    assert all(writes[offset] == (key, value) for offset, key, value in got), "a record moved or changed"
    seen = latest(got)
    for key, (offset, value) in latest(writes_as_records(writes)).items():
        if value is None:
            assert seen.get(key) in (None, (offset, None)), key
        else:
            assert seen[key] == (offset, value), key
    check_log_consistency(log)


def test_a_crash_at_every_step_of_a_pass_loses_nothing(tmp_path):
    """A pass that both drops superseded records and removes tombstones whose delete
    horizon passed, cut by a crash before each of its file operations in turn."""
    template = str(tmp_path / "template")
    os.makedirs(template)
    clock = ManualClock(T0_MS)
    log = new_log(CrashableFileSystem(template), template, clock)
    writes = {}

    def write(key: str, value: str | None) -> None:
        writes[put(log, key, value)] = (key, value)

    for r in range(6):              # keys written once (their only record stays), updated keys, and
        write(f"once-{r}", "o")     # key-0 and key-1 ending in tombstones in early segments
        for k in range(6):
            if (k, r) in ((0, 1), (1, 2)):
                write(f"key-{k}", None)
            elif k > 1 or r < k + 1:
                write(f"key-{k}", f"v{r}-{k}")
    clean(log, clock)                                     # marks the tombstones' batches
    for r in range(4):
        write(f"later-once-{r}", "o")
        for k in range(2, 6):
            write(f"key-{k}", f"w{r}-{k}")
    log.flush()
    state = dict(recovery_point=log.recovery_point, high_watermark=log.high_watermark,
                 cleaner_checkpoint=log.cleaner_checkpoint)
    log.close()
    pass_ms = T0_MS + COMPACTED.delete_retention_ms

    def open_copy(name: str, fs_class=CrashableFileSystem):
        root = str(tmp_path / name)
        shutil.copytree(template, root)
        fs = fs_class(root)
        return fs, Log.open(os.path.join(root, "compacted-0"), COMPACTED, ManualClock(pass_ms), fs, **state)

    _, reference = open_copy("reference")
    clean(reference, reference.clock)
    _check_recovered(reference, writes)
    final = contents(reference)
    assert ("key-1" not in latest(final)) and ("key-0" not in latest(final)), "tombstones removed"

    swaps_to_finish = 0
    for step in range(10_000):
        fs, log = open_copy(f"crash-{step}", CrashAt)
        fs.countdown = step
        try:
            clean(log, log.clock)
        except PowerCut:
            pass
        else:
            fs.countdown = None
            assert contents(log) == final
            break
        fs.crash()
        swaps_to_finish += any(name.endswith(".log.swap") for name in os.listdir(log.directory))
        recovered = Log.open(log.directory, COMPACTED, log.clock, fs, **state)
        _check_recovered(recovered, writes)
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
        clean(recovered, recovered.clock)                 # the next pass finishes the job
        _check_recovered(recovered, writes)
        assert latest(contents(recovered)) == latest(final)
    else:
        pytest.fail("the pass never completed")
    assert step > 50 and swaps_to_finish > 0


def test_the_cleaner_checkpoint_survives_a_restart_and_a_truncation_lowers_it(tmp_path, clock, fs):
    dirs = [str(tmp_path / "d")]
    broker = BrokerConfig({"log.cleaner.backoff.ms": "0"})
    manager = LogManager(dirs, clock, fs, default_config=COMPACTED)
    log = manager.get_or_create_log(TopicPartition("compacted", 0))
    writes = fill(log, keys=4, rounds=40)
    while manager.clean_logs(broker):
        pass
    checkpoint = log.cleaner_checkpoint
    assert checkpoint == log.active_segment.base_offset
    with open(os.path.join(dirs[0], "cleaner-offset-checkpoint")) as f:
        assert f.read() == f"0\n1\ncompacted 0 {checkpoint}\n"
    manager.shutdown()

    manager = LogManager(dirs, clock, fs, default_config=COMPACTED)
    log = manager.get_log(TopicPartition("compacted", 0))
    assert log.cleaner_checkpoint == checkpoint
    assert manager.clean_logs(broker) is False            # nothing dirty: no second pass
    assert latest(contents(log)) == latest(writes_as_records(writes))
    log.truncate_to(checkpoint - 3)
    assert log.cleaner_checkpoint <= checkpoint - 3
    manager.shutdown()


def test_a_truncation_during_a_pass_abandons_it(tmp_path, clock, fs):
    """A truncation makes the offset map of a pass name records that are gone: the
    pass must go, even when the segment it was about to rewrite is back in place
    (cut, refilled with other records, rolled)."""
    log = new_log(fs, tmp_path, clock)
    writes = {}
    while len(log.segments) < 2:
        for k in range(6):
            writes[put(log, f"key-{k}", f"v{len(writes)}")] = (f"key-{k}", f"v{len(writes)}")
    dirty = log.segments[0]
    config = CleanerConfig(io_buffer_size_bytes=2 * dirty.size_bytes)      # the first step maps it whole
    cleaner = LogCleaner(on_io_error=lambda log_dir, error: pytest.fail(str(error)))
    first = cleaner.clean_one([log], config, clock.now_ms(), clock.monotonic_ms())
    assert not first.done
    truncate_at = (dirty.base_offset + log.segments[1].base_offset) // 2
    log.truncate_to(truncate_at)
    writes = {offset: write for offset, write in writes.items() if offset < truncate_at}
    while log.active_segment is dirty:
        writes[put(log, "other", "o" * 30)] = ("other", "o" * 30)

    second = cleaner.clean_one([log], config, clock.now_ms(), clock.monotonic_ms())
    assert second is not first
    while not second.done:
        assert cleaner.clean_one([log], config, clock.now_ms(), clock.monotonic_ms()) is second
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    assert latest(contents(log)) == latest(writes_as_records(writes))
    check_log_consistency(log)


# -- producer state ------------------------------------------------------------------------------


def test_a_rebuilt_producer_state_still_deduplicates_after_the_last_batch_was_emptied(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    for sequence in range(3):                                # producer 7's batches, keys later overwritten
        put(log, f"idem-{sequence}", "first", producer_id=7, producer_epoch=0, base_sequence=sequence)
    last_batch_offset = log.log_end_offset - 1
    for sequence in range(3):
        put(log, f"idem-{sequence}", "overwritten")
    fill(log, keys=3, rounds=30)
    clean(log, clock)
    headers = [h for s in log.segments for _, h in s.headers(0, s.size_bytes) if h.producer_id == 7]
    assert [(h.base_offset, h.record_count, h.base_sequence) for h in headers] == [(last_batch_offset, 0, 2)]
    assert not [r for r in contents(log) if r[2] == "first"]

    log.close()
    log = Log.open(log.directory, COMPACTED, clock, fs, high_watermark=1 << 40)
    retry = build_batch([SimpleRecord(b"first", b"idem-2")], producer_id=7, producer_epoch=0, base_sequence=2,
                        timestamp_ms=clock.now_ms())
    end = log.log_end_offset
    answer = log.append_as_leader(retry, leader_epoch=0)
    assert (answer.first_offset, answer.batch_count, log.log_end_offset) == (last_batch_offset, 0, end)
    gap = build_batch([SimpleRecord(b"x", b"k")], producer_id=7, producer_epoch=0, base_sequence=5,
                      timestamp_ms=clock.now_ms())
    with pytest.raises(Exception) as error:
        log.append_as_leader(gap, leader_epoch=0)
    assert error.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


# -- the write path ------------------------------------------------------------------------------


def test_a_compacted_topic_refuses_a_record_without_a_key_with_invalid_record(tmp_path, clock, fs):
    log = new_log(fs, tmp_path, clock)
    put(log, "k", "v")
    end = log.log_end_offset
    keyless = build_batch([SimpleRecord(b"no key")], timestamp_ms=T0_MS)
    mixed = build_batch([SimpleRecord(b"a", b"k"), SimpleRecord(b"b")], compression=Compression.LZ4,
                        timestamp_ms=T0_MS)
    for data, refused in ((keyless, [0]), (mixed, [1]),
                          (build_batch([SimpleRecord(b"ok", b"k")], timestamp_ms=T0_MS) + keyless, [0])):
        with pytest.raises(InvalidRecordError) as error:
            log.append_as_leader(data, leader_epoch=0)
        assert error.value.error_code == ErrorCode.INVALID_RECORD
        assert "without key" in str(error.value)
        # Each record refused by its index in its batch (KIP-467's record_errors).
        assert [index for index, _ in error.value.record_errors] == refused
        assert log.log_end_offset == end
    plain = new_log(fs, tmp_path, clock, LogConfig(), "plain-0")
    assert plain.append_as_leader(keyless, leader_epoch=0).first_offset == 0


def test_retention_deletes_segments_only_when_the_policy_includes_delete(tmp_path, clock, fs):
    for policy, deletes in ((("compact",), False), (("compact", "delete"), True), (("delete",), True)):
        config = LogConfig(segment_bytes=1024, retention_ms=1000, cleanup_policy=policy)
        log = new_log(fs, tmp_path, clock, config, f"{'-'.join(policy)}-0")
        fill(log, keys=3, rounds=20)
        clock.advance(2000)
        assert (log.delete_old_segments() > 0) is deletes, policy


def test_the_compaction_configs_reach_log_config(tmp_path):
    config = LogConfig.from_properties({"cleanup.policy": "compact,delete", "delete.retention.ms": "10",
                                        "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "5",
                                        "max.compaction.lag.ms": "500"})
    assert (config.compact, config.delete, config.delete_retention_ms, config.min_cleanable_dirty_ratio,
            config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (True, True, 10, 0.25, 5, 500)
    assert LogConfig.from_properties(config.to_properties()) == config
    assert not LogConfig.from_properties({"cleanup.policy": ""}).delete
    for key, value in (("cleanup.policy", "compress"), ("min.cleanable.dirty.ratio", "1.5"),
                       ("max.compaction.lag.ms", "0"), ("delete.retention.ms", "-1")):
        with pytest.raises(InvalidConfigError) as error:
            LogConfig.from_properties({key: value})
        assert str(error.value).startswith(key)
    broker = BrokerConfig({"log.cleanup.policy": "compact", "log.cleaner.delete.retention.ms": "7",
                           "log.cleaner.min.cleanable.ratio": "0.1", "log.cleaner.min.compaction.lag.ms": "3",
                           "log.cleaner.max.compaction.lag.ms": "99", "log.cleaner.dedupe.buffer.size": "4096",
                           "log.cleaner.io.buffer.size": "2048", "log.cleaner.backoff.ms": "5"})
    defaults = static_log_config(broker)
    assert (defaults.cleanup_policy, defaults.delete_retention_ms, defaults.min_cleanable_dirty_ratio,
            defaults.min_compaction_lag_ms, defaults.max_compaction_lag_ms) == (("compact",), 7, 0.1, 3, 99)
    assert CleanerConfig.from_settings(broker) == CleanerConfig(True, 4096, 2048, 5)
    assert CleanerConfig.from_settings(BrokerConfig()) == CleanerConfig()


def test_an_aborted_or_open_transactions_records_never_remove_a_committed_value(tmp_path, clock, fs):
    """As __consumer_offsets holds TxnOffsetCommit records: a key's committed value
    must survive cleaning when a later record of that key was aborted (or is still
    undecided); a committed transaction's record does supersede it."""
    from tidelog.records.batch import build_marker
    log = new_log(fs, tmp_path, clock)
    put(log, "aborted-key", "committed")
    put(log, "aborted-key", "aborted", producer_id=5, producer_epoch=0, is_transactional=True)
    log.append_as_leader(build_marker(5, 0, False, 0, T0_MS), 0, from_coordinator=True)
    put(log, "won-key", "old")
    put(log, "won-key", "new", producer_id=6, producer_epoch=0, is_transactional=True)
    log.append_as_leader(build_marker(6, 0, True, 0, T0_MS), 0, from_coordinator=True)
    put(log, "open-key", "committed")
    put(log, "open-key", "undecided", producer_id=7, producer_epoch=0, is_transactional=True)
    fill(log, keys=5, rounds=30)                        # roll segments so the above can be cleaned
    log.update_high_watermark(log.log_end_offset)
    assert clean(log, clock) == 1
    values = {(key, value) for _, key, value in contents(log)}
    assert ("aborted-key", "committed") in values
    assert ("won-key", "new") in values and ("won-key", "old") not in values
    assert ("open-key", "committed") in values
