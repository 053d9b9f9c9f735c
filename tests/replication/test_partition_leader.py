"""Leader-side Partition rules, as Kafka's ``Partition`` keeps them: HW
(``maybeIncrementLeaderHW``), fetch state (``Replica.updateFetchStateOrThrow``), ISR
expansion and shrink (``maybeExpandIsr``, ``maybeShrinkIsr``), AlterPartition answers
(``handleAlterPartitionError``), validation order (``fetchRecords``), produce
(``checkEnoughReplicasReachOffset``), roles (``makeLeader`` / ``makeFollower``)."""

import pytest

from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.replication.partition import Isolation, PartitionState

from .conftest import ALIVE, LAG_MS, fetch, leader_batch, record_values, values


# ------------------------------------------------------------------ high watermark


def test_hw_is_min_leo_of_isr(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1, 2))
    leader.append_records_to_leader(values("a", "b", "c"), 1)
    assert leader.log.high_watermark == 0
    fetch(leader, 1, 3, clock)
    assert leader.log.high_watermark == 0   # broker 2 (ISR) has not fetched
    fetch(leader, 2, 2, clock)
    assert leader.log.high_watermark == 2
    fetch(leader, 2, 3, clock)
    assert leader.log.high_watermark == 3


def test_hw_waits_for_caught_up_follower_not_in_isr(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values(*"abcde"), 1)
    fetch(leader, 1, 5, clock)
    assert leader.log.high_watermark == 5
    fetch(leader, 2, 5, clock)               # broker 2 reaches the leader's LEO: caught up now
    leader.append_records_to_leader(values(*"fghij"), 1)
    fetch(leader, 1, 10, clock)
    # 2 is outside the ISR but caught up within replica.lag.time.max.ms: it holds the HW back
    assert leader.log.high_watermark == 5
    clock.advance(LAG_MS + 1)
    fetch(leader, 1, 10, clock)
    assert leader.log.high_watermark == 10   # no longer caught up: it stops counting


def test_hw_ignores_lagging_follower_not_in_isr(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values(*"abcde"), 1)
    fetch(leader, 2, 1, clock)                # never caught up
    fetch(leader, 1, 5, clock)
    assert leader.log.high_watermark == 5


def test_caught_up_follower_that_is_fenced_does_not_hold_hw(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values(*"abcde"), 1)
    fetch(leader, 2, 5, clock)
    leader.append_records_to_leader(values("f"), 1)
    del make.alive[2]                         # fenced: not ISR-eligible
    fetch(leader, 1, 6, clock)
    assert leader.log.high_watermark == 6


def test_hw_does_not_advance_below_min_isr(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0,), min_isr=2)
    leader.append_records_to_leader(values("a", "b"), 1)
    fetch(leader, 1, 2, clock)                 # follower has everything, but ISR is {0}
    assert leader.log.high_watermark == 0
    with pytest.raises(KafkaError) as e:
        leader.append_records_to_leader(values("c"), -1)
    assert e.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.log.log_end_offset == 2      # nothing written


def test_hw_advances_below_min_isr_when_strict_min_isr_is_off(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0,), min_isr=2, strict_min_isr=False)
    leader.append_records_to_leader(values("a", "b"), 1)
    fetch(leader, 1, 2, clock)
    assert leader.log.high_watermark == 2


def test_min_isr_is_capped_by_replication_factor(make, clock):
    leader = make.leader(replicas=(0,), isr=(0,), min_isr=2)
    assert leader.effective_min_isr == 1
    leader.append_records_to_leader(values("a"), -1)
    assert leader.log.high_watermark == 1


def test_hw_never_decreases_on_leader(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0, 1))
    leader.append_records_to_leader(values("a", "b"), 1)
    fetch(leader, 1, 2, clock)
    assert leader.log.high_watermark == 2
    fetch(leader, 1, 1, clock)   # an older fetch offset (e.g. after a follower restart)
    assert leader.log.high_watermark == 2


