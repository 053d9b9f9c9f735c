"""Replication throttles (KIP-73) on a real cluster of three ``tidelog serve`` brokers:
a partition copied to a new replica under a throttle, set by Kafka's own kafka-configs
and by ``tidelog reassign execute --throttle``; clients keep producing meanwhile; the
copy completes; ``verify`` removes the throttles; bad values are refused and change
nothing. Behaviour is asserted (partitions left out of fetches, per /metrics; the
move completes), never timings."""

import json
import subprocess
import sys
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource as DescribedResource
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_controller_quorum import FAST
from tests.interop.java_driver import JavaDriver, missing_tools
from tests.interop.line_driver import open_driver
from tidelog.testing import Cluster, wait_until

VALUE = b"x" * 1000
RECORDS = 2000                    # about 2 MB to copy


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, overrides=FAST, metrics=True) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def java():
    if missing_tools() is not None:
        pytest.skip(f"Java tools unavailable: {missing_tools()}")
    with open_driver(JavaDriver()) as driver:
        yield driver


def _metric(cluster, node_id: int, name: str) -> float:
    with urllib.request.urlopen(cluster.metrics_url(node_id), timeout=10) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


def _filled_topic(cluster, admin, topic: str, replicas: list[int]) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                  replica_assignments={0: replicas})])
    wait_until(lambda: topic in admin.list_topics(), 20, f"{topic} in the metadata")
    _produce(cluster, topic, RECORDS)


def _produce(cluster, topic: str, count: int) -> None:
    """acks=1 (the leader alone): every record acknowledged, none failed."""
    failed = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 5})
    for _ in range(count):
        producer.produce(topic, VALUE, partition=0, on_delivery=lambda err, msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0 and failed == []


def _configs(cluster, kind: str, name: str) -> dict[str, str]:
    """The throttle settings DescribeConfigs gives a resource a value for (confluent-kafka)."""
    resource = DescribedResource(kind, name)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})      # kept alive until the answer
    entries = client.describe_configs([resource])[resource].result(20)
    return {key: e.value for key, e in entries.items()
            if "throttled" in key and e.value not in (None, "", str((1 << 63) - 1))}


def _moving(admin, topic) -> bool:
    return TopicPartition(topic, 0) in admin.list_partition_reassignments()


def _config(java, *args, expect=0):
    result = java.tool("ConfigCommand", *args)
    assert result.exit_code == expect, f"{args} exited {result.exit_code}:\n{result.stdout}\n{result.stderr}"
    return result


def test_kafka_configs_leader_throttle_holds_back_a_new_replica_while_producers_go_on(cluster, admin, java):
    b = ["--bootstrap-server", cluster.bootstrap]
    _filled_topic(cluster, admin, "lead", [1])
    _config(java, *b, "--entity-type", "brokers", "--entity-name", "1", "--alter",
            "--add-config", "leader.replication.throttled.rate=300000")
    _config(java, *b, "--entity-type", "topics", "--entity-name", "lead", "--alter",
            "--add-config", "leader.replication.throttled.replicas=0:1")
    described = _config(java, *b, "--entity-type", "brokers", "--entity-name", "1", "--describe").stdout
    assert "leader.replication.throttled.rate=300000 sensitive=false" in described, described
    assert "DYNAMIC_BROKER_CONFIG:leader.replication.throttled.rate=300000" in described, described
    assert _configs(cluster, "topic", "lead") == {"leader.replication.throttled.replicas": "0:1"}

    assert admin.alter_partition_reassignments({TopicPartition("lead", 0): [1, 2]}) == {
        TopicPartition("lead", 0): None}
    # The leader leaves the partition out of broker 2's fetches (its replica is not in the ISR) ...
    wait_until(lambda: _metric(cluster, 1, "kafka_server_leaderreplication_throttled_partitions_total") > 0, 60,
               "broker 1 to hold lead-0 back from its new follower")
    assert _moving(admin, "lead")
    # ... while clients keep producing to the leader (acks=1).
    _produce(cluster, "lead", 200)
    assert _metric(cluster, 1, "kafka_server_leaderreplication_byte_rate") > 0
    # The new replica catches up under the throttle, and the move completes.
    wait_until(lambda: not _moving(admin, "lead"), 120, "lead-0's move to complete")

    _config(java, *b, "--entity-type", "brokers", "--entity-name", "1", "--alter",
            "--delete-config", "leader.replication.throttled.rate")
    _config(java, *b, "--entity-type", "topics", "--entity-name", "lead", "--alter",
            "--delete-config", "leader.replication.throttled.replicas")
    assert _configs(cluster, "broker", "1") == {}
    assert _configs(cluster, "topic", "lead") == {}


