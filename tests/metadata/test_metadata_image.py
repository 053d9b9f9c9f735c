"""MetadataImage and MetadataDelta: replay equivalences, snapshots, queries."""

import random
import uuid

import pytest

from tidelog.testing.controller import ControllerTestEnv, random_operation
from tidelog.core.ids import TopicPartition
from tidelog.metadata import (
    MetadataDelta,
    MetadataImage,
    MetadataReplayError,
    replay_all,
    snapshot_of,
)
from tidelog.metadata.loader import load_snapshot
from tidelog.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)


def workload_log(seed: int, steps: int = 120) -> list:
    """The ``(offset, record)`` pairs a random but realistic controller run wrote."""
    env = ControllerTestEnv(seed=seed)
    rng = random.Random(seed)
    for _ in range(steps):
        random_operation(env, rng)
    return list(env.log.read(0))


@pytest.mark.parametrize("seed", range(4))
def test_replaying_any_prefix_then_the_rest_equals_replaying_all(seed):
    log = workload_log(seed)
    assert len(log) > 30
    whole = replay_all(log)
    for split in range(len(log) + 1):
        prefix = replay_all(log[:split])
        assert replay_all(log[split:], prefix) == whole, f"split at {split}"


@pytest.mark.parametrize("seed", range(4))
def test_image_to_snapshot_records_to_image_is_the_identity(seed):
    log = workload_log(seed)
    for end in range(0, len(log) + 1, 7):
        image = replay_all(log[:end])
        assert load_snapshot(snapshot_of(image)).apply() == image


@pytest.mark.parametrize("seed", range(3))
def test_loading_a_snapshot_then_the_tail_equals_replaying_the_whole_log(seed):
    log = workload_log(seed)
    whole = replay_all(log)
    for split in range(1, len(log), 11):
        snapshot = snapshot_of(replay_all(log[:split]))
        delta = load_snapshot(snapshot)
        for offset, record in log[split:]:
            delta.replay(record, offset)
        assert delta.apply() == whole


def test_an_empty_delta_changes_nothing_and_shares_everything():
    image = replay_all(workload_log(1))
    again = MetadataDelta(image).apply()
    assert again == image
    for name, topic in image.topics_by_name.items():
        assert again.topics_by_name[name] is topic


def test_a_delta_shares_every_topic_it_did_not_touch():
    image = replay_all(_two_topics())
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(A, 0, isr=(1,)), 10)
    after = delta.apply()
    assert after.topics_by_name["b"] is image.topics_by_name["b"]
    assert after.topics_by_name["a"] is not image.topics_by_name["a"]
    assert after.offset == 10


A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def _two_topics() -> list:
    records = [
        RegisterBrokerRecord(1, uuid.UUID(int=1), 0, (Endpoint("PLAINTEXT", "h1", 9092),
                                                      Endpoint("SSL", "h1", 9093))),
        RegisterBrokerRecord(2, uuid.UUID(int=2), 1, (Endpoint("PLAINTEXT", "h2", 9092),)),
        RegisterBrokerRecord(3, uuid.UUID(int=3), 2, (Endpoint("PLAINTEXT", "h3", 9092),)),
        UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
        TopicRecord("a", A),
        PartitionRecord(A, 0, (1, 2, 3), (1, 2), 1),
        PartitionRecord(A, 1, (2, 1), (2, 1), 2),
        TopicRecord("b", B),
        PartitionRecord(B, 0, (3,), (3,), -1, 4, 5),
        ConfigRecord(ConfigResourceType.TOPIC, "a", "retention.ms", "1000"),
    ]
    return list(enumerate(records))


def test_image_queries_answer_like_the_metadata_cache():
    image = replay_all(_two_topics())
    assert image.offset == 10
    assert image.topic_names() == ["a", "b"]
    assert image.contains_topic("a") and not image.contains_topic("c")
    assert image.contains_partition(TopicPartition("a", 1))
    assert not image.contains_partition(TopicPartition("a", 2))
    assert image.partition(TopicPartition("a", 0)).isr == (1, 2)
    assert image.partition(TopicPartition("zz", 0)) is None
    assert [tp for tp, _ in image.all_partitions()] == [
        TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]
    assert image.topic_name(B) == "b"
    assert image.topic_config("a") == {"retention.ms": "1000"}
    assert image.topic_config("b") == {}
    assert [b.broker_id for b in image.alive_brokers()] == [1, 2]
    assert image.is_alive(1) and not image.is_alive(3) and not image.is_alive(9)


def test_replica_endpoints_leave_out_fenced_brokers_and_other_listeners():
    image = replay_all(_two_topics())
    assert image.replica_endpoints(TopicPartition("a", 0), "PLAINTEXT") == {
        1: Endpoint("PLAINTEXT", "h1", 9092), 2: Endpoint("PLAINTEXT", "h2", 9092)}
    assert image.replica_endpoints(TopicPartition("a", 0), "SSL") == {
        1: Endpoint("SSL", "h1", 9093)}
    assert image.replica_endpoints(TopicPartition("b", 0), "PLAINTEXT") == {}
    assert image.replica_endpoints(TopicPartition("nope", 0), "PLAINTEXT") == {}
    assert image.leader_endpoint(TopicPartition("a", 1), "PLAINTEXT") == \
        Endpoint("PLAINTEXT", "h2", 9092)
    assert image.leader_endpoint(TopicPartition("b", 0), "PLAINTEXT") is None


def test_removing_a_topic_removes_its_partitions_and_configs():
    image = replay_all(_two_topics() + [(11, RemoveTopicRecord(A))])
    assert image.topic_names() == ["b"]
    assert image.topic_config("a") == {}
    assert A not in image.topics_by_id


def test_partition_change_merge_rules_bump_epochs():
    records = _two_topics() + [
        (11, PartitionChangeRecord(A, 0, isr=(1,))),              # ISR only
        (12, PartitionChangeRecord(A, 0, leader=1)),               # same leader: forced bump
        (13, PartitionChangeRecord(A, 0, leader=-1)),              # no leader
    ]
    states = [replay_all(records[:n]).partition(TopicPartition("a", 0)) for n in (12, 13, 14)]
    assert [(p.leader, p.leader_epoch, p.partition_epoch) for p in states] == [
        (1, 0, 1), (1, 1, 2), (-1, 2, 3)]


@pytest.mark.parametrize("record, message", [
    (PartitionChangeRecord(A, 7, isr=(1,)), "does not exist"),
    (PartitionChangeRecord(uuid.UUID(int=99), 0, isr=(1,)), "unknown"),
    (FenceBrokerRecord(1, 77), "epoch"),
    (FenceBrokerRecord(9, 0), "not registered"),
    (TopicRecord("again", A), "already exists"),
])
def test_a_record_that_cannot_be_replayed_is_fatal(record, message):
    delta = MetadataDelta(replay_all(_two_topics()))
    with pytest.raises(MetadataReplayError, match=message):
        delta.replay(record, 11)


def test_a_record_that_breaks_a_partition_invariant_is_fatal():
    delta = MetadataDelta(replay_all(_two_topics()))
    with pytest.raises(AssertionError):
        delta.replay(PartitionChangeRecord(A, 0, leader=3), 11)   # 3 is not in the ISR


def test_the_empty_image_is_offset_minus_one():
    assert MetadataImage().offset == -1
    assert MetadataImage().topic_names() == []
    assert replay_all([]) == MetadataImage()
