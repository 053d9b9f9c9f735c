"""The tidelog source in real Spark (local[2]) against a real broker."""

import json
import os
import time

import pytest

import tidelog.testing
from tidelog.protocol.api_keys import ApiKey
from tidelog.spark.wire import EARLIEST

from .conftest import Admin

T0 = 1_700_000_000_000


def source(spark, broker, **options):
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def stream(spark, broker, **options):
    reader = spark.readStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(df, checkpoint) -> list[tuple[int, list]]:
    """Run to the end with Trigger.AvailableNow; (batch id, sorted (topic, partition, offset, value)) per batch."""
    batches = []

    def collect(batch_df, batch_id):
        rows = sorted((r.topic, r.partition, r.offset, r.value) for r in batch_df.collect())
        batches.append((batch_id, rows))
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert not query.isActive
    return batches


def last_checkpoint_offsets(checkpoint) -> dict:
    directory = os.path.join(str(checkpoint), "offsets")
    last = max(int(name) for name in os.listdir(directory) if name.isdigit())
    with open(os.path.join(directory, str(last))) as f:
        return json.loads(f.read().splitlines()[-1])


def test_batch_read_is_exactly_the_committed_range(spark, broker, admin):
    topic = admin.create("orders", partitions=2)
    admin.produce(topic, 0, [b"a%d" % i for i in range(7)], key=b"ka", headers=[("h", b"1")], timestamp_ms=T0)
    admin.produce(topic, 1, [b"b%d" % i for i in range(5)], timestamp_ms=T0 + 1000)
    assert (admin.latest(topic, 0), admin.latest(topic, 1)) == (7, 5)   # high watermarks

    rows = source(spark, broker, subscribe=topic, includeHeaders="true").collect()
    assert sorted((r.partition, r.offset, r.key, r.value) for r in rows) == \
        [(0, i, b"ka", b"a%d" % i) for i in range(7)] + [(1, i, None, b"b%d" % i) for i in range(5)]
    first = min(rows, key=lambda r: (r.partition, r.offset))
    assert first.topic == topic and first.timestampType == 0
    assert [(h.key, h.value) for h in first.headers] == [("h", b"1")]
    millis = source(spark, broker, subscribe=topic).selectExpr("partition", "unix_millis(timestamp) AS ms").distinct()
    assert sorted(tuple(r) for r in millis.collect()) == [(0, T0), (1, T0 + 1000)]

    ranged = source(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
                    endingOffsets=json.dumps({topic: {"0": 5, "1": -1}}))
    assert sorted((r.partition, r.offset) for r in ranged.collect()) == \
        [(0, 2), (0, 3), (0, 4)] + [(1, i) for i in range(5)]
    by_time = source(spark, broker, assign=json.dumps({topic: [1]}), startingTimestamp=str(T0 + 500))
    assert by_time.count() == 5
    split = source(spark, broker, subscribe=topic, minPartitions="6")
    assert split.rdd.getNumPartitions() >= 6 and split.count() == 12


def test_batch_read_refuses_ranges_it_cannot_read(spark, broker, admin):
    topic = admin.create("refused")
    admin.produce(topic, 0, [b"x"] * 3)
    with pytest.raises(Exception, match="beyond its high watermark 3"):
        source(spark, broker, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 10}})).collect()
    with pytest.raises(Exception, match="must name every subscribed partition"):
        source(spark, broker, subscribe=f"{topic},orders", startingOffsets=json.dumps({topic: {"0": 0}})).collect()
    with pytest.raises(Exception, match="do not exist"):
        source(spark, broker, subscribe="no-such-topic").collect()


def test_empty_topics_and_patterns_that_match_nothing_read_nothing(spark, broker, admin):
    empty = admin.create("empty", partitions=2)
    assert source(spark, broker, subscribe=empty).count() == 0
    assert source(spark, broker, subscribePattern="matches-nothing-.*").count() == 0


def test_available_now_reads_everything_in_batches_of_max_offsets_per_trigger(spark, broker, admin, tmp_path):
    topic = admin.create("clicks", partitions=2)
    admin.produce(topic, 0, [b"p0-%d" % i for i in range(50)])
    admin.produce(topic, 1, [b"p1-%d" % i for i in range(30)])
    batches = run_available_now(stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                                       maxOffsetsPerTrigger="20"), tmp_path / "ck")
    assert [len(rows) for _, rows in batches] == [20, 20, 20, 20]
    got = [row for _, rows in batches for row in rows]
    assert sorted(got) == sorted([(topic, 0, i, b"p0-%d" % i) for i in range(50)] +
                                 [(topic, 1, i, b"p1-%d" % i) for i in range(30)])
    assert batches[0][1][:1] == [(topic, 0, 0, b"p0-0")] and (topic, 1, 0, b"p1-0") in batches[0][1]
    assert last_checkpoint_offsets(tmp_path / "ck") == {topic: {"0": 50, "1": 30}}


