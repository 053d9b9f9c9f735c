"""Forged Raft input at the sans-I/O replica: what a client that can reach the
controller listener (plaintext, no authentication) may send, and what it must not
achieve. A refused request changes nothing and persists nothing; no epoch that
cannot be encoded or incremented is ever taken; a quorum flooded with forgeries
still has (or elects again) a leader; a ``quorum-state`` left behind by the old
attack (epoch 2**31 - 1) does not brick a voter."""

from __future__ import annotations

import random

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.raft.replica import (
    FOLLOWER,
    LEADER,
    MAX_EPOCH,
    MAX_EPOCH_JUMP,
    UNATTACHED,
    BeginQuorumEpoch,
    EndQuorumEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    QuorumStateRecord,
    RaftConfig,
    RaftLog,
    RaftReplica,
    VoteRequest,
    VoteResponse,
    quorum_state_problem,
)

from tests.raft.test_replica import Net

INT32_MAX = 2**31 - 1
VOTERS = (1, 2, 3)
ANSWERS = (VoteResponse, FetchResponse, FetchSnapshotResponse)


def state_of(replica: RaftReplica) -> tuple:
    return replica.epoch, replica.voted_for, replica.leader_id, replica.state


def follower(epoch=5, leader=1, node_id=2, log_epochs=(1, 3, 5)) -> RaftReplica:
    log = RaftLog()
    for e in log_epochs:
        log.append_as_leader(e, [f"entry-{e}"])
    replica = RaftReplica(node_id, VOTERS, log, random.Random(0), RaftConfig(election_timeout_ms=100))
    replica.start(0, QuorumStateRecord(epoch, -1, leader))
    replica.take_outbox()
    assert replica.state == FOLLOWER and not replica.quorum_state_changed
    return replica


def forge(replica: RaftReplica, claimed: int, message, now_ms: int = 1) -> ErrorCode:
    """Send ``message`` as if from ``claimed`` (what the driver does with a request's
    sender id); the replica's answer goes back to the forger, not to a voter."""
    return replica.on_message(claimed, message, now_ms)


# (claimed sender, request, the error Kafka's rules give) against follower(): voter 2,
# epoch 5, leader 1, log last epoch 5 (so epochs up to 5 + MAX_EPOCH_JUMP are believable).
REFUSED = [
    # The reported attack: BeginQuorumEpoch at the largest int32, from a voter id.
    (3, BeginQuorumEpoch(INT32_MAX, 3), ErrorCode.INVALID_REQUEST),
    (1, BeginQuorumEpoch(INT32_MAX, 1), ErrorCode.INVALID_REQUEST),
    (3, BeginQuorumEpoch(MAX_EPOCH, 3), ErrorCode.INVALID_REQUEST),
    (3, BeginQuorumEpoch(5 + MAX_EPOCH_JUMP + 1, 3), ErrorCode.INVALID_REQUEST),
    (3, BeginQuorumEpoch(2**40, 3), ErrorCode.INVALID_REQUEST),
    # Leadership claimed by ids that are not voters, or by this voter itself.
    (99, BeginQuorumEpoch(6, 99), ErrorCode.INCONSISTENT_VOTER_SET),
    (0, BeginQuorumEpoch(6, 0), ErrorCode.INCONSISTENT_VOTER_SET),
    (-1, BeginQuorumEpoch(6, -1), ErrorCode.INVALID_REQUEST),
    (-7, BeginQuorumEpoch(6, -7), ErrorCode.INVALID_REQUEST),
    (2, BeginQuorumEpoch(6, 2), ErrorCode.INVALID_REQUEST),
    (INT32_MAX, BeginQuorumEpoch(6, INT32_MAX), ErrorCode.INCONSISTENT_VOTER_SET),
    (3, BeginQuorumEpoch(5, 3), ErrorCode.INVALID_REQUEST),       # a second leader of epoch 5
    (3, BeginQuorumEpoch(4, 3), ErrorCode.FENCED_LEADER_EPOCH),
    (3, BeginQuorumEpoch(-1, 3), ErrorCode.INVALID_REQUEST),
    (1, BeginQuorumEpoch(6, 3), ErrorCode.INVALID_REQUEST),       # the sender is not who it names
    # Votes with huge epochs, garbage candidates, impossible logs.
    (3, VoteRequest(INT32_MAX, 3, 0, 0), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(INT32_MAX, 3, 5, 3, pre_vote=True), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(5 + MAX_EPOCH_JUMP + 1, 3, 5, 3), ErrorCode.INVALID_REQUEST),
    (99, VoteRequest(6, 99, 5, 3), ErrorCode.INCONSISTENT_VOTER_SET),
    (-1, VoteRequest(6, -1, 5, 3), ErrorCode.INVALID_REQUEST),
    (2, VoteRequest(6, 2, 5, 3), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(6, 3, 6, 3), ErrorCode.INVALID_REQUEST),       # last epoch not below the candidate's
    (3, VoteRequest(6, 3, 7, 3, pre_vote=True), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(6, 3, -1, 3), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(6, 3, 5, -1), ErrorCode.INVALID_REQUEST),
    (3, VoteRequest(4, 3, 3, 3), ErrorCode.FENCED_LEADER_EPOCH),
    # EndQuorumEpoch from ids that are not voters, or with impossible epochs.
    (99, EndQuorumEpoch(5, 99), ErrorCode.INCONSISTENT_VOTER_SET),
    (-1, EndQuorumEpoch(5, -1), ErrorCode.INVALID_REQUEST),
    (1, EndQuorumEpoch(INT32_MAX, 1), ErrorCode.INVALID_REQUEST),
    (99, EndQuorumEpoch(5, 1), ErrorCode.INVALID_REQUEST),
    # Fetch / FetchSnapshot claiming a replica id with impossible fields.
    (2, FetchRequest(5, 2, 0, -1), ErrorCode.INVALID_REQUEST),     # this voter's own id
    (-3, FetchRequest(5, -3, 0, -1), ErrorCode.INVALID_REQUEST),
    (3, FetchRequest(5, 3, -1, -1), ErrorCode.INVALID_REQUEST),
    (3, FetchRequest(5, 3, 3, 9), ErrorCode.INVALID_REQUEST),      # last fetched epoch above its epoch
    (3, FetchRequest(INT32_MAX, 3, 3, 3), ErrorCode.INVALID_REQUEST),
    (3, FetchSnapshotRequest(INT32_MAX, 3, (3, 5)), ErrorCode.INVALID_REQUEST),
    (3, FetchSnapshotRequest(5, 3, (-1, 5)), ErrorCode.INVALID_REQUEST),
]


