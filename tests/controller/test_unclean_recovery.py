"""KIP-966's unclean recovery, the longest log: when ISR and ELR are empty and the last
known leader is back, the controller elects the replica whose log ends furthest —
(epoch of its last batch, log end offset), as the brokers' heartbeats reported it
(``replica_log_ends``) — instead of the last known leader, which may have lost
unflushed records in its own unclean shutdown."""

import uuid

from tidelog.controller.feature_control import broker_features
from tidelog.controller.heartbeat import UNCLEAN_RECOVERY_WAIT_MS
from tidelog.controller.partition_change import PartitionChangeBuilder
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import PartitionChangeRecord
from tidelog.metadata.registrations import PartitionRegistration
from tidelog.testing.controller import ControllerTestEnv
from tests.controller.test_eligible_leader_replicas import ELR_ON, check, foo, shape, three_brokers

FOO = ("foo", 0)


def everyone_back_uncleanly(env: ControllerTestEnv) -> None:
    """All three brokers crash; 0 and 1 come back from unclean shutdowns and heartbeat
    (up, but eligible for nothing); 2, the last known leader, has registered again
    but has not yet heartbeat."""
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    env.restart(0)
    env.restart(1)
    env.restart(2)
    assert shape(env) == (-1, (), (), (2, 1))


def wait_out_the_recovery(env: ControllerTestEnv, ends: dict[int, tuple[int, int]]) -> None:
    """The brokers in ``ends`` heartbeat with those reports, every two seconds, until
    the recovery wait for a broker that is down has passed."""
    for _ in range(UNCLEAN_RECOVERY_WAIT_MS // 2000 + 1):
        env.clock.advance(2000)
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})


def test_a_longer_log_reported_by_a_replica_that_is_back_is_elected_instead_of_the_last_known_leader():
    env = three_brokers()
    foo_id = env.topic_id("foo")
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 120)})
    env.heartbeat(1, log_ends={FOO: (3, 90)})
    assert shape(env) == (-1, (), (), (2, 1))                  # still waiting for the last known leader
    end = env.log.end_offset
    env.heartbeat(2, log_ends={FOO: (3, 100)})                # it lost 20 unflushed records
    changes = [r for r in env.records_from(end) if isinstance(r, PartitionChangeRecord)]
    assert changes == [PartitionChangeRecord(foo_id, 0, isr=(0,), leader=0, leader_recovery_state=1,
                                             last_known_elr=())]
    check(env)


def test_the_last_known_leader_is_elected_when_it_is_longest_or_on_a_tie():
    for mine, other in (((3, 120), (3, 100)), ((3, 100), (3, 100))):
        env = three_brokers()
        everyone_back_uncleanly(env)
        env.heartbeat(0, log_ends={FOO: other})
        env.heartbeat(1, log_ends={FOO: (1, 1)})
        env.heartbeat(2, log_ends={FOO: mine})
        assert shape(env) == (2, (2,), (), ()), (mine, other)


def test_the_election_waits_for_every_replica_that_may_lead_but_no_longer_than_a_session_timeout():
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 100)})
    env.heartbeat(1)                                          # up, but its metadata is behind: no report
    env.heartbeat(2, log_ends={FOO: (3, 90)})                 # the last known leader is back
    assert shape(env) == (-1, (), (), (2, 1))                   # waiting for 1
    env.heartbeat(1, log_ends={FOO: (3, 130)})
    assert shape(env) == (1, (1,), (), ())                    # the longest, as soon as all reported

    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 500)})
    env.heartbeat(1)
    env.heartbeat(2)                                          # the last known leader does not report
    assert shape(env) == (-1, (), (), (2, 1))
    env.clock.advance(8000)
    env.heartbeat(0, log_ends={FOO: (3, 500)})
    env.heartbeat(1)
    env.heartbeat(2)
    assert shape(env) == (-1, (), (), (2, 1))                   # still within the session timeout
    env.clock.advance(1001)
    env.heartbeat(2)
    assert shape(env) == (2, (2,), (), ())                    # then as Kafka 4.4: the last known leader
    check(env)


