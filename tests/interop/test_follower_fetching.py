"""Follower fetching (KIP-392) on a real cluster: three broker processes, each in its
own ``broker.rack``, with Kafka's ``RackAwareReplicaSelector``; a confluent-kafka
(librdkafka) consumer and Kafka's Java consumer with ``client.rack`` set read from
the follower in their rack, then from the leader once that follower is stopped.

Where the records came from is read on the brokers' side: each broker's
``kafka_server_brokertopicmetrics_bytesout_total{topic}`` counts the record bytes it sent
to consumers (not to followers). Every record is read exactly once.

One cluster serves the module; a test that stops a broker starts it again and waits
until the partition is fully in sync before it ends."""

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.replication.replica_selector import RACK_AWARE_REPLICA_SELECTOR
from tidelog.testing import Cluster, wait_until

from tests.integration.test_metrics import metric

SETTINGS = {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR, "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "1"}
COUNT = 100
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


def rack(broker_id: int) -> str:
    return f"rack-{broker_id}"


@pytest.fixture(scope="module")
def cluster():
    running = Cluster(brokers=3, overrides=SETTINGS, metrics=True)
    for broker in running.brokers:
        broker.overrides["broker.rack"] = rack(broker.node_id)
    with running:
        yield running


def _partition(cluster, topic):
    return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions[0]


def _create(cluster, topic: str) -> tuple[int, int]:
    """A topic on all three brokers; (its leader, a follower)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(15)
    _in_sync(cluster, topic)
    leader = _partition(cluster, topic).leader
    return leader, next(b.node_id for b in cluster.brokers if b.node_id != leader)


def _in_sync(cluster, topic):
    wait_until(lambda: len(_partition(cluster, topic).isrs) == 3 and _partition(cluster, topic).leader >= 0,
               what=f"{topic} fully in sync")


def _produce(cluster, topic: str, first: int, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    failures = []
    values = [b"record-%06d" % i for i in range(first, first + count)]
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, m: failures.append(e) if e else None)
    assert producer.flush(30) == 0 and failures == []
    return values


def _bytes_out(cluster, broker_id: int, topic: str) -> float:
    return metric(cluster, broker_id, BYTES_OUT, topic=topic) or 0.0


def _restart_in_sync(cluster, broker_id: int, topic: str) -> None:
    cluster.start_node(broker_id)
    _in_sync(cluster, topic)


def test_metadata_carries_each_brokers_rack(cluster):
    async def brokers():
        connection = await KafkaConnection.connect("127.0.0.1", cluster.brokers[0].port)
        try:
            response = await connection.request(ApiKey.METADATA, {
                "topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
                version=12)
        finally:
            connection.close()
        return {int(b.node_id): b.rack for b in response.brokers}
    # A broker another test restarted is listed once the answering broker's metadata
    # has it unfenced again (Kafka's lags the same way): wait for all three, then compare.
    wait_until(lambda: len(asyncio.run(brokers())) == 3, 30, "all three brokers listed")
    assert asyncio.run(brokers()) == {b.node_id: rack(b.node_id) for b in cluster.brokers}


def _consume(consumer, count: int, timeout_s: float = 60.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(1000, 0.2) if m.error() is None]
    return got


def test_confluent_consumer_reads_from_the_follower_in_its_rack_then_from_the_leader(cluster):
    topic = "near-librdkafka"
    leader, follower = _create(cluster, topic)
    expected = _produce(cluster, topic, 0, COUNT)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "client.rack": rack(follower), "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = _consume(consumer, COUNT)
        # The follower in the consumer's rack sent the records; the leader sent none.
        assert _bytes_out(cluster, follower, topic) > 0
        assert _bytes_out(cluster, leader, topic) == 0
        cluster.stop(follower)
        try:
            expected += _produce(cluster, topic, COUNT, COUNT)
            got += _consume(consumer, COUNT)
            assert _bytes_out(cluster, leader, topic) > 0        # back to the leader
            got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]   # nothing more
        finally:
            _restart_in_sync(cluster, follower, topic)
    finally:
        consumer.close()
    assert got == expected                                    # each exactly once, in order


def test_java_consumer_reads_from_the_follower_in_its_rack_then_from_the_leader(cluster, java):
    topic = "near-java"
    leader, follower = _create(cluster, topic)
    expected = [v.decode() for v in _produce(cluster, topic, 0, COUNT)]
    java.call("consumer.create", name="near", config={
        "bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": "false",
        "auto.offset.reset": "earliest", "client.rack": rack(follower), "fetch.max.wait.ms": "100"})
    try:
        java.call("consumer.assign", name="near", partitions=[[topic, 0]])
        got = [r["value"] for r in java.call("consumer.poll", name="near", count=COUNT, timeout_ms=60_000)["records"]]
        assert _bytes_out(cluster, follower, topic) > 0
        assert _bytes_out(cluster, leader, topic) == 0
        cluster.stop(follower)
        try:
            expected += [v.decode() for v in _produce(cluster, topic, COUNT, COUNT)]
            got += [r["value"] for r in java.call("consumer.poll", name="near", count=COUNT,
                                                  timeout_ms=60_000)["records"]]
            assert _bytes_out(cluster, leader, topic) > 0
            got += [r["value"] for r in java.call("consumer.poll", name="near", count=1, timeout_ms=500)["records"]]
        finally:
            _restart_in_sync(cluster, follower, topic)
    finally:
        java.call("consumer.close", name="near")
    assert got == expected


# --------------------------------------------------------------- on the wire

def _fetch(cluster, node_id: int, topic: str, version: int, rack_id: str = "") -> dict:
    """One consumer Fetch of partition 0 from offset 0 (max wait 0): the partition's answer."""
    import dataclasses
    from tidelog.protocol.codec import _request_class

    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                 "last_fetched_epoch": -1, "log_start_offset": -1}
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack_id,
            "topics": [{"topic": topic, "partitions": [partition]}]}
    fields = {f.name for f in dataclasses.fields(_request_class(ApiKey.FETCH, version))}

    async def send():
        connection = await KafkaConnection.connect("127.0.0.1", cluster.port(node_id))
        try:
            response = await connection.request(ApiKey.FETCH, {k: v for k, v in body.items() if k in fields},
                                                version=version)
        finally:
            connection.close()
        answer = response.responses[0].partitions[0]
        return {"error_code": int(answer.error_code.value), "records": bytes(answer.records or b""),
                "preferred_read_replica": int(getattr(answer, "preferred_read_replica", -1))}
    return asyncio.run(send())