def test_restarts_from_the_checkpoint_read_nothing_twice_and_miss_nothing(spark, broker, admin, tmp_path):
    topic = admin.create("events", partitions=2)
    produced = []

    def produce(n):
        for i in range(n):
            value = b"e%04d" % len(produced)
            admin.produce(topic, len(produced) % 2, [value])
            produced.append(value)
    produce(40)
    checkpoint = tmp_path / "ck"
    first = run_available_now(stream(spark, broker, subscribe=topic, startingOffsets="earliest"), checkpoint)
    assert sorted(r[3] for _, rows in first for r in rows) == produced
    produce(25)   # arrives while the query is down
    second = run_available_now(stream(spark, broker, subscribe=topic, startingOffsets="earliest"), checkpoint)
    assert sorted(r[3] for _, rows in second for r in rows) == produced[40:]

    live = []   # a continuously running query, with data arriving while it runs
    query = stream(spark, broker, subscribe=topic).writeStream \
        .foreachBatch(lambda df, batch_id: live.append((batch_id, sorted(r.value for r in df.collect())))) \
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start()
    try:
        for _ in range(3):
            produce(10)
            deadline = time.monotonic() + 60
            while 65 + sum(len(values) for _, values in live) < len(produced) and time.monotonic() < deadline:
                time.sleep(0.2)
        produce(7)   # may or may not be read before the stop
    finally:
        query.stop()
    produce(5)
    last = run_available_now(stream(spark, broker, subscribe=topic), checkpoint)
    # foreachBatch is at least once: stop() may interrupt a batch after collect() and
    # before its commit, and the next run replays that batch id, with the same offsets.
    by_batch: dict[int, list] = {}
    for batch_id, values in [(b, sorted(r[3] for r in rows)) for b, rows in first + second] + live + \
            [(b, sorted(r[3] for r in rows)) for b, rows in last]:
        assert by_batch.setdefault(batch_id, values) == values, f"batch {batch_id} replayed with other records"
    everything = [value for values in by_batch.values() for value in values]
    assert sorted(everything) == produced, "each record in exactly one micro-batch across four runs of the query"


def test_new_partitions_are_discovered_between_batches(spark, broker, admin, tmp_path):
    first = admin.create("disc-a")
    admin.produce(first, 0, [b"a0", b"a1"])
    df = stream(spark, broker, subscribePattern="disc-.*", startingOffsets="earliest")
    assert [r for _, rows in run_available_now(df, tmp_path / "ck") for r in rows] == \
        [(first, 0, 0, b"a0"), (first, 0, 1, b"a1")]
    second = admin.create("disc-b", partitions=2)          # a new topic matching the pattern
    admin.produce(second, 1, [b"b0", b"b1"])
    admin.add_partitions(first, 2)                           # a new partition of a known topic
    admin.produce(first, 1, [b"a-new"])
    admin.produce(first, 0, [b"a2"])
    got = sorted(r for _, rows in run_available_now(df, tmp_path / "ck") for r in rows)
    assert got == [(first, 0, 2, b"a2"), (first, 1, 0, b"a-new"), (second, 1, 0, b"b0"), (second, 1, 1, b"b1")]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_deleted_records_fail_the_query_or_are_skipped(spark, broker, admin, tmp_path, fail_on_data_loss):
    topic = admin.create(f"retained-{fail_on_data_loss}")
    admin.produce(topic, 0, [b"%d" % i for i in range(10)])
    df = stream(spark, broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail_on_data_loss)
    assert len(run_available_now(df, tmp_path / "ck")[0][1]) == 10
    admin.produce(topic, 0, [b"%d" % i for i in range(10, 30)])
    admin.delete_records(topic, 0, 25)    # offsets 10..24 go before the query reads them
    assert admin.cluster.list_offsets({(topic, 0): EARLIEST})[(topic, 0)] == 25
    if fail_on_data_loss == "true":
        with pytest.raises(Exception, match=r"data loss: offsets \[10, 25\) of retained-true-0 were deleted"):
            run_available_now(df, tmp_path / "ck")
    else:
        rows = [r for _, rows in run_available_now(df, tmp_path / "ck") for r in rows]
        assert [r[2] for r in rows] == list(range(25, 30))


FAST_FAILOVER = {"broker.session.timeout.ms": "2000", "broker.heartbeat.interval.ms": "300",
                 "replica.lag.time.max.ms": "3000"}


