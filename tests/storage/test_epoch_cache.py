"""The leader-epoch cache: every rule of Kafka's ``LeaderEpochFileCache``, with its edge cases."""

from __future__ import annotations

import os

import pytest

from tidelog.storage.checkpoint import LeaderEpochCheckpointFile
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.epoch_cache import LeaderEpochCache
from tidelog.storage.errors import CheckpointFormatError

UNDEFINED = (-1, -1)


def cache(*entries) -> LeaderEpochCache:
    return LeaderEpochCache(entries)


# -- assign ----------------------------------------------------------------------------


def test_assign_appends_to_an_empty_cache():
    c = cache()
    assert c.assign(2, 10)
    assert c.entries == [(2, 10)] and c.latest_epoch == 2


def test_assign_same_epoch_at_same_or_later_offset_is_a_no_op():
    c = cache((2, 10))
    assert not c.assign(2, 10)
    assert not c.assign(2, 15)
    assert c.entries == [(2, 10)]


def test_assign_same_epoch_at_an_earlier_offset_replaces_the_entry():
    c = cache((1, 0), (2, 10))
    assert c.assign(2, 5)
    assert c.entries == [(1, 0), (2, 5)]


def test_assign_a_newer_epoch_appends():
    c = cache((1, 0), (2, 10))
    assert c.assign(4, 30)
    assert c.entries == [(1, 0), (2, 10), (4, 30)]


def test_assign_removes_trailing_entries_with_a_start_offset_at_or_after_the_new_one():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.assign(5, 10)
    assert c.entries == [(1, 0), (5, 10)]


def test_assign_an_older_epoch_removes_every_newer_entry():
    # Kafka removes trailing entries with epoch >= new epoch, so an older epoch wins.
    c = cache((1, 0), (3, 10), (4, 20))
    assert c.assign(2, 30)
    assert c.entries == [(1, 0), (2, 30)]


def test_assign_newer_epoch_at_an_older_offset_drops_what_overlaps():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.assign(4, 15)
    assert c.entries == [(1, 0), (2, 10), (4, 15)]


def test_assign_rejects_negative_values():
    with pytest.raises(ValueError):
        cache().assign(-1, 0)
    with pytest.raises(ValueError):
        cache().assign(0, -1)


# -- end_offset_for ----------------------------------------------------------------------


def test_end_offset_for_undefined_epoch():
    assert cache((1, 0)).end_offset_for(-1, 100) == UNDEFINED


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset():
    c = cache((1, 0), (3, 10))
    assert c.end_offset_for(3, 42) == (3, 42)


def test_end_offset_for_an_empty_cache_is_undefined():
    assert cache().end_offset_for(0, 10) == UNDEFINED
    assert cache().end_offset_for(5, 10) == UNDEFINED


def test_end_offset_for_an_epoch_above_the_latest_is_undefined():
    assert cache((1, 0), (3, 10)).end_offset_for(7, 42) == UNDEFINED


def test_end_offset_for_an_epoch_below_the_first_gives_the_first_start_offset():
    # Kafka answers (requested epoch, start of the first higher epoch).
    assert cache((3, 10), (5, 20)).end_offset_for(1, 42) == (1, 10)


def test_end_offset_for_a_known_middle_epoch():
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(1, 42) == (1, 10)
    assert c.end_offset_for(3, 42) == (3, 20)


def test_end_offset_for_an_epoch_the_cache_never_saw_uses_the_floor_epoch():
    c = cache((1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(2, 42) == (1, 10)
    assert c.end_offset_for(4, 42) == (3, 20)


# -- truncation ----------------------------------------------------------------------------


def test_truncate_from_end_removes_entries_starting_at_or_after_the_offset():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.truncate_from_end(10)
    assert c.entries == [(1, 0)]


def test_truncate_from_end_keeps_an_entry_starting_before_the_offset():
    c = cache((1, 0), (2, 10))
    assert not c.truncate_from_end(11)
    assert c.entries == [(1, 0), (2, 10)]


def test_truncate_from_end_negative_is_a_no_op():
    c = cache((1, 0))
    assert not c.truncate_from_end(-1)
    assert c.entries == [(1, 0)]


def test_truncate_from_end_to_zero_empties():
    c = cache((1, 0), (2, 10))
    assert c.truncate_from_end(0)
    assert c.entries == []


def test_truncate_from_start_moves_the_first_kept_epoch_up():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.truncate_from_start(15)
    assert c.entries == [(2, 15), (3, 20)]


def test_truncate_from_start_at_an_entry_start_keeps_that_entry():
    c = cache((1, 0), (2, 10), (3, 20))
    assert c.truncate_from_start(10)
    assert c.entries == [(2, 10), (3, 20)]


def test_truncate_from_start_past_every_entry_keeps_the_last_epoch_at_the_offset():
    c = cache((1, 0), (2, 10))
    assert c.truncate_from_start(50)
    assert c.entries == [(2, 50)]


def test_truncate_from_start_before_the_first_entry_is_a_no_op():
    c = cache((2, 10))
    assert not c.truncate_from_start(5)
    assert not c.truncate_from_start(10)  # re-inserting (2, 10) changes nothing
    assert not c.truncate_from_start(-1)
    assert c.entries == [(2, 10)]


def test_epoch_for_offset():
    c = cache((1, 0), (3, 10))
    assert c.epoch_for_offset(0) == 1
    assert c.epoch_for_offset(9) == 1
    assert c.epoch_for_offset(10) == 3
    assert c.epoch_for_offset(1000) == 3
    assert cache((2, 5)).epoch_for_offset(4) is None


def test_clear():
    c = cache((1, 0))
    c.clear()
    assert c.entries == [] and c.latest_epoch is None


# -- persistence -------------------------------------------------------------------------


def test_every_change_is_written_to_the_checkpoint_and_survives_a_crash(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = os.path.join(str(tmp_path), "leader-epoch-checkpoint")
    c = LeaderEpochCache.load(LeaderEpochCheckpointFile(fs, path))
    c.assign(1, 0)
    c.assign(3, 10)
    c.truncate_from_start(5)
    fs.crash()
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == b"0\n2\n1 5\n3 10\n"
    assert LeaderEpochCache.load(LeaderEpochCheckpointFile(fs, path)).entries == [(1, 5), (3, 10)]


def test_no_op_changes_do_not_rewrite_the_file(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = os.path.join(str(tmp_path), "leader-epoch-checkpoint")
    c = LeaderEpochCache.load(LeaderEpochCheckpointFile(fs, path))
    c.assign(1, 0)
    mtime = os.stat(path).st_mtime_ns
    os.utime(path, ns=(0, 0))
    c.assign(1, 7)
    c.truncate_from_end(5)
    assert os.stat(path).st_mtime_ns == 0
    assert mtime


def test_a_checkpoint_out_of_order_is_rejected(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n2\n3 10\n2 20\n")
    fs = CrashableFileSystem(str(tmp_path))
    with pytest.raises(CheckpointFormatError, match="not increasing"):
        LeaderEpochCache.load(LeaderEpochCheckpointFile(fs, str(path)))
