"""One chaos run: real broker processes, real clients, a nemesis, a verdict.

Theory of operation. ``run_chaos`` starts a controller and N brokers as
processes (``tidelog.testing.Cluster``) behind a ``LinkProxy`` (each broker
advertises its proxy port and reaches the controller through the controller's
proxy), creates a topic (RF 3, ``min.insync.replicas=2``, clean election),
then, while the nemesis runs its schedule:

* a confluent-kafka producer (acks=all, no idempotence) writes numbered values
  round-robin to the partitions, one record in flight per partition; it retries
  a failed record itself (librdkafka's retries are off) before that partition's
  next one, so order holds and every duplicate has a counted attempt behind it;
* a confluent-kafka consumer reads every partition from offset 0, recording
  what it gets.

Then it heals everything, waits until every partition's ISR is full again,
flushes the producer, reads each partition's final log from 0 to its high
watermark with a fresh consumer, compares the replicas' segment files byte for
byte, and hands everything to ``checker.check``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field

from tidelog.chaos.checker import History, Report, check
from tidelog.chaos.nemesis import CONTROLLER, SHORT, SHORT_DURATION_S, Fault, Nemesis
from tidelog.chaos.proxy import LinkProxy

TOPIC = "chaos"
FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200"}


@dataclass
class ChaosResult:
    report: Report
    faults: list[tuple[float, str]] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    replicas_identical: bool = False
    elapsed_s: float = 0.0
    directory: str = ""
    history: History | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok and self.replicas_identical

    def summary(self) -> str:
        injected = sum(1 for _, label in self.faults if not label.startswith(("undo", "start", "resume", "skipped")))
        return (f"chaos: {injected} faults injected in {self.elapsed_s:.0f} s; {self.report.summary()}; "
                f"replicas byte-identical: {self.replicas_identical}")


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:   # a broker mid-restart: ask again
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def run_chaos(schedule: tuple[Fault, ...] = SHORT, duration_s: float = SHORT_DURATION_S, brokers: int = 3,
              partitions: int = 3, rate_per_s: int = 400, keep: bool = False, log=print) -> ChaosResult:
    started = time.monotonic()
    cluster, proxy = _cluster_behind_proxies(brokers)
    history = History()
    nemesis = None
    result = ChaosResult(Report(), directory=cluster.directory)
    try:
        cluster.start()
        bootstrap, admin = _create_topic(cluster, proxy, partitions)
        log(f"chaos: {brokers} brokers behind proxies, topic {TOPIC} ({partitions} partitions, RF 3, min ISR 2)")
        stop_consuming = threading.Event()
        consumer_thread = threading.Thread(target=_consume, args=(bootstrap, partitions, history, stop_consuming),
                                           daemon=True)
        consumer_thread.start()
        workload = _Workload(partitions, history)
        workload.producer = _producer(bootstrap, workload)
        nemesis = Nemesis(cluster, proxy, schedule)
        nemesis.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < duration_s:
            workload.step(rate_per_s / partitions, time.monotonic() - t0)
        log(f"chaos: {workload.sequence} records sent; healing")
        nemesis.heal()
        _settle(admin, bootstrap, partitions, workload, history)
        stop_consuming.set()
        consumer_thread.join(30)
        history.final = _final_logs(bootstrap, partitions)
        _wait(lambda: _replicas_identical(cluster, partitions), 60, "byte-identical replicas")
        result.replicas_identical = True
    except TimeoutError as e:
        log(f"chaos: {e}")
    finally:
        if nemesis is not None:
            result.faults, result.fault_errors = list(nemesis.injected), list(nemesis.errors)
        result.report = check(history)
        result.history = history
        result.elapsed_s = time.monotonic() - started
        try:
            cluster.close() if not keep else cluster.processes.down()
        finally:
            proxy.close()
    return result


def _cluster_behind_proxies(brokers: int):
    """A (not yet started) cluster whose every broker advertises its ``LinkProxy`` port and
    reaches the controller through the controller's proxy; the proxy is already running."""
    from tidelog.testing import Cluster

    cluster = Cluster(brokers=brokers, overrides=FAST)
    layout = cluster.processes.layout
    proxy = LinkProxy([CONTROLLER] + [b.node_id for b in layout.brokers],
                      target_port=lambda n: layout.node(n).port,
                      node_pids=lambda: {n.pid: n.node_id for n in layout.nodes if n.pid})
    proxy.start()
    for broker in layout.brokers:
        broker.overrides = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port(broker.node_id)}",
                            "controller.quorum.voters": f"{CONTROLLER}@127.0.0.1:{proxy.port(CONTROLLER)}"}
    return cluster, proxy


