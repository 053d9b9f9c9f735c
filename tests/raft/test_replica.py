"""The Raft core under a randomized network: messages delayed, dropped and
partitioned, voters crashing (keeping their log and quorum-state) — and after
every step: at most one leader per epoch, and no entry below a voter's high
watermark ever changes (committed entries are never lost or rewritten)."""

from __future__ import annotations

import heapq
import random

import pytest

from tidelog.raft.replica import (
    LEADER,
    FetchRequest,
    QuorumStateRecord,
    RaftConfig,
    RaftLog,
    RaftReplica,
)


class Net:
    loss = 0.05                                    # each message's chance of being lost

    def __init__(self, seed: int, voters=(1, 2, 3)):
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list = []
        self.seq = 0
        self.voters = voters
        self.logs = {v: self.make_log(v) for v in voters}
        self.states = {v: None for v in voters}
        self.replicas = {v: self._boot(v) for v in voters}
        self.down: set[int] = set()
        self.cut: set[frozenset] = set()
        self.leaders: dict[int, int] = {}          # epoch -> leader
        self.committed: list = []                  # the longest committed prefix seen

    def make_log(self, voter: int):
        return RaftLog()

    def payload(self, n: int):
        return f"record-{n}"

    def entries(self, replica, upto: int | None = None) -> list:
        """The replica's log entries (below offset ``upto``), comparable across voters."""
        return replica.log.entries[:upto]

    def _boot(self, v: int) -> RaftReplica:
        replica = RaftReplica(v, self.voters, self.logs[v], random.Random(self.rng.random()),
                              RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600, fetch_interval_ms=20))
        replica.start(self.now, self.states[v])
        return replica

    def deliver_all(self, replica: RaftReplica) -> None:
        if replica.quorum_state_changed:
            self.states[replica.node_id] = replica.quorum_state()     # persisted before sending
        for envelope in replica.take_outbox():
            if self.rng.random() < self.loss or frozenset((envelope.source, envelope.destination)) in self.cut:
                continue                                              # lost
            self.seq += 1
            heapq.heappush(self.queue, (self.now + self.rng.randrange(1, 30), self.seq, envelope))

    def step(self) -> None:
        self.now += 5
        while self.queue and self.queue[0][0] <= self.now:
            _, _, envelope = heapq.heappop(self.queue)
            if envelope.destination in self.down:
                continue
            replica = self.replicas[envelope.destination]
            replica.on_message(envelope.source, envelope.message, self.now)
            self.deliver_all(replica)
        for v, replica in self.replicas.items():
            if v not in self.down:
                replica.on_tick(self.now)
                self.deliver_all(replica)
        self.check()

    def check(self) -> None:
        for v, replica in self.replicas.items():
            if v in self.down:
                continue
            if replica.state == LEADER:
                holder = self.leaders.setdefault(replica.epoch, v)
                assert holder == v, f"epoch {replica.epoch} has two leaders: {holder} and {v}"
            committed = self.entries(replica, replica.high_watermark)
            shorter, longer = sorted((committed, self.committed), key=len)
            assert longer[:len(shorter)] == shorter, f"node {v} committed {committed} vs {self.committed}"
            if len(committed) > len(self.committed):
                self.committed = list(committed)

    def leader(self):
        up = [r for v, r in self.replicas.items() if v not in self.down and r.state == LEADER]
        return up[0] if len(up) == 1 else None


@pytest.mark.parametrize("seed", range(30))
def test_one_leader_per_epoch_and_committed_entries_never_change(seed):
    run_random_quorum(Net(seed), steps=3000)


def run_random_quorum(net: Net, steps: int) -> None:
    written = 0
    for step in range(steps):
        net.step()
        rng = net.rng
        if rng.random() < 0.01:                      # a partition between two voters, or its end
            pair = frozenset(rng.sample(net.voters, 2))
            net.cut.symmetric_difference_update({pair})
        if rng.random() < 0.004:                     # a crash (log and quorum-state kept) or a restart
            v = rng.choice(net.voters)
            if v in net.down:
                net.down.discard(v)
                net.replicas[v] = net._boot(v)
            elif len(net.down) == 0:
                net.down.add(v)
        leader = net.leader()
        if leader is not None and rng.random() < 0.2:
            written += 1
            leader.append([net.payload(written)])
            net.deliver_all(leader)
    # Heal: everything up, no cuts; the quorum elects a leader and commits everything it has.
    net.cut.clear()
    for v in list(net.down):
        net.down.discard(v)
        net.replicas[v] = net._boot(v)
    for _ in range(2000):
        net.step()
        leader = net.leader()
        if leader is not None and all(r.high_watermark == leader.log.end_offset
                                      and r.log.end_offset == leader.log.end_offset for r in net.replicas.values()):
            break
    leader = net.leader()
    assert leader is not None, "no leader after healing"
    assert all(net.entries(r) == net.entries(leader) for r in net.replicas.values())
    assert leader.high_watermark == leader.log.end_offset
    assert len(net.leaders) >= 1 and written > 0