def test_a_new_active_controller_finishes_a_wait_its_predecessor_began():
    """The wait began at the last known leader's unfencing, which will not come again;
    a new active controller starts with no soft state (no reports, no waits) and must
    still elect at the next heartbeats (seed 6401 stayed leaderless without this)."""
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 100)})
    env.heartbeat(1)
    env.heartbeat(2, log_ends={FOO: (3, 90)})
    assert shape(env) == (-1, (), (), (2, 1))                   # waiting for 1
    heartbeat = env.controller.cluster.heartbeat               # a failover: soft state gone
    heartbeat._awaiting.clear()
    heartbeat._log_ends.clear()
    env.heartbeat(1, log_ends={FOO: (3, 130)})
    env.heartbeat(0, log_ends={FOO: (3, 100)})
    env.heartbeat(2, log_ends={FOO: (3, 90)})
    assert shape(env) == (1, (1,), (), ())


def test_the_election_waits_for_a_replica_still_starting_too():
    """Broker 0 is back but fenced (catching up with the metadata, heartbeating): it
    cannot lead yet, but it may hold the longest log, so the election waits for it."""
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, want_fence=True)                         # registered, fenced, in contact
    env.heartbeat(1, log_ends={FOO: (3, 90)})
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (-1, (), (), (2, 1))
    env.heartbeat(0, log_ends={FOO: (3, 140)})                # unfenced, with its report
    assert shape(env) == (0, (0,), (), ())

    env = three_brokers()
    everyone_back_uncleanly(env)                              # 0 registered but silent (it left the ISR
    env.clock.advance(9001)                                   # at min ISR: not eligible, it may hold them
    env.heartbeat(1, log_ends={FOO: (3, 90)})                 # only by chance)
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (-1, (), (), (2, 1))                 # waited for a session timeout, no longer
    env.clock.advance(9001)
    env.heartbeat(1, log_ends={FOO: (3, 90)})
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (2, (2,), (), ())


def test_only_a_replica_that_may_lead_is_chosen_and_only_its_latest_report_counts():
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 500)})
    env.fence(0)                                              # down again: not acceptable
    env.clock.advance(9001)
    env.heartbeat(1, log_ends={FOO: (3, 200)})
    env.heartbeat(1, log_ends={FOO: (3, 50)})                 # its latest report counts
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (-1, (), (), (2, 1))                 # 0's longer log is waited for a session
    env.clock.advance(9001)                                   # timeout (it is not eligible), no longer
    env.heartbeat(1, log_ends={FOO: (3, 50)})
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (2, (2,), (), ())


def test_a_new_incarnation_forgets_what_the_old_one_reported():
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={FOO: (3, 500)})
    env.fence(0)
    env.restart(0)                                            # registers again
    env.heartbeat(0, want_fence=True)
    env.heartbeat(1, log_ends={FOO: (3, 10)})
    env.heartbeat(0, log_ends={FOO: (1, 5)})                  # what the new incarnation holds
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (2, (2,), (), ())


def test_reports_for_partitions_that_have_a_leader_or_an_isr_or_other_replicas_are_dropped():
    """What the controller keeps is bounded by the broker's own leaderless replicas."""
    env = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features())
    env.register_and_unfence(0, 1, 2)
    assert env.create_topic("foo", assignments=[[0, 1]]).error_code == ErrorCode.NONE
    assert env.create_topic("bar", assignments=[[1, 2]]).error_code == ErrorCode.NONE
    env.heartbeat(2, log_ends={FOO: (9, 9), ("bar", 0): (9, 9)})  # not a replica of foo; bar has a leader
    heartbeat = env.controller.cluster.heartbeat
    assert heartbeat.log_end(2, (env.topic_id("foo"), 0)) is None
    assert heartbeat.log_end(2, (env.topic_id("bar"), 0)) is None
    env.fence(1)
    env.fence(2)
    env.heartbeat(0, log_ends={FOO: (1, 1)})                  # foo still has leader 0
    assert heartbeat.log_end(0, (env.topic_id("foo"), 0)) is None


