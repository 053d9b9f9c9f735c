"""Idempotent producers with a real client: retries must not write twice
(confluent-kafka, enable.idempotence=true, acks=all)."""

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

COUNT = 3000


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = consumer.consume(10_000, 1.0)
        values += [m.value() for m in batch if m.error() is None]
        if not batch and len(values) >= expected:
            break
    consumer.close()
    return values


def test_retries_while_acks_all_waits_on_a_paused_follower_are_written_once():
    """The follower is paused (SIGSTOP) past the producer's request timeout: the
    leader has appended the in-flight batches but cannot acknowledge them (acks=all)
    until the follower leaves the ISR, so the client times out and sends them again.
    Every acknowledged record must be in the log exactly once, in the order sent."""
    overrides = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "30000",
                 "broker.heartbeat.interval.ms": "500"}
    with Cluster(brokers=2, overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("idem", 1, 2)])["idem"].result(15)
        wait_until(lambda: len(admin.list_topics("idem", timeout=10).topics["idem"].partitions[0].isrs) == 2,
                   what="idem fully in sync")
        partition = admin.list_topics("idem", timeout=10).topics["idem"].partitions[0]
        follower = next(r for r in partition.replicas if r != partition.leader)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                             "request.timeout.ms": 1000, "message.timeout.ms": 120000, "linger.ms": 5})
        acked: list[bytes] = []

        def delivered(error, message):
            if error is None:
                acked.append(message.value())

        def pause_follower():
            time.sleep(1.0)
            cluster.pause(follower)
            time.sleep(5.0)                 # > request.timeout.ms and > replica.lag.time.max.ms
            cluster.resume(follower)

        nemesis = threading.Thread(target=pause_follower)
        nemesis.start()
        try:
            for i in range(COUNT):                       # steadily, across the pause (~8 s)
                producer.produce("idem", f"v{i:05d}".encode(), partition=0, on_delivery=delivered)
                producer.poll(0)
                if i % 10 == 0:
                    time.sleep(0.025)
        finally:
            nemesis.join()
        assert producer.flush(120) == 0
        assert len(acked) == COUNT
        values = _consume_all(f"127.0.0.1:{cluster.port(partition.leader)}", "idem", COUNT)
        duplicates = len(values) - len(set(values))
        assert duplicates == 0, f"{duplicates} duplicate records"
        assert values == [f"v{i:05d}".encode() for i in range(COUNT)]
