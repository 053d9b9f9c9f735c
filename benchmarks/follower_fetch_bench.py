"""Follower fetching (KIP-392): how late a consumer of the follower in its rack sees records,
against a consumer of the leader.

A 3-broker cluster of processes (``tidelog.testing.Cluster``), each broker in its own
``broker.rack``, with ``RackAwareReplicaSelector``; a topic of one partition, RF=3. A
producer (acks=all, linger.ms=0) sends ``--records`` records, one every ``--interval-ms``,
each carrying its send time; two consumers read at once, one with ``client.rack`` = a
follower's rack, one with the leader's. Prints each consumer's end-to-end latency
(p50 / p99 / max, ms) and the record bytes each broker sent to consumers (its
``bytesout`` metric), which shows who served whom.

    python benchmarks/follower_fetch_bench.py [--records 300] [--interval-ms 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.replication.replica_selector import RACK_AWARE_REPLICA_SELECTOR  # noqa: E402
from tidelog.testing import Cluster, wait_until  # noqa: E402

TOPIC = "near"


def consume(bootstrap: str, client_rack: str, count: int, latencies: list[float]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "client.rack": client_rack, "fetch.wait.max.ms": 500})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    deadline = time.monotonic() + 120
    while len(latencies) < count and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.1):
            if message.error() is None:
                (sent,) = struct.unpack(">d", message.value()[:8])
                latencies.append((time.monotonic() - sent) * 1000)
    consumer.close()


def bytes_out(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("kafka_server_brokertopicmetrics_bytesout_total") and f'topic="{TOPIC}"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):6.1f}  p99 {p99:6.1f}  max {ordered[-1]:6.1f} ms ({len(ordered)} records)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--interval-ms", type=float, default=20)
    args = parser.parse_args()
    cluster = Cluster(brokers=3, overrides={"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR}, metrics=True)
    for broker in cluster.brokers:
        broker.overrides["broker.rack"] = f"rack-{broker.node_id}"
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(15)
        partition = lambda: admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]   # noqa: E731
        wait_until(lambda: len(partition().isrs) == 3, what="in sync")
        leader = partition().leader
        follower = next(b.node_id for b in cluster.brokers if b.node_id != leader)
        results: dict[str, list[float]] = {"follower": [], "leader": []}
        threads = [threading.Thread(target=consume, args=(cluster.bootstrap, f"rack-{node}", args.records,
                                                         results[name]))
                   for name, node in (("follower", follower), ("leader", leader))]
        for thread in threads:
            thread.start()
        time.sleep(2)                                   # both consumers connected and waiting
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
        for _ in range(args.records):
            producer.produce(TOPIC, struct.pack(">d", time.monotonic()) + b"x" * 92, partition=0)
            producer.poll(0)
            time.sleep(args.interval_ms / 1000)
        producer.flush(30)
        for thread in threads:
            thread.join()
        print(f"leader {leader}, follower {follower}; one record every {args.interval_ms} ms, acks=all")
        for name in ("follower", "leader"):
            print(f"consumer of the {name:8}: {summary(results[name])}")
        for broker in cluster.brokers:
            print(f"broker {broker.node_id} sent consumers {bytes_out(cluster.metrics_url(broker.node_id)):.0f} bytes")


if __name__ == "__main__":
    main()
