"""A failed log directory reported to the controller (KIP-858).

A broker registers its log directory ids; each partition names the directory of
each replica; a heartbeat's ``offline_log_dirs`` moves the broker out of the
partitions on those directories at once — leadership and ISR — and a broker left
with no online directory is fenced in the same write. Before, nothing reached the
controller: the partitions led from the failed directory took no writes until the
broker was restarted.
"""

import random

from tidelog.controller.messages import ElectionType
from tidelog.controller.invariants import check_invariants
from tidelog.testing.controller import ControllerTestEnv, directory_id, random_operation
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
)
from tidelog.metadata.registrations import UNASSIGNED_DIR

D00, D01 = directory_id(0, 0, 0), directory_id(0, 0, 1)
D10, D20 = directory_id(1, 0, 0), directory_id(2, 0, 0)


def cluster(dirs=(2, 1, 1)) -> ControllerTestEnv:
    """Brokers 0, 1, 2 registered with ``dirs[b]`` log directories each, unfenced;
    topic ``t``: t-0 and t-1 led by broker 0, which placed them in its directories 0
    and 1."""
    env = ControllerTestEnv()
    for broker_id, count in enumerate(dirs):
        assert env.register(broker_id, log_dirs=count).error_code == ErrorCode.NONE
    for broker_id in range(len(dirs)):
        assert not env.heartbeat(broker_id).is_fenced
    assert env.create_topic("t", assignments=[(0, 1, 2), (0, 2, 1)]).error_code == ErrorCode.NONE
    if dirs[0] == 2:
        response = env.assign_replicas_to_dirs(0, {TopicPartition("t", 0): D00, TopicPartition("t", 1): D01})
        assert [code for _, code in response.results] == [ErrorCode.NONE, ErrorCode.NONE]
    return env


def test_new_replicas_go_to_the_only_directory_of_their_broker_else_unassigned():
    env = cluster()
    # broker 0 has two directories: unassigned until it says (done in cluster()).
    env2 = ControllerTestEnv()
    for broker_id, count in enumerate((2, 1, 1)):
        env2.register(broker_id, log_dirs=count)
        env2.heartbeat(broker_id)
    env2.create_topic("t", assignments=[(0, 1, 2)])
    assert env2.partition("t", 0).directories == (UNASSIGNED_DIR, D10, D20)
    assert env.partition("t", 0).directories == (D00, D10, D20)
    assert env.partition("t", 1).directories == (D01, D20, D10)


def test_a_heartbeat_reporting_a_failed_directory_moves_its_partitions_at_once():
    env = cluster()
    topic_id = env.topic_id("t")
    end = env.log.end_offset
    reply = env.heartbeat(0, offline_log_dirs=[D00])
    assert reply.error_code == ErrorCode.NONE and not reply.is_fenced
    # t-0 (on the failed directory) gets another leader and loses broker 0 from its
    # ISR; t-1, on the other directory, keeps its leader; the registration keeps the
    # directory still online.
    assert env.records_from(end) == [
        PartitionChangeRecord(topic_id, 0, isr=(1, 2), leader=1),
        BrokerRegistrationChangeRecord(0, env.broker_epochs[0], log_dirs=(D01,)),
    ]
    assert (env.partition("t", 0).leader, env.partition("t", 0).isr) == (1, (1, 2))
    assert (env.partition("t", 1).leader, env.partition("t", 1).isr) == (0, (0, 2, 1))
    assert env.log_dirs(0) == (D01,)
    # Reported again (every heartbeat carries it): nothing more is written.
    end = env.log.end_offset
    assert not env.heartbeat(0, offline_log_dirs=[D00]).is_fenced
    assert env.records_from(end) == []
    check_invariants(env.controller.image)
    env.check_consistent()


