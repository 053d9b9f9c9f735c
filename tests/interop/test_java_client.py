"""Kafka's Java client (kafka-clients, pinned in interop/java/pom.xml) against ``tidelog serve``:
the producer (acks, codecs, headers, idempotence, transactions), the consumer (classic and
KIP-848 groups, regex subscriptions, commits, seek, pause/resume, read_committed) and the
AdminClient, through one JVM for the module (tests/interop/java_driver.py)."""

import glob
import json
import os
import re
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.interop.conftest import GROUP_SETTINGS
from tests.interop.java_driver import JavaError
from tidelog.testing import Broker


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={**GROUP_SETTINGS, "metrics.port": "0"}) as running:
        yield running


def requests_answered(broker) -> dict[tuple[str, int], float]:
    """(request name, version) -> how many the broker answered (its Prometheus endpoint)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    return {(s.labels["request"], int(s.labels["version"])): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "kafka_network_requestmetrics_requests_total"}


def sent_since(before: dict, after: dict, request: str) -> dict[int, float]:
    """{version: count} of ``request`` answered between two ``requests_answered``."""
    return {version: count - before.get((name, version), 0) for (name, version), count in after.items()
            if name == request and count > before.get((name, version), 0)}


@pytest.fixture(scope="module")
def admin(java, broker):
    java.call("admin.create", name="admin", config={"bootstrap.servers": broker.bootstrap})
    yield java
    java.call("admin.close", name="admin")


def create_topic(java, name, partitions=1, configs=None):
    topic = {"name": name, "partitions": partitions, "replication_factor": 1}
    if configs:
        topic["configs"] = configs
    assert java.call("admin.createTopics", topics=[topic]) == {name: "created"}


def consumer_config(broker, group="unused", **extra):
    return {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": "false", "fetch.max.wait.ms": "100", **extra}


def read_back(java, broker, partitions, count, name="reader", **extra):
    """Every record of ``partitions`` ([topic, p] pairs) through an assigned consumer."""
    java.call("consumer.create", name=name, config=consumer_config(broker, **extra))
    try:
        java.call("consumer.assign", name=name, partitions=partitions)
        got = java.call("consumer.poll", name=name, count=count, timeout_ms=20_000)["records"]
        # Nothing more arrives afterwards.
        got += java.call("consumer.poll", name=name, count=1, timeout_ms=300)["records"]
        return got
    finally:
        java.call("consumer.close", name=name)


# ------------------------------------------------------------------ producer


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_acks_setting_and_codec_round_trips_keys_values_and_headers(java, admin, broker, codec):
    topic = f"java-codec-{codec}"
    create_topic(java, topic, partitions=2)
    sent = []
    for acks in ("0", "1", "all"):
        name = f"p-{codec}-{acks}"
        java.call("producer.create", name=name, config={
            "bootstrap.servers": broker.bootstrap, "acks": acks, "compression.type": codec, "linger.ms": "5",
            "enable.idempotence": "true" if acks == "all" else "false"})
        records = [{"key": None if i % 7 == 0 else f"{acks}-k{i}", "value": f"{acks}-v{i}-" + "x" * (i % 50),
                    "headers": [["n", str(i)], ["acks", acks]] if i % 3 else [], "partition": i % 2}
                   for i in range(40)]
        results = java.call("producer.send", name=name, topic=topic, records=records)
        assert all("error" not in r for r in results), results
        if acks == "0":
            assert {r["offset"] for r in results} == {-1}    # acks=0: the producer learns no offset
        else:
            for partition in (0, 1):
                offsets = [r["offset"] for r in results if r["partition"] == partition]
                assert offsets == list(range(offsets[0], offsets[0] + 20))
        java.call("producer.close", name=name)
        sent += records
    got = read_back(java, broker, [[topic, 0], [topic, 1]], len(sent))
    for partition in (0, 1):
        mine = [r for r in got if r["partition"] == partition]
        assert [r["offset"] for r in mine] == list(range(60))
        expected = [r for r in sent if r["partition"] == partition]
        assert [(r["key"], r["value"], r["headers"]) for r in mine] == \
               [(r["key"], r["value"], r["headers"]) for r in expected]


def test_idempotent_producer_writes_each_record_once_in_order(java, admin, broker):
    topic = "java-idempotent"
    create_topic(java, topic, partitions=2)
    java.call("producer.create", name="idem", config={
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": "true", "acks": "all",
        "max.in.flight.requests.per.connection": "5", "linger.ms": "0", "batch.size": "512"})
    records = [{"value": f"{i}", "partition": i % 2} for i in range(2000)]
    results = java.call("producer.send", name="idem", topic=topic, records=records)
    assert all("error" not in r for r in results)
    java.call("producer.close", name="idem")
    got = read_back(java, broker, [[topic, 0], [topic, 1]], 2000)
    for partition in (0, 1):
        assert [int(r["value"]) for r in got if r["partition"] == partition] == list(range(partition, 2000, 2))
    # The partition leader knows the producer and its last sequence number.
    states = java.call("admin.describeProducers", partitions=[[topic, 0], [topic, 1]])
    for partition in (0, 1):
        [state] = states[f"{topic}-{partition}"]
        assert state["last_sequence"] == 999 and state["producer_epoch"] == 0
        assert state["current_transaction_start_offset"] is None


# ------------------------------------------------------------------ transactions


def transactional(java, broker, name, transactional_id):
    java.call("producer.create", name=name, config={"bootstrap.servers": broker.bootstrap,
                                                     "transactional.id": transactional_id,
                                                     "transaction.timeout.ms": "30000"})
    java.call("producer.initTransactions", name=name)


def test_transactions_commit_and_abort_and_read_committed_sees_only_committed(java, admin, broker):
    topic = "java-txn"
    create_topic(java, topic, partitions=2)
    transactional(java, broker, "tx", "java-tx-1")
    java.call("producer.beginTransaction", name="tx")
    java.call("producer.send", name="tx", topic=topic, records=[{"value": f"c1-{i}", "partition": i % 2}
                                                                 for i in range(10)])
    java.call("producer.commitTransaction", name="tx")
    java.call("producer.beginTransaction", name="tx")
    java.call("producer.send", name="tx", topic=topic, records=[{"value": f"ab-{i}", "partition": i % 2}
                                                                 for i in range(6)])
    java.call("producer.abortTransaction", name="tx")
    java.call("producer.beginTransaction", name="tx")
    java.call("producer.send", name="tx", topic=topic, records=[{"value": f"c2-{i}", "partition": i % 2}
                                                                 for i in range(10)])
    # An open transaction: the coordinator lists it, the last stable offset stays behind.
    [listing] = [t for t in java.call("admin.listTransactions") if t["transactional_id"] == "java-tx-1"]
    assert listing["state"] == "ONGOING"
    described = java.call("admin.describeTransactions", ids=["java-tx-1"])["java-tx-1"]
    assert described["state"] == "ONGOING" and described["partitions"] == [f"{topic}-0", f"{topic}-1"]
    assert described["producer_id"] == listing["producer_id"] and described["timeout_ms"] == 30000
    partitions = [[topic, 0], [topic, 1]]
    committed_end = java.call("admin.listOffsets", partitions=partitions, spec="latest", isolation="READ_COMMITTED")
    uncommitted_end = java.call("admin.listOffsets", partitions=partitions, spec="latest")
    for p in (0, 1):
        # 5 committed + marker, 3 aborted + marker: the open transaction starts at 10.
        assert committed_end[f"{topic}-{p}"]["offset"] == 10
        assert uncommitted_end[f"{topic}-{p}"]["offset"] == 15
    java.call("producer.commitTransaction", name="tx")
    java.call("producer.close", name="tx")
    committed = read_back(java, broker, partitions, 20, **{"isolation.level": "read_committed"})
    assert sorted(r["value"] for r in committed) == sorted([f"c1-{i}" for i in range(10)] +
                                                           [f"c2-{i}" for i in range(10)])
    everything = read_back(java, broker, partitions, 26, **{"isolation.level": "read_uncommitted"})
    assert len(everything) == 26 and {r["value"][:2] for r in everything} == {"c1", "ab", "c2"}
    assert java.call("admin.describeTransactions", ids=["java-tx-1"])["java-tx-1"]["state"] in (
        "COMPLETE_COMMIT", "PREPARE_COMMIT")


def transaction_log(java, broker, transactional_id) -> list[dict]:
    """The ``__transaction_state`` records of ``transactional_id``, as Kafka's own
    DumpLogSegments --transaction-log-decoder reads them from the broker's segments."""
    records = []
    for segment in sorted(glob.glob(os.path.join(broker.data_dir, "data", "__transaction_state-*", "*.log"))):
        dumped = java.tool("DumpLogSegments", "--files", segment, "--transaction-log-decoder")
        assert dumped.exit_code == 0, dumped.stderr
        for key, payload in re.findall(r"key: (\{.*?\}) payload: (\{.*\})", dumped.stdout):
            if json.loads(key)["data"]["transactionalId"] == transactional_id:
                records.append(json.loads(payload)["data"])
    return records


