"""Prometheus ``/metrics`` of a real cluster (controller + 3 broker processes),
scraped over HTTP and checked against what the cluster really holds: the
Metadata the brokers answer, the records produced, the requests sent.

One cluster serves the module; each test works on its own topics and computes
what it expects from the cluster's state at the time, so the order of the
tests does not matter (the kill test restores the broker it killed)."""

import asyncio
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tidelog.cluster import CONTROLLER_ID
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records import build_batch
from tidelog.testing import Cluster, wait_until

# Short enough that a paused follower leaves the ISR in ~2 s and a killed broker is
# fenced in ~6 s; long enough that a pause of a few seconds is not a fencing.
SETTINGS = {"replica.lag.time.max.ms": "1500", "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "3"}


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, overrides=SETTINGS, metrics=True) as running:
        yield running


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, labels): value}`` of one ``/metrics``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metric(cluster, node_id: int, name: str, **labels) -> float | None:
    return scrape(cluster.metrics_url(node_id)).get((name, frozenset(labels.items())))


def metadata(cluster, node_id: int | None = None):
    """Metadata from any broker, or from ``node_id`` alone (while another is paused: a
    request sent to a paused broker waits for ever)."""
    bootstrap = cluster.bootstrap if node_id is None else f"127.0.0.1:{cluster.port(node_id)}"
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def create(cluster, topic: str, partitions: int = 1, rf: int = 3, configs=None, assignment=None) -> None:
    if assignment:     # CreateTopics with replica assignments (confluent-kafka 2.16 refuses to send one)
        async def send():
            connection = await KafkaConnection.connect("127.0.0.1", cluster.brokers[0].port)
            try:
                return await connection.request(ApiKey.CREATE_TOPICS, {"topics": [{
                    "name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
                    "assignments": [{"partition_index": i, "broker_ids": replicas}
                                    for i, replicas in enumerate(assignment)]}],
                    "timeout": 15_000, "validate_only": False})
            finally:
                connection.close()
        assert asyncio.run(send()).topics[0].error_code.value == ErrorCode.NONE
    else:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})])[topic].result(15)
    size = len(assignment[0]) if assignment else rf
    wait_until(lambda: topic in metadata(cluster).topics and all(
        len(p.isrs) == size and p.leader >= 0 for p in metadata(cluster).topics[topic].partitions.values()),
        what=f"{topic} created and in sync")


def leader_of(cluster, topic: str, partition: int = 0) -> int:
    return metadata(cluster).topics[topic].partitions[partition].leader


def produce(cluster, topic: str, count: int, partition: int = 0, acks: str = "all") -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 5})
    failures = []
    for i in range(count):
        producer.produce(topic, b"record-%06d" % i, partition=partition,
                         on_delivery=lambda e, m: failures.append(e) if e else None)
    assert producer.flush(30) == 0 and failures == []


def settles(what: str, actual, expected, timeout_s: float = 20.0):
    """Wait until ``actual()`` equals ``expected()`` (both re-read each time); the last pair
    is in the failure message."""
    seen = []

    def equal():
        seen[:] = [actual(), expected()]
        return seen[0] == seen[1]
    try:
        wait_until(equal, timeout_s, what)
    except AssertionError as e:
        raise AssertionError(f"{e}: metric {seen[0]!r}, reality {seen[1]!r}") from None


# ------------------------------------------------------------------------ tests

