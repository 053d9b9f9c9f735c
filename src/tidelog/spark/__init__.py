"""tidelog for Apache Spark: a PySpark data source and sink named ``tidelog``.

It reads and writes topics with the options and the output schema of Spark's
Kafka connector (docs/spark.md), talking to brokers only over the Kafka wire
protocol. Install with ``pip install 'tidelog[spark]'`` (PySpark >= 4.2, pyarrow).

    from tidelog.spark import register
    register(spark)
    df = (spark.read.format("tidelog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

Modules: ``datasource`` (the DataSource), ``source`` (readers), ``sink``
(writers), ``fetcher`` and ``arrow_records`` (the executor read path),
``producer`` (the executor write path), ``offsets`` (pure offset rules),
``options`` (option parsing), ``wire`` (a blocking Kafka client),
``session`` (a local SparkSession for tests and examples).
"""

from __future__ import annotations

import tempfile

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(f"tidelog.spark needs PySpark and pyarrow: pip install 'tidelog[spark]' ({e})") from e

from tidelog.spark.datasource import TidelogDataSource
from tidelog.spark.fetcher import DataLossError
from tidelog.spark.options import OptionError
from tidelog.spark.source import source_schema

__all__ = ["DataLossError", "OptionError", "TidelogDataSource", "register", "register_class", "source_schema"]


# What Spark 4's PythonStreamingSourceRunner (the driver side of a Python streaming
# source) puts into the environment map of the data source's PythonFunction each time a
# query's source starts: the one map every query of the session shares, written without
# a lock and without a copy. Two queries starting at once (the README pipeline, and its
# restart) can race two insertions of one new key: the map's size then outgrows its
# entries, and every task serialized with it afterwards fails on the executors
# (java.io.OptionalDataException in HashMap.readObject), failing both queries. With the
# keys present from registration the runners only replace values, which cannot corrupt
# it. The values are overwritten before any Python worker starts (by that runner on the
# driver, by Spark's BasePythonRunner on the executors).
_STREAMING_RUNNER_ENV = {"SPARK_LOCAL_DIRS": tempfile.gettempdir(), "SPARK_AUTH_SOCKET_TIMEOUT": "15",
                         "SPARK_BUFFER_SIZE": "65536", "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}


def register(spark) -> None:
    """Register the ``tidelog`` format with a SparkSession."""
    register_class(spark, TidelogDataSource)


def register_class(spark, data_source) -> None:
    """``spark.dataSource.register(data_source)``, with the function's environment holding
    the keys Spark's streaming source runner writes (``_STREAMING_RUNNER_ENV``). A Spark
    Connect client has no SparkContext: the server makes the function there."""
    try:
        environment = spark.sparkContext.environment
    except Exception:                  # Spark Connect: PySparkNotImplementedError
        spark.dataSource.register(data_source)
        return
    added = {k: v for k, v in _STREAMING_RUNNER_ENV.items() if k not in environment}
    environment.update(added)
    try:
        spark.dataSource.register(data_source)
    finally:
        for key in added:
            environment.pop(key, None)
