"""Kafka's command-line tools (their classes in the pinned kafka-tools jar, e.g.
org.apache.kafka.tools.TopicCommand is ``kafka-topics.sh``) against ``tidelog serve``,
unchanged. The tools run in the module's JVM; the verifiable producer and consumer,
which run until stopped, in their own. Output is checked as Kafka prints it."""

import json
import re
import subprocess

import pytest

from tests.interop.conftest import GROUP_SETTINGS
from tests.interop.java_driver import java_command
from tidelog.testing import Broker

GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides=GROUP_SETTINGS) as running:
        yield running


def run(java, tool, *args, expect=0):
    result = java.tool(tool, *args)
    assert result.exit_code == expect, f"{tool} {args} exited {result.exit_code}:\n{result.stdout}\n{result.stderr}"
    return result


def columns(line: str) -> list[str]:
    return line.split()


def produce(java, broker, topic, count, partitions=1, name="tools-producer"):
    java.call("producer.create", name=name, config={"bootstrap.servers": broker.bootstrap})
    results = java.call("producer.send", name=name, topic=topic,
                        records=[{"key": f"k{i}", "value": f"v{i}", "partition": i % partitions}
                                 for i in range(count)])
    assert all("error" not in r for r in results)
    java.call("producer.close", name=name)


def test_kafka_topics(java, broker):
    b = broker.bootstrap
    assert run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-topic",
               "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=86400000"
               ).stdout == "Created topic tools-topic.\n"
    assert "tools-topic" in run(java, "TopicCommand", "--bootstrap-server", b, "--list").lines()
    described = run(java, "TopicCommand", "--bootstrap-server", b, "--describe", "--topic", "tools-topic").lines()
    assert re.fullmatch(r"Topic: tools-topic\tTopicId: [\w-]{22}\tPartitionCount: 3\tReplicationFactor: 1\t"
                        r"Configs: retention.ms=86400000", described[0]), described[0]
    assert [line.strip() for line in described[1:]] == [
        f"Topic: tools-topic\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"
        for p in range(3)]
    run(java, "TopicCommand", "--bootstrap-server", b, "--alter", "--topic", "tools-topic", "--partitions", "5")
    described = run(java, "TopicCommand", "--bootstrap-server", b, "--describe", "--topic", "tools-topic").lines()
    assert "PartitionCount: 5" in described[0] and len(described) == 6
    duplicate = run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-topic", expect=1)
    assert "Topic 'tools-topic' already exists." in duplicate.stdout + duplicate.stderr
    run(java, "TopicCommand", "--bootstrap-server", b, "--delete", "--topic", "tools-topic")
    assert "tools-topic" not in run(java, "TopicCommand", "--bootstrap-server", b, "--list").lines()
    missing = run(java, "TopicCommand", "--bootstrap-server", b, "--describe", "--topic", "tools-topic", expect=1)
    assert "Topic 'tools-topic' does not exist as expected" in missing.stdout + missing.stderr


def test_kafka_configs(java, broker):
    b = broker.bootstrap
    run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-configs")
    topic = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "tools-configs"]
    assert run(java, "ConfigCommand", *topic, "--alter", "--add-config",
               "retention.ms=1000000,cleanup.policy=compact").stdout == \
        "Completed updating config for topic tools-configs.\n"
    assert run(java, "ConfigCommand", *topic, "--describe").lines() == [
        "Dynamic configs for topic tools-configs are:",
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # As Kafka's: log.retention.hours is no synonym while log.retention.ms is unset (tests/conformance/).
        "  retention.ms=1000000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000000}"]
    run(java, "ConfigCommand", *topic, "--alter", "--delete-config", "cleanup.policy")
    assert run(java, "ConfigCommand", *topic, "--describe").lines() == [
        "Dynamic configs for topic tools-configs are:",
        "  retention.ms=1000000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000000}"]
    every = run(java, "ConfigCommand", *topic, "--describe", "--all").lines()
    assert every[0] == "All configs for topic tools-configs are:"
    assert "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}" \
        in every
    bad = run(java, "ConfigCommand", *topic, "--alter", "--add-config", "retention.ms=soon", expect=1)
    assert "Invalid value soon for configuration retention.ms" in bad.stdout + bad.stderr
    brokers = run(java, "ConfigCommand", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1",
                  "--describe", "--all").lines()
    assert brokers[0] == "All configs for broker 1 are:"
    assert "  group.initial.rebalance.delay.ms=0 sensitive=false synonyms={STATIC_BROKER_CONFIG:" \
           "group.initial.rebalance.delay.ms=0, DEFAULT_CONFIG:group.initial.rebalance.delay.ms=3000}" in brokers


