"""Shared fixtures for the Spark data source tests.

One classic SparkSession (local[2], UI off, loopback only) serves every module
that a test process runs (with ``--dist loadfile``, every module of one xdist
worker): starting Spark's JVM and its Python workers is the slowest part of a
small Spark test. test_spark_connect.py stops it (``stop_shared_spark``), since a
Connect client cannot start beside it; the next module that asks starts a new
one. Each module gets its own real ``tidelog serve`` broker. The helpers talk to
the broker over the wire protocol, without Spark.
"""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.records import SimpleRecord  # noqa: E402
from tidelog.spark.fetcher import read_records  # noqa: E402
from tidelog.spark.options import ReadOptions, SinkOptions  # noqa: E402
from tidelog.spark.producer import Producer  # noqa: E402
from tidelog.spark.wire import LATEST, ClientConfig, Cluster, error_of  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

from .spark_processes import spark_java_options, spark_kafka_jars  # noqa: E402


_shared: dict = {}   # "session": the classic session the modules share, while it runs

def spark_test_conf() -> dict[str, str]:
    """Spark settings for the tests only (the benchmark keeps Spark's defaults); Spark's
    own Kafka connector on the class path when it was resolved."""
    conf = {"spark.driver.extraJavaOptions": spark_java_options()}
    jars = spark_kafka_jars()
    if jars:
        conf["spark.jars"] = ",".join(jars)
        # The connector keeps an idle producer 10 minutes; its sender thread then dials the
        # stopped broker of a finished module every second, into whatever test runs next.
        conf["spark.kafka.producer.cache.timeout"] = "5s"
        conf["spark.kafka.producer.cache.evictorThreadRunInterval"] = "1s"
    return conf


def driver_submit_args() -> str:
    """``PYSPARK_SUBMIT_ARGS`` giving a Spark program that a test starts as a subprocess
    (an example, run as the README writes it) the tests' driver JVM settings."""
    return f'--conf "spark.driver.extraJavaOptions={spark_java_options()}" pyspark-shell'


def shared_spark():
    """The shared classic session, started if none runs."""
    session = _shared.get("session")
    if session is None:
        from tidelog.spark.session import local_session
        session = _shared["session"] = local_session("tidelog-tests", extra=spark_test_conf())
    return session


def stop_shared_spark() -> None:
    """Stop the shared classic session, if one runs (PySpark refuses a Connect client in a
    process that holds a classic session: SESSION_ALREADY_EXIST)."""
    session = _shared.pop("session", None)
    if session is not None:
        session.stop()


@pytest.fixture(scope="session")
def _spark_stopped_at_exit():
    yield
    stop_shared_spark()


@pytest.fixture(scope="module")
def spark(_spark_stopped_at_exit):
    """The classic local session shared by this process's modules (``shared_spark``).
    A module must leave it as it found it: stop its streaming queries, set no confs."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.skip("Spark needs a Java runtime (java on PATH or JAVA_HOME); none found")
    session = shared_spark()
    yield session
    for query in session.streams.active:   # a failed test may leave one running
        query.stop()


@pytest.fixture(scope="module")
def broker():
    with Broker() as running:
        yield running


class Admin:
    """Test-side broker access: create topics, produce, delete records, read back."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.config = ClientConfig(bootstrap, default_api_timeout_ms=20_000)
        self.cluster = Cluster(self.config)

    def create(self, topic: str, partitions: int = 1, replication_factor: int = -1, **configs: str) -> str:
        self.cluster.create_topic(topic, partitions, replication_factor,
                                  configs={k.replace("_", "."): v for k, v in configs.items()})
        self.cluster.wait_for_leaders(topic)
        return topic

    def produce(self, topic: str, partition: int, values, key: bytes | None = None, headers=(),
                timestamp_ms: int | None = None) -> None:
        """Each value as one record; all in one batch, acks=all."""
        producer = Producer(self.cluster, SinkOptions(client=self.config, batch_size_bytes=1 << 30),
                            exactly_once_attempts=False)
        for value in values:
            producer.append((topic, partition), SimpleRecord(value, key=key, headers=list(headers),
                                                             timestamp_ms=timestamp_ms))
        producer.flush()

    def add_partitions(self, topic: str, count: int) -> None:
        """CreatePartitions: grow ``topic`` to ``count`` partitions."""
        response = self.cluster.any_connection().request(ApiKey.CREATE_PARTITIONS, {
            "topics": [{"name": topic, "count": count, "assignments": None}], "timeout": 10_000,
            "validate_only": False})
        assert error_of(response.results[0].error_code).name == "NONE", response
        self.cluster.wait_for_leaders(topic)

    def latest(self, topic: str, partition: int) -> int:
        return self.cluster.list_offsets({(topic, partition): LATEST})[(topic, partition)]

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        connection = self.cluster.connection(self.cluster.leader(topic, partition))
        response = connection.request(ApiKey.DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "offset": before}]}], "timeout": 10_000})
        assert error_of(response.topics[0].partitions[0].error_code).name == "NONE"

    def records(self, topic: str, partition: int) -> list:
        end = self.latest(topic, partition)
        return list(read_records(self.cluster, ReadOptions(client=self.config), topic, partition, 0, end))


@pytest.fixture(scope="module")
def admin(broker):
    helper = Admin(broker.bootstrap)
    yield helper
    helper.cluster.close()
