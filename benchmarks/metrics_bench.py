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
record (from /proc, to the ns, on vs off). Taken one broker after the other,
that still swings by ±5% from round to round with whatever else runs on the
machine, so the same rounds are run again side by side — both brokers loaded at
once, one producer process each — where the rest of the machine weighs on both
alike: the median of those rounds' own costs is the figure to read. Last, the
metric work the dispatcher adds to a request (µs, in-process, hot caches) and
how long a scrape takes on the metrics-on broker (ms). The producer loop is
replication_bench's.

    python benchmarks/metrics_bench.py [--records 300000] [--small-records 30000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.codec import RequestHeader  # noqa: E402
from tidelog.server.metrics import RequestMetrics  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from replication_bench import PARTITIONS, produce_rate, throughput  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """CPU time of a process so far: the sum over its threads of the scheduler's
    nanoseconds (/proc/<pid>/task/*/schedstat; a broker is one thread), or, without
    schedstat, user + system time in clock ticks (/proc/<pid>/stat, 10 ms steps)."""
    if not os.path.exists(f"/proc/{pid}/schedstat"):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total_ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except FileNotFoundError:       # a thread that just ended
            pass
    return total_ns / 1e9


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
    """In-process: the metric work the dispatcher adds to a Produce request, µs — its
    start timestamp and one RequestMetrics call (a request shorter than 1 ms, as most are)."""
    observe = RequestMetrics().observe          # the function a Dispatcher calls
    header = RequestHeader(ApiKey.PRODUCE, 9, 1, "bench")
    response = {"responses": []}
    clock = time.perf_counter
    started = clock()
    for _ in range(calls):
        observe(header, None, response, clock())
    return (clock() - started) / calls * 1e6


UNITS = {"throughput": "MB/s", "requests": "requests/s"}


def run_workload(workload: str, bootstrap: str, topic: str, records: int) -> float:
    """One producer's run: MB/s of 1 KiB records (throughput) or requests/s of one
    100-byte record per Produce request (requests)."""
    if workload == "throughput":
        return throughput(bootstrap, topic, "1", records, **{"batch.size": 262_144})
    return produce_rate(bootstrap, topic, "1", records, 100, **{"linger.ms": 0, "batch.num.messages": 1})


def _side_by_side_producer(workload: str, name: str, bootstrap: str, topic: str, records: int,
                           start, done) -> None:
    start.wait()
    done.put((name, run_workload(workload, bootstrap, topic, records)))


def side_by_side(brokers: dict, workload: str, topic: str, records: int) -> dict[str, tuple[float, float]]:
    """Both brokers loaded at once, one producer process each: ``{name: (rate, broker CPU µs per
    record)}``, each broker's CPU time taken from the start until its own producer is done.
    What else runs on the machine then weighs on both alike."""
    context = multiprocessing.get_context("spawn")
    start, done = context.Barrier(len(brokers) + 1), context.Queue()
    processes = [context.Process(target=_side_by_side_producer,
                                 args=(workload, name, broker.bootstrap, f"{topic}-{name}", records, start, done))
                 for name, broker in brokers.items()]
    for process in processes:
        process.start()
    start.wait()
    cpu_before = {name: cpu_seconds(broker.process.pid) for name, broker in brokers.items()}
    answers = {}
    for _ in brokers:
        name, rate = done.get(timeout=600)
        answers[name] = (rate, (cpu_seconds(brokers[name].process.pid) - cpu_before[name]) / records * 1e6)
    for process in processes:
        process.join()
    return answers


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
    together: dict[tuple[str, str], list[tuple[float, float]]] = {}     # side by side: (rate, CPU µs/record)
    counts = {"throughput": args.records, "requests": args.small_records}
    workloads = tuple(counts)
    with Broker(overrides=overrides) as off, Broker(overrides={**overrides, "metrics.port": "0"}) as on:
        scraper = Scraper(on.metrics_url, args.scrape_interval)
        scraper.start()
        brokers = {"off": off, "on": on}
        for round_ in range(args.rounds):
            order = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for workload in workloads:
                for name in order:
                    cpu_before = cpu_seconds(brokers[name].process.pid)
                    rate = run_workload(workload, brokers[name].bootstrap, f"bench-{workload}-{round_}",
                                        counts[workload])
                    cpu_us = (cpu_seconds(brokers[name].process.pid) - cpu_before) / counts[workload] * 1e6
                    results.setdefault((workload, name), []).append(rate)
                    cpu_per_record.setdefault((workload, name), []).append(cpu_us)
                    print(f"round {round_ + 1}: {workload:10} metrics {name:3} {rate:10.1f} {UNITS[workload]:10} "
                          f"broker CPU {cpu_us:6.1f} µs/record", flush=True)
        for round_ in range(args.rounds):
            for workload in workloads:
                answers = side_by_side(brokers, workload, f"bench-together-{workload}-{round_}", counts[workload])
                for name, answer in answers.items():
                    together.setdefault((workload, name), []).append(answer)
                (off_rate, off_cpu), (on_rate, on_cpu) = answers["off"], answers["on"]
                print(f"side by side {round_ + 1}: {workload:10} off {off_rate:10.1f}, on {on_rate:10.1f} "
                      f"{UNITS[workload]:10} broker CPU off {off_cpu:6.1f}, on {on_cpu:6.1f} µs/record: "
                      f"cost {(on_cpu / off_cpu - 1) * 100:+.1f}%", flush=True)
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
        print(f"{workload:10} metrics off {off_rate:10.1f}, on {on_rate:10.1f} {UNITS[workload]} "
              f"(medians of {args.rounds}): ratio on/off {on_rate / off_rate:.3f} "
              f"(median of the rounds' own ratios {paired:.3f})")
        off_cpu = statistics.median(cpu_per_record[(workload, "off")])
        on_cpu = statistics.median(cpu_per_record[(workload, "on")])
        paired_cpu = statistics.median(on / off for on, off in zip(cpu_per_record[(workload, "on")],
                                                                   cpu_per_record[(workload, "off")]))
        print(f"{'':10} broker CPU per record off {off_cpu:.1f} µs, on {on_cpu:.1f} µs: "
              f"cost {(on_cpu / off_cpu - 1) * 100:+.1f}% (median of the rounds' own costs "
              f"{(paired_cpu - 1) * 100:+.1f}%)")
        rounds = list(zip(together[(workload, "off")], together[(workload, "on")]))
        rate_ratio = statistics.median(on[0] / off[0] for off, on in rounds)
        cpu_cost = statistics.median(on[1] / off[1] - 1 for off, on in rounds)
        off_cpu, on_cpu = (statistics.median(answer[1] for answer in side) for side in zip(*rounds))
        print(f"{'':10} side by side: broker CPU per record off {off_cpu:.1f} µs, on {on_cpu:.1f} µs: "
              f"cost {cpu_cost * 100:+.1f}% (median of the rounds' own costs); rates on/off {rate_ratio:.3f}")
    print(f"observer per request (in-process, with the dispatcher's timestamp): {observer_cost_us():.2f} µs")
    print(f"scrapes during the run: {scrapes}, median {median_scrape_ms:.1f} ms, last {last_scrape_ms:.1f} ms "
          f"(HTTP round trip included)")
    print("target: ratio on/off >= 0.97 (metrics cost < 3%)")


if __name__ == "__main__":
    main()