@pytest.mark.parametrize("claimed, message, error", REFUSED, ids=[str(m) for _, m, _ in REFUSED])
def test_a_forged_request_is_refused_with_kafkas_error_and_changes_nothing(claimed, message, error):
    replica = follower()
    before = state_of(replica)
    assert forge(replica, claimed, message) == error
    assert state_of(replica) == before
    assert not replica.quorum_state_changed, "a refused request must not be persisted"
    answers = replica.take_outbox()
    if isinstance(message, (VoteRequest, FetchRequest, FetchSnapshotRequest)):
        assert [(a.destination, a.message.error) for a in answers] == [(claimed, error)]
        assert not getattr(answers[0].message, "granted", False)
    else:
        assert answers == []


def test_an_observer_refuses_every_quorum_request_with_inconsistent_voter_set():
    replica = RaftReplica(7, VOTERS, RaftLog(), random.Random(0))
    replica.start(0)
    for message in (VoteRequest(1, 1, 0, 0), BeginQuorumEpoch(1, 1), EndQuorumEpoch(0, 1)):
        assert replica.on_message(1, message, 1) == ErrorCode.INCONSISTENT_VOTER_SET
    assert (replica.epoch, replica.leader_id) == (0, -1)


def test_a_request_may_move_the_epoch_to_the_next_one_or_up_to_the_jump_past_the_log_only():
    replica = follower(epoch=5, log_epochs=(1, 3, 5))
    ceiling = 5 + MAX_EPOCH_JUMP
    assert replica.epoch_ceiling() == ceiling
    assert forge(replica, 3, BeginQuorumEpoch(ceiling + 1, 3)) == ErrorCode.INVALID_REQUEST
    assert forge(replica, 3, BeginQuorumEpoch(ceiling, 3)) == ErrorCode.NONE
    assert (replica.epoch, replica.leader_id) == (ceiling, 3)
    # Past the log's last epoch + the jump, only one election step at a time.
    assert replica.epoch_ceiling() == ceiling + 1
    assert forge(replica, 1, VoteRequest(ceiling + 2, 1, 5, 3)) == ErrorCode.INVALID_REQUEST
    assert forge(replica, 1, VoteRequest(ceiling + 1, 1, 5, 3)) == ErrorCode.NONE
    assert replica.epoch == ceiling + 1
    # ... and no more often than an election timeout (100 ms here): a pre-vote, which
    # moves nothing, is still answered.
    assert forge(replica, 3, BeginQuorumEpoch(ceiling + 2, 3), now_ms=50) == ErrorCode.INVALID_REQUEST
    assert forge(replica, 3, VoteRequest(ceiling + 2, 3, 5, 3, pre_vote=True), now_ms=50) == ErrorCode.NONE
    assert forge(replica, 3, BeginQuorumEpoch(ceiling + 2, 3), now_ms=101) == ErrorCode.NONE
    assert replica.epoch == ceiling + 2


