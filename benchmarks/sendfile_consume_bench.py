"""Consuming with and without sendfile: broker CPU seconds per GB consumed, consumer records/s.

Two ``tidelog serve`` processes in one run, one with the default
(``tidelog.network.sendfile.enable=true``: a Fetch's records go from the segment file
to the socket by ``os.sendfile``) and one with it off (records read into Python and
written through the transport). Each gets the same records (confluent-kafka, 3
partitions, produce_consume_bench's producer), then a confluent-kafka consumer
reads them all ``--passes`` times from offset 0. The broker's CPU time (user+system,
from /proc/<pid>/stat) is taken around the reads only.

    python benchmarks/sendfile_consume_bench.py [--records 200000] [--record-bytes 1024] [--passes 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import produce_consume_bench as bench  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def run(sendfile: bool, records: int, passes: int) -> dict:
    with Broker(overrides={"tidelog.network.sendfile.enable": "true" if sendfile else "false"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(bench.TOPIC, bench.PARTITIONS, 1)])[bench.TOPIC].result(30)
        bench.produce({"bootstrap.servers": broker.bootstrap}, records)
        bench.consume(broker.bootstrap)                         # warm: page cache, connections
        cpu_before, started = cpu_seconds(broker.process.pid), time.perf_counter()
        consumed = [bench.consume(broker.bootstrap) for _ in range(passes)]
        cpu = cpu_seconds(broker.process.pid) - cpu_before
        elapsed = time.perf_counter() - started
    total = sum(c["records"] for c in consumed)
    gigabytes = total * bench.RECORD_BYTES / 1e9
    return {"cpu_s_per_gb": cpu / gigabytes, "records_s": total / sum(c["seconds"] for c in consumed),
            "mb_s": total * bench.RECORD_BYTES / elapsed / 1e6, "cpu_s": cpu, "gb": gigabytes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=bench.RECORD_BYTES)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    bench.RECORD_BYTES = args.record_bytes
    on = run(True, args.records, args.passes)
    off = run(False, args.records, args.passes)
    print(f"records: {args.records} x {args.record_bytes} B, {bench.PARTITIONS} partitions, "
          f"read {args.passes} times ({on['gb']:.2f} GB)")
    print(f"{'':24}{'sendfile':>12}{'copied':>12}{'ratio':>8}")
    for label, key, fmt in (("broker CPU s/GB", "cpu_s_per_gb", "{:.2f}"), ("consumer records/s", "records_s", "{:.0f}"),
                            ("consumer MB/s", "mb_s", "{:.1f}")):
        a, b = on[key], off[key]
        print(f"{label:24}{fmt.format(a):>12}{fmt.format(b):>12}{a / b:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
