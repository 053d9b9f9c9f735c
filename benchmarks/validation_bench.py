"""Broker CPU per GB produced, and what the leader's record validation costs of it (issue 30).

For 1 KiB and 100-byte records, each produced plain and idempotent (acks=all) to
3 partitions by txn_bench's lean client (batches of 900 records built once, 5
requests in flight: the broker is the bottleneck) or, with ``--confluent``, by a
confluent-kafka producer (linger.ms=5; plain is acks=1), fresh ``tidelog serve``
processes in the same run, alternating ``--rounds`` times, one per way of
checking records:

* ``exact``: every batch checked by ``walk_records`` alone, the validator as it
  was before ``accept_records`` (the fast walk answers "not so" at once, patched at
  interpreter start through a ``sitecustomize`` module, so nothing else differs);
* ``fast``: the broker as shipped (``accept_records_vectorized`` for a batch of 64
  records or more, ``accept_records`` for the rest or what it leaves, then
  ``walk_records`` only for a batch neither accepts);
* ``none`` (with ``--floor``): no record checked at all, the floor any validator
  can reach.

The figure is the broker process's CPU seconds (user + system, from /proc) spent
while the producer sends and until its last acknowledgement, per GB of record
values, after a warm-up a tenth as long (so imports and first calls are not in it): CPU time, not wall time, so a machine shared with other work slows the
run but moves the figure little. Prints the medians and each one's ratio to
``exact`` (issue target: broker CPU s/GB <= 0.5 of the reference), then the two
walks' own cost per record measured in this process.

    python benchmarks/validation_bench.py [--seconds 8] [--rounds 1] [--floor] [--confluent [--megabytes 60]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import txn_bench  # noqa: E402
from tidelog.records.batch import SimpleRecord, build_batch  # noqa: E402
from tidelog.records.validator import accept_records, accept_records_vectorized, walk_records  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

TOPIC, PARTITIONS = "bench", 3
CASES = [(1024, False), (1024, True), (100, False), (100, True)]      # (value bytes, idempotent)
_PATCHES = {
    "exact": ("import tidelog.records.validator as v\n"
              "v.accept_records = v.accept_records_vectorized = lambda *args, **kwargs: None\n"),
    "fast": None,
    "none": "import tidelog.storage.log\ntidelog.storage.log.validate_records = lambda *args, **kwargs: None\n",
}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, value_bytes: int, idempotent: bool, records: int) -> None:
    settings = {"enable.idempotence": True, "acks": "all"} if idempotent else {"acks": "1"}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 262_144,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000,
                         "log.connection.close": False, **settings})
    value = os.urandom(value_bytes)
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "records left unacknowledged"
    assert not failures, failures[:3]
    del producer        # disconnects now, before the broker stops


def lean_produce(port: int, value_bytes: int, idempotent: bool, seconds: float) -> int:
    """txn_bench's lean client (batches of 900 records built once, 5 requests in flight,
    the broker the bottleneck) for ``seconds``; returns the value bytes acknowledged."""
    txn_bench.VALUE = b"x" * value_bytes
    mode = "idempotent" if idempotent else "plain"
    return asyncio.run(txn_bench.lean_run(port, TOPIC, mode, seconds))["bytes"]


def broker_cpu_s_per_gb(mode: str, value_bytes: int, idempotent: bool, megabytes: int, lean_seconds: float) -> float:
    records = megabytes * 1_000_000 // value_bytes
    saved = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory() as patch_dir:
        if _PATCHES[mode]:
            with open(os.path.join(patch_dir, "sitecustomize.py"), "w") as f:
                f.write(_PATCHES[mode])
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (patch_dir, saved) if p)
        try:
            with Broker() as broker:
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
                if lean_seconds:
                    lean_produce(broker.port, value_bytes, idempotent, lean_seconds / 10)   # warm-up
                    before = cpu_seconds(broker.process.pid)
                    value_total = lean_produce(broker.port, value_bytes, idempotent, lean_seconds)
                else:
                    produce(broker.bootstrap, value_bytes, idempotent, records // 10)    # warm-up
                    before = cpu_seconds(broker.process.pid)
                    produce(broker.bootstrap, value_bytes, idempotent, records)
                    value_total = records * value_bytes
                spent = cpu_seconds(broker.process.pid) - before
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    return spent / (value_total / 1e9)


def walk_us_per_record(walk, value_bytes: int) -> float:
    """CPU microseconds per record of one walk over a 200-record batch (keyed, no headers)."""
    body = build_batch([SimpleRecord(b"v" * value_bytes, b"key-%d" % i) for i in range(200)],
                       timestamp_ms=int(time.time() * 1000))[61:]
    rounds = 300
    walk(body, 200)                 # first call: accept_records_vectorized imports numpy
    start = time.process_time()
    for _ in range(rounds):
        walk(body, 200)
    return (time.process_time() - start) / rounds / 200 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="lean client: seconds of produce per run")
    parser.add_argument("--confluent", action="store_true", help="confluent-kafka instead of the lean client")
    parser.add_argument("--megabytes", type=int, default=60, help="confluent-kafka: record values per run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--floor", action="store_true", help="also run brokers that check no record")
    args = parser.parse_args()
    modes = ["exact", "fast"] + (["none"] if args.floor else [])
    results: dict[tuple, list[float]] = {}
    for round_ in range(args.rounds):
        for value_bytes, idempotent in CASES:
            for mode in modes:
                figure = broker_cpu_s_per_gb(mode, value_bytes, idempotent, args.megabytes,
                                             0.0 if args.confluent else args.seconds)
                results.setdefault((value_bytes, idempotent, mode), []).append(figure)
                print(f"round {round_ + 1}: {value_bytes:>4} B {'idempotent' if idempotent else 'plain     '} "
                      f"{mode:5} {figure:6.2f} broker CPU s/GB", flush=True)
    client = (f"confluent-kafka, {args.megabytes} MB of values" if args.confluent
              else f"lean client, {args.seconds:g} s")
    print(f"broker CPU s/GB produced, medians of {args.rounds} ({client} a run; "
          f"CPU time, so a shared machine moves it little)")
    print(f"{'':22}" + "".join(f"{mode:>8}" for mode in modes) + "".join(f"{mode + '/exact':>12}" for mode in modes[1:]))
    for value_bytes, idempotent in CASES:
        medians = {mode: statistics.median(results[(value_bytes, idempotent, mode)]) for mode in modes}
        label = f"{value_bytes} B {'idempotent' if idempotent else 'plain'}"
        print(f"{label:22}" + "".join(f"{medians[m]:8.2f}" for m in modes)
              + "".join(f"{medians[m] / medians['exact']:12.2f}" for m in modes[1:]))
    for value_bytes in (1024, 100):
        print(f"walk of {value_bytes} B records, us/record: " + ", ".join(
            f"{walk.__name__} {walk_us_per_record(walk, value_bytes):.2f}"
            for walk in (walk_records, accept_records, accept_records_vectorized)))
    print("target: fast/exact <= 0.50 (issue 30)")


if __name__ == "__main__":
    main()
