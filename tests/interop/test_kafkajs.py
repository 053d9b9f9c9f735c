"""KafkaJS (JavaScript, the ``kafkajs`` package) against a 3-broker ``tidelog cluster up``.

One Node.js driver process per module (interop/js, tests/interop/line_driver.py), one
cluster per module: replication factor 3, ``min.insync.replicas=2``. Producers are
idempotent with acks=all (KafkaJS's ``idempotent: true``, one request in flight).
"""

import pytest

from tests.interop.line_driver import js_driver, missing_node, open_driver
from tests.interop.test_java_cluster import UpCluster, tidelog_cluster
from tidelog.broker.config import parse_properties
from tidelog.testing import wait_until

NEEDS_JAVA = False    # tests/interop/conftest.py: these run without a JDK
pytestmark = pytest.mark.skipif(missing_node() is not None, reason=f"KafkaJS tests skipped: {missing_node()}")


@pytest.fixture(scope="module")
def js():
    with open_driver(js_driver()) as driver:
        yield driver


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, js):
    up = UpCluster(tmp_path_factory.mktemp("kafkajs"), secure=False)
    try:
        js.call("admin.create", name="admin", brokers=up.bootstrap.split(","))
        yield up
    finally:
        up.down()


def create_topic(js, name, partitions, configs=None):
    assert js.call("admin.createTopics", name="admin", topics=[{
        "name": name, "partitions": partitions, "replication_factor": 3,
        "configs": {"min.insync.replicas": "2", **(configs or {})}}]) is True


def brokers(cluster):
    return cluster.bootstrap.split(",")


def values(records):
    return sorted(r["value"] for r in records)


