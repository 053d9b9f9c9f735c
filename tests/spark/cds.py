"""A class-data sharing archive for the tests' Spark JVMs (the JDK's dynamic AppCDS).

A Spark JVM spends most of its start loading, parsing and verifying some 20,000
classes from Spark's jars; the suite starts a few dozen of them (shared sessions, the
README's examples, a standalone master, workers, executors and drivers, a Connect
server). ``python -m tests.spark.cds`` (a prerequisite of ``make test``) runs a short
Spark program once with ``-XX:ArchiveClassesAtExit``: the classes it loaded are
written, already parsed, to ``ARCHIVE`` in the virtual environment. Every Spark JVM of
the tests then maps that file (``-XX:SharedArchiveFile``, in ``spark_processes.spark_java_options``):
measured here under the suite's load, a local session plus a first job 45 s -> 27 s.

The JDK uses an archive only with the class path it was made with (Spark's conf
directory first, then its jars): every test JVM therefore keeps Spark's default conf
directory (``spark_processes.spark_env`` sets none). With another JDK, or a class
path that differs, the JVM prints one warning and loads its classes as usual; the
archive changes how fast Spark starts, never what it does. Only for tests: the
benchmark and the product keep Spark's defaults.

Writing the archive takes about half a minute of one core. ``make test`` therefore
starts it with ``--background`` and goes straight on to the tests, so that the other
core is not idle meanwhile: ``BUILDING`` names the writing process, and a test that
starts a Spark JVM before the archive exists waits for it (``java_options``), as long
as that process lives, up to ``WAIT_S``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pyspark

ARCHIVE = os.path.join(sys.prefix, f"spark-cds-{pyspark.__version__}.jsa")
BUILDING = f"{ARCHIVE}.building"      # the pid of the process writing the archive
WAIT_S = 600.0
# The JIT and collector settings of every test JVM (see spark_processes.test_java_options).
BASE_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def java_options() -> str:
    """``BASE_JAVA_OPTIONS``, and the archive once it exists (waiting for one being written)."""
    if not os.path.exists(ARCHIVE):
        _wait_for_writer()
    if os.path.exists(ARCHIVE):
        return f"{BASE_JAVA_OPTIONS} -XX:SharedArchiveFile={ARCHIVE}"
    return BASE_JAVA_OPTIONS


def _writer_pid() -> int | None:
    """The process ``BUILDING`` names, if it is alive."""
    try:
        with open(BUILDING) as f:
            pid = int(f.read().strip() or 0)
        if pid > 0:
            os.kill(pid, 0)
            return pid
    except (OSError, ValueError):
        pass
    return None


def _wait_for_writer() -> None:
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(ARCHIVE) and _writer_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.5)


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


def main(background: bool = False) -> int:
    """Write the archive (once); with ``background``, start writing it and return at once."""
    if os.path.exists(ARCHIVE) or _writer_pid() is not None:
        return 0
    from tests.spark.spark_processes import java_missing
    if java_missing():
        print(f"spark-cds: {java_missing()}; no archive")
        return 0
    log = os.path.join(sys.prefix, "spark-cds.log")
    print(f"spark-cds: writing the Spark JVM class archive {ARCHIVE} (once; output in {log})"
          + (", beside the tests" if background else ""))
    with open(log, "wb") as out:
        writer = subprocess.Popen([sys.executable, "-m", "tests.spark.cds", "--write"], stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=background)
    with open(BUILDING, "w") as f:      # before this returns: no test JVM starts unaware of it
        f.write(str(writer.pid))
    if not background:
        writer.wait(timeout=900)
    return 0


def _write() -> None:
    """The writer: run the workload into a temporary file, then move it into place."""
    partial = f"{ARCHIVE}.{os.getpid()}.tmp"
    try:
        done = subprocess.run([sys.executable, "-m", "tests.spark.cds", "--workload", partial],
                              stdin=subprocess.DEVNULL, timeout=900)
        if done.returncode == 0 and os.path.exists(partial):
            os.replace(partial, ARCHIVE)
        else:
            print(f"spark-cds: no archive (exit {done.returncode}); the tests' Spark starts slower")
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
        if _writer_pid() == os.getpid():
            os.unlink(BUILDING)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        _workload(sys.argv[2])
    elif sys.argv[1:2] == ["--write"]:
        _write()
    else:
        sys.exit(main(background=sys.argv[1:2] == ["--background"]))
