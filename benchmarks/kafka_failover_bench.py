"""Apache Kafka and tidelog, one after the other: start-up of three brokers and three
controllers, and kill -9 of a partition leader and of the active controller.

Theory of operation. In one run, on one machine, for Kafka 4.4.0 (three broker JVMs and a
quorum of three controller JVMs, tests/kafka_fixture.py) and then for tidelog (three
``tidelog`` broker processes and three controllers, ``tidelog.testing.Cluster``), with the
same broker settings and the same client:

1. **start-up**: from launching the processes (Kafka: after ``kafka-storage format``,
   which is timed apart) until Metadata lists all three brokers;
2. a topic with one partition, replication factor 3, ``min.insync.replicas=2``, and a
   confluent-kafka producer (``acks=all``, idempotent, ``linger.ms=0``) sending one record
   every ``--interval-ms`` from a thread, the send and acknowledgement times of each kept;
3. **leader kill**: SIGKILL of the partition's leader; the figure is the time from the
   kill to the first acknowledgement of a record *sent after the kill* (how long a
   producer cannot write), the longest gap between two acknowledgements around it, and
   when Metadata first names another leader (the controller's share of it);
   the broker is started again and the run waits for three in sync;
4. **controller kill**: SIGKILL of the active controller (DescribeQuorum, asked at a
   broker); the figures are the time to the next successful CreateTopics (the new
   controller at work) and the longest gap between acknowledged writes meanwhile (writes
   need no controller: ideally none beyond the sending interval).

Both clusters keep each setting's default (``broker.session.timeout.ms`` 9 s,
``controller.quorum.election.timeout.ms`` 1 s, ...): the figures are what a user gets.
The JVMs, the tidelog processes, the client and the machine's other work share its cores:
compare the ratios, within one run. ``--rounds`` repeats 3 and 4; medians are printed,
each tidelog figure with its ratio to Kafka's (below 1: tidelog is faster).

    python benchmarks/kafka_failover_bench.py [--rounds 2] [--interval-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.kafka_fixture import KafkaCluster, ensure_resolved, kafka_version, missing_tools  # noqa: E402
from tidelog.metadata.log import METADATA_TOPIC  # noqa: E402
from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.client import KafkaConnection  # noqa: E402
from tidelog.testing import Cluster  # noqa: E402

HOST = "127.0.0.1"
TOPIC = "failover"


def until(probe, timeout_s: float, what: str):
    """``probe()``'s first true value, polled every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.02)
    return value


class Side:
    """What the measurement needs of one cluster: its brokers' ports, kill and start."""

    def __init__(self, name: str, bootstrap: str, ports: dict[int, int], kill, start):
        self.name, self.bootstrap, self.ports = name, bootstrap, ports
        self.kill, self.start = kill, start

    def request(self, api: int, body: dict, version: int, node_id: int | None = None):
        """One request to a live broker (the given one, else any that answers)."""
        async def go(port):
            connection = await KafkaConnection.connect(HOST, port, client_id="failover-bench")
            try:
                return await connection.request(api, body, version=version, timeout_s=5)
            finally:
                connection.close()
        for node, port in self.ports.items():
            if node_id is not None and node != node_id:
                continue
            try:
                return asyncio.run(go(port))
            except Exception:
                continue
        return None

    def partition(self):
        answer = self.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}, 12)
        if answer is None or not answer.topics or not answer.topics[0].partitions:
            return None
        return answer.topics[0].partitions[0]

    def active_controller(self) -> int | None:
        answer = self.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, 0)
        if answer is None or not answer.topics:
            return None
        p = answer.topics[0].partitions[0]
        return int(p.leader_id) if int(p.error_code.value) == 0 and int(p.leader_id) >= 0 else None


class Writer:
    """A producer sending one record every ``interval_s``; each record's send and
    acknowledgement times (monotonic)."""

    def __init__(self, bootstrap: str, interval_s: float):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0, "message.timeout.ms": 120_000, "log_level": 0})
        self.interval_s = interval_s
        self.acked: list[tuple[float, float]] = []        # (sent, acknowledged)
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            self.producer.produce(TOPIC, b"x" * 100, on_delivery=lambda err, msg, sent=sent: self._done(err, sent))
            self.producer.poll(0)
            time.sleep(self.interval_s)
        self.producer.flush(120)

    def _done(self, err, sent: float) -> None:
        if err is None:
            self.acked.append((sent, time.monotonic()))
        else:
            self.failed += 1

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def first_ack_of_sent_after(self, t: float, timeout_s: float = 120) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            after = [acked for sent, acked in list(self.acked) if sent > t]
            if after:
                return min(after) - t
            time.sleep(0.01)
        raise TimeoutError("no write was acknowledged after the kill")

    def longest_gap(self, start: float, end: float) -> float:
        times = sorted(acked for _, acked in self.acked if start - 5 <= acked <= end)
        return max((b - a for a, b in zip(times, times[1:])), default=float("nan"))


