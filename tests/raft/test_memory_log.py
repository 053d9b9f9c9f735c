"""The in-memory metadata log (raft/memory_log.py) answers exactly as the on-disk one:
the same operations on both give the same offsets, epochs, entries (byte for
byte) and metadata records; and the randomized quorum runs over it."""

from __future__ import annotations

import random

import pytest

from tidelog.core.clock import ManualClock
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.log import MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import FeatureLevelRecord
from tidelog.raft.memory_log import MemoryMetadataLog
from tidelog.raft.metadata_log import RaftMetadataLog
from tidelog.raft.replica import LEADER, RaftReplica
from tidelog.records.batch import read_header

from tests.raft import test_replica


def records(n: int, count: int = 1) -> list:
    return [FeatureLevelRecord(f"test.version.{i}", n) for i in range(count)]


def test_epochs_entries_and_metadata_reads():
    log = MemoryMetadataLog()
    log.append_leader_change(1, leader_id=7)
    log.append_as_leader(1, [records(1, 2), records(2)])
    log.append_leader_change(3, leader_id=8)
    log.append_as_leader(3, [records(3)])
    assert (log.end_offset, log.last_epoch) == (6, 3)
    assert [log.epoch_at(o) for o in range(6)] == [1, 1, 1, 1, 3, 3]
    assert log.end_offset_for_epoch(2) == (1, 4)       # no epoch 2: where epoch 1 ends
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(0) == (0, 0)
    log.high_watermark = 4
    assert [o for o, _ in log.read(0)] == [1, 2, 3]     # the LeaderChange batches hold no records
    assert [o for o, _ in log.read(2, end_offset=6)] == [2, 3, 5]
    assert log.committed_offset == 3
    entries = log.read_entries(1, 2)
    assert [(epoch, read_header(data).base_offset) for epoch, data in entries] == [(1, 1), (1, 3)]
    assert log.read_bytes(1, 4) == entries[0][1] + entries[1][1]
    assert (log.batch_at(2).base_offset, log.batch_at(6)) == (1, None)


def test_truncation_drops_whole_batches_and_is_recorded():
    log = MemoryMetadataLog()
    log.append_as_leader(1, [records(1, 3), records(2)])
    log.high_watermark = 4
    log.truncate_to(2)                                  # inside the first batch: it goes whole
    assert (log.end_offset, log.high_watermark, log.truncations) == (0, 0, [2])
    with pytest.raises(MetadataLogError):
        log.append_entries(5, [])


def test_a_broker_copy_appends_fetched_batches_and_commits_to_the_leaders_high_watermark():
    leader, copy = MemoryMetadataLog(), MemoryMetadataLog()
    leader.append_leader_change(1, 1)
    leader.append_as_leader(1, [records(1), records(2)])
    assert copy.append_fetched(leader.read_bytes(0, 2), 2) == 2
    assert copy.committed_offset == 1 and [o for o, _ in copy.read(0)] == [1]
    assert copy.append_fetched(leader.read_bytes(0, 3), 3) == 3    # a repeated batch is skipped
    assert [o for o, _ in copy.read(0)] == [1, 2]


def test_snapshots_restart_the_log_at_their_end():
    log = MemoryMetadataLog()
    log.append_leader_change(2, 1)
    log.append_as_leader(2, [records(1), records(2)])
    log.high_watermark = 3
    log.write_snapshot(MetadataSnapshot(2, tuple(records(9))))
    assert log.snapshot_id() == (3, 2) and log.latest_snapshot().records == tuple(records(9))
    log.delete_before_snapshot()
    assert (log.log_start_offset, log.end_offset, log.last_epoch, log.epoch_at(1)) == (3, 3, 2, 2)
    follower = MemoryMetadataLog()
    follower.install_snapshot(3, 2, log.read_snapshot((3, 2)))
    assert (follower.log_start_offset, follower.end_offset, follower.high_watermark) == (3, 3, 3)
    with pytest.raises(MetadataLogError):
        log.write_snapshot(MetadataSnapshot(5, ()))      # past the committed offset


@pytest.mark.parametrize("seed", range(8))
def test_the_same_operations_give_the_same_answers_as_the_file_log(seed, tmp_path):
    rng = random.Random(seed)
    memory = MemoryMetadataLog()
    disk = FileMetadataLog(str(tmp_path), ManualClock(0), follower=True)
    epoch = 1
    for step in range(120):
        op = rng.random()
        if op < 0.1:
            epoch += rng.choice([1, 2])
            for log in (memory, disk):
                log.append_leader_change(epoch, leader_id=step % 3)
        elif op < 0.7:
            payloads = [records(step, rng.randint(1, 3)) for _ in range(rng.randint(1, 2))]
            for log in (memory, disk):
                log.append_as_leader(epoch, payloads)
        elif op < 0.8 and memory.end_offset:
            cut = rng.randrange(memory.end_offset + 1)
            for log in (memory, disk):
                log.truncate_to(cut)
        hw = rng.randint(0, memory.end_offset)
        memory.high_watermark = hw
        disk.log.update_high_watermark(hw)
        assert memory.end_offset == disk.end_offset
        assert memory.last_epoch == disk.last_epoch
        assert [memory.epoch_at(o) for o in range(memory.end_offset)] == \
            [disk.epoch_at(o) for o in range(disk.end_offset)]
        for asked in range(epoch + 2):
            assert memory.end_offset_for_epoch(asked) == disk.end_offset_for_epoch(asked), asked
        start = rng.randint(0, memory.end_offset)
        assert memory.read_entries(start, 5) == disk.read_entries(start, 5)
        assert list(memory.read(0)) == list(disk.read(0))
        assert list(memory.read(start, end_offset=memory.end_offset)) == \
            list(disk.read(start, end_offset=disk.end_offset))
    disk.close()


def test_a_single_voter_commits_on_append_through_the_controllers_seam():
    log = MemoryMetadataLog()
    replica = RaftReplica(1, (1,), log, random.Random(0))
    replica.start(0)
    assert replica.state == LEADER and replica.is_active_leader
    seam = RaftMetadataLog(replica, log)
    assert seam.append(records(1)) == [1]
    assert seam.committed_offset == 1 and [o for o, _ in seam.read(0)] == [1]


class MemoryNet(test_replica.Net):
    """The randomized quorum simulation with each voter's log a MemoryMetadataLog."""

    def make_log(self, voter: int):
        return MemoryMetadataLog()

    def payload(self, n: int):
        return records(n)

    def entries(self, replica, upto: int | None = None):
        end = replica.log.end_offset if upto is None else upto
        return [b.data for b in replica.log.batches(0) if b.next_offset <= end]


@pytest.mark.parametrize("seed", range(3))
def test_the_randomized_quorum_over_the_memory_log(seed):
    test_replica.run_random_quorum(MemoryNet(seed), steps=2000)
