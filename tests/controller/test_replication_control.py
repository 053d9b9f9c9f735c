"""Leaders, ISRs, elections and AlterPartition, in Kafka's controller-test style:
act, assert the exact records, replay, assert the state."""

import uuid

import pytest

from tidelog.controller import (
    AlterPartitionItem,
    AlterPartitionRequest,
    ElectionType,
)
from tidelog.controller.invariants import check_invariants
from tidelog.testing.controller import ControllerTestEnv
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata import replay_all
from tidelog.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)


def five_brokers_and_foo() -> ControllerTestEnv:
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2, 3, 4)
    result = env.create_topic("foo", assignments=[[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0]])
    assert result.error_code == ErrorCode.NONE
    return env


def state(env: ControllerTestEnv, topic: str) -> list[tuple]:
    """(leader, leader_epoch, partition_epoch, isr) of each partition, in order."""
    image = env.controller.image
    return [(p.leader, p.leader_epoch, p.partition_epoch, p.isr)
            for tp, p in image.all_partitions() if tp.topic == topic]


def test_creating_a_topic_writes_the_topic_then_its_partitions():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2, 3, 4)
    end = env.log.end_offset
    result = env.create_topic("foo", assignments=[[0, 1, 2], [1, 2, 3]])
    topic_id = result.topic_id
    assert (result.num_partitions, result.replication_factor) == (2, 3)
    assert env.records_from(end) == [
        TopicRecord("foo", topic_id),
        PartitionRecord(topic_id, 0, (0, 1, 2), (0, 1, 2), 0, 0, 0),
        PartitionRecord(topic_id, 1, (1, 2, 3), (1, 2, 3), 1, 0, 0),
    ]


def test_fencing_brokers_2_and_3_moves_leaders_in_replica_order_and_shrinks_isrs():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")

    end = env.log.end_offset
    assert env.fence(2).is_fenced
    assert env.records_from(end) == [
        PartitionChangeRecord(foo, 0, isr=(0, 1)),
        PartitionChangeRecord(foo, 1, isr=(1, 3)),
        PartitionChangeRecord(foo, 2, isr=(3, 4), leader=3),
        FenceBrokerRecord(2, 2),
    ]
    end = env.log.end_offset
    assert env.fence(3).is_fenced
    assert env.records_from(end) == [
        PartitionChangeRecord(foo, 1, isr=(1,)),
        PartitionChangeRecord(foo, 2, isr=(4,), leader=4),
        PartitionChangeRecord(foo, 3, isr=(4, 0), leader=4),
        FenceBrokerRecord(3, 3),
    ]
    expected = [
        (0, 0, 1, (0, 1)),
        (1, 0, 2, (1,)),
        (4, 2, 2, (4,)),
        (4, 1, 1, (4, 0)),
    ]
    assert state(env, "foo") == expected
    # Replaying the records rebuilds the same state, on a broker and on a new controller.
    replayed = replay_all(env.log.read(0))
    assert replayed == env.controller.image
    restarted = ControllerTestEnv(log=env.log, clock=env.clock)
    assert state(restarted, "foo") == expected
    restarted.check_consistent()
    check_invariants(env.controller.image)


def test_the_last_isr_member_fenced_leaves_leader_minus_one_and_keeps_the_isr():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    env.fence(2)
    env.fence(3)
    end = env.log.end_offset
    env.fence(1)                            # foo-1's ISR is [1]
    assert PartitionChangeRecord(foo, 1, leader=-1) in env.records_from(end)
    assert state(env, "foo")[1] == (-1, 1, 3, (1,))
    check_invariants(env.controller.image)


def test_unclean_election_off_keeps_the_partition_leaderless():
    env = five_brokers_and_foo()
    env.fence(2)
    env.fence(3)
    env.fence(1)
    env.heartbeat(2)                        # a replica outside the ISR comes back
    env.heartbeat(3)
    assert state(env, "foo")[1][0] == -1


def test_unclean_election_on_elects_the_first_live_replica_with_isr_of_it():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[0, 1, 2]],
                     configs={"unclean.leader.election.enable": "true"})
    t = env.topic_id("t")
    _alter(env, "t", 0, sender=0, isr=(0,))
    end = env.log.end_offset
    env.fence(0)
    assert env.records_from(end) == [
        PartitionChangeRecord(t, 0, isr=(1,), leader=1, leader_recovery_state=1),
        FenceBrokerRecord(0, 0)]
    partition = env.partition("t", 0)
    assert (partition.leader, partition.leader_epoch, partition.isr,
            partition.leader_recovery_state) == (1, 1, (1,), 1)


@pytest.mark.parametrize("static, elected", [({"unclean.leader.election.enable": "true"}, 1), ({}, -1)])
def test_unclean_leader_election_enable_in_the_controllers_properties_is_honoured(static, elected):
    """Set in server.properties (not as a topic config), as operators usually set it."""
    env = ControllerTestEnv(static_configs=static)
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[0, 1, 2]])
    _alter(env, "t", 0, sender=0, isr=(0,))
    env.fence(0)
    assert env.partition("t", 0).leader == elected


