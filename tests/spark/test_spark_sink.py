"""The tidelog sink in real Spark: round trips, and a replayed micro-batch."""

import os
from collections import Counter

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from tidelog.spark.producer import partition_for_key
from tidelog.spark.sink import MARKER_HEADER

INPUT = StructType([
    StructField("key", StringType()), StructField("value", StringType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])


def read_back(spark, broker, topic):
    return (spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load())


def test_batch_write_round_trips_every_column(spark, broker, admin):
    admin.create("sink-a", partitions=3)
    admin.create("sink-b", partitions=2)
    rows = [("k1", "v1", "sink-a", 2, [("h", b"x"), ("h", None)]),
            (None, "v2", "sink-a", 0, None),
            ("k3", None, "sink-b", 1, []),
            ("k4", "v4", "sink-b", None, None)]   # no partition: murmur2 of the key
    df = spark.createDataFrame(rows, INPUT)
    df.write.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    got = sorted((r.topic, r.partition, r.key, r.value, [(h.key, h.value) for h in r.headers or []])
                 for r in read_back(spark, broker, "sink-a").union(read_back(spark, broker, "sink-b")).collect())
    assert got == sorted([
        ("sink-a", 2, b"k1", b"v1", [("h", b"x"), ("h", None)]), ("sink-a", 0, None, b"v2", []),
        ("sink-b", 1, b"k3", None, []), ("sink-b", partition_for_key(b"k4", 2), b"k4", b"v4", [])])


def test_the_topic_option_overrides_the_column_and_bad_input_is_refused(spark, broker, admin):
    admin.create("sink-option")
    df = spark.createDataFrame([("k", "v", "elsewhere", None, None)], INPUT)
    df.write.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", "sink-option").mode("append").save()
    assert [r.value for r in read_back(spark, broker, "sink-option").collect()] == [b"v"]
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.range(3).selectExpr("'t' AS topic").write.format("tidelog") \
            .option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    with pytest.raises(Exception, match="partition 7 is out of range"):
        spark.createDataFrame([("k", "v", "sink-option", 7, None)], INPUT).write.format("tidelog") \
            .option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()


def test_save_modes_are_spark_kafka_sinks(spark, broker, admin):
    """Append works; Overwrite is refused naming .mode("append"), and nothing is written;
    Spark itself refuses the default mode (ErrorIfExists) for Python data sources."""
    admin.create("sink-modes")
    df = spark.createDataFrame([("k", "v", None, None, None)], INPUT)

    def writer():                                 # DataFrameWriter.mode() changes the writer itself
        return df.write.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", "sink-modes")
    with pytest.raises(Exception, match=r'use \.mode\("append"\)'):
        writer().mode("overwrite").save()
    with pytest.raises(Exception, match="ErrorIfExists"):
        writer().save()
    assert read_back(spark, broker, "sink-modes").count() == 0
    writer().mode("append").save()
    assert [r.value for r in read_back(spark, broker, "sink-modes").collect()] == [b"v"]


def run_pipeline(spark, broker, source_topic, sink_topic, checkpoint, idempotent="true", transactional="false"):
    query = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", source_topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "20").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", sink_topic).option("idempotentWrites", idempotent)
             .option("transactional", transactional)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None


def forget_last_commit(checkpoint) -> int:
    """Make Spark re-run its last micro-batch, as after a crash between the sink's write and
    the commit log entry: delete commits/N."""
    commits = os.path.join(str(checkpoint), "commits")
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    return last


@pytest.mark.parametrize("idempotent", ["true", "false"])
def test_a_replayed_micro_batch_is_not_written_twice(spark, broker, admin, tmp_path, idempotent):
    source, sink = admin.create(f"pipe-in-{idempotent}", partitions=2), admin.create(f"pipe-out-{idempotent}")
    for partition in range(2):
        admin.produce(source, partition, [b"p%d-%02d" % (partition, i) for i in range(30)], key=b"k%d" % partition)
    expected = Counter(b"P%d-%02d" % (p, i) for p in range(2) for i in range(30))
    checkpoint = tmp_path / "ck"
    run_pipeline(spark, broker, source, sink, checkpoint, idempotent)
    first = admin.records(sink, 0)
    assert Counter(r.value for r in first) == expected
    if idempotent == "true":
        assert all(r.headers[-1][0] == MARKER_HEADER for r in first)

    replayed = forget_last_commit(checkpoint)   # the last batch (20 records) runs again
    assert replayed == 2
    for partition in range(2):                   # and new data arrives meanwhile
        admin.produce(source, partition, [b"p%d-new" % partition])
    run_pipeline(spark, broker, source, sink, checkpoint, idempotent)
    expected.update([b"P0-NEW", b"P1-NEW"])
    got = Counter(r.value for r in admin.records(sink, 0))
    if idempotent == "true":
        assert got == expected
    else:   # at least once: the replayed batch's 20 records are there twice
        assert sum(got.values()) == sum(expected.values()) + 20 and set(got) == set(expected)


def read_committed_values(spark, broker, topic: str) -> list[bytes]:
    rows = (spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load().collect())
    return [r.value for r in rows]


def test_transactional_writes_are_exactly_once_across_a_replay_and_an_unfinished_attempt(
        spark, broker, admin, tmp_path):
    """transactional=true: a replayed micro-batch writes nothing new; an earlier attempt
    left open (its transaction never committed) is aborted by the next attempt and its
    records never reach read_committed readers."""
    from tidelog.records import SimpleRecord
    from tidelog.spark.options import sink_options
    from tidelog.spark.producer import Producer
    from tidelog.spark.transactions import Transaction
    from tidelog.spark.wire import Cluster
    source, sink = admin.create("txn-pipe-in", partitions=2), admin.create("txn-pipe-out")
    for partition in range(2):
        admin.produce(source, partition, [b"p%d-%02d" % (partition, i) for i in range(30)], key=b"k%d" % partition)
    expected = Counter(b"P%d-%02d" % (p, i) for p in range(2) for i in range(30))
    checkpoint = tmp_path / "ck"
    run_pipeline(spark, broker, source, sink, checkpoint, idempotent="false", transactional="true")
    assert Counter(read_committed_values(spark, broker, sink)) == expected
    first_offsets = admin.latest(sink, 0)

    replayed = forget_last_commit(checkpoint)          # the last micro-batch runs again
    query_id = open(os.path.join(str(checkpoint), "metadata")).read()
    query_id = __import__("json").loads(query_id)["id"]
    # A zombie attempt of the replayed batch's task 0 writes without committing.
    options = sink_options({"kafka.bootstrap.servers": broker.bootstrap}, streaming=True)
    cluster = Cluster(options.client)
    zombie = Transaction(cluster, f"tidelog-spark-{query_id}-0", 60_000)
    zombie.init()
    producer = Producer(cluster, options, exactly_once_attempts=False, transaction=zombie)
    producer.append((sink, 0), SimpleRecord(b"ZOMBIE"))
    producer.flush()
    for partition in range(2):
        admin.produce(source, partition, [b"p%d-new" % partition])
    run_pipeline(spark, broker, source, sink, checkpoint, idempotent="false", transactional="true")
    cluster.close()
    expected.update([b"P0-NEW", b"P1-NEW"])
    assert replayed == 2
    assert Counter(read_committed_values(spark, broker, sink)) == expected
    assert admin.latest(sink, 0) > first_offsets + 2    # the zombie's record and markers are in the log
