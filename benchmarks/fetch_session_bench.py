"""Broker CPU per Fetch of 1,000 partitions: full fetches against an incremental fetch
session (KIP-227).

One ``tidelog serve`` process (real sockets); a topic of ``--partitions`` partitions,
``--active`` of them holding a few records. A client sends ``--fetches`` Fetch requests
(v12, max_wait 0) for every partition at its log end — the steady state of a fetcher
whose partitions are mostly idle, as most follower fetches of a big cluster are — in
two ways: full (session epoch -1: every Fetch names all partitions and is answered for
all of them) and in one incremental session (epoch 0 once, then 1, 2, ...: nothing
named, nothing answered unless something changed). It reads the broker's CPU time
(/proc/<pid>/stat) around each run and prints CPU ms per Fetch and the ratio.

The Fetches are a consumer's (replica id -1): a follower's go through the same session
code, plus the follower bookkeeping both modes share. 1,000 partitions RF=3 on a
3-broker cluster of processes is beyond what a loaded 2-core machine keeps stable
(the brokers miss heartbeats and are fenced), which is why this runs one node.

    python benchmarks/fetch_session_bench.py [--partitions 1000] [--fetches 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.client import KafkaConnection  # noqa: E402
from tidelog.records import build_batch  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

TOPIC = "many"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS      # utime + stime


def fetch_body(offsets: dict[int, int], session_id: int, epoch: int) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "log_start_offset": -1,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1} for p, offset in offsets.items()]}]
            if offsets else []}


async def measure(broker: Broker, args) -> dict:
    connection = await KafkaConnection.connect("127.0.0.1", broker.port)
    offsets = {p: (3 if p < args.active else 0) for p in range(args.partitions)}
    pid = broker.process.pid
    results = {}
    for mode in ("full", "incremental"):
        session_id, epoch = 0, (-1 if mode == "full" else 0)
        response = await connection.request(ApiKey.FETCH, fetch_body(offsets, session_id, epoch), version=12,
                                            timeout_s=60)
        assert response.error_code.value == 0
        if mode == "incremental":
            session_id, epoch = int(response.session_id), 1
            assert session_id != 0, "the broker opened no session"
        answered = 0
        cpu0, started = cpu_seconds(pid), time.perf_counter()
        for _ in range(args.fetches):
            body = fetch_body(offsets if mode == "full" else {}, session_id, epoch)
            response = await connection.request(ApiKey.FETCH, body, version=12, timeout_s=60)
            assert response.error_code.value == 0, response.error_code
            answered += sum(len(t.partitions) for t in response.responses)
            if mode == "incremental":
                epoch += 1
        elapsed = time.perf_counter() - started
        results[mode] = {"cpu_s": cpu_seconds(pid) - cpu0, "elapsed_s": elapsed,
                         "answered": answered / args.fetches}
    connection.close()
    return results


async def setup(broker: Broker, args) -> None:
    connection = await KafkaConnection.connect("127.0.0.1", broker.port)
    await connection.request(ApiKey.CREATE_TOPICS, {"topics": [
        {"name": TOPIC, "num_partitions": args.partitions, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 120_000, "validate_only": False}, version=5, timeout_s=300)
    for p in range(args.active):
        while True:
            response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 30_000, "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": p, "records": build_batch([b"a", b"b", b"c"])}]}]},
                version=9, timeout_s=60)
            if response.responses[0].partition_responses[0].error_code.value == 0:
                break
            await asyncio.sleep(0.2)      # the partition's leader not ready yet
    connection.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=10, help="partitions holding records")
    parser.add_argument("--fetches", type=int, default=300)
    args = parser.parse_args(argv)
    with Broker() as broker:
        asyncio.run(setup(broker, args))
        results = asyncio.run(measure(broker, args))
    print(f"{args.partitions} partitions, one tidelog serve process; {args.fetches} Fetches (max_wait 0) at the log end")
    for mode, r in results.items():
        print(f"{mode:12} broker CPU {r['cpu_s'] * 1000 / args.fetches:7.2f} ms per Fetch   "
              f"wall {r['elapsed_s'] * 1000 / args.fetches:7.2f} ms per Fetch   "
              f"partitions answered per Fetch {r['answered']:6.0f}")
    full, incremental = results["full"], results["incremental"]
    print(f"broker CPU per Fetch, incremental / full: {incremental['cpu_s'] / max(full['cpu_s'], 1e-9):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
