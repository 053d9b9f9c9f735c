"""Broker registration, heartbeats, sessions and fencing."""

import uuid

import pytest

from tidelog.controller.heartbeat import BrokerControlState, BrokerHeartbeatManager, next_broker_state
from tidelog.controller.messages import BrokerRegistrationRequest
from tidelog.testing.controller import ControllerTestEnv, incarnation_id
from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import (
    BrokerFeature,
    Endpoint,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

S = BrokerControlState
FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = (
    S.FENCED, S.UNFENCED, S.CONTROLLED_SHUTDOWN, S.SHUTDOWN_NOW)


# ---------------------------------------------------------------- the state table

# (current, want_fence, want_shut_down, caught_up, has_leaderships, shutdown_seen) → next
TABLE = [
    (FENCED, False, True, True, False, False, SHUTDOWN_NOW),
    (FENCED, False, False, True, False, False, UNFENCED),
    (FENCED, False, False, False, False, False, FENCED),       # not caught up
    (FENCED, True, False, True, False, False, FENCED),         # wants to stay fenced
    (UNFENCED, True, True, True, True, False, SHUTDOWN_NOW),
    (UNFENCED, True, False, True, True, False, FENCED),
    (UNFENCED, False, True, True, True, False, CONTROLLED_SHUTDOWN),
    (UNFENCED, False, True, True, False, False, SHUTDOWN_NOW),
    (UNFENCED, False, False, True, True, False, UNFENCED),
    (CONTROLLED_SHUTDOWN, False, True, True, True, True, CONTROLLED_SHUTDOWN),
    (CONTROLLED_SHUTDOWN, False, True, True, False, True, SHUTDOWN_NOW),
    (CONTROLLED_SHUTDOWN, False, True, True, False, False, CONTROLLED_SHUTDOWN),
    (SHUTDOWN_NOW, False, False, True, False, False, SHUTDOWN_NOW),
]


@pytest.mark.parametrize("current, want_fence, want_shut_down, caught_up, leads, seen, expected",
                         TABLE)
def test_heartbeat_next_state_table_row(current, want_fence, want_shut_down, caught_up, leads,
                                        seen, expected):
    assert next_broker_state(
        current, want_fence=want_fence, want_shut_down=want_shut_down,
        current_metadata_offset=10 if caught_up else 4, registration_offset=5,
        has_leaderships=lambda: leads,
        controlled_shutdown_offset=7, lowest_active_offset=8 if seen else 6) == expected


# ---------------------------------------------------------------- sessions (soft state)

def test_a_session_is_valid_up_to_and_including_the_timeout():
    clock = ManualClock(1000)
    manager = BrokerHeartbeatManager(clock, session_timeout_ms=9000)
    manager.touch(1, fenced=False, metadata_offset=0)
    clock.advance(9000)
    assert manager.has_valid_session(1) and manager.find_one_stale_broker() is None
    clock.advance(1)
    assert not manager.has_valid_session(1) and manager.find_one_stale_broker() == 1


def test_only_the_oldest_unfenced_broker_is_examined_and_a_touch_moves_a_broker_last():
    clock = ManualClock(0)
    manager = BrokerHeartbeatManager(clock, session_timeout_ms=100)
    for broker_id in (1, 2, 3):
        manager.touch(broker_id, fenced=False, metadata_offset=0)
        clock.advance(10)
    assert manager.next_check_time_ms() == 101
    manager.touch(1, fenced=False, metadata_offset=0)          # 1 is now the newest
    assert manager.next_check_time_ms() == 111                 # 2 (touched at 10) is oldest
    clock.advance(200)
    assert manager.find_one_stale_broker() == 2
    manager.fence(2)
    assert manager.find_one_stale_broker() == 3
    manager.fence(3)
    manager.fence(1)
    assert manager.find_one_stale_broker() is None
    assert manager.next_check_time_ms() == (1 << 63) - 1


def test_fenced_brokers_have_no_session():
    manager = BrokerHeartbeatManager(ManualClock(0), session_timeout_ms=100)
    manager.touch(1, fenced=True, metadata_offset=0)
    assert not manager.has_valid_session(1)
    assert manager.find_one_stale_broker() is None


# ---------------------------------------------------------------- registration

def test_new_registrations_are_fenced_with_the_record_offset_as_broker_epoch():
    env = ControllerTestEnv()
    assert [env.register(b).broker_epoch for b in (0, 1, 2)] == [0, 1, 2]
    assert env.records_from(0)[1] == RegisterBrokerRecord(
        1, incarnation_id(1), 1, (Endpoint("PLAINTEXT", "broker1", 9092),), fenced=True)
    assert all(b.fenced for b in env.controller.image.brokers.values())


def test_registration_with_a_duplicate_live_incarnation_is_refused():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    end = env.log.end_offset
    reply = env.restart(1)
    assert reply.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert env.log.end_offset == end
    assert env.controller.image.brokers[1].incarnation_id == incarnation_id(1)


def test_the_same_incarnation_registering_again_is_an_amendment():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    end = env.log.end_offset
    reply = env.register(1, rack="r9")
    assert reply.broker_epoch == 1
    assert env.records_from(end) == [RegisterBrokerRecord(
        1, incarnation_id(1), 1, (Endpoint("PLAINTEXT", "broker1", 9092),), rack="r9",
        fenced=False)]
    assert not env.controller.image.brokers[1].fenced


def test_reregistration_after_restart_gets_a_new_epoch_and_is_fenced():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[1, 0]])
    env.clock.advance(5000)
    env.heartbeat(0)
    env.clock.advance(4001)
    assert env.controller.fire_due_deadlines() == [1]
    end = env.log.end_offset
    reply = env.restart(1)
    assert reply.error_code == ErrorCode.NONE and reply.broker_epoch == end
    assert env.records_from(end) == [RegisterBrokerRecord(
        1, incarnation_id(1, 1), end, (Endpoint("PLAINTEXT", "broker1", 9092),), fenced=True)]
    assert env.heartbeat(1, broker_epoch=1).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert not env.heartbeat(1).is_fenced


