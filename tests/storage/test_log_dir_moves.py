"""Moving a replica between log directories (AlterReplicaLogDirs): the future log,
its catch-up, the swap, restarts and crashes at every step of the swap."""

from __future__ import annotations

import os
import uuid

import pytest

from tidelog.core.errors import ErrorCode, InvalidRecordError, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.future_log import FutureLog
from tidelog.storage.log_manager import LogManager

from .conftest import batch, check_log_consistency, read_all

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=100)
TP = TopicPartition("orders", 0)
CHUNK_BYTES = 512


@pytest.fixture
def dirs(tmp_path) -> list[str]:
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def manager(dirs, clock, fs) -> LogManager:
    return LogManager(dirs, clock, fs, default_config=CONFIG)


def fill(log, count: int, epoch: int = 0, start: int = 0) -> None:
    for i in range(start, start + count):
        log.append_as_leader(batch(f"record-{i}" * 8), leader_epoch=epoch)


def with_log(dirs, clock, fs, count: int = 60) -> tuple[LogManager, object]:
    """A manager whose TP log is in dirs[0], holding ``count`` batches, HW at the end."""
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(TP)
    assert m.log_dir_of(TP) == dirs[0]
    fill(log, count)
    log.update_high_watermark(log.log_end_offset)
    return m, log


def names(log_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(log_dir) if n.startswith("orders-0"))


def move(m: LogManager, steps_max: int = 1000) -> dict:
    for _ in range(steps_max):
        swapped = m.copy_to_future_logs(CHUNK_BYTES)
        if swapped:
            return swapped
    raise AssertionError("the move never finished")


