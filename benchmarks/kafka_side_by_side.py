"""Apache Kafka and tidelog, one after the other, measured with Kafka's own perf tools.

Theory of operation. In one run, on one machine, with the same tools and settings:

1. the raw sequential disk write of the directory both servers write to: 1 MiB
   ``os.write`` calls, then ``fsync``, so the figure is the disk's and not the page
   cache's (printed with and without the final ``fsync``);
2. one node — Kafka 4.4.0 (one KRaft node, broker and controller, the JVM settings of
   ``kafka-server-start.sh``; tests/kafka_fixture.py) and then ``tidelog serve`` — a
   3-partition topic, ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``)
   with 1 KiB records and ``acks=1``, then ``kafka-consumer-perf-test``
   (``ConsumerPerformance``) reading them all back;
3. three brokers — Kafka with 3 brokers and a quorum of 3 controllers, then ``tidelog
   cluster`` with 3 brokers and 3 controllers — a topic with replication factor 3 and
   ``min.insync.replicas=2``, the producer with ``acks=all``, then the consumer.

Each round then does the same with confluent-kafka (librdkafka) as the producer (latency
from ``produce()`` to its delivery report) and as the consumer (assigned partitions).

Before the measured rounds half as many records go to another topic, unmeasured, so that
the JVMs' JIT has compiled the hot paths; then ``--rounds`` (2) produce + consume rounds,
the best of each kept. Each figure is what Kafka's tools print (records/s, MB/s where MB is 2^20 bytes, the
producer's p50/p99 latency), plus the brokers' CPU seconds per GB (10^9 bytes of record
values) while producing and while consuming: user + system time of the broker processes
(``/proc/<pid>/stat``; Kafka's combined node and ``tidelog serve`` count whole). Every
tidelog figure is printed with its ratio to Kafka's. The tools, the servers and the
machine's other work share its cores: compare the ratios, not the absolute numbers, and
only within one run.

    python benchmarks/kafka_side_by_side.py [--records 300000] [--cluster-records 100000]
                                            [--skip-cluster] [--rounds 2]

Needs java (17+) and mvn: the jars come from interop/java and interop/kafka-server
(``make java-interop``), resolved here when missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.interop import java_driver  # noqa: E402
from tests.kafka_fixture import KafkaCluster, ensure_resolved, kafka_version, missing_tools  # noqa: E402
from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.client import KafkaConnection  # noqa: E402
from tidelog.testing import Broker, Cluster  # noqa: E402

RECORD_BYTES = 1024
PARTITIONS = 3
TOOL_JVM = ["-Xmx512m"]              # what kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh give
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


# -- measurements -------------------------------------------------------------------------


def raw_disk_write(directory: str, megabytes: int = 512) -> tuple[float, float]:
    """(MB/s of the writes alone, MB/s including the fsync that puts them on the disk)."""
    block = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(dir=directory, prefix="raw-write-")
    try:
        start = time.perf_counter()
        for _ in range(megabytes):
            os.write(fd, block)
        written = time.perf_counter() - start
        os.fsync(fd)
        synced = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return megabytes / written, megabytes / synced


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (their threads included)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def tool_command(main_class: str, *args: str) -> list[str]:
    return ["java", *TOOL_JVM, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java_driver.classpath(),
            main_class, *args]


def producer_perf(bootstrap: str, topic: str, records: int, acks: str) -> dict:
    """kafka-producer-perf-test: 1 KiB records as fast as they go."""
    done = subprocess.run(tool_command(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
        "--record-size", str(RECORD_BYTES), "--throughput", "-1",
        "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}"),
        capture_output=True, text=True, timeout=1800)
    summary = [line for line in done.stdout.splitlines() if _PRODUCED.match(line)]
    if done.returncode != 0 or not summary:
        raise RuntimeError(f"ProducerPerformance failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    sent, rate, mb, avg, top, p50, p95, p99, p999 = _PRODUCED.match(summary[-1]).groups()
    return {"records": int(sent), "records_s": float(rate), "mb_s": float(mb), "p50_ms": float(p50),
            "p99_ms": float(p99), "avg_ms": float(avg)}


def consumer_perf(bootstrap: str, topic: str, records: int) -> dict:
    """kafka-consumer-perf-test: everything just produced, from the beginning. Its fetch
    rate (without the group's join) is the figure."""
    done = subprocess.run(tool_command(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
        "--num-records", str(records), "--timeout", "120000", "--group", f"perf-{time.time_ns()}"),
        capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if done.returncode != 0 or header is None or header + 1 >= len(lines):
        raise RuntimeError(f"ConsumerPerformance failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    names = [n.strip() for n in lines[header].split(",")]
    values = dict(zip(names, (v.strip() for v in lines[header + 1].split(","))))
    consumed = int(values["data.consumed.in.nMsg"])
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {records} records:\n{done.stdout[-2000:]}")
    return {"records": consumed, "records_s": float(values["fetch.nMsg.sec"]), "mb_s": float(values["fetch.MB.sec"]),
            "with_join_mb_s": float(values["MB.sec"])}


def ck_produce(bootstrap: str, topic: str, records: int, acks: str) -> dict:
    """confluent-kafka (librdkafka) as the producer: 1 KiB records as fast as its queue
    takes them (linger 5 ms, its defaults otherwise); latency from produce() to the
    delivery report, as kafka-producer-perf-test measures it."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "log_level": 3,
                         "queue.buffering.max.messages": 200_000})
    value = os.urandom(RECORD_BYTES)
    latencies: list[float] = []
    failed = []

    def delivered(err, _msg, sent=None):
        if err is not None:
            failed.append(err)
        latencies.append(time.perf_counter() - sent)
    start = time.perf_counter()
    for i in range(records):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(600)
    elapsed = time.perf_counter() - start
    if failed or len(latencies) != records:
        raise RuntimeError(f"confluent-kafka: {len(failed)} failed deliveries, {len(latencies)} of {records} reports")
    latencies.sort()
    return {"records": records, "records_s": records / elapsed, "mb_s": records * RECORD_BYTES / elapsed / 2**20,
            "p50_ms": latencies[len(latencies) // 2] * 1000, "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000}


def ck_consume(bootstrap: str, topic: str, records: int) -> dict:
    """confluent-kafka as the consumer: the partitions assigned from offset 0, read until
    every record has come (timed from the first record, as ConsumerPerformance's fetch rate)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ck-{time.time_ns()}",
                         "enable.auto.commit": False, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, first, deadline = 0, None, time.monotonic() + 600
    try:
        while got < records and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    first = first or time.perf_counter()
                    got += 1
    finally:
        consumer.close()
    if got < records:
        raise RuntimeError(f"confluent-kafka read {got} of {records} records")
    elapsed = time.perf_counter() - first
    return {"records": got, "records_s": got / elapsed, "mb_s": got * RECORD_BYTES / elapsed / 2**20}


async def create_topic(bootstrap: str, topic: str, replication: int, configs: dict[str, str]) -> None:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    connection = await KafkaConnection.connect(host, int(port), client_id="bench")
    try:
        answer = await connection.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": topic, "num_partitions": PARTITIONS, "replication_factor": replication,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": 60_000, "validate_only": False})
        error = answer.topics[0].error_code.name.upper()
        if error != "NONE":
            raise RuntimeError(f"CreateTopics {topic}: {error} {answer.topics[0].error_message}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:      # every partition led, the whole ISR in
            meta = await connection.request(ApiKey.METADATA, {"topics": [{"name": topic}],
                                                              "allow_auto_topic_creation": False}, version=12)
            parts = meta.topics[0].partitions
            if len(parts) == PARTITIONS and all(p.leader_id >= 0 and len(p.isr_nodes) == replication for p in parts):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{topic}: partitions without a leader or a full ISR after 60 s")
    finally:
        connection.close()


# -- one system under test ----------------------------------------------------------------


@dataclass
class Run:
    system: str                        # "Kafka" / "tidelog"
    setup: str                         # "1 node" / "3 brokers"
    start_s: float = 0.0
    produce: dict = field(default_factory=dict)
    consume: dict = field(default_factory=dict)
    ck_produce: dict = field(default_factory=dict)      # the same with confluent-kafka as the client
    ck_consume: dict = field(default_factory=dict)
    load: list[float] = field(default_factory=list)     # the 1-minute load average at each round


def measure(run: Run, bootstrap: str, broker_pids, replication: int, acks: str, records: int,
            configs: dict[str, str], rounds: int) -> Run:
    # A warm-up (not measured) to a topic of its own: the JVMs' JIT compiles the hot paths
    # first, so the figures are the steady state's, for both servers alike.
    asyncio.run(create_topic(bootstrap, "warmup", replication, configs))
    producer_perf(bootstrap, "warmup", max(records // 2, 20_000), acks)
    gigabytes = records * RECORD_BYTES / 1e9
    # Then ``rounds`` produce + consume rounds, each to a topic of its own; the best of each
    # kept (this machine's other work only ever slows a round down).
    for round_ in range(rounds):
        topic = f"perf-{round_}"
        asyncio.run(create_topic(bootstrap, topic, replication, configs))
        run.load.append(os.getloadavg()[0])
        before = process_cpu_seconds(broker_pids())
        produced = producer_perf(bootstrap, topic, records, acks)
        middle = process_cpu_seconds(broker_pids())
        consumed = consumer_perf(bootstrap, topic, records)
        after = process_cpu_seconds(broker_pids())
        produced["cpu_s_per_gb"] = (middle - before) / gigabytes
        consumed["cpu_s_per_gb"] = (after - middle) / gigabytes
        print(f"  {run.system:8} {run.setup} round {round_ + 1}: produce {produced['records_s']:>9,.0f} rec/s "
              f"{produced['mb_s']:6.1f} MB/s p50 {produced['p50_ms']:.0f} ms p99 {produced['p99_ms']:.0f} ms "
              f"{produced['cpu_s_per_gb']:.1f} CPU s/GB; consume {consumed['records_s']:>9,.0f} rec/s "
              f"{consumed['mb_s']:6.1f} MB/s {consumed['cpu_s_per_gb']:.1f} CPU s/GB "
              f"(load {run.load[-1]:.1f})", flush=True)
        # The same with confluent-kafka (librdkafka), the client most non-Java applications use.
        topic = f"ck-{round_}"
        asyncio.run(create_topic(bootstrap, topic, replication, configs))
        before = process_cpu_seconds(broker_pids())
        ck_produced = ck_produce(bootstrap, topic, records, acks)
        middle = process_cpu_seconds(broker_pids())
        ck_consumed = ck_consume(bootstrap, topic, records)
        after = process_cpu_seconds(broker_pids())
        ck_produced["cpu_s_per_gb"] = (middle - before) / gigabytes
        ck_consumed["cpu_s_per_gb"] = (after - middle) / gigabytes
        print(f"  {run.system:8} {run.setup} round {round_ + 1}, confluent-kafka: produce "
              f"{ck_produced['records_s']:>9,.0f} rec/s p50 {ck_produced['p50_ms']:.0f} ms p99 "
              f"{ck_produced['p99_ms']:.0f} ms {ck_produced['cpu_s_per_gb']:.1f} CPU s/GB; consume "
              f"{ck_consumed['records_s']:>9,.0f} rec/s {ck_consumed['cpu_s_per_gb']:.1f} CPU s/GB", flush=True)
        for name, figures in (("produce", produced), ("consume", consumed), ("ck_produce", ck_produced),
                              ("ck_consume", ck_consumed)):
            if not getattr(run, name) or figures["records_s"] > getattr(run, name)["records_s"]:
                setattr(run, name, figures)
    return run


def kafka_run(setup: str, brokers: int, controllers: int, acks: str, records: int, directory: str,
              rounds: int) -> Run:
    run = Run("Kafka", setup)
    started = time.monotonic()
    with KafkaCluster(brokers=brokers, controllers=controllers, profile="bench",
                      directory=tempfile.mkdtemp(dir=directory, prefix="kafka-")) as kafka:
        run.start_s = time.monotonic() - started
        configs = {"min.insync.replicas": "2"} if brokers > 1 else {}
        return measure(run, kafka.bootstrap, lambda: [n.process.pid for n in kafka.brokers],
                       min(brokers, 3), acks, records, configs, rounds)


def tidelog_run(setup: str, brokers: int, controllers: int, acks: str, records: int, directory: str,
                rounds: int) -> Run:
    run = Run("tidelog", setup)
    started = time.monotonic()
    if brokers == 1:
        with Broker(data_dir=tempfile.mkdtemp(dir=directory, prefix="tidelog-")) as broker:
            run.start_s = time.monotonic() - started
            return measure(run, broker.bootstrap, lambda: [broker.process.pid], 1, acks, records, {}, rounds)
    with Cluster(brokers=brokers, controllers=controllers,
                 directory=tempfile.mkdtemp(dir=directory, prefix="tidelog-cluster-")) as cluster:
        run.start_s = time.monotonic() - started
        return measure(run, cluster.bootstrap, lambda: [n.pid for n in cluster.brokers if n.pid],
                       3, acks, records, {"min.insync.replicas": "2"}, rounds)


# -- report -------------------------------------------------------------------------------


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}×" if theirs else "–"


def table(runs: list[Run], disk: tuple[float, float]) -> str:
    """The Markdown table the README carries: each tidelog figure with its ratio to Kafka's."""
    rows = ["| setup | measure | Kafka 4.4.0 | tidelog | tidelog ÷ Kafka |", "|---|---|---:|---:|---:|"]
    by = {(r.system, r.setup): r for r in runs}
    for setup in dict.fromkeys(r.setup for r in runs):
        kafka, ours = by.get(("Kafka", setup)), by.get(("tidelog", setup))
        if kafka is None or ours is None:
            continue
        label = f"{setup}, acks={'1' if setup == '1 node' else 'all'}"
        for name, side, key, fmt in (
                ("produce records/s", "produce", "records_s", "{:,.0f}"),
                ("produce MB/s", "produce", "mb_s", "{:.1f}"),
                ("produce p50 latency (ms)", "produce", "p50_ms", "{:.0f}"),
                ("produce p99 latency (ms)", "produce", "p99_ms", "{:.0f}"),
                ("broker CPU s per GB produced", "produce", "cpu_s_per_gb", "{:.1f}"),
                ("consume records/s", "consume", "records_s", "{:,.0f}"),
                ("consume MB/s", "consume", "mb_s", "{:.1f}"),
                ("broker CPU s per GB consumed", "consume", "cpu_s_per_gb", "{:.1f}"),
                ("confluent-kafka produce records/s", "ck_produce", "records_s", "{:,.0f}"),
                ("confluent-kafka produce p50 latency (ms)", "ck_produce", "p50_ms", "{:.0f}"),
                ("confluent-kafka produce p99 latency (ms)", "ck_produce", "p99_ms", "{:.0f}"),
                ("confluent-kafka broker CPU s per GB produced", "ck_produce", "cpu_s_per_gb", "{:.1f}"),
                ("confluent-kafka consume records/s", "ck_consume", "records_s", "{:,.0f}"),
                ("confluent-kafka broker CPU s per GB consumed", "ck_consume", "cpu_s_per_gb", "{:.1f}")):
            k, t = getattr(kafka, side)[key], getattr(ours, side)[key]
            rows.append(f"| {label} | {name} | {fmt.format(k)} | {fmt.format(t)} | {_ratio(t, k)} |")
    rows.append(f"| machine | raw sequential write, 1 MiB blocks (+ fsync) | "
                f"{disk[0]:.0f} MB/s ({disk[1]:.0f} MB/s) | | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="1 KiB records on one node")
    parser.add_argument("--cluster-records", type=int, default=100_000, help="1 KiB records on three brokers")
    parser.add_argument("--skip-cluster", action="store_true", help="one node only")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per server, the best kept")
    args = parser.parse_args(argv)
    reason = missing_tools()
    if reason:
        print(f"kafka_side_by_side: skipped, {reason}")
        return 0
    java_driver.ensure_built()
    ensure_resolved()
    print(f"Apache Kafka {kafka_version()} and tidelog, one after the other; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    directory = tempfile.mkdtemp(prefix="side-by-side-")
    runs: list[Run] = []
    try:
        disk = raw_disk_write(directory)
        print(f"raw sequential write: {disk[0]:.0f} MB/s ({disk[1]:.0f} MB/s with the fsync)", flush=True)
        print(f"one node, acks=1, {args.records:,} records of {RECORD_BYTES} bytes, {PARTITIONS} partitions:",
              flush=True)
        runs.append(kafka_run("1 node", 1, 0, "1", args.records, directory, args.rounds))
        runs.append(tidelog_run("1 node", 1, 0, "1", args.records, directory, args.rounds))
        if not args.skip_cluster:
            print(f"three brokers + three controllers, acks=all, replication factor 3, min.insync.replicas=2, "
                  f"{args.cluster_records:,} records:", flush=True)
            runs.append(kafka_run("3 brokers", 3, 3, "all", args.cluster_records, directory, args.rounds))
            runs.append(tidelog_run("3 brokers", 3, 3, "all", args.cluster_records, directory,
                                    args.rounds))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print()
    print(table(runs, disk))
    print()
    for run in runs:
        print(f"{run.system} {run.setup}: up in {run.start_s:.1f} s; load average "
              f"{', '.join(f'{x:.1f}' for x in run.load)} at its rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
