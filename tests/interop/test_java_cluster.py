"""Kafka's Java client and tools against a 3-broker ``tidelog cluster up``: plaintext,
then ``--secure`` (SASL_SSL with SCRAM-SHA-512, a PEM truststore, ACLs), where the
settings files the cluster writes are given to Kafka's tools unchanged."""

import json
import re
import subprocess
import sys
import time

import pytest

from tests.interop.conftest import GROUP_SETTINGS
from tidelog.broker.config import parse_properties
from tidelog.testing import wait_until


def tidelog_cluster(directory, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args, "--dir", str(directory)],
                          capture_output=True, text=True, timeout=timeout)


class UpCluster:
    def __init__(self, directory, secure: bool):
        self.directory = directory
        overrides = [f"{k}={v}" for k, v in {**GROUP_SETTINGS, "broker.session.timeout.ms": "3000",
                                            "broker.heartbeat.interval.ms": "500"}.items()]
        args = ["up", "-n", "3", "--base-port", "0", "--no-ui", "--no-metrics"]
        for override in overrides:
            args += ["--override", override]
        up = tidelog_cluster(directory, *args, *(["--secure"] if secure else []))
        if up.returncode != 0:
            tidelog_cluster(directory, "down")
            raise AssertionError(f"cluster up failed:\n{up.stdout}\n{up.stderr}")
        layout = json.loads((directory / "cluster.json").read_text())
        self.ports = {n["node_id"]: n["port"] for n in layout["nodes"] if n["role"] == "broker"}
        self.bootstrap = ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def down(self):
        tidelog_cluster(self.directory, "down")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    cluster = UpCluster(tmp_path_factory.mktemp("java-plain"), secure=False)
    try:
        yield cluster
    finally:
        cluster.down()


def test_acks_all_and_a_group_survive_a_broker_restart_and_preferred_election(java, plain):
    b = plain.bootstrap
    assert java.tool("TopicCommand", "--bootstrap-server", b, "--create", "--topic", "java-rf3", "--partitions",
                     "3", "--replication-factor", "3", "--config", "min.insync.replicas=2").exit_code == 0
    described = java.tool("TopicCommand", "--bootstrap-server", b, "--describe", "--topic", "java-rf3").lines()
    assert "ReplicationFactor: 3" in described[0] and "min.insync.replicas=2" in described[0]
    rows = [dict(field.split(": ") for field in line.strip().split("\t")) for line in described[1:]]
    assert all(sorted(r["Replicas"].split(",")) == ["1", "2", "3"] and sorted(r["Isr"].split(",")) == ["1", "2", "3"]
               for r in rows)
    leaders = {int(r["Partition"]): int(r["Leader"]) for r in rows}
    assert sorted(leaders.values()) == [1, 2, 3]    # preferred leaders spread over the brokers

    java.call("producer.create", name="acks-all", config={"bootstrap.servers": b, "acks": "all",
                                                          "enable.idempotence": "true", "linger.ms": "5"})
    sent = java.call("producer.send", name="acks-all", topic="java-rf3",
                     records=[{"key": f"k{i}", "value": f"{i}", "partition": i % 3} for i in range(300)])
    assert all("error" not in r for r in sent)
    consumer = {"bootstrap.servers": b, "group.id": "java-rf3-group", "auto.offset.reset": "earliest",
                "enable.auto.commit": "false", "group.protocol": "consumer"}
    java.call("consumer.create", name="g1", config=consumer)
    java.call("consumer.create", name="g2", config=consumer)
    java.call("consumer.subscribe", name="g1", topics=["java-rf3"])
    java.call("consumer.subscribe", name="g2", topics=["java-rf3"])
    got = java.call("consumer.poll", names=["g1", "g2"], count=300, timeout_ms=30_000)
    assert sorted(int(r["value"]) for r in got["records"]["g1"] + got["records"]["g2"]) == list(range(300))
    java.call("consumer.commitSync", name="g1")
    java.call("consumer.commitSync", name="g2")

    # The leader of partition 0 stops: acks=all writes go on (min.insync.replicas=2 of 3).
    stopped = leaders[0]
    assert tidelog_cluster(plain.directory, "kill", str(stopped)).returncode == 0
    sent = java.call("producer.send", name="acks-all", topic="java-rf3", timeout_ms=60_000,
                     records=[{"value": f"{i}", "partition": i % 3} for i in range(300, 330)])
    assert all("error" not in r for r in sent), sent
    # Every new record is read, once: when the killed broker was the group's coordinator
    # the new one loads the KIP-848 group from __consumer_offsets (as Kafka 4 does), and the
    # members go on with their partitions and positions.
    values: list[int] = []
    deadline = time.monotonic() + 30
    while set(values) != set(range(300, 330)) and time.monotonic() < deadline:
        got = java.call("consumer.poll", names=["g1", "g2"], count=30 - len(set(values)), timeout_ms=10_000)
        values += [int(r["value"]) for r in got["records"]["g1"] + got["records"]["g2"]]
    assert sorted(values) == list(range(300, 330)), sorted(values)
    assert tidelog_cluster(plain.directory, "restart", str(stopped)).returncode == 0
    java.call("admin.create", name="plain-admin", config={"bootstrap.servers": b})
    wait_until(lambda: all(len(p["isr"]) == 3 for p in java.call(
        "admin.describeTopics", admin="plain-admin", topics=["java-rf3"])["java-rf3"]["partitions"]),
        60, "the restarted broker back in every ISR")
    moved = java.call("admin.describeTopics", admin="plain-admin", topics=["java-rf3"])["java-rf3"]["partitions"][0]
    assert moved["leader"] != stopped
    election = java.tool("LeaderElectionCommand", "--bootstrap-server", b, "--election-type", "preferred",
                         "--all-topic-partitions")
    assert election.exit_code == 0
    prefix = "Successfully completed leader election (PREFERRED) for partitions "
    assert election.stdout.startswith(prefix), election.stdout
    assert "java-rf3-0" in election.stdout.strip()[len(prefix):].split(", ")
    # The election is answered once the controller committed it; a broker's Metadata shows it
    # once that broker's metadata has it (on Kafka as well): a moment later.
    wait_until(lambda: java.call("admin.describeTopics", admin="plain-admin", topics=["java-rf3"]
                                 )["java-rf3"]["partitions"][0]["leader"] == stopped, 30,
               "the preferred leader back in front")
    for name in ("g1", "g2"):
        java.call("consumer.close", name=name)
    java.call("producer.close", name="acks-all")
    lag = java.tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b,
                    "--describe", "--group", "java-rf3-group").lines()
    rows = sorted(line.split()[:6] for line in lag if line.startswith("java-rf3-group "))
    # Committed after the first 300 records; 30 more were read, not committed.
    assert [row[2:] for row in rows] == [[p, "100", "110", "10"] for p in ("0", "1", "2")], lag
    java.call("admin.close", name="plain-admin")