def test_the_builder_alone():
    topic_id = uuid.uuid4()
    partition = PartitionRegistration(replicas=(0, 1, 2), isr=(), leader=-1, leader_epoch=5,
                                      partition_epoch=7, last_known_elr=(2,))
    ends = {0: (5, 10), 1: (5, 30), 2: (5, 20)}
    record = PartitionChangeBuilder(partition, topic_id, 0, lambda b: True, elr_enabled=True, min_isr=2,
                                    log_end=ends.get).build()
    assert (record.leader, record.isr, record.leader_recovery_state) == (1, (1,), 1)
    ends[1] = None
    record = PartitionChangeBuilder(partition, topic_id, 0, lambda b: True, elr_enabled=True, min_isr=2,
                                    log_end=ends.get).build()
    assert record.leader == 2
    record = PartitionChangeBuilder(partition, topic_id, 0, lambda b: b != 2, elr_enabled=True, min_isr=2,
                                    log_end={0: (5, 99)}.get).build()
    assert record is None                                     # no longest log without the last known leader


def test_absurd_reports_are_dropped_or_bounded():
    """A broker's report about partitions that do not exist, that it does not replicate,
    or with absurd numbers: nothing is kept but its own leaderless replicas, and a claim
    of the longest log elects only a replica that may lead."""
    from tidelog.controller.messages import BrokerHeartbeatRequest, ReplicaLogEnd
    env = three_brokers()
    everyone_back_uncleanly(env)
    foo_id = env.topic_id("foo")
    junk = tuple(ReplicaLogEnd(topic_id, partition, 2**31 - 1, 2**63 - 1)
                 for topic_id in (uuid.uuid4(), foo_id) for partition in (-1, 1, 2**31 - 1))
    controller = env.controller
    controller.process_broker_heartbeat(BrokerHeartbeatRequest(
        0, env.broker_epochs[0], controller.committed_offset, want_fence=True, replica_log_ends=junk))
    assert controller.cluster.heartbeat._log_ends.get(0) is None   # nothing of it was a replica of its
    env.heartbeat(1, log_ends={FOO: (-5, -7)})
    env.heartbeat(2, log_ends={FOO: (3, 100)})                # 0 still fenced and silent: not awaited
    env.clock.advance(9001)
    env.heartbeat(1, log_ends={FOO: (-5, -7)})
    env.heartbeat(2, log_ends={FOO: (3, 100)})
    assert shape(env) == (2, (2,), (), ())


def leaderless_with_elr_1_and_2_back_empty() -> ControllerTestEnv:
    """0 left the ISR at min ISR; 1 and 2 were fenced below it (ELR [1, 2], last known
    leader 2). 2 comes back from an unclean shutdown that cost it every record, is
    unfenced and says so; 1, which kept every record, is still down."""
    env = three_brokers()
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    assert shape(env) == (-1, (), (1, 2), (2,))
    env.clock.advance(9001)
    for broker_id in (0, 2):
        env.restart(broker_id)
        env.heartbeat(broker_id, log_ends={FOO: (-1, 0)})
    assert shape(env) == (-1, (), (1,), (2,))                 # 1 is still eligible: no election yet
    return env


def test_the_replica_whose_unclean_shutdown_empties_the_elr_is_waited_for_in_that_very_write():
    """Seed 6813: the registration that takes the last ELR member out (its unclean
    shutdown) elected the last known leader in the same write, which had lost every
    record; the member just taken out had kept them all."""
    env = leaderless_with_elr_1_and_2_back_empty()
    end = env.log.end_offset
    env.restart(1)
    changes = [r for r in env.records_from(end) if isinstance(r, PartitionChangeRecord)]
    assert changes == [PartitionChangeRecord(env.topic_id("foo"), 0, eligible_leader_replicas=(),
                                             last_known_elr=(2, 1))]
    env.heartbeat(2, log_ends={FOO: (-1, 0)})
    assert shape(env) == (-1, (), (), (2, 1))                 # 1 is starting: waited for
    env.heartbeat(1, log_ends={FOO: (3, 100)})
    assert shape(env) == (1, (1,), (), ())
    check(env)


def test_a_longer_log_reported_while_still_fenced_waits_until_its_broker_may_lead():
    env = leaderless_with_elr_1_and_2_back_empty()
    env.restart(1)
    env.heartbeat(1, want_fence=True, log_ends={FOO: (3, 100)})
    env.heartbeat(2, log_ends={FOO: (-1, 0)})
    assert shape(env) == (-1, (), (), (2, 1))                 # longer, but it may not lead yet
    env.heartbeat(1, log_ends={FOO: (3, 100)})
    assert shape(env) == (1, (1,), (), ())

    env = leaderless_with_elr_1_and_2_back_empty()
    env.restart(1)
    env.heartbeat(1, want_fence=True, log_ends={FOO: (-1, 0)})  # no longer than 2's: not waited for
    env.heartbeat(2, log_ends={FOO: (-1, 0)})
    assert shape(env) == (2, (2,), (), ())


