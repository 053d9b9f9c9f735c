"""LogManager: log directories, restarts, checkpoints, clean shutdown, offline directories."""

from __future__ import annotations

import logging
import os

import pytest

from tidelog.core.errors import StorageError
from tidelog.core.ids import TopicPartition
from tidelog.records import SimpleRecord
from tidelog.records.batch import build_batch
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.errors import DuplicateLogError, LogDirLockedError, OfflineLogDirError
from tidelog.storage.log_manager import LogManager
from tidelog.storage.segment import LogSegment

from .conftest import batch, read_all

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=100)
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b-x", 0)


@pytest.fixture
def dirs(tmp_path) -> list[str]:
    return [str(tmp_path / "d1"), str(tmp_path / "d2")]


def manager(dirs, clock, fs) -> LogManager:
    return LogManager(dirs, clock, fs, default_config=CONFIG)


def fill(log, count: int, epoch: int = 0) -> None:
    for i in range(count):
        log.append_as_leader(batch(f"{log.topic_partition}-{i}" * 4), leader_epoch=epoch)


def test_new_logs_go_to_the_directory_with_the_fewest_partitions(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    for p in range(4):
        m.get_or_create_log(TopicPartition("t", p))
    assert sorted(len(m.logs_in_dir(d)) for d in m.log_dirs) == [2, 2]
    assert m.log_dir_of(TopicPartition("t", 0)) == dirs[0]
    assert m.log_dir_of(TopicPartition("t", 1)) == dirs[1]
    assert m.get_or_create_log(TopicPartition("t", 0)) is m.get_log(TopicPartition("t", 0))
    assert os.path.isdir(os.path.join(dirs[1], "t-1"))
    assert m.get_log(TopicPartition("t", 9)) is None


def test_a_clean_restart_finds_every_log_and_skips_recovery(dirs, clock, fs, monkeypatch, caplog):
    m = manager(dirs, clock, fs)
    for tp in (A0, A1, B0):
        log = m.get_or_create_log(tp)
        fill(log, 30)
        log.update_high_watermark(20)
    m.get_log(A0).maybe_increment_log_start_offset(15)
    expected = {tp: read_all(m.get_log(tp)) for tp in (A0, A1, B0)}
    m.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                     "replication-offset-checkpoint"):
            assert os.path.exists(os.path.join(d, name))
    assert open(os.path.join(dirs[0], "log-start-offset-checkpoint")).read().startswith("0\n")

    monkeypatch.setattr(LogSegment, "recover", lambda *a, **k: pytest.fail("recovery after a clean shutdown"))
    with caplog.at_level(logging.INFO):
        m = manager(dirs, clock, fs)
    assert {log.topic_partition for log in m.all_logs()} == {A0, A1, B0}
    for tp in (A0, A1, B0):
        log = m.get_log(tp)
        assert read_all(log) == expected[tp]
        assert (log.log_end_offset, log.high_watermark) == (30, 20)
    assert m.get_log(A0).log_start_offset == 15
    assert not any(os.path.exists(os.path.join(d, ".kafka_cleanshutdown")) for d in dirs)
    assert any("clean shutdown" in r.getMessage() for r in caplog.records)