def test_transaction_version_2_bumps_the_epoch_with_every_commit_and_abort(java, admin, broker):
    """KIP-890 part 2: the broker finalizes transaction.version 2, so the producer sends
    EndTxn v5 and Produce v12+, no AddPartitionsToTxn, and every commit or abort moves it
    to the next epoch — in the coordinator, its log and the partitions' markers."""
    topic, transactional_id = "java-tv2", "java-tv2-id"
    create_topic(java, topic, partitions=2)
    before = requests_answered(broker)
    transactional(java, broker, "tv2", transactional_id)
    first = java.call("admin.describeTransactions", ids=[transactional_id])[transactional_id]["producer_epoch"]
    outcomes = ["commit" if i % 3 != 2 else "abort" for i in range(12)]
    for i, outcome in enumerate(outcomes):
        java.call("producer.beginTransaction", name="tv2")
        java.call("producer.send", name="tv2", topic=topic, records=[
            {"value": f"{outcome}-{i}-{p}", "partition": p} for p in (0, 1)])
        java.call(f"producer.{outcome}Transaction", name="tv2")
        described = java.call("admin.describeTransactions", ids=[transactional_id])[transactional_id]
        assert described["producer_epoch"] == first + i + 1, (i, described)
    java.call("producer.close", name="tv2")
    sent = {request: sent_since(before, requests_answered(broker), request)
            for request in ("EndTxn", "AddPartitionsToTxn", "Produce")}
    assert sent["EndTxn"] == {5: len(outcomes)} and sent["AddPartitionsToTxn"] == {}
    assert min(sent["Produce"]) >= 12
    # The coordinator's log, read by Kafka's tool: one PREPARE per transaction, each at the
    # next epoch, stamped with the client's transaction version.
    prepared = [(r["transactionStatus"], r["producerEpoch"], r.get("clientTransactionVersion"))
                for r in transaction_log(java, broker, transactional_id) if r["transactionStatus"].startswith("Prepare")]
    assert prepared == [("PrepareCommit" if o == "commit" else "PrepareAbort", first + i + 1, 2)
                        for i, o in enumerate(outcomes)]
    # Each partition's last marker carries the last bumped epoch.
    for p in (0, 1):
        [state] = java.call("admin.describeProducers", partitions=[[topic, p]])[f"{topic}-{p}"]
        assert state["producer_epoch"] == first + len(outcomes) and state["current_transaction_start_offset"] is None
    committed = read_back(java, broker, [[topic, 0], [topic, 1]], 16, **{"isolation.level": "read_committed"})
    assert sorted(r["value"] for r in committed) == sorted(
        f"commit-{i}-{p}" for i, o in enumerate(outcomes) if o == "commit" for p in (0, 1))


