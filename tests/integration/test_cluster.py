"""A real multi-process cluster: a controller-only node and broker-only nodes."""

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Cluster

FAST = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300"}


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, overrides=FAST) as running:
        yield running


def _describe_cluster(cluster) -> dict[int, bool]:
    async def go():
        controller = cluster.processes.layout.controller
        connection = await KafkaConnection.connect("127.0.0.1", controller.port)
        try:
            response = await connection.request(ApiKey.DESCRIBE_CLUSTER,
                                                {"include_cluster_authorized_operations": False})
            return {int(b.broker_id): bool(b.is_fenced) for b in response.brokers}
        finally:
            connection.close()
    return asyncio.run(go())


def _leaders(bootstrap, topic) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def test_every_broker_registers_and_is_unfenced(cluster):
    assert _describe_cluster(cluster) == {1: False, 2: False, 3: False}


def test_partitions_spread_over_brokers_and_clients_reach_every_leader(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("spread", 6, 1)])["spread"].result(15)
    assert set(_leaders(cluster.bootstrap, "spread").values()) == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(6000):
        producer.produce("spread", b"%d" % i, partition=i % 6)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("spread", p, 0) for p in range(6)])
    got = {p: [] for p in range(6)}
    deadline = time.monotonic() + 30
    while sum(map(len, got.values())) < 6000 and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.3):
            assert m.error() is None
            got[m.partition()].append(int(m.value()))
    consumer.close()
    for p in range(6):
        assert got[p] == list(range(p, 6000, 6))


def test_idempotent_kafka_python_producer_gets_a_producer_id_through_a_broker_only_node(cluster):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    assert producer.send("kp-cluster", b"x").get(15).offset == 0
    producer.close()


def test_killed_broker_is_fenced_after_its_session_and_leads_nothing_then_rejoins(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("fence", 3, 1)])["fence"].result(15)
    leaders = _leaders(cluster.bootstrap, "fence")
    cluster.kill(2)
    deadline = time.monotonic() + 15
    while _describe_cluster(cluster).get(2) is not True and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _describe_cluster(cluster)[2] is True
    after = _leaders(cluster.bootstrap.replace(f"127.0.0.1:{cluster.port(2)},", ""), "fence")
    assert 2 not in after.values()  # a fenced broker leads no partition (Kafka never elects a fenced replica)
    for partition, leader in leaders.items():
        if leader == 2:
            assert after[partition] == -1  # RF 1: its only replica is gone, no unclean choice
    cluster.start_node(2)
    deadline = time.monotonic() + 15
    while _describe_cluster(cluster).get(2) is not False and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _describe_cluster(cluster)[2] is False
    deadline = time.monotonic() + 15
    while _leaders(cluster.bootstrap, "fence") != leaders and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leaders(cluster.bootstrap, "fence") == leaders