def test_a_stream_of_next_epoch_forgeries_walks_the_epoch_no_faster_than_elections():
    """The walk that is left to a forger who names voters: one epoch per election
    timeout past the window, so the int32 epoch space takes years, not requests."""
    replica = follower(epoch=5, log_epochs=(1, 3, 5))
    for i in range(10_000):
        forge(replica, 3, BeginQuorumEpoch(replica.epoch + 1, 3), now_ms=i)       # 10 s, 1000 a second
        forge(replica, 1, VoteRequest(replica.epoch + 1, 1, 5, 3), now_ms=i)
    assert replica.epoch <= 5 + MAX_EPOCH_JUMP + 10_000 // 100 + 1


def test_a_lagging_voter_still_learns_a_far_newer_epoch_from_an_answer():
    """The jump bound is for requests; a voter that was down while the others went
    through many epochs learns theirs from the answer to its own pre-vote."""
    replica = follower(epoch=5, log_epochs=(1, 3, 5))
    far = 5 + 10 * MAX_EPOCH_JUMP
    replica.on_message(1, VoteResponse(far, False, 1, pre_vote=True), 1)
    assert (replica.epoch, replica.leader_id, replica.state) == (far, 1, FOLLOWER)
    # ... but not an impossible one, nor a leader that is no voter.
    replica.on_message(3, VoteResponse(INT32_MAX, False, 3), 2)
    replica.on_message(3, FetchResponse(far + 1, 99), 3)
    assert (replica.epoch, replica.leader_id) == (far, 1)


def test_a_replica_at_the_last_epoch_holds_no_election_and_never_overflows():
    replica = RaftReplica(1, VOTERS, RaftLog(), random.Random(0), RaftConfig(election_timeout_ms=100))
    replica.start(0, QuorumStateRecord(MAX_EPOCH, -1, -1))
    for now in range(0, 5000, 50):
        replica.on_tick(now)
    assert replica.epoch == MAX_EPOCH and replica.epoch_exhausted
    assert all(e.message.epoch <= MAX_EPOCH for e in replica.take_outbox())
    assert quorum_state_problem(replica.quorum_state()) is None


# ---------------------------------------------------------------- quorum-state


@pytest.mark.parametrize("record", [
    QuorumStateRecord(INT32_MAX, 3, 3),        # what the old attack persisted
    QuorumStateRecord(2**40, -1, -1),
    QuorumStateRecord(-5, -1, -1),
    QuorumStateRecord(7, -9, -1),
])
def test_a_quorum_state_no_election_can_have_written_is_discarded_for_the_logs_last_epoch(record):
    log = RaftLog()
    for e in (1, 4, 4):
        log.append_as_leader(e, ["x"])
    replica = RaftReplica(2, VOTERS, log, random.Random(0))
    replica.start(0, record)
    assert replica.discarded_quorum_state is not None
    assert (replica.epoch, replica.voted_for, replica.leader_id, replica.state) == (4, -1, -1, UNATTACHED)
    assert replica.quorum_state_changed and replica.quorum_state() == QuorumStateRecord(4, -1, -1)


def test_a_quorum_state_behind_the_log_resumes_at_the_logs_last_epoch():
    log = RaftLog()
    log.append_as_leader(6, ["x"])
    replica = RaftReplica(2, VOTERS, log, random.Random(0))
    replica.start(0, QuorumStateRecord(3, 1, 1))
    assert replica.discarded_quorum_state is None
    assert (replica.epoch, replica.voted_for, replica.leader_id) == (6, -1, -1)


def test_a_quorum_bricked_by_the_old_attack_elects_a_leader_after_a_restart():
    net = Net(7)
    for v in VOTERS:
        net.states[v] = QuorumStateRecord(INT32_MAX, -1, 3)
        net.replicas[v] = net._boot(v)
    for _ in range(2000):
        net.step()
        if net.leader() is not None:
            break
    assert net.leader() is not None
    assert all(quorum_state_problem(s) is None for s in net.states.values())


# ---------------------------------------------------------------- a flooded quorum


class ForgedNet(Net):
    """The randomized network of test_replica, plus a client that sends forged
    requests straight to the voters (answers go back to it, never to a voter)."""

    def forge(self, destination: int, claimed: int, message) -> ErrorCode:
        replica = self.replicas[destination]
        error = replica.on_message(claimed, message, self.now)
        answered = False
        if replica.quorum_state_changed:
            self.states[destination] = replica.quorum_state()
        kept = []
        for envelope in replica.take_outbox():
            if not answered and envelope.destination == claimed and isinstance(envelope.message, ANSWERS):
                answered = True                  # to the forger's connection
                continue
            kept.append(envelope)
        replica._outbox = kept
        self.deliver_all(replica)
        return error

    def elect(self, steps: int = 3000) -> RaftReplica:
        for _ in range(steps):
            self.step()
            leader = self.leader()
            if leader is not None and leader.is_active_leader:
                return leader
        raise AssertionError("no leader")


