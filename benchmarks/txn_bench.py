"""Plain, idempotent and transactional produce throughput against one ``tidelog serve``.

A confluent-kafka producer sends 1 KiB records (acks=all, linger.ms=5, the
client's default batch.size unless ``--batch-size``, 3 partitions) for
``--seconds`` in each mode: plain (idempotence off), idempotent, and
transactional with a commit every 100 ms (begin, produce for 100 ms,
commit_transaction). The modes alternate for ``--rounds`` rounds in the same run,
each on a fresh topic (deleted afterwards, so the disk does not fill). Printed
per mode, medians over the rounds: MB/s acknowledged (committed, for
transactions), the broker's CPU seconds per GB and the client's, and the ratio
to plain (issue targets: idempotent >= 0.9, transactional >= 0.7).

The run writes several GB, more than the page cache absorbs at its burst speed:
the raw sequential-write ceiling (``os.write`` of 1 MiB blocks to a file beside
the broker's data, no fsync) is measured before the first round (burst: the page
cache takes it) and after the last (sustained: the kernel is writing back and
reclaiming), and each round's figures are printed so the burst rounds can be
told from the sustained ones.

The same modes against librdkafka's built-in mock cluster
(``test.mock.num.brokers=1``, in the client's process) show what the client
itself loses with idempotence (at most 5 requests in flight per connection) and
with transactions. On this 2-core machine the client and the broker share the
CPUs, so the client's own costs show up in tidelog's figures too.

The broker's share alone: the same three modes sent by a lean client (the
project's own asyncio protocol client, batches of 900 records built once and
re-stamped with each request's sequence numbers, 5 requests in flight, one batch
per partition per request, a transaction committed every 100 ms with
AddPartitionsToTxn + EndTxn), so the broker, not the client, is the bottleneck.

    python benchmarks/txn_bench.py [--seconds 10] [--rounds 3] [--batch-size N] [--no-mock]
                                   [--no-lean]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from crc32c import crc32c  # noqa: E402

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.client import KafkaConnection  # noqa: E402
from tidelog.records.batch import build_batch  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

PARTITIONS = 3
VALUE = b"x" * 1024
COMMIT_INTERVAL_S = 0.1
MODES = ("plain", "idempotent", "transactional")
RAW_BLOCK = os.urandom(1 << 20)        # random: this machine's virtual disk takes zeros without storing them


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raw_write_rate(directory: str, seconds: float) -> float:
    """MB/s of 1 MiB ``os.write`` calls for ``seconds`` (no fsync: what the page cache
    and the disk behind it take, the ceiling for a broker that does not fsync per
    request either)."""
    fd, path = tempfile.mkstemp(dir=directory, prefix="raw-write-")
    try:
        written, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            written += os.write(fd, RAW_BLOCK)
        return written / (time.monotonic() - start) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def run(bootstrap: str, topic: str, mode: str, seconds: float, batch_size: int | None) -> dict:
    """One mode for ``seconds``: MB/s acknowledged and the number of transactions."""
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
              "enable.idempotence": mode != "plain"}
    if batch_size is not None:
        config["batch.size"] = batch_size
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
    else:
        producer.list_topics(timeout=10)
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
            producer.commit_transaction(60)
            transactions += 1
        else:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.monotonic() - start
    return {"rate": acked[0] * len(VALUE) / elapsed / 1e6, "bytes": acked[0] * len(VALUE),
            "transactions": transactions}


def measure(bootstrap: str, topic: str, mode: str, seconds: float, batch_size: int | None,
            broker_pid: int | None) -> dict:
    broker_before = process_cpu_s(broker_pid) if broker_pid else 0.0
    client_before = own_cpu_s()
    result = run(bootstrap, topic, mode, seconds, batch_size)
    gigabytes = max(result["bytes"], 1) / 1e9
    result["client_cpu_per_gb"] = (own_cpu_s() - client_before) / gigabytes
    result["broker_cpu_per_gb"] = (process_cpu_s(broker_pid) - broker_before) / gigabytes if broker_pid else 0.0
    return result


LEAN_RECORDS_PER_BATCH = 900          # ~0.93 MB: under message.max.bytes (1 MiB + 12)
LEAN_IN_FLIGHT = 5                    # what librdkafka allows an idempotent producer
_SEQUENCE_AT, _CRC_AT, _CRC_FROM = 53, 17, 21   # baseSequence, crc and attributes in a v2 batch header


def restamp(template: bytes, base_sequence: int) -> bytes:
    """The template batch with another base sequence (and its CRC recomputed)."""
    batch = bytearray(template)
    struct.pack_into(">i", batch, _SEQUENCE_AT, base_sequence)
    struct.pack_into(">I", batch, _CRC_AT, crc32c(memoryview(batch)[_CRC_FROM:]))
    return bytes(batch)


async def lean_run(port: int, topic: str, mode: str, seconds: float, values: list[bytes] | None = None,
                   started=None, progress=None) -> dict:
    """One mode from the lean client: MB/s acknowledged. ``values``: the batch's record
    values (default: LEAN_RECORDS_PER_BATCH times VALUE); ``started()`` is called as
    the timed part begins, ``progress(bytes acknowledged)`` after each answer."""
    values = values or [VALUE] * LEAN_RECORDS_PER_BATCH
    batch_bytes = sum(map(len, values))
    connection = await KafkaConnection.connect("127.0.0.1", port, client_id="txn-bench")
    try:
        await connection.request(ApiKey.METADATA, {"topics": [{"name": topic, "topic_id": None}],
                                                   "allow_auto_topic_creation": True,
                                                   "include_topic_authorized_operations": False}, version=12)
        await asyncio.sleep(1.0)                                   # leaders elected
        producer_id, epoch, transactional_id = -1, -1, None
        if mode != "plain":
            transactional_id = f"lean-{topic}" if mode == "transactional" else None
            init = await connection.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": transactional_id, "transaction_timeout": 60000,
                "producer_id": -1, "producer_epoch": -1}, version=4)
            producer_id, epoch = int(init.producer_id), int(init.producer_epoch)
        template = build_batch(values, producer_id=producer_id, producer_epoch=epoch,
                               base_sequence=0 if mode != "plain" else -1,
                               is_transactional=mode == "transactional", timestamp_ms=int(time.time() * 1000))
        sequences = [0] * PARTITIONS
        in_flight: set[asyncio.Task] = set()
        acked = [0]

        async def produce(body: dict) -> None:
            response = await connection.request(ApiKey.PRODUCE, body, version=9, timeout_s=60)
            for partition in response.responses[0].partition_responses:
                assert int(partition.error_code.value) == 0, partition
            acked[0] += batch_bytes * PARTITIONS
            if progress is not None:
                progress(acked[0])

        async def drain() -> None:
            if in_flight:
                await asyncio.gather(*in_flight)
                in_flight.clear()
        if started is not None:
            started()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if mode == "transactional":
                await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                    "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [{"name": topic, "partitions": list(range(PARTITIONS))}]}, version=3)
            window_end = time.monotonic() + COMMIT_INTERVAL_S
            while time.monotonic() < window_end:
                partitions = []
                for p in range(PARTITIONS):
                    records = restamp(template, sequences[p]) if mode != "plain" else template
                    sequences[p] += len(values)
                    partitions.append({"index": p, "records": records})
                body = {"transactional_id": transactional_id, "acks": -1, "timeout": 30000,
                        "topic_data": [{"name": topic, "partition_data": partitions}]}
                task = asyncio.create_task(produce(body))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                while len(in_flight) >= LEAN_IN_FLIGHT:
                    await asyncio.wait(set(in_flight), return_when=asyncio.FIRST_COMPLETED)
            if mode == "transactional":
                await drain()
                end = await connection.request(ApiKey.END_TXN, {
                    "transactional_id": transactional_id, "producer_id": producer_id,
                    "producer_epoch": epoch, "committed": True}, version=3)
                assert int(end.error_code.value) == 0, end
        await drain()
        elapsed = time.monotonic() - start
        return {"rate": acked[0] / elapsed / 1e6, "bytes": acked[0]}
    finally:
        connection.close()


def lean_measure(port: int, topic: str, mode: str, seconds: float, broker_pid: int) -> dict:
    broker_before, client_before = process_cpu_s(broker_pid), own_cpu_s()
    result = asyncio.run(lean_run(port, topic, mode, seconds))
    gigabytes = max(result["bytes"], 1) / 1e9
    result["client_cpu_per_gb"] = (own_cpu_s() - client_before) / gigabytes
    result["broker_cpu_per_gb"] = (process_cpu_s(broker_pid) - broker_before) / gigabytes
    return result


def mock_bootstrap() -> tuple[Producer, str]:
    """librdkafka's mock cluster lives as long as the client that made it."""
    holder = Producer({"test.mock.num.brokers": 1})
    broker = list(holder.list_topics(timeout=10).brokers.values())[0]
    return holder, f"{broker.host}:{broker.port}"