# ------------------------------------------------------------------ fetch state


def test_last_caught_up_time_rules(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0, 1))
    state = leader.replica_states[1]
    assert state.last_caught_up_time_ms == clock.monotonic_ms()     # in the ISR at make_leader
    leader.append_records_to_leader(values(*"abcd"), 1)
    clock.advance(10)
    t1 = clock.monotonic_ms()
    fetch(leader, 1, 2, clock)         # behind the leader's LEO 4, above last-fetch LEO -1
    assert state.last_caught_up_time_ms == t1 - 10                   # max(prev, last fetch time 0)
    assert state.last_fetch_leader_log_end_offset == 4
    clock.advance(10)
    fetch(leader, 1, 4, clock)         # reached the LEO 4 seen at the previous fetch, and the current
    assert state.last_caught_up_time_ms == clock.monotonic_ms()
    leader.append_records_to_leader(values("e", "f"), 1)
    clock.advance(10)
    t3 = clock.monotonic_ms()
    fetch(leader, 1, 4, clock)         # behind LEO 6, but >= the leader LEO at the previous fetch (4)
    assert state.last_caught_up_time_ms == t3 - 10                   # the previous fetch time
    assert (state.log_end_offset, state.last_fetch_time_ms) == (4, t3)


def test_stale_broker_epoch_fetch_is_refused_and_not_recorded(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0, 1))
    leader.append_records_to_leader(values("a"), 1)
    with pytest.raises(KafkaError) as e:
        leader.update_follower_fetch_state(1, 1, 0, clock.monotonic_ms(), 1, ALIVE[1] - 1)
    assert e.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.replica_states[1].log_end_offset == -1


# ------------------------------------------------------------------ ISR expansion


def test_isr_expansion_requires_offset_in_current_leader_epoch(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 2), leader_epoch=0)
    leader.append_records_to_leader(values(*"abc"), 1)
    fetch(leader, 2, 3, clock)
    leader.append_records_to_leader(values("d", "e"), 1)           # LEO 5, HW 3
    leader.make_leader(PartitionState(0, 1, (0, 2), (0, 1, 2), 1), clock.monotonic_ms())
    assert leader.leader_epoch_start_offset == 5
    assert leader.log.leader_epoch_cache.latest_entry == (1, 5)
    fetch(leader, 1, 4, clock)                                      # >= HW 3 but < epoch start 5
    assert leader.maybe_expand_isr(1) is None
    fetch(leader, 1, 5, clock)
    proposal = leader.maybe_expand_isr(1)
    assert proposal is not None and proposal.new_isr == (0, 2, 1)
    assert (proposal.leader_epoch, proposal.partition_epoch) == (1, 1)
    assert proposal.new_isr_broker_epochs == (-1, ALIVE[2], ALIVE[1])


def test_isr_expansion_requires_log_end_offset_at_least_hw(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values(*"abc"), 1)
    fetch(leader, 1, 3, clock)
    fetch(leader, 2, 2, clock)
    assert leader.maybe_expand_isr(2) is None
    fetch(leader, 2, 3, clock)
    assert leader.maybe_expand_isr(2).new_isr == (0, 1, 2)


