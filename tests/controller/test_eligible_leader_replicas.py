"""KIP-966 eligible leader replicas in the controller: one test per rule, in Kafka's
controller-test style (act, assert the exact records, assert the state). ELR is on
when ``eligible.leader.replicas.version`` >= 1 is finalized; every test that shows
an ELR rule also shows what the same events do with ELR off."""

import pytest

from tidelog.controller import AlterPartitionItem, AlterPartitionRequest
from tidelog.controller.feature_control import UpgradeType, broker_features
from tidelog.controller.invariants import check_invariants
from tidelog.testing.controller import ControllerTestEnv
from tidelog.core.errors import ErrorCode
from tidelog.metadata import replay_all
from tidelog.metadata.records import (
    BrokerFeature,
    FenceBrokerRecord,
    PartitionChangeRecord,
    decode,
    encode,
)

ELR_ON = {"eligible.leader.replicas.version": 1}


def three_brokers(elr: bool = True, **topic_configs: str) -> ControllerTestEnv:
    """Brokers 0, 1, 2 and topic foo on replicas [0, 1, 2] with min ISR 2."""
    env = ControllerTestEnv(bootstrap_features=ELR_ON if elr else None, broker_features=broker_features())
    env.register_and_unfence(0, 1, 2)
    configs = {"min.insync.replicas": "2", **{k.replace("_", "."): v for k, v in topic_configs.items()}}
    assert env.create_topic("foo", assignments=[[0, 1, 2]], configs=configs).error_code == ErrorCode.NONE
    return env


def after(env: ControllerTestEnv, action) -> list:
    end = env.log.end_offset
    action()
    return env.records_from(end)


def foo(env: ControllerTestEnv):
    return env.partition("foo", 0)


def shape(env: ControllerTestEnv) -> tuple:
    p = foo(env)
    return p.leader, p.isr, p.elr, p.last_known_elr


def check(env: ControllerTestEnv) -> None:
    env.check_consistent()
    check_invariants(env.controller.image)
    assert replay_all(env.log.read(0)) == env.controller.image


def test_an_isr_at_min_isr_or_above_has_no_eligible_replicas():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    assert after(env, lambda: env.fence(0))[0] == PartitionChangeRecord(foo_id, 0, isr=(1, 2), leader=1)
    assert shape(env) == (1, (1, 2), (), ())
    check(env)


def test_members_fenced_out_of_an_isr_below_min_isr_stay_eligible():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    env.fence(0)
    # ISR {1, 2} -> {2}: below min ISR 2, so the high watermark stops; 1 keeps every committed record.
    assert after(env, lambda: env.fence(1))[0] == PartitionChangeRecord(
        foo_id, 0, isr=(2,), leader=2, eligible_leader_replicas=(1,))
    # The last member goes too: with ELR the ISR may be empty; 1 and 2 are both eligible.
    # The write that leaves it leaderless remembers the last leader (last_known_elr).
    assert after(env, lambda: env.fence(2))[0] == PartitionChangeRecord(
        foo_id, 0, isr=(), leader=-1, eligible_leader_replicas=(1, 2), last_known_elr=(2,))
    assert shape(env) == (-1, (), (1, 2), (2,))
    check(env)

    off = three_brokers(elr=False)
    for broker_id in (0, 1, 2):
        off.fence(broker_id)
    assert shape(off) == (-1, (2,), (), ())      # without ELR the last member stays in the ISR


def test_an_eligible_replica_is_elected_when_the_isr_is_empty():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    # Broker 1 comes back (same process, e.g. after a network partition): a clean
    # election from the ELR, ISR := [1], and 1 leaves the ELR.
    records = after(env, lambda: env.heartbeat(1))
    assert records[1] == PartitionChangeRecord(foo_id, 0, isr=(1,), leader=1, eligible_leader_replicas=(2,),
                                               last_known_elr=())
    assert shape(env) == (1, (1,), (2,), ())
    check(env)

    off = three_brokers(elr=False)
    for broker_id in (0, 1, 2):
        off.fence(broker_id)
    off.heartbeat(1)
    assert shape(off) == (-1, (2,), (), ())      # without ELR: no leader until broker 2 returns