def test_partition_and_leader_counts_are_the_metadatas(cluster):
    create(cluster, "counts", partitions=6)
    for broker in cluster.brokers:
        node_id = broker.node_id
        settles(f"broker {node_id}'s partition count",
                lambda: metric(cluster, node_id, "kafka_server_replicamanager_partitioncount"),
                lambda: sum(node_id in p.replicas for t in metadata(cluster).topics.values()
                            for p in t.partitions.values()))
        settles(f"broker {node_id}'s leader count",
                lambda: metric(cluster, node_id, "kafka_server_replicamanager_leadercount"),
                lambda: sum(p.leader == node_id for t in metadata(cluster).topics.values()
                            for p in t.partitions.values()))
        assert metric(cluster, node_id, "kafka_server_kafkaserver_brokerstate") == 3
    # 6 partitions of RF 3 on 3 brokers: every broker hosts all six of "counts".
    for broker in cluster.brokers:
        samples = scrape(cluster.metrics_url(broker.node_id))
        assert [samples.get(("kafka_log_log_logendoffset", frozenset({"topic": "counts", "partition": str(p)}.items())))
                for p in range(6)] == [0.0] * 6
    controller = scrape(cluster.metrics_url(CONTROLLER_ID))
    topics = metadata(cluster).topics
    assert controller[("kafka_controller_kafkacontroller_activecontrollercount", frozenset())] == 1
    assert controller[("kafka_controller_kafkacontroller_globaltopiccount", frozenset())] == len(topics)
    assert controller[("kafka_controller_kafkacontroller_globalpartitioncount", frozenset())] == sum(
        len(t.partitions) for t in topics.values())
    # Only the controller has a controller's metrics; no broker has them.
    assert not any(name.startswith("kafka_controller_") for name, _ in scrape(cluster.metrics_url(1)))
    assert not any(name.startswith("kafka_server_replicamanager") for name, _ in controller)


def test_log_end_offset_and_bytes_in_follow_the_records_produced(cluster):
    create(cluster, "leo")
    leader = leader_of(cluster, "leo")
    tp = {"topic": "leo", "partition": "0"}
    produce(cluster, "leo", 500)
    assert metric(cluster, leader, "kafka_log_log_logendoffset", **tp) == 500
    assert metric(cluster, leader, "kafka_server_brokertopicmetrics_messagesin_total", topic="leo") == 500
    bytes_in = metric(cluster, leader, "kafka_server_brokertopicmetrics_bytesin_total", topic="leo")
    assert bytes_in > 500 * len(b"record-000000")
    for broker in cluster.brokers:             # the followers' copies reach the same end
        settles(f"broker {broker.node_id}'s log end offset of leo-0",
                lambda: metric(cluster, broker.node_id, "kafka_log_log_logendoffset", **tp), lambda: 500.0)
        if broker.node_id != leader:           # they replicate; only the leader counts bytes in
            assert metric(cluster, broker.node_id, "kafka_server_brokertopicmetrics_bytesin_total",
                          topic="leo") is None
    size = metric(cluster, leader, "kafka_log_log_size", **tp)
    assert size > 500 * len(b"record-000000")
    produce(cluster, "leo", 250)
    assert metric(cluster, leader, "kafka_log_log_logendoffset", **tp) == 750
    assert metric(cluster, leader, "kafka_server_brokertopicmetrics_messagesin_total", topic="leo") == 750
    assert metric(cluster, leader, "kafka_server_brokertopicmetrics_bytesin_total", topic="leo") > bytes_in
    assert metric(cluster, leader, "kafka_log_log_size", **tp) > size
    # A consumer reads it all: bytes out on the leader, at least the bytes appended
    # (the record batches go out as they were written).
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "leo-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("leo", 0, 0)])
    got, deadline = 0, time.monotonic() + 30
    while got < 750 and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    consumer.close()
    assert got == 750
    bytes_in = metric(cluster, leader, "kafka_server_brokertopicmetrics_bytesin_total", topic="leo")
    assert metric(cluster, leader, "kafka_server_brokertopicmetrics_bytesout_total", topic="leo") >= bytes_in