def test_the_same_registration_applied_again_keeps_an_expansion_in_flight(make, clock):
    """Simulator seed 2755: a leader proposed adding broker 2 to the ISR, then a metadata
    snapshot's load applied the partition's unchanged registration again. Resetting the
    ISR state there forgot the proposal, and the HW passed broker 2's log end while the
    controller committed the expansion. The proposal stays in flight, so broker 2 (in the
    maximal ISR) still holds the HW back."""
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values(*"abc"), 1)
    fetch(leader, 1, 3, clock)
    fetch(leader, 2, 3, clock)
    proposal = leader.maybe_expand_isr(2)
    assert proposal.new_isr == (0, 1, 2)
    assert not leader.make_leader(PartitionState(0, 0, (0, 1), (0, 1, 2), 0), clock.monotonic_ms())
    assert leader.pending_isr == (0, 1, 2) and leader.pending_proposal is proposal
    leader.append_records_to_leader(values(*"def"), 1)
    clock.advance(LAG_MS + 1)                 # broker 2 no longer counts as merely caught up
    fetch(leader, 1, 6, clock)
    assert leader.log.high_watermark == 3
    # The controller's answer to that proposal is still taken.
    leader.on_alter_partition_response(ErrorCode.NONE, 0, 1, (0, 1, 2), clock.monotonic_ms(), proposal)
    assert leader.isr == (0, 1, 2) and leader.pending_isr is None


def test_isr_expansion_requires_eligible_broker(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    fetch(leader, 2, 0, clock, broker_epoch=-1)   # an old fetch version: no broker epoch
    del make.alive[2]                             # fenced or shutting down
    assert leader.maybe_expand_isr(2) is None
    make.alive[2] = ALIVE[2]
    assert leader.maybe_expand_isr(2) is not None


def test_replica_that_never_fetched_this_epoch_is_not_eligible(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    state = leader.replica_states[2]
    state.log_end_offset = 0          # as if known, but no fetch carried a broker epoch
    assert leader.maybe_expand_isr(2) is None


def test_maximal_isr_used_for_hw_while_expansion_pending(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values("a", "b"), 1)
    fetch(leader, 1, 2, clock)
    fetch(leader, 2, 2, clock)
    assert leader.maybe_expand_isr(2) is not None
    assert leader.maximal_isr == (0, 1, 2) and leader.isr == (0, 1)
    leader.append_records_to_leader(values("c", "d"), 1)
    clock.advance(LAG_MS + 1)          # 2 is no longer "caught up", but it is in the maximal ISR
    fetch(leader, 1, 4, clock)
    assert leader.log.high_watermark == 2
    fetch(leader, 2, 4, clock)
    assert leader.log.high_watermark == 4


def test_min_isr_check_uses_committed_isr_while_expansion_pending(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1), min_isr=3)
    fetch(leader, 2, 0, clock)
    assert leader.maybe_expand_isr(2) is not None
    leader.append_records_to_leader(values("a"), 1)
    fetch(leader, 1, 1, clock)
    fetch(leader, 2, 1, clock)
    assert leader.log.high_watermark == 0           # committed ISR {0,1} < 3
    with pytest.raises(KafkaError):
        leader.append_records_to_leader(values("b"), -1)
    assert not leader.on_alter_partition_response(ErrorCode.NONE, 0, 1, (0, 1, 2), clock.monotonic_ms())
    assert leader.isr == (0, 1, 2) and leader.partition_epoch == 1
    assert leader.log.high_watermark == 1           # recomputed on commit


# ------------------------------------------------------------------ ISR shrink


def test_shrink_removes_follower_after_lag_time(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1, 2))
    leader.append_records_to_leader(values("a"), 1)
    fetch(leader, 1, 1, clock)
    fetch(leader, 2, 1, clock)
    leader.append_records_to_leader(values("b"), 1)   # now 2 stops fetching
    start = clock.monotonic_ms()
    for _ in range(3):
        clock.advance(LAG_MS // 3)
        fetch(leader, 1, 2, clock)
    assert clock.monotonic_ms() - start == LAG_MS
    assert leader.maybe_shrink_isr(clock.monotonic_ms()) is None   # exactly the lag: still in sync
    clock.advance(1)
    proposal = leader.maybe_shrink_isr(clock.monotonic_ms())
    assert proposal.new_isr == (0, 1)
    assert leader.log.high_watermark == 1              # the HW waits for the commit
    leader.on_alter_partition_response(ErrorCode.NONE, 0, 1, (0, 1), clock.monotonic_ms(), proposal)
    assert leader.isr == (0, 1) and leader.log.high_watermark == 2


def test_follower_at_log_end_offset_is_never_out_of_sync(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0, 1))
    leader.append_records_to_leader(values("a"), 1)
    fetch(leader, 1, 1, clock)
    clock.advance(10 * LAG_MS)          # an idle partition
    assert leader.maybe_shrink_isr(clock.monotonic_ms()) is None