def test_kafka_consumer_groups(java, broker):
    b = broker.bootstrap
    run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-groups", "--partitions", "2")
    produce(java, broker, "tools-groups", 20, partitions=2)
    java.call("consumer.create", name="member", config={
        "bootstrap.servers": b, "group.id": "tools-group", "auto.offset.reset": "earliest",
        "enable.auto.commit": "false", "client.id": "tools-client"})
    java.call("consumer.subscribe", name="member", topics=["tools-groups"])
    assert len(java.call("consumer.poll", name="member", count=20, timeout_ms=20_000)["records"]) == 20
    java.call("consumer.commitSync", name="member", offsets=[["tools-groups", 0, 6], ["tools-groups", 1, 10]])

    assert "tools-group" in run(java, GROUPS, "--bootstrap-server", b, "--list").lines()
    states = run(java, GROUPS, "--bootstrap-server", b, "--list", "--state").lines()
    assert columns(states[0]) == ["GROUP", "STATE"] and ["tools-group", "Stable"] in map(columns, states)
    described = run(java, GROUPS, "--bootstrap-server", b, "--describe", "--group", "tools-group").lines()
    assert columns(described[0]) == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                     "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = sorted(columns(line) for line in described[1:])
    assert [row[:6] for row in rows] == [["tools-group", "tools-groups", "0", "6", "10", "4"],
                                         ["tools-group", "tools-groups", "1", "10", "10", "0"]]
    assert all(row[6].startswith("tools-client-") and row[7] == "/127.0.0.1" and row[8] == "tools-client"
               for row in rows)
    state = run(java, GROUPS, "--bootstrap-server", b, "--describe", "--group", "tools-group", "--state").lines()
    assert columns(state[0]) == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert columns(state[1]) == ["tools-group", f"127.0.0.1:{broker.port}", "(1)", "range", "Stable", "1"]
    members = run(java, GROUPS, "--bootstrap-server", b, "--describe", "--group", "tools-group", "--members").lines()
    assert columns(members[0]) == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert columns(members[1])[2:] == ["/127.0.0.1", "tools-client", "2"]

    # Offsets are reset only in an empty group, as Kafka requires.
    busy = run(java, GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", "tools-group", "--topic",
               "tools-groups", "--to-earliest", "--execute")
    assert "Error: Assignments can only be reset if the group 'tools-group' is inactive, but the current state " \
           "is Stable." in busy.stdout
    java.call("consumer.close", name="member")
    reset = run(java, GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", "tools-group", "--topic",
                "tools-groups:1", "--to-offset", "3", "--execute").lines()
    assert columns(reset[0]) == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert columns(reset[1]) == ["tools-group", "tools-groups", "1", "3"]
    described = run(java, GROUPS, "--bootstrap-server", b, "--describe", "--group", "tools-group")
    assert "Consumer group 'tools-group' has no active members." in described.stdout + described.stderr
    rows = sorted(columns(line) for line in described.lines() if line.startswith("tools-group "))
    assert rows == [["tools-group", "tools-groups", "0", "6", "10", "4", "-", "-", "-"],
                    ["tools-group", "tools-groups", "1", "3", "10", "7", "-", "-", "-"]]
    deleted = run(java, GROUPS, "--bootstrap-server", b, "--delete", "--group", "tools-group")
    assert deleted.lines() == ["Deletion of requested consumer groups ('tools-group') was successful."]
    assert "tools-group" not in run(java, GROUPS, "--bootstrap-server", b, "--list").lines()


