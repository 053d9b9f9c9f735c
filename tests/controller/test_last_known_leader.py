"""KIP-966's last known leader (``last_known_elr`` in Kafka 4.4's default mode): which
write records it, which clears it, and when it is elected. Kafka 4.4's
``PartitionChangeBuilder.maybeUpdateLastKnownLeader`` records the leader in the write
that leaves the partition *leaderless*, not in the one that empties the ISR: the ISR
can outlive the leader when its other members' directories are offline, and when it
empties at last nobody leads any more (simulator seed 5009)."""

from tidelog.controller import AlterPartitionItem, AlterPartitionRequest
from tidelog.controller.feature_control import broker_features
from tidelog.testing.controller import ControllerTestEnv, directory_id
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import LeaderRecoveryState, PartitionChangeRecord
from tests.controller.test_eligible_leader_replicas import check

ELR_ON = {"eligible.leader.replicas.version": 1}
TP = TopicPartition("foo", 0)
D0, D1 = directory_id(0, 0, 0), directory_id(1, 0, 0)


def two_replicas() -> ControllerTestEnv:
    """Brokers 0, 1, 2 with two log directories each; foo-0 on replicas [0, 1] (min ISR
    1, the broker default, as for ``__consumer_offsets``), in the first directory of
    each, led by 0."""
    env = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features())
    for broker_id in (0, 1, 2):
        assert env.register(broker_id, log_dirs=2).error_code == ErrorCode.NONE
    for broker_id in (0, 1, 2):
        assert not env.heartbeat(broker_id).is_fenced
    assert env.create_topic("foo", assignments=[[0, 1]]).error_code == ErrorCode.NONE
    for broker_id, directory in ((0, D0), (1, D1)):
        assert env.assign_replicas_to_dirs(broker_id, {TP: directory}).results[0][1] == ErrorCode.NONE
    return env


def after(env: ControllerTestEnv, action) -> list:
    end = env.log.end_offset
    action()
    return [r for r in env.records_from(end) if isinstance(r, PartitionChangeRecord)]


def shape(env: ControllerTestEnv) -> tuple:
    p = env.partition("foo", 0)
    return p.leader, p.isr, p.elr, p.last_known_elr


def test_the_leader_is_recorded_when_the_partition_becomes_leaderless_with_an_isr_left():
    """Seed 5009's shape. Broker 1's directory goes offline (it leaves the ISR); a fetch
    it sent before noticing is answered late and the leader puts it back (Kafka's
    controller accepts: it is unfenced, its broker epoch matches). Then the leader
    goes: ISR [1], but 1 may not lead (its replica's directory is offline), so the
    partition is leaderless and 0 is its last known leader. 1 is fenced (ISR [],
    ELR [1]) and comes back from an unclean shutdown (ELR []). Nobody in ISR or
    ELR: 0, the last leader, leads again once it is back (RECOVERING)."""
    env = two_replicas()
    foo_id = env.topic_id("foo")
    assert after(env, lambda: env.heartbeat(1, offline_log_dirs=[D1])) == [
        PartitionChangeRecord(foo_id, 0, isr=(0,))]
    p = env.partition("foo", 0)
    reply = env.controller.alter_partition(AlterPartitionRequest(0, env.broker_epochs[0], (
        AlterPartitionItem(foo_id, 0, p.leader_epoch, p.partition_epoch, (0, 1),
                           new_isr_broker_epochs=(env.broker_epochs[0], env.broker_epochs[1])),)))
    assert reply.partitions[0].error_code == ErrorCode.NONE and shape(env) == (0, (0, 1), (), ())

    assert after(env, lambda: env.fence(0)) == [
        PartitionChangeRecord(foo_id, 0, isr=(1,), leader=-1, last_known_elr=(0,))]
    assert after(env, lambda: env.fence(1)) == [
        PartitionChangeRecord(foo_id, 0, isr=(), eligible_leader_replicas=(1,))]
    assert shape(env) == (-1, (), (1,), (0,))                # an empty ISR keeps the last known leader
    env.clock.advance(9001)
    assert after(env, lambda: env.restart(1, log_dirs=2)) == [
        PartitionChangeRecord(foo_id, 0, eligible_leader_replicas=(), last_known_elr=(0, 1))]
    assert shape(env) == (-1, (), (), (0, 1))                # 1 held every committed record before it
    env.heartbeat(1)
    assert shape(env) == (-1, (), (), (0, 1))                # 1 is up, but nobody says where a log ends

    assert after(env, lambda: env.heartbeat(0)) == []        # 1's replica cannot say where it ends
    env.clock.advance(9001)                                   # (its directory is gone): a session timeout
    assert after(env, lambda: env.heartbeat(0)) == [
        PartitionChangeRecord(foo_id, 0, isr=(0,), leader=0, leader_recovery_state=LeaderRecoveryState.RECOVERING,
                              last_known_elr=())]
    check(env)


def test_a_leaderless_write_keeps_the_first_last_known_leader_and_an_election_clears_it():
    """Recorded once: later leaderless writes (the ISR emptying, ELR changes) keep it;
    the write that elects any leader — here a clean one from the ELR — clears it."""
    env = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features())
    env.register_and_unfence(0, 1, 2)
    env.create_topic("foo", assignments=[[0, 1, 2]], configs={"min.insync.replicas": "2"})
    foo_id = env.topic_id("foo")
    env.fence(0)
    env.fence(1)
    assert after(env, lambda: env.fence(2)) == [
        PartitionChangeRecord(foo_id, 0, isr=(), leader=-1, eligible_leader_replicas=(1, 2), last_known_elr=(2,))]
    env.clock.advance(9001)
    assert after(env, lambda: env.restart(2)) == [PartitionChangeRecord(foo_id, 0, eligible_leader_replicas=(1,))]
    assert shape(env) == (-1, (), (1,), (2,))
    assert after(env, lambda: env.heartbeat(1)) == [
        PartitionChangeRecord(foo_id, 0, isr=(1,), leader=1, eligible_leader_replicas=(), last_known_elr=())]
    check(env)


def test_a_partition_that_keeps_a_leader_records_no_last_known_leader():
    env = two_replicas()
    foo_id = env.topic_id("foo")
    assert after(env, lambda: env.fence(0)) == [PartitionChangeRecord(foo_id, 0, isr=(1,), leader=1)]
    assert shape(env) == (1, (1,), (), ())
    check(env)
