"""Consumer groups against ``tidelog serve``: rebalance times, commits/s, subscribe() vs assign().

In one run, against one fresh ``tidelog serve`` process, with confluent-kafka:

* **Rebalance after a join / after a leave**: three members of a classic group
  (session.timeout.ms 10000, the broker's group.initial.rebalance.delay.ms 3000,
  Kafka's defaults but a shorter session), then a fourth joins, then one leaves
  with ``close()``: the time until every remaining member holds its new share,
  printed next to the session timeout (what a crashed member would cost) and the
  initial delay. The same with ``group.protocol=consumer`` (KIP-848).
* **Commits/s**: synchronous OffsetCommit round trips of one member (each one is
  appended to ``__consumer_offsets`` and waits for its high watermark).
* **Consume throughput**: 1 KiB records read by one consumer with ``subscribe()``
  (joining a group, with auto-commit) and with ``assign()`` in the same run; the
  ratio is the cost of the group (target >= 0.9); alternated twice, best of each.

    python benchmarks/group_bench.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.testing import Broker  # noqa: E402

PARTITIONS = 12
SESSION_MS = 10_000
INITIAL_DELAY_MS = 3_000


class Member(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str):
        super().__init__(daemon=True)
        extra = ({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000}
                 if protocol == "classic" else {"group.protocol": "consumer"})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "latest", **extra})
        self.consumer.subscribe([topic])
        self.assignment: frozenset = frozenset()
        self.stop = threading.Event()
        self.start()

    def run(self):
        while not self.stop.is_set():
            self.consumer.poll(0.05)
            self.assignment = frozenset(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()


def balanced(members: list[Member]) -> bool:
    owned = [p for m in members for p in m.assignment]
    share = PARTITIONS // len(members)
    return (len(owned) == len(set(owned)) == PARTITIONS
            and all(share <= len(m.assignment) <= share + 1 for m in members))


def wait_balanced(members: list[Member], timeout_s: float = 120) -> float:
    start = time.perf_counter()
    while not balanced(members):
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"no balanced assignment after {timeout_s} s: {[sorted(m.assignment) for m in members]}")
        time.sleep(0.01)
    return time.perf_counter() - start


def rebalances(bootstrap: str, topic: str, protocol: str) -> dict:
    group = f"bench-{protocol}-{time.monotonic_ns()}"
    members = [Member(bootstrap, topic, group, protocol) for _ in range(3)]
    first = wait_balanced(members)
    members.append(Member(bootstrap, topic, group, protocol))
    join = wait_balanced(members)
    leaving = members.pop(0)
    leaving.stop.set()
    leaving.join()
    leave = wait_balanced(members)
    for m in members:
        m.stop.set()
    for m in members:
        m.join()
    return {"first": first, "join": join, "leave": leave}


def commits_per_second(bootstrap: str, topic: str, seconds: float = 5.0) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-commits-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0)])
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        consumer.commit(offsets=[TopicPartition(topic, 0, count + 1)], asynchronous=False)
        count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return count / elapsed


def consume(bootstrap: str, topic: str, records: int, subscribe: bool) -> float:
    config = {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
              "group.id": f"bench-consume-{time.monotonic_ns()}", "enable.auto.commit": subscribe}
    consumer = Consumer(config)
    if subscribe:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, start = 0, None
    while count < records:
        for message in consumer.consume(10_000, 1.0):
            if message.error():
                continue
            if start is None:
                start = time.perf_counter()           # from the first record: joining is measured above
            count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    with Broker(overrides={"group.initial.rebalance.delay.ms": str(INITIAL_DELAY_MS),
                           "group.consumer.heartbeat.interval.ms": "1000",
                           "offsets.topic.num.partitions": "10"}) as broker:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("groups-bench", PARTITIONS, 1)])["groups-bench"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262_144,
                             "queue.buffering.max.messages": 1_000_000})
        value = os.urandom(1024)
        for i in range(args.records):
            while True:
                try:
                    producer.produce("groups-bench", value=value, partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)

        print(f"rebalance of a {PARTITIONS}-partition subscription (seconds until every member holds its share)")
        for protocol in ("classic", "consumer"):
            times = rebalances(bootstrap, "groups-bench", protocol)
            print(f"  {protocol:8}  3 members start: {times['first']:.2f}   4th joins: {times['join']:.2f}   "
                  f"one leaves: {times['leave']:.2f}")
        print(f"  reference: session.timeout.ms {SESSION_MS / 1000:.1f} s (a crashed member), "
              f"group.initial.rebalance.delay.ms {INITIAL_DELAY_MS / 1000:.1f} s (a new group)")
        print(f"commits/s (synchronous, one member): {commits_per_second(bootstrap, 'groups-bench'):.0f}")
        # Alternated twice, best of each: the first read of the topic warms caches for both.
        runs = {False: [], True: []}
        for subscribe in (False, True, False, True):
            runs[subscribe].append(consume(bootstrap, "groups-bench", args.records, subscribe))
        assign, subscribe = max(runs[False]), max(runs[True])
        print(f"consume, {args.records} x 1 KiB records: assign() {assign:.0f} rec/s, "
              f"subscribe() {subscribe:.0f} rec/s, ratio {subscribe / assign:.2f} (target >= 0.9)")


if __name__ == "__main__":
    main()