def everyone_fenced_with_directories(log_dirs: int) -> ControllerTestEnv:
    """Brokers 0, 1, 2 with ``log_dirs`` directories each, foo on [0, 1, 2] with min ISR
    2; all three fenced in turn (ELR [1, 2], last known leader 2) and their sessions
    over."""
    env = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features())
    for broker_id in (0, 1, 2):
        env.register(broker_id, log_dirs=log_dirs)
        env.heartbeat(broker_id)
    env.create_topic("foo", assignments=[[0, 1, 2]], configs={"min.insync.replicas": "2"})
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    env.clock.advance(9001)
    return env


def test_a_last_known_eligible_replica_that_cannot_say_is_waited_for_up_to_the_recovery_wait():
    """A last known eligible replica that cannot say where its log ends now — down,
    in controlled shutdown, its directory offline — may hold every committed record:
    the election waits for it, up to the recovery wait, then takes the longest
    reported. (A replica that was not eligible is not waited for: above.)"""
    for make_unavailable in ("down", "controlled shutdown", "offline directory"):
        env = everyone_fenced_with_directories(2)
        ends = {0: (3, 5), 2: (3, 20)}
        for broker_id, end in ends.items():
            env.restart(broker_id, log_dirs=2)
            env.heartbeat(broker_id, log_ends={FOO: end})
        env.restart(1, log_dirs=2)                            # out of the ELR; it kept every record
        assert shape(env) == (-1, (), (), (2, 1)), make_unavailable
        if make_unavailable == "controlled shutdown":
            env.heartbeat(1)
            env.heartbeat(1, want_shut_down=True)
        elif make_unavailable == "offline directory":
            directory = env.controller.cluster.registration(1).log_dirs[0]
            env.assign_replicas_to_dirs(1, {TopicPartition("foo", 0): directory})
            env.heartbeat(1)
            env.heartbeat(1, offline_log_dirs=[directory])
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
        assert shape(env) == (-1, (), (), (2, 1)), make_unavailable
        wait_out_the_recovery(env, ends)
        assert shape(env) == (2, (2,), (), ()), make_unavailable


def test_another_last_known_eligible_replica_leads_when_the_last_known_leader_never_comes_back():
    """Kafka 4.4 elects only the last known leader, so a partition whose last leader's
    machine is gone stays offline; any replica that left the ELR for an unclean
    shutdown held every committed record just as well."""
    env = leaderless_with_elr_1_and_2_back_empty()
    env.fence(2)                                              # its disk goes: it may not lead
    env.restart(1)
    env.heartbeat(1, log_ends={FOO: (3, 100)})
    assert shape(env) == (-1, (), (), (2, 1))                 # 2 says nothing now: waited for
    wait_out_the_recovery(env, {0: (-1, 0), 1: (3, 100)})
    assert shape(env) == (1, (1,), (), ())                    # Kafka 4.4 would wait for 2 for ever
    check(env)


def test_a_heartbeat_that_fences_its_broker_does_not_elect_it_in_the_same_write():
    """Seed 1383: the heartbeat that reported the broker's only directory offline fenced
    it and, in the same write, the retried election elected it (it was still active
    in the committed registration): a fenced leader (10.8). The retried elections see
    what the heartbeat's own write changes."""
    env = everyone_fenced_with_directories(1)
    for broker_id in (0, 1, 2):
        env.restart(broker_id, log_dirs=1)
        env.assign_replicas_to_dirs(broker_id, {TopicPartition("foo", 0): env.log_dirs(broker_id)[0]})
    env.heartbeat(0, log_ends={FOO: (3, 5)})
    env.heartbeat(1, log_ends={FOO: (3, 10)})
    env.heartbeat(2)                                          # the last known leader: up, no report yet
    assert shape(env) == (-1, (), (), (2, 1))
    env.clock.advance(9001)                                   # the wait for its report runs out, and
    reply = env.heartbeat(2, offline_log_dirs=env.log_dirs(2))  # its only directory fails
    assert reply.is_fenced
    assert foo(env).leader != 2
    check(env)