def test_metadata_quorum_tool_on_a_cluster(java, plain):
    status = {}
    for line in java.tool("MetadataQuorumCommand", "--bootstrap-server", plain.bootstrap, "describe",
                          "--status").lines():
        key, _, value = line.partition(":")
        status[key] = value.strip()
    assert status["LeaderId"] == "1000"
    # `cluster up` formats a dynamic quorum (KIP-853): the voter's directory id is shown.
    assert re.fullmatch(r'\[\{"id": 1000, "directoryId": "[A-Za-z0-9_-]{22}", '
                        r'"endpoints": \["CONTROLLER://127\.0\.0\.1:\d+"\]\}\]', status["CurrentVoters"]), status
    assert [o["id"] for o in json.loads(status["CurrentObservers"])] == [1, 2, 3]
    replication = java.tool("MetadataQuorumCommand", "--bootstrap-server", plain.bootstrap, "describe",
                            "--replication").lines()
    rows = [line.split() for line in replication[1:]]
    assert [(r[0], r[-1]) for r in rows] == [("1000", "Leader"), ("1", "Observer"), ("2", "Observer"),
                                             ("3", "Observer")]


# ------------------------------------------------------------------ --secure


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    cluster = UpCluster(tmp_path_factory.mktemp("java-secure"), secure=True)
    security = cluster.directory / "security"
    # The Java client's spelling (client.properties / admin.properties are librdkafka's).
    cluster.client_file = str(security / "client-java.properties")
    cluster.admin_file = str(security / "admin-java.properties")
    cluster.client = parse_properties((security / "client-java.properties").read_text())
    cluster.admin = parse_properties((security / "admin-java.properties").read_text())
    try:
        yield cluster
    finally:
        cluster.down()


