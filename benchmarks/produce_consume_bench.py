"""Produce/consume throughput of tidelog serve vs librdkafka's mock cluster.

A confluent-kafka producer sends 1 KiB records (acks=1, linger.ms=5, 3 partitions)
to a fresh ``tidelog serve`` process and, in the same run, to librdkafka's
built-in mock cluster (``test.mock.num.brokers=1``) — the ceiling of what this
client can do on this machine. Prints MB/s, records/s and p50/p99 produce
latency for both and the ratio, the same for consuming, and the time from
starting ``tidelog serve`` to its first acknowledged produce.

    python benchmarks/produce_consume_bench.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.testing import Broker  # noqa: E402

RECORD_BYTES = 1024
PARTITIONS = 3
TOPIC = "bench"


def produce(config: dict, records: int) -> dict:
    producer = Producer({**config, "acks": "1", "linger.ms": 5, "batch.size": 262_144,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000})
    value = os.urandom(RECORD_BYTES)
    latencies: list[float] = []
    failures = []

    def delivered(err, msg, sent=None):
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(records):
        sent_at = time.perf_counter()
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg, t=sent_at: (
                                     failures.append(err) if err else latencies.append(time.perf_counter() - t)))
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    latencies.sort()
    return {"seconds": elapsed, "mb_s": records * RECORD_BYTES / elapsed / 1e6, "records_s": records / elapsed,
            "p50_ms": latencies[len(latencies) // 2] * 1000, "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
            "producer": producer}


def consume(bootstrap: str, settings: dict | None = None) -> dict:
    """Read every retained record (the mock cluster keeps only its newest segments).
    ``settings``: more client settings (e.g. TLS)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **(settings or {})})
    marks = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in range(PARTITIONS)]
    records = sum(high - low for low, high in marks)
    consumer.assign([TopicPartition(TOPIC, p, low) for p, (low, _) in enumerate(marks)])
    got = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < records and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    assert got == records, f"consumed {got} of {records}"
    return {"seconds": elapsed, "mb_s": records * RECORD_BYTES / elapsed / 1e6, "records_s": records / elapsed,
            "records": records}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    with Broker() as broker:
        probe = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1"})
        probe.produce("startup-probe", b"x")
        probe.flush(30)
        startup_s = time.perf_counter() - started
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        tidelog_produce = produce({"bootstrap.servers": broker.bootstrap}, args.records)
        tidelog_consume = consume(broker.bootstrap)

    mock_produce = produce({"test.mock.num.brokers": 1, "bootstrap.servers": ""}, args.records)
    mock_brokers = mock_produce["producer"].list_topics(timeout=10).brokers
    mock_bootstrap = ",".join(f"{b.host}:{b.port}" for b in mock_brokers.values())
    mock_consume = consume(mock_bootstrap)

    print(f"records: {args.records} x {RECORD_BYTES} B, {PARTITIONS} partitions, acks=1, linger.ms=5")
    print(f"{'':22}{'tidelog':>12}{'mock cluster':>14}{'ratio':>8}")
    for label, key, fmt in (("produce MB/s", "mb_s", "{:.1f}"), ("produce records/s", "records_s", "{:.0f}"),
                            ("produce p50 ms", "p50_ms", "{:.1f}"), ("produce p99 ms", "p99_ms", "{:.1f}")):
        a, b = tidelog_produce[key], mock_produce[key]
        print(f"{label:22}{fmt.format(a):>12}{fmt.format(b):>14}{a / b:>8.2f}")
    for label, key, fmt in (("consume MB/s", "mb_s", "{:.1f}"), ("consume records/s", "records_s", "{:.0f}")):
        a, b = tidelog_consume[key], mock_consume[key]
        print(f"{label:22}{fmt.format(a):>12}{fmt.format(b):>14}{a / b:>8.2f}")
    print(f"records consumed: tidelog {tidelog_consume['records']}, mock {mock_consume['records']} "
          "(the mock cluster retains only its newest segments)")
    print(f"tidelog serve start to first acknowledged produce: {startup_s:.2f} s (target < 1 s)")
    ratio = tidelog_produce["mb_s"] / mock_produce["mb_s"]
    print(f"produce throughput ratio tidelog/mock: {ratio:.2f} (target >= 0.35)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
