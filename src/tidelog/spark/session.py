"""A SparkSession set up the way tidelog's tests, examples and benchmark need.

Run as a plain Python program, ``local_session`` builds a local session. What a
local PySpark needs (docs/spark.md, "Running it"): Python workers must run this
interpreter (``PYSPARK_PYTHON``; a wrapper that keeps Spark's ``pyspark.zip`` off their
path, ``worker_python``), the UI and its port are off, everything binds
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


def worker_python(directory: str) -> str:
    """This interpreter, for Spark's Python workers, without ``pyspark.zip`` on its path.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's
    PYTHONPATH. Imported from the zip (which holds no bytecode) pyspark is compiled
    afresh by each worker, about 1.3 s of CPU against 0.4 s from site-packages, and
    Spark gives a new worker a fixed 10 s to connect back: a busy two-core machine
    misses it ("Python worker failed to connect back"). The same pyspark is installed
    beside this interpreter, so the wrapper written into ``directory`` drops the zip
    and runs ``sys.executable``.
    """
    import shlex
    path = os.path.join(directory, "python")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                "PYTHONPATH=$(printf %s \"$PYTHONPATH\" | tr ':' '\\n' | grep -v '/pyspark.zip$' | paste -sd: -)\n"
                f"export PYTHONPATH\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def _local_worker_python() -> str:
    """``worker_python`` in a directory of this process's (POSIX); else this interpreter."""
    if os.name != "posix":
        return sys.executable
    import atexit
    import shutil
    import tempfile
    directory = tempfile.mkdtemp(prefix="tidelog-pyspark-")
    atexit.register(shutil.rmtree, directory, True)
    return worker_python(directory)


def local_session(app_name: str = "tidelog", cores: int = 2, shuffle_partitions: int = 2,
                  extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    if submitted():
        builder = SparkSession.builder
    else:
        if "PYSPARK_PYTHON" not in os.environ:
            os.environ["PYSPARK_PYTHON"] = _local_worker_python()
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