def test_a_vote_is_given_once_per_epoch_and_survives_a_restart():
    log = RaftLog()
    voter = RaftReplica(2, (1, 2, 3), log, random.Random(0))
    voter.start(0)
    from tidelog.raft.replica import VoteRequest
    voter.on_message(1, VoteRequest(5, 1, 0, 0), 10)
    assert [e.message.granted for e in voter.take_outbox()] == [True]
    persisted = voter.quorum_state()
    assert persisted == QuorumStateRecord(5, 1, -1)
    restarted = RaftReplica(2, (1, 2, 3), log, random.Random(1))
    restarted.start(20, persisted)
    restarted.on_message(3, VoteRequest(5, 3, 0, 0), 30)
    assert [e.message.granted for e in restarted.take_outbox()] == [False]


def test_a_follower_with_a_diverging_tail_truncates_to_the_leaders_epoch_end():
    leader_log, follower_log = RaftLog(), RaftLog()
    leader_log.append_as_leader(1, ["a", "b"])
    leader_log.append_as_leader(3, ["c"])
    follower_log.append_as_leader(1, ["a", "b"])
    follower_log.append_as_leader(2, ["x", "y"])                       # written by a deposed leader of epoch 2
    leader = RaftReplica(1, (1, 2, 3), leader_log, random.Random(0), state=LEADER, epoch=3, leader_id=1)
    leader.on_message(2, FetchRequest(3, 2, 4, 2), 0)
    answer = leader.take_outbox()[0].message
    assert answer.diverging == (1, 2)                        # epoch 2 is unknown: it ends where epoch 1 ends
    follower = RaftReplica(2, (1, 2, 3), follower_log, random.Random(0), state="Follower", epoch=3, leader_id=1)
    follower.on_message(1, answer, 1)
    assert follower_log.entries == [(1, "a"), (1, "b")]


def test_a_new_leader_commits_earlier_epochs_entries_only_with_one_of_its_own():
    """Raft's Figure 8: entries of an earlier epoch held by a majority are not yet
    committed; only once the leader's own first entry (its LeaderChange) reaches a
    majority does the high watermark move — and then past all of them."""
    from tidelog.raft.replica import VoteResponse
    log = RaftLog()
    log.append_as_leader(1, ["a"])
    log.append_as_leader(2, ["b"])              # written by a leader of epoch 2 that died
    replica = RaftReplica(3, (1, 2, 3), log, random.Random(0), RaftConfig(election_timeout_ms=100))
    replica.start(0, QuorumStateRecord(2, -1, -1))
    replica.on_tick(1000)                      # election timeout: ask for pre-votes
    replica.on_message(1, VoteResponse(2, True, pre_vote=True), 1001)
    replica.on_message(1, VoteResponse(3, True), 1002)
    assert replica.state == LEADER and replica.epoch == 3 and log.end_offset == 3   # a, b, its LeaderChange
    replica.on_message(1, FetchRequest(3, 1, 2, 2), 1003)        # voter 1 holds a and b
    assert replica.high_watermark == 0                           # a majority has b, but b is not committed
    replica.on_message(1, FetchRequest(3, 1, 3, 3), 1004)        # and now the leader's own entry
    assert replica.high_watermark == 3