def _replica_log_ends(admin, topic) -> list[int]:
    """Every replica's log end offset (ListOffsets as Kafka's debugging replica, -2)."""
    metadata = admin.cluster.any_connection().request(ApiKey.METADATA, {
        "topics": [{"name": topic}], "allow_auto_topic_creation": False})
    ends = []
    for p in metadata.topics[0].partitions:
        for node in p.replica_nodes:
            try:
                response = admin.cluster.connection(int(node)).request(ApiKey.LIST_OFFSETS, {
                    "replica_id": -2, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                        {"partition_index": p.partition_index, "timestamp": -1, "current_leader_epoch": -1}]}]})
                ends.append(int(response.topics[0].partitions[0].offset))
            except Exception:
                ends.append(-1)
    return ends


def _wait_until_replicated(admin, topic, partitions, replicas) -> bool:
    for partition in range(partitions):
        admin.produce(topic, partition, [b"probe"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if _replica_log_ends(admin, topic) == [1] * (partitions * replicas):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(not hasattr(tidelog.testing, "Cluster"),
                    reason="needs tidelog.testing.Cluster (a multi-broker cluster)")
def test_a_leader_change_during_a_streaming_read_loses_and_duplicates_nothing(request, tmp_path):
    with tidelog.testing.Cluster(brokers=3, overrides=FAST_FAILOVER) as cluster:
        admin = Admin(cluster.bootstrap)
        topic = admin.create("failover", partitions=2, replication_factor=3)
        if not _wait_until_replicated(admin, topic, partitions=2, replicas=3):
            admin.cluster.close()
            pytest.skip("this tidelog cluster does not replicate yet: followers never got the records "
                        "(multi-broker replication lands in a later issue)")
        spark = request.getfixturevalue("spark")
        produced = [b"probe"] * 2 + [b"f%04d" % i for i in range(600)]
        for i in range(2, 402, 20):
            admin.produce(topic, (i // 20) % 2, produced[i:i + 20])
        seen = []
        query = stream(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="40") \
            .writeStream.foreachBatch(lambda df, _: seen.extend(r.value for r in df.collect())) \
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="100 milliseconds").start()
        try:
            while len(seen) < 120 and query.isActive:
                time.sleep(0.1)
            killed, seen_at_kill = admin.cluster.leader(topic, 0), len(seen)
            cluster.kill(killed)
            admin.cluster.forget()
            for i in range(402, 602, 20):   # more data, written to the new leaders
                admin.produce(topic, (i // 20) % 2, produced[i:i + 20])
            deadline = time.monotonic() + 120
            while len(seen) < len(produced) and time.monotonic() < deadline and query.isActive:
                time.sleep(0.2)
            admin.cluster.forget()
            new_leader = admin.cluster.leader(topic, 0)
        finally:
            query.stop()
            admin.cluster.close()
        assert seen_at_kill < 400 and new_leader not in (killed, -1), "the leader changed mid-read"
        assert sorted(seen) == sorted(produced)


def test_read_committed_skips_aborted_transactions_and_stops_at_an_open_one(spark, broker, admin):
    """kafka.isolation.level=read_committed: committed transactions' records, never
    aborted ones, nothing from the first open transaction on; read_uncommitted reads
    everything up to the high watermark."""
    from confluent_kafka import Producer
    topic = admin.create("txn-orders", partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-source-txn"})
    producer.init_transactions(30)
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{label}-{i}".encode(), partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    still_open = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-source-open"})
    still_open.init_transactions(30)
    still_open.begin_transaction()
    still_open.produce(topic, b"open-0", partition=0)
    still_open.flush(30)
    committed = source(spark, broker, subscribe=topic, **{"kafka.isolation.level": "read_committed"}).collect()
    assert [r.value for r in sorted(committed, key=lambda r: r.offset)] == \
        [f"{label}-{i}".encode() for label in ("c1", "c2") for i in range(3)]
    everything = source(spark, broker, subscribe=topic).collect()
    assert sorted(r.value for r in everything) == sorted(
        [f"{label}-{i}".encode() for label in ("c1", "a1", "c2") for i in range(3)] + [b"open-0"])
    still_open.abort_transaction(30)


def test_the_source_function_holds_the_keys_the_streaming_runner_writes(spark):
    """Spark's PythonStreamingSourceRunner puts four keys into the environment map of the
    data source's function whenever a query's source starts — one map for every query,
    no lock, no copy; two queries starting at once could race a new key's insertion and
    leave a map whose size outgrows its entries (tasks then failed on the executors with
    OptionalDataException, seen in the standalone-cluster test). Registration puts the
    keys there first, so the runners only replace values; the session's own environment
    is left as it was."""
    from tidelog.spark import _STREAMING_RUNNER_ENV, TidelogDataSource, register_class

    class Fresh(TidelogDataSource):            # a function no query has started from yet
        @classmethod
        def name(cls):
            return "tidelog_fresh"

    register_class(spark, Fresh)
    function = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("tidelog_fresh").dataSourceCls()
    environment = function.envVars()
    assert all(environment.containsKey(key) for key in _STREAMING_RUNNER_ENV)
    assert not set(_STREAMING_RUNNER_ENV) & set(spark.sparkContext.environment)
