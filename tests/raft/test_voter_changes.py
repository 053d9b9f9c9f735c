"""Dynamic voters (KIP-853) in the Raft core: the voter set is the log's latest
VotersRecord (even uncommitted), a leader makes one change at a time, an added voter
first catches up as an observer, the majority is counted on the new set from the
record's append on, a leader that removed itself resigns once that is committed —
and under a randomized network with a voter killed mid-change there is still one
leader per epoch and no committed entry is ever lost."""

from __future__ import annotations

import random
import uuid

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.raft.replica import LEADER, FOLLOWER, RaftConfig, RaftLog, RaftReplica, Voter, VotersRecord

from tests.raft.test_replica import Net

TIMEOUT_MS = 60_000


def directory(v: int) -> str:
    return str(uuid.UUID(int=v))


def voter(v: int) -> Voter:
    return Voter(v, directory(v), (("CONTROLLER", "localhost", 9000 + v),))


class DynamicNet(Net):
    """``Net`` over a dynamic quorum: ``initial`` voters formatted with their
    VotersRecord as the log's first entry (``--initial-controllers``), the other
    ``nodes`` formatted empty (``--no-initial-controllers``), knowing only the
    bootstrap servers; nothing is lost unless ``loss`` says so."""

    def __init__(self, seed: int, initial=(1, 2, 3), nodes=(1, 2, 3, 4), loss: float = 0.0):
        self.initial, self.loss = initial, loss
        super().__init__(seed, voters=tuple(nodes))

    def make_log(self, node: int) -> RaftLog:
        log = RaftLog()
        if node in self.initial:
            log.append_voters(0, tuple(voter(v) for v in self.initial))
        return log

    def _boot(self, v: int) -> RaftReplica:
        replica = RaftReplica(v, (), self.logs[v], random.Random(self.rng.random()),
                              RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600, fetch_interval_ms=20),
                              kraft_version=1, directory_id=directory(v), bootstrap_servers=self.initial)
        replica.start(self.now, self.states[v])
        return replica

    def run_until(self, condition, steps: int = 3000) -> None:
        for _ in range(steps):
            if condition():
                return
            self.step()
        raise AssertionError("the condition never held")

    def results(self) -> dict:
        out = {}
        for replica in self.replicas.values():
            out.update(replica.take_voter_change_results())
        return out


def settled_leader(net: DynamicNet) -> RaftReplica:
    net.run_until(lambda: net.leader() is not None and net.leader().is_active_leader)
    return net.leader()


def test_the_voter_set_is_the_logs_latest_voters_record_even_uncommitted_and_follows_truncation():
    log = RaftLog()
    log.append_voters(0, (voter(1),))
    replica = RaftReplica(2, (), log, random.Random(0), kraft_version=1)
    assert replica.voters == (1,) and replica.voters_offset == 0
    log.append_as_leader(1, ["a"])
    log.append_voters(1, (voter(1), voter(2)))
    replica._refresh_voters()
    assert replica.voters == (1, 2) and replica.voters_offset == 2 and replica.majority == 2
    log.truncate_to(2)
    replica._refresh_voters()
    assert replica.voters == (1,) and replica.voters_offset == 0
    static = RaftReplica(1, (1, 2, 3), RaftLog(), random.Random(0))
    assert static.voters == (1, 2, 3) and static.voters_offset == -1 and static.kraft_version == 0


