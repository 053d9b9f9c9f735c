"""A local SparkSession set up the way tidelog's tests, examples and benchmark need.

What a local PySpark needs (docs/spark.md, "Running it"): Python workers must run
this interpreter (``PYSPARK_PYTHON``), the UI and its port are off, everything
binds to loopback, and small jobs use few shuffle partitions. The ``tidelog``
format is registered.
"""

from __future__ import annotations

import os
import sys


def local_session(app_name: str = "tidelog", cores: int = 2, shuffle_partitions: int = 2,
                  extra: dict[str, str] | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
