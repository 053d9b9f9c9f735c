"""Replication throttles (KIP-73) on a local 3-broker cluster (real processes).

A partition of ``--megabytes`` MB on broker 1 gets a new replica on broker 2, once
without a throttle and once with ``tidelog reassign execute --throttle RATE``, while
an acks=1 producer writes to another partition led by broker 1. Prints, per run, the
catch-up rate (bytes copied / time from execute to the move's completion), its ratio
to the configured throttle, and the producer's records/s during the copy.

    python benchmarks/replication_throttle_bench.py [--megabytes 20] [--throttle 2000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402
from kafka import KafkaAdminClient, TopicPartition  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from tidelog.testing import Cluster, wait_until  # noqa: E402

RECORD_BYTES = 1000


def fill(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(RECORD_BYTES)
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0


class ClientLoad(threading.Thread):
    """An acks=1 producer to ``topic`` until stopped; ``rate()``: acknowledged records/s."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_event = threading.Event()
        self.acked = self.failed = 0
        self.elapsed = 0.0

    def _delivered(self, err, _msg) -> None:
        if err:
            self.failed += 1
        else:
            self.acked += 1

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": 1, "linger.ms": 5})
        value = os.urandom(RECORD_BYTES)
        start = time.perf_counter()
        while not self.stop_event.is_set():
            try:
                producer.produce(self.topic, value, partition=0, on_delivery=self._delivered)
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(60)
        self.elapsed = time.perf_counter() - start

    def rate(self) -> float:
        return self.acked / self.elapsed


def tidelog(bootstrap: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "reassign", "-b", bootstrap, *args],
                            capture_output=True, text=True, timeout=120)
    return result.stdout


def move(cluster, admin, topic: str, records: int, throttle: int | None) -> tuple[float, float]:
    """(catch-up bytes/s, client records/s during the copy)."""
    admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1, replica_assignments={0: [1]})])
    wait_until(lambda: topic in admin.list_topics(), 20, f"{topic} created")
    fill(cluster.bootstrap, topic, records)
    plan = os.path.join(tempfile.mkdtemp(), "plan.json")
    with open(plan, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}, f)
    load = ClientLoad(cluster.bootstrap, "clients")
    load.start()
    time.sleep(1)                      # the producer is running before the copy starts
    start = time.perf_counter()
    tidelog(cluster.bootstrap, "execute", "--reassignment-json-file", plan,
            *(["--throttle", str(throttle)] if throttle is not None else []))
    while TopicPartition(topic, 0) in admin.list_partition_reassignments():
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    load.stop_event.set()
    load.join()
    assert load.failed == 0, load.failed
    tidelog(cluster.bootstrap, "verify", "--reassignment-json-file", plan)      # clears the throttles
    return records * RECORD_BYTES / elapsed, load.rate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=20)
    parser.add_argument("--throttle", type=int, default=2_000_000, help="bytes/s")
    args = parser.parse_args()
    records = args.megabytes * 1_000_000 // RECORD_BYTES
    with Cluster(brokers=3) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
        admin.create_topics([NewTopic("clients", num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1]})])
        free_rate, free_clients = move(cluster, admin, "unthrottled", records, None)
        throttled_rate, throttled_clients = move(cluster, admin, "throttled", records, args.throttle)
        admin.close()
    print(f"copy of {args.megabytes} MB to a new replica:")
    print(f"  no throttle:          {free_rate / 1e6:8.2f} MB/s   acks=1 producer {free_clients:9.0f} records/s")
    print(f"  throttle {args.throttle / 1e6:6.2f} MB/s: {throttled_rate / 1e6:8.2f} MB/s   acks=1 producer "
          f"{throttled_clients:9.0f} records/s")
    print(f"  throttled catch-up / throttle: {throttled_rate / args.throttle:.2f}")
    print(f"  producer rate throttled / unthrottled: {throttled_clients / free_clients:.2f}")


if __name__ == "__main__":
    main()
