"""The on-disk metadata log as the quorum's Raft log: epochs from the batches'
partitionLeaderEpoch, truncation, LeaderChange entries invisible to metadata
readers, a restart keeping the epochs — and the randomized quorum simulation run
over real files."""

from __future__ import annotations

import random

import pytest

from tidelog.core.clock import ManualClock
from tidelog.metadata.file_log import FileMetadataLog, QuorumStateFile
from tidelog.metadata.records import FeatureLevelRecord
from tidelog.raft.metadata_log import NotLeaderError, RaftMetadataLog
from tidelog.raft.replica import LEADER, RaftReplica
from tidelog.records.batch import read_header

from tests.raft import test_replica


def records(n: int) -> list:
    return [FeatureLevelRecord("test.version", n)]


def test_epochs_come_from_the_batches_and_survive_a_restart(tmp_path):
    log = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    log.append_as_leader(1, [records(1), records(2)])
    log.append_leader_change(3, leader_id=7)
    log.append_as_leader(3, [records(3)])
    assert (log.end_offset, log.last_epoch) == (4, 3)
    assert [log.epoch_at(o) for o in range(4)] == [1, 1, 3, 3]
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)        # no epoch 2: where epoch 1 ends
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(0) == (0, 0)
    log.close()
    reopened = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    assert (reopened.end_offset, reopened.last_epoch, reopened.end_offset_for_epoch(1)) == (4, 3, (1, 2))


def test_metadata_readers_skip_leader_change_entries_and_stop_at_the_high_watermark(tmp_path):
    log = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    log.append_leader_change(1, leader_id=1)
    log.append_as_leader(1, [records(1), records(2)])
    log.log.update_high_watermark(2)
    assert [offset for offset, _ in log.read(0)] == [1]
    assert [offset for offset, _ in log.read(0, end_offset=3)] == [1, 2]


def test_a_follower_appends_the_leaders_entries_and_truncates_a_divergent_tail(tmp_path):
    leader = FileMetadataLog(str(tmp_path / "leader"), ManualClock(), follower=True)
    follower = FileMetadataLog(str(tmp_path / "follower"), ManualClock(), follower=True)
    leader.append_as_leader(1, [records(1), records(2)])
    follower.append_entries(0, leader.read_entries(0, 10))
    follower.append_as_leader(2, [records(99)])        # a deposed leader's write
    leader.append_as_leader(3, [records(3)])
    epoch, end = leader.end_offset_for_epoch(follower.last_epoch)
    assert (epoch, end) == (1, 2)
    follower.truncate_to(end)
    follower.append_entries(2, leader.read_entries(2, 10))
    assert follower.read_entries(0, 10) == leader.read_entries(0, 10)


def test_the_controller_cannot_write_through_a_replica_that_does_not_lead(tmp_path):
    file_log = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    replica = RaftReplica(1, (1, 2, 3), file_log, random.Random(0))
    replica.start(0)
    with pytest.raises(NotLeaderError):
        RaftMetadataLog(replica, file_log).append(records(1))


def test_a_single_voter_leads_at_once_and_commits_on_append(tmp_path):
    file_log = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    replica = RaftReplica(1, (1,), file_log, random.Random(0))
    replica.start(0)
    assert replica.state == LEADER and replica.is_active_leader
    log = RaftMetadataLog(replica, file_log)
    assert log.append(records(1)) == [1]                 # offset 0 is the LeaderChange entry
    assert log.committed_offset == 1 and [o for o, _ in log.read(0)] == [1]


def test_the_quorum_state_file_round_trips(tmp_path):
    state = QuorumStateFile(str(tmp_path), FileMetadataLog(str(tmp_path), ManualClock()).fs)
    assert state.read() is None
    state.write(4, 2, -1, (1, 2, 3))
    assert (state.read()["leaderEpoch"], state.read()["votedId"], state.read()["leaderId"]) == (4, 2, -1)