def test_java_client_over_sasl_ssl_scram_with_a_pem_truststore(java, secure):
    assert secure.client["ssl.truststore.type"] == "PEM" and secure.client["sasl.mechanism"] == "SCRAM-SHA-512"
    settings = {"bootstrap.servers": secure.bootstrap, **secure.client}
    java.call("admin.create", name="client-admin", config=settings)
    assert java.call("admin.createTopics", admin="client-admin", topics=[
        {"name": "java-secure", "partitions": 2, "replication_factor": 3}]) == {"java-secure": "created"}
    java.call("producer.create", name="sp", config={**settings, "acks": "all", "compression.type": "zstd"})
    sent = java.call("producer.send", name="sp", topic="java-secure",
                     records=[{"key": f"{i}", "value": f"secret-{i}", "headers": [["h", "v"]]} for i in range(50)])
    assert all("error" not in r for r in sent)
    java.call("producer.close", name="sp")
    java.call("consumer.create", name="sc", config={**settings, "group.id": "java-secure-group",
                                                    "auto.offset.reset": "earliest", "enable.auto.commit": "false"})
    java.call("consumer.subscribe", name="sc", topics=["java-secure"])
    got = java.call("consumer.poll", name="sc", count=50, timeout_ms=30_000)["records"]
    assert sorted(r["value"] for r in got) == sorted(f"secret-{i}" for i in range(50))
    assert all(r["headers"] == [["h", "v"]] for r in got)
    java.call("consumer.commitSync", name="sc")
    java.call("consumer.close", name="sc")
    # The client user has no ACL on the cluster resource: Kafka's refusal, at once.
    refused = java.call("admin.createAcls", admin="client-admin", acls=[{
        "resource_type": "TOPIC", "resource_name": "java-secure", "principal": "User:someone",
        "operation": "READ"}])
    assert refused["(pattern=ResourcePattern(resourceType=TOPIC, name=java-secure, patternType=LITERAL), "
                   "entry=(principal=User:someone, host=*, operation=READ, permissionType=ALLOW))"]["error"] == \
        "ClusterAuthorizationException"
    java.call("admin.close", name="client-admin")

    # Kafka's tools take the cluster's client-java.properties as it is.
    groups = java.tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                       secure.bootstrap, "--command-config", secure.client_file, "--describe", "--group",
                       "java-secure-group")
    assert groups.exit_code == 0, groups.stderr
    rows = sorted(line.split()[:6] for line in groups.lines() if line.startswith("java-secure-group "))
    assert [r[2] for r in rows] == ["0", "1"] and sum(int(r[3]) for r in rows) == 50 and all(r[5] == "0" for r in rows)
    topics = java.tool("TopicCommand", "--bootstrap-server", secure.bootstrap, "--command-config", secure.client_file,
                       "--list")
    assert "java-secure" in topics.lines()


def test_kafka_acls_and_admin_acl_calls_as_the_super_user(java, secure):
    admin = ["--bootstrap-server", secure.bootstrap, "--command-config", secure.admin_file]
    added = java.tool("AclCommand", *admin, "--add", "--allow-principal", "User:reader", "--operation", "Read",
                      "--operation", "Describe", "--topic", "java-acl-topic")
    assert added.exit_code == 0, added.stdout + added.stderr
    listed = java.tool("AclCommand", *admin, "--list", "--topic", "java-acl-topic")
    assert listed.exit_code == 0
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=java-acl-topic, " \
           "patternType=LITERAL)`:" in listed.stdout
    assert "(principal=User:reader, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert "(principal=User:reader, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed.stdout

    java.call("admin.create", name="super", config={"bootstrap.servers": secure.bootstrap, **secure.admin})
    created = java.call("admin.createAcls", admin="super", acls=[{
        "resource_type": "GROUP", "resource_name": "java-acl-", "pattern_type": "PREFIXED",
        "principal": "User:reader", "operation": "READ"}])
    assert list(created.values()) == ["created"]
    acls = java.call("admin.describeAcls", admin="super", principal="User:reader")
    assert sorted((a["resource_type"], a["resource_name"], a["pattern_type"], a["operation"]) for a in acls) == [
        ("GROUP", "java-acl-", "PREFIXED", "READ"), ("TOPIC", "java-acl-topic", "LITERAL", "DESCRIBE"),
        ("TOPIC", "java-acl-topic", "LITERAL", "READ")]
    deleted = java.call("admin.deleteAcls", admin="super", principal="User:reader", resource_type="TOPIC")
    assert sorted(a["operation"] for a in deleted) == ["DESCRIBE", "READ"]
    assert [a["resource_type"] for a in java.call("admin.describeAcls", admin="super", principal="User:reader")] \
        == ["GROUP"]
    quorum = java.call("admin.describeMetadataQuorum", admin="super")
    assert quorum["leader_id"] == 1000 and [o["replica_id"] for o in quorum["observers"]] == [1, 2, 3]
    java.call("admin.close", name="super")