def test_an_added_voter_catches_up_first_then_counts_in_the_new_majority():
    net = DynamicNet(seed=1)
    leader = settled_leader(net)
    net.down.add(4)                                     # the new controller is not up yet
    end = leader.log.end_offset
    assert leader.add_voter(voter(4), net.now, TIMEOUT_MS, token="add-4") == ErrorCode.NONE
    for _ in range(200):
        net.step()
    assert leader.log.end_offset == end and leader.voters == (1, 2, 3), "added before it caught up"
    net.down.discard(4)
    net.run_until(lambda: leader.voters == (1, 2, 3, 4))
    record_offset = leader.voters_offset
    assert leader.log.entries[record_offset] == (leader.epoch, VotersRecord(tuple(voter(v) for v in (1, 2, 3, 4))))
    assert leader.majority == 3
    net.run_until(lambda: "add-4" in (results := net.results()) or None)
    net.run_until(lambda: net.replicas[4].voters == (1, 2, 3, 4) and net.replicas[4].state == FOLLOWER)
    assert leader.high_watermark > record_offset
    # The new set's majority (3 of 4): with two of the old voters down, nothing commits.
    followers = [v for v in (2, 3) if v != leader.node_id] + ([1] if leader.node_id != 1 else [])
    net.down.update(followers[:2])
    hw = leader.high_watermark
    leader.append(["x"])
    for _ in range(60):
        net.step()
    assert leader.high_watermark == hw


def test_the_add_answers_once_committed():
    net = DynamicNet(seed=2)
    leader = settled_leader(net)
    assert leader.add_voter(voter(4), net.now, TIMEOUT_MS, token="t") == ErrorCode.NONE
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "t" in answers)
    assert answers["t"] == ErrorCode.NONE
    assert leader.high_watermark > leader.voters_offset and leader.voters == (1, 2, 3, 4)


def test_the_majority_is_counted_on_the_new_set_once_the_record_is_appended():
    """Remove voter 3 of {1, 2, 3} while the other remaining voter is down: the
    record is not committed although the old set's majority (the leader and 3) has it."""
    net = DynamicNet(seed=3, nodes=(1, 2, 3))
    leader = settled_leader(net)
    others = sorted(v for v in (1, 2, 3) if v != leader.node_id)
    remaining, removed = others
    net.run_until(lambda: all(net.replicas[v].log.end_offset == leader.log.end_offset for v in others))
    net.down.add(remaining)
    assert leader.remove_voter(removed, directory(removed), net.now, TIMEOUT_MS, token="r") == ErrorCode.NONE
    record_offset = leader.voters_offset
    assert leader.voters == tuple(sorted((leader.node_id, remaining)))
    net.run_until(lambda: net.replicas[removed].log.end_offset > record_offset)
    leader.append(["x"])                                  # the leader's own progress, counted as well
    net.run_until(lambda: net.replicas[removed].log.end_offset == leader.log.end_offset)
    leader.append(["y"])
    for _ in range(40):
        net.step()
    assert leader.high_watermark <= record_offset, "committed by the old set's majority"
    net.down.discard(remaining)
    net.replicas[remaining] = net._boot(remaining)
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "r" in answers)
    assert answers["r"] == ErrorCode.NONE and leader.high_watermark > record_offset


def test_bad_changes_are_refused_with_kafkas_errors_and_change_nothing():
    net = DynamicNet(seed=4)
    leader = settled_leader(net)
    follower = next(r for v, r in net.replicas.items() if v in (1, 2, 3) and r is not leader)
    before = list(leader.log.entries)
    v = leader.node_id
    assert leader.add_voter(voter(v), net.now, TIMEOUT_MS) == ErrorCode.DUPLICATE_VOTER
    assert leader.add_voter(Voter(4, ""), net.now, TIMEOUT_MS) == ErrorCode.INVALID_REQUEST
    assert leader.remove_voter(9, directory(9), net.now, TIMEOUT_MS) == ErrorCode.VOTER_NOT_FOUND
    assert leader.remove_voter(v, directory(99), net.now, TIMEOUT_MS) == ErrorCode.VOTER_NOT_FOUND
    assert leader.update_voter(Voter(v, directory(99)), net.now, TIMEOUT_MS) == ErrorCode.VOTER_NOT_FOUND
    assert follower.add_voter(voter(4), net.now, TIMEOUT_MS) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.log.entries == before and leader.voters == (1, 2, 3)
    # One uncommitted change at a time: a second one waits (Kafka answers REQUEST_TIMED_OUT).
    net.down.update(r.node_id for r in net.replicas.values() if r is not leader)
    assert leader.remove_voter(follower.node_id, directory(follower.node_id), net.now, TIMEOUT_MS) == ErrorCode.NONE
    after_first = list(leader.log.entries)
    assert leader.add_voter(voter(4), net.now, TIMEOUT_MS) == ErrorCode.REQUEST_TIMED_OUT
    assert leader.remove_voter(v, directory(v), net.now, TIMEOUT_MS) == ErrorCode.REQUEST_TIMED_OUT
    assert leader.log.entries == after_first
    # Static voters (controller.quorum.voters, kraft.version 0) cannot change.
    static = Net(5)
    static_leader = None
    for _ in range(3000):
        static.step()
        static_leader = static.leader()
        if static_leader is not None and static_leader.is_active_leader:
            break
    assert static_leader.add_voter(voter(4), static.now, TIMEOUT_MS) == ErrorCode.UNSUPPORTED_VERSION


