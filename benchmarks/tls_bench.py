"""Produce/consume throughput over TLS vs plaintext, same broker code, same run.

Two ``tidelog serve`` processes in turn — one with a PLAINTEXT listener, one with an
SSL listener (a throwaway CA and certificate from ``trustme``) — each gets the same
confluent-kafka workload as ``produce_consume_bench.py`` (1 KiB records, acks=1,
linger.ms=5, 3 partitions), then a consumer reads everything back. The pair runs
``--rounds`` times alternately; medians are printed with the TLS/plaintext ratios
(target: TLS >= 0.7 of plaintext).

    python benchmarks/tls_bench.py [--records 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

import trustme  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from produce_consume_bench import PARTITIONS, RECORD_BYTES, TOPIC, consume, produce  # noqa: E402
from tidelog.testing import Broker  # noqa: E402


def run(records: int, overrides: dict, client: dict) -> tuple[float, float]:
    with Broker(overrides=overrides) as broker:
        settings = {"bootstrap.servers": broker.bootstrap, **client}
        admin = AdminClient(settings)
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        produced = produce(settings, records)
        consumed = consume(broker.bootstrap, client)
    return produced["mb_s"], consumed["mb_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-tls-bench-") as directory:
        ca = trustme.CA()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(os.path.join(directory, "server.pem"))
        ca.cert_pem.write_to_path(os.path.join(directory, "ca.pem"))
        tls_server = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": os.path.join(directory, "server.pem")}
        tls_client = {"security.protocol": "SSL", "ssl.ca.location": os.path.join(directory, "ca.pem")}
        plain, tls = [], []
        for round_ in range(args.rounds):
            plain.append(run(args.records, {}, {}))
            tls.append(run(args.records, tls_server, tls_client))
            print(f"round {round_ + 1}: plaintext produce {plain[-1][0]:.1f} MB/s consume {plain[-1][1]:.1f} MB/s; "
                  f"TLS produce {tls[-1][0]:.1f} MB/s consume {tls[-1][1]:.1f} MB/s", flush=True)
    print(f"records: {args.records} x {RECORD_BYTES} B, {PARTITIONS} partitions, acks=1, medians of {args.rounds}")
    for label, index in (("produce", 0), ("consume", 1)):
        p = statistics.median(r[index] for r in plain)
        t = statistics.median(r[index] for r in tls)
        print(f"{label}: plaintext {p:.1f} MB/s, TLS {t:.1f} MB/s, TLS/plaintext {t / p:.2f} (target >= 0.7)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
