"""A quota-throttled producer runs at its quota while an unthrottled one runs at full speed.

Two confluent-kafka producers (1 KiB records, acks=1) send to one ``tidelog serve``
at the same time for ``--seconds``: client id ``throttled`` has
``producer_byte_rate`` = ``--quota-kb`` KB/s (set with AlterClientQuotas), client
id ``free`` has no quota. Prints, for each, the acknowledged record bytes per
second over the run after the first ``--warmup`` seconds (the first quota window
lets a client burst: the rate is measured over 10 s), the ratio of the throttled
one to its quota, and the throttle times the broker reported (librdkafka's
``throttle_cb``) and exported (``kafka_server_produce_throttle_time``).

    python benchmarks/quota_bench.py [--seconds 80] [--warmup 13] [--quota-kb 500]

Measured (2-core VM, shared): throttled 494.6 KB/s = 0.99 x its 500 KB/s quota, free 12.7 MB/s,
never throttled (80 s run, 13-80 s). Over a short run the throttled rate swings around the
quota: the first window lets a client send quota x 10 s at once, and each time that sample
expires (about every 11 s) it may burst again, as in Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.client import KafkaConnection  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

RECORD_BYTES = 1024
TOPIC = "quota-bench"


def set_quota(port: int, client_id: str, bytes_per_second: int) -> None:
    async def go():
        connection = await KafkaConnection.connect("127.0.0.1", port, client_id="quota-bench")
        try:
            answer = await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": "producer_byte_rate", "value": float(bytes_per_second), "remove": False}]}]})
            assert int(answer.entries[0].error_code.value) == 0, answer
        finally:
            connection.close()
    asyncio.run(go())


def run_producer(bootstrap: str, client_id: str, stop: threading.Event, acked: list, throttles: list) -> None:
    """Produce until ``stop``; append (monotonic time, bytes) per delivered record."""
    def on_throttle(event):
        throttles.append(event.throttle_time * 1000)

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": "1", "linger.ms": 5,
                         "batch.size": 65_536, "queue.buffering.max.kbytes": 8192, "throttle_cb": on_throttle})
    value = os.urandom(RECORD_BYTES)

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))
    while not stop.is_set():
        try:
            producer.produce(TOPIC, value=value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.flush(30)


def rate(acked: list, since: float, until: float) -> float:
    return sum(n for t, n in acked if since <= t < until) / (until - since)


def metric(url: str, name: str, client_id: str) -> float:
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        if line.startswith(name + "{") and f'client_id="{client_id}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=80)
    parser.add_argument("--warmup", type=float, default=13)
    parser.add_argument("--quota-kb", type=int, default=500)
    args = parser.parse_args()
    quota = args.quota_kb * 1000
    with Broker(overrides={"metrics.port": "0"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])["quota-bench"].result(30)
        set_quota(broker.port, "throttled", quota)
        stop = threading.Event()
        results = {name: ([], []) for name in ("throttled", "free")}
        threads = [threading.Thread(target=run_producer, args=(broker.bootstrap, name, stop, *results[name]))
                   for name in results]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(args.seconds)
        end = time.monotonic()
        stop.set()
        for thread in threads:
            thread.join(60)
        print(f"producer_byte_rate of client id 'throttled': {quota / 1000:.0f} KB/s; measured from "
              f"{args.warmup:.0f} s to {args.seconds:.0f} s of a {args.seconds:.0f} s run, 1 KiB records, acks=1")
        for name, (acked, throttles) in results.items():
            measured = rate(acked, start + args.warmup, end)
            line = f"  {name:9s}: {measured / 1000:9.1f} KB/s acknowledged"
            if name == "throttled":
                line += f" ({measured / quota:.2f} x its quota)"
            line += (f"; broker throttle times (throttle_cb): {len(throttles)}, "
                     f"median {sorted(throttles)[len(throttles) // 2]:.0f} ms" if throttles else "; never throttled")
            line += f"; kafka_server_produce_throttle_time {metric(broker.metrics_url, 'kafka_server_produce_throttle_time', name):.0f} ms"
            print(line)


if __name__ == "__main__":
    main()
