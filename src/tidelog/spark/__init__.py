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

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(f"tidelog.spark needs PySpark and pyarrow: pip install 'tidelog[spark]' ({e})") from e

from tidelog.spark.datasource import TidelogDataSource
from tidelog.spark.fetcher import DataLossError
from tidelog.spark.options import OptionError
from tidelog.spark.source import source_schema

__all__ = ["DataLossError", "OptionError", "TidelogDataSource", "register", "source_schema"]


def register(spark) -> None:
    """Register the ``tidelog`` format with a SparkSession."""
    spark.dataSource.register(TidelogDataSource)
