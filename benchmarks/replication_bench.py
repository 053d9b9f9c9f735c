"""Replication cost and failover on a local 3-broker cluster (real processes).

Prints, in one run: producer throughput to an RF=3 topic with acks=all
(min.insync.replicas=2) against an RF=1 topic with acks=1 on the same cluster
(target: >= 50%); end-to-end latency p50/p99 (produce with acks=all to consume);
one consumer's read rate of the RF=3 topic beside the RF=1 one (alternated
twice, best of each); the failover time from SIGKILL of a leader to the first
acknowledged acks=all produce on the new leader (target: <=
broker.session.timeout.ms + 1 s); and the 3-broker cluster start-up time
(target < 3 s).

    python benchmarks/replication_bench.py [--records 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.testing import Cluster  # noqa: E402

RECORD_BYTES = 1024
PARTITIONS = 3
SESSION_TIMEOUT_MS = 3000


def produce_rate(bootstrap: str, topic: str, acks: str, records: int, record_bytes: int = RECORD_BYTES,
                 **config) -> float:
    """Records/s of ``records`` records of ``record_bytes`` over 3 partitions, one producer
    (linger.ms=5 unless ``config`` says otherwise; also used by metrics_bench)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, **config})
    value = os.urandom(record_bytes)
    failures = []
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS,
                                 on_delivery=lambda e, m: failures.append(e) if e else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    return records / elapsed


def throughput(bootstrap: str, topic: str, acks: str, records: int, **config) -> float:
    """MB/s of ``records`` 1 KiB records over 3 partitions (also used by metrics_bench)."""
    return produce_rate(bootstrap, topic, acks, records, RECORD_BYTES, **config) * RECORD_BYTES / 1e6


def end_to_end_latency(bootstrap: str, topic: str, samples: int = 500) -> tuple[float, float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, 0, -1)])  # -1: from the end
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    latencies = []
    time.sleep(0.5)
    for _ in range(samples):
        sent = time.perf_counter()
        producer.produce(topic, str(sent).encode(), partition=0)
        producer.poll(0)
        while True:
            message = consumer.poll(5)
            if message is not None and message.error() is None and message.value() == str(sent).encode():
                latencies.append(time.perf_counter() - sent)
                break
    consumer.close()
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def consume_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records/s one consumer reads a whole topic (assign(), from the beginning)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-read", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    count, start = 0, None
    while count < records:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                start = start or time.perf_counter()
                count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return records / elapsed


def failover_seconds(cluster: Cluster, topic: str) -> float:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 60_000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 200})
    producer.produce(topic, b"warm", partition=0)
    producer.flush(10)
    cluster.kill(leader)
    killed = time.perf_counter()
    acked = threading.Event()
    producer.produce(topic, b"after-kill", partition=0,
                     on_delivery=lambda e, m: acked.set() if e is None else None)
    while not acked.is_set():
        producer.poll(0.005)
        if time.perf_counter() - killed > 60:
            raise RuntimeError("no acknowledged produce within 60 s of the kill")
    return time.perf_counter() - killed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args(argv)
    overrides = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "500"}
    started = time.perf_counter()
    with Cluster(brokers=3, overrides=overrides) as cluster:
        startup = time.perf_counter() - started
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for name, rf, configs in (("rf1", 1, {}), ("rf3", 3, {"min.insync.replicas": "2"})):
            admin.create_topics([NewTopic(name, 3, rf, config=configs)])[name].result(15)
        time.sleep(1)
        rf1 = throughput(cluster.bootstrap, "rf1", "1", args.records)
        rf3 = throughput(cluster.bootstrap, "rf3", "all", args.records)
        reads: dict[str, list[float]] = {"rf1": [], "rf3": []}
        for topic in ("rf3", "rf1", "rf1", "rf3"):         # alternated: the first read warms caches
            reads[topic].append(consume_rate(cluster.bootstrap, topic, args.records))
        read_rf1, read_rf3 = max(reads["rf1"]), max(reads["rf3"])
        p50, p99 = end_to_end_latency(cluster.bootstrap, "rf3")
        failover = failover_seconds(cluster, "rf3")
    print(f"records: {args.records} x {RECORD_BYTES} B, 3 partitions, 3 brokers + 1 controller (processes)")
    print(f"RF=1 acks=1    produce: {rf1:8.1f} MB/s")
    print(f"RF=3 acks=all  produce: {rf3:8.1f} MB/s   ratio {rf3 / rf1:.2f} (target >= 0.50)")
    print(f"RF=1 consume: {read_rf1:9.0f} records/s   RF=3 consume: {read_rf3:9.0f} records/s   "
          f"ratio {read_rf3 / read_rf1:.2f}")
    print(f"end-to-end latency (acks=all, RF=3): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"failover (kill -9 of leader -> first acks=all ack): {failover:.2f} s "
          f"(target <= session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s + 1 s)")
    print(f"3-broker cluster start-up: {startup:.2f} s (target < 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