def test_the_request_histogram_counts_each_produce_request(cluster):
    create(cluster, "requests")
    leader = leader_of(cluster, "requests")

    def counts():
        samples = scrape(cluster.metrics_url(leader))
        return (samples.get(("kafka_network_requestmetrics_totaltimems_count", frozenset({"request": "Produce"}.items())), 0),
                samples.get(("kafka_network_requestmetrics_requests_total",
                             frozenset({"request": "Produce", "version": "9"}.items())), 0))

    before = counts()

    async def send(requests: int) -> None:
        connection = await KafkaConnection.connect("127.0.0.1", cluster.port(leader))
        try:
            for i in range(requests):
                response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
                    {"name": "requests", "partition_data": [{"index": 0, "records": build_batch([b"%d" % i])}]}]},
                    version=9)
                assert response.responses[0].partition_responses[0].error_code.value == ErrorCode.NONE
        finally:
            connection.close()
    asyncio.run(send(7))
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (7, 7)
    samples = scrape(cluster.metrics_url(leader))
    buckets = sorted(((float(dict(labels)["le"]), v) for (name, labels), v in samples.items()
                      if name == "kafka_network_requestmetrics_totaltimems_bucket"
                      and dict(labels)["request"] == "Produce"))
    assert buckets[-1] == (float("inf"), after[0])
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))      # cumulative
    # The followers fetch from the leader: its Fetch requests are timed as FetchFollower.
    assert samples[("kafka_network_requestmetrics_totaltimems_count", frozenset({"request": "FetchFollower"}.items()))] > 0


def test_a_paused_follower_makes_one_partition_under_replicated_and_isr_counts_move(cluster):
    create(cluster, "urp", configs={"min.insync.replicas": "3"})
    partition = metadata(cluster).topics["urp"].partitions[0]
    leader, follower = partition.leader, next(r for r in partition.replicas if r != partition.leader)
    tp = {"topic": "urp", "partition": "0"}

    def urp_count():
        return sum(p.leader == leader and len(p.isrs) < len(p.replicas)
                   for t in metadata(cluster, leader).topics.values() for p in t.partitions.values())
    settles("no under-replicated partition", lambda: metric(cluster, leader,
            "kafka_server_replicamanager_underreplicatedpartitions"), lambda: 0.0)
    shrinks = metric(cluster, leader, "kafka_server_replicamanager_isrshrinks_total")
    expands = metric(cluster, leader, "kafka_server_replicamanager_isrexpands_total")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 0})
    # The producer learns the leader before the pause: its first Metadata request may
    # go to any bootstrap broker, and one sent to the paused follower waits for ever.
    producer.produce("urp", b"before the pause", partition=0)
    assert producer.flush(10) == 0
    cluster.pause(follower)
    try:
        def shrunk():
            producer.produce("urp", b"while paused", partition=0)     # a follower in sync stays in sync
            producer.poll(0)
            return metric(cluster, leader, "kafka_cluster_partition_underreplicated", **tp) == 1
        wait_until(shrunk, 20, "urp-0 under-replicated on its leader")
        assert producer.flush(10) == 0
        assert metric(cluster, leader, "kafka_server_replicamanager_underreplicatedpartitions") == 1 == urp_count()
        assert metric(cluster, leader, "kafka_cluster_partition_underminisr", **tp) == 1      # ISR 2 < 3
        assert metric(cluster, leader, "kafka_server_replicamanager_underminisrpartitioncount") == 1
        assert metric(cluster, leader, "kafka_server_replicamanager_isrshrinks_total") == shrinks + 1
        assert len(metadata(cluster, leader).topics["urp"].partitions[0].isrs) == 2
    finally:
        cluster.resume(follower)
    settles("urp-0 back in sync", lambda: metric(cluster, leader,
            "kafka_server_replicamanager_underreplicatedpartitions"), lambda: 0.0)
    assert urp_count() == 0
    assert metric(cluster, leader, "kafka_server_replicamanager_isrexpands_total") == expands + 1
    assert metric(cluster, leader, "kafka_cluster_partition_underminisr", **tp) == 0


