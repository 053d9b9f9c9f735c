"""The tidelog source and sink through Spark Connect.

A Spark Connect server (``SparkConnectServer``, spark-submit'ed as a separate
process, local[2]) runs the queries; this process is only a Connect client
(``SparkSession.builder.remote("sc://…")``, gRPC). ``tidelog.spark.register``
sends the data source class to the server, whose Python workers (this
interpreter, ``spark.pyspark.python``) import tidelog and run it.
"""

import os
from collections import Counter

import pytest

from tidelog.spark import register

from .conftest import stop_shared_spark
from .spark_processes import ConnectServer, java_missing

pytestmark = pytest.mark.skipif(java_missing() is not None, reason=java_missing() or "")
pytest.importorskip("grpc", reason="Spark Connect's client needs grpcio (pip install 'tidelog[spark]')")

_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@pytest.fixture(scope="module")
def remote():
    from pyspark.sql import SparkSession
    before = {name: os.environ.get(name) for name in _CONNECT_ENV}
    stop_shared_spark()   # a classic session of an earlier module would refuse the Connect client
    with ConnectServer() as server:
        session = SparkSession.builder.remote(server.url).getOrCreate()
        try:
            register(session)
            yield session
        finally:
            session.stop()
            # The client marks the whole process as Connect mode; the other tests
            # in this process use a classic local session.
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def test_the_session_is_a_connect_client(remote):
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    assert isinstance(remote, ConnectSession)


def test_batch_read_through_connect_is_exactly_the_committed_range(remote, broker, admin):
    topic = admin.create("connect-read", partitions=2)
    admin.produce(topic, 0, [b"a%d" % i for i in range(30)], key=b"k")
    admin.produce(topic, 1, [b"b%d" % i for i in range(20)])
    df = (remote.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("startingOffsets", '{"connect-read": {"0": 5, "1": -2}}')
          .option("endingOffsets", '{"connect-read": {"0": 25, "1": -1}}').load())
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType"]
    rows = sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())
    assert rows == [(0, i, b"k", b"a%d" % i) for i in range(5, 25)] + [(1, i, None, b"b%d" % i) for i in range(20)]


def test_batch_write_through_connect_appends_every_row(remote, broker, admin):
    topic = admin.create("connect-write")
    df = remote.createDataFrame([(f"k{i % 3}", f"v{i}") for i in range(40)], "key string, value string")
    df.write.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic) \
        .mode("append").save()
    assert Counter((r.key, r.value) for r in admin.records(topic, 0)) == \
        Counter((f"k{i % 3}".encode(), f"v{i}".encode()) for i in range(40))


def run_upper_pipeline(remote, broker, source, sink, checkpoint):
    """tidelog -> upper(value) -> tidelog, Trigger.AvailableNow, 15 offsets per micro-batch."""
    query = (remote.readStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "15")
             .load().selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None


def test_a_streaming_pipeline_through_connect_writes_each_record_once_across_restarts(
        remote, broker, admin, tmp_path):
    source, sink = admin.create("connect-in", partitions=2), admin.create("connect-out")
    for partition in range(2):
        admin.produce(source, partition, [b"p%d-%02d" % (partition, i) for i in range(20)])
    checkpoint = str(tmp_path / "ck")   # the server's file system: the same machine
    run_upper_pipeline(remote, broker, source, sink, checkpoint)
    batches = sorted(int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit())
    assert batches == [0, 1, 2]                     # 40 records, 15 per micro-batch
    for partition in range(2):                      # more arrives while the query is down
        admin.produce(source, partition, [b"p%d-new" % partition])
    run_upper_pipeline(remote, broker, source, sink, checkpoint)
    expected = Counter([b"P%d-%02d" % (p, i) for p in range(2) for i in range(20)] + [b"P0-NEW", b"P1-NEW"])
    assert Counter(r.value for r in admin.records(sink, 0)) == expected