def test_a_topic_config_overrides_the_controllers_static_setting():
    env = ControllerTestEnv(static_configs={"unclean.leader.election.enable": "true"})
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[0, 1, 2]], configs={"unclean.leader.election.enable": "false"})
    _alter(env, "t", 0, sender=0, isr=(0,))
    env.fence(0)
    assert env.partition("t", 0).leader == -1


def test_unclean_election_on_request_ignores_the_topic_config():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[0, 1]])
    _alter(env, "t", 0, sender=0, isr=(0,))
    env.fence(0)
    results = env.controller.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("t", 0)])
    assert results[0].error_code == ErrorCode.NONE
    assert env.partition("t", 0).leader == 1 and env.partition("t", 0).isr == (1,)
    again = env.controller.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("t", 0)])
    assert again[0].error_code == ErrorCode.ELECTION_NOT_NEEDED


def test_controlled_shutdown_moves_leaders_away_then_says_shutdown_now():
    env = five_brokers_and_foo()
    foo = env.topic_id("foo")
    end = env.log.end_offset
    reply = env.heartbeat(1, want_shut_down=True)
    assert reply.in_controlled_shutdown and not reply.should_shut_down and not reply.is_fenced
    assert env.records_from(end) == [
        BrokerRegistrationChangeRecord(1, 1, in_controlled_shutdown=True),
        PartitionChangeRecord(foo, 0, isr=(0, 2)),
        PartitionChangeRecord(foo, 1, isr=(2, 3), leader=2),
    ]
    assert not env.controller.replication.has_leaderships(1)
    # The others have not replayed that yet: keep waiting.
    for broker_id in (0, 2, 3, 4):
        env.heartbeat(broker_id, metadata_offset=end - 1)
    assert env.heartbeat(1, want_shut_down=True).in_controlled_shutdown
    for broker_id in (0, 2, 3, 4):
        env.heartbeat(broker_id)
    end = env.log.end_offset
    reply = env.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced
    assert env.records_from(end) == [FenceBrokerRecord(1, 1)]
    # A shut-down incarnation never comes back: only a new registration does.
    assert env.heartbeat(1).should_shut_down
    check_invariants(env.controller.image)


def test_a_broker_that_leads_nothing_is_told_to_shut_down_at_once():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[0, 1]])
    end = env.log.end_offset
    reply = env.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down
    assert env.records_from(end) == [PartitionChangeRecord(env.topic_id("t"), 0, isr=(0,)),
                                     FenceBrokerRecord(1, 1)]


def test_a_broker_in_controlled_shutdown_is_not_an_acceptable_leader():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[2, 0]])
    _alter(env, "t", 0, sender=2, isr=(2,))
    env.fence(0)
    assert env.heartbeat(2, want_shut_down=True).in_controlled_shutdown
    assert (env.partition("t", 0).leader, env.partition("t", 0).isr) == (-1, (2,))
    env.heartbeat(0)                    # unfencing elects leaderless partitions ...
    assert env.partition("t", 0).leader == -1   # ... but 2 is shutting down, 0 not in ISR
    results = env.controller.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)])
    assert results[0].error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


# ---------------------------------------------------------------- AlterPartition

def _alter(env, topic, partition_id, sender, isr, leader_epoch=None, partition_epoch=None,
           broker_epoch=None, isr_epochs=None):
    current = env.partition(topic, partition_id)
    item = AlterPartitionItem(
        env.topic_id(topic), partition_id,
        current.leader_epoch if leader_epoch is None else leader_epoch,
        current.partition_epoch if partition_epoch is None else partition_epoch,
        tuple(isr), new_isr_broker_epochs=isr_epochs)
    response = env.controller.alter_partition(AlterPartitionRequest(
        sender, env.broker_epochs[sender] if broker_epoch is None else broker_epoch, (item,)))
    if response.error_code != ErrorCode.NONE:
        return response.error_code
    return response.partitions[0]


def alter_partition_env():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2, 3)
    env.create_topic("t", assignments=[[0, 1, 2]])
    env.fence(0)                      # leader 1, leader epoch 1, partition epoch 1
    env.heartbeat(0)
    return env


def test_alter_partition_commits_an_isr_change_bumping_only_the_partition_epoch():
    env = alter_partition_env()
    end = env.log.end_offset
    result = _alter(env, "t", 0, sender=1, isr=(1, 2, 0))
    assert result.error_code == ErrorCode.NONE
    assert (result.leader, result.leader_epoch, result.partition_epoch, result.isr) == \
        (1, 1, 2, (1, 2, 0))
    assert env.records_from(end) == [PartitionChangeRecord(env.topic_id("t"), 0, isr=(1, 2, 0))]