def test_kafka_transactions(java, broker):
    b = broker.bootstrap
    run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-txn")
    java.call("producer.create", name="txp", config={"bootstrap.servers": b, "transactional.id": "tools-tx"})
    java.call("producer.initTransactions", name="txp")
    java.call("producer.beginTransaction", name="txp")
    java.call("producer.send", name="txp", topic="tools-txn", records=[{"value": "open"}] * 3)
    listed = run(java, "TransactionsCommand", "--bootstrap-server", b, "list").lines()
    assert columns(listed[0]) == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [row] = [columns(line) for line in listed[1:] if line.startswith("tools-tx")]
    producer_id = row[2]
    assert row == ["tools-tx", "1", producer_id, "Ongoing"]
    described = run(java, "TransactionsCommand", "--bootstrap-server", b, "describe", "--transactional-id",
                    "tools-tx").lines()
    assert columns(described[0]) == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                     "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                                     "TransactionDurationMs", "TopicPartitions"]
    values = columns(described[1])
    assert values[:6] == ["1", "tools-tx", producer_id, "0", "Ongoing", "60000"] and values[8] == "tools-txn-0"
    producers = run(java, "TransactionsCommand", "--bootstrap-server", b, "describe-producers", "--topic",
                    "tools-txn", "--partition", "0").lines()
    assert columns(producers[0]) == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                                     "LastTimestamp", "CurrentTransactionStartOffset"]
    values = columns(producers[1])
    assert values[0] == producer_id and values[1] == "0" and values[3] == "2" and values[5] == "0"
    hanging = run(java, "TransactionsCommand", "--bootstrap-server", b, "find-hanging", "--broker-id", "1").lines()
    assert columns(hanging[0])[:3] == ["Topic", "Partition", "ProducerId"] and len(hanging) == 1
    # The operator aborts the open transaction (the producer is not told, as in Kafka).
    aborted = run(java, "TransactionsCommand", "--bootstrap-server", b, "abort", "--topic", "tools-txn",
                  "--partition", "0", "--start-offset", "0")
    assert aborted.stdout.strip() == ""
    producers = run(java, "TransactionsCommand", "--bootstrap-server", b, "describe-producers", "--topic",
                    "tools-txn", "--partition", "0").lines()
    assert columns(producers[1])[5] == "None"
    java.call("producer.close", name="txp", timeout_ms=1000)


def test_kafka_metadata_quorum_features_and_api_versions(java, broker):
    b = broker.bootstrap
    status = dict(line.split(":", 1) for line in run(java, "MetadataQuorumCommand", "--bootstrap-server", b,
                                                      "describe", "--status").lines())
    status = {key: value.strip() for key, value in status.items()}
    assert status["LeaderId"] == "1" and int(status["HighWatermark"]) > 0 and status["MaxFollowerLag"] == "0"
    assert len(status["ClusterId"]) == 22
    # A lone `tidelog serve` has no controller listener: its voter has no endpoint to show.
    assert status["CurrentVoters"] == '[{"id": 1}]' and status["CurrentObservers"] == "[]"
    replication = run(java, "MetadataQuorumCommand", "--bootstrap-server", b, "describe", "--replication").lines()
    assert columns(replication[0]) == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                       "LastCaughtUpTimestamp", "Status"]
    values = columns(replication[1])
    assert values[0] == "1" and values[3] == "0" and values[6] == "Leader" and len(replication) == 2
    versions = run(java, "BrokerApiVersionsCommand", "--bootstrap-server", b).stdout
    assert f"{b} (id: 1 rack: null isFenced: false) -> (" in versions
    assert "Produce(0): 3 to 13 [usable: 13]" in versions and "SaslHandshake(17): UNSUPPORTED" in versions


