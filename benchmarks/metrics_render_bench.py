"""How long a ``/metrics`` scrape holds a broker's event loop, against prometheus_client.

A broker renders ``/metrics`` on its event loop (server/metrics.py): while it writes,
it serves nothing else. This starts the server ``tidelog serve`` runs (``Server``,
one combined node, ``metrics.port`` set) in this process, creates ``--partitions``
partitions (topics of 100) with confluent-kafka's AdminClient and writes a record to
each, then, with both formats a scraper negotiates — the classic text format and
OpenMetrics (what Prometheus asks for first) — times on the loop, one after the other:

* **tidelog**: the answer ``GET /metrics`` gets (``MetricsHttpServer._answer``:
  collect, then server/exposition.py writes the text);
* **prometheus_client**: the same registry through prometheus_client's own encoder
  (what tidelog served before; the reference), and checks both bytes are equal;

and last the latency of a real HTTP scrape from another thread. Prints medians of
``--rounds`` and the ratio tidelog / prometheus_client (below 1: faster).

    python benchmarks/metrics_render_bench.py [--partitions 1000 5000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402

from tidelog.broker.config import BrokerConfig  # noqa: E402
from tidelog.server.runtime import Server  # noqa: E402

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def _create(port: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    names = [f"m{i}" for i in range((partitions + 99) // 100)]
    sizes = [min(100, partitions - 100 * i) for i in range(len(names))]
    for name, size in zip(names, sizes):
        for future in admin.create_topics([NewTopic(name, size, 1)], operation_timeout=120).values():
            future.result()
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 50})
    for name, size in zip(names, sizes):
        for p in range(size):
            producer.produce(name, b"x" * 100, partition=p)
        producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records not delivered")


def _scrape(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": PROMETHEUS_ACCEPT}), timeout=60) as r:
        r.read()
    return (time.perf_counter() - started) * 1000


async def _measure(partitions: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        server = Server(BrokerConfig({"node.id": "1", "log.dirs": data, "listeners": "PLAINTEXT://127.0.0.1:0",
                                      "metrics.port": "0"}))
        await server.start()
        try:
            started = time.perf_counter()
            await asyncio.to_thread(_create, server.bind_port, partitions)
            print(f"{partitions:6,} partitions created and written in {time.perf_counter() - started:.1f} s",
                  flush=True)
            http, registry = server.metrics.http, server.metrics.registry
            for label, accept in (("text 0.0.4", ""), ("OpenMetrics", PROMETHEUS_ACCEPT)):
                encoder, _ = choose_encoder(accept)
                ours, theirs = [], []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    body = http._answer(["GET", "/metrics", "HTTP/1.1"], {"accept": accept})[2]
                    t1 = time.perf_counter()
                    reference = encoder(registry)
                    t2 = time.perf_counter()
                    ours.append((t1 - t0) * 1000)
                    theirs.append((t2 - t1) * 1000)
                    assert body == reference, "the bytes differ from prometheus_client's"
                    await asyncio.sleep(0.05)
                a, b = statistics.median(ours), statistics.median(theirs)
                print(f"{partitions:6,} partitions {label:12} {len(body):>10,} bytes  tidelog {a:7.1f} ms  "
                      f"prometheus_client {b:7.1f} ms  ratio {a / b:.2f}", flush=True)
            scrapes = [await asyncio.to_thread(_scrape, http.url) for _ in range(rounds)]
            print(f"{partitions:6,} partitions HTTP scrape (OpenMetrics) median {statistics.median(scrapes):.1f} ms",
                  flush=True)
        finally:
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for partitions in args.partitions:
        asyncio.run(_measure(partitions, args.rounds))


if __name__ == "__main__":
    main()
