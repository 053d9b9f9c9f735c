"""Produce a clickstream: JSON page-view events into a tidelog topic.

Each record's key is the user and its value a JSON event:
``{"user": "u17", "page": "/pricing", "event_time_ms": 1700000000123}``.
Event times run a little behind the wall clock (0-3 s, some events arrive
late), as clicks forwarded from browsers do.

    python examples/clickstream_generator.py --events 20000 --rate 500

against ``tidelog serve`` (``make run``) or ``tidelog cluster up``
(``--bootstrap host:port,...``). ``--rate 0`` produces as fast as possible with
synthetic event times one ``--spacing-ms`` apart (used by the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tidelog.records import SimpleRecord  # noqa: E402
from tidelog.spark.options import SinkOptions  # noqa: E402
from tidelog.spark.producer import Producer, partition_for_key  # noqa: E402
from tidelog.spark.wire import ClientConfig, Cluster  # noqa: E402

PAGES = ["/", "/pricing", "/docs", "/docs/spark", "/blog", "/signup", "/login", "/careers"]
WEIGHTS = [30, 12, 20, 8, 10, 6, 10, 4]


def events(count: int, seed: int = 1, start_ms: int | None = None, spacing_ms: int = 0, users: int = 200):
    """The events, deterministic for a seed when ``start_ms`` is given."""
    rng = random.Random(seed)
    for i in range(count):
        if start_ms is None:
            event_time_ms = int(time.time() * 1000) - int(rng.expovariate(1 / 300)) % 3000
        else:
            event_time_ms = start_ms + i * spacing_ms - rng.randrange(0, 3000)
        yield {"user": f"u{rng.randrange(users)}", "page": rng.choices(PAGES, WEIGHTS)[0],
               "event_time_ms": event_time_ms}


def generate(bootstrap: str, topic: str = "clicks", count: int = 10_000, rate: float = 500, partitions: int = 3,
             seed: int = 1, start_ms: int | None = None, spacing_ms: int = 1000) -> list[dict]:
    """Create the topic if needed and produce ``count`` events; returns them."""
    config = ClientConfig(bootstrap)
    cluster = Cluster(config)
    cluster.create_topic(topic, partitions)
    cluster.wait_for_leaders(topic)
    count_partitions = len(cluster.topics[topic].leaders)
    producer = Producer(cluster, SinkOptions(client=config), exactly_once_attempts=False)
    synthetic = rate <= 0
    began = time.monotonic()
    produced = []
    # Synthetic event times end about now: brokers refuse timestamps more than
    # log.message.timestamp.after.max.ms (one hour, Kafka 4's default) in the future.
    first_ms = start_ms if start_ms is not None else int(time.time() * 1000) - count * spacing_ms
    for i, event in enumerate(events(count, seed, first_ms if synthetic else None,
                                     spacing_ms if synthetic else 0)):
        key = event["user"].encode()
        producer.append((topic, partition_for_key(key, count_partitions)),
                        SimpleRecord(json.dumps(event).encode(), key=key, timestamp_ms=event["event_time_ms"]))
        produced.append(event)
        if not synthetic and i % 50 == 49:
            producer.flush()
            ahead_s = (i + 1) / rate - (time.monotonic() - began)
            if ahead_s > 0:
                time.sleep(ahead_s)
    producer.flush()
    cluster.close()
    return produced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=500, help="events per second; 0 = as fast as possible")
    parser.add_argument("--partitions", type=int, default=3, help="partitions if the topic is created")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spacing-ms", type=int, default=1000, help="event time step with --rate 0")
    args = parser.parse_args(argv)
    started = time.monotonic()
    produced = generate(args.bootstrap, args.topic, args.events, args.rate, args.partitions, args.seed,
                        spacing_ms=args.spacing_ms)
    print(f"produced {len(produced)} events to {args.topic} in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