def test_removing_the_last_voter_is_refused():
    log = RaftLog()
    log.append_voters(0, (voter(1),))
    replica = RaftReplica(1, (), log, random.Random(0), kraft_version=1, directory_id=directory(1))
    replica.start(0)
    replica.on_tick(10_000)
    assert replica.state == LEADER and replica.is_active_leader
    assert replica.remove_voter(1, directory(1), 10, TIMEOUT_MS) == ErrorCode.VOTER_NOT_FOUND
    assert replica.voters == (1,)


def test_a_leader_that_removes_itself_resigns_once_committed_and_follows_the_new_leader():
    net = DynamicNet(seed=6, nodes=(1, 2, 3))
    leader = settled_leader(net)
    old, old_epoch = leader.node_id, leader.epoch
    assert leader.remove_voter(old, directory(old), net.now, TIMEOUT_MS, token="self") == ErrorCode.NONE
    assert leader.state == LEADER and not leader.is_voter      # leads until the removal commits
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "self" in answers)
    assert answers["self"] == ErrorCode.NONE
    net.run_until(lambda: net.leader() is not None and net.leader().node_id != old
                  and net.replicas[old].state == FOLLOWER and net.replicas[old].leader_id == net.leader().node_id)
    new = net.leader()
    assert new.voters == tuple(v for v in (1, 2, 3) if v != old) and new.epoch > old_epoch
    new.append(["after"])
    net.run_until(lambda: net.replicas[old].high_watermark == new.log.end_offset)   # an observer now


def test_a_controller_started_with_only_bootstrap_servers_finds_the_leader_and_can_become_leader():
    net = DynamicNet(seed=7)
    leader = settled_leader(net)
    newcomer = net.replicas[4]
    assert newcomer.voters == () and newcomer.kraft_version == 1
    net.run_until(lambda: newcomer.state == FOLLOWER and newcomer.log.end_offset == leader.log.end_offset)
    assert newcomer.leader_id == leader.node_id and newcomer.voters == (1, 2, 3)   # learnt from the log
    assert leader.add_voter(voter(4), net.now, TIMEOUT_MS, token="t") == ErrorCode.NONE
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "t" in answers)
    # Remove the three first voters one by one, the leader among them: 4 ends up leading alone.
    for gone in (1, 2, 3):
        net.run_until(lambda: net.leader() is not None and net.leader().is_active_leader
                      and net.leader().high_watermark > net.leader().voters_offset)
        current = net.leader()
        assert current.remove_voter(gone, directory(gone), net.now, TIMEOUT_MS, token=gone) == ErrorCode.NONE
        net.run_until(lambda: answers.update(net.results()) or gone in answers)
        assert answers[gone] == ErrorCode.NONE
    net.run_until(lambda: net.leader() is newcomer and newcomer.is_active_leader)
    assert newcomer.voters == (4,)