def test_an_unclean_restart_recovers_from_the_checkpointed_recovery_points(dirs, clock, fs, caplog):
    m = LogManager(dirs, clock, fs)  # default 1 GiB segments: no roll, nothing fsynced by one
    log = m.get_or_create_log(A0)
    fill(log, 10)
    log.flush()
    m.checkpoint_recovery_points()
    fill(log, 5)  # unflushed, lost in the crash
    fs.crash()
    with caplog.at_level(logging.INFO):
        m = LogManager(dirs, clock, fs)
    log = m.get_log(A0)
    assert log.log_end_offset == 10 and log.recovery_point == 10
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_a_truncation_below_the_checkpointed_recovery_point_rewrites_the_checkpoint(dirs, clock, fs):
    """Simulator seed 20116: a follower truncated below the recovery point its directory's
    checkpoint held, fetched the same offsets again (unsynced) and lost power; at
    restart the stale checkpoint (1,288, above the log end 434) made the loader trust
    segments that had lost their tails, and the broker later sat in the ISR without
    offset 533. The checkpoint never claims more than the log holds after a truncation,
    as Kafka's LogManager.truncateTo checkpoints the directories it truncated in."""
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(A0)
    fill(log, 30)
    log.flush()
    m.checkpoint_recovery_points()
    path = os.path.join(dirs[0], "recovery-point-offset-checkpoint")
    assert open(path).read() == "0\n1\na 0 30\n"
    log.truncate_to(25)                                   # above nothing on disk yet: one write
    assert open(path).read() == "0\n1\na 0 25\n"
    log.truncate_to(5)
    assert open(path).read() == "0\n1\na 0 5\n"
    fill(log, 20)                                         # offsets 5..24 again, not flushed
    fs.crash()
    m = manager(dirs, clock, fs)
    log = m.get_log(A0)
    assert log.recovery_point <= log.log_end_offset
    assert [offset for offset, _ in read_all(log)] == list(range(log.log_end_offset))   # no hole
    other = m.get_or_create_log(A1)
    fill(other, 3)
    before = os.stat(os.path.join(dirs[1], "recovery-point-offset-checkpoint")).st_mtime_ns
    other.truncate_to(1)                                  # not in its checkpoint: nothing to lower
    assert os.stat(os.path.join(dirs[1], "recovery-point-offset-checkpoint")).st_mtime_ns == before


