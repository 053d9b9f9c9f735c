"""The MetadataLog seam and MetadataLoader: what brokers replay on startup."""

import copy
import random
import uuid

import pytest

from tidelog.testing.controller import ControllerTestEnv, random_operation
from tidelog.metadata import (
    InMemoryMetadataLog,
    MetadataLoader,
    MetadataLogError,
    MetadataSnapshot,
    replay_all,
)
from tidelog.metadata.records import FenceBrokerRecord, RegisterBrokerRecord, iter_batch_records


def busy_env(seed: int = 3, steps: int = 150) -> ControllerTestEnv:
    env = ControllerTestEnv(seed=seed)
    rng = random.Random(seed)
    for _ in range(steps):
        random_operation(env, rng)
    return env


def test_a_broker_rebuilt_from_the_log_reaches_the_controllers_image():
    env = busy_env()
    broker = MetadataLoader(env.log)
    broker.catch_up()
    assert broker.image == env.controller.image
    assert broker.image.offset == env.log.committed_offset


def test_a_broker_catching_up_step_by_step_sees_every_intermediate_controller_image():
    env = ControllerTestEnv(seed=5)
    broker = MetadataLoader(env.log)
    rng = random.Random(5)
    for _ in range(80):
        random_operation(env, rng)
        broker.catch_up()
        assert broker.image == env.controller.image
    assert broker.catch_up() is None   # nothing new


def test_a_broker_starting_from_a_snapshot_and_the_tail_equals_one_replaying_everything():
    env = busy_env()
    env.controller.write_snapshot()
    rng = random.Random(11)
    for _ in range(40):
        random_operation(env, rng)
    full = MetadataLoader(env.log, use_snapshots=False)
    full.catch_up()
    from_snapshot = MetadataLoader(env.log)
    from_snapshot.catch_up()
    assert from_snapshot.image == full.image == env.controller.image


def test_a_loader_whose_records_were_deleted_loads_the_snapshot():
    env = busy_env()
    broker = MetadataLoader(env.log)
    broker.catch_up()
    rng = random.Random(2)
    for _ in range(30):
        random_operation(env, rng)
    assert not broker.from_snapshot
    snapshot = env.controller.write_snapshot()
    env.log.delete_before(snapshot.last_offset + 1)
    broker.catch_up()
    assert broker.image == env.controller.image
    assert broker.from_snapshot          # the broker then looks for stray logs (no deletion in this delta)


def test_a_controller_restarted_from_a_truncated_log_makes_the_same_decisions():
    env = busy_env()
    snapshot = env.controller.write_snapshot()
    env.log.delete_before(snapshot.last_offset + 1)
    restarted = ControllerTestEnv(seed=99, log=copy.deepcopy(env.log), clock=env.clock)
    restarted.broker_epochs = dict(env.broker_epochs)
    restarted.check_consistent()
    assert restarted.controller.image == env.controller.image
    assert restarted.controller.cluster.brokers == env.controller.cluster.brokers
    start = env.log.end_offset
    for broker_id in sorted(env.controller.cluster.brokers):
        assert env.fence(broker_id) == restarted.fence(broker_id)
    assert env.records_from(start) == restarted.records_from(start)
    assert len(env.records_from(start)) > 0


def test_the_in_memory_log_stores_crc_checked_batches_one_per_append():
    log = InMemoryMetadataLog()
    records = [RegisterBrokerRecord(1, uuid.UUID(int=1), 0), FenceBrokerRecord(1, 0)]
    assert log.append(records) == [0, 1]
    assert log.append(records[:1]) == [2]
    base_offset, last_offset, batch = log._batches[0]
    assert (base_offset, last_offset) == (0, 1)
    assert list(iter_batch_records(batch)) == [(0, records[0]), (1, records[1])]
    assert list(log.read(1)) == [(1, records[1]), (2, records[0])]


def test_only_committed_records_are_read():
    log = InMemoryMetadataLog(auto_commit=False)
    log.append([RegisterBrokerRecord(1, uuid.UUID(int=1), 0)])
    log.append([FenceBrokerRecord(1, 0)])
    assert (log.end_offset, log.committed_offset) == (2, -1)
    assert list(log.read(0)) == []
    log.commit(0)
    assert [o for o, _ in log.read(0)] == [0]
    with pytest.raises(MetadataLogError):
        log.commit(5)


def test_misuses_of_the_log_are_errors():
    log = InMemoryMetadataLog()
    with pytest.raises(MetadataLogError):
        log.append([])
    log.append([RegisterBrokerRecord(1, uuid.UUID(int=1), 0)])
    with pytest.raises(MetadataLogError, match="past the committed"):
        log.write_snapshot(MetadataSnapshot(5, ()))
    with pytest.raises(MetadataLogError, match="no snapshot"):
        log.delete_before(1)
    log.write_snapshot(MetadataSnapshot(0, ()))
    log.delete_before(1)
    with pytest.raises(MetadataLogError, match="below the log start"):
        list(log.read(0))


def test_replay_all_of_a_log_equals_the_loader_image():
    env = busy_env(seed=8, steps=60)
    assert replay_all(env.log.read(0)) == env.controller.image