def test_a_leader_refused_by_a_voter_at_a_newer_epoch_moves_to_that_epoch():
    """Seed 41654: voter 3 had stood alone at epoch 4 behind a partition; the epoch-3
    leader's BeginQuorumEpoch was refused (FENCED_LEADER_EPOCH) for ever, and voter 3's
    pre-votes, at 4, moved nobody. The answer to a BeginQuorumEpoch or EndQuorumEpoch
    carries the voter's epoch and leader, as Kafka's do, and a newer epoch there moves
    the sender to it."""
    from tidelog.core.errors import ErrorCode
    from tidelog.raft.replica import NO_LEADER, UNATTACHED, BeginQuorumEpoch, QuorumEpochResponse

    voter_log = RaftLog()
    voter_log.append_as_leader(3, ["a"])
    voter = RaftReplica(3, (1, 2, 3), voter_log, random.Random(0), state=UNATTACHED, epoch=4)
    assert voter.on_message(1, BeginQuorumEpoch(3, 1), 0) == ErrorCode.FENCED_LEADER_EPOCH
    answer = QuorumEpochResponse(voter.epoch, voter.leader_id, ErrorCode.FENCED_LEADER_EPOCH)

    leader_log = RaftLog()
    leader_log.append_as_leader(3, ["a"])
    leader = RaftReplica(1, (1, 2, 3), leader_log, random.Random(0), state=LEADER, epoch=3, leader_id=1)
    leader.on_message(3, QuorumEpochResponse(3, 1), 1)              # its own epoch: nothing moves
    assert (leader.state, leader.epoch) == (LEADER, 3)
    leader.on_message(3, answer, 2)
    assert (leader.state, leader.epoch, leader.leader_id) == (UNATTACHED, 4, NO_LEADER)

    follower = RaftReplica(1, (1, 2, 3), RaftLog(), random.Random(0), state=LEADER, epoch=3, leader_id=1)
    follower.on_message(3, QuorumEpochResponse(5, 2, ErrorCode.FENCED_LEADER_EPOCH), 1)
    assert (follower.state, follower.epoch, follower.leader_id) == ("Follower", 5, 2)


def test_the_driver_reads_the_epoch_and_leader_from_a_quorum_epoch_answer():
    """``RaftDriver`` feeds the replica what a voter's BeginQuorumEpoch /
    EndQuorumEpoch answer says (its partition entry), and nothing from a top-level
    refusal or an error code it does not know."""
    from types import SimpleNamespace

    from tidelog.core.errors import ErrorCode
    from tidelog.raft.replica import QuorumEpochResponse
    from tidelog.server.raft_driver import RaftDriver

    def answer(error_code=0, partitions=None):
        return SimpleNamespace(error_code=error_code, topics=[SimpleNamespace(partitions=partitions or [])])

    entry = SimpleNamespace(error_code=int(ErrorCode.FENCED_LEADER_EPOCH), leader_id=-1, leader_epoch=4)
    assert RaftDriver._quorum_epoch_reply(answer(partitions=[entry])) == \
        QuorumEpochResponse(4, -1, ErrorCode.FENCED_LEADER_EPOCH)
    assert RaftDriver._quorum_epoch_reply(answer(error_code=int(ErrorCode.INCONSISTENT_CLUSTER_ID))) is None
    assert RaftDriver._quorum_epoch_reply(answer()) is None
    assert RaftDriver._quorum_epoch_reply(answer(partitions=[SimpleNamespace(error_code=30000, leader_id=1,
                                                                             leader_epoch=9)])) is None


def test_a_quorum_epoch_answer_that_cannot_be_true_moves_nothing():
    """An answer above ``MAX_EPOCH``, or one carrying an error other than an older epoch
    (a voter that refused the request for another reason), is dropped: it cannot push a
    leader to an epoch no voter holds."""
    from tidelog.core.errors import ErrorCode
    from tidelog.raft.replica import MAX_EPOCH, QuorumEpochResponse

    for answer in (QuorumEpochResponse(MAX_EPOCH + 1, 2, ErrorCode.FENCED_LEADER_EPOCH),
                   QuorumEpochResponse(-5, 2, ErrorCode.FENCED_LEADER_EPOCH),
                   QuorumEpochResponse(9, 2, ErrorCode.INVALID_REQUEST),
                   QuorumEpochResponse(9, 2, ErrorCode.INCONSISTENT_VOTER_SET)):
        leader = RaftReplica(1, (1, 2, 3), RaftLog(), random.Random(0), state=LEADER, epoch=3, leader_id=1)
        leader.on_message(2, answer, 1)
        assert (leader.state, leader.epoch) == (LEADER, 3), answer
