"""Idempotent producers with real clients: retries must not write twice
(confluent-kafka, kafka-python and aiokafka, idempotence on, acks=all)."""

import threading
import time

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, topic_in_sync, wait_until

COUNT = 3000


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = consumer.consume(10_000, 1.0)
        values += [m.value() for m in batch if m.error() is None]
        if not batch and len(values) >= expected:
            break
    consumer.close()
    return values


class ConfluentSender:
    def __init__(self, bootstrap):
        self.acked: list[bytes] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "request.timeout.ms": 1000, "message.timeout.ms": 120000, "linger.ms": 5})

    def send(self, value: bytes) -> None:
        self.producer.produce("idem", value, partition=0,
                              on_delivery=lambda error, message: error is None and self.acked.append(message.value()))
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(120) == 0


class KafkaPythonSender:
    def __init__(self, bootstrap):
        import kafka
        self.acked: list[bytes] = []
        self.producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                                            request_timeout_ms=1000, delivery_timeout_ms=120000, linger_ms=5)

    def send(self, value: bytes) -> None:
        self.producer.send("idem", value, partition=0).add_callback(lambda _: self.acked.append(value))

    def flush(self) -> None:
        self.producer.flush(120)
        self.producer.close()


class AiokafkaSender:
    """aiokafka's producer on its own event loop in a thread; sends are handed over."""

    def __init__(self, bootstrap):
        import asyncio
        import queue
        self.acked: list[bytes] = []
        self.queue: queue.Queue = queue.Queue()
        self.asyncio = asyncio
        self.bootstrap = bootstrap
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self):
        import aiokafka
        import aiokafka.errors
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all",
                                             request_timeout_ms=1000, linger_ms=5)
        await producer.start()
        pending = []
        while True:
            value = await self.asyncio.get_running_loop().run_in_executor(None, self.queue.get)
            if value is None:
                break
            while True:
                try:
                    future = await producer.send("idem", value, partition=0)
                    break
                except aiokafka.errors.KafkaTimeoutError:
                    # aiokafka waits for room in its one pending batch per
                    # partition only up to request_timeout_ms, then refuses the
                    # record (it was not enqueued): send it again, as its docs say.
                    continue
            future.add_done_callback(lambda f, v=value: f.exception() is None and self.acked.append(v))
            pending.append(future)
        await self.asyncio.gather(*pending, return_exceptions=True)
        await producer.stop()

    def send(self, value: bytes) -> None:
        self.queue.put(value)

    def flush(self) -> None:
        self.queue.put(None)
        self.thread.join(120)


@pytest.mark.parametrize("sender", [ConfluentSender, KafkaPythonSender, AiokafkaSender],
                         ids=["confluent-kafka", "kafka-python", "aiokafka"])
def test_retries_while_acks_all_waits_on_a_paused_follower_are_written_once(sender):
    """The follower is paused (SIGSTOP) past the producer's request timeout: the
    leader has appended the in-flight batches but cannot acknowledge them (acks=all)
    until the follower leaves the ISR, so the client times out and sends them again.
    Every acknowledged record must be in the log exactly once, in the order sent."""
    overrides = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "30000",
                 "broker.heartbeat.interval.ms": "500"}
    with Cluster(brokers=2, overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("idem", 1, 2)])["idem"].result(15)
        wait_until(lambda: topic_in_sync(admin, "idem", 2), what="idem fully in sync")
        partition = admin.list_topics("idem", timeout=10).topics["idem"].partitions[0]
        follower = next(r for r in partition.replicas if r != partition.leader)
        producer = sender(cluster.bootstrap)

        def pause_follower():
            time.sleep(1.0)
            cluster.pause(follower)
            time.sleep(5.0)                 # > request.timeout.ms and > replica.lag.time.max.ms
            cluster.resume(follower)

        nemesis = threading.Thread(target=pause_follower)
        nemesis.start()
        try:
            for i in range(COUNT):                       # steadily, across the pause (~8 s)
                producer.send(f"v{i:05d}".encode())
                if i % 10 == 0:
                    time.sleep(0.025)
        finally:
            nemesis.join()
        producer.flush()
        assert len(producer.acked) == COUNT
        values = _consume_all(f"127.0.0.1:{cluster.port(partition.leader)}", "idem", COUNT)
        duplicates = len(values) - len(set(values))
        assert duplicates == 0, f"{duplicates} duplicate records"
        assert values == [f"v{i:05d}".encode() for i in range(COUNT)]