def test_a_zombie_whose_last_transaction_committed_is_fenced_by_the_new_instance(java, admin, broker):
    """Transaction version 2: the old instance's epoch has already moved with its commits;
    the new one's InitProducerId moves it again, and every later write or EndTxn of the old
    instance is fenced — by the coordinator (EndTxn v5, the leader's add) and the partition."""
    topic, transactional_id = "java-tv2-zombie", "java-tv2-zombie-id"
    create_topic(java, topic)
    transactional(java, broker, "old", transactional_id)
    for i in range(3):
        java.call("producer.beginTransaction", name="old")
        java.call("producer.send", name="old", topic=topic, records=[{"value": f"old-{i}"}])
        java.call("producer.commitTransaction", name="old")
    old_epoch = java.call("admin.describeTransactions", ids=[transactional_id])[transactional_id]["producer_epoch"]
    transactional(java, broker, "new", transactional_id)
    described = java.call("admin.describeTransactions", ids=[transactional_id])[transactional_id]
    assert described["producer_epoch"] == old_epoch + 1 and described["state"] == "EMPTY"
    java.call("producer.beginTransaction", name="old")
    assert_fenced(java, "old", topic)
    java.call("producer.beginTransaction", name="new")
    java.call("producer.send", name="new", topic=topic, records=[{"value": "new-0"}])
    java.call("producer.commitTransaction", name="new")
    java.call("producer.close", name="new")
    got = read_back(java, broker, [[topic, 0]], 4, **{"isolation.level": "read_committed"})
    assert [r["value"] for r in got] == ["old-0", "old-1", "old-2", "new-0"]


def assert_fenced(java, name: str, topic: str) -> None:
    """The zombie producer ``name``: its send and commit refused with InvalidProducerEpoch,
    its abort with ProducerFenced (Kafka 4's client); then closed."""
    [late] = java.call("producer.send", name=name, topic=topic, records=[{"value": "late-zombie"}])
    assert late["error"] == "InvalidProducerEpochException"
    with pytest.raises(JavaError) as commit:
        java.call("producer.commitTransaction", name=name)
    assert commit.value.kind == "InvalidProducerEpochException"
    with pytest.raises(JavaError) as abort:
        java.call("producer.abortTransaction", name=name)
    assert abort.value.kind == "ProducerFencedException"
    java.call("producer.close", name=name)


