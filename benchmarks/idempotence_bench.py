"""Idempotent vs plain produce throughput against one ``tidelog serve``.

A confluent-kafka producer sends 1 KiB records (acks=all, linger.ms=5, 3
partitions) to a fresh ``tidelog serve`` process, once with
``enable.idempotence=false`` and once with ``true`` (the default of modern
clients), alternating ``--rounds`` times in the same run; prints MB/s for each
and the ratio idempotent / plain (issue target: >= 0.9). The difference is the
broker's producer-state check per batch (docs/storage.md, "Idempotent producers").

    python benchmarks/idempotence_bench.py [--records 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402

from tidelog.testing import Broker  # noqa: E402

RECORD_BYTES = 1024
PARTITIONS = 3


def produce(bootstrap: str, topic: str, records: int, idempotent: bool) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                         "linger.ms": 5, "batch.size": 262_144, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 2_000_000})
    value = os.urandom(RECORD_BYTES)
    failures = []
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg: failures.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed = time.perf_counter() - start
    assert not failures, failures[:3]
    return records * RECORD_BYTES / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[bool, list[float]] = {False: [], True: []}
    with Broker(overrides={"num.partitions": str(PARTITIONS)}) as broker:
        for round_ in range(args.rounds):
            for idempotent in (False, True):
                topic = f"bench-{'idem' if idempotent else 'plain'}-{round_}"
                rate = produce(broker.bootstrap, topic, args.records, idempotent)
                results[idempotent].append(rate)
                print(f"round {round_ + 1}: {'idempotent' if idempotent else 'plain     '} {rate:8.1f} MB/s",
                      flush=True)
    plain, idem = statistics.median(results[False]), statistics.median(results[True])
    print(f"plain (acks=all)      {plain:8.1f} MB/s (median of {args.rounds})")
    print(f"idempotent (acks=all) {idem:8.1f} MB/s (median of {args.rounds})")
    print(f"ratio idempotent / plain: {idem / plain:.2f} (target >= 0.90)")


if __name__ == "__main__":
    main()
