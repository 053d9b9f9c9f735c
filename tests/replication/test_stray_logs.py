"""Logs left by a topic deleted while the broker was away (Kafka's stray replicas,
KIP-516 topic ids): deleted, not adopted by a new topic of the same name."""

import os
import uuid

from tidelog.core.ids import TopicPartition
from tidelog.metadata import MetadataDelta, MetadataImage, replay_all
from tidelog.metadata.records import PartitionRecord, RegisterBrokerRecord, RemoveTopicRecord, TopicRecord
from tidelog.replication.metadata_changes import apply_local_changes, delete_stray_logs
from tidelog.storage.log_manager import PARTITION_METADATA_FILE

from .conftest import values
from .test_replica_manager import manager

OLD, NEW, OTHER_ID = uuid.UUID(int=7), uuid.UUID(int=8), uuid.UUID(int=9)
TP = TopicPartition("reborn", 0)
BROKERS = [RegisterBrokerRecord(b, uuid.UUID(int=100 + b), b, fenced=False) for b in range(3)]


def whole_log_delta(*records) -> MetadataDelta:
    """What a restarted broker replays: the metadata's whole history in one delta."""
    delta = MetadataDelta(MetadataImage())
    for offset, record in enumerate(BROKERS + list(records)):
        delta.replay(record, offset)
    return delta


def test_a_new_topic_of_the_same_name_does_not_adopt_the_old_topics_log(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=1)
    apply_local_changes(rm, whole_log_delta(TopicRecord("reborn", OLD), PartitionRecord(OLD, 0, (1, 2), (1, 2), 1)), 1)
    rm.log_manager.get_log(TP).append_as_leader(values("old-0", "old-1"), 0)
    assert rm.log_manager.topic_id_of(TP) == OLD
    path = os.path.join(rm.log_manager.get_log(TP).directory, PARTITION_METADATA_FILE)
    assert open(path).read().startswith("version: 0\ntopic_id: ")
    # Restart after the topic was deleted and re-created under the same name.
    rm.log_manager.shutdown()
    rm = manager(tmp_path, clock, broker_id=1)
    assert rm.log_manager.get_log(TP).log_end_offset == 2
    states = apply_local_changes(rm, whole_log_delta(
        TopicRecord("reborn", OLD), PartitionRecord(OLD, 0, (1, 2), (1, 2), 1), RemoveTopicRecord(OLD),
        TopicRecord("reborn", NEW), PartitionRecord(NEW, 0, (2, 1), (2, 1), 2)), 1)
    assert TP in states
    assert rm.log_manager.get_log(TP).log_end_offset == 0          # a fresh log, not the old records
    assert rm.log_manager.topic_id_of(TP) == NEW


def test_a_log_of_a_topic_or_replica_the_image_does_not_place_here_is_deleted(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=1)
    gone, moved, kept = TopicPartition("gone", 0), TopicPartition("moved", 0), TopicPartition("kept", 0)
    for tp in (gone, moved, kept):
        rm.log_manager.get_or_create_log(tp).append_as_leader(values("x"), 0)
    image = replay_all(enumerate(BROKERS + [
        TopicRecord("moved", OTHER_ID), PartitionRecord(OTHER_ID, 0, (0, 2), (0, 2), 0),
        TopicRecord("kept", NEW), PartitionRecord(NEW, 0, (1, 2), (1, 2), 1)]))
    assert delete_stray_logs(rm, image, 1) == [gone, moved]
    assert rm.log_manager.get_log(gone) is None and rm.log_manager.get_log(moved) is None
    assert rm.log_manager.get_log(kept).log_end_offset == 1
    assert sorted(os.listdir(os.path.join(str(tmp_path), "broker1"))).count("gone-0") == 0