def test_a_second_producer_with_the_same_transactional_id_fences_the_zombie(java, admin, broker):
    topic = "java-zombie"
    create_topic(java, topic)
    transactional(java, broker, "old", "java-zombie-id")
    java.call("producer.beginTransaction", name="old")
    java.call("producer.send", name="old", topic=topic, records=[{"value": "from-the-zombie"}])
    transactional(java, broker, "new", "java-zombie-id")      # bumps the epoch, aborts the open transaction
    assert_fenced(java, "old", topic)
    java.call("producer.beginTransaction", name="new")
    java.call("producer.send", name="new", topic=topic, records=[{"value": "from-the-new-one"}])
    java.call("producer.commitTransaction", name="new")
    java.call("producer.close", name="new")
    got = read_back(java, broker, [[topic, 0]], 1, **{"isolation.level": "read_committed"})
    assert [r["value"] for r in got] == ["from-the-new-one"]


def test_consume_transform_produce_commits_offsets_with_the_transaction(java, admin, broker):
    source, sink, group = "java-eos-in", "java-eos-out", "java-eos"
    create_topic(java, source, partitions=2)
    create_topic(java, sink, partitions=2)
    java.call("producer.create", name="feed", config={"bootstrap.servers": broker.bootstrap})
    java.call("producer.send", name="feed", topic=source, records=[{"value": f"v{i}", "partition": i % 2}
                                                                     for i in range(20)])
    java.call("producer.close", name="feed")
    java.call("consumer.create", name="eos", config=consumer_config(broker, group, **{
        "isolation.level": "read_committed"}))
    java.call("consumer.subscribe", name="eos", topics=[source])
    records = java.call("consumer.poll", name="eos", count=20, timeout_ms=20_000)["records"]
    assert len(records) == 20
    transactional(java, broker, "eos-tx", "java-eos-tx")
    before = requests_answered(broker)

    def transform(batch, commit: bool):
        java.call("producer.beginTransaction", name="eos-tx")
        java.call("producer.send", name="eos-tx", topic=sink, records=[
            {"value": r["value"].upper(), "partition": r["partition"]} for r in batch])
        offsets = {}
        for r in batch:
            offsets[r["partition"]] = max(offsets.get(r["partition"], 0), r["offset"] + 1)
        java.call("producer.sendOffsetsToTransaction", name="eos-tx", consumer="eos",
                  offsets=[[source, p, o] for p, o in offsets.items()])
        java.call("producer.commitTransaction" if commit else "producer.abortTransaction", name="eos-tx")

    transform(records[:10], commit=False)           # aborted: neither output nor offsets
    partitions = [[source, 0], [source, 1]]
    # read_committed consumers fetch offsets with require_stable: the answer waits for the markers.
    assert java.call("consumer.committed", name="eos", partitions=partitions) == {f"{source}-0": None,
                                                                                   f"{source}-1": None}
    transform(records, commit=True)
    assert java.call("consumer.committed", name="eos", partitions=partitions) == {f"{source}-0": 10,
                                                                                   f"{source}-1": 10}
    assert java.call("admin.listConsumerGroupOffsets", group=group) == {f"{source}-0": 10, f"{source}-1": 10}
    # Transaction version 2: TxnOffsetCommit v5, whose offsets partition the group coordinator
    # adds to the transaction itself; no AddOffsetsToTxn, no AddPartitionsToTxn.
    after = requests_answered(broker)
    assert sent_since(before, after, "TxnOffsetCommit") == {5: 2}
    assert sent_since(before, after, "AddOffsetsToTxn") == {} and sent_since(before, after, "AddPartitionsToTxn") == {}
    java.call("consumer.close", name="eos")
    java.call("producer.close", name="eos-tx")
    out = read_back(java, broker, [[sink, 0], [sink, 1]], 20, **{"isolation.level": "read_committed"})
    assert sorted(r["value"] for r in out) == sorted(f"V{i}" for i in range(20))