def changes_under_faults(net: DynamicNet, steps: int) -> dict:
    """Random voter changes while messages are lost and delayed, links cut and nodes
    killed — the voter being added or removed among them, mid-change."""
    rng, written, answers, asked = net.rng, 0, {}, 0
    nodes = tuple(net.replicas)
    for step in range(steps):
        net.step()
        answers.update(net.results())
        if rng.random() < 0.01:
            pair = frozenset(rng.sample(nodes, 2))
            net.cut.symmetric_difference_update({pair})
        if rng.random() < 0.006:
            v = rng.choice(nodes)
            if v in net.down:
                net.down.discard(v)
                net.replicas[v] = net._boot(v)
            elif len(net.down) < 1:
                net.down.add(v)
        leader = net.leader()
        if leader is None:
            continue
        if rng.random() < 0.2:
            written += 1
            leader.append([net.payload(written)])
        if rng.random() < 0.05:
            asked += 1
            target = rng.choice(nodes)
            if target in leader.voters:
                leader.remove_voter(target, directory(target), net.now, 2000, token=asked)
            else:
                leader.add_voter(voter(target), net.now, 2000, token=asked)
            if leader._voter_change is not None and rng.random() < 0.5 and not net.down:
                net.down.add(target)                # killed mid-change
        net.deliver_all(leader)
    return answers


@pytest.mark.parametrize("seed", (0, 36, 49, 52, *range(20, 28)))
def test_membership_changes_under_faults_keep_one_leader_per_epoch_and_every_committed_entry(seed):
    net = DynamicNet(seed=100 + seed, initial=(1, 2, 3), nodes=(1, 2, 3, 4, 5), loss=0.05)
    answers = changes_under_faults(net, steps=4000)
    assert ErrorCode.NONE in answers.values(), "no change was ever committed"
    heal_and_check(net)


def heal_and_check(net: DynamicNet) -> None:
    """Heal: everyone up, no cuts; a leader of the final voter set commits everything,
    every node (voter or observer) holds the same log and the same voter set."""
    net.cut.clear()
    for v in list(net.down):
        net.down.discard(v)
        net.replicas[v] = net._boot(v)
    net.run_until(lambda: (leader := net.leader()) is not None and leader.is_voter
                  and all(r.log.end_offset == leader.log.end_offset and r.high_watermark == leader.log.end_offset
                          for r in net.replicas.values()), steps=6000)
    leader = net.leader()
    assert all(net.entries(r) == net.entries(leader) for r in net.replicas.values())
    assert all(r.voters == leader.voters for r in net.replicas.values())
    assert len(net.committed) <= leader.high_watermark


def test_an_add_naming_another_directory_than_the_fetchers_times_out_and_appends_nothing():
    """The replica fetching as node 4 has directory(4); an AddRaftVoter naming another
    directory id never sees that replica caught up: REQUEST_TIMED_OUT, log unchanged."""
    net = DynamicNet(seed=8)
    leader = settled_leader(net)
    net.run_until(lambda: net.replicas[4].state == FOLLOWER)
    end = leader.log.end_offset
    assert leader.add_voter(Voter(4, directory(44)), net.now, 2000, token="wrong") == ErrorCode.NONE
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "wrong" in answers)
    assert answers["wrong"] == ErrorCode.REQUEST_TIMED_OUT
    assert leader.log.end_offset == end and leader.voters == (1, 2, 3)
    assert leader.add_voter(voter(4), net.now, TIMEOUT_MS, token="right") == ErrorCode.NONE   # free again


def test_a_voter_updates_its_endpoints_once_committed():
    net = DynamicNet(seed=9)
    leader = settled_leader(net)
    v = next(r.node_id for r in net.replicas.values() if r is not leader and r.is_voter)
    moved = Voter(v, directory(v), (("CONTROLLER", "elsewhere", 19092),))
    assert leader.update_voter(moved, net.now, TIMEOUT_MS, token="u") == ErrorCode.NONE
    answers: dict = {}
    net.run_until(lambda: answers.update(net.results()) or "u" in answers)
    assert answers["u"] == ErrorCode.NONE
    net.run_until(lambda: all(moved in r.voter_set for r in net.replicas.values()))
    assert leader.voters == (1, 2, 3)
