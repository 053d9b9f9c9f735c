"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10, a JVM jar
resolved by ``make java-interop`` from interop/spark-kafka/pom.xml) against a real
``tidelog serve``: what a Spark user runs before trying tidelog's own data source. A
batch read with headers and offset ranges, a batch write with a partition column, and a
stream from one topic into another with a checkpoint."""

from __future__ import annotations

import json

import pytest

from .spark_processes import spark_kafka_jars

pytestmark = pytest.mark.skipif(not spark_kafka_jars(), reason="Spark's Kafka connector is not resolved "
                                "(make java-interop resolves interop/spark-kafka)")


def kafka_read(spark, broker, **options):
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_the_kafka_connector_reads_every_record_tidelog_holds(spark, broker, admin):
    topic = admin.create("connector-read", partitions=3)
    expected = []
    for p in range(3):
        values = [f"{p}-{i}".encode() for i in range(200 + p)]
        admin.produce(topic, p, values, key=b"k%d" % p, headers=[("h", b"x")])
        expected += [(topic, p, i, b"k%d" % p, value, [("h", b"x")]) for i, value in enumerate(values)]
    rows = kafka_read(spark, broker, subscribe=topic, includeHeaders="true").collect()
    assert sorted((r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value),
                   [(h.key, bytes(h.value)) for h in r.headers]) for r in rows) == sorted(expected)

    ranged = kafka_read(spark, broker, subscribe=topic,
                        startingOffsets=json.dumps({topic: {"0": 50, "1": -2, "2": -2}}),
                        endingOffsets=json.dumps({topic: {"0": 60, "1": -1, "2": 5}}))
    offsets = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(50, 60)] + [(1, o) for o in range(201)] + [(2, o) for o in range(5)]


def test_the_kafka_connector_writes_to_tidelog(spark, broker, admin):
    topic = admin.create("connector-write", partitions=2)
    rows = [(f"k{i}", f"v{i}", i % 2) for i in range(100)]
    (spark.createDataFrame(rows, "key string, value string, partition int")
     .write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save())
    got = sorted((p, record.key, record.value) for p in range(2) for record in admin.records(topic, p))
    assert got == sorted((p, k.encode(), v.encode()) for k, v, p in rows)


def test_a_kafka_connector_stream_copies_one_topic_into_another(spark, broker, admin, tmp_path):
    source, sink = admin.create("connector-in", partitions=2), admin.create("connector-out", partitions=2)
    for p in range(2):
        admin.produce(source, p, [f"{p}-{i}".encode() for i in range(50)])
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "partition")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the stream did not finish"
    finally:
        query.stop()
    got = sorted((p, record.value) for p in range(2) for record in admin.records(sink, p))
    assert got == sorted((p, f"{p}-{i}".upper().encode()) for p in range(2) for i in range(50))