def test_checkpoint_files_hold_each_directorys_partitions(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    for tp in (A0, A1):
        fill(m.get_or_create_log(tp), 3)
        m.get_log(tp).flush()
    m.checkpoint_recovery_points()
    m.checkpoint_log_start_offsets()
    m.write_high_watermarks({A0: 2, A1: 1, TopicPartition("elsewhere", 0): 9})
    assert open(os.path.join(dirs[0], "recovery-point-offset-checkpoint")).read() == "0\n1\na 0 3\n"
    assert open(os.path.join(dirs[1], "recovery-point-offset-checkpoint")).read() == "0\n1\na 1 3\n"
    assert open(os.path.join(dirs[0], "log-start-offset-checkpoint")).read() == "0\n1\na 0 0\n"
    assert open(os.path.join(dirs[1], "replication-offset-checkpoint")).read() == "0\n1\na 1 1\n"
    assert m.read_high_watermarks() == {A0: 2, A1: 1}


def test_high_watermark_on_restart_is_the_checkpoint_clamped_to_the_log_end(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(A0)
    fill(log, 10)
    log.flush()
    m.checkpoint_recovery_points()
    m.write_high_watermarks({A0: 500})
    fs.crash()
    m = manager(dirs, clock, fs)
    assert m.get_log(A0).high_watermark == 10


def test_deleted_logs_are_gone_and_leftover_delete_dirs_are_cleaned(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    fill(m.get_or_create_log(A0), 3)
    m.get_or_create_log(A1)
    m.delete_log(A0)
    assert m.get_log(A0) is None and sorted(os.listdir(dirs[0])) == [".lock", "meta.properties"]
    m.shutdown()
    os.makedirs(os.path.join(dirs[1], "a-7.0123abcd-delete"))
    m = manager(dirs, clock, fs)
    assert {log.topic_partition for log in m.all_logs()} == {A1}
    assert not os.path.exists(os.path.join(dirs[1], "a-7.0123abcd-delete"))


def test_unrelated_directories_are_skipped(dirs, clock, fs):
    for name in ("lost+found", "__cluster_metadata-0", "a-0-future", "notapartition"):
        os.makedirs(os.path.join(dirs[0], name))
    m = manager(dirs, clock, fs)
    assert m.all_logs() == []


def test_a_directory_failing_at_runtime_goes_offline_and_the_others_keep_working(dirs, clock, fs, caplog):
    m = manager(dirs, clock, fs)
    healthy, doomed = m.get_or_create_log(A0), m.get_or_create_log(A1)  # d1, d2
    fill(healthy, 3)
    fill(doomed, 3)
    fs.fail(dirs[1])
    with caplog.at_level(logging.ERROR), pytest.raises(StorageError):
        doomed.append_as_leader(batch("x"), leader_epoch=0)
    assert m.offline_dirs == {dirs[1]}
    assert m.offline_partitions == {A1}
    assert m.get_log(A1) is None
    with pytest.raises(OfflineLogDirError):
        doomed.read(0, 100)
    with pytest.raises(OfflineLogDirError):
        m.get_or_create_log(A1)
    fill(healthy, 2)
    new = m.get_or_create_log(B0)
    assert m.log_dir_of(B0) == dirs[0]
    fill(new, 1)
    m.flush_all()
    m.checkpoint_recovery_points()
    assert any("offline" in r.getMessage() for r in caplog.records)
    m.shutdown()
    assert os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))


def test_a_directory_failing_at_start_is_offline_and_the_others_load(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    fill(m.get_or_create_log(A0), 2)
    fill(m.get_or_create_log(A1), 2)
    m.shutdown()
    fs.fail(dirs[1])
    m = manager(dirs, clock, fs)
    assert m.offline_dirs == {dirs[1]}
    assert [log.topic_partition for log in m.all_logs()] == [A0]


def test_each_directory_has_a_lasting_id_and_a_failed_one_is_reported_by_it(dirs, clock, fs):
    """KIP-858: the ``directory.id`` of each ``meta.properties`` (written at the first
    load when missing, other lines kept) survives restarts; a directory that fails
    moves from ``directory_ids`` to ``offline_directory_ids``; a new, empty disk gets
    a new id."""
    os.makedirs(dirs[1])
    with open(os.path.join(dirs[1], "meta.properties"), "w") as f:
        f.write("version=1\ncluster.id=abc\nnode.id=3\n")
    m = manager(dirs, clock, fs)
    ids = {d: m.directory_id(d) for d in dirs}
    assert None not in ids.values() and len(set(ids.values())) == 2
    assert m.directory_ids == tuple(sorted(ids.values())) and m.offline_directory_ids == ()
    text = open(os.path.join(dirs[1], "meta.properties")).read()
    assert text.startswith("version=1\ncluster.id=abc\nnode.id=3\ndirectory.id=")
    fill(m.get_or_create_log(A0), 1)
    fill(m.get_or_create_log(A1), 1)
    assert m.placements() == {A0: ids[dirs[0]], A1: ids[dirs[1]]}
    m.shutdown()
    m = manager(dirs, clock, fs)
    assert {d: m.directory_id(d) for d in dirs} == ids
    fs.fail(dirs[1])
    with pytest.raises(StorageError):
        m.get_log(A1).append_as_leader(batch("x"), leader_epoch=0)
    assert m.directory_ids == (ids[dirs[0]],) and m.offline_directory_ids == (ids[dirs[1]],)
    assert m.placements()[A1] == ids[dirs[1]]          # where its log was, offline or not
    m.shutdown()
    replaced = [dirs[0], dirs[1] + "-new-disk"]
    m = manager(replaced, clock, fs)
    assert m.directory_id(replaced[0]) == ids[dirs[0]]
    assert m.directory_id(replaced[1]) not in (None, ids[dirs[1]])


def test_a_malformed_checkpoint_takes_only_its_directory_offline(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    fill(m.get_or_create_log(A0), 2)
    fill(m.get_or_create_log(A1), 2)
    m.shutdown()
    with open(os.path.join(dirs[1], "recovery-point-offset-checkpoint"), "w") as f:
        f.write("0\n2\na 1 2\n")
    m = manager(dirs, clock, fs)
    assert m.offline_dirs == {dirs[1]} and m.get_log(A0) is not None


EMPTIED_CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                       "log-start-offset-checkpoint", "leader-epoch-checkpoint")


@pytest.mark.parametrize("names", [(name,) for name in EMPTIED_CHECKPOINTS] + [EMPTIED_CHECKPOINTS],
                         ids=[*EMPTIED_CHECKPOINTS, "all"])
def test_a_directory_with_empty_checkpoint_files_starts_online(dirs, clock, fs, caplog, names):
    """A crash can leave 0-byte checkpoint files (the rename is atomic; on some file
    systems the data is not): Kafka reads them as empty, so the directory starts
    online and the logs load, with what the empty files would have said lost."""
    m = manager(dirs, clock, fs)
    partition_dirs = {}
    for tp in (A0, A1):                               # one in each directory
        log = m.get_or_create_log(tp)
        fill(log, 6, epoch=3)
        log.update_high_watermark(4)
        partition_dirs[tp] = log.directory
    expected = {tp: read_all(m.get_log(tp)) for tp in (A0, A1)}
    m.shutdown()
    emptied = [os.path.join(d, name) for d in dirs for name in names if name != "leader-epoch-checkpoint"]
    if "leader-epoch-checkpoint" in names:
        emptied += [os.path.join(d, "leader-epoch-checkpoint") for d in partition_dirs.values()]
    for path in emptied:
        assert os.path.getsize(path) > 0, path
        open(path, "wb").close()
    with caplog.at_level(logging.WARNING):
        m = manager(dirs, clock, fs)
    assert m.offline_dirs == frozenset() and m.offline_partitions == frozenset()
    for tp in (A0, A1):
        log = m.get_log(tp)
        assert read_all(log) == expected[tp]
        assert (log.log_start_offset, log.log_end_offset) == (0, 6)
    assert m.read_high_watermarks() == ({} if "replication-offset-checkpoint" in names else {A0: 4, A1: 4})
    assert sum("empty" in r.getMessage() for r in caplog.records) >= len(emptied)
    m.write_high_watermarks({A0: 4, A1: 5})
    m.checkpoint_recovery_points()
    assert m.read_high_watermarks() == {A0: 4, A1: 5}


def test_a_locked_directory_refuses_a_second_manager(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    with pytest.raises(LogDirLockedError):
        LogManager(dirs[1:], clock, CrashableFileSystem(os.path.dirname(dirs[0])), default_config=CONFIG)
    m.shutdown()
    LogManager(dirs[1:], clock, fs, default_config=CONFIG).shutdown()


def test_a_partition_in_two_directories_refuses_to_start(dirs, clock, fs):
    m = manager(dirs, clock, fs)
    m.get_or_create_log(A0)
    m.shutdown()
    os.makedirs(os.path.join(dirs[1], "a-0"))
    with pytest.raises(DuplicateLogError):
        manager(dirs, clock, fs)
    os.rmdir(os.path.join(dirs[1], "a-0"))
    manager(dirs, clock, fs).shutdown()  # the locks were released


def test_retention_runs_over_every_log(dirs, clock, fs):
    m = LogManager(dirs, clock, fs, default_config=LogConfig(segment_bytes=1024, retention_bytes=0))
    log = m.get_or_create_log(A0)
    fill(log, 60)
    log.update_high_watermark(log.log_end_offset)
    assert m.delete_old_segments() > 0
    assert log.log_start_offset > 0


def test_topic_configs_apply_per_topic(dirs, clock, fs):
    m = LogManager(dirs, clock, fs, default_config=CONFIG,
                   topic_configs={"b-x": LogConfig(segment_bytes=2048)})
    assert m.get_or_create_log(B0).config.segment_bytes == 2048
    assert m.get_or_create_log(A0).config.segment_bytes == 1024
    assert m.get_or_create_log(A1, LogConfig(segment_bytes=4096)).config.segment_bytes == 4096


def test_flush_dirty_logs_flushes_only_what_is_due(dirs, clock, fs):
    m = LogManager(dirs, clock, fs, default_config=LogConfig(flush_ms=1000),
                   topic_configs={"b-x": LogConfig()})
    fill(m.get_or_create_log(A0), 2)
    fill(m.get_or_create_log(B0), 2)
    clock.advance(1000)
    assert m.flush_dirty_logs() == 1
    assert m.get_log(A0).recovery_point == 2 and m.get_log(B0).recovery_point == 0


def test_flush_dirty_logs_sees_a_flush_ms_set_later_and_logs_created_later(dirs, clock, fs):
    """The logs with a flush.ms are listed once, not walked every tick: a config change
    and a new log must still be seen."""
    m = LogManager(dirs, clock, fs, default_config=LogConfig(), topic_configs={"b-x": LogConfig(flush_ms=1000)})
    fill(m.get_or_create_log(A0), 2)
    clock.advance(1000)
    assert m.flush_dirty_logs() == 0
    m.get_log(A0).update_config(LogConfig(flush_ms=1000))
    assert m.flush_dirty_logs() == 1 and m.get_log(A0).recovery_point == 2
    fill(m.get_or_create_log(B0), 2)
    clock.advance(1000)
    assert m.flush_dirty_logs() == 1 and m.get_log(B0).recovery_point == 2
    m.get_log(A0).update_config(LogConfig())
    fill(m.get_log(A0), 1)
    clock.advance(1000)
    assert m.flush_dirty_logs() == 0 and m.get_log(A0).recovery_point == 2


def test_topic_ids_are_kept_in_partition_metadata_and_a_failed_write_only_takes_the_directory_offline(
        dirs, clock, fs):
    import uuid
    m = manager(dirs, clock, fs)
    m.get_or_create_log(A0)
    m.get_or_create_log(A1)
    topic_id = uuid.UUID(int=42)
    assert m.topic_id_of(A0) is None                    # a log from before the file existed
    m.record_topic_id(A0, topic_id)
    with open(os.path.join(m.get_log(A0).directory, "partition.metadata")) as f:
        assert f.read() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAKg\n"   # Kafka's base64 form
    m.shutdown()
    m = manager(dirs, clock, fs)
    assert m.topic_id_of(A0) == topic_id
    fs.fail(m.log_dir_of(A1))
    m.record_topic_id(A1, topic_id)                     # no exception: the directory goes offline
    assert A1 in m.offline_partitions


def test_a_new_log_is_listed_durably_by_its_first_flush_not_when_it_is_created(dirs, clock, fs):
    """Creating a log fsyncs nothing: a broker taking 1,000 new partitions at once spent
    ~20 s of its event loop in the six fsyncs of each (its directory, its first segment,
    ``partition.metadata``, its epoch checkpoint) and was fenced. Until the log's first flush nothing in it is
    durable, so a power cut may take the whole log away and loses nothing acknowledged
    as durable; the first flush lists the directory, the segment and
    ``partition.metadata`` durably with the data, before the recovery point moves."""
    import uuid
    topic_id = uuid.UUID(int=42)
    m = manager(dirs, clock, fs)
    fill(m.get_or_create_log(A0), 3)
    m.record_topic_id(A0, topic_id)
    log = m.get_or_create_log(A1)
    fill(log, 3)
    m.record_topic_id(A1, topic_id)
    log.flush()
    fs.crash()
    assert not os.path.exists(os.path.join(dirs[0], "a-0"))     # never flushed: gone, as if never made
    m = manager(dirs, clock, fs)
    assert m.get_log(A0) is None
    assert [offset for offset, _ in read_all(m.get_log(A1))] == [0, 1, 2]
    assert m.topic_id_of(A1) == topic_id
    log = m.get_or_create_log(A0)                                  # made again, empty
    assert log.log_end_offset == 0
    m.shutdown()                 # an empty log syncs nothing; the checkpoints' fsync may list it
    fs.crash()
    m = manager(dirs, clock, fs)
    assert m.get_log(A0) is None or m.get_log(A0).log_end_offset == 0
    assert m.get_log(A1).log_end_offset == 3


def test_a_new_logs_epoch_checkpoint_waits_for_its_first_flush_and_recovery_rebuilds_lost_epochs(
        dirs, clock, fs, monkeypatch):
    """A new leader's first ``leader-epoch-checkpoint`` write is not fsynced either (it
    was the last two fsyncs per partition at creation); the first flush syncs it. A
    crash can then leave batches without their epochs in the file (the kernel may
    write a page of the segment back and not the file), so a recovery rebuilds, as
    Kafka's ``LogSegment.recover`` does, every newer epoch it finds in the batches."""
    synced = []
    monkeypatch.setattr(fs, "fsync_dir", lambda path, real=fs.fsync_dir: synced.append(path) or real(path))
    m = manager(dirs, clock, fs)
    synced.clear()
    log = m.get_or_create_log(A0)
    log.assign_leader_epoch(3, 0)
    assert synced == []                                            # created, led: no fsync
    fill(log, 3, epoch=3)
    log.assign_leader_epoch(5, 3)
    fill(log, 2, epoch=5)
    log.flush()
    assert os.path.join(dirs[0], "a-0") in synced and dirs[0] in synced
    log.assign_leader_epoch(7, 5)                                  # after the first flush: durable at once
    fill(log, 1, epoch=7)
    log.flush()
    fs.crash()
    m = manager(dirs, clock, fs)
    assert [tuple(e) for e in m.get_log(A0).leader_epoch_cache.entries] == [(3, 0), (5, 3), (7, 5)]
    # The file empty (what a crash may leave of an unsynced write) and nothing flushed:
    # the recovery scans every batch and finds the three epochs again.
    m.shutdown()
    for name in ("a-0/leader-epoch-checkpoint", "recovery-point-offset-checkpoint"):
        open(os.path.join(dirs[0], name), "w").close()
    os.remove(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    log = manager(dirs, clock, fs).get_log(A0)
    assert log.log_end_offset == 6 and log.recovery_point == 0
    assert [tuple(e) for e in log.leader_epoch_cache.entries] == [(3, 0), (5, 3), (7, 5)]


def test_a_loaded_log_writes_its_topic_id_durably_at_once(dirs, clock, fs):
    """Only a new log defers: one loaded from disk writes ``partition.metadata`` with its
    fsyncs, so a crash right after keeps it (a mistake once made every log defer)."""
    import uuid
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(A0)
    fill(log, 2)
    log.flush()
    m.shutdown()
    m = manager(dirs, clock, fs)
    assert not m.get_log(A0).defers_entries
    m.record_topic_id(A0, uuid.UUID(int=7))
    fs.crash()
    assert manager(dirs, clock, fs).topic_id_of(A0) == uuid.UUID(int=7)


def test_a_flush_failing_on_a_dying_disk_takes_the_log_offline(dirs, clock, fs):
    """``Log.flush`` (and a new log's deferred entries with it) answers an I/O error as
    every log call does: StorageError, the directory offline, no OSError escaping."""
    m = manager(dirs, clock, fs)
    log = m.get_or_create_log(A0)
    fill(log, 2)
    fs.fail(dirs[0])
    with pytest.raises(StorageError):
        log.flush()
    assert log.is_offline and dirs[0] in m.offline_dirs


def test_a_partition_deleted_while_its_rolls_flush_runs_leaves_its_directory_online(dirs, clock, fs):
    """A roll's background flush that ends after its partition was deleted (or moved to
    another directory) has nothing left to list: the log is closed. Before, it fsynced the
    removed directory, failed, and took the whole log directory offline."""
    from .test_log_recovery import QueuedBackground, fill_until_roll
    background = QueuedBackground()
    m = LogManager(dirs, clock, fs, default_config=CONFIG, background=background)
    log = m.get_or_create_log(A0)
    fill_until_roll(log)
    assert background.queued
    m.delete_log(A0)
    background.run_all()
    assert m.offline_dirs == frozenset() and not m.offline_partitions
    fill(m.get_or_create_log(A1), 3)


def test_a_new_log_rolling_again_before_its_first_flush_runs_leaves_no_hole_after_a_power_cut(dirs, clock, fs):
    """Simulator seed 42622: a new log's first flush ran on the background runner after
    two more rolls, and its deferred fsync of the log's directory listed the later
    segment files while the data of the one before them was not synced: a power cut
    left segment 12 empty and segment 26 listed, the log ended at 26 with offsets 12..25
    missing, and the broker rejoined the ISR with a hole. The log's own directory is now
    listed as every roll lists it (after the data before the newest file, by the latest
    roll's flush), and until then no offset counts as durable."""
    from .test_log_recovery import QueuedBackground, fill_until_roll
    background = QueuedBackground()
    m = LogManager(dirs, clock, fs, default_config=CONFIG, background=background)
    log = m.get_or_create_log(A0)
    fill_until_roll(log, fill_until_roll(log, fill_until_roll(log)))
    assert len(background.queued) == 3
    work, done = background.queued.pop(0)                   # only the first roll's flush runs
    work()
    done(None)
    assert log.recovery_point == 0                           # nothing is durably listed yet
    fs.crash()
    m = LogManager(dirs, clock, fs, default_config=CONFIG)
    recovered = m.get_log(A0)
    offsets = [offset for offset, _ in read_all(recovered)] if recovered is not None else []
    assert offsets == list(range(len(offsets)))
    assert recovered is None or recovered.log_end_offset == len(offsets)    # no hole before the end

    background = QueuedBackground()                          # all three flushes run: everything stays
    m = LogManager([d + "-2" for d in dirs], clock, fs, default_config=CONFIG, background=background)
    log = m.get_or_create_log(A0)
    end = fill_until_roll(log, fill_until_roll(log, fill_until_roll(log)))
    background.run_all()
    assert log.recovery_point == end
    fs.crash()
    m = LogManager([d + "-2" for d in dirs], clock, fs, default_config=CONFIG)
    assert [offset for offset, _ in read_all(m.get_log(A0))] == list(range(end))


def test_a_durable_write_in_a_log_directory_while_a_roll_flushes_leaves_no_hole_after_a_power_cut(dirs, clock, fs):
    """Simulator seed 43860: while a roll's flush was still in flight, a leader-epoch
    checkpoint written durably fsynced the log's directory, listing the segments rolled
    since — 541 and 553 — while 541's data was not synced; a power cut left 541 empty
    and 553 listed, a hole. A durable write in the directory first syncs the rolled
    segments' data."""
    from .test_log_recovery import QueuedBackground, fill_until_roll
    background = QueuedBackground()
    m = LogManager(dirs, clock, fs, default_config=CONFIG, background=background)
    log = m.get_or_create_log(A0)
    base = fill_until_roll(log)
    background.run_all()                                     # the new log's first flush: listed
    base = fill_until_roll(log, fill_until_roll(log, base))  # two rolls, their flushes queued
    assert background.queued
    log.assign_leader_epoch(3, log.log_end_offset)            # a durable checkpoint write
    fs.crash()
    m = LogManager(dirs, clock, fs, default_config=CONFIG)
    recovered = m.get_log(A0)
    offsets = [offset for offset, _ in read_all(recovered)]
    assert offsets == list(range(len(offsets))) and recovered.log_end_offset == len(offsets)
    assert len(offsets) >= base                              # what was synced for the write stays


def test_deleting_or_truncating_segments_while_a_roll_flushes_syncs_the_rolled_data_first(dirs, clock, fs):
    """The hazard of seed 43860 in the other directory fsyncs that are not a roll's:
    retention deleting the oldest segment, or a truncation deleting the newest, lists the
    segment files rolled since, so the rolled segments' data is synced first (else a
    crash may keep a later file while the data before it is gone). Fails without
    ``LocalLog.sync_rolled_segments`` before those fsyncs."""
    from .test_log_recovery import QueuedBackground, fill_until_roll
    for action in ("retention", "truncation"):
        background = QueuedBackground()
        directories = [f"{d}-{action}" for d in dirs]
        m = LogManager(directories, clock, fs, default_config=CONFIG, background=background)
        log = m.get_or_create_log(A0)
        first = fill_until_roll(log)
        background.run_all()                                 # the new log's first flush: listed
        second = fill_until_roll(log, first)
        base = fill_until_roll(log, second)                  # two rolls, their flushes queued
        assert len(background.queued) == 2
        if action == "retention":
            log.update_high_watermark(log.log_end_offset)
            log.maybe_increment_log_start_offset(first)      # deletes the first segment, durably
            start, kept = first, base
        else:
            log.truncate_to(second + 1)                      # deletes the newest segment, durably
            start, kept = 0, second + 1
        fs.crash()
        m = LogManager(directories, clock, fs, default_config=CONFIG)
        recovered = m.get_log(A0)
        offsets = [offset for offset, _ in read_all(recovered)]
        assert offsets == list(range(start, start + len(offsets))), action
        assert start + len(offsets) >= kept, (action, len(offsets))     # the rolled data is durable


# -- compacted logs: contiguous segments (docs/storage.md, "Recovery") ---------------------

COMPACTED = LogConfig(segment_bytes=1024, index_interval_bytes=100, cleanup_policy=("compact",))
CLEANER_SETTINGS = {"log.cleaner.enable": True, "log.cleaner.dedupe.buffer.size": 1 << 20,
                    "log.cleaner.io.buffer.size": 1 << 16, "log.cleaner.backoff.ms": 0}
C0 = TopicPartition("c", 0)


def fill_keyed(log, rounds: int, keys: int = 3) -> None:
    for r in range(rounds):
        for k in range(keys):
            log.append_as_leader(build_batch([SimpleRecord(f"v{r}-{k}".encode() * 8, f"key-{k}".encode())]),
                                 leader_epoch=0)


def test_the_cleaner_swaps_segments_only_below_the_recovery_point_on_disk(dirs, clock, fs, caplog):
    """A cleaned segment may end before the next one begins, which recovery takes for a
    lost tail above the recovery point: before the cleaner's first swap, the directory's
    checkpoint is written up to the pass's end, so after a power cut the cleaned
    segments are trusted, not checked, and the whole cleaned log comes back."""
    m = LogManager(dirs, clock, fs, default_config=CONFIG, topic_configs={"c": COMPACTED})
    log = m.get_or_create_log(C0)
    fill_keyed(log, 40)
    log.update_high_watermark(log.log_end_offset)
    path = os.path.join(m.log_dir_of(C0), "recovery-point-offset-checkpoint")
    assert not os.path.exists(path) or " 0 " not in open(path).read().split("\n", 2)[2]
    while m.clean_logs(CLEANER_SETTINGS):
        pass
    cleaned_to = log.cleaner_checkpoint
    assert cleaned_to > 0
    ends = [(s.read_next_offset()[0], n.base_offset) for s, n in zip(log.segments, log.segments[1:])
            if n.base_offset <= cleaned_to]
    assert any(end < base for end, base in ends)      # cleaned segments that end before the next begins
    before = read_all(log)
    fs.crash()
    with caplog.at_level(logging.ERROR):
        m = LogManager(dirs, clock, fs, default_config=CONFIG, topic_configs={"c": COMPACTED})
    assert not [r for r in caplog.records if "ends short" in r.getMessage()]
    recovered = read_all(m.get_log(C0))
    assert recovered == before[:len(recovered)]
    assert len(recovered) >= len([r for r in before if r[0] < cleaned_to])
    on_disk = {line.split()[0]: int(line.split()[2]) for line in open(path).read().splitlines()[2:]}
    assert on_disk["c"] >= cleaned_to


def meta_properties(log_dir: str) -> str:
    return open(os.path.join(log_dir, "meta.properties")).read()


def test_a_directory_an_earlier_tidelog_stopped_uncleanly_keeps_its_compacted_logs_gaps(dirs, clock, fs):
    """``tidelog.contiguous.segments`` in meta.properties: a new directory gets it at once.
    One without it that holds logs and was not stopped cleanly (written by an earlier
    tidelog, whose compacted followers rolled across gaps) recovers its compacted logs
    without the contiguity rule, and gets the key at its next clean shutdown; one
    stopped cleanly gets it at its start."""
    m = LogManager(dirs, clock, fs, default_config=CONFIG, topic_configs={"c": COMPACTED})
    assert all("tidelog.contiguous.segments=true" in meta_properties(d) for d in dirs)
    log = m.get_or_create_log(C0)
    fill_keyed(log, 12)
    log.flush()
    log_dir = m.log_dir_of(C0)
    middle = log.segments[1]
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    fs.crash()
    os.truncate(middle.log.path, 0)                   # a gap an earlier tidelog's follower could have left
    for d in dirs:
        text = meta_properties(d).replace("tidelog.contiguous.segments=true\n", "")
        with open(os.path.join(d, "meta.properties"), "w") as f:
            f.write(text)
    m = LogManager(dirs, clock, fs, default_config=CONFIG, topic_configs={"c": COMPACTED})
    assert [s.base_offset for s in m.get_log(C0).segments] == bases          # kept: may be a legitimate gap
    assert "contiguous" not in meta_properties(log_dir)
    other = [d for d in dirs if d != log_dir][0]
    assert "tidelog.contiguous.segments=true" in meta_properties(other)     # held no log: marked at once
    m.shutdown()
    assert "tidelog.contiguous.segments=true" in meta_properties(log_dir)
