"""Partition reassignment (KIP-455) in the controller: act, assert the exact records,
replay, assert the state (controller/reassignment.py)."""

import random
import uuid

import pytest

from tidelog.controller import AlterPartitionItem, AlterPartitionRequest
from tidelog.controller.reassignment import (
    OngoingReassignment,
    ReassignmentResult,
    ReassignmentTarget,
    reassignment_replicas,
    revert,
)
from tidelog.controller.invariants import check_invariants
from tidelog.testing.controller import ControllerTestEnv, random_operation
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.delta import MetadataDelta, replay_all
from tidelog.metadata.records import PartitionChangeRecord, decode, encode


def five_brokers_and_foo(**topic_configs) -> ControllerTestEnv:
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2, 3, 4)
    assert env.create_topic("foo", assignments=[[0, 1, 2], [1, 2, 3]],
                            configs=topic_configs).error_code == ErrorCode.NONE
    return env


def reassign(env, *targets, allow_replication_factor_change=True):
    return env.controller.alter_partition_reassignments(
        [ReassignmentTarget(topic, p, None if replicas is None else tuple(replicas))
         for topic, p, replicas in targets], allow_replication_factor_change)


def local_changes(env, offset, broker_id):
    """What ``broker_id`` must do after replaying the records from ``offset`` on."""
    delta = MetadataDelta(replay_all((o, r) for o, r in env.log.read(0) if o < offset))
    for o, record in env.log.read(offset):
        delta.replay(record, o)
    return delta.local_changes(broker_id)


def alter_isr(env, topic, partition_id, isr):
    p = env.partition(topic, partition_id)
    response = env.controller.alter_partition(AlterPartitionRequest(
        p.leader, env.broker_epochs[p.leader],
        (AlterPartitionItem(env.topic_id(topic), partition_id, p.leader_epoch, p.partition_epoch,
                            tuple(isr)),)))
    return response.partitions[0]


def test_the_pure_rules_target_union_current_and_revert():
    assert reassignment_replicas((0, 1, 2), (2, 3, 4)) == ((2, 3, 4, 0, 1), (3, 4), (0, 1))
    assert reassignment_replicas((0, 1, 2), (2, 1, 0)) == ((2, 1, 0), (), ())
    env = five_brokers_and_foo()
    reassign(env, ("foo", 0, [2, 3, 4]))
    assert revert(env.partition("foo", 0)) == ((2, 0, 1), (0, 1, 2), False)