def test_a_member_shrunk_for_lagging_below_min_isr_is_eligible_too():
    """Kafka's rule: the ELR takes every member that leaves an ISR below min ISR,
    whatever the reason; with the strict min ISR rule the high watermark has not
    moved past what it holds."""
    env = three_brokers()
    foo_id = env.topic_id("foo")
    p = foo(env)

    def alter(isr):
        p = foo(env)
        return env.controller.alter_partition(AlterPartitionRequest(0, env.broker_epochs[0], (
            AlterPartitionItem(foo_id, 0, p.leader_epoch, p.partition_epoch, isr),)))

    assert p.leader == 0
    assert after(env, lambda: alter((0, 1)))[0] == PartitionChangeRecord(foo_id, 0, isr=(0, 1))
    assert after(env, lambda: alter((0,)))[0] == PartitionChangeRecord(
        foo_id, 0, isr=(0,), eligible_leader_replicas=(1,))
    # Back at min ISR: the ELR is cleared.
    assert after(env, lambda: alter((0, 2)))[0] == PartitionChangeRecord(
        foo_id, 0, isr=(0, 2), eligible_leader_replicas=())
    assert shape(env) == (0, (0, 2), (), ())
    check(env)


def test_a_broker_back_from_an_unclean_shutdown_leaves_the_isr_and_the_elr():
    """The 'last replica standing': ISR {2}, ELR {1}; broker 2 loses power and comes
    back as a new process with no clean-shutdown marker. It may have lost
    acknowledged records, so it is out of the ISR and the ELR; broker 1, which holds
    everything committed, is the one elected."""
    env = three_brokers()
    foo_id = env.topic_id("foo")
    env.fence(0)
    env.fence(1)
    assert shape(env) == (2, (2,), (1,), ())
    epoch = env.broker_epochs[2]
    env.clock.advance(9001)             # the old process's session has expired (not yet fenced)
    records = after(env, lambda: env.restart(2))
    assert records[:2] == [
        PartitionChangeRecord(foo_id, 0, isr=(), leader=-1, last_known_elr=(2,)),
        FenceBrokerRecord(2, epoch)]
    assert shape(env) == (-1, (), (1,), (2,))
    env.heartbeat(2)                                  # unfenced, but not eligible
    assert shape(env) == (-1, (), (1,), (2,))
    env.heartbeat(1)
    assert shape(env) == (1, (1,), (), ())
    check(env)

    off = three_brokers(elr=False)
    off.fence(0)
    off.fence(1)
    off.clock.advance(9001)
    off.restart(2)
    off.heartbeat(2)
    assert shape(off) == (2, (2,), (), ())           # without ELR the restarted broker leads again


def test_a_clean_shutdown_keeps_a_broker_eligible():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    assert shape(env) == (-1, (), (1, 2), (2,))
    assert after(env, lambda: env.restart(1))[0] == PartitionChangeRecord(foo_id, 0, eligible_leader_replicas=(2,),
                                                                         last_known_elr=(2, 1))
    end = env.log.end_offset
    env.restart(2, clean=True)                        # names its previous broker epoch
    assert not any(isinstance(r, PartitionChangeRecord) for r in env.records_from(end))
    env.heartbeat(2)
    assert shape(env) == (2, (2,), (), ())
    check(env)


def test_the_last_known_leader_leads_again_when_every_eligible_replica_shut_down_uncleanly():
    """Kafka 4.4's rule, on any topic: nobody in ISR or ELR is left (all of them came
    back from unclean shutdowns), so the last leader — the last to hold every committed
    record — is elected as an unclean election (RECOVERING). Without it a cluster whose
    brokers all crashed would never lead this partition again."""
    env = three_brokers()
    foo_id = env.topic_id("foo")
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    env.restart(1)
    env.restart(2)
    assert shape(env) == (-1, (), (), (2, 1))         # 1 left the ELR for its unclean shutdown
    env.heartbeat(0)
    env.heartbeat(1)
    assert shape(env) == (-1, (), (), (2, 1))         # 1 is up, but no broker says where its log ends
    records = after(env, lambda: env.heartbeat(2))
    assert records[1] == PartitionChangeRecord(foo_id, 0, isr=(2,), leader=2, leader_recovery_state=1,
                                               last_known_elr=())
    check(env)

    single = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features())
    single.register_and_unfence(0)
    single.create_topic("solo", assignments=[[0]])
    single.clock.advance(9001)
    single.restart(0)                                 # kill -9 of a lone node, and its restart
    assert single.partition("solo", 0).isr == () and single.partition("solo", 0).last_known_elr == (0,)
    single.heartbeat(0)
    assert single.partition("solo", 0).leader == 0