# ------------------------------------------------------------------ consumer groups


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_rebalances_on_join_and_leave_and_commits(java, admin, broker, protocol):
    topic, group = f"java-group-{protocol}", f"java-group-{protocol}"
    create_topic(java, topic, partitions=4)
    java.call("producer.create", name="gp", config={"bootstrap.servers": broker.bootstrap})
    java.call("producer.send", name="gp", topic=topic, records=[{"value": f"{i}", "partition": i % 4}
                                                                 for i in range(40)])
    extra = {"group.protocol": protocol}
    if protocol == "classic":
        extra |= {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}
    java.call("consumer.create", name="c1", config=consumer_config(broker, group, **extra))
    java.call("consumer.subscribe", name="c1", topics=[topic])
    first = java.call("consumer.poll", name="c1", count=40, timeout_ms=30_000)
    assert sorted(int(r["value"]) for r in first["records"]) == list(range(40))
    assert first["assignment"] == [f"{topic}-{p}" for p in range(4)]
    java.call("consumer.commitSync", name="c1")
    everything = [[topic, p] for p in range(4)]
    assert java.call("consumer.committed", name="c1", partitions=everything) == {
        f"{topic}-{p}": 10 for p in range(4)}

    # A second member joins: the partitions are split between the two.
    java.call("consumer.create", name="c2", config=consumer_config(broker, group, **extra))
    java.call("consumer.subscribe", name="c2", topics=[topic])
    both = java.call("consumer.poll", names=["c1", "c2"], until_assigned=True, expected_partitions=4,
                     timeout_ms=30_000)
    a, b = both["assignments"]["c1"], both["assignments"]["c2"]
    assert len(a) == 2 and len(b) == 2 and sorted(a + b) == [f"{topic}-{p}" for p in range(4)]
    assert both["records"] == {"c1": [], "c2": []}     # the committed offsets were respected
    events = java.call("consumer.events", name="c1")
    assert any(e["event"] == "revoked" and e["partitions"] for e in events), events
    described = java.call("admin.describeConsumerGroups", groups=[group])[group]
    assert described["state"] == "STABLE"
    assert described["type"] == ("CLASSIC" if protocol == "classic" else "CONSUMER")
    assert described["assignor"] == ("range" if protocol == "classic" else "uniform")
    assert sorted(sorted(m["assignment"]) for m in described["members"]) == sorted([a, b])
    metadata = java.call("consumer.groupMetadata", name="c1")
    assert metadata["member_id"] in {m["member_id"] for m in described["members"]}
    listed = {g["group_id"]: g for g in java.call("admin.listGroups")}
    assert listed[group]["state"] == "STABLE" and listed[group]["type"] == described["type"]

    # More records, consumed by both; the second member commits and leaves.
    java.call("producer.send", name="gp", topic=topic, records=[{"value": f"{i}", "partition": i % 4}
                                                                 for i in range(40, 80)])
    java.call("producer.close", name="gp")
    more = java.call("consumer.poll", names=["c1", "c2"], count=40, timeout_ms=30_000)["records"]
    assert sorted(int(r["value"]) for r in more["c1"] + more["c2"]) == list(range(40, 80))
    java.call("consumer.commitSync", name="c1")
    java.call("consumer.commitSync", name="c2")
    java.call("consumer.close", name="c2")
    alone = java.call("consumer.poll", names=["c1"], until_assigned=True, expected_partitions=4, timeout_ms=30_000)
    assert alone["assignments"]["c1"] == [f"{topic}-{p}" for p in range(4)]
    assert alone["records"]["c1"] == []
    java.call("consumer.close", name="c1")
    assert java.call("admin.listConsumerGroupOffsets", group=group) == {f"{topic}-{p}": 20 for p in range(4)}
    assert java.call("admin.describeConsumerGroups", groups=[group])[group]["state"] == "EMPTY"
    assert java.call("admin.deleteConsumerGroups", groups=[group]) == {group: "deleted"}
    assert group not in {g["group_id"] for g in java.call("admin.listGroups")}


def offsets_log(java, broker, group) -> list[tuple[dict, dict | None]]:
    """The ``__consumer_offsets`` records of ``group``, as Kafka's own DumpLogSegments
    --offsets-decoder reads them from the broker's segments: (key, payload) pairs."""
    records = []
    for segment in sorted(glob.glob(os.path.join(broker.data_dir, "data", "__consumer_offsets-*", "*.log"))):
        dumped = java.tool("DumpLogSegments", "--files", segment, "--offsets-decoder")
        assert dumped.exit_code == 0, dumped.stderr
        for key, payload in re.findall(r"key: (\{.*?\}) payload: (\{.*\}|<DELETE>)", dumped.stdout):
            key = json.loads(key)
            if key["data"].get("groupId", key["data"].get("group")) == group:
                records.append((key, None if payload == "<DELETE>" else json.loads(payload)))
    return records


