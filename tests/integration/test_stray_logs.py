"""A broker that was down while a topic was deleted (and maybe re-created under the same
name) must not keep, let alone serve, the old topic's log when it comes back: Kafka's
stray-replica rule (topic ids in ``partition.metadata``, KIP-516)."""

import os
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300"}


def _partition_dir(cluster, node_id: int, name: str) -> str:
    node = cluster.processes.layout.node(node_id)
    return os.path.join(cluster.processes._node_dir(node), "data", name)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _log_bytes(directory: str) -> bytes:
    return b"".join(open(os.path.join(directory, name), "rb").read()
                    for name in sorted(os.listdir(directory)) if name.endswith(".log"))


def test_a_topic_deleted_and_recreated_while_a_broker_was_down_leaves_nothing_old_on_it():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("reborn", 1, 3), NewTopic("gone", 1, 3)])["reborn"].result(15)
        old = [b"old-%03d" % i for i in range(100)]
        _produce(cluster.bootstrap, "reborn", old)
        _produce(cluster.bootstrap, "gone", old)
        stale = _partition_dir(cluster, 3, "reborn-0")
        wait_until(lambda: b"old-099" in _log_bytes(stale), what="broker 3 has the old records")
        cluster.stop(3)
        for future in admin.delete_topics(["reborn", "gone"], operation_timeout=15).values():
            future.result()
        wait_until(lambda: "reborn" not in admin.list_topics(timeout=5).topics, what="topic deleted")
        # Re-created while broker 3 is away: new id, new records, broker 3 among the replicas
        # again once it is back (the controller places a new topic on live brokers only, so
        # it is re-created after the restart below, before broker 3 can catch up).
        cluster.start_node(3)
        admin.create_topics([NewTopic("reborn", 1, 3)])["reborn"].result(15)
        new = [b"new-%03d" % i for i in range(5)]
        _produce(cluster.bootstrap, "reborn", new)
        gone = _partition_dir(cluster, 3, "gone-0")
        wait_until(lambda: not os.path.exists(gone), timeout_s=30,
                   what="the deleted topic's log removed from broker 3")
        wait_until(lambda: os.path.isdir(stale) and b"new-004" in _log_bytes(stale), timeout_s=30,
                   what="broker 3 holds the new topic's records")
        time.sleep(1)
        assert b"old-" not in _log_bytes(stale), "broker 3 kept the deleted topic's records"