def test_an_unclean_topic_elects_outside_isr_and_elr_once_someone_acceptable_is_up():
    """Kafka's order on a topic that allows unclean elections: ISR or (ISR empty) ELR
    first; if none of them is up, the first acceptable replica at once, uncleanly
    (ISR := [it], RECOVERING, ELR cleared)."""
    env = three_brokers(unclean_leader_election_enable="true")
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    assert shape(env) == (-1, (), (1, 2), (2,))
    env.heartbeat(0)
    p = foo(env)
    assert (p.leader, p.isr, p.elr, p.leader_recovery_state) == (0, (0,), (), 1)
    check(env)

    clean = three_brokers()
    for broker_id in (0, 1, 2):
        clean.fence(broker_id)
    clean.heartbeat(0)
    assert shape(clean) == (-1, (), (1, 2), (2,))     # a clean topic waits for 1 or 2


def test_turning_elr_off_clears_the_fields_at_the_next_change():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    env.fence(0)
    env.fence(1)
    assert foo(env).elr == (1,)
    assert env.controller.update_features({"eligible.leader.replicas.version": 0},
                                          {"eligible.leader.replicas.version": UpgradeType.SAFE_DOWNGRADE}).is_success
    assert not env.controller.features.elr_enabled
    assert after(env, lambda: env.fence(2))[0] == PartitionChangeRecord(
        foo_id, 0, leader=-1, eligible_leader_replicas=())
    assert shape(env) == (-1, (2,), (), ())
    check(env)


@pytest.mark.parametrize("elr", [True, False])
def test_random_workloads_keep_the_invariants(elr):
    from tidelog.testing.controller import random_operation
    import random
    for seed in range(4):
        env = ControllerTestEnv(seed=seed, bootstrap_features=ELR_ON if elr else None,
                                broker_features=broker_features())
        rng = random.Random(seed)
        previous = env.controller.image
        for _ in range(300):
            random_operation(env, rng)
            image = env.controller.image
            check_invariants(image, previous)
            for tp, p in image.all_partitions():
                assert not set(p.elr) & set(p.isr), (tp, p)
                assert elr or (not p.elr and p.isr), (tp, p)
            previous = image
        env.check_consistent()


def test_partition_records_carry_the_elr_fields_at_version_2():
    env = three_brokers()
    env.fence(0)
    env.fence(1)
    [change] = [r for r in env.records_from(0) if isinstance(r, PartitionChangeRecord)
                and r.eligible_leader_replicas]
    frame = encode(change)
    assert frame[2] == 2 and decode(frame) == change
    plain = PartitionChangeRecord(change.topic_id, 0, isr=(1,))
    assert encode(plain)[2] == 0                  # unchanged bytes when the fields are unset


def test_update_features_is_checked_against_the_controller_and_every_broker():
    env = ControllerTestEnv(bootstrap_features={"metadata.version": 33, **ELR_ON})
    env.register(0, features=[BrokerFeature("metadata.version", 7, 33),
                              BrokerFeature("eligible.leader.replicas.version", 0, 1),
                              BrokerFeature("share.version", 0, 1)])
    error = env.controller.update_features({"share.version": 1})
    assert error.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert error.message == ("Invalid update version 1 for feature share.version. "
                             "Local controller -1 only supports versions 0-0")
    error = env.controller.update_features({"group.version": 1})       # broker 0 does not list it
    assert error.message == ("Invalid update version 1 for feature group.version. "
                             "Broker 0 only supports versions 0-0")
    error = env.controller.update_features({"eligible.leader.replicas.version": 0})
    assert "without setting the upgrade type" in error.message
    assert env.controller.features.elr_enabled
    end = env.log.end_offset
    assert env.controller.update_features({"eligible.leader.replicas.version": 1}).is_success
    assert env.log.end_offset == end + 1        # a record even for the same level, as Kafka
    assert env.controller.image.features_epoch == end
