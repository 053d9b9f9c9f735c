"""The cost of the leader's record validation on produce throughput.

Two fresh ``tidelog serve`` processes in the same run, alternating ``--rounds``
times: the broker as shipped (every record of every batch checked,
``tidelog.records.validator``), and the same broker with that check replaced by
a no-op (patched at interpreter start through a ``sitecustomize`` module, so
nothing else differs). A confluent-kafka producer sends 1 KiB records (acks=1,
linger.ms=5, 3 partitions) to each; prints MB/s, the ratio validated /
unvalidated (issue target: >= 0.9), and the validator's own cost per record
measured in this process for 1 KiB and 100-byte records.

    python benchmarks/validation_bench.py [--records 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from produce_consume_bench import PARTITIONS, TOPIC, produce  # noqa: E402
from tidelog.records.batch import SimpleRecord, build_batch, read_header  # noqa: E402
from tidelog.records.validator import validate_records  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

_NO_VALIDATION = """
import tidelog.storage.log
tidelog.storage.log.validate_records = lambda *args, **kwargs: None
"""


def run(records: int, validated: bool) -> float:
    saved = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory() as patch_dir:
        if not validated:
            with open(os.path.join(patch_dir, "sitecustomize.py"), "w") as f:
                f.write(_NO_VALIDATION)
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (patch_dir, saved) if p)
        try:
            with Broker() as broker:
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
                return produce({"bootstrap.servers": broker.bootstrap}, records)["mb_s"]
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def validator_us_per_record(value_bytes: int) -> float:
    batch = build_batch([SimpleRecord(b"v" * value_bytes, b"key-%d" % i) for i in range(200)],
                        timestamp_ms=int(time.time() * 1000))
    header = read_header(batch)
    now_ms = int(time.time() * 1000)
    rounds = 300
    start = time.perf_counter()
    for _ in range(rounds):
        validate_records(batch, 0, header, now_ms, 1 << 62, 3_600_000, True)
    return (time.perf_counter() - start) / rounds / 200 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for validated in (False, True):
            rate = run(args.records, validated)
            results[validated].append(rate)
            print(f"round {round_ + 1}: {'validated  ' if validated else 'unvalidated'} {rate:7.1f} MB/s", flush=True)
    off, on = statistics.median(results[False]), statistics.median(results[True])
    print(f"unvalidated {off:.1f} MB/s, validated {on:.1f} MB/s (medians of {args.rounds}): ratio {on / off:.2f}")
    print(f"validator: {validator_us_per_record(1024):.2f} us/record (1 KiB values), "
          f"{validator_us_per_record(100):.2f} us/record (100 B values)")
    print("target: ratio >= 0.90")


if __name__ == "__main__":
    main()
