"""Spark read throughput: the tidelog data source vs Parquet, in the same run.

Writes N records with 100-byte random values to a fresh ``tidelog serve``
(2 partitions, uncompressed), then with one local[2] SparkSession:

* reads them through the data source (``spark.read.format("tidelog")``) into
  Spark's ``noop`` sink, which materialises every column of every row;
* writes that DataFrame to Parquet once and reads the Parquet file the same way:
  the engine's own ceiling on this machine;
* reads the same number of rows from a Python data source that only yields
  ready-made Arrow batches of the same schema (``ReadyBatches``): the ceiling of
  any Python data source, what Spark's side of the Python Data Source API costs;
* if ``make java-interop`` resolved it (interop/spark-kafka), reads the same topic
  through Spark's own Kafka connector (``format("kafka")``, a JVM source using the
  Java client), the way a Spark user reads Kafka today.

Each read runs once to warm up and then ``--runs`` times, in rounds (every read
once per round, in turn, so that all meet the same JVM as it keeps compiling);
the best and the median rows/s of each are printed, with the ratio (target >= 50%). The CPU
seconds each read took are printed too, summed over this process and all its
children (Spark's JVM, its Python workers, the broker; Linux ``/proc``): on a
machine shared with other work the wall-clock rates swing with the load, the
CPU each read needs much less.

    python benchmarks/spark_read_bench.py [--records 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tidelog.records import SimpleRecord  # noqa: E402
from tidelog.spark.options import SinkOptions  # noqa: E402
from tidelog.spark.producer import Producer  # noqa: E402
from tidelog.spark.session import local_session  # noqa: E402
from tidelog.spark.wire import ClientConfig, Cluster  # noqa: E402
from tidelog.testing import Broker  # noqa: E402
from tests.spark.spark_processes import spark_kafka_jars  # noqa: E402

TOPIC = "bench"
PARTITIONS = 2
VALUE_BYTES = 100


def fill(bootstrap: str, records: int) -> float:
    """Produce ``records`` random 100-byte values (acks=all); returns seconds taken."""
    cluster = Cluster(ClientConfig(bootstrap))
    cluster.create_topic(TOPIC, PARTITIONS, configs={"segment.bytes": str(512 * 1024 * 1024)})
    cluster.wait_for_leaders(TOPIC)
    producer = Producer(cluster, SinkOptions(client=ClientConfig(bootstrap), batch_size_bytes=900_000),
                        exactly_once_attempts=False)
    started = time.perf_counter()
    random = os.urandom(VALUE_BYTES * 4096)
    for i in range(records):
        j = (i * 7919) % 4000
        value = random[j:j + VALUE_BYTES - 8] + i.to_bytes(8, "big")
        producer.append((TOPIC, i % PARTITIONS), SimpleRecord(value))
    producer.flush()
    cluster.close()
    return time.perf_counter() - started


def tree_cpu_s() -> float | None:
    """CPU seconds (user + system) of this process and all its descendants, from
    /proc (None where there is no /proc): Spark's JVM and Python workers and the
    broker are all below this process. Each process counts its own time and that
    of the children it has reaped, so a Python worker that exits between two
    samples is still counted (in its parent's)."""
    if not os.path.isdir("/proc/self/task"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue   # exited meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = sum(int(x) for x in fields[11:15]) / tick   # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


READY_BATCH_ROWS = 72_000   # about one 8 MiB Fetch response of these records


def ready_batches_source(records: int):
    """A Python data source (format ``ready_batches``) of ``records`` rows in two
    partitions, yielding slices of one prebuilt Arrow batch: no I/O, no decoding."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tidelog.spark.source import source_schema

    class Share(InputPartition):
        def __init__(self, rows: int):
            self.rows = rows

    class Reader(DataSourceReader):
        def partitions(self):
            return [Share(records // PARTITIONS + (1 if i < records % PARTITIONS else 0)) for i in range(PARTITIONS)]

        def read(self, share):
            import pyarrow as pa

            from tidelog.spark.arrow_records import arrow_schema
            n = READY_BATCH_ROWS
            values = os.urandom(VALUE_BYTES * n)
            offsets = pa.array(range(0, VALUE_BYTES * (n + 1), VALUE_BYTES), pa.int32())
            batch = pa.RecordBatch.from_arrays([
                pa.nulls(n, pa.binary()), pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1],
                                                                                    pa.py_buffer(values)]),
                pa.repeat(pa.scalar(TOPIC, pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.array(range(n), pa.int64()), pa.array(range(n), pa.int64()).view(pa.timestamp("us", tz="UTC")),
                pa.repeat(pa.scalar(0, pa.int32()), n)], schema=arrow_schema(False))
            left = share.rows
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class ReadyBatches(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ready_batches"

        def schema(self):
            return source_schema(False)

        def reader(self, schema):
            return Reader()

    return ReadyBatches


def timed_rounds(actions: dict, runs: int) -> dict:
    """Wall-clock and CPU seconds (``tree_cpu_s``) of each action's ``runs`` runs, after
    a warm-up of each, taken in rounds: every action once per round, in turn. Spark's
    JVM keeps compiling the code the reads share (Arrow to rows, the noop sink) for
    many runs, so the reads measured in blocks favoured whichever came last; in rounds,
    every read meets the same JVM."""
    for action in actions.values():
        action()  # warm-up: Python workers, JIT, page cache
    measured = {name: ([], []) for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            times, cpus = measured[name]
            cpu_before = tree_cpu_s()
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
            cpu_after = tree_cpu_s()
            if cpu_before is not None and cpu_after is not None:
                cpus.append(cpu_after - cpu_before)
    return measured


def _noop_write(frame):
    """An action reading every column of every row of ``frame`` (Spark's noop sink)."""
    return lambda: frame.write.format("noop").mode("overwrite").save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    workdir = tempfile.mkdtemp(prefix="tidelog-spark-bench-")
    try:
        with Broker(data_dir=os.path.join(workdir, "broker")) as broker:
            fill_s = fill(broker.bootstrap, args.records)
            print(f"produced {args.records:,} records of {VALUE_BYTES} bytes in {fill_s:.1f} s")
            jars = spark_kafka_jars()
            spark = local_session("tidelog-spark-read-bench", extra={"spark.jars": ",".join(jars)} if jars else None)
            source = (spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
                      .option("subscribe", TOPIC).load())
            count = source.count()
            assert count == args.records, (count, args.records)

            parquet_path = os.path.join(workdir, "bench.parquet")
            source.write.parquet(parquet_path)
            parquet = spark.read.parquet(parquet_path)
            assert parquet.count() == args.records

            spark.dataSource.register(ready_batches_source(args.records))
            ready = spark.read.format("ready_batches").load()
            assert ready.count() == args.records
            frames = {"tidelog": source, "parquet": parquet, "ready": ready}

            if jars:
                connector = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                             .option("subscribe", TOPIC).load())
                assert connector.count() == args.records
                frames["connector"] = connector
            measured = timed_rounds({name: _noop_write(frame) for name, frame in frames.items()}, args.runs)
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def line(name, measured):
        times, cpus = measured
        best, median = min(times), statistics.median(times)
        print(f"{name:<22} best {args.records / best:>12,.0f} rows/s   median {args.records / median:>12,.0f} rows/s"
              f"   ({', '.join(f'{t:.2f}' for t in times)} s)")
        if cpus:
            print(f"{'':<22} CPU per run: median {statistics.median(cpus):.2f} s "
                  f"({', '.join(f'{c:.2f}' for c in cpus)} s)")
        return args.records / best, args.records / median, statistics.median(cpus) if cpus else None
    print(f"Spark local[2], {args.records:,} records x {VALUE_BYTES} bytes, {PARTITIONS} partitions, "
          f"read into the noop sink")
    print(f"each read warmed up once, then measured in {args.runs} rounds of every read in turn")
    tidelog_best, tidelog_median, tidelog_cpu = line("tidelog data source", measured["tidelog"])
    parquet_best, parquet_median, parquet_cpu = line("Parquet (ceiling)", measured["parquet"])
    ready_best, ready_median, ready_cpu = line("ready Arrow batches", measured["ready"])
    if "connector" in measured:
        connector_best, connector_median, _ = line("Spark's Kafka connector", measured["connector"])
        print(f"ratio tidelog data source/Spark's Kafka connector, same broker: best "
              f"{tidelog_best / connector_best:.2f}, median {tidelog_median / connector_median:.2f}; "
              f"connector/Parquet: median {connector_median / parquet_median:.0%}")
    else:
        print("Spark's Kafka connector: not resolved (make java-interop), not measured")
    print(f"ratio tidelog/Parquet: best {tidelog_best / parquet_best:.0%}, median "
          f"{tidelog_median / parquet_median:.0%} (target >= 50%)")
    print(f"ratio ready batches/Parquet (any Python data source's ceiling): best {ready_best / parquet_best:.0%}, "
          f"median {ready_median / parquet_median:.0%}")
    if tidelog_cpu and parquet_cpu and ready_cpu:
        print(f"CPU per read (medians): tidelog {tidelog_cpu:.2f} s, Parquet {parquet_cpu:.2f} s, ready batches "
              f"{ready_cpu:.2f} s; Parquet/tidelog {parquet_cpu / tidelog_cpu:.0%}, "
              f"Parquet/ready batches {parquet_cpu / ready_cpu:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
