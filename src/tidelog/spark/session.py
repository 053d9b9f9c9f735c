"""A SparkSession set up the way tidelog's tests, examples and benchmark need.

Run as a plain Python program, ``local_session`` builds a local session. What a
local PySpark needs (docs/spark.md, "Running it"): Python workers must run this
interpreter (``PYSPARK_PYTHON``), the UI and its port are off, everything binds
to loopback, and small jobs use few shuffle partitions.

Run under ``spark-submit`` (which starts the JVM first and hands the Python
program its gateway in ``PYSPARK_GATEWAY_PORT``), the session is spark-submit's:
its ``--master`` (``spark://…``, ``yarn``, ``k8s://…``) and ``--conf`` settings
are kept, and nothing is overridden, so the same example runs locally and on a
cluster unchanged. Either way the ``tidelog`` format is registered.
"""

from __future__ import annotations

import os
import sys


def submitted() -> bool:
    """Whether this Python program was started by spark-submit (the JVM is already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_session(app_name: str = "tidelog", cores: int = 2, shuffle_partitions: int = 2,
                  extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    if submitted():
        builder = SparkSession.builder
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
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