def test_kafkas_dump_tool_reads_a_kip848_groups_records(java, admin, broker):
    """tidelog keeps a KIP-848 group's state in __consumer_offsets in Kafka's records (so a
    new coordinator loads it); Kafka's own decoder reads every field back."""
    topic, group = "java-848-records", "java-848-records"
    create_topic(java, topic, partitions=3)
    java.call("consumer.create", name="r848", config=consumer_config(broker, group, **{"group.protocol": "consumer"}))
    java.call("consumer.subscribe", name="r848", topics=[topic])
    got = java.call("consumer.poll", names=["r848"], until_assigned=True, expected_partitions=3, timeout_ms=30_000)
    assert got["assignments"]["r848"] == [f"{topic}-{p}" for p in range(3)]
    member_id = java.call("consumer.groupMetadata", name="r848")["member_id"]
    described = java.call("admin.describeConsumerGroups", groups=[group])[group]
    java.call("consumer.close", name="r848")
    records = offsets_log(java, broker, group)
    by_type = {}
    for key, payload in records:
        by_type.setdefault(int(key["type"]), []).append((key["data"], payload and payload["data"]))
    epoch = by_type[3][0][1]["epoch"]
    assert epoch >= 1 and {"groupId": group} == by_type[3][0][0]
    (member_key, member), *_ = by_type[5]
    assert member_key == {"groupId": group, "memberId": member_id}
    assert member["subscribedTopicNames"] == [topic] and member["clientId"] and member["rebalanceTimeoutMs"] > 0
    target = by_type[7][0][1]["topicPartitions"]
    assert [sorted(t["partitions"]) for t in target] == [[0, 1, 2]]
    current = [value for key, value in by_type[8] if value is not None][-1]
    assert sorted(current["assignedPartitions"][0]["partitions"]) == [0, 1, 2] and current["state"] == 0
    assert current["memberEpoch"] == epoch
    assert by_type[6][-1][1]["assignmentEpoch"] == epoch
    # The member left: its records are deleted (tombstones), its assignment's first, as
    # Kafka writes them; the group stays, at the next epoch.
    tombstones = [int(key["type"]) for key, payload in records if payload is None]
    assert tombstones == [8, 7, 5], records
    assert by_type[3][-1][1]["epoch"] == epoch + 1
    assert described["state"] == "STABLE"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_regex_subscription_follows_new_topics(java, admin, broker, protocol):
    prefix = f"java-rx-{protocol}"
    create_topic(java, f"{prefix}-a", partitions=2)
    create_topic(java, f"{prefix}-b")
    create_topic(java, f"other-{protocol}")
    java.call("consumer.create", name="rx", config=consumer_config(
        broker, f"{prefix}-group", **{"group.protocol": protocol, "metadata.max.age.ms": "500"}))
    if protocol == "classic":
        java.call("consumer.subscribe", name="rx", pattern=f"{prefix}-.*")     # matched by the client
    else:
        java.call("consumer.subscribe", name="rx", subscription_pattern=f"{prefix}-.*")   # by the broker (RE2J)
    got = java.call("consumer.poll", names=["rx"], until_assigned=True, expected_partitions=3, timeout_ms=20_000)
    assert got["assignments"]["rx"] == [f"{prefix}-a-0", f"{prefix}-a-1", f"{prefix}-b-0"]
    create_topic(java, f"{prefix}-c")
    got = java.call("consumer.poll", names=["rx"], until_assigned=True, expected_partitions=4, timeout_ms=20_000)
    assert got["assignments"]["rx"] == [f"{prefix}-a-0", f"{prefix}-a-1", f"{prefix}-b-0", f"{prefix}-c-0"]
    java.call("consumer.close", name="rx")