def test_admin_topics_metadata_and_configs(js, cluster):
    create_topic(js, "kjs-admin", 3, {"cleanup.policy": "compact"})
    # KafkaJS answers false when a topic exists (TOPIC_ALREADY_EXISTS is not an error to it).
    assert js.call("admin.createTopics", name="admin", topics=[{"name": "kjs-admin", "partitions": 3,
                                                                "replication_factor": 3}]) is False
    assert "kjs-admin" in js.call("admin.listTopics", name="admin")
    [topic] = js.call("admin.fetchTopicMetadata", name="admin", topics=["kjs-admin"])
    assert topic["name"] == "kjs-admin"
    partitions = sorted(topic["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in partitions] == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3] for p in partitions)
    assert sorted(p["leader"] for p in partitions) == [1, 2, 3]
    described = js.call("admin.describeTopicConfigs", name="admin", topics=["kjs-admin"])["kjs-admin"]
    assert described["error"] == 0
    assert described["configs"]["cleanup.policy"] == "compact"
    assert described["configs"]["min.insync.replicas"] == "2"


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_idempotent_acks_all_produce_with_headers_read_back_by_a_group(js, cluster, codec):
    topic = f"kjs-produce-{codec}"
    create_topic(js, topic, 3)
    js.call("producer.create", name=f"p-{codec}", brokers=brokers(cluster))
    records = [{"partition": i % 3, "key": None if i % 7 == 0 else f"k{i}", "value": f"{codec}-{i}" * (1 + i % 4),
                "headers": [["n", str(i)], ["codec", codec]] if i % 2 else []} for i in range(90)]
    answers = js.call("producer.send", name=f"p-{codec}", topic=topic, records=records, compression=codec)
    assert sorted((a["partition"], a["base_offset"], a["error"]) for a in answers) == [(p, 0, 0) for p in range(3)]
    more = js.call("producer.send", name=f"p-{codec}", topic=topic, records=records[:30], compression=codec)
    assert sorted((a["partition"], a["base_offset"]) for a in more) == [(p, 30) for p in range(3)]
    js.call("producer.close", name=f"p-{codec}")
    offsets = js.call("admin.fetchTopicOffsets", name="admin", topic=topic)
    assert [(o["partition"], o["low"], o["high"]) for o in offsets] == [(p, 0, 40) for p in range(3)]

    js.call("consumer.create", name=f"c-{codec}", brokers=brokers(cluster), group=f"kjs-read-{codec}",
            topics=[topic])
    got = js.call("poll", name=f"c-{codec}", count=120)["records"][f"c-{codec}"]
    assert len(got) == 120
    read = {(r["partition"], r["offset"]): r for r in got}
    for i, record in enumerate(records + records[:30]):
        offset = i // 3 if i < 90 else 30 + (i - 90) // 3
        r = read[(record["partition"], offset)]
        assert (r["key"], r["value"], r["headers"]) == (record["key"], record["value"], record["headers"]), i
    js.call("consumer.close", name=f"c-{codec}")


def wait_assignment(js, names, topic, counts):
    def split():
        held = [js.call("assignment", name=name)["assigned"].get(topic, []) for name in names]
        return sorted(len(h) for h in held) == sorted(counts) and len(set(sum(held, []))) == sum(counts)
    wait_until(split, 60, f"{names} to hold {counts} partitions of {topic}")


def test_a_group_of_two_rebalances_on_join_and_leave_and_commits(js, cluster):
    topic, group = "kjs-group", "kjs-group"
    create_topic(js, topic, 4)
    js.call("producer.create", name="gp", brokers=brokers(cluster))

    def send(first, last):
        answers = js.call("producer.send", name="gp", topic=topic,
                          records=[{"partition": i % 4, "value": str(i)} for i in range(first, last)])
        assert all(a["error"] == 0 for a in answers), answers

    send(0, 100)
    js.call("consumer.create", name="m1", brokers=brokers(cluster), group=group, topics=[topic])
    got = js.call("poll", names=["m1"], count=100)
    assert values(got["records"]["m1"]) == sorted(str(i) for i in range(100))
    assert js.call("assignment", name="m1")["assigned"] == {topic: [0, 1, 2, 3]}
    js.call("commit", name="m1")

    js.call("consumer.create", name="m2", brokers=brokers(cluster), group=group, topics=[topic])
    wait_assignment(js, ["m1", "m2"], topic, [2, 2])
    send(100, 300)
    got = js.call("poll", names=["m1", "m2"], count=200)
    assert got["crashed"] == []
    assert values(got["records"]["m1"] + got["records"]["m2"]) == sorted(str(i) for i in range(100, 300))
    for name in ("m1", "m2"):
        held = js.call("assignment", name=name)["assigned"][topic]
        assert {r["partition"] for r in got["records"][name]} <= set(held)
        js.call("commit", name=name)
    assert js.call("admin.fetchOffsets", name="admin", group=group, topics=[topic]) == \
        {topic: {str(p): 75 for p in range(4)}}

    [described] = js.call("admin.describeGroups", name="admin", groups=[group])
    assert (described["state"], described["protocol_type"], described["error"]) == ("Stable", "consumer", 0)
    assert described["protocol"] == "RoundRobinAssigner" and len(described["members"]) == 2
    assert {"groupId": group, "protocolType": "consumer"} in js.call("admin.listGroups", name="admin")

    js.call("consumer.close", name="m2")      # leave: m1 takes all four back, from m2's commits
    wait_assignment(js, ["m1"], topic, [4])
    send(300, 340)
    got = js.call("poll", names=["m1"], count=40)
    assert values(got["records"]["m1"]) == sorted(str(i) for i in range(300, 340))
    js.call("commit", name="m1")
    assert js.call("admin.fetchOffsets", name="admin", group=group, topics=[topic]) == \
        {topic: {str(p): 85 for p in range(4)}}
    js.call("consumer.close", name="m1")
    js.call("producer.close", name="gp")


def test_transactions_commit_abort_and_offsets_in_a_transaction(js, cluster):
    topic = "kjs-txn"
    create_topic(js, topic, 2)
    js.call("producer.create", name="tp", brokers=brokers(cluster), transactional_id="kjs-tx-1")
    for round_, commit in enumerate((True, False, True)):
        sends = [{"topic": topic, "records": [{"partition": i % 2, "value": f"r{round_}-{i}"} for i in range(10)]}]
        offsets = {"group": "kjs-txn-group", "topics": [{"topic": topic, "partitions": [
            {"partition": p, "offset": str(round_ * 5 + 5)} for p in (0, 1)]}]}
        answers = js.call("txn.run", name="tp", sends=sends, offsets=offsets, commit=commit)
        assert all(a["error"] == 0 for a in answers[0]), answers
    js.call("producer.close", name="tp")

    js.call("consumer.create", name="rc", brokers=brokers(cluster), group="kjs-rc", topics=[topic],
            read_committed=True)
    got = js.call("poll", name="rc", count=20)["records"]["rc"]
    assert values(got) == sorted(f"r{r}-{i}" for r in (0, 2) for i in range(10))
    js.call("consumer.create", name="ru", brokers=brokers(cluster), group="kjs-ru", topics=[topic])
    got = js.call("poll", name="ru", count=30)["records"]["ru"]
    assert values(got) == sorted(f"r{r}-{i}" for r in range(3) for i in range(10))
    for name in ("rc", "ru"):
        js.call("consumer.close", name=name)
    # The aborted transaction's offsets (10) were dropped; the last committed one's (15) stand.
    wait_until(lambda: js.call("admin.fetchOffsets", name="admin", group="kjs-txn-group", topics=[topic]) ==
               {topic: {"0": 15, "1": 15}}, 30, "the offsets committed in the last transaction")
    # 30 records and 3 markers in each of the two partitions.
    assert [o["high"] for o in js.call("admin.fetchTopicOffsets", name="admin", topic=topic)] == [18, 18]


def test_admin_records_partitions_offsets_configs_and_deletion(js, cluster):
    topic, group = "kjs-life", "kjs-life-group"
    create_topic(js, topic, 2)
    cluster_info = js.call("admin.describeCluster", name="admin")
    assert sorted(b["nodeId"] for b in cluster_info["brokers"]) == [1, 2, 3]
    assert cluster_info["controller"] in (1, 2, 3) and cluster_info["clusterId"]
    js.call("producer.create", name="life", brokers=brokers(cluster))
    js.call("producer.send", name="life", topic=topic, records=[{"partition": i % 2, "value": str(i)}
                                                                for i in range(20)])
    js.call("admin.deleteTopicRecords", name="admin", topic=topic, partitions=[{"partition": 0, "offset": 4}])
    offsets = js.call("admin.fetchTopicOffsets", name="admin", topic=topic)
    assert [(o["low"], o["high"]) for o in offsets] == [(4, 10), (0, 10)]

    js.call("admin.setOffsets", name="admin", group=group, topic=topic,
            partitions=[{"partition": 0, "offset": 7}, {"partition": 1, "offset": 2}])
    assert js.call("admin.fetchOffsets", name="admin", group=group, topics=[topic]) == {topic: {"0": 7, "1": 2}}
    js.call("consumer.create", name="life-c", brokers=brokers(cluster), group=group, topics=[topic])
    got = js.call("poll", name="life-c", count=11)["records"]["life-c"]
    assert values(got) == sorted(str(i) for i in list(range(14, 20, 2)) + list(range(5, 20, 2)))
    js.call("consumer.close", name="life-c")
    js.call("admin.resetOffsets", name="admin", group=group, topic=topic)
    # Earliest: KafkaJS commits -2, which the group's next member resolves to the log start offsets.
    assert js.call("admin.fetchOffsets", name="admin", group=group, topics=[topic]) == {topic: {"0": -2, "1": -2}}
    js.call("consumer.create", name="life-c2", brokers=brokers(cluster), group=group, topics=[topic])
    got = js.call("poll", name="life-c2", count=16)["records"]["life-c2"]
    assert values(got) == sorted(str(i) for i in range(20) if i not in (0, 2, 4, 6))   # 4 deleted on partition 0
    js.call("consumer.close", name="life-c2")

    js.call("admin.alterTopicConfig", name="admin", topic=topic, configs={"retention.ms": 3_600_000})
    # Answered once the controller committed it; the broker that describes it may be a
    # moment behind in the metadata log (as in Kafka, where any broker answers DescribeConfigs).
    wait_until(lambda: js.call("admin.describeTopicConfigs", name="admin", topics=[topic])[topic]["configs"]
               ["retention.ms"] == "3600000", 30, "retention.ms altered on the describing broker")
    assert js.call("admin.createPartitions", name="admin", topic=topic, count=3) is None
    wait_until(lambda: len(js.call("admin.fetchTopicOffsets", name="admin", topic=topic)) == 3, 30,
               "a third partition")

    js.call("producer.close", name="life")
    assert js.call("admin.deleteGroups", name="admin", groups=[group]) == [{"groupId": group, "errorCode": 0}]
    assert group not in [g["groupId"] for g in js.call("admin.listGroups", name="admin")]
    js.call("admin.deleteTopics", name="admin", topics=[topic])
    wait_until(lambda: topic not in js.call("admin.listTopics", name="admin"), 30, f"{topic} gone")


def test_no_acknowledged_record_is_lost_when_the_leader_is_killed_mid_produce(js, cluster):
    topic = "kjs-kill"
    create_topic(js, topic, 1)
    [meta] = js.call("admin.fetchTopicMetadata", name="admin", topics=[topic])
    leader = meta["partitions"][0]["leader"]
    js.call("producer.create", name="bg", brokers=brokers(cluster))
    js.call("produce.start", name="bg", topic=topic, prefix="k")
    wait_until(lambda: js.call("produce.stop", name="bg", progress=True)["acked"] >= 100, 60, "100 acknowledged")
    assert tidelog_cluster(cluster.directory, "kill", str(leader)).returncode == 0
    before = js.call("produce.stop", name="bg", progress=True)["acked"]
    try:
        wait_until(lambda: js.call("produce.stop", name="bg", progress=True)["acked"] >= before + 100, 90,
                   "100 more acknowledged after the kill")
        result = js.call("produce.stop", name="bg")
        acked = {r["value"]: r["offset"] for r in result["acked"]}
        assert len(acked) == len(result["acked"])
        # A send that failed may or may not have been written; every acknowledged one was.
        failed = {line.split(":")[0] for line in result["failed"]}
        js.call("consumer.create", name="kill-check", brokers=brokers(cluster), group="kjs-kill-check",
                topics=[topic])
        got = js.call("poll", name="kill-check", count=len(acked))["records"]["kill-check"]
        read = {r["value"]: r["offset"] for r in got}
        assert len(read) == len(got)              # each once: the idempotent producer's retries
        assert {v: o for v, o in read.items() if v in acked} == acked
        assert set(read) - set(acked) <= failed
        js.call("consumer.close", name="kill-check")
    finally:
        js.call("producer.close", name="bg")
        assert tidelog_cluster(cluster.directory, "restart", str(leader)).returncode == 0


# ------------------------------------------------------------------ --secure


def test_sasl_ssl_scram_on_a_secure_cluster(js, tmp_path_factory):
    """KafkaJS's own TLS and SCRAM-SHA-512 against ``cluster up --secure``, with the
    cluster's client.properties (librdkafka's names) as the driver's settings."""
    up = UpCluster(tmp_path_factory.mktemp("kafkajs-secure"), secure=True)
    try:
        settings = parse_properties((up.directory / "security" / "client.properties").read_text())
        assert settings["sasl.mechanism"] == "SCRAM-SHA-512"
        secure = {"brokers": brokers(up), "security": settings}
        js.call("admin.create", name="sec-admin", **secure)
        assert js.call("admin.createTopics", name="sec-admin", topics=[{"name": "kjs-secure", "partitions": 2,
                                                                        "replication_factor": 3}]) is True
        js.call("producer.create", name="sec-p", **secure)
        answers = js.call("producer.send", name="sec-p", topic="kjs-secure", compression="gzip",
                          records=[{"partition": i % 2, "value": f"s{i}", "headers": [["h", "v"]]} for i in range(30)])
        assert sorted((a["partition"], a["base_offset"], a["error"]) for a in answers) == [(0, 0, 0), (1, 0, 0)]
        js.call("producer.create", name="sec-tx", transactional_id="kjs-secure-tx", **secure)
        js.call("txn.run", name="sec-tx", commit=True, sends=[{"topic": "kjs-secure", "records": [
            {"partition": 0, "value": "t"}]}])
        js.call("consumer.create", name="sec-c", group="kjs-secure-group", topics=["kjs-secure"],
                read_committed=True, **secure)
        got = js.call("poll", name="sec-c", count=31)["records"]["sec-c"]
        assert values(got) == sorted([f"s{i}" for i in range(30)] + ["t"])
        js.call("commit", name="sec-c")
        assert js.call("admin.fetchOffsets", name="sec-admin", group="kjs-secure-group", topics=["kjs-secure"]) == \
            {"kjs-secure": {"0": 16, "1": 15}}
        for op, name in (("consumer.close", "sec-c"), ("producer.close", "sec-p"), ("producer.close", "sec-tx"),
                         ("admin.close", "sec-admin")):
            js.call(op, name=name)
        # A wrong password: KafkaJS's SASL error, at once.
        answer = js.request("admin.create", name="sec-wrong", brokers=brokers(up),
                            security={**settings, "sasl.password": "not-the-password"})
        assert not answer["ok"] and answer["error"] == "KafkaJSSASLAuthenticationError", answer
    finally:
        up.down()