def test_one_alter_partition_in_flight(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values("a"), 1)
    fetch(leader, 2, 1, clock)
    expand = leader.maybe_expand_isr(2)
    assert expand is not None
    clock.advance(LAG_MS + 1)           # 1 is now out of sync, but a change is in flight
    assert leader.maybe_shrink_isr(clock.monotonic_ms()) is None
    assert leader.maybe_expand_isr(2) is None
    leader.on_alter_partition_response(ErrorCode.NONE, 0, 1, (0, 1, 2), clock.monotonic_ms(), expand)
    shrink = leader.maybe_shrink_isr(clock.monotonic_ms())
    assert shrink is not None and shrink.new_isr == (0, 2)


# ------------------------------------------------------------------ AlterPartition answers


def _pending_expansion(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1), partition_epoch=3)
    fetch(leader, 2, 0, clock)
    proposal = leader.maybe_expand_isr(2)
    assert proposal is not None
    return leader, proposal


def test_alter_partition_success_with_other_leader_epoch_is_ignored(make, clock):
    leader, proposal = _pending_expansion(make, clock)
    assert not leader.on_alter_partition_response(ErrorCode.NONE, 1, 4, (0, 1, 2), 0, proposal)
    assert leader.isr == (0, 1) and leader.pending_isr == (0, 1, 2)


def test_alter_partition_success_with_older_partition_epoch_is_ignored(make, clock):
    leader, proposal = _pending_expansion(make, clock)
    assert not leader.on_alter_partition_response(ErrorCode.NONE, 0, 2, (0, 1, 2), 0, proposal)
    assert leader.isr == (0, 1) and leader.pending_isr is not None


@pytest.mark.parametrize("error", [ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED])
def test_alter_partition_ineligible_reverts_without_retry(make, clock, error):
    leader, proposal = _pending_expansion(make, clock)
    assert not leader.on_alter_partition_response(error, proposal=proposal)
    assert leader.pending_isr is None and leader.isr == (0, 1)


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                   ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                                   ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED])
def test_alter_partition_fatal_errors_stay_pending_without_retry(make, clock, error):
    leader, proposal = _pending_expansion(make, clock)
    assert not leader.on_alter_partition_response(error, proposal=proposal)
    assert leader.pending_isr == (0, 1, 2)
    assert leader.maybe_shrink_isr(clock.monotonic_ms() + 10 * LAG_MS) is None   # still in flight


@pytest.mark.parametrize("error", [ErrorCode.NETWORK_EXCEPTION, ErrorCode.UNKNOWN_SERVER_ERROR,
                                   ErrorCode.NOT_CONTROLLER])
def test_alter_partition_other_errors_retry(make, clock, error):
    leader, proposal = _pending_expansion(make, clock)
    assert leader.on_alter_partition_response(error, proposal=proposal)
    assert leader.pending_proposal is proposal


def test_alter_partition_answer_after_metadata_replaced_the_state_is_ignored(make, clock):
    leader, proposal = _pending_expansion(make, clock)
    leader.make_leader(PartitionState(0, 0, (0, 1), (0, 1, 2), 4), clock.monotonic_ms())
    assert leader.pending_isr is None
    fetch(leader, 2, 0, clock)
    newer = leader.maybe_expand_isr(2)
    assert not leader.on_alter_partition_response(ErrorCode.NONE, 0, 4, (0, 1, 2), 0, proposal)
    assert leader.isr == (0, 1) and leader.pending_proposal is newer


