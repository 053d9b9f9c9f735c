"""KIP-595's validation rules, one test each: how a voter answers Vote (and KIP-996's
pre-vote), how a leader answers Fetch, and the scenario rules (an isolated leader
steps down and the others elect a new one; after healing the logs converge)."""

from __future__ import annotations

import random

from tidelog.raft.replica import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    UNATTACHED,
    BeginQuorumEpoch,
    FetchRequest,
    FetchResponse,
    QuorumStateRecord,
    RaftConfig,
    RaftLog,
    RaftReplica,
    VoteRequest,
    VoteResponse,
)

from tests.raft.test_replica import Net


def voter(epoch=5, voted_for=-1, log_epochs=(1, 1, 3), node_id=2) -> RaftReplica:
    log = RaftLog()
    for e in log_epochs:
        log.append_as_leader(e, [f"entry-{e}"])
    replica = RaftReplica(node_id, (1, 2, 3), log, random.Random(0), RaftConfig(election_timeout_ms=100))
    replica.start(0, QuorumStateRecord(epoch, voted_for, -1))
    return replica


def answer(replica: RaftReplica):
    messages = [e.message for e in replica.take_outbox()]
    assert len(messages) == 1, messages
    return messages[0]


# ---------------------------------------------------------------- Vote


def test_vote_refused_to_a_candidate_of_an_older_epoch():
    v = voter(epoch=5)
    v.on_message(1, VoteRequest(4, 1, 3, 3), 1)
    response = answer(v)
    assert (response.granted, response.epoch) == (False, 5)


def test_vote_refused_to_a_candidate_whose_last_epoch_is_older_even_with_a_longer_log():
    v = voter(epoch=5)                                   # last epoch 3, end offset 3
    v.on_message(1, VoteRequest(6, 1, 2, 10), 1)
    assert answer(v).granted is False
    assert v.epoch == 6 and v.voted_for == -1            # the newer epoch is adopted all the same


def test_vote_refused_to_a_candidate_with_a_shorter_log_in_the_same_last_epoch():
    v = voter(epoch=5)
    v.on_message(1, VoteRequest(6, 1, 3, 2), 1)
    assert answer(v).granted is False


def test_vote_granted_once_per_epoch_to_an_up_to_date_candidate_and_persisted():
    v = voter(epoch=5)
    v.on_message(1, VoteRequest(6, 1, 3, 3), 1)
    assert answer(v).granted is True
    assert v.quorum_state_changed and v.quorum_state() == QuorumStateRecord(6, 1, -1)
    v.on_message(3, VoteRequest(6, 3, 3, 3), 2)          # another candidate, same epoch
    assert answer(v).granted is False
    v.on_message(1, VoteRequest(6, 1, 3, 3), 3)          # the same candidate asking again
    assert answer(v).granted is True


def test_a_pre_vote_changes_neither_the_epoch_nor_the_vote():
    v = voter(epoch=5, voted_for=3)
    v.on_message(1, VoteRequest(6, 1, 3, 3, pre_vote=True), 1)
    response = answer(v)
    assert response.pre_vote and response.granted
    assert (v.epoch, v.voted_for) == (5, 3)


def test_a_pre_vote_is_refused_by_a_voter_that_hears_its_leader():
    v = voter(epoch=5)
    v.on_message(3, BeginQuorumEpoch(5, 3), 1)          # leader 3 announces itself: v follows it
    assert v.state == FOLLOWER and v.leader_id == 3
    v.take_outbox()
    v.on_message(1, VoteRequest(6, 1, 3, 3, pre_vote=True), 2)
    assert answer(v).granted is False


def test_a_candidate_needs_a_majority_of_pre_votes_before_bumping_its_epoch():
    v = voter(epoch=5)
    v.on_tick(1000)                                      # election timeout
    assert v.state == PROSPECTIVE and v.epoch == 5
    v.take_outbox()
    v.on_message(1, VoteResponse(5, True, pre_vote=True), 1001)
    assert v.state == CANDIDATE and v.epoch == 6 and v.voted_for == 2


# ---------------------------------------------------------------- Fetch (on the leader)


def leader() -> RaftReplica:
    v = voter(epoch=5, node_id=1)
    v.on_tick(1000)
    v.on_message(2, VoteResponse(5, True, pre_vote=True), 1001)
    v.on_message(2, VoteResponse(6, True), 1002)
    assert v.state == LEADER and v.epoch == 6
    v.take_outbox()
    return v


def test_a_fetch_from_a_newer_epoch_is_answered_fenced():
    v = leader()
    v.on_message(2, FetchRequest(7, 2, 3, 3), 1003)
    assert answer(v).fenced


def test_a_fetch_to_a_voter_that_does_not_lead_names_the_leader_it_knows():
    v = voter(epoch=5)
    v.on_message(3, BeginQuorumEpoch(5, 3), 1)
    v.take_outbox()
    v.on_message(1, FetchRequest(5, 1, 0, -1), 2)
    response = answer(v)
    assert response.fenced and response.leader_id == 3


def test_a_fetch_past_the_leaders_log_end_is_answered_with_a_diverging_epoch():
    v = leader()                                          # log: epochs 1, 1, 3, then 6 (its LeaderChange)
    v.on_message(2, FetchRequest(6, 2, 9, 6), 1003)
    assert answer(v).diverging == (6, 4)