def test_a_broker_whose_every_directory_failed_is_fenced_by_that_heartbeat_and_stays_fenced():
    env = cluster(dirs=(1, 1, 1))
    topic_id = env.topic_id("t")
    end = env.log.end_offset
    reply = env.heartbeat(0, offline_log_dirs=[D00])
    assert reply.is_fenced
    assert env.records_from(end) == [
        PartitionChangeRecord(topic_id, 0, isr=(1, 2), leader=1),
        PartitionChangeRecord(topic_id, 1, isr=(2, 1), leader=2),
        FenceBrokerRecord(0, env.broker_epochs[0]),
        BrokerRegistrationChangeRecord(0, env.broker_epochs[0], log_dirs=()),
    ]
    # Still reporting it, caught up, not asking to be fenced: it stays fenced.
    end = env.log.end_offset
    for _ in range(3):
        assert env.heartbeat(0, offline_log_dirs=[D00]).is_fenced
    assert env.records_from(end) == []
    # A new process with a working (new) disk is unfenced as usual.
    env.restart(0, log_dirs=1)
    assert not env.heartbeat(0).is_fenced
    check_invariants(env.controller.image)


def test_a_replica_on_a_failed_directory_is_never_elected():
    env = cluster()
    env.heartbeat(0, offline_log_dirs=[D00])
    # Brokers 1 and 2 fence: t-0 has no leader; broker 0 is active but its replica
    # of t-0 is on the failed directory, so not even an unclean election picks it.
    env.fence(1)
    env.fence(2)
    assert env.partition("t", 0).leader == -1
    assert env.partition("t", 1).leader == 0
    results = env.controller.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("t", 0)])
    assert results[0].error_code == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert env.partition("t", 0).leader == -1


def test_a_replica_placed_in_a_directory_already_offline_leaves_the_partition():
    env = ControllerTestEnv()
    for broker_id, count in enumerate((2, 1, 1)):
        env.register(broker_id, log_dirs=count)
        env.heartbeat(broker_id)
    env.create_topic("t", assignments=[(0, 1, 2)])
    topic_id = env.topic_id("t")
    # Directory 0 fails before broker 0 said t-0 is there: the report moves nothing.
    end = env.log.end_offset
    env.heartbeat(0, offline_log_dirs=[D00])
    assert env.records_from(end) == [BrokerRegistrationChangeRecord(0, env.broker_epochs[0], log_dirs=(D01,))]
    assert env.partition("t", 0).leader == 0
    # Then it says where t-0 was: the same write moves leadership and ISR away.
    end = env.log.end_offset
    response = env.assign_replicas_to_dirs(0, {TopicPartition("t", 0): D00})
    assert response.results[0][1] == ErrorCode.NONE
    assert env.records_from(end) == [
        PartitionChangeRecord(topic_id, 0, leader=1, directories=(D00, D10, D20)),
        PartitionChangeRecord(topic_id, 0, isr=(1, 2)),
    ]
    check_invariants(env.controller.image)


def test_assign_replicas_to_dirs_refuses_what_is_not_the_brokers():
    env = cluster()
    response = env.assign_replicas_to_dirs(1, {TopicPartition("t", 0): D10})
    assert response.results[0][1] == ErrorCode.NONE
    env.create_topic("u", assignments=[(2,)])
    response = env.assign_replicas_to_dirs(1, {TopicPartition("u", 0): D10})
    assert response.results[0][1] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    env.broker_epochs[1] -= 1
    response = env.assign_replicas_to_dirs(1, {TopicPartition("t", 0): D10})
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_random_workloads_with_directory_failures_keep_the_invariants():
    """Registrations with 0-2 directories, heartbeats reporting some offline,
    placements, fencing, elections: after every step a leader is an active broker
    whose replica is on an online directory, and the managers equal a replay."""
    for seed in range(8):
        env = ControllerTestEnv(seed=seed)
        rng = random.Random(seed)
        previous = env.controller.image
        for _ in range(250):
            random_operation(env, rng)
            image = env.controller.image
            check_invariants(image, previous)
            previous = image
        env.check_consistent()