def test_consumer_group_lag_on_the_coordinator(cluster):
    create(cluster, "lag")
    produce(cluster, "lag", 100)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "metrics-lag",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("lag", 0, 60)], asynchronous=False)
    consumer.close()
    labels = {"consumergroup": "metrics-lag", "topic": "lag", "partition": "0"}

    def seen():
        return {b.node_id: (metric(cluster, b.node_id, "kafka_consumergroup_current_offset", **labels),
                            metric(cluster, b.node_id, "kafka_consumergroup_lag", **labels))
                for b in cluster.brokers}
    wait_until(lambda: sum(v != (None, None) for v in seen().values()) == 1, 20, "the coordinator's offsets")
    (coordinator,) = [b for b, v in seen().items() if v != (None, None)]
    # Against the coordinator's copy of lag-0: a follower's high watermark trails the
    # leader's by up to one fetch round (replica.fetch.wait.max.ms).
    settles("the committed offset and lag", lambda: seen()[coordinator], lambda: (60.0, 40.0))
    assert metric(cluster, coordinator, "kafka_coordinator_group_groupmetadatamanager_numoffsets") >= 1
    produce(cluster, "lag", 5)
    settles("the lag after 5 more records",
            lambda: metric(cluster, coordinator, "kafka_consumergroup_lag", **labels), lambda: 45.0)


def test_a_killed_broker_is_fenced_and_its_only_replicas_go_offline(cluster):
    """Last: it kills broker 3 and starts it again."""
    create(cluster, "solo", assignment=[[3], [3]])
    create(cluster, "spread", partitions=3)
    controller = cluster.metrics_url(CONTROLLER_ID)
    assert scrape(controller)[("kafka_controller_kafkacontroller_activebrokercount", frozenset())] == 3
    assert scrape(controller)[("kafka_controller_kafkacontroller_offlinepartitionscount", frozenset())] == 0
    cluster.kill(3)
    try:
        wait_until(lambda: scrape(controller)[("kafka_controller_kafkacontroller_fencedbrokercount", frozenset())] == 1,
                   20, "broker 3 fenced")
        samples = scrape(controller)
        assert samples[("kafka_controller_kafkacontroller_activebrokercount", frozenset())] == 2
        topics = metadata(cluster).topics
        assert samples[("kafka_controller_kafkacontroller_offlinepartitionscount", frozenset())] == sum(
            p.leader < 0 for t in topics.values() for p in t.partitions.values()) >= 2
        # Every partition broker 3 was in lost it from its ISR: the survivors' gauges say so.
        for node_id in (1, 2):
            settles(f"broker {node_id}'s under-replicated partitions",
                    lambda: metric(cluster, node_id, "kafka_server_replicamanager_underreplicatedpartitions"),
                    lambda: sum(p.leader == node_id and len(p.isrs) < len(p.replicas)
                                for t in metadata(cluster).topics.values() for p in t.partitions.values()))
        assert sum(metric(cluster, n, "kafka_server_replicamanager_underreplicatedpartitions") for n in (1, 2)) > 0
    finally:
        cluster.start_node(3)
    wait_until(lambda: scrape(controller)[("kafka_controller_kafkacontroller_fencedbrokercount", frozenset())] == 0,
               30, "broker 3 unfenced")
    wait_until(lambda: scrape(controller)[("kafka_controller_kafkacontroller_offlinepartitionscount", frozenset())] == 0,
               30, "solo back online")
    # Partitions with one replica cannot move away in a controlled shutdown: delete them,
    # so the cluster stops at once at the end of the module.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["solo"])["solo"].result(15)
    wait_until(lambda: scrape(controller)[("kafka_controller_kafkacontroller_globaltopiccount", frozenset())]
               == len(metadata(cluster).topics), 20, "solo deleted")


def test_cluster_up_serves_and_prints_metrics_urls(tmp_path):
    directory = str(tmp_path / "cluster")
    up = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "up", "--dir", directory, "-n", "1",
                         "--base-port", "0"], capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        urls = dict(re.findall(r"metrics: (\S+) +(http://\S+/metrics)", up.stdout))
        assert set(urls) == {"broker-1", "controller"}, up.stdout
        assert scrape(urls["broker-1"])[("kafka_server_kafkaserver_brokerstate", frozenset())] == 3
        assert scrape(urls["controller"])[("kafka_controller_kafkacontroller_activebrokercount", frozenset())] == 1
        status = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "status", "--dir", directory],
                                capture_output=True, text=True, timeout=60)
        assert urls["broker-1"] in status.stdout and urls["controller"] in status.stdout
    finally:
        subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "down", "--dir", directory],
                       capture_output=True, timeout=120)
