"""Spark read throughput: the tidelog data source vs Parquet, in the same run.

Writes N records with 100-byte random values to a fresh ``tidelog serve``
(2 partitions, uncompressed), then with one local[2] SparkSession:

* reads them through the data source (``spark.read.format("tidelog")``) into
  Spark's ``noop`` sink, which materialises every column of every row;
* writes that DataFrame to Parquet once and reads the Parquet file the same way:
  the engine's own ceiling on this machine.

Each read runs once to warm up and then ``--runs`` times; the best and the
median rows/s of both are printed, with the ratio (target >= 50%).

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

from tidelog.records import SimpleRecord  # noqa: E402
from tidelog.spark.options import SinkOptions  # noqa: E402
from tidelog.spark.producer import Producer  # noqa: E402
from tidelog.spark.session import local_session  # noqa: E402
from tidelog.spark.wire import ClientConfig, Cluster  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

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


def timed(action, runs: int) -> list[float]:
    action()  # warm-up: Python workers, JIT, page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


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
            spark = local_session("tidelog-spark-read-bench")
            source = (spark.read.format("tidelog").option("kafka.bootstrap.servers", broker.bootstrap)
                      .option("subscribe", TOPIC).load())
            count = source.count()
            assert count == args.records, (count, args.records)

            def read_tidelog():
                source.write.format("noop").mode("overwrite").save()
            tidelog_times = timed(read_tidelog, args.runs)

            parquet_path = os.path.join(workdir, "bench.parquet")
            source.write.parquet(parquet_path)
            parquet = spark.read.parquet(parquet_path)
            assert parquet.count() == args.records

            def read_parquet():
                parquet.write.format("noop").mode("overwrite").save()
            parquet_times = timed(read_parquet, args.runs)
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def line(name, times):
        best, median = min(times), statistics.median(times)
        print(f"{name:<22} best {args.records / best:>12,.0f} rows/s   median {args.records / median:>12,.0f} rows/s"
              f"   ({', '.join(f'{t:.2f}' for t in times)} s)")
        return args.records / best, args.records / median
    print(f"Spark local[2], {args.records:,} records x {VALUE_BYTES} bytes, {PARTITIONS} partitions, "
          f"read into the noop sink")
    tidelog_best, tidelog_median = line("tidelog data source", tidelog_times)
    parquet_best, parquet_median = line("Parquet (ceiling)", parquet_times)
    print(f"ratio tidelog/Parquet: best {tidelog_best / parquet_best:.0%}, median "
          f"{tidelog_median / parquet_median:.0%} (target >= 50%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
