"""Idempotent vs plain produce throughput against one ``tidelog serve``.

A confluent-kafka producer sends 1 KiB records (acks=all, linger.ms=5, 3
partitions) to a fresh ``tidelog serve`` process, once with
``enable.idempotence=false`` and once with ``true`` (the default of modern
clients), alternating ``--rounds`` times in the same run; prints MB/s for each
and the ratio idempotent / plain (issue target: >= 0.9). The same pair against
librdkafka's built-in mock cluster (``test.mock.num.brokers=1``) shows what the
client itself loses with idempotence (at most 5 requests in flight per broker),
the reference for the broker's share (docs/storage.md, "Idempotent producers").

    python benchmarks/idempotence_bench.py [--records 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402

from tidelog.testing import Broker  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from replication_bench import throughput  # noqa: E402

PARTITIONS = 3


def produce(bootstrap: str, topic: str, records: int, idempotent: bool) -> float:
    return throughput(bootstrap, topic, "all", records, **{"enable.idempotence": idempotent, "batch.size": 262_144})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    mock = Producer({"test.mock.num.brokers": 1, "partitioner": "consistent"})
    broker0 = list(mock.list_topics(timeout=10).brokers.values())[0]
    targets = {"mock": f"{broker0.host}:{broker0.port}"}
    results: dict[tuple[str, bool], list[float]] = {}
    with Broker(overrides={"num.partitions": str(PARTITIONS)}) as broker:
        targets["tidelog"] = broker.bootstrap
        for round_ in range(args.rounds):
            for name, bootstrap in targets.items():
                for idempotent in (False, True):
                    topic = f"bench-{'idem' if idempotent else 'plain'}-{round_}"
                    rate = produce(bootstrap, topic, args.records, idempotent)
                    results.setdefault((name, idempotent), []).append(rate)
                    print(f"round {round_ + 1}: {name:8} {'idempotent' if idempotent else 'plain     '} "
                          f"{rate:8.1f} MB/s", flush=True)
    for name in targets:
        plain, idem = statistics.median(results[(name, False)]), statistics.median(results[(name, True)])
        print(f"{name:8} plain {plain:7.1f} MB/s, idempotent {idem:7.1f} MB/s (medians of {args.rounds}): "
              f"ratio {idem / plain:.2f}")
    print("target: tidelog's ratio >= 0.90")


if __name__ == "__main__":
    main()