def test_a_restart_before_the_stale_check_ran_first_fences_the_old_incarnation():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[1, 0]])
    topic_id = env.topic_id("t")
    env.clock.advance(9001)                      # expired, but no deadline fired
    end = env.log.end_offset
    reply = env.restart(1)
    assert reply.broker_epoch == end + 2
    assert env.records_from(end) == [
        PartitionChangeRecord(topic_id, 0, isr=(0,), leader=0),
        FenceBrokerRecord(1, 1),
        RegisterBrokerRecord(1, incarnation_id(1, 1), end + 2,
                             (Endpoint("PLAINTEXT", "broker1", 9092),), fenced=True),
    ]
    env.check_consistent()


def test_a_wrong_cluster_id_is_refused():
    env = ControllerTestEnv()
    reply = env.controller.register_broker(
        BrokerRegistrationRequest(0, uuid.UUID(int=5), "another-cluster"))
    assert reply.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert env.log.end_offset == 0


def test_a_broker_must_support_every_finalized_feature_level():
    env = ControllerTestEnv(bootstrap_features={"metadata.version": 7})
    assert env.records_from(0)[0].feature_level == 7
    old = env.register(0, features=[BrokerFeature("metadata.version", 1, 6)])
    assert old.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert "metadata.version" in old.error_message
    assert env.register(1).error_code == ErrorCode.UNSUPPORTED_VERSION   # lists none
    ok = env.register(2, features=[BrokerFeature("metadata.version", 1, 9)])
    assert ok.error_code == ErrorCode.NONE


def test_a_feature_level_is_raised_only_if_every_broker_supports_it():
    env = ControllerTestEnv()
    env.register(0, features=[BrokerFeature("metadata.version", 7, 20)])
    error = env.controller.update_features({"metadata.version": 21})
    assert error.error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert error.message == ("Invalid update version 21 for feature metadata.version. "
                             "Broker 0 only supports versions 7-20")
    assert env.controller.update_features({"metadata.version": 20}).is_success
    assert env.controller.image.features == {"metadata.version": 20}


# ---------------------------------------------------------------- heartbeats

def test_a_heartbeat_with_a_stale_or_unknown_epoch_is_refused():
    env = ControllerTestEnv()
    env.register(0)
    assert env.heartbeat(0, broker_epoch=7).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert env.heartbeat(5, broker_epoch=0).error_code == ErrorCode.STALE_BROKER_EPOCH