def _tidelog(cluster, verb, *args):
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "reassign", verb, "-b", cluster.bootstrap,
                             *args], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def test_tidelog_reassign_throttle_sets_the_throttles_and_verify_removes_them(cluster, admin, tmp_path):
    _filled_topic(cluster, admin, "moved", [2])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moved", "partition": 0,
                                                              "replicas": [2, 3]}]}))
    status, out, err = _tidelog(cluster, "execute", "--reassignment-json-file", str(plan), "--throttle", "300000")
    assert status == 0, out + err
    assert "Warning: You must run --verify periodically" in out and \
        "The inter-broker throttle limit was set to 300000 B/s" in out, out
    # Kafka's tool's lists: the current replicas lead the copy, the added one follows.
    assert _configs(cluster, "topic", "moved") == {
        "leader.replication.throttled.replicas": "0:2", "follower.replication.throttled.replicas": "0:3"}
    for broker in ("2", "3"):
        assert _configs(cluster, "broker", broker) == {
            "leader.replication.throttled.rate": "300000", "follower.replication.throttled.rate": "300000"}
    # The new follower leaves the partition out of its own fetches while over its rate.
    wait_until(lambda: _metric(cluster, 3, "kafka_server_followerreplication_throttled_partitions_total") > 0, 60,
               "broker 3 to hold its fetches of moved-0 back")
    _produce(cluster, "moved", 200)

    def verified():
        status, out, _ = _tidelog(cluster, "verify", "--reassignment-json-file", str(plan))
        return status == 0 and "Clearing broker-level throttles on brokers 1,2,3" in out \
            and "Clearing topic-level throttles on topic moved" in out
    wait_until(verified, 120, "the move to complete and verify to clear the throttles")
    assert _configs(cluster, "topic", "moved") == {}
    for broker in ("1", "2", "3"):
        assert _configs(cluster, "broker", broker) == {}


def test_bad_throttle_values_are_refused_and_change_nothing(cluster, admin, java):
    b = ["--bootstrap-server", cluster.bootstrap]
    admin.create_topics([NewTopic("bad", 1, 1)])
    wait_until(lambda: "bad" in admin.list_topics(), 20, "bad in the metadata")
    refused = _config(java, *b, "--entity-type", "brokers", "--entity-default", "--alter",
                      "--add-config", "follower.replication.throttled.rate=-1", expect=1)
    assert "follower.replication.throttled.rate" in refused.stdout + refused.stderr
    for value in ("0-1", "0:1,x", "*,0:1"):
        response = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "bad", configs={
            "leader.replication.throttled.replicas": value})])
        result = next(iter(next(iter(response.values())).values()))
        assert "InvalidConfig" in type(result).__name__ + repr(result), (value, response)     # INVALID_CONFIG
    assert _configs(cluster, "topic", "bad") == {}
    assert _configs(cluster, "broker", "1") == {}


KAFKA_REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def test_kafkas_kafka_reassign_partitions_throttle_and_verify(cluster, admin, java, tmp_path):
    b = ["--bootstrap-server", cluster.bootstrap]
    _filled_topic(cluster, admin, "tooled", [3])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "tooled", "partition": 0,
                                                              "replicas": [3, 1], "log_dirs": ["any", "any"]}]}))
    executed = java.tool(KAFKA_REASSIGN, *b, "--execute", "--reassignment-json-file", str(plan),
                         "--throttle", "300000")
    assert executed.exit_code == 0, executed.stdout + executed.stderr
    assert "The inter-broker throttle limit was set to 300000 B/s" in executed.stdout, executed.stdout
    assert _configs(cluster, "topic", "tooled") == {
        "leader.replication.throttled.replicas": "0:3", "follower.replication.throttled.replicas": "0:1"}
    assert _configs(cluster, "broker", "1") == {
        "leader.replication.throttled.rate": "300000", "follower.replication.throttled.rate": "300000"}

    def verified():
        result = java.tool(KAFKA_REASSIGN, *b, "--verify", "--reassignment-json-file", str(plan))
        return result.exit_code == 0 and "Clearing topic-level throttles on topic tooled" in result.stdout
    wait_until(verified, 120, "kafka-reassign-partitions --verify to clear the throttles")
    assert _configs(cluster, "topic", "tooled") == {}
    for broker in ("1", "3"):
        assert _configs(cluster, "broker", broker) == {}