class FileNet(test_replica.Net):
    """The randomized quorum simulation with each voter's log in real files."""

    def __init__(self, seed: int, directory):
        self.directory = directory
        super().__init__(seed)

    def make_log(self, voter: int):
        return FileMetadataLog(str(self.directory / str(voter)), ManualClock(), follower=True)

    def payload(self, n: int):
        return records(n)

    def entries(self, replica, upto: int | None = None):
        end = replica.log.end_offset if upto is None else upto
        return [batch for _, batch in replica.log.read_entries(0, 1 << 30) if read_header(batch).last_offset < end]


@pytest.mark.parametrize("seed", range(3))
def test_the_randomized_quorum_over_real_files(seed, tmp_path):
    test_replica.run_random_quorum(FileNet(seed, tmp_path), steps=1500)


def test_a_loader_is_caught_up_to_a_committed_leader_change_entry(tmp_path):
    """A broker reports the offset it has read up to (BrokerHeartbeat's
    current_metadata_offset); a LeaderChange entry at the end of the committed log
    must not leave it one short of caught up forever."""
    from tidelog.metadata.loader import MetadataLoader
    file_log = FileMetadataLog(str(tmp_path), ManualClock(), follower=True)
    replica = RaftReplica(1, (1,), file_log, random.Random(0))
    replica.start(0)
    log = RaftMetadataLog(replica, file_log)
    log.append(records(1))
    replica.start(1)                                   # a second election: a LeaderChange at the end
    loader = MetadataLoader(log)
    loader.catch_up()
    assert file_log.end_offset == 3 and log.committed_offset == 2 and loader.image.offset == 2


def test_a_lagging_voter_catches_up_by_snapshot(tmp_path):
    """KIP-630: the leader's log starts at its snapshot; a voter that was down fetches
    below that start, is told the snapshot id, fetches the snapshot (FetchSnapshot),
    installs it and fetches the tail — ending with the leader's log and high watermark."""
    from tidelog.metadata.log import MetadataSnapshot
    from tidelog.raft.replica import RaftConfig
    clock = ManualClock()
    logs = {v: FileMetadataLog(str(tmp_path / str(v)), clock, follower=True, segment_bytes=1024) for v in (1, 2, 3)}
    replicas = {v: RaftReplica(v, (1, 2, 3), logs[v], random.Random(v), RaftConfig(election_timeout_ms=100))
                for v in (1, 2, 3)}
    up = {1, 2}
    now = 0

    def pump(rounds=200):
        nonlocal now
        for _ in range(rounds):
            now += 10
            for v in sorted(up):
                replicas[v].on_tick(now)
            moved = True
            while moved:
                moved = False
                for v in sorted(up):
                    for envelope in replicas[v].take_outbox():
                        if envelope.destination in up:
                            replicas[envelope.destination].on_message(v, envelope.message, now)
                            moved = True
    for v in (1, 2):
        replicas[v].start(now)
    pump()
    leader = next(r for r in replicas.values() if r.state == LEADER)
    for n in range(60):
        leader.append([records(n)])
        pump(2)
    pump(20)
    assert leader.high_watermark == leader.log.end_offset > 60
    snapshot_end = leader.high_watermark
    leader.log.log.update_high_watermark(leader.high_watermark)     # as the driver keeps it
    leader.log.write_snapshot(MetadataSnapshot(snapshot_end - 1, tuple(records(-1))))
    leader.log.delete_before_snapshot()
    assert leader.log.log_start_offset == snapshot_end and len(leader.log.log.segments) >= 1
    for n in range(5):                                  # a tail after the snapshot
        leader.append([records(100 + n)])
        pump(2)
    up.add(3)
    replicas[3].start(now)
    pump(300)
    lagging = replicas[3]
    assert lagging.log.snapshot_id() == leader.log.snapshot_id()
    assert lagging.log.log_start_offset == snapshot_end
    assert lagging.log.read_entries(snapshot_end, 100) == leader.log.read_entries(snapshot_end, 100)
    assert lagging.high_watermark == leader.high_watermark == leader.log.end_offset
    assert [r.records for r in [lagging.log.latest_snapshot()]] == [tuple(records(-1))]