def test_seek_pause_and_resume(java, admin, broker):
    topic = "java-seek"
    create_topic(java, topic, partitions=2)
    java.call("producer.create", name="sp", config={"bootstrap.servers": broker.bootstrap})
    java.call("producer.send", name="sp", topic=topic, records=[{"value": f"{i}", "partition": i % 2}
                                                                 for i in range(20)])
    java.call("consumer.create", name="s", config=consumer_config(broker))
    p0, p1 = [topic, 0], [topic, 1]
    java.call("consumer.assign", name="s", partitions=[p0, p1])
    java.call("consumer.seek", name="s", partition=p0, offset=7)
    got = java.call("consumer.poll", name="s", count=13, timeout_ms=10_000)["records"]
    assert [r["offset"] for r in got if r["partition"] == 0] == [7, 8, 9]
    assert [r["offset"] for r in got if r["partition"] == 1] == list(range(10))
    assert java.call("consumer.position", name="s", partition=p0) == 10
    java.call("consumer.pause", name="s", partitions=[p0])
    assert java.call("consumer.paused", name="s") == [f"{topic}-0"]
    java.call("producer.send", name="sp", topic=topic, records=[{"value": f"{i}", "partition": i % 2}
                                                                 for i in range(20, 30)])
    java.call("producer.close", name="sp")
    got = java.call("consumer.poll", name="s", count=10, timeout_ms=1_500)["records"]
    assert {r["partition"] for r in got} == {1} and len(got) == 5
    java.call("consumer.resume", name="s", partitions=[p0])
    got = java.call("consumer.poll", name="s", count=5, timeout_ms=10_000)["records"]
    assert [(r["partition"], r["offset"]) for r in got] == [(0, o) for o in range(10, 15)]
    java.call("consumer.seekToBeginning", name="s", partitions=[p1])
    got = java.call("consumer.poll", name="s", count=15, timeout_ms=10_000)["records"]
    assert [r["offset"] for r in got] == list(range(15))
    assert java.call("consumer.beginningOffsets", name="s", partitions=[p0, p1]) == {f"{topic}-0": 0,
                                                                                     f"{topic}-1": 0}
    assert java.call("consumer.endOffsets", name="s", partitions=[p0, p1]) == {f"{topic}-0": 15,
                                                                               f"{topic}-1": 15}
    # A commit with explicit offsets, read back with committed().
    java.call("consumer.commitSync", name="s", offsets=[[topic, 0, 4, "meta"], [topic, 1, 9]])
    assert java.call("consumer.committed", name="s", partitions=[p0, p1]) == {f"{topic}-0": 4, f"{topic}-1": 9}
    java.call("consumer.close", name="s")


# ------------------------------------------------------------------ AdminClient


def test_admin_topics_partitions_and_configs(java, admin, broker):
    create_topic(java, "java-admin", partitions=2, configs={"retention.ms": "3600000", "cleanup.policy": "delete"})
    duplicate = java.call("admin.createTopics", topics=[{"name": "java-admin", "partitions": 1}])
    assert duplicate["java-admin"]["error"] == "TopicExistsException"
    invalid = java.call("admin.createTopics", topics=[{"name": "bad/name", "partitions": 1}])
    assert invalid["bad/name"]["error"] == "InvalidTopicException"
    assert "java-admin" in java.call("admin.listTopics")
    # Committing a group's offsets creates __consumer_offsets, an internal topic listed only on request.
    java.call("admin.alterConsumerGroupOffsets", group="java-admin-group", offsets=[["java-admin", 0, 0]])
    assert java.call("admin.listConsumerGroupOffsets", group="java-admin-group") == {"java-admin-0": 0}
    assert "__consumer_offsets" not in java.call("admin.listTopics")
    assert "__consumer_offsets" in java.call("admin.listTopics", internal=True)
    described = java.call("admin.describeTopics", topics=["java-admin", "java-missing"])
    topic = described["java-admin"]
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    assert all(p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1] for p in topic["partitions"])
    assert described["java-missing"]["error"] == "UnknownTopicOrPartitionException"

    assert java.call("admin.createPartitions", topics={"java-admin": 4}) == {"java-admin": "ok"}
    assert len(java.call("admin.describeTopics", topics=["java-admin"])["java-admin"]["partitions"]) == 4
    fewer = java.call("admin.createPartitions", topics={"java-admin": 3})["java-admin"]
    assert fewer["error"] == "InvalidPartitionsException"

    configs = java.call("admin.describeConfigs", resource_type="TOPIC", resource_name="java-admin")
    assert configs["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False,
                                       "read_only": False}
    assert configs["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    java.call("admin.incrementalAlterConfigs", resource_type="TOPIC", resource_name="java-admin", ops=[
        {"name": "retention.ms", "value": "7200000", "op": "SET"}, {"name": "cleanup.policy", "op": "DELETE"},
        {"name": "max.message.bytes", "value": "2000000", "op": "SET"}])
    configs = java.call("admin.describeConfigs", resource_type="TOPIC", resource_name="java-admin")
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["cleanup.policy"] == {"value": "delete", "source": "DEFAULT_CONFIG", "sensitive": False,
                                         "read_only": False}
    assert configs["max.message.bytes"]["value"] == "2000000"
    with pytest.raises(JavaError) as bad:
        java.call("admin.incrementalAlterConfigs", resource_type="TOPIC", resource_name="java-admin",
                  ops=[{"name": "retention.ms", "value": "soon", "op": "SET"}])
    assert bad.value.kind == "InvalidConfigurationException"
    broker_configs = java.call("admin.describeConfigs", resource_type="BROKER", resource_name="1")
    assert broker_configs["group.initial.rebalance.delay.ms"]["source"] == "STATIC_BROKER_CONFIG"
    assert broker_configs["num.partitions"]["value"] == "1"

    assert java.call("admin.deleteTopics", topics=["java-admin"]) == {"java-admin": "deleted"}
    assert "java-admin" not in java.call("admin.listTopics")


