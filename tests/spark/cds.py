"""A class-data sharing archive for the tests' Spark JVMs (the JDK's dynamic AppCDS).

A Spark JVM spends most of its start loading, parsing and verifying some 20,000
classes from Spark's jars; the suite starts a few dozen of them (shared sessions, the
README's examples, a standalone master, workers, executors and drivers, a Connect
server). ``python -m tests.spark.cds`` (a prerequisite of ``make test``) runs a short
Spark program once with ``-XX:ArchiveClassesAtExit``: the classes it loaded are
written, already parsed, to ``ARCHIVE`` in the virtual environment. Every Spark JVM of
the tests then maps that file (``-XX:SharedArchiveFile``, in ``TEST_JAVA_OPTIONS``):
measured here under the suite's load, a local session plus a first job 45 s -> 27 s.

The JDK uses an archive only with the class path it was made with (Spark's conf
directory first, then its jars): every test JVM therefore keeps Spark's default conf
directory (``spark_processes.spark_env`` sets none). With another JDK, or a class
path that differs, the JVM prints one warning and loads its classes as usual; the
archive changes how fast Spark starts, never what it does. Only for tests: the
benchmark and the product keep Spark's defaults.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pyspark

ARCHIVE = os.path.join(sys.prefix, f"spark-cds-{pyspark.__version__}.jsa")
# The JIT and collector settings of every test JVM (see spark_processes.TEST_JAVA_OPTIONS).
BASE_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def java_options() -> str:
    """``BASE_JAVA_OPTIONS``, and the archive once it exists."""
    if os.path.exists(ARCHIVE):
        return f"{BASE_JAVA_OPTIONS} -XX:SharedArchiveFile={ARCHIVE}"
    return BASE_JAVA_OPTIONS


def _workload(archive: str) -> None:
    """What the tests' JVMs load: SQL, Parquet, JSON, Python workers, Arrow, a
    streaming query, and the tidelog data source and sink against a real broker."""
    from tidelog.spark.session import local_session
    from tidelog.testing import Broker

    spark = local_session("tidelog-cds", extra={
        "spark.driver.extraJavaOptions": f"{BASE_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={archive}"})
    with tempfile.TemporaryDirectory() as directory, Broker() as broker:
        frame = spark.range(1000).selectExpr("id", "id % 7 AS page", "CAST(id AS STRING) AS value")
        frame.groupBy("page").count().join(frame, "page").collect()
        frame.write.parquet(os.path.join(directory, "p"))
        spark.read.parquet(os.path.join(directory, "p")).selectExpr("sum(id)").collect()
        frame.write.json(os.path.join(directory, "j"))
        spark.read.json(os.path.join(directory, "j")).count()
        (frame.selectExpr("CAST(value AS BINARY) AS value").write.format("tidelog")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "cds").mode("append").save())
        spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("subscribe", "cds").load().selectExpr("count(*)").collect()
        query = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", "cds").option("startingOffsets", "earliest").load()
                 .groupBy("partition").count().writeStream.outputMode("complete").format("memory")
                 .queryName("cds").option("checkpointLocation", os.path.join(directory, "c")).start())
        query.processAllAvailable()
        query.stop()
    jvm = spark.sparkContext._gateway.proc
    spark.stop()
    # The JVM writes the archive as it exits, which it does once its stdin closes.
    jvm.stdin.close()
    jvm.wait(timeout=600)


def main() -> int:
    if os.path.exists(ARCHIVE):
        return 0
    from tests.spark.spark_processes import java_missing
    if java_missing():
        print(f"spark-cds: {java_missing()}; no archive")
        return 0
    partial = f"{ARCHIVE}.{os.getpid()}.tmp"
    log = os.path.join(sys.prefix, "spark-cds.log")
    print(f"spark-cds: writing the Spark JVM class archive {ARCHIVE} (once; output in {log})")
    with open(log, "wb") as out:
        done = subprocess.run([sys.executable, "-m", "tests.spark.cds", "--workload", partial],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900)
    if done.returncode == 0 and os.path.exists(partial):
        os.replace(partial, ARCHIVE)
    else:
        print(f"spark-cds: no archive (exit {done.returncode}; see {log}); the tests' Spark starts slower")
        if os.path.exists(partial):
            os.unlink(partial)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload(sys.argv[2])
    else:
        sys.exit(main())