def test_before_anyone_reported_an_eligible_replica_still_starting_is_given_a_session_timeout():
    """Seed 7587: the last known leader was unfenced before any replica had said where
    its log ends (reports come with the heartbeats after a broker's metadata shows the
    partition leaderless), and was elected at once — Kafka 4.4's rule, kept when no
    broker reports — while another last known eligible replica, holding every record,
    was still starting and could not have reported yet."""
    env = three_brokers()
    for broker_id in (0, 1, 2):
        env.fence(broker_id)
    env.clock.advance(9001)
    env.restart(2)
    env.restart(1)                                            # its registration empties the ELR
    assert shape(env) == (-1, (), (), (2, 1))
    env.heartbeat(2)                                          # unfenced; nobody has reported yet
    assert shape(env) == (-1, (), (), (2, 1))                 # 1 is starting: waited for
    env.heartbeat(2, log_ends={FOO: (3, 0)})
    env.heartbeat(1, log_ends={FOO: (3, 100)})
    assert shape(env) == (-1, (), (), (2, 1))                 # and 0, down, for a session timeout
    env.clock.advance(9001)
    env.heartbeat(2, log_ends={FOO: (3, 0)})
    env.heartbeat(1, log_ends={FOO: (3, 100)})
    assert shape(env) == (1, (1,), (), ())
    check(env)


def test_once_a_broker_reports_the_last_known_leader_waits_for_the_others_reports():
    """Seed 40234: the last known leader, back from a power cut with nothing, was elected
    the moment it was unfenced because no replica had reported *for this partition* yet
    (Kafka 4.4's rule for brokers that do not report), while a replica holding every
    committed record was a heartbeat away from saying so. A broker whose heartbeats
    carry reports, even none yet, makes the election wait for them (a session timeout
    at most)."""
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={})                             # reports; its metadata is behind
    env.heartbeat(1, log_ends={})
    env.heartbeat(2, log_ends={})                             # the last known leader, unfenced
    assert shape(env) == (-1, (), (), (2, 1))
    env.heartbeat(2, log_ends={FOO: (-1, 0)})                 # it lost everything
    env.heartbeat(1, log_ends={FOO: (-1, 0)})
    assert shape(env) == (-1, (), (), (2, 1))
    env.heartbeat(0, log_ends={FOO: (3, 120)})                # 0 held every committed record
    assert shape(env) == (0, (0,), (), ())
    check(env)

    env = three_brokers()                                     # brokers that do not report: Kafka 4.4
    everyone_back_uncleanly(env)
    env.heartbeat(0)
    env.heartbeat(1)
    env.heartbeat(2)
    assert shape(env) == (2, (2,), (), ())


def test_before_an_empty_log_is_elected_a_replica_that_may_hold_more_is_waited_for_up_to_the_recovery_wait():
    """Seeds 40236 and 40123: the last known leader came back on a replaced disk (empty)
    while the replica that held every committed record — outside the ELR, so not
    eligible — was cut off. Electing the empty log loses everything for certain; the
    election waits for a registered replica that has not reported, up to the recovery
    wait when every log that may lead is empty (a session timeout otherwise)."""
    for comes_back in (True, "starting", False):
        env = three_brokers()
        everyone_back_uncleanly(env)                          # 0: registered, then silent
        env.clock.advance(9001)
        ends = {1: (-1, 0), 2: (-1, 0)}
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
        assert shape(env) == (-1, (), (), (2, 1))
        env.clock.advance(9001)                               # past a session timeout: still waiting
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
        assert shape(env) == (-1, (), (), (2, 1))
        if comes_back == "starting":                          # seed 42098: back, fenced, catching up:
            for _ in range(2):                                # the session timeout's wait for a starting
                env.heartbeat(0, want_fence=True, log_ends={})  # replica is over, the long one is not
            env.heartbeat(1, log_ends={FOO: (-1, 0)})
            assert shape(env) == (-1, (), (), (2, 1))
            env.heartbeat(0, log_ends={FOO: (3, 100)})
            assert shape(env) == (0, (0,), (), ())
        elif comes_back:
            env.heartbeat(0, log_ends={FOO: (3, 100)})
            assert shape(env) == (0, (0,), (), ())
        else:
            wait_out_the_recovery(env, ends)
            assert shape(env) == (2, (2,), (), ())
        check(env)


