"""``__consumer_offsets`` stays small under a commit storm: the cleaner keeps the
last commit per (group, topic, partition), and a coordinator that loads the
compacted partition after a restart has every group's latest offsets."""

import os

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.group.records import partition_for
from tidelog.testing import Broker, wait_until

OFFSETS_PARTITIONS = 3
SETTINGS = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "offsets.topic.segment.bytes": "16384",
            "log.cleaner.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0"}
GROUPS, PARTITIONS, COMMITS = ("storm-a", "storm-b"), 4, 1500


def partition_bytes(broker, index: int) -> int:
    directory = os.path.join(broker.data_dir, "data", f"__consumer_offsets-{index}")
    return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
               if name.endswith(".log"))


def committed(broker, group) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed(
            [confluent_kafka.TopicPartition("storm", p) for p in range(PARTITIONS)], timeout=30)}
    finally:
        consumer.close()


def test_a_commit_storm_is_compacted_and_survives_a_restart():
    with Broker(overrides=SETTINGS) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("storm", PARTITIONS, 1)])["storm"].result(30)
        for group in GROUPS:
            consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                                 "enable.auto.commit": False})
            for i in range(COMMITS):
                consumer.commit(offsets=[confluent_kafka.TopicPartition("storm", i % PARTITIONS, i)],
                                asynchronous=False)
            consumer.close()
        expected = {p: COMMITS - PARTITIONS + p for p in range(PARTITIONS)}
        used = {partition_for(group, OFFSETS_PARTITIONS) for group in GROUPS}
        reader = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
        written = sum(reader.get_watermark_offsets(confluent_kafka.TopicPartition("__consumer_offsets", index),
                                                   timeout=10)[1] for index in used)
        reader.close()
        assert written >= len(GROUPS) * COMMITS           # one record per commit, ~100 bytes each
        # The latest of 8 keys is what must remain once the cleaner has been through
        # the closed segments: the active segment and about one cleaned one per partition.
        wait_until(lambda: sum(partition_bytes(broker, index) for index in used) < 3 * 16384, 60,
                   "the cleaner to shrink __consumer_offsets")
        for group in GROUPS:
            assert committed(broker, group) == expected
        broker.stop()
        broker.start()                              # the coordinator loads the compacted partitions
        for group in GROUPS:
            assert committed(broker, group) == expected
