"""delta.local_changes(broker_id): what one broker must lead, follow, delete."""

import uuid

from tidelog.core.ids import TopicPartition
from tidelog.metadata import MetadataDelta, replay_all
from tidelog.metadata.records import (
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)

T, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def base_image():
    records = [RegisterBrokerRecord(b, uuid.UUID(int=100 + b), b, fenced=False) for b in range(4)]
    records += [TopicRecord("t", T),
                PartitionRecord(T, 0, (0, 1, 2), (0, 1, 2), 0),
                PartitionRecord(T, 1, (1, 2, 3), (1, 2, 3), 1)]
    return replay_all(enumerate(records))


def delta_with(*records):
    image = base_image()
    delta = MetadataDelta(image)
    for i, record in enumerate(records):
        delta.replay(record, image.offset + 1 + i)
    return delta


def test_a_broker_elected_leader_must_lead_and_the_old_leader_must_follow():
    delta = delta_with(PartitionChangeRecord(T, 0, isr=(1, 2), leader=1))
    new_leader = delta.local_changes(1)
    assert set(new_leader.leaders) == {TP0} and not new_leader.followers
    assert new_leader.leaders[TP0].partition.leader_epoch == 1
    assert new_leader.leaders[TP0].topic_id == T
    old_leader = delta.local_changes(0)
    assert set(old_leader.followers) == {TP0} and not old_leader.leaders
    assert not old_leader.deletes
    assert delta.local_changes(2).followers[TP0].partition.leader == 1


def test_a_broker_outside_a_changed_partition_has_nothing_to_do():
    delta = delta_with(PartitionChangeRecord(T, 0, isr=(0, 1)))
    assert delta.local_changes(3).is_empty


def test_unchanged_partitions_are_not_reported():
    delta = delta_with(PartitionChangeRecord(T, 0, isr=(0, 1)))
    assert TP1 not in delta.local_changes(1).followers
    assert TP1 not in delta.local_changes(1).leaders


def test_a_new_topic_gives_its_replicas_leaders_and_followers():
    delta = delta_with(TopicRecord("n", T2), PartitionRecord(T2, 0, (3, 0), (3, 0), 3))
    assert set(delta.local_changes(3).leaders) == {TopicPartition("n", 0)}
    assert set(delta.local_changes(0).followers) == {TopicPartition("n", 0)}
    assert delta.local_changes(1).is_empty


def test_a_deleted_topic_is_deleted_by_every_replica_and_only_them():
    delta = delta_with(RemoveTopicRecord(T))
    assert delta.local_changes(0).deletes == {TP0}
    assert delta.local_changes(1).deletes == {TP0, TP1}
    assert delta.local_changes(3).deletes == {TP1}
    assert not delta.local_changes(3).leaders


def test_a_replica_moved_away_from_a_broker_is_deleted_there():
    delta = delta_with(PartitionChangeRecord(T, 1, isr=(1, 3), leader=1, replicas=(1, 3, 0)))
    assert delta.local_changes(2).deletes == {TP1}
    assert set(delta.local_changes(0).followers) == {TP1}


def test_a_topic_deleted_and_recreated_in_one_delta_is_deleted_then_led():
    delta = delta_with(RemoveTopicRecord(T), TopicRecord("t", T2),
                       PartitionRecord(T2, 0, (0,), (0,), 0))
    changes = delta.local_changes(0)
    assert changes.deletes == {TP0}
    assert set(changes.leaders) == {TP0} and changes.leaders[TP0].topic_id == T2
