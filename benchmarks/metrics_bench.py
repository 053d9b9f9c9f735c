"""The cost of Prometheus metrics: produce against ``tidelog serve`` with ``/metrics`` on vs off.

Two ``tidelog serve`` processes run side by side in the same run, one with
``metrics.port`` set (and scraped every ``--scrape-interval`` seconds by a thread,
as Prometheus would, only more often) and one without. A confluent-kafka
producer sends to each in turn, alternating the order every round:

* throughput: 1 KiB records, acks=1, linger.ms=5, 3 partitions (few large
  Produce requests) — MB/s;
* request rate: 100-byte records, acks=1, one record per Produce request
  (``batch.num.messages=1``) — where a per-request cost would show — requests/s.

Prints each round, the medians and the ratio on / off (target: >= 0.97, a cost
under 3%). On a shared machine the rates swing by more than that from run to
run, so it also prints what swings less: the broker process's own CPU time per
record (from /proc, on vs off), the dispatcher observer's cost per request (µs,
in-process) and how long a scrape takes on the metrics-on broker (ms).

    python benchmarks/metrics_bench.py [--records 300000] [--small-records 30000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.codec import RequestHeader  # noqa: E402
from tidelog.server.metrics import RequestMetrics  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

PARTITIONS = 3


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, records: int, record_bytes: int, **config) -> float:
    """Records/s of ``records`` records of ``record_bytes`` over 3 partitions, acks=1."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, **config})
    value = os.urandom(record_bytes)
    failures: list = []
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS,
                                 on_delivery=lambda e, m: failures.append(e) if e else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    return records / elapsed


class Scraper(threading.Thread):
    """GET /metrics every ``interval_s`` until stopped; keeps each scrape's duration."""

    def __init__(self, url: str, interval_s: float):
        super().__init__(daemon=True)
        self.url, self.interval_s = url, interval_s
        self.durations: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as response:
                response.read()
            self.durations.append(time.perf_counter() - started)


def observer_cost_us(calls: int = 200_000) -> float:
    """In-process: one RequestMetrics call for a Produce request, µs."""
    metrics = RequestMetrics()
    header = RequestHeader(ApiKey.PRODUCE, 9, 1, "bench")
    response = {"responses": []}
    started = time.perf_counter()
    for _ in range(calls):
        metrics(header, None, response, started)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000, help="1 KiB records per throughput run")
    parser.add_argument("--small-records", type=int, default=30_000, help="records (= requests) per request-rate run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes (metrics on)")
    args = parser.parse_args()
    overrides = {"num.partitions": str(PARTITIONS)}
    results: dict[tuple[str, str], list[float]] = {}
    cpu_per_record: dict[tuple[str, str], list[float]] = {}
    counts = {"throughput": args.records, "requests": args.small_records}
    with Broker(overrides=overrides) as off, Broker(overrides={**overrides, "metrics.port": "0"}) as on:
        scraper = Scraper(on.metrics_url, args.scrape_interval)
        scraper.start()
        brokers = {"off": off, "on": on}
        workloads = {
            "throughput": lambda b, t: produce(b.bootstrap, t, args.records, 1024, **{"batch.size": 262_144})
            * 1024 / 1e6,
            "requests": lambda b, t: produce(b.bootstrap, t, args.small_records, 100,
                                             **{"linger.ms": 0, "batch.num.messages": 1}),
        }
        units = {"throughput": "MB/s", "requests": "requests/s"}
        for round_ in range(args.rounds):
            order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for workload, run in workloads.items():
                for name in order:
                    cpu_before = cpu_seconds(brokers[name].process.pid)
                    rate = run(brokers[name], f"bench-{workload}-{round_}")
                    cpu_us = (cpu_seconds(brokers[name].process.pid) - cpu_before) / counts[workload] * 1e6
                    results.setdefault((workload, name), []).append(rate)
                    cpu_per_record.setdefault((workload, name), []).append(cpu_us)
                    print(f"round {round_ + 1}: {workload:10} metrics {name:3} {rate:10.1f} {units[workload]:10} "
                          f"broker CPU {cpu_us:6.1f} µs/record", flush=True)
        scraper.stopped.set()
        scraper.join()
        last_scrape_ms = scraper.durations[-1] * 1000 if scraper.durations else float("nan")
        scrapes = len(scraper.durations)
        median_scrape_ms = statistics.median(scraper.durations) * 1000 if scrapes else float("nan")
    print()
    for workload in workloads:
        off_rate = statistics.median(results[(workload, "off")])
        on_rate = statistics.median(results[(workload, "on")])
        paired = statistics.median(on / off for on, off in zip(results[(workload, "on")], results[(workload, "off")]))
        print(f"{workload:10} metrics off {off_rate:10.1f}, on {on_rate:10.1f} {units[workload]} "
              f"(medians of {args.rounds}): ratio on/off {on_rate / off_rate:.3f} "
              f"(median of the rounds' own ratios {paired:.3f})")
        off_cpu = statistics.median(cpu_per_record[(workload, "off")])
        on_cpu = statistics.median(cpu_per_record[(workload, "on")])
        print(f"{'':10} broker CPU per record off {off_cpu:.1f} µs, on {on_cpu:.1f} µs: "
              f"cost {(on_cpu / off_cpu - 1) * 100:+.1f}%")
    print(f"observer per request (in-process): {observer_cost_us():.2f} µs")
    print(f"scrapes during the run: {scrapes}, median {median_scrape_ms:.1f} ms, last {last_scrape_ms:.1f} ms "
          f"(HTTP round trip included)")
    print("target: ratio on/off >= 0.97 (metrics cost < 3%)")


if __name__ == "__main__":
    main()
