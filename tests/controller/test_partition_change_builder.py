"""PartitionChangeBuilder: Kafka's election and epoch rules."""

import uuid

from tidelog.controller.partition_change import Election, PartitionChangeBuilder
from tidelog.metadata.records import PartitionChangeRecord
from tidelog.metadata.registrations import PartitionRegistration

T = uuid.UUID(int=1)


def partition(replicas, isr, leader, leader_epoch=5, partition_epoch=9, recovery=0):
    return PartitionRegistration(tuple(replicas), tuple(isr), leader, leader_epoch,
                                 partition_epoch, recovery)


def build(current, isr=None, replicas=None, unacceptable=(), election=Election.ONLINE,
          recovery=None):
    builder = PartitionChangeBuilder(current, T, 0, lambda r: r not in unacceptable, election)
    if isr is not None:
        builder.set_target_isr(tuple(isr))
    if replicas is not None:
        builder.set_target_replicas(tuple(replicas))
    if recovery is not None:
        builder.set_target_leader_recovery_state(recovery)
    return builder.build()


def change(**fields):
    return PartitionChangeRecord(T, 0, **fields)


def test_nothing_to_change_writes_no_record():
    current = partition([1, 2, 3], [1, 2, 3], 1)
    assert build(current) is None
    assert build(current, isr=[1, 2, 3]) is None


def test_isr_shrink_keeping_the_leader_changes_only_the_isr():
    assert build(partition([1, 2, 3], [1, 2, 3], 1), isr=[1, 3]) == change(isr=(1, 3))


def test_isr_expansion_changes_only_the_isr():
    assert build(partition([1, 2, 3], [1], 1), isr=[1, 2]) == change(isr=(1, 2))


def test_clean_election_picks_the_first_replica_in_replica_order_not_isr_order():
    current = partition([1, 2, 3], [3, 2, 1], 1)
    assert build(current, isr=[3, 2], unacceptable={1}) == change(isr=(3, 2), leader=2)


def test_clean_election_skips_unacceptable_isr_members():
    current = partition([1, 2, 3], [1, 2, 3], 1)
    assert build(current, isr=[2, 3], unacceptable={1, 2}) == change(isr=(2, 3), leader=3)


def test_a_leader_still_in_the_isr_but_unacceptable_is_replaced():
    current = partition([1, 2, 3], [1, 2, 3], 1)
    assert build(current, unacceptable={1}) == change(leader=2)


def test_an_acceptable_leader_in_the_target_isr_is_kept_even_if_not_preferred():
    current = partition([1, 2, 3], [2, 3], 3)
    assert build(current, isr=[2, 3]) is None


def test_last_isr_member_removed_leaves_no_leader_and_keeps_the_isr():
    current = partition([1, 2, 3], [1], 1)
    assert build(current, isr=[], unacceptable={1}) == change(leader=-1)


def test_no_valid_leader_and_no_unclean_election_means_leader_minus_one():
    current = partition([1, 2, 3], [1, 2], 1)
    assert build(current, isr=[2], unacceptable={1, 2}) == change(isr=(2,), leader=-1)


def test_unclean_election_picks_the_first_acceptable_replica_and_resets_the_isr():
    current = partition([1, 2, 3], [1], 1)
    record = build(current, isr=[], unacceptable={1}, election=Election.UNCLEAN)
    assert record == change(isr=(2,), leader=2, leader_recovery_state=1)
    assert current.merge(record) == partition([1, 2, 3], [2], 2, 6, 10, recovery=1)


def test_unclean_election_is_not_used_while_a_clean_leader_exists():
    current = partition([1, 2, 3], [1, 3], 1)
    assert build(current, isr=[3], unacceptable={1}, election=Election.UNCLEAN) == \
        change(isr=(3,), leader=3)


def test_unclean_election_with_no_acceptable_replica_gives_no_leader():
    current = partition([1, 2], [1], 1)
    assert build(current, isr=[], unacceptable={1, 2}, election=Election.UNCLEAN) == \
        change(leader=-1)


def test_a_leaderless_partition_elects_a_returning_isr_member():
    current = partition([1, 2, 3], [2], -1)
    assert build(current) == change(leader=2)


def test_preferred_election_moves_leadership_to_the_first_replica_in_the_isr():
    current = partition([1, 2, 3], [1, 2, 3], 2)
    assert build(current, election=Election.PREFERRED) == change(leader=1)


def test_preferred_election_keeps_a_valid_current_leader_if_the_preferred_is_not_valid():
    current = partition([1, 2, 3], [2, 3], 2)
    assert build(current, election=Election.PREFERRED) is None
    assert build(partition([1, 2, 3], [1, 2, 3], 2), election=Election.PREFERRED,
                 unacceptable={1}) is None


def test_preferred_election_falls_back_to_replica_order_without_a_valid_leader():
    current = partition([1, 2, 3], [2, 3], 2)
    assert build(current, election=Election.PREFERRED, unacceptable={2}) == change(leader=3)


def test_removing_a_replica_forces_a_leader_epoch_bump_with_the_same_leader():
    current = partition([1, 2, 3], [1, 2], 1)
    record = build(current, isr=[1, 2], replicas=[1, 2])
    assert record == change(leader=1, replicas=(1, 2))
    merged = current.merge(record)
    assert (merged.leader, merged.leader_epoch, merged.partition_epoch) == (1, 6, 10)


def test_adding_a_replica_does_not_bump_the_leader_epoch():
    assert build(partition([1, 2], [1, 2], 1), replicas=[1, 2, 3]) == change(replicas=(1, 2, 3))


def test_a_leader_recovery_state_change_is_written():
    current = partition([1, 2], [1], 1, recovery=1)
    assert build(current, recovery=0) == change(leader_recovery_state=0)


def test_merge_bumps_partition_epoch_always_and_leader_epoch_only_on_a_leader_field():
    current = partition([1, 2, 3], [1, 2, 3], 1)
    isr_only = current.merge(change(isr=(1, 2)))
    assert (isr_only.leader_epoch, isr_only.partition_epoch) == (5, 10)
    same_leader = current.merge(change(leader=1))
    assert (same_leader.leader, same_leader.leader_epoch, same_leader.partition_epoch) == \
        (1, 6, 10)
    no_leader = current.merge(change(leader=-1))
    assert (no_leader.leader, no_leader.leader_epoch) == (-1, 6)