def _create_topic(cluster, proxy: LinkProxy, partitions: int):
    """The bootstrap servers (the brokers' proxies) and an admin client, once the topic
    exists with every partition fully in sync."""
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = ",".join(f"127.0.0.1:{proxy.port(b.node_id)}" for b in cluster.processes.layout.brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
    _wait(lambda: _full_isr(admin, partitions, 3), 30, "the topic fully in sync")
    return bootstrap, admin


def _producer(bootstrap: str, workload: _Workload):
    """The workload's producer: acks=all, no retries of its own, one request in flight, and
    librdkafka's ``debug=msg`` log routed to the workload to count attempts."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                     "retries": 0, "max.in.flight.requests.per.connection": 1, "linger.ms": 0,
                     "message.timeout.ms": 10_000, "request.timeout.ms": 5000,
                     "topic.metadata.refresh.interval.ms": 1000,
                     "debug": "msg", "logger": workload.logger, "log.queue": True})


def _settle(admin, bootstrap: str, partitions: int, workload: _Workload, history: History) -> None:
    """After healing: every ISR full again, every record in flight acknowledged, and the
    consumer caught up with every high watermark."""
    _wait(lambda: _full_isr(admin, partitions, 3), 90, "every ISR regrown after healing")
    deadline = time.monotonic() + 120
    while workload.in_flight and time.monotonic() < deadline:
        workload.step(0, 0)
    if workload.in_flight:
        raise TimeoutError(f"{len(workload.in_flight)} records still undelivered after healing")
    _wait(lambda: _caught_up(bootstrap, partitions, history), 60, "the consumer caught up")


class _Workload:
    """The producer side: one record in flight per partition, retried until acknowledged.

    Attempts are counted from librdkafka itself: with ``debug=msg`` it logs every
    ProduceRequest it sends ("t [p]: Produce MessageSet with 1 message(s)"),
    including its own request-level retries, which no setting turns off (it
    retries a request answered NOT_LEADER_OR_FOLLOWER even with ``retries=0``).
    The log goes through the same queue as the delivery reports (``log.queue``), so
    a line for partition ``p`` belongs to the record in flight on ``p`` then.
    """

    RETRY_BACKOFF_S = 0.1

    def __init__(self, partitions: int, history: History):
        self.producer = None
        self.partitions = partitions
        self.unattributed = 0
        self.logger = logging.getLogger(f"tidelog.chaos.producer.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(_ProduceLog(self))
        self.history = history
        self.sequence = 0
        self.in_flight: dict[int, bytes] = {}
        self.retry_at: dict[int, float] = {}
        self.sent_per_partition = [0] * partitions

    def step(self, per_partition_rate: float, elapsed_s: float) -> None:
        now = time.monotonic()
        for partition in range(self.partitions):
            value = self.in_flight.get(partition)
            if value is not None:
                if partition in self.retry_at and now >= self.retry_at[partition]:
                    del self.retry_at[partition]
                    self._send(partition, value)
                continue
            if per_partition_rate and self.sent_per_partition[partition] < per_partition_rate * elapsed_s:
                value = b"%09d" % self.sequence
                self.sequence += 1
                self.sent_per_partition[partition] += 1
                self.history.sent.append((partition, value))
                self.in_flight[partition] = value
                self._send(partition, value)
        self.producer.poll(0.002)

    def on_produce_logged(self, partition: int) -> None:
        value = self.in_flight.get(partition)
        if value is None:
            self.unattributed += 1
        else:
            self.history.attempts[value] = self.history.attempts.get(value, 0) + 1

    def _send(self, partition: int, value: bytes) -> None:
        try:
            self.producer.produce(TOPIC, value, partition=partition, on_delivery=self._delivered)
        except BufferError:
            self.retry_at[partition] = time.monotonic() + self.RETRY_BACKOFF_S

    def _delivered(self, error, message) -> None:
        partition, value = message.partition(), message.value()
        if error is None:
            self.history.acked.append((partition, message.offset(), value))
            if self.in_flight.get(partition) == value:
                del self.in_flight[partition]
        else:
            self.history.failed.append((partition, value, str(error)))
            self.retry_at[partition] = time.monotonic() + self.RETRY_BACKOFF_S


class _ProduceLog(logging.Handler):
    PATTERN = re.compile(rf"{TOPIC} \[(\d+)\]: Produce MessageSet with (\d+) message")

    def __init__(self, workload: _Workload):
        super().__init__(logging.DEBUG)
        self.workload = workload

    def emit(self, record: logging.LogRecord) -> None:
        match = self.PATTERN.search(record.getMessage())
        if match:
            self.workload.on_produce_logged(int(match.group(1)))


def _full_isr(admin, partitions: int, replication_factor: int) -> bool:
    topic = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
    return (len(topic.partitions) == partitions and
            all(len(p.isrs) == replication_factor and p.leader >= 0 for p in topic.partitions.values()))


def _consume(bootstrap: str, partitions: int, history: History, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    while not stop.is_set():
        for message in consumer.consume(1000, 0.2):
            if message.error() is None:
                history.consumed.setdefault(message.partition(), []).append((message.offset(), message.value()))
    consumer.close()


def _high_watermarks(bootstrap: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)[1] for p in range(partitions)}
    finally:
        consumer.close()


def _caught_up(bootstrap: str, partitions: int, history: History) -> bool:
    for partition, high in _high_watermarks(bootstrap, partitions).items():
        records = history.consumed.get(partition, [])
        if (records[-1][0] + 1 if records else 0) < high:
            return False
    return True


def _final_logs(bootstrap: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import Consumer, TopicPartition
    highs = _high_watermarks(bootstrap, partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    final: dict[int, list] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while any((final[p][-1][0] + 1 if final[p] else 0) < highs[p] for p in final) and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                final[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return final


def _replicas_identical(cluster, partitions: int) -> bool:
    for partition in range(partitions):
        logs = set()
        for broker in cluster.processes.layout.brokers:
            directory = os.path.join(cluster.directory, broker.name, "data", f"{TOPIC}-{partition}")
            if not os.path.isdir(directory):
                continue                       # not a replica of this partition
            logs.add(b"".join(open(path, "rb").read() for path in sorted(glob.glob(os.path.join(directory, "*.log")))))
        if len(logs) != 1:
            return False
    return True
