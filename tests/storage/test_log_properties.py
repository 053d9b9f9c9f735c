"""Property test: any sequence of appends, truncations, log-start moves, retention, crashes and
reopens keeps ``log_start_offset <= HW <= LEO``, offsets increasing, the indexes consistent with a
full scan, the epoch cache consistent with the batches, and the data equal to a simple model."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.core.clock import ManualClock
from tidelog.records.batch import build_batch, iter_batches
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.log import Log

from .conftest import T0_MS, check_log_consistency, read_all

CONFIG = LogConfig(segment_bytes=1100, index_interval_bytes=60, segment_index_bytes=40,
                   retention_bytes=3000, retention_ms=-1)
fraction = st.floats(min_value=0.0, max_value=1.1, allow_nan=False)
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.integers(1, 4), st.integers(0, 60)),
    st.tuples(st.just("follower_append"), st.integers(0, 3), st.integers(1, 3)),
    st.tuples(st.just("truncate"), fraction),
    st.tuples(st.just("high_watermark"), fraction),
    st.tuples(st.just("log_start"), fraction),
    st.tuples(st.just("new_epoch")),
    st.tuples(st.just("flush")),
    st.tuples(st.just("retention")),
    st.tuples(st.just("truncate_fully"), st.integers(0, 5)),
    st.tuples(st.just("reopen"), st.sampled_from(["clean", "crash"])),
), max_size=40)


class Model:
    """Batches as ``(base_offset, [values], timestamp)`` plus the offsets the log must report."""

    def __init__(self):
        self.batches: list[tuple[int, list[bytes], int]] = []
        self.log_start_offset = self.log_end_offset = 0

    def visible(self) -> list[tuple[int, bytes]]:
        return [(base + i, value) for base, values, _ in self.batches for i, value in enumerate(values)
                if base + i >= self.log_start_offset]

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        for base, values, batch_timestamp in self.batches:
            for i in range(len(values)):
                if base + i >= self.log_start_offset and batch_timestamp >= timestamp_ms:
                    return base + i
        return None

    def truncate(self, offset: int) -> None:
        kept = [b for b in self.batches if b[0] + len(b[1]) - 1 < offset]
        dropped = self.batches[len(kept):]
        self.batches = kept
        self.log_end_offset = min(offset, dropped[0][0]) if dropped else offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)


def offset_at(log: Log, low: int, high: int, f: float) -> int:
    return low + int((high - low) * f)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_any_sequence_of_operations_keeps_the_log_consistent(ops):
    with tempfile.TemporaryDirectory() as root:
        fs, clock = CrashableFileSystem(root), ManualClock(T0_MS)
        log_dir = os.path.join(root, "prop-0")
        log, model, epoch, counter = Log.open(log_dir, CONFIG, clock, fs), Model(), 0, 0
        for op in ops:
            kind = op[0]
            clock.advance(10)
            if kind == "append":
                _, batches, records, size = op
                buffer = b""
                for _ in range(batches):
                    values = [f"{counter + i}:".encode() + b"v" * size for i in range(records)]
                    buffer += build_batch(values, timestamp_ms=clock.now_ms())
                    model.batches.append((model.log_end_offset, values, clock.now_ms()))
                    model.log_end_offset += records
                    counter += records
                log.append_as_leader(buffer, leader_epoch=epoch)
            elif kind == "follower_append":
                _, gap, records = op
                base = model.log_end_offset + gap
                values = [f"f{counter + i}".encode() for i in range(records)]
                counter += records
                log.append_as_follower(build_batch(values, base_offset=base, partition_leader_epoch=epoch,
                                                   timestamp_ms=clock.now_ms()))
                model.batches.append((base, values, clock.now_ms()))
                model.log_end_offset = base + records
            elif kind == "truncate":
                target = offset_at(log, 0, log.log_end_offset, op[1])
                if target < log.log_end_offset:
                    if target < (log.segments[0].base_offset):
                        model.batches, model.log_start_offset, model.log_end_offset = [], target, target
                    else:
                        model.truncate(target)
                log.truncate_to(target)
            elif kind == "high_watermark":
                log.update_high_watermark(offset_at(log, log.log_start_offset, log.log_end_offset, op[1]))
            elif kind == "log_start":
                target = offset_at(log, log.log_start_offset, log.high_watermark, min(op[1], 1.0))
                log.maybe_increment_log_start_offset(target)
                model.log_start_offset = max(model.log_start_offset, target)
            elif kind == "new_epoch":
                epoch += 1
            elif kind == "flush":
                log.flush()
            elif kind == "retention":
                before = log.log_start_offset
                log.delete_old_segments()
                assert before <= log.log_start_offset <= log.high_watermark
                model.log_start_offset = log.log_start_offset
            elif kind == "truncate_fully":
                target = log.log_end_offset + op[1]
                log.truncate_fully_and_start_at(target)
                model.batches, model.log_start_offset, model.log_end_offset = [], target, target
            elif kind == "reopen":
                state = (log.recovery_point, log.log_start_offset, log.high_watermark)
                if op[1] == "clean":
                    log.flush()
                    log.close()
                    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=log.log_end_offset,
                                   log_start_offset=state[1], high_watermark=state[2], had_clean_shutdown=True)
                    if log.log_end_offset < model.log_end_offset:
                        # Only an offset gap at the end (a follower's, or a truncation into one) is
                        # not stored: the log end comes back as the end of the last batch.
                        batches = len(model.batches)
                        model.truncate(max(log.log_end_offset, log.log_start_offset))
                        assert len(model.batches) == batches, "a clean reopen lost data"
                else:
                    fs.crash()
                    log = Log.open(log_dir, CONFIG, clock, fs, recovery_point=state[0],
                                   log_start_offset=state[1], high_watermark=state[2])
                    lost = [b for b in model.batches if b[0] + len(b[1]) > log.log_end_offset]
                    assert all(b[0] + len(b[1]) > state[0] for b in lost) or \
                        log.log_end_offset == log.log_start_offset, "lost a batch below the recovery point"
                    if log.log_end_offset < model.log_end_offset:
                        model.truncate(log.log_end_offset)
                    if log.log_start_offset > model.log_end_offset:  # restarted empty at the log start
                        model.batches, model.log_end_offset = [], log.log_start_offset
                    model.log_start_offset = log.log_start_offset
            assert log.log_start_offset == model.log_start_offset, op
            assert log.log_end_offset == model.log_end_offset, op
            check_invariants(log, model)


def check_invariants(log: Log, model: Model) -> None:
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
    assert log.recovery_point <= log.log_end_offset
    check_log_consistency(log)
    assert read_all(log) == model.visible()
    assert read_all(log, max_bytes=150) == model.visible()
    for _, _, timestamp in model.batches[-6:]:
        for target in (timestamp - 1, timestamp, timestamp + 1):
            found = log.fetch_offset_by_timestamp(target)
            assert (found.offset if found else None) == model.offset_for_timestamp(target), target
    cache = log.leader_epoch_cache
    entries = cache.entries
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
    assert all(e.start_offset <= log.log_end_offset for e in entries)
    for segment in log.segments:
        data = segment.log.pread(segment.size_bytes, 0)
        for _, header in iter_batches(data):
            if header.last_offset >= log.log_start_offset:
                assert cache.epoch_for_offset(max(header.base_offset, log.log_start_offset)) == \
                    header.partition_leader_epoch
