"""VotersRecord control batches (KIP-853) on the wire and in the metadata logs: the
value round-trips and refuses anything but a whole record; the memory and file logs
index each set, forget it when truncated, carry it in snapshots and (on disk) find
it again after a restart; and the membership scenario runs over real batches."""

from __future__ import annotations

import random
import uuid

import pytest

from tidelog.core.clock import ManualClock
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.log import MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import FeatureLevelRecord
from tidelog.raft.control_records import decode_voters, encode_voters, voters_of_batch, build_voters_batch
from tidelog.raft.memory_log import MemoryMetadataLog
from tidelog.raft.replica import Voter
from tidelog.records.batch import read_header, validate_batch

from tests.raft import test_voter_changes

DIRS = {v: str(uuid.UUID(int=v * 7919)) for v in range(1, 6)}


def voter(v: int) -> Voter:
    return Voter(v, DIRS[v], (("CONTROLLER", f"host-{v}.example", 9090 + v), ("EXTERNAL", "::1", 65535)))


def records(n: int) -> list:
    return [FeatureLevelRecord("test.version", n)]


def test_a_voters_record_round_trips_and_refuses_partial_or_trailing_bytes():
    voters = (voter(1), voter(2), Voter(3, "", ()))
    data = encode_voters(voters)
    assert decode_voters(data) == voters
    for cut in range(len(data)):
        with pytest.raises(MetadataLogError):
            decode_voters(data[:cut])
    with pytest.raises(MetadataLogError, match="after a VotersRecord"):
        decode_voters(data + b"\0")
    with pytest.raises(MetadataLogError, match="version 1"):
        decode_voters(b"\0\1" + data[2:])


def test_a_voters_batch_is_a_valid_control_batch_of_the_epoch():
    batch = build_voters_batch(7, 3, (voter(1),), 1234)
    validate_batch(batch, 0)
    header = read_header(batch, 0)
    assert (header.base_offset, header.partition_leader_epoch, header.is_control) == (7, 3, True)
    assert voters_of_batch(batch) == (voter(1),)


@pytest.fixture(params=["memory", "file"])
def make_log(request, tmp_path):
    opened = []

    def make():
        log = MemoryMetadataLog() if request.param == "memory" else \
            FileMetadataLog(str(tmp_path), ManualClock(0), follower=True)
        opened.append(log)
        return log
    yield make
    for log in opened:
        if hasattr(log, "close"):
            log.close()


def set_high_watermark(log, offset: int) -> None:
    if isinstance(log, MemoryMetadataLog):
        log.high_watermark = offset
    else:
        log.log.update_high_watermark(offset)


def test_the_logs_index_voter_sets_and_forget_truncated_ones(make_log):
    log = make_log()
    assert log.last_voters() is None
    log.append_voters(0, (voter(1),))
    log.append_leader_change(1, 1)
    log.append_as_leader(1, [records(1)])
    log.append_voters(1, (voter(1), voter(2)))
    assert log.last_voters() == (3, (voter(1), voter(2)))
    assert log.voters_before(3) == (voter(1),) and log.voters_before(0) is None
    assert list(log.read(0, end_offset=log.end_offset)) == [(2, records(1)[0])]   # metadata readers skip them
    log.truncate_to(3)
    assert log.last_voters() == (0, (voter(1),))
    copy = make_log() if isinstance(log, MemoryMetadataLog) else MemoryMetadataLog()
    copy.append_entries(0, log.read_entries(0, 10))                   # a follower's copy indexes them too
    assert copy.last_voters() == (0, (voter(1),))


def test_a_snapshot_carries_the_set_in_force_and_a_restart_finds_it(make_log, tmp_path):
    log = make_log()
    log.append_voters(0, (voter(1),))
    log.append_leader_change(1, 1)
    log.append_voters(1, (voter(1), voter(2)))
    log.append_as_leader(1, [records(1), records(2)])
    set_high_watermark(log, 5)
    log.write_snapshot(MetadataSnapshot(4, tuple(records(9))))
    assert log.latest_snapshot().records == tuple(records(9))         # the set is not a metadata record
    log.delete_before_snapshot()
    assert log.last_voters() == (2, (voter(1), voter(2)))
    follower = MemoryMetadataLog()
    follower.install_snapshot(5, 1, log.read_snapshot(log.snapshot_id()))
    assert follower.last_voters() == (4, (voter(1), voter(2)))
    if isinstance(log, FileMetadataLog):
        log.close()
        reopened = FileMetadataLog(str(tmp_path), ManualClock(0), follower=True)
        assert reopened.last_voters() == (4, (voter(1), voter(2)))
        reopened.append_voters(2, (voter(2),))
        reopened.close()
        again = FileMetadataLog(str(tmp_path), ManualClock(0), follower=True)
        assert again.last_voters() == (5, (voter(2),))
        again.close()


class MemoryDynamicNet(test_voter_changes.DynamicNet):
    """The membership scenario with every replica's log a MemoryMetadataLog (real batches)."""

    def make_log(self, node: int):
        log = MemoryMetadataLog()
        if node in self.initial:
            log.append_voters(0, tuple(test_voter_changes.voter(v) for v in self.initial))
        return log

    def payload(self, n: int):
        return records(n)

    def entries(self, replica, upto: int | None = None):
        end = replica.log.end_offset if upto is None else upto
        return [b.data for b in replica.log.batches(0) if b.next_offset <= end]


@pytest.mark.parametrize("seed", (0, 36))
def test_membership_changes_under_faults_over_real_batches(seed):
    net = MemoryDynamicNet(seed=100 + seed, initial=(1, 2, 3), nodes=(1, 2, 3, 4, 5), loss=0.05)
    answers = test_voter_changes.changes_under_faults(net, steps=3000)
    assert answers
    test_voter_changes.heal_and_check(net)