def a_new_active_controller(env: ControllerTestEnv) -> ControllerTestEnv:
    """A failover: another controller reads the same metadata log and becomes active,
    with none of its predecessor's soft state (sessions renewed, no reports, no waits)."""
    return ControllerTestEnv(log=env.log, clock=env.clock, broker_features=broker_features())


def test_a_controller_that_has_just_become_active_hears_the_brokers_before_it_elects():
    """Seed 7 --long: a new active controller had read no heartbeat yet, took "nobody
    reports" for "reports are off", and elected the last known leader — back on a
    replaced disk — at once. It now waits (at most a session timeout) until every
    replica that may lead has been heard."""
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={})
    env.heartbeat(1, log_ends={})
    assert shape(env) == (-1, (), (), (2, 1))
    env = a_new_active_controller(env)
    env.heartbeat(2)                                          # its reports are off
    assert shape(env) == (-1, (), (), (2, 1))                   # 0 and 1 not heard yet
    env.heartbeat(0)
    env.heartbeat(1)
    assert shape(env) == (2, (2,), (), ())                    # nobody reports: Kafka 4.4's rule

    env = three_brokers()                                      # a broker never heard: a session timeout
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={})
    env.heartbeat(1, log_ends={})
    env = a_new_active_controller(env)
    env.heartbeat(2)
    env.heartbeat(1)
    env.clock.advance(9001)
    env.heartbeat(2)
    assert shape(env) == (2, (2,), (), ())
    check(env)


def test_an_empty_log_is_not_elected_while_a_replica_that_may_lead_has_not_said_where_its_log_ends():
    """Seed 7 --long: broker 0, killed holding records, stayed registered and unfenced
    (each controller failover renewed its session) while its new process was refused as
    a duplicate; the last known leader came back on a new, empty disk and was elected
    after a session timeout. With every log that may lead empty, the election waits up
    to the recovery wait for a replica that may lead but has not reported."""
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={})
    env.heartbeat(1, log_ends={})
    env = a_new_active_controller(env)                         # 0 is silent from now on
    ends = {1: (-1, 0), 2: (-1, 0)}
    for broker_id, end in ends.items():
        env.heartbeat(broker_id, log_ends={FOO: end})
    env.clock.advance(9001)                                   # past a session timeout: still waiting
    for broker_id, end in ends.items():
        env.heartbeat(broker_id, log_ends={FOO: end})
    assert shape(env) == (-1, (), (), (2, 1))
    env.heartbeat(0, log_ends={FOO: (3, 100)})                # its new process, at last
    assert shape(env) == (0, (0,), (), ())
    check(env)

    env = three_brokers()                                      # never comes back: the recovery wait
    everyone_back_uncleanly(env)
    env.heartbeat(0, log_ends={})
    env.heartbeat(1, log_ends={})
    env = a_new_active_controller(env)
    wait_out_the_recovery(env, ends)
    assert shape(env) == (2, (2,), (), ())
    check(env)


def test_after_a_failover_a_silent_replica_outside_the_eligible_ones_is_waited_for_up_to_the_recovery_wait():
    """Seed 43459: broker 2, outside the last known eligible replicas, had reported the
    longest log (176 records) to the old controller and was down when it failed over;
    the new one, with no report, waited a session timeout and elected a replica holding
    119. A registered replica that cannot lead and that this controller has not heard
    since it became active (its report may be lost) is waited for up to the recovery
    wait; one that registered with this very controller, a session timeout (test above)."""
    ends = {1: (3, 90), 2: (3, 100)}
    for comes_back in (True, False):
        env = three_brokers()
        everyone_back_uncleanly(env)                          # 0: registered, then silent
        env = a_new_active_controller(env)
        for _ in range(3):                                    # past a session timeout: still waiting
            for broker_id, end in ends.items():
                env.heartbeat(broker_id, log_ends={FOO: end})
            assert shape(env) == (-1, (), (), (2, 1))
            env.clock.advance(4500)
        if comes_back:
            env.heartbeat(0, log_ends={FOO: (3, 140)})
            assert shape(env) == (0, (0,), (), ())
        else:
            wait_out_the_recovery(env, ends)
            assert shape(env) == (2, (2,), (), ())
        check(env)