def test_alter_partition_from_an_old_leader_epoch_is_fenced():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=0, isr=(0, 1), leader_epoch=0).error_code == \
        ErrorCode.FENCED_LEADER_EPOCH


def test_alter_partition_with_a_stale_partition_epoch_is_an_invalid_update_version():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=1, isr=(1,), partition_epoch=0).error_code == \
        ErrorCode.INVALID_UPDATE_VERSION


def test_alter_partition_from_a_broker_that_is_not_the_leader_is_an_invalid_request():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=2, isr=(1, 2)).error_code == ErrorCode.INVALID_REQUEST


def test_alter_partition_with_a_fenced_isr_member_is_an_ineligible_replica():
    env = alter_partition_env()
    env.fence(2)
    result = _alter(env, "t", 0, sender=1, isr=(1, 2))
    assert result.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert "2 (fenced)" in result.error_message


def test_alter_partition_with_a_stale_isr_member_broker_epoch_is_an_ineligible_replica():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=1, isr=(1, 2), isr_epochs=(-1, 77)).error_code == \
        ErrorCode.INELIGIBLE_REPLICA
    assert _alter(env, "t", 0, sender=1, isr=(1, 2), isr_epochs=(-1, 2)).error_code == \
        ErrorCode.NONE


def test_alter_partition_epochs_ahead_of_the_controller_mean_not_controller():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=1, isr=(1,), leader_epoch=2).error_code == \
        ErrorCode.NOT_CONTROLLER
    assert _alter(env, "t", 0, sender=1, isr=(1,), partition_epoch=2).error_code == \
        ErrorCode.NOT_CONTROLLER


@pytest.mark.parametrize("isr", [(1, 3), (2,), (1, 1)])
def test_alter_partition_with_non_replicas_or_without_the_leader_is_an_invalid_request(isr):
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=1, isr=isr).error_code == ErrorCode.INVALID_REQUEST


def test_alter_partition_checks_the_leader_epoch_before_the_sender():
    env = alter_partition_env()       # broker 0 is not the leader *and* has an old epoch
    assert _alter(env, "t", 0, sender=0, isr=(0,), leader_epoch=0).error_code == \
        ErrorCode.FENCED_LEADER_EPOCH


def test_alter_partition_from_a_stale_broker_epoch_is_refused_whole():
    env = alter_partition_env()
    assert _alter(env, "t", 0, sender=1, isr=(1,), broker_epoch=0) == \
        ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_for_an_unknown_partition_or_topic():
    env = alter_partition_env()
    response = env.controller.alter_partition(AlterPartitionRequest(1, env.broker_epochs[1], (
        AlterPartitionItem(env.topic_id("t"), 9, 1, 1, (1,)),
        AlterPartitionItem(uuid.UUID(int=12345), 0, 1, 1, (1,)))))
    assert [p.error_code for p in response.partitions] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID]


# ---------------------------------------------------------------- preferred election

def test_preferred_election_moves_leadership_back_to_the_first_replica():
    env = alter_partition_env()        # t-0: replicas [0,1,2], leader 1, 0 not in ISR
    tp = TopicPartition("t", 0)
    assert env.controller.elect_leaders(ElectionType.PREFERRED, [tp])[0].error_code == \
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    _alter(env, "t", 0, sender=1, isr=(1, 2, 0))
    end = env.log.end_offset
    assert env.controller.elect_leaders(ElectionType.PREFERRED, [tp])[0].error_code == \
        ErrorCode.NONE
    assert env.records_from(end) == [PartitionChangeRecord(env.topic_id("t"), 0, leader=0)]
    assert (env.partition("t", 0).leader, env.partition("t", 0).leader_epoch) == (0, 2)
    assert env.controller.elect_leaders(ElectionType.PREFERRED, [tp])[0].error_code == \
        ErrorCode.ELECTION_NOT_NEEDED
    assert env.controller.elect_leaders(ElectionType.PREFERRED) == []


def test_auto_rebalance_elects_preferred_leaders_of_brokers_over_the_imbalance_percentage():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[0, 1, 2], [0, 2, 1], [1, 2, 0], [2, 0, 1]])
    env.fence(0)                                   # broker 0's two preferred partitions move away
    env.heartbeat(0)
    for p in (0, 1):
        _alter(env, "t", p, sender=env.partition("t", p).leader, isr=(0, 1, 2))
    assert [env.partition("t", p).leader for p in range(4)] != [0, 0, 1, 2]
    assert env.controller.balance_partition_leaders(percentage=100) == 0     # 2 of 2 is not over 100%
    assert env.controller.balance_partition_leaders(percentage=10) == 2
    assert [env.partition("t", p).leader for p in range(4)] == [0, 0, 1, 2]
    assert env.controller.balance_partition_leaders(percentage=10) == 0
