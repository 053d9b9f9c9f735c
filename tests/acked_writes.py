"""An acks=all writer that runs beside a fault, and the read-back that checks it.

``AckedWriter`` produces numbered records with an idempotent, acks=all librdkafka
producer on a thread until stopped, keeping what was acknowledged and what failed;
``read_all`` reads a topic back from offset 0 to the end offsets it finds, so a test can
assert that everything acknowledged is there (``writer.acked <= read_all(...)``)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.testing import wait_until


class AckedWriter:
    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.add(message.value().decode())
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, f"r{n}".encode(), on_delivery=self._delivered)
            n += 1
            self.producer.poll(0.02)
        self.producer.flush(120)

    def more(self, count: int = 20, timeout_s: float = 60) -> None:
        """Wait until ``count`` more records are acknowledged."""
        start = len(self.acked)
        wait_until(lambda: len(self.acked) >= start + count, timeout_s=timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)


def read_all(bootstrap: str, topic: str, group: str, timeout_s: float = 60) -> set[str]:
    """Every value of ``topic``, read from offset 0 up to the end offsets found first."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
        consumer.assign(partitions)
        seen, positions = set(), {p: 0 for p in ends}
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            seen.add(message.value().decode())
            positions[message.partition()] = message.offset() + 1
        return seen
    finally:
        consumer.close()