def report(name: str, results: dict[str, list[dict]], rounds: int, with_cpu: bool) -> None:
    plain = statistics.median(r["rate"] for r in results["plain"])
    for mode in MODES:
        if not results[mode]:
            continue
        rate = statistics.median(r["rate"] for r in results[mode])
        line = f"{name:8} {mode:13} {rate:7.1f} MB/s  ratio to plain {rate / plain:.2f}"
        if with_cpu:
            broker = statistics.median(r["broker_cpu_per_gb"] for r in results[mode])
            client = statistics.median(r["client_cpu_per_gb"] for r in results[mode])
            line += f"  CPU s/GB: broker {broker:5.2f}, client {client:5.2f}"
        print(line + f"  (median of {rounds})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="producer batch.size (default: the client's own, 1,000,000 for librdkafka)")
    parser.add_argument("--no-mock", action="store_true", help="skip the mock-cluster reference")
    parser.add_argument("--no-lean", action="store_true", help="skip the lean client (the broker's share)")
    args = parser.parse_args()
    print(f"batch.size {args.batch_size or 'client default'}, {args.seconds:g} s per mode, "
          f"{args.rounds} rounds", flush=True)
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    lean_results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with Broker(overrides={"num.partitions": str(PARTITIONS)}) as broker:
        data_dir = broker.data_dir
        raw_before = raw_write_rate(data_dir, 3.0)
        print(f"raw sequential write before the run: {raw_before:7.1f} MB/s", flush=True)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for round_ in range(args.rounds):
            for mode in MODES:
                topic = f"txn-bench-{mode}-{round_}"
                result = measure(broker.bootstrap, topic, mode, args.seconds, args.batch_size, broker.process.pid)
                results[mode].append(result)
                extra = f" ({result['transactions']} transactions)" if mode == "transactional" else ""
                print(f"round {round_ + 1}: {mode:13} {result['rate']:7.1f} MB/s, broker CPU "
                      f"{result['broker_cpu_per_gb']:.2f} s/GB{extra}", flush=True)
                for future in admin.delete_topics([topic], operation_timeout=30).values():
                    future.result()
        for round_ in range(0 if args.no_lean else args.rounds):
            for mode in MODES:
                topic = f"txn-bench-lean-{mode}-{round_}"
                result = lean_measure(broker.port, topic, mode, args.seconds, broker.process.pid)
                lean_results[mode].append(result)
                print(f"round {round_ + 1}: lean {mode:13} {result['rate']:7.1f} MB/s, broker CPU "
                      f"{result['broker_cpu_per_gb']:.2f} s/GB", flush=True)
                for future in admin.delete_topics([topic], operation_timeout=30).values():
                    future.result()
        raw_after = raw_write_rate(data_dir, 3.0)
        print(f"raw sequential write after the run:  {raw_after:7.1f} MB/s", flush=True)
    mock_results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    if not args.no_mock:
        holder, bootstrap = mock_bootstrap()
        for round_ in range(args.rounds):
            for mode in MODES:
                result = measure(bootstrap, f"mock-{mode}-{round_}", mode, min(args.seconds, 5.0),
                                 args.batch_size, None)
                mock_results[mode].append(result)
        del holder
    print()
    report("tidelog", results, args.rounds, with_cpu=True)
    if not args.no_lean:
        report("lean", lean_results, args.rounds, with_cpu=True)
    if not args.no_mock:
        report("mock", mock_results, args.rounds, with_cpu=False)
    print(f"raw sequential write: {raw_before:.1f} MB/s before, {raw_after:.1f} MB/s after the run")
    print("targets: idempotent / plain >= 0.90, transactional (100 ms commits) / plain >= 0.70")


if __name__ == "__main__":
    main()
