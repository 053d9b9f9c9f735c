"""QuorumController: offsets, the commit seam, restarts, deadlines, and random workloads."""

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidelog.controller.invariants import check_invariants
from tidelog.testing.controller import ControllerTestEnv, random_operation
from tidelog.core.errors import ErrorCode
from tidelog.metadata import InMemoryMetadataLog, MetadataLoader
from tidelog.metadata.records import ProducerIdsRecord


def test_records_are_appended_as_one_batch_per_operation_at_the_decided_offsets():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1, 2)
    env.create_topic("t", 3, 3)
    batches = [(base, last) for base, last, _ in env.log._batches]
    assert batches == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 9)]
    assert env.controller.last_write_offset == 9 == env.controller.committed_offset


def test_the_published_image_waits_for_the_log_to_commit():
    log = InMemoryMetadataLog(auto_commit=False)
    env = ControllerTestEnv(log=log)
    env.register(0)
    env.register(1)
    # The controller decided and replayed (its next decision sees broker 0) ...
    assert sorted(env.controller.cluster.brokers) == [0, 1]
    # ... but nothing is committed: the image brokers see is still empty.
    assert env.controller.image.offset == -1 and not env.controller.image.brokers
    assert env.controller.committed_offset == -1
    log.commit(1)
    env.controller.on_commit()
    assert sorted(env.controller.image.brokers) == [0, 1]
    assert env.controller.image.offset == 1
    # "caught up" is measured against the committed offset, not the appended one.
    assert not env.heartbeat(1, metadata_offset=0).is_caught_up
    assert env.heartbeat(1, metadata_offset=1).is_caught_up
    assert env.log.end_offset > env.controller.committed_offset + 1


def test_renounce_drops_uncommitted_decisions():
    log = InMemoryMetadataLog(auto_commit=False)
    env = ControllerTestEnv(log=log)
    env.register(0)
    log.commit(0)
    env.register(1)
    env.controller.renounce()
    assert sorted(env.controller.cluster.brokers) == [0]


def test_a_restarted_controller_replays_the_log_to_the_same_state():
    env = ControllerTestEnv(seed=3)
    rng = random.Random(3)
    for _ in range(200):
        random_operation(env, rng)
    restarted = ControllerTestEnv(seed=3, log=env.log, clock=env.clock)
    assert restarted.controller.image == env.controller.image
    assert restarted.controller.cluster.brokers == env.controller.cluster.brokers
    assert restarted.controller.cluster.registration_offsets == \
        env.controller.cluster.registration_offsets
    assert restarted.controller.configs.configs == env.controller.configs.configs
    assert restarted.controller.producer_ids.next_producer_id == \
        env.controller.producer_ids.next_producer_id
    for name, topic_id in env.controller.replication.topic_ids.items():
        assert restarted.controller.replication.topics[topic_id].partitions == \
            env.controller.replication.topics[topic_id].partitions
    restarted.check_consistent()


def test_a_restarted_controller_gives_every_broker_a_fresh_session():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    env.clock.advance(60_000)
    restarted = ControllerTestEnv(log=env.log, clock=env.clock)
    assert restarted.controller.next_deadline_ms() == env.clock.monotonic_ms() + 9001
    assert restarted.controller.fire_due_deadlines() == []


def test_the_stale_broker_deadline_is_exposed_and_fired_by_the_caller():
    env = ControllerTestEnv(session_timeout_ms=1000)
    assert env.controller.next_deadline_ms() is None
    env.register_and_unfence(0)
    assert env.controller.next_deadline_ms() == 1001
    env.clock.advance(1000)
    assert env.controller.on_deadline() is None          # not stale yet at exactly +timeout
    env.clock.advance(1)
    assert env.controller.on_deadline() == 0
    assert env.controller.next_deadline_ms() is None


def test_producer_id_blocks_never_overlap_and_survive_restarts():
    env = ControllerTestEnv()
    env.register_and_unfence(0, 1)
    first = env.controller.allocate_producer_ids(0, env.broker_epochs[0])
    second = env.controller.allocate_producer_ids(1, env.broker_epochs[1])
    assert (first.producer_id_start, second.producer_id_start) == (0, 1000)
    assert env.records_from(env.log.end_offset - 1) == [ProducerIdsRecord(1, 1, 2000)]
    assert env.controller.allocate_producer_ids(0, 99).error_code == ErrorCode.STALE_BROKER_EPOCH
    restarted = ControllerTestEnv(log=env.log, clock=env.clock)
    assert restarted.controller.allocate_producer_ids(0, 0).producer_id_start == 2000
    assert restarted.controller.image.producer_ids.next_producer_id == 3000


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_keep_the_controller_invariants(seed):
    """Invariants 10.1, 10.7 and 10.8 (docs/simulation.md) after every operation of a
    random workload."""
    env = ControllerTestEnv(seed=seed)
    broker = MetadataLoader(env.log)
    rng = random.Random(seed)
    previous = None
    for _ in range(150):
        random_operation(env, rng)
        image = env.controller.image
        check_invariants(image, previous)
        broker.catch_up()
        assert broker.image == image
        previous = image
    env.check_consistent()


@given(st.integers(0, 2**32), st.integers(10, 80))
@example(seed=696365, steps=43)     # a broker re-registering its incarnation with other directories
@settings(max_examples=25, deadline=None)
def test_any_random_workload_replays_to_the_same_image(seed, steps):
    env = ControllerTestEnv(seed=seed)
    rng = random.Random(seed)
    for _ in range(steps):
        random_operation(env, rng)
        check_invariants(env.controller.image)
    env.check_consistent()
