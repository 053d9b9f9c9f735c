"""franz-go (Go, github.com/twmb/franz-go with kadm) against a 3-broker ``tidelog cluster up``.

One driver process per module (interop/go, tests/interop/line_driver.py), one cluster per
module: replication factor 3, ``min.insync.replicas=2``. Producers are franz-go's default,
idempotent with acks=all.
"""

import pytest

from tests.interop.line_driver import DriverError, go_driver, missing_go, open_driver
from tests.interop.test_java_cluster import UpCluster, tidelog_cluster
from tidelog.broker.config import parse_properties
from tidelog.testing import wait_until

NEEDS_JAVA = False    # tests/interop/conftest.py: these run without a JDK
pytestmark = pytest.mark.skipif(missing_go() is not None, reason=f"franz-go tests skipped: {missing_go()}")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def go():
    with open_driver(go_driver()) as driver:
        yield driver


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, go):
    up = UpCluster(tmp_path_factory.mktemp("franz-go"), secure=False)
    try:
        go.call("client.create", name="admin", config={"brokers": up.bootstrap.split(",")})
        yield up
    finally:
        up.down()


def create_topic(go, name, partitions, configs=None):
    created = go.call("admin.createTopics", name="admin", topics=[{
        "name": name, "partitions": partitions, "replication_factor": 3,
        "configs": {"min.insync.replicas": "2", **(configs or {})}}])
    assert created == {name: {"partitions": partitions, "replication_factor": 3}}, created
    # Metadata on every broker knows it once each partition has a leader.
    wait_until(lambda: all(p["leader"] >= 0 for p in go.call("admin.listTopics", name="admin", topics=[name])
                           [name]["partitions"]), 30, f"leaders for {name}")


def client(go, name, cluster, **config):
    go.call("client.create", name=name, config={"brokers": cluster.bootstrap.split(","), **config})


def values(records):
    return sorted(r["value"] for r in records)