def test_kafka_leader_election_log_dirs_offsets_and_delete_records(java, broker, tmp_path):
    b = broker.bootstrap
    run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-offsets", "--partitions", "2")
    produce(java, broker, "tools-offsets", 20, partitions=2)
    # Every partition already has its preferred leader: nothing to report, exit 0 (as Kafka).
    assert run(java, "LeaderElectionCommand", "--bootstrap-server", b, "--election-type", "preferred",
               "--all-topic-partitions").stdout == ""
    one = run(java, "LeaderElectionCommand", "--bootstrap-server", b, "--election-type", "preferred",
              "--topic", "tools-offsets", "--partition", "0")
    assert "Valid replica already elected for partitions tools-offsets-0" in one.stdout
    dirs = run(java, "LogDirsCommand", "--bootstrap-server", b, "--describe", "--topic-list", "tools-offsets").lines()
    assert dirs[:2] == ["Querying brokers for log directories information",
                        "Received log directory information from brokers 1"]
    report = json.loads(dirs[2])
    [broker_dirs] = report["brokers"]
    [log_dir] = broker_dirs["logDirs"]
    assert broker_dirs["broker"] == 1 and log_dir["error"] is None and log_dir["logDir"].startswith(broker.data_dir)
    sizes = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(sizes) == ["tools-offsets-0", "tools-offsets-1"]
    assert all(p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False for p in sizes.values())

    assert run(java, "GetOffsetShell", "--bootstrap-server", b, "--topic", "tools-offsets").lines() == [
        "tools-offsets:0:10", "tools-offsets:1:10"]
    offsets_file = tmp_path / "delete.json"
    offsets_file.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tools-offsets", "partition": 0, "offset": 4}]}))
    deleted = run(java, "DeleteRecordsCommand", "--bootstrap-server", b, "--offset-json-file", str(offsets_file))
    assert deleted.lines() == ["Executing records delete operation", "Records delete operation completed:",
                               "partition: tools-offsets-0\tlow_watermark: 4"]
    assert run(java, "GetOffsetShell", "--bootstrap-server", b, "--topic", "tools-offsets", "--time", "-2"
               ).lines() == ["tools-offsets:0:4", "tools-offsets:1:0"]
    assert run(java, "GetOffsetShell", "--bootstrap-server", b, "--topic-partitions", "tools-offsets:1",
               "--time", "-1").lines() == ["tools-offsets:1:10"]


def test_kafka_perf_tests(java, broker):
    b = broker.bootstrap
    produced = run(java, "ProducerPerformance", "--topic", "tools-perf", "--num-records", "3000", "--record-size",
                   "200", "--throughput", "-1", "--command-property", f"bootstrap.servers={b}", "acks=all")
    summary = produced.lines()[-1]
    assert re.match(r"3000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency", summary), \
        produced.stdout
    consumed = run(java, "ConsumerPerformance", "--bootstrap-server", b, "--topic", "tools-perf",
                   "--num-records", "3000", "--timeout", "20000").lines()
    assert consumed[0].startswith("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg")
    fields = [f.strip() for f in consumed[1].split(",")]
    assert fields[4] == "3000" and float(fields[2]) == pytest.approx(3000 * 200 / 1024 / 1024, rel=1e-3)


def test_kafka_verifiable_producer_and_consumer(java, broker, tmp_path):
    """Each in its own JVM (they run until done and exit), JSON events on standard output."""
    b = broker.bootstrap
    run(java, "TopicCommand", "--bootstrap-server", b, "--create", "--topic", "tools-verifiable", "--partitions", "2")
    produced = subprocess.run(java_command("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", b,
                                           "--topic", "tools-verifiable", "--max-messages", "200", "--acks", "-1",
                                           log_file=str(tmp_path / "producer.log")),
                              capture_output=True, text=True, timeout=120)
    assert produced.returncode == 0, produced.stderr
    events = [json.loads(line) for line in produced.stdout.splitlines() if line.startswith("{")]
    names = [e["name"] for e in events]
    assert names[0] == "startup_complete" and names.count("producer_send_success") == 200
    assert "producer_send_error" not in names
    [done] = [e for e in events if e["name"] == "tool_data"]
    assert done["sent"] == 200 and done["acked"] == 200
    consumed = subprocess.run(java_command("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", b,
                                           "--topic", "tools-verifiable", "--group-id", "tools-verifiable-group",
                                           "--max-messages", "200", "--reset-policy", "earliest",
                                           log_file=str(tmp_path / "consumer.log")),
                              capture_output=True, text=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr
    events = [json.loads(line) for line in consumed.stdout.splitlines() if line.startswith("{")]
    records = sum(e["count"] for e in events if e["name"] == "records_consumed")
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert records == 200 and commits and all(c["success"] for c in commits)
    committed = {}
    for commit in commits:
        committed |= {o["partition"]: o["offset"] for o in commit["offsets"]}
    assert sum(committed.values()) == 200