def test_a_move_copies_in_bounded_steps_then_swaps_and_deletes_the_old_directory(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    topic_id = uuid.UUID(int=12345)
    m.record_topic_id(TP, topic_id)
    expected = read_all(log)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    future = m.future_log(TP)
    assert future is not None and future.log_dir == dirs[1]
    [future_name] = names(dirs[1])
    assert future_name.endswith("-future")
    assert future.offset_lag(log) == log.log_end_offset

    m.copy_to_future_logs(CHUNK_BYTES)              # one step copies about one chunk, not the log
    assert 0 < future.log.log_end_offset < log.log_end_offset
    assert future.log.size_bytes <= CHUNK_BYTES + 200
    assert m.log_dir_of(TP) == dirs[0]

    swapped = move(m)
    new_log = swapped[TP]
    assert m.get_log(TP) is new_log and m.log_dir_of(TP) == dirs[1]
    assert m.future_log(TP) is None
    assert new_log.directory == os.path.join(dirs[1], "orders-0")
    assert read_all(new_log) == expected
    assert (new_log.log_end_offset, new_log.high_watermark) == (log.log_end_offset, log.log_end_offset)
    assert new_log.latest_epoch == 0
    check_log_consistency(new_log)
    assert names(dirs[0]) == [] and names(dirs[1]) == ["orders-0"]
    assert m.topic_id_of(TP) == topic_id
    assert m.placements()[TP] == m.directory_id(dirs[1])
    fill(new_log, 3, start=1000)                    # the moved log takes writes
    assert new_log.log_end_offset == log.log_end_offset + 3


def test_writes_during_the_move_are_copied_and_the_move_still_ends(dirs, clock, fs):
    """Each step copies at least twice what the log grew since the last one, so a
    writer faster than the chunk does not keep the future log behind for ever."""
    m, log = with_log(dirs, clock, fs, count=10)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    steps = 0
    swapped: dict = {}
    while not swapped:
        fill(log, 6, start=100 + 6 * steps)         # about 1 KiB per step: twice the chunk
        expected = read_all(log)
        swapped = m.copy_to_future_logs(CHUNK_BYTES)
        steps += 1
        assert steps < 100, "the future log never caught up"
    assert steps > 1 and read_all(swapped[TP]) == expected


def test_the_future_follows_a_truncation_and_a_new_log_start_of_the_current_log(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs, count=40)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    future = m.future_log(TP)
    for _ in range(6):
        m.copy_to_future_logs(CHUNK_BYTES)
    copied = future.log.log_end_offset
    assert 10 < copied < log.log_end_offset
    # The current log, a follower now, drops its tail and takes another leader's records.
    log.truncate_to(copied - 5)
    fill(log, 20, epoch=1, start=500)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(8)
    expected, epoch_0_end = read_all(log), log.end_offset_for_epoch(0)
    swapped = move(m)
    assert read_all(swapped[TP]) == expected
    assert swapped[TP].log_start_offset == 8
    assert swapped[TP].end_offset_for_epoch(0) == epoch_0_end


def test_a_move_to_where_the_log_is_does_nothing_and_a_second_move_replaces_the_first(tmp_path, clock):
    fs = CrashableFileSystem(str(tmp_path))
    dirs = [str(tmp_path / d) for d in ("d1", "d2", "d3")]
    m, log = with_log(dirs, clock, fs)
    assert m.alter_log_dir(TP, dirs[0], "online") == ErrorCode.NONE
    assert m.future_log(TP) is None and all(names(d) == [] for d in dirs[1:])
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    m.copy_to_future_logs(CHUNK_BYTES)
    first = m.future_log(TP)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE      # the same again: kept
    assert m.future_log(TP) is first
    assert m.alter_log_dir(TP, dirs[2], "online") == ErrorCode.NONE      # elsewhere: replaced
    assert m.future_log(TP).log_dir == dirs[2] and names(dirs[1]) == []
    assert m.alter_log_dir(TP, dirs[0], "online") == ErrorCode.NONE      # back home: cancelled
    assert m.future_log(TP) is None and names(dirs[2]) == [] and not m.has_future_work()


def test_bad_requests_get_kafkas_codes_and_move_nothing(dirs, clock, fs, tmp_path):
    m, log = with_log(dirs, clock, fs)
    tricks = ["/nonexistent", dirs[1] + "/", os.path.join(dirs[0], "..", "d2"), "d2", "../d2", ""]
    for path in tricks:
        assert m.alter_log_dir(TP, path, "online") == ErrorCode.LOG_DIR_NOT_FOUND, path
    assert m.alter_log_dir(TP, dirs[1], "offline") == ErrorCode.KAFKA_STORAGE_ERROR
    long_topic = TopicPartition("x" * 249, 0)
    assert m.alter_log_dir(long_topic, dirs[1], "none") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert m.future_log(TP) is None and names(dirs[1]) == []
    # A partition this broker does not host: REPLICA_NOT_AVAILABLE, and its log, when it
    # comes, is created in the directory asked for (Kafka's preferred log dir).
    unknown = TopicPartition("later", 0)
    assert m.alter_log_dir(unknown, dirs[1], "none") == ErrorCode.REPLICA_NOT_AVAILABLE
    assert m.preferred_log_dir(unknown) == dirs[1]
    m.get_or_create_log(TopicPartition("other", 0))          # would go to the emptier dirs[1]...
    m.get_or_create_log(TopicPartition("other", 1))
    assert m.get_or_create_log(unknown) is m.get_log(unknown)
    assert m.log_dir_of(unknown) == dirs[1] and m.preferred_log_dir(unknown) is None


def test_an_offline_target_directory_is_refused(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    fs.fail(dirs[1])
    with pytest.raises(StorageError):
        m.get_or_create_log(TopicPartition("z", 0))           # lands in dirs[1], fails: offline
    fs.heal(dirs[1])
    assert dirs[1] in m.offline_dirs
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.KAFKA_STORAGE_ERROR
    assert m.future_log(TP) is None


def test_a_failing_target_directory_stops_the_move_and_the_current_log_serves_on(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    m.copy_to_future_logs(CHUNK_BYTES)
    fs.fail(dirs[1])
    m.copy_to_future_logs(CHUNK_BYTES)
    assert dirs[1] in m.offline_dirs and m.future_log(TP) is None and not m.has_future_work()
    assert m.get_log(TP) is log and not log.is_offline
    fill(log, 1, start=900)


def test_a_move_resumes_after_a_restart(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    expected = read_all(log)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    for _ in range(3):
        m.copy_to_future_logs(CHUNK_BYTES)
    copied = m.future_log(TP).log.log_end_offset
    m.shutdown()
    m = manager(dirs, clock, fs)
    assert m.log_dir_of(TP) == dirs[0]
    future = m.future_log(TP)
    assert future is not None and future.log_dir == dirs[1] and future.log.log_end_offset == copied
    swapped = move(m)
    assert read_all(swapped[TP]) == expected and names(dirs[0]) == []


def test_an_unclean_restart_resumes_a_move_from_what_survived(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    log.flush()
    expected = read_all(log)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    for _ in range(5):
        m.copy_to_future_logs(CHUNK_BYTES)
    fs.crash()
    m = manager(dirs, clock, fs)
    assert m.future_log(TP) is not None
    swapped = move(m)
    assert read_all(swapped[TP]) == expected
    check_log_consistency(swapped[TP])


class _CrashAfter(Exception):
    pass


class CrashingFileSystem(CrashableFileSystem):
    """Raises after the ``budget``-th directory change from the moment it is armed."""

    budget: int | None = None

    def _spend(self) -> None:
        if self.budget is not None:
            if self.budget == 0:
                raise _CrashAfter()
            self.budget -= 1

    def rename(self, source, destination):
        self._spend()
        super().rename(source, destination)

    def rmtree(self, path):
        self._spend()
        super().rmtree(path)

    def fsync_dir(self, path):
        self._spend()
        super().fsync_dir(path)


def test_a_crash_at_any_step_of_the_swap_loses_nothing(tmp_path, clock):
    """Crash after each directory change of the swap (flush, rename the current away,
    rename the future in, delete): the restart has every flushed record, once, in one
    directory; a move the crash interrupted resumes and ends."""
    outcomes = set()
    for budget in range(60):
        root = tmp_path / f"run{budget}"
        fs = CrashingFileSystem(str(root))
        dirs = [str(root / "d1"), str(root / "d2")]
        m, log = with_log(dirs, clock, fs)
        log.flush()
        expected = read_all(log)
        assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
        future = m.future_log(TP)
        while future.log.log_end_offset + 3 < log.log_end_offset:   # nearly there
            future.catch_up(log, CHUNK_BYTES)
        fs.budget = budget
        try:
            m.copy_to_future_logs(CHUNK_BYTES)
            crashed = False
        except _CrashAfter:
            crashed = True
        fs.budget = None
        fs.crash()
        m = manager(dirs, clock, fs)
        where = m.log_dir_of(TP)
        outcomes.add((crashed, where, m.future_log(TP) is not None))
        if m.future_log(TP) is not None:
            assert where == dirs[0]
            move(m)
        assert m.log_dir_of(TP) in dirs
        assert read_all(m.get_log(TP)) == expected, f"budget {budget}"
        check_log_consistency(m.get_log(TP))
        assert sorted(names(dirs[0]) + names(dirs[1])) == ["orders-0"], (budget, names(dirs[0]), names(dirs[1]))
        m.shutdown()
        if not crashed:
            break
    else:
        pytest.fail("the swap never completed within the budgets tried")
    # Every kind of outcome was met: the move resumed from the old directory, the future
    # log was promoted at load (crash between the two renames), the swap had finished.
    kinds = {(crashed, os.path.basename(where), future) for crashed, where, future in outcomes}
    assert {(True, "d1", True), (True, "d2", False), (False, "d2", False)} <= kinds, kinds


def test_a_deleted_partition_takes_its_future_log_with_it(dirs, clock, fs):
    m, log = with_log(dirs, clock, fs)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    m.copy_to_future_logs(CHUNK_BYTES)
    m.delete_log(TP)
    assert m.future_log(TP) is None and names(dirs[0]) == [] and names(dirs[1]) == []


class FailingRenameFileSystem(CrashableFileSystem):
    """Fails the rename of a future log into place (an I/O error on the target disk)."""

    def rename(self, source, destination):
        if source.endswith("-future"):
            raise OSError(5, "injected I/O error", destination)
        super().rename(source, destination)


def test_a_swap_the_target_disk_refuses_puts_the_current_log_back(tmp_path, clock):
    fs = FailingRenameFileSystem(str(tmp_path))
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    m, log = with_log(dirs, clock, fs)
    expected = read_all(log)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    for _ in range(1000):
        if m.copy_to_future_logs(CHUNK_BYTES) or m.future_log(TP) is None:
            break
    assert dirs[1] in m.offline_dirs and m.future_log(TP) is None
    restored = m.get_log(TP)
    assert restored is not log and m.log_dir_of(TP) == dirs[0] and names(dirs[0]) == ["orders-0"]
    assert read_all(restored) == expected and restored.high_watermark == log.high_watermark
    fill(restored, 2, start=700)                 # it serves on
    m.shutdown()
    m = manager(dirs[:1], clock, CrashableFileSystem(str(tmp_path)))
    assert read_all(m.get_log(TP))[:len(expected)] == expected


def test_a_log_starting_inside_a_batch_is_moved_whole(dirs, clock, fs):
    """DeleteRecords left the log start in the middle of a batch: the future log starts
    at that batch's base offset (as a follower would), then at the same log start."""
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(TP)
    for i in range(20):
        log.append_as_leader(batch(*[f"r{i}-{j}" for j in range(3)]), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(31)           # inside the batch 30..32
    expected = read_all(log)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE
    swapped = move(m)
    assert read_all(swapped[TP]) == expected and swapped[TP].log_start_offset == 31


def test_a_copy_that_cannot_go_on_cancels_the_move_not_the_broker(dirs, clock, fs, monkeypatch):
    m, log = with_log(dirs, clock, fs)
    assert m.alter_log_dir(TP, dirs[1], "online") == ErrorCode.NONE

    def refuse(self, current, max_bytes):
        raise InvalidRecordError("the logs disagree")
    monkeypatch.setattr(FutureLog, "catch_up", refuse)
    assert m.copy_to_future_logs(CHUNK_BYTES) == {}
    assert m.future_log(TP) is None and names(dirs[1]) == [] and m.get_log(TP) is log
    assert not m.offline_dirs