def test_admin_topics_and_configs_through_kadm(go, cluster):
    create_topic(go, "franz-admin", 3, {"cleanup.policy": "compact"})
    again = go.call("admin.createTopics", name="admin", topics=[{"name": "franz-admin", "partitions": 3,
                                                                 "replication_factor": 3}])
    assert again["franz-admin"]["error"] == "TOPIC_ALREADY_EXISTS"
    too_many = go.call("admin.createTopics", name="admin", topics=[{"name": "franz-rf4", "partitions": 1,
                                                                    "replication_factor": 4}])
    assert too_many["franz-rf4"]["error"] == "INVALID_REPLICATION_FACTOR"

    listed = go.call("admin.listTopics", name="admin")
    assert "franz-admin" in listed and "__consumer_offsets" not in listed
    partitions = listed["franz-admin"]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3] and p["error"] is None
               for p in partitions)
    assert sorted(p["leader"] for p in partitions) == [1, 2, 3]

    configs = go.call("admin.describeTopicConfigs", name="admin", topics=["franz-admin", "franz-missing"])
    assert configs["franz-admin"]["cleanup.policy"]["value"] == "compact"
    assert configs["franz-admin"]["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["franz-admin"]["min.insync.replicas"]["value"] == "2"
    assert configs["franz-admin"]["retention.ms"]["source"] == "DEFAULT_CONFIG"
    assert configs["franz-missing"]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_acks_all_produce_with_headers_and_each_codec(go, cluster, codec):
    topic = f"franz-{codec}"
    create_topic(go, topic, 3)
    client(go, f"p-{codec}", cluster, compression=codec, manual_partitions=True, linger_ms=5)
    records = [{"partition": i % 3, "key": None if i % 7 == 0 else f"k{i}", "value": f"{codec}-{i}" * (1 + i % 5),
                "headers": [["n", str(i)], ["codec", codec]] if i % 2 else []} for i in range(150)]
    sent = go.call("produce", name=f"p-{codec}", topic=topic, records=records)
    assert all("error" not in r for r in sent), sent
    for partition in range(3):
        offsets = [r["offset"] for r in sent if r["partition"] == partition]
        assert offsets == list(range(50)), (partition, offsets)
    go.call("client.close", name=f"p-{codec}")

    client(go, f"c-{codec}", cluster, topics=[topic])
    got = go.call("poll", name=f"c-{codec}", count=150)
    assert got["errors"] == []
    read = {(r["partition"], r["offset"]): r for r in got["records"][f"c-{codec}"]}
    assert len(read) == 150
    for record, answer in zip(records, sent):
        r = read[(answer["partition"], answer["offset"])]
        assert (r["key"], r["value"], r["headers"]) == (record["key"], record["value"], record["headers"])
    go.call("client.close", name=f"c-{codec}")
    assert go.call("admin.listEndOffsets", name="admin", topics=[topic]) == {topic: {"0": 50, "1": 50, "2": 50}}


def wait_assignment(go, names, topic, counts):
    """Until the named members hold ``counts`` partitions of ``topic`` each, together all of them."""
    def split():
        held = [go.call("assignment", name=name)["assigned"].get(topic, []) for name in names]
        return sorted(len(h) for h in held) == sorted(counts) and len(set(sum(held, []))) == sum(counts)
    wait_until(split, 60, f"{names} to hold {counts} partitions of {topic}")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_of_two_rebalances_on_join_and_leave_and_commits(go, cluster, protocol):
    topic, group = f"franz-group-{protocol}", f"franz-group-{protocol}"
    create_topic(go, topic, 4)
    gp, m1, m2 = f"gp-{protocol}", f"m1-{protocol}", f"m2-{protocol}"
    client(go, gp, cluster, manual_partitions=True)
    member = {"topics": [topic], "group": group}
    if protocol == "consumer":    # KIP-848: the broker assigns (franz-go needs range or sticky for it)
        member |= {"server_side_balancer": True, "balancer": "range"}

    def send(first, last):
        sent = go.call("produce", name=gp, topic=topic,
                       records=[{"partition": i % 4, "value": str(i)} for i in range(first, last)])
        assert all("error" not in r for r in sent), sent

    send(0, 100)
    client(go, m1, cluster, **member)
    got = go.call("poll", names=[m1], count=100)
    assert values(got["records"][m1]) == sorted(str(i) for i in range(100))
    assert go.call("assignment", name=m1)["assigned"] == {topic: [0, 1, 2, 3]}
    go.call("commit", name=m1)

    client(go, m2, cluster, **member)      # join: the partitions are split 2/2
    wait_assignment(go, [m1, m2], topic, [2, 2])
    send(100, 300)
    got = go.call("poll", names=[m1, m2], count=200)
    assert got["errors"] == []
    assert values(got["records"][m1] + got["records"][m2]) == sorted(str(i) for i in range(100, 300))
    for name in (m1, m2):
        held = go.call("assignment", name=name)["assigned"][topic]
        assert {r["partition"] for r in got["records"][name]} <= set(held)
        go.call("commit", name=name)
    assert go.call("admin.fetchOffsets", name="admin", group=group) == {topic: {str(p): 75 for p in range(4)}}

    # DescribeGroups for a classic group, ConsumerGroupDescribe for a KIP-848 one.
    describe = "admin.describeGroups" if protocol == "classic" else "admin.describeConsumerGroups"
    described = go.call(describe, name="admin", groups=[group])[group]
    assert described["error"] is None and described["state"] == "Stable"
    assert sorted(len(m["assigned"].get(topic, [])) for m in described["members"]) == [2, 2]
    if protocol == "classic":
        assert described["protocol"] == "cooperative-sticky"
    else:
        assert described["assignor"] == "range"
    listed = go.call("admin.listGroups", name="admin")
    assert listed[group]["state"] == "Stable" and listed[group]["protocol_type"] == "consumer"
    assert listed[group]["type"] == protocol

    go.call("client.close", name=m2)       # leave: m1 takes all four back, from m2's commits
    wait_assignment(go, [m1], topic, [4])
    send(300, 340)
    got = go.call("poll", names=[m1], count=40)
    assert values(got["records"][m1]) == sorted(str(i) for i in range(300, 340))
    go.call("commit", name=m1)
    assert go.call("admin.fetchOffsets", name="admin", group=group) == {topic: {str(p): 85 for p in range(4)}}
    go.call("client.close", name=m1)
    go.call("client.close", name=gp)
    wait_until(lambda: go.call("admin.listGroups", name="admin")[group]["state"] == "Empty", 30,
               f"{group} empty after both left")


def test_transactions_commit_abort_and_read_committed(go, cluster):
    topic = "franz-txn"
    create_topic(go, topic, 2)
    client(go, "tp", cluster, transactional_id="franz-tx-1", manual_partitions=True)
    for round_, commit in enumerate((True, False, True)):
        go.call("txn.begin", name="tp")
        sent = go.call("produce", name="tp", topic=topic,
                       records=[{"partition": i % 2, "value": f"r{round_}-{i}"} for i in range(10)])
        assert all("error" not in r for r in sent), sent
        assert go.call("txn.end", name="tp", commit=commit) == {"committed": commit}
    go.call("client.close", name="tp")

    committed = sorted(f"r{r}-{i}" for r in (0, 2) for i in range(10))
    client(go, "rc", cluster, topics=[topic], read_committed=True)
    got = go.call("poll", name="rc", count=20)
    assert values(got["records"]["rc"]) == committed
    client(go, "ru", cluster, topics=[topic])
    got = go.call("poll", name="ru", count=30)
    assert values(got["records"]["ru"]) == sorted(f"r{r}-{i}" for r in range(3) for i in range(10))
    for name in ("rc", "ru"):
        go.call("client.close", name=name)
    # 30 records and 3 markers in 2 partitions; nothing open, so the last stable offset is the end.
    ends = go.call("admin.listEndOffsets", name="admin", topics=[topic])
    assert ends == {topic: {"0": 18, "1": 18}}
    assert go.call("admin.listEndOffsets", name="admin", topics=[topic], committed=True) == ends


def test_group_transact_session_commits_offsets_in_the_transaction(go, cluster):
    source, sink, group = "franz-eos-in", "franz-eos-out", "franz-eos"
    create_topic(go, source, 2)
    create_topic(go, sink, 2)
    client(go, "feed", cluster, manual_partitions=True)

    def feed(first, last):
        sent = go.call("produce", name="feed", topic=source,
                       records=[{"partition": i % 2, "value": f"v{i}"} for i in range(first, last)])
        assert all("error" not in r for r in sent), sent

    go.call("client.create", name="eos", session=True, config={
        "brokers": cluster.bootstrap.split(","), "group": group, "topics": [source],
        "transactional_id": "franz-eos-tx", "manual_partitions": True, "read_committed": True})
    feed(0, 10)
    step = go.call("eos.step", name="eos", output=sink, count=10, commit=True)
    assert step["committed"] and sorted(step["consumed"]) == sorted(f"v{i}" for i in range(10))
    feed(10, 20)
    step = go.call("eos.step", name="eos", output=sink, count=10, commit=False)
    assert not step["committed"] and sorted(step["consumed"]) == sorted(f"v{i}" for i in range(10, 20))
    # Aborted: the session rewinds to the committed offsets and reads the same ten again.
    step = go.call("eos.step", name="eos", output=sink, count=10, commit=True)
    assert step["committed"] and sorted(step["consumed"]) == sorted(f"v{i}" for i in range(10, 20))
    # The commit's markers are written after EndTxn answers (as in Kafka): until the group
    # coordinator has them, OffsetFetch with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT.
    def stable():
        answer = go.request("admin.fetchOffsets", name="admin", group=group, require_stable=True)
        assert answer["ok"] or answer["error"] == "UNSTABLE_OFFSET_COMMIT", answer
        return answer["ok"]
    wait_until(stable, 30, "the transaction's offsets applied")
    assert go.call("admin.fetchOffsets", name="admin", group=group, require_stable=True) == \
        {source: {"0": 10, "1": 10}}
    go.call("client.close", name="eos")
    go.call("client.close", name="feed")

    client(go, "out", cluster, topics=[sink], read_committed=True)
    got = go.call("poll", name="out", count=20)
    assert values(got["records"]["out"]) == sorted(f"v{i}:out" for i in range(20))
    go.call("client.close", name="out")


def test_no_acknowledged_record_is_lost_when_the_leader_is_killed_mid_produce(go, cluster):
    topic = "franz-kill"
    create_topic(go, topic, 1)
    leader = go.call("admin.listTopics", name="admin", topics=[topic])[topic]["partitions"][0]["leader"]
    client(go, "bg", cluster, manual_partitions=True)
    # A consumer reads across the failover too: on the new leader epoch franz-go validates its
    # position with OffsetForLeaderEpoch (KIP-320) before it fetches on.
    client(go, "check", cluster, topics=[topic])
    go.call("produce.start", name="bg", topic=topic, partitions=1, prefix="k")
    wait_until(lambda: go.call("produce.stop", name="bg", progress=True)["acked"] >= 200, 60, "200 acknowledged")
    got = go.call("poll", name="check", count=100)
    assert got["errors"] == []
    read_before = got["records"]["check"]
    assert tidelog_cluster(cluster.directory, "kill", str(leader)).returncode == 0
    before = go.call("produce.stop", name="bg", progress=True)["acked"]
    # Writes go on once a new leader is elected (two in-sync replicas of three are left).
    wait_until(lambda: go.call("produce.stop", name="bg", progress=True)["acked"] >= before + 200, 90,
               "200 more acknowledged after the kill")
    result = go.call("produce.stop", name="bg")
    try:
        assert result["failed"] == [], result["failed"][:5]
        new_leader = go.call("admin.listTopics", name="admin", topics=[topic])[topic]["partitions"][0]["leader"]
        assert new_leader not in (leader, -1)
        acked = {r["value"]: r["offset"] for r in result["acked"]}
        assert len(acked) == len(result["acked"]) == result["sent"]
        got = go.call("poll", name="check", count=len(acked) - len(read_before))
        assert got["errors"] == []
        records = read_before + got["records"]["check"]
        read = {r["value"]: r["offset"] for r in records}
        assert len(read) == len(records)        # each once: idempotence held across the failover
        assert read == acked                    # every acknowledged record, at its offset
    finally:
        go.call("client.close", name="check")
        go.call("client.close", name="bg")
        assert tidelog_cluster(cluster.directory, "restart", str(leader)).returncode == 0


def test_kadm_records_partitions_producers_transactions_and_deletion(go, cluster):
    topic = "franz-life"
    create_topic(go, topic, 2)
    client(go, "life", cluster, manual_partitions=True)
    sent = go.call("produce", name="life", topic=topic, records=[{"partition": i % 2, "value": str(i)}
                                                                 for i in range(20)])
    assert all("error" not in r for r in sent), sent
    producers = go.call("admin.describeProducers", name="admin", partitions={topic: []})
    assert [(p["partition"], p["last_sequence"], p["txn_start"]) for p in producers] == [(0, 9, -1), (1, 9, -1)]
    assert len({p["producer_id"] for p in producers}) == 1

    assert go.call("admin.deleteRecords", name="admin", offsets={topic: {"0": 4}}) == {topic: {"0": 4}}
    assert go.call("admin.deleteRecords", name="admin", offsets={topic: {"1": 100}}) == \
        {topic: {"1": "OFFSET_OUT_OF_RANGE"}}
    assert go.call("admin.listStartOffsets", name="admin", topics=[topic]) == {topic: {"0": 4, "1": 0}}

    assert go.call("admin.updatePartitions", name="admin", topics=[topic], count=4) == {topic: None}
    wait_until(lambda: len(go.call("admin.listTopics", name="admin", topics=[topic])[topic]["partitions"]) == 4,
               30, "four partitions")
    assert go.call("admin.updatePartitions", name="admin", topics=[topic], count=3) == {topic: "INVALID_PARTITIONS"}

    client(go, "life-tx", cluster, transactional_id="franz-life-tx", manual_partitions=True)
    go.call("txn.begin", name="life-tx")
    assert "error" not in go.call("produce", name="life-tx", topic=topic,
                                  records=[{"partition": 3, "value": "open"}])[0]
    listed = go.call("admin.listTransactions", name="admin", describe=["franz-life-tx"])
    assert listed["franz-life-tx"]["state"] == "Ongoing"
    described = listed["describe:franz-life-tx"]
    assert (described["state"], described["topics"], described["error"]) == ("Ongoing", {topic: [3]}, None)
    assert described["timeout_ms"] == 60_000
    open_ = [p for p in go.call("admin.describeProducers", name="admin", partitions={topic: [3]})]
    assert [(p["producer_id"], p["txn_start"]) for p in open_] == [(described["producer_id"], 0)]
    go.call("txn.end", name="life-tx", commit=True)
    wait_until(lambda: go.call("admin.listTransactions", name="admin")["franz-life-tx"]["state"] == "CompleteCommit",
               30, "the transaction complete")
    go.call("client.close", name="life-tx")
    go.call("client.close", name="life")

    client(go, "life-member", cluster, group="franz-life-group", topics=[topic])
    go.call("poll", name="life-member", count=17)
    go.call("commit", name="life-member")
    go.call("client.close", name="life-member")
    wait_until(lambda: go.call("admin.listGroups", name="admin")["franz-life-group"]["state"] == "Empty", 30,
               "the group empty")
    assert go.call("admin.deleteGroups", name="admin", groups=["franz-life-group"]) == {"franz-life-group": None}
    assert "franz-life-group" not in go.call("admin.listGroups", name="admin")
    assert go.call("admin.deleteGroups", name="admin", groups=["franz-life-group"]) == \
        {"franz-life-group": "GROUP_ID_NOT_FOUND"}

    assert go.call("admin.deleteTopics", name="admin", topics=[topic]) == {topic: None}
    wait_until(lambda: topic not in go.call("admin.listTopics", name="admin"), 30, f"{topic} gone")
    assert go.call("admin.deleteTopics", name="admin", topics=[topic]) == {topic: "UNKNOWN_TOPIC_OR_PARTITION"}


def test_a_static_member_restarts_without_a_rebalance(go, cluster):
    """KIP-345: a member with a group.instance.id closes without LeaveGroup; the same
    instance id back within the session timeout gets its partitions again, and the group
    keeps its generation."""
    topic, group = "franz-static", "franz-static"
    create_topic(go, topic, 4)
    client(go, "sp", cluster, manual_partitions=True)

    def send(first, last):
        sent = go.call("produce", name="sp", topic=topic,
                       records=[{"partition": i % 4, "value": str(i)} for i in range(first, last)])
        assert all("error" not in r for r in sent), sent

    member = {"topics": [topic], "group": group, "balancer": "range", "session_timeout_ms": 30_000}
    client(go, "s1", cluster, instance_id="static-a", **member)
    wait_assignment(go, ["s1"], topic, [4])
    client(go, "s2", cluster, instance_id="static-b", **member)
    wait_assignment(go, ["s1", "s2"], topic, [2, 2])
    send(0, 40)
    got = go.call("poll", names=["s1", "s2"], count=40)
    assert values(got["records"]["s1"] + got["records"]["s2"]) == sorted(str(i) for i in range(40))
    for name in ("s1", "s2"):
        go.call("commit", name=name)
    generation = go.call("assignment", name="s1")["generation"]
    held = go.call("assignment", name="s2")["assigned"][topic]

    go.call("client.close", name="s2")       # no LeaveGroup: the member stays
    described = go.call("admin.describeGroups", name="admin", groups=[group])[group]
    assert described["state"] == "Stable" and len(described["members"]) == 2
    client(go, "s2-again", cluster, instance_id="static-b", **member)
    wait_assignment(go, ["s1", "s2-again"], topic, [2, 2])
    assert go.call("assignment", name="s2-again")["assigned"][topic] == held
    assert go.call("assignment", name="s1")["generation"] == generation
    # s1 saw two assignments (all four, then its two when s2 first joined) and one revocation.
    kinds = [event.split()[0] for event in go.call("assignment", name="s1")["events"]]
    assert (kinds.count("assigned"), kinds.count("revoked"), kinds.count("lost")) == (6, 4, 0)
    send(40, 80)
    got = go.call("poll", names=["s1", "s2-again"], count=40)
    assert values(got["records"]["s1"] + got["records"]["s2-again"]) == sorted(str(i) for i in range(40, 80))
    for name in ("s1", "s2-again", "sp"):
        go.call("client.close", name=name)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_regex_subscription_picks_up_a_topic_created_later(go, cluster, protocol):
    """franz-go's ConsumeRegex: the classic protocol matches on the client (from metadata);
    KIP-848 sends the pattern (SubscribedTopicRegex) and the broker resolves it."""
    prefix = f"franz-rx-{protocol}"
    create_topic(go, f"{prefix}-a", 2)
    create_topic(go, f"{prefix}-unrelated", 1)      # not matched
    # The classic protocol sees a new topic at its next metadata refresh (5 min by default).
    member = {"topics": [f"{prefix}-[ab]"], "regex": True, "group": prefix, "metadata_max_age_ms": 5000}
    if protocol == "consumer":
        member |= {"server_side_balancer": True, "balancer": "range"}
    client(go, f"rx-{protocol}", cluster, **member)
    client(go, f"rxp-{protocol}", cluster, manual_partitions=True)
    for topic in (f"{prefix}-a", f"{prefix}-unrelated"):
        sent = go.call("produce", name=f"rxp-{protocol}", topic=topic,
                       records=[{"partition": 0, "value": f"{topic}-{i}"} for i in range(5)])
        assert all("error" not in r for r in sent), sent
    got = go.call("poll", name=f"rx-{protocol}", count=5)["records"][f"rx-{protocol}"]
    assert values(got) == sorted(f"{prefix}-a-{i}" for i in range(5))
    create_topic(go, f"{prefix}-b", 1)
    wait_until(lambda: f"{prefix}-b" in go.call("assignment", name=f"rx-{protocol}")["assigned"], 60,
               f"{prefix}-b assigned")
    sent = go.call("produce", name=f"rxp-{protocol}", topic=f"{prefix}-b",
                   records=[{"partition": 0, "value": f"b-{i}"} for i in range(5)])
    assert all("error" not in r for r in sent), sent
    got = go.call("poll", name=f"rx-{protocol}", count=5)["records"][f"rx-{protocol}"]
    assert values(got) == sorted(f"b-{i}" for i in range(5))
    assert set(go.call("assignment", name=f"rx-{protocol}")["assigned"]) == {f"{prefix}-a", f"{prefix}-b"}
    go.call("client.close", name=f"rx-{protocol}")
    go.call("client.close", name=f"rxp-{protocol}")


# ------------------------------------------------------------------ --secure


@pytest.fixture(scope="module")
def secure(tmp_path_factory, go):
    up = UpCluster(tmp_path_factory.mktemp("franz-go-secure"), secure=True)
    security = up.directory / "security"
    # librdkafka's names, which the driver reads (franz-go has no settings file of its own).
    up.client = parse_properties((security / "client.properties").read_text())
    up.admin = parse_properties((security / "admin.properties").read_text())
    try:
        yield up
    finally:
        up.down()


def test_sasl_ssl_scram_and_plain_with_acls(go, secure):
    brokers = secure.bootstrap.split(",")
    assert (secure.client["sasl.mechanism"], secure.admin["sasl.mechanism"]) == ("SCRAM-SHA-512", "PLAIN")
    go.call("client.create", name="sec-admin", config={"brokers": brokers, **secure.admin})
    created = go.call("admin.createTopics", name="sec-admin", topics=[{"name": "franz-secure", "partitions": 2,
                                                                      "replication_factor": 3}])
    assert created == {"franz-secure": {"partitions": 2, "replication_factor": 3}}

    go.call("client.create", name="sec-client", config={"brokers": brokers, **secure.client, "compression": "zstd",
                                                        "manual_partitions": True})
    # The client user may create a topic (TOPIC CREATE) but not delete one: Kafka's refusal, per topic.
    assert go.call("admin.createTopics", name="sec-client", topics=[{"name": "franz-secure-2", "partitions": 1,
                                                                    "replication_factor": 3}]) == \
        {"franz-secure-2": {"partitions": 1, "replication_factor": 3}}
    assert go.call("admin.deleteTopics", name="sec-client", topics=["franz-secure-2"]) == \
        {"franz-secure-2": "TOPIC_AUTHORIZATION_FAILED"}
    sent = go.call("produce", name="sec-client", topic="franz-secure",
                   records=[{"partition": i % 2, "value": f"s{i}", "headers": [["h", "v"]]} for i in range(40)])
    assert all("error" not in r for r in sent), sent

    go.call("client.create", name="sec-tx", config={"brokers": brokers, **secure.client,
                                                    "transactional_id": "franz-secure-tx", "manual_partitions": True})
    for round_, commit in enumerate((True, False)):
        go.call("txn.begin", name="sec-tx")
        sent = go.call("produce", name="sec-tx", topic="franz-secure",
                       records=[{"partition": 0, "value": f"t{round_}-{i}"} for i in range(5)])
        assert all("error" not in r for r in sent), sent
        go.call("txn.end", name="sec-tx", commit=commit)

    go.call("client.create", name="sec-member", config={"brokers": brokers, **secure.client, "group": "franz-sec",
                                                        "topics": ["franz-secure"], "read_committed": True})
    got = go.call("poll", name="sec-member", count=45)
    assert values(got["records"]["sec-member"]) == sorted([f"s{i}" for i in range(40)] +
                                                          [f"t0-{i}" for i in range(5)])
    assert all(r["headers"] == [["h", "v"]] for r in got["records"]["sec-member"] if r["value"].startswith("s"))
    go.call("commit", name="sec-member")
    # Partition 0: 20 records, then t0's 5 (offsets 20-24); the commit is after the last one read.
    assert go.call("admin.fetchOffsets", name="sec-admin", group="franz-sec") == {"franz-secure": {"0": 25, "1": 20}}
    for name in ("sec-member", "sec-tx", "sec-client", "sec-admin"):
        go.call("client.close", name=name)

    # A wrong password: SASL_AUTHENTICATION_FAILED, at once.
    go.call("client.create", name="sec-wrong", config={"brokers": brokers, **secure.client,
                                                       "sasl.password": "not-the-password"})
    answer = go.request("admin.listTopics", name="sec-wrong", timeout_ms=20_000)
    assert not answer["ok"] and answer["error"] == "SASL_AUTHENTICATION_FAILED", answer
    go.call("client.close", name="sec-wrong")