# ------------------------------------------------------------------ validation order


def test_fetch_validation_order(make, clock):
    follower = make.follower(1, leader=0, leader_epoch=5)
    # 1. the epoch check comes before the role check
    assert follower.read_records(0, 100, Isolation.LOG_END, 4).error == ErrorCode.FENCED_LEADER_EPOCH
    assert follower.read_records(0, 100, Isolation.LOG_END, 6).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    # 2. then: only the leader serves
    assert follower.read_records(0, 100, Isolation.LOG_END, 5).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower.read_records(0, 100, Isolation.LOG_END, None).error == ErrorCode.NOT_LEADER_OR_FOLLOWER

    leader = make.leader(replicas=(0, 1, 2), leader_epoch=5)
    for value in "abcd":
        leader.append_records_to_leader(values(value), 1)
    leader.log.update_high_watermark(2)
    leader.log.maybe_increment_log_start_offset(1)
    # 3. a replica outside the assignment
    assert leader.read_records(0, 100, Isolation.LOG_END, 5, replica_id=9).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert leader.read_records(0, 100, Isolation.LOG_END, None, replica_id=9).error \
        == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # 4. last fetched epoch: unknown to the leader → out of range; below log start → out of range
    assert leader.read_records(2, 100, Isolation.LOG_END, 5, 7, replica_id=1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert leader.read_records(0, 100, Isolation.LOG_END, 5, 5, replica_id=1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    # range: beyond the LEO
    assert leader.read_records(5, 100, Isolation.LOG_END, 5, replica_id=1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    # 5. consumers stop at the HW: above it is empty, not an error
    above = leader.read_records(3, 100, Isolation.HIGH_WATERMARK, 5)
    assert above.error == ErrorCode.NONE and above.records is None and above.high_watermark == 2
    consumer = leader.read_records(1, 1000, Isolation.HIGH_WATERMARK, 5)
    assert consumer.records is not None and record_values(consumer.records.read_bytes())[-1][0] < 2
    follower_read = leader.read_records(1, 1000, Isolation.LOG_END, 5, 5, replica_id=1)
    assert record_values(follower_read.records.read_bytes())[-1][0] == 3


def test_diverging_epoch_answer(make, clock):
    leader = make.leader(replicas=(0, 1), isr=(0,), leader_epoch=0)
    leader.append_records_to_leader(values(*"abcde"), 1)                     # epoch 0: 0..4
    leader.make_leader(PartitionState(0, 2, (0,), (0, 1), 1), clock.monotonic_ms())
    leader.append_records_to_leader(values(*"fgh"), 1)                       # epoch 2: 5..7
    # The follower wrote epoch 1 (which the leader never had) up to offset 7.
    result = leader.read_records(7, 100, Isolation.LOG_END, 2, 1, replica_id=1)
    assert (result.error, result.diverging_epoch, result.records) == (ErrorCode.NONE, (0, 5), None)
    # The follower has epoch 0 beyond where it ends on the leader.
    assert leader.read_records(6, 100, Isolation.LOG_END, 2, 0, replica_id=1).diverging_epoch == (0, 5)
    # At the end of epoch 0 exactly: no divergence, data from there on.
    result = leader.read_records(5, 100, Isolation.LOG_END, 2, 0, replica_id=1)
    assert result.diverging_epoch is None and record_values(result.records.read_bytes())[0] == (5, b"f")
    # The leader's latest epoch ends at its LEO.
    assert leader.read_records(8, 100, Isolation.LOG_END, 2, 2, replica_id=1).diverging_epoch is None


def test_leader_answers_offsets_for_leader_epoch_and_offset_snapshot(make, clock):
    leader = make.leader(replicas=(0, 1), leader_epoch=0)
    leader.append_records_to_leader(values("a", "b"), 1)
    leader.make_leader(PartitionState(0, 3, (0, 1), (0, 1), 1), clock.monotonic_ms())
    leader.append_records_to_leader(values("c"), 1)
    assert leader.last_offset_for_leader_epoch(3, 0) == (ErrorCode.NONE, 0, 2)
    assert leader.last_offset_for_leader_epoch(3, 2) == (ErrorCode.NONE, 0, 2)
    assert leader.last_offset_for_leader_epoch(3, 3) == (ErrorCode.NONE, 3, 3)
    assert leader.last_offset_for_leader_epoch(2, 0)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert leader.fetch_offset_snapshot(3) == (ErrorCode.NONE, 0, 0, 3)
    assert leader.fetch_offset_snapshot(4)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = make.follower(1, leader=0, replicas=(0, 1), leader_epoch=3)
    assert follower.fetch_offset_snapshot(3)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ------------------------------------------------------------------ produce


def test_delayed_produce_condition(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1, 2), min_isr=2)
    info = leader.append_records_to_leader(values("a", "b"), -1)
    assert leader.check_enough_replicas_reached(info.last_offset + 1) == (False, ErrorCode.NONE)
    fetch(leader, 1, 2, clock)
    fetch(leader, 2, 2, clock)
    assert leader.check_enough_replicas_reached(2) == (True, ErrorCode.NONE)
    leader.make_follower(PartitionState(1, 1, (1, 2), (0, 1, 2), 1))
    assert leader.check_enough_replicas_reached(2) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_delayed_produce_not_enough_replicas_after_append(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1, 2), min_isr=2)
    leader.append_records_to_leader(values("a"), -1)
    fetch(leader, 1, 1, clock)
    clock.advance(LAG_MS + 1)
    proposal = leader.maybe_shrink_isr(clock.monotonic_ms())
    assert proposal.new_isr == (0, 1)
    leader.on_alter_partition_response(ErrorCode.NONE, 0, 1, (0, 1), clock.monotonic_ms(), proposal)
    assert leader.log.high_watermark == 1       # the HW reached the append...
    leader.append_records_to_leader(values("b"), 1)
    clock.advance(LAG_MS + 1)
    proposal = leader.maybe_shrink_isr(clock.monotonic_ms())
    leader.on_alter_partition_response(ErrorCode.NONE, 0, 2, (0,), clock.monotonic_ms(), proposal)
    # ...but the ISR fell below min ISR before the delayed produce looked again
    assert leader.check_enough_replicas_reached(1) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


# ------------------------------------------------------------------ roles


def test_make_leader_returns_whether_newly_leader_and_assigns_epoch(make, clock):
    partition = make.partition(0)
    partition.log.append_as_follower(leader_batch(0, 0, "a", "b"))
    assert partition.make_leader(PartitionState(0, 1, (0, 1), (0, 1), 1), clock.monotonic_ms())
    assert partition.log.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    assert partition.leader_epoch_start_offset == 2
    assert not partition.make_leader(PartitionState(0, 2, (0, 1), (0, 1), 2), clock.monotonic_ms())
    assert partition.log.leader_epoch_cache.latest_entry == (2, 2)


def test_make_leader_resets_replica_states_on_new_epoch(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1))
    leader.append_records_to_leader(values("a", "b"), 1)
    fetch(leader, 1, 2, clock)
    fetch(leader, 2, 1, clock)
    clock.advance(100)
    leader.make_leader(PartitionState(0, 1, (0, 1), (0, 1, 2), 1), clock.monotonic_ms())
    one, two = leader.replica_states[1], leader.replica_states[2]
    # Already leader: LEOs kept; caught-up time now for ISR members, 0 for the others.
    assert (one.log_end_offset, one.last_caught_up_time_ms) == (2, clock.monotonic_ms())
    assert (two.log_end_offset, two.last_caught_up_time_ms) == (1, 0)

    follower_then_leader = make.follower(1, leader=0, replicas=(0, 1, 2))
    follower_then_leader.make_leader(PartitionState(1, 1, (1, 2), (0, 1, 2), 1), clock.monotonic_ms())
    state = follower_then_leader.replica_states[2]
    assert (state.log_end_offset, state.log_start_offset, state.broker_epoch) == (-1, -1, None)
    assert state.last_caught_up_time_ms == clock.monotonic_ms()