def invalid_forgeries(rng: random.Random, target: RaftReplica) -> list:
    """(claimed id, request) pairs that Kafka's rules or the epoch bounds refuse."""
    huge = rng.choice([INT32_MAX, MAX_EPOCH, 2**30, target.epoch_ceiling() + 1 + rng.randrange(10**6)])
    voter = rng.choice([v for v in VOTERS if v != target.node_id])
    stranger = rng.choice([0, 4, 99, 1000, INT32_MAX])
    bad_id = rng.choice([-1, -2, -(2**31), target.node_id])
    return [
        (voter, VoteRequest(huge, voter, rng.randrange(5), rng.randrange(100), pre_vote=rng.random() < 0.5)),
        (stranger, VoteRequest(target.epoch + 1, stranger, target.log.last_epoch, target.log.end_offset + 10)),
        (bad_id, VoteRequest(target.epoch + 1, bad_id, 0, 0)),
        (voter, BeginQuorumEpoch(huge, voter)),
        (stranger, BeginQuorumEpoch(target.epoch + 1, stranger)),
        (bad_id, BeginQuorumEpoch(target.epoch + 1, bad_id)),
        (stranger, EndQuorumEpoch(target.epoch, stranger)),
        (voter, EndQuorumEpoch(huge, voter)),
        (bad_id, FetchRequest(target.epoch, bad_id, 0, -1)),
        (voter, FetchRequest(rng.choice([INT32_MAX, -2]), voter, 0, -1)),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_a_flood_of_invalid_forgeries_changes_no_voters_state_and_the_leader_stays(seed):
    net = ForgedNet(seed)
    leader = net.elect()
    rng = random.Random(seed)
    sent = 0
    for _ in range(40):
        for target in net.replicas.values():
            for claimed, message in invalid_forgeries(rng, target):
                before, persisted = state_of(target), net.states[target.node_id]
                error = net.forge(target.node_id, claimed, message)
                assert error != ErrorCode.NONE, f"{message} from {claimed} to {target.node_id} was believed"
                assert state_of(target) == before and net.states[target.node_id] == persisted
                sent += 1
        net.step()
    assert sent == 40 * 3 * 10
    assert net.leader() is leader and leader.state == LEADER
    assert max(r.epoch for r in net.replicas.values()) == leader.epoch
    net.elect()


@pytest.mark.parametrize("seed", range(5))
def test_a_flood_of_any_forgeries_leaves_a_leader_and_epochs_far_from_the_limit(seed):
    """Forgeries that pass the checks too (a voter's id, the next epoch): they may
    disturb elections while they last, but once they stop a leader is elected, and
    no epoch ever came near one that cannot be incremented."""
    net = ForgedNet(100 + seed)
    net.elect()
    rng = random.Random(seed)
    start_epoch = max(r.epoch for r in net.replicas.values())
    believed = 0
    for step in range(1500):
        net.step()
        target = net.replicas[rng.choice(VOTERS)]
        voter = rng.choice([v for v in VOTERS if v != target.node_id])
        choices = invalid_forgeries(rng, target) + [
            (voter, VoteRequest(target.epoch + 1, voter, 10**6, 10**9)),
            (voter, VoteRequest(target.epoch + rng.randrange(1, 3 * MAX_EPOCH_JUMP), voter, 0, 0)),
            (voter, BeginQuorumEpoch(target.epoch + rng.randrange(0, 3 * MAX_EPOCH_JUMP), voter)),
            (voter, EndQuorumEpoch(target.epoch, voter)),
        ]
        for claimed, message in rng.sample(choices, 3):
            believed += net.forge(target.node_id, claimed, message) == ErrorCode.NONE
        for state in net.states.values():
            assert state is None or quorum_state_problem(state) is None
    assert believed > 0
    # The forger stops: a leader is elected and commits again. Epochs grew by at most
    # the jump per leader elected, and one per election timeout (300 ms here) besides.
    leader = net.elect()
    bound = start_epoch + (len(net.leaders) + 1) * (MAX_EPOCH_JUMP + 1) + 3 * (net.now // 300 + 1)
    assert max(r.epoch for r in net.replicas.values()) <= bound
    # Restarting two of the three voters (from their persisted state) changes nothing.
    for v in rng.sample(VOTERS, 2):
        net.replicas[v] = net._boot(v)
    net.elect()