def test_a_replica_outside_the_eligible_ones_that_reported_a_longer_log_is_waited_for_up_to_the_recovery_wait():
    """Seed 44475: broker 2, outside the last known eligible replicas, reported 87
    records while it was being unfenced, then crashed again; a session timeout later the
    controller elected a replica holding 42 — a loss it knew of. Such a replica is
    waited for up to the recovery wait."""
    ends = {1: (3, 90), 2: (3, 100)}
    env = three_brokers()
    everyone_back_uncleanly(env)
    env.heartbeat(0, want_fence=True, log_ends={FOO: (3, 140)})   # starting, then gone
    for _ in range(4):
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
        assert shape(env) == (-1, (), (), (2, 1))
        env.clock.advance(4500)
    env.heartbeat(0, log_ends={FOO: (3, 140)})                # back: unfenced, and elected
    assert shape(env) == (0, (0,), (), ())
    check(env)


def test_a_replica_that_registers_late_is_given_a_session_timeout_from_its_registration():
    """Seed 138 --long: broker 1, outside the last known eligible replicas and holding
    every committed record, was refused as a duplicate of its old incarnation until
    that one's session expired; it registered 57 ms before the wait's session timeout,
    counted from the wait's start, ran out, and a replica missing 18 records was
    elected before its first report. A replica still starting is now given a session
    timeout from its registration — but a broker registering again and again does not
    hold the election past the recovery wait."""
    ends = {1: (3, 90), 2: (3, 100)}

    def heartbeats():
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})

    env = three_brokers()
    everyone_back_uncleanly(env)                              # 0: registered, then silent
    heartbeats()
    assert shape(env) == (-1, (), (), (2, 1))
    env.clock.advance(8000)
    env.restart(0)                                            # a new incarnation, late
    env.heartbeat(0, want_fence=True)                         # catching up: no report yet
    env.clock.advance(2000)                                   # past the wait's session timeout
    heartbeats()
    assert shape(env) == (-1, (), (), (2, 1))                 # still waiting for 0
    env.heartbeat(0, log_ends={FOO: (3, 140)})                # unfenced, with its report
    assert shape(env) == (0, (0,), (), ())
    check(env)

    env = three_brokers()
    everyone_back_uncleanly(env)
    for _ in range(UNCLEAN_RECOVERY_WAIT_MS // 8000 + 2):     # 0 registers again every 8 s
        heartbeats()
        if shape(env)[0] != -1:
            break
        env.clock.advance(8000)
        env.restart(0)
        env.heartbeat(0, want_fence=True)
    assert shape(env) == (2, (2,), (), ())
    assert env.clock.monotonic_ms() >= UNCLEAN_RECOVERY_WAIT_MS
    check(env)


def test_the_recovery_wait_is_the_controllers_setting_and_absurd_values_are_refused(tmp_path):
    """``tidelog.unclean.recovery.wait.ms`` (five minutes by default) bounds the long
    waits; a negative value, one above a day or not a number is refused by name."""
    import pytest

    from tidelog.broker.config import BrokerConfig
    from tidelog.core.errors import InvalidConfigError

    for value in ("-1", "86400001", "soon", ""):
        with pytest.raises(InvalidConfigError, match="tidelog.unclean.recovery.wait.ms"):
            BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path), "tidelog.unclean.recovery.wait.ms": value})
    assert BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})["tidelog.unclean.recovery.wait.ms"] == \
        UNCLEAN_RECOVERY_WAIT_MS

    ends = {1: (-1, 0), 2: (-1, 0)}                            # the empty-log case of the test above
    env = ControllerTestEnv(bootstrap_features=ELR_ON, broker_features=broker_features(),
                            unclean_recovery_wait_ms=60_000)
    env.register_and_unfence(0, 1, 2)
    env.create_topic("foo", assignments=[[0, 1, 2]], configs={"min.insync.replicas": "2"})
    everyone_back_uncleanly(env)
    for _ in range(25):                                        # 50 s: still waiting for broker 0
        env.clock.advance(2000)
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
    assert shape(env) == (-1, (), (), (2, 1))
    for _ in range(6):                                         # past 60 s: elected
        env.clock.advance(2000)
        for broker_id, end in ends.items():
            env.heartbeat(broker_id, log_ends={FOO: end})
    assert shape(env) == (2, (2,), (), ())