def test_make_leader_same_epoch_keeps_states_and_epoch_start(make, clock):
    leader = make.leader(replicas=(0, 1, 2), isr=(0, 1, 2))
    leader.append_records_to_leader(values("a"), 1)
    fetch(leader, 1, 1, clock)
    before = leader.replica_states[1]
    # Only the partition epoch changed (an ISR change, replica 2 removed from the assignment).
    assert not leader.make_leader(PartitionState(0, 0, (0, 1), (0, 1), 1), clock.monotonic_ms())
    assert leader.replica_states[1] is before and 2 not in leader.replica_states
    assert leader.leader_epoch_start_offset == 0 and leader.isr == (0, 1)


def test_state_with_older_partition_epoch_is_ignored(make, clock):
    leader = make.leader(replicas=(0, 1), partition_epoch=5)
    assert not leader.make_leader(PartitionState(0, 1, (0,), (0, 1), 4), clock.monotonic_ms())
    assert not leader.make_follower(PartitionState(1, 1, (1,), (0, 1), 4))
    assert (leader.leader, leader.leader_epoch, leader.isr) == (0, 0, (0, 1))
    leader.make_leader(PartitionState(0, 0, (0,), (0, 1), 5), clock.monotonic_ms())   # equal: accepted
    assert leader.isr == (0,)