def in_sync(side: Side, count: int, timeout_s: float = 180):
    return until(lambda: (p := side.partition()) is not None and p.leader_id >= 0
                      and len(p.isr_nodes) == count and p, timeout_s, f"{side.name}: {count} in sync")


def create_topic(admin: AdminClient, name: str, replication: int = 3, configs: dict | None = None) -> None:
    admin.create_topics([NewTopic(name, 1, replication, config=configs or {})],
                        operation_timeout=10, request_timeout=15)[name].result()


def create_until_done(admin: AdminClient, name: str, timeout_s: float = 120) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            create_topic(admin, name)
            return time.monotonic() - started
        except Exception:
            time.sleep(0.02)
    raise TimeoutError(f"no topic created in {timeout_s} s")


def measure(side: Side, rounds: int, interval_s: float) -> dict[str, list[float]]:
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    create_topic(admin, TOPIC, configs={"min.insync.replicas": "2"})
    in_sync(side, 3)
    writer = Writer(side.bootstrap, interval_s).start()
    figures: dict[str, list[float]] = {"leader kill: leadership moved": [], "leader kill: first write": [],
                                       "leader kill: longest ack gap": [],
                                       "controller kill: next CreateTopics": [],
                                       "controller kill: longest ack gap": []}
    try:
        until(lambda: len(writer.acked) > 50, 60, f"{side.name}: the writer under way")
        for r in range(rounds):
            leader = in_sync(side, 3).leader_id
            killed_at = time.monotonic()
            side.kill(leader)
            # When Metadata (at a live broker) names another leader: the controller's part.
            until(lambda: (p := side.partition()) is not None and p.leader_id not in (-1, leader), 120,
                  f"{side.name}: a new leader")
            figures["leader kill: leadership moved"].append(time.monotonic() - killed_at)
            figures["leader kill: first write"].append(writer.first_ack_of_sent_after(killed_at))
            time.sleep(1)
            figures["leader kill: longest ack gap"].append(writer.longest_gap(killed_at, time.monotonic()))
            side.start(leader)
            in_sync(side, 3)

            controller = until(side.active_controller, 60, f"{side.name}: the active controller")
            killed_at = time.monotonic()
            side.kill(controller)
            figures["controller kill: next CreateTopics"].append(create_until_done(admin, f"after-kill-{r}"))
            time.sleep(1)
            figures["controller kill: longest ack gap"].append(writer.longest_gap(killed_at, time.monotonic()))
            side.start(controller)
            until(lambda: side.active_controller() is not None, 60, f"{side.name}: a quorum again")
            print(f"  {side.name} round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in figures.items()),
                  flush=True)
    finally:
        writer.stop()
    if writer.failed:
        print(f"  {side.name}: {writer.failed} records failed (message.timeout.ms 120 s)")
    return figures


def run_kafka(rounds: int, interval_s: float) -> dict[str, list[float]]:
    kafka = KafkaCluster(brokers=3, controllers=3, profile="bench", start_timeout_s=300)
    started = time.monotonic()
    kafka.start()
    figures = {"start-up (format apart)": [kafka.start_seconds - kafka.format_seconds],
               "start-up (with format)": [time.monotonic() - started]}
    try:
        side = Side("Kafka", kafka.bootstrap, {n.node_id: n.port for n in kafka.brokers},
                    kafka.kill_node, lambda node_id: kafka.start_node(node_id))
        figures.update(measure(side, rounds, interval_s))
    finally:
        kafka.close()
    return figures


def run_tidelog(rounds: int, interval_s: float) -> dict[str, list[float]]:
    started = time.monotonic()
    cluster = Cluster(brokers=3, controllers=3).start()
    try:
        ports = {n.node_id: n.port for n in cluster.brokers}
        side = Side("tidelog", cluster.bootstrap, ports, cluster.kill, cluster.start_node)
        until(lambda: (m := side.request(ApiKey.METADATA, {"topics": [], "allow_auto_topic_creation": False},
                                              12)) is not None and len(m.brokers) == 3, 120, "three brokers")
        up = time.monotonic() - started
        figures = {"start-up (format apart)": [up], "start-up (with format)": [up]}
        figures.update(measure(side, rounds, interval_s))
    finally:
        cluster.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=float, default=10)
    args = parser.parse_args(argv)
    if missing_tools() is not None:
        print(f"skipped: {missing_tools()}")
        return 0
    ensure_resolved()
    interval_s = args.interval_ms / 1000
    print(f"Kafka {kafka_version()}: 3 brokers + 3 controllers", flush=True)
    kafka = run_kafka(args.rounds, interval_s)
    print("tidelog: 3 brokers + 3 controllers", flush=True)
    tidelog = run_tidelog(args.rounds, interval_s)
    print(f"\n| median of {args.rounds} | Kafka | tidelog | tidelog / Kafka |\n|---|---|---|---|")
    for name in kafka:
        k, t = statistics.median(kafka[name]), statistics.median(tidelog[name])
        print(f"| {name} | {k:.2f} s | {t:.2f} s | {t / k:.2f} |" if k > 0 else f"| {name} | {k:.2f} s | {t:.2f} s | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