def test_a_move_adds_replicas_waits_for_the_isr_then_drops_the_old_ones_and_their_leader():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    end = env.log.end_offset
    assert reassign(env, ("foo", 0, [2, 3, 4])) == [ReassignmentResult("foo", 0)]
    assert env.records_from(end) == [PartitionChangeRecord(
        foo, 0, replicas=(2, 3, 4, 0, 1), adding_replicas=(3, 4), removing_replicas=(0, 1))]
    p = env.partition("foo", 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (0, 0, 1, (0, 1, 2))
    assert env.controller.list_partition_reassignments() == [
        OngoingReassignment("foo", 0, (2, 3, 4, 0, 1), (3, 4), (0, 1))]
    # Brokers 3 and 4 replaying the record follow the partition: they create its log and fetch.
    assert TopicPartition("foo", 0) in local_changes(env, end, 3).followers

    end = env.log.end_offset
    assert alter_isr(env, "foo", 0, [0, 1, 2, 3]).error_code == ErrorCode.NONE
    assert env.records_from(end) == [PartitionChangeRecord(foo, 0, isr=(0, 1, 2, 3))]
    assert env.partition("foo", 0).is_reassigning

    end = env.log.end_offset
    result = alter_isr(env, "foo", 0, [0, 1, 2, 3, 4])
    # The ISR change completed the move and moved leadership off broker 0, which is
    # being removed: written, and answered NEW_LEADER_ELECTED (Kafka's ReplicationControlManager, as KIP-455 describes).
    assert result.error_code == ErrorCode.NEW_LEADER_ELECTED
    assert env.records_from(end) == [PartitionChangeRecord(
        foo, 0, isr=(2, 3, 4), leader=2, replicas=(2, 3, 4), adding_replicas=(), removing_replicas=())]
    p = env.partition("foo", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((2, 3, 4), (2, 3, 4), 2, 1)
    assert not p.is_reassigning and env.controller.list_partition_reassignments() == []
    # Brokers 0 and 1 replaying it delete their replica.
    assert TopicPartition("foo", 0) in local_changes(env, end, 0).deletes
    assert TopicPartition("foo", 0) in local_changes(env, end, 2).leaders
    check_invariants(env.controller.image)
    env.check_consistent()


def test_a_completion_that_keeps_the_leader_still_bumps_the_leader_epoch_to_fence_removed_replicas():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    reassign(env, ("foo", 0, [0, 3]))
    end = env.log.end_offset
    assert alter_isr(env, "foo", 0, [0, 1, 2, 3]).error_code == ErrorCode.NONE
    assert env.records_from(end) == [PartitionChangeRecord(
        foo, 0, isr=(0, 3), leader=0, replicas=(0, 3), adding_replicas=(), removing_replicas=())]
    assert env.partition("foo", 0).leader_epoch == 1


def test_reordering_or_shrinking_within_the_isr_completes_at_once():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    end = env.log.end_offset
    assert reassign(env, ("foo", 0, [2, 1, 0]), ("foo", 1, [3, 2])) == [
        ReassignmentResult("foo", 0), ReassignmentResult("foo", 1)]
    assert env.records_from(end) == [
        PartitionChangeRecord(foo, 0, replicas=(2, 1, 0)),
        PartitionChangeRecord(foo, 1, isr=(2, 3), leader=3, replicas=(3, 2))]
    assert env.controller.list_partition_reassignments() == []


def test_cancelling_removes_the_adding_replicas_and_keeps_the_original_ones():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    reassign(env, ("foo", 0, [2, 3, 4]))
    alter_isr(env, "foo", 0, [0, 1, 2, 3])
    end = env.log.end_offset
    assert reassign(env, ("foo", 0, None)) == [ReassignmentResult("foo", 0)]
    assert env.records_from(end) == [PartitionChangeRecord(
        foo, 0, isr=(0, 1, 2), leader=0, replicas=(2, 0, 1), adding_replicas=(), removing_replicas=())]
    p = env.partition("foo", 0)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((2, 0, 1), (0, 1, 2), 0, 1)
    assert reassign(env, ("foo", 0, None)) == [ReassignmentResult(
        "foo", 0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")]


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it():
    for unclean in (False, True):
        env = five_brokers_and_foo(**({"unclean.leader.election.enable": "true"} if unclean else {}))
        reassign(env, ("foo", 0, [3, 4]))
        alter_isr(env, "foo", 0, [0, 1, 2, 3])
        for broker_id in (0, 1, 2):         # only the adding replica 3 is left in the ISR
            env.fence(broker_id)
        assert env.partition("foo", 0).isr == (3,) and env.partition("foo", 0).leader == 3
        end = env.log.end_offset
        result = reassign(env, ("foo", 0, None))[0]
        if not unclean:
            assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            assert "would require an unclean leader election" in result.error_message
            assert env.records_from(end) == []
        else:
            assert result.error_code == ErrorCode.NONE
            p = env.partition("foo", 0)
            assert (p.replicas, p.isr, p.leader, p.is_reassigning) == ((0, 1, 2), (0,), -1, False)


@pytest.mark.parametrize("replicas, code, message", [
    ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    ([1, 9, 2], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([3, 1, 3], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 3 more than once."),
])
def test_bad_replica_lists_are_refused_with_kafkas_codes_and_nothing_is_written(replicas, code, message):
    env = five_brokers_and_foo()
    end = env.log.end_offset
    before = env.partition("foo", 0)
    assert reassign(env, ("foo", 0, replicas), ("foo", 1, [1, 2, 4])) == [
        ReassignmentResult("foo", 0, code, message), ReassignmentResult("foo", 1)]
    assert len(env.records_from(end)) == 1 and env.partition("foo", 0) == before


def test_unknown_topics_and_partitions_and_disallowed_replication_factor_changes():
    env = five_brokers_and_foo()
    end = env.log.end_offset
    assert reassign(env, ("bar", 0, [1]), ("foo", 7, [1])) == [
        ReassignmentResult("bar", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named bar."),
        ReassignmentResult("foo", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition foo:7.")]
    assert reassign(env, ("foo", 0, [1, 2]), allow_replication_factor_change=False) == [
        ReassignmentResult("foo", 0, ErrorCode.INVALID_REPLICATION_FACTOR,
                           "The replication factor is changed from 3 to 2")]
    assert env.records_from(end) == []
    assert reassign(env, ("foo", 0, [4, 3, 2]), allow_replication_factor_change=False) == [
        ReassignmentResult("foo", 0)]


def test_a_reassignment_survives_a_controller_failover_and_completes_on_the_new_controller():
    env = five_brokers_and_foo()
    reassign(env, ("foo", 0, [2, 3, 4]))
    successor = ControllerTestEnv(log=env.log, clock=env.clock)   # replays the same metadata log
    successor.broker_epochs = dict(env.broker_epochs)
    assert successor.controller.list_partition_reassignments() == [
        OngoingReassignment("foo", 0, (2, 3, 4, 0, 1), (3, 4), (0, 1))]
    for broker_id in range(5):
        successor.heartbeat(broker_id)
    assert alter_isr(successor, "foo", 0, [0, 1, 2, 3, 4]).error_code == ErrorCode.NEW_LEADER_ELECTED
    p = successor.partition("foo", 0)
    assert (p.replicas, p.leader, p.is_reassigning) == ((2, 3, 4), 2, False)
    successor.check_consistent()


def test_listing_given_partitions_leaves_out_idle_and_unknown_ones():
    env = five_brokers_and_foo()
    reassign(env, ("foo", 1, [1, 2, 4]))
    assert env.controller.list_partition_reassignments({"foo": [0, 1, 5], "nope": [0]}) == [
        OngoingReassignment("foo", 1, (1, 2, 4, 3), (4,), (3,))]


def test_random_workloads_with_reassignments_keep_the_invariants_and_replay_equal():
    for seed in range(20):
        env = ControllerTestEnv(seed=seed)
        rng = random.Random(seed)
        previous = env.controller.image
        for _ in range(150):
            if rng.random() < 0.25 and env.controller.replication.topic_ids:
                topic = rng.choice(sorted(env.controller.replication.topic_ids))
                brokers = sorted(env.controller.cluster.brokers)
                replicas = None if rng.random() < 0.2 else rng.sample(brokers, rng.randint(1, len(brokers)))
                reassign(env, (topic, 0, replicas))
            else:
                random_operation(env, rng)
            image = env.controller.image
            check_invariants(image, previous)
            previous = image
            for tp, p in image.all_partitions():
                assert set(p.adding_replicas) | set(p.removing_replicas) <= set(p.replicas), (seed, tp, p)
        env.check_consistent()


def test_the_records_carry_a_reassignment_from_version_3_and_snapshots_keep_it():
    topic_id = uuid.UUID(int=7)
    change = PartitionChangeRecord(topic_id, 0, replicas=(3, 2, 1), adding_replicas=(3,), removing_replicas=(1,))
    assert decode(encode(change)) == change
    # frame version 1, api key 5, then the record's version: 3 only when a reassignment is set
    assert encode(change)[:3] == bytes([1, 5, 3])
    assert encode(PartitionChangeRecord(topic_id, 0, isr=(1, 2)))[:3] == bytes([1, 5, 0])
    env = five_brokers_and_foo()
    reassign(env, ("foo", 0, [2, 3, 4]))
    env.controller.write_snapshot()
    successor = ControllerTestEnv(log=env.log, clock=env.clock)        # loads the snapshot
    assert env.log.latest_snapshot() is not None
    assert successor.controller.list_partition_reassignments() == [
        OngoingReassignment("foo", 0, (2, 3, 4, 0, 1), (3, 4), (0, 1))]
    assert successor.partition("foo", 0) == env.partition("foo", 0)