def test_make_follower_returns_whether_epoch_moved_and_clears_leader_state(make, clock):
    leader = make.leader(replicas=(0, 1))
    fetch(leader, 1, 0, clock)
    assert leader.make_follower(PartitionState(1, 1, (1,), (0, 1), 1))
    assert (leader.leader, leader.isr, leader.replica_states, leader.leader_epoch_start_offset) == (1, (), {}, None)
    assert not leader.make_follower(PartitionState(1, 1, (1, 0), (0, 1), 2))   # same epoch
    assert leader.partition_epoch == 2


def test_list_offsets_on_a_new_leader_whose_hw_is_below_its_epoch_start_is_not_available(make, clock):
    """KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): until the high watermark
    reaches the start of the leader's epoch, a client's latest offset could go
    backwards, so it gets OFFSET_NOT_AVAILABLE and retries; replicas read the LEO."""
    from tidelog.replication.partition import PartitionState as State
    leader = make.leader(replicas=(0, 1), isr=(0, 1))
    leader.append_records_to_leader(values("a", "b", "c"), 1)          # HW still 0: 1 has not fetched
    assert leader.make_leader(State(0, 1, (0, 1), (0, 1), 1), clock.monotonic_ms()) is False
    assert leader.leader_epoch_start_offset == 3
    latest, earliest = -1, -2
    assert leader.fetch_offset_for_timestamp(latest, Isolation.HIGH_WATERMARK)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    assert leader.fetch_offset_for_timestamp(0, Isolation.HIGH_WATERMARK)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    assert leader.fetch_offset_for_timestamp(latest, None) == (ErrorCode.NONE, -1, 3, 1)
    assert leader.fetch_offset_for_timestamp(earliest, Isolation.HIGH_WATERMARK)[:3] == (ErrorCode.NONE, -1, 0)
    fetch(leader, 1, 3, clock)
    assert leader.log.high_watermark == 3
    assert leader.fetch_offset_for_timestamp(latest, Isolation.HIGH_WATERMARK) == (ErrorCode.NONE, -1, 3, 1)
    assert leader.fetch_offset_for_timestamp(0, Isolation.HIGH_WATERMARK)[:3:2] == (ErrorCode.NONE, 0)