def test_the_preferred_read_replica_answer_and_its_bounds_on_the_wire(cluster):
    """Fetch v12 from the leader with the follower's rack: the preferred read replica and
    no records. The longest client.rack a Kafka string holds (32767 bytes; compared, never
    kept) matches no broker, so the leader serves; a longer one is a malformed request
    and closes that connection, as Kafka's parser does. A follower serves Fetch v11+,
    refuses v10 (which cannot carry a rack), and the leader serves v10 as before KIP-392.
    Each of these answers was checked against three Kafka 4.4.0 brokers in three racks
    with the same selector."""
    topic = "near-wire"
    leader, follower = _create(cluster, topic)
    _produce(cluster, topic, 0, 10)
    sent_elsewhere = _fetch(cluster, leader, topic, 12, rack(follower))
    assert sent_elsewhere == {"error_code": 0, "records": b"", "preferred_read_replica": follower}
    huge = _fetch(cluster, leader, topic, 12, "r" * 32767)
    assert huge["error_code"] == 0 and huge["preferred_read_replica"] == -1 and huge["records"]
    with pytest.raises(ConnectionError):
        _fetch(cluster, leader, topic, 12, "r" * 32768)
    wait_until(lambda: _fetch(cluster, follower, topic, 12)["records"] == huge["records"],
               what="the follower serves what the leader does")
    assert _fetch(cluster, follower, topic, 10)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _fetch(cluster, leader, topic, 10)["records"] == huge["records"]
    # ListOffsets stays with the leader (Kafka's consumers send it there, KIP-392 or not).
    assert _list_offset(cluster, follower, topic) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    assert _list_offset(cluster, leader, topic) == (ErrorCode.NONE, 10)


def _list_offset(cluster, node_id: int, topic: str) -> tuple[int, int]:
    """A consumer's ListOffsets v7 for the latest offset of partition 0: (error, offset)."""
    async def send():
        connection = await KafkaConnection.connect("127.0.0.1", cluster.port(node_id))
        try:
            response = await connection.request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}, version=7)
        finally:
            connection.close()
        answer = response.topics[0].partitions[0]
        return int(answer.error_code.value), int(answer.offset)
    return asyncio.run(send())
