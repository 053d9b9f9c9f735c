"""DescribeLogDirs, as Kafka's tools and UIs use it: per log directory the size of
each partition (matching its files on disk) and the disk's total and usable bytes."""

import glob
import os

from confluent_kafka import Producer
from kafka import KafkaAdminClient

from tidelog.testing import Broker


def test_describe_log_dirs_reports_partition_sizes_and_disk_space():
    with Broker() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(200):
            producer.produce("sized", b"x" * 1000, partition=0)
        assert producer.flush(15) == 0
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            response = admin.describe_log_dirs()
        finally:
            admin.close()
        (per_broker,) = response                    # kafka-python: one entry per broker
        assert per_broker["broker"] == 1
        (entry,) = per_broker["log_dirs"]
        assert entry["error_code"] == 0
        assert os.path.realpath(entry["log_dir"]) == os.path.realpath(os.path.join(broker.data_dir, "data"))
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for t in entry["topics"] for p in t["partitions"]}
        on_disk = sum(os.path.getsize(f) for f in glob.glob(os.path.join(broker.data_dir, "data", "sized-0", "*.log")))
        assert sizes[("sized", 0)] == on_disk > 200_000
        assert entry["total_bytes"] >= entry["usable_bytes"] > 0