def test_a_fetch_with_a_last_epoch_the_leader_never_had_is_answered_with_where_the_older_one_ends():
    v = leader()
    v.on_message(2, FetchRequest(6, 2, 5, 4), 1003)      # epoch 4 was never in the leader's log
    assert answer(v).diverging == (3, 3)


def test_a_matching_fetch_returns_the_entries_after_it_and_the_high_watermark():
    v = leader()
    v.on_message(2, FetchRequest(6, 2, 3, 3), 1003)
    response = answer(v)
    assert response.diverging is None and response.start_offset == 3 and len(response.entries) == 1


def test_a_follower_learns_a_newer_leader_from_a_fetch_answer():
    v = voter(epoch=5)
    v.on_message(3, FetchResponse(7, 1, 0, 3, ()), 1)
    assert (v.state, v.epoch, v.leader_id) == (FOLLOWER, 7, 1)


# ---------------------------------------------------------------- scenarios


def test_an_isolated_leader_steps_down_and_the_others_elect_a_new_one():
    net = Net(seed=7)
    for _ in range(400):
        net.step()
    old = net.leader()
    assert old is not None
    others = [v for v in net.voters if v != old.node_id]
    net.cut |= {frozenset((old.node_id, v)) for v in others}
    for _ in range(800):
        net.step()
    assert old.state != LEADER                            # check quorum: it resigned
    new = [net.replicas[v] for v in others if net.replicas[v].state == LEADER]
    assert len(new) == 1 and new[0].epoch > old.epoch
    net.cut.clear()                                       # healing: the old leader follows again
    for _ in range(800):
        net.step()
    assert old.state == FOLLOWER and old.leader_id == new[0].node_id
    new[0].append(["after"])
    for _ in range(400):
        net.step()
    assert all(r.log.entries == new[0].log.entries for r in net.replicas.values())


def test_a_restarted_leader_does_not_believe_it_still_leads():
    v = voter(epoch=5, node_id=1)
    restarted = RaftReplica(1, (1, 2, 3), v.log, random.Random(0))
    restarted.start(0, QuorumStateRecord(5, 1, 1))
    assert restarted.state == UNATTACHED and restarted.leader_id == -1


def test_a_late_diverging_answer_to_a_superseded_fetch_does_not_cut_committed_entries():
    """A resent Fetch gets two answers; the second, arriving after the follower moved on,
    is stale and ignored (Kafka's RequestManager drops unexpected responses)."""
    from tidelog.raft.replica import FOLLOWER as F
    leader_log, follower_log = RaftLog(), RaftLog()
    leader_log.append_as_leader(1, ["a", "b"])
    leader_log.append_as_leader(3, ["c"])
    follower_log.append_as_leader(1, ["a", "b"])
    follower_log.append_as_leader(2, ["x"])
    leader = RaftReplica(1, (1, 2, 3), leader_log, random.Random(0), state=LEADER, epoch=3, leader_id=1)
    follower = RaftReplica(2, (1, 2, 3), follower_log, random.Random(0), state=F, epoch=3, leader_id=1)
    follower._send_fetch(0)
    (old_fetch,) = (e.message for e in follower.take_outbox())
    leader.on_message(2, old_fetch, 0)
    leader.on_message(2, old_fetch, 1)                        # the resend
    first, second = (e.message for e in leader.take_outbox())
    follower.on_message(1, first, 2)                          # truncate, fetch from 2
    for now in (3, 5):
        (fetch,) = (e.message for e in follower.take_outbox())
        leader.on_message(2, fetch, now)
        follower.on_message(1, leader.take_outbox()[0].message, now + 1)
    assert follower.high_watermark == 3 and follower_log.entries[2] == (3, "c")
    follower.on_message(1, second, 7)                         # the late answer to the old fetch
    assert follower_log.end_offset == 3, "a committed entry was truncated"


def test_a_follower_truncates_entries_of_an_epoch_the_leader_never_had():
    """Kafka's truncateToEndOffset: the leader's epoch-1 end (4) is past our log, but our
    epoch 1 ends at 2 — cut there, not at min(4, our end), which cuts nothing forever."""
    from tidelog.raft.replica import FOLLOWER as F
    leader_log, follower_log = RaftLog(), RaftLog()
    leader_log.append_as_leader(1, ["a", "b", "c", "d"])
    leader_log.append_as_leader(3, ["e"])
    follower_log.append_as_leader(1, ["a", "b"])
    follower_log.append_as_leader(2, ["x"])
    leader = RaftReplica(1, (1, 2, 3), leader_log, random.Random(0), state=LEADER, epoch=3, leader_id=1)
    follower = RaftReplica(2, (1, 2, 3), follower_log, random.Random(0), state=F, epoch=3, leader_id=1)
    follower._send_fetch(0)
    for step in range(10):
        outbox = follower.take_outbox()
        if not outbox:
            break
        leader.on_message(2, outbox[0].message, step)
        follower.on_message(1, leader.take_outbox()[0].message, step)
    assert follower_log.entries == leader_log.entries
