"""Transactional vs plain produce throughput against one ``tidelog serve``.

A confluent-kafka producer sends 1 KiB records (acks=all, 3 partitions) for
``--seconds`` each: plain (idempotence off), idempotent, and transactional with
a commit every 100 ms (begin, produce, commit_transaction), alternating
``--rounds`` times in the same run; prints MB/s for each and the ratios to
plain (issue target: transactional >= 0.7). Every transaction's commit waits for
its markers to be written to each partition with acks=all, so the cost is one
round of markers per 100 ms (docs/transactions.md).

    python benchmarks/txn_bench.py [--seconds 8] [--rounds 2]
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

PARTITIONS = 3
VALUE = b"x" * 1024
COMMIT_INTERVAL_S = 0.1


def run(bootstrap: str, topic: str, mode: str, seconds: float) -> tuple[float, int]:
    """MB/s acknowledged (committed, for transactions) and the number of transactions."""
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 262_144,
              "enable.idempotence": mode != "plain"}
    if mode == "transactional":
        config["transactional.id"] = f"bench-{topic}"
    producer = Producer(config)
    acked = [0]

    def delivered(error, message):
        if error is None:
            acked[0] += 1
    transactions = 0
    if mode == "transactional":
        producer.init_transactions(30)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if mode == "transactional":
            producer.begin_transaction()
        window_end = time.monotonic() + COMMIT_INTERVAL_S
        i = 0
        while time.monotonic() < window_end:
            try:
                producer.produce(topic, VALUE, partition=i % PARTITIONS, on_delivery=delivered)
                i += 1
            except BufferError:
                producer.poll(0.005)
            if i % 1000 == 0:
                producer.poll(0)
        if mode == "transactional":
            producer.commit_transaction(30)
            transactions += 1
        else:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.monotonic() - start
    return acked[0] * len(VALUE) / elapsed / 1e6, transactions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    modes = ("plain", "idempotent", "transactional")
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    with Broker(overrides={"num.partitions": str(PARTITIONS)}) as broker:
        for round_ in range(args.rounds):
            for mode in modes:
                rate, transactions = run(broker.bootstrap, f"txn-bench-{mode}-{round_}", mode, args.seconds)
                results[mode].append(rate)
                extra = f" ({transactions} transactions)" if mode == "transactional" else ""
                print(f"round {round_ + 1}: {mode:13} {rate:7.1f} MB/s{extra}", flush=True)
    plain = statistics.median(results["plain"])
    for mode in modes:
        rate = statistics.median(results[mode])
        print(f"{mode:13} {rate:7.1f} MB/s (median of {args.rounds}): ratio to plain {rate / plain:.2f}")
    print("target: transactional (100 ms commits) / plain >= 0.70")


if __name__ == "__main__":
    main()