def test_a_broker_is_unfenced_only_once_it_replayed_its_own_registration():
    env = ControllerTestEnv()
    env.register(0)
    env.register(1)
    behind = env.heartbeat(1, metadata_offset=0)
    assert behind.is_fenced and not behind.is_caught_up
    end = env.log.end_offset
    caught_up = env.heartbeat(1, metadata_offset=1)
    assert not caught_up.is_fenced and caught_up.is_caught_up
    assert env.records_from(end) == [UnfenceBrokerRecord(1, 1)]


def test_unfencing_elects_the_broker_for_partitions_it_was_the_last_isr_member_of():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[0, 1], [1, 0]])
    topic_id = env.topic_id("t")
    env.fence(0)
    env.fence(1)
    assert env.partition("t", 0).leader == -1 and env.partition("t", 0).isr == (1,)
    end = env.log.end_offset
    env.heartbeat(1)
    assert env.records_from(end) == [
        UnfenceBrokerRecord(1, 1),
        PartitionChangeRecord(topic_id, 0, leader=1),
        PartitionChangeRecord(topic_id, 1, leader=1),
    ]


def test_session_expiry_fences_one_broker_at_a_time_oldest_first():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2, 3)
    env.create_topic("t", assignments=[[1, 2, 0]])
    topic_id = env.topic_id("t")
    env.clock.advance(1000)
    env.heartbeat(2)
    env.clock.advance(1000)
    env.heartbeat(1)
    env.heartbeat(0)
    assert env.controller.next_deadline_ms() == 9001       # broker 3 touched at 0
    env.clock.advance(9000)                                  # now 11000: 3 and 2 stale
    end = env.log.end_offset
    assert env.controller.on_deadline() == 3
    assert env.records_from(end) == [FenceBrokerRecord(3, 3)]
    assert env.controller.next_deadline_ms() == 10001       # 2, touched at 1000: due now
    end = env.log.end_offset
    assert env.controller.on_deadline() == 2
    assert env.records_from(end) == [PartitionChangeRecord(topic_id, 0, isr=(1, 0)),
                                     FenceBrokerRecord(2, 2)]
    assert env.controller.next_deadline_ms() == 11001
    assert env.controller.fire_due_deadlines() == []
    env.clock.advance(1)
    assert env.controller.fire_due_deadlines() == [1, 0]
    assert env.partition("t", 0).leader == -1
    assert env.controller.next_deadline_ms() is None


def test_a_slow_fencing_ends_only_the_sessions_expired_when_the_check_began():
    """Fencing a broker that leads many partitions can hold the controller for seconds
    (measured: 22 s at 10,000 partitions on a loaded machine) while the other brokers'
    heartbeats wait unread; they must not be fenced for the controller's own delay."""
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", assignments=[[1, 2, 0]])
    env.clock.advance(1000)
    env.heartbeat(0)
    env.heartbeat(2)
    env.clock.advance(8001)                                  # broker 1 (touched at 0) stale; 0 and 2 not
    fence = env.controller.replication.handle_broker_fenced

    def slow_fence(broker_id, *args, **kwargs):
        records = fence(broker_id, *args, **kwargs)
        env.clock.advance(20_000)                            # the controller was busy
        return records
    env.controller.replication.handle_broker_fenced = slow_fence
    assert env.controller.fire_due_deadlines() == [1]
    env.controller.replication.handle_broker_fenced = fence
    env.heartbeat(0)                                         # read once the controller is free again
    env.heartbeat(2)
    assert env.controller.fire_due_deadlines() == []


def test_unregistering_removes_the_broker_from_isrs_then_the_registration():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.create_topic("t", assignments=[[1, 0]])
    topic_id = env.topic_id("t")
    end = env.log.end_offset
    assert env.controller.unregister_broker(1).is_success
    assert env.records_from(end) == [PartitionChangeRecord(topic_id, 0, isr=(0,), leader=0),
                                     UnregisterBrokerRecord(1, 1)]
    assert 1 not in env.controller.image.brokers
    assert env.controller.unregister_broker(1).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert env.register(1).broker_epoch == env.log.end_offset - 1