def test_admin_cluster_quorum_and_log_dirs(java, admin, broker):
    cluster = java.call("admin.describeCluster")
    assert cluster["nodes"] == [{"id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]
    assert cluster["controller"]["id"] == 1 and len(cluster["cluster_id"]) == 22
    quorum = java.call("admin.describeMetadataQuorum")
    assert quorum["leader_id"] == 1 and [v["replica_id"] for v in quorum["voters"]] == [1]
    assert quorum["high_watermark"] > 0 and quorum["voters"][0]["log_end_offset"] >= quorum["high_watermark"]
    create_topic(java, "java-dirs")
    java.call("producer.create", name="dp", config={"bootstrap.servers": broker.bootstrap})
    java.call("producer.send", name="dp", topic="java-dirs", records=[{"value": "x" * 100}] * 10)
    java.call("producer.close", name="dp")
    [(path, directory)] = java.call("admin.describeLogDirs", brokers=[1])["1"].items()
    assert path.startswith(broker.data_dir) and directory["error"] is None
    assert directory["replicas"]["java-dirs-0"]["size"] > 1000
    assert 0 < directory["usable_bytes"] <= directory["total_bytes"]
    election = java.call("admin.electLeaders", election="PREFERRED", partitions=[["java-dirs", 0]])
    assert election["java-dirs-0"]["error"] == "ElectionNotNeededException"


def test_admin_list_offsets_and_delete_records(java, admin, broker):
    topic = "java-offsets"
    create_topic(java, topic)
    java.call("producer.create", name="op", config={"bootstrap.servers": broker.bootstrap})
    base = int(time.time() * 1000) - 100_000
    java.call("producer.send", name="op", topic=topic, records=[
        {"value": f"{i}", "timestamp": base + i * 1000} for i in range(10)])
    java.call("producer.close", name="op")
    tp = [[topic, 0]]
    key = f"{topic}-0"
    assert java.call("admin.listOffsets", partitions=tp, spec="earliest")[key]["offset"] == 0
    assert java.call("admin.listOffsets", partitions=tp, spec="latest")[key]["offset"] == 10
    newest = java.call("admin.listOffsets", partitions=tp, spec="max_timestamp")[key]
    assert (newest["offset"], newest["timestamp"]) == (9, base + 9000)
    by_time = java.call("admin.listOffsets", partitions=tp, spec=str(base + 4500))[key]
    assert (by_time["offset"], by_time["timestamp"]) == (5, base + 5000)
    assert java.call("admin.deleteRecords", offsets=[[topic, 0, 6]]) == {key: 6}
    assert java.call("admin.listOffsets", partitions=tp, spec="earliest")[key]["offset"] == 6
    beyond = java.call("admin.deleteRecords", offsets=[[topic, 0, 11]])[key]
    assert beyond["error"] == "OffsetOutOfRangeException"


def test_admin_scram_credentials(java, admin, broker):
    assert java.call("admin.alterUserScramCredentials", upsertions=[
        {"user": "java-alice", "mechanism": "SCRAM-SHA-256", "iterations": 8192, "password": "a-secret"},
        {"user": "java-bob", "mechanism": "SCRAM-SHA-512", "password": "b-secret"}]) == {
        "java-alice": "ok", "java-bob": "ok"}
    everyone = java.call("admin.describeUserScramCredentials")
    assert everyone["java-alice"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    assert everyone["java-bob"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    # A user without credentials is answered RESOURCE_NOT_FOUND, which all() reports as no credentials.
    assert java.call("admin.describeUserScramCredentials", users=["java-nobody", "java-alice"]) == {
        "java-nobody": [], "java-alice": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]}
    java.call("admin.alterUserScramCredentials", deletions=[{"user": "java-bob", "mechanism": "SCRAM-SHA-512"}])
    assert "java-bob" not in java.call("admin.describeUserScramCredentials")


@pytest.mark.parametrize("call", ["describeDelegationToken",
                                  "createDelegationToken", "describeShareGroups", "listConfigResources"])
def test_admin_calls_tidelog_does_not_serve_fail_at_once_with_unsupported_version(java, admin, call):
    # Answered, not timed out: a hang would end in the admin client's TimeoutException
    # (default.api.timeout.ms, 60 s) or in this call's own 15 s limit.
    answer = java.request("admin.unsupported", call=call, timeout_s=15)
    assert answer["ok"] and answer["result"]["error"] == "UnsupportedVersionException", answer
