"""Fetch responses sent by sendfile, read by real clients from ``tidelog serve`` (uvloop):
confluent-kafka and kafka-python read large records across segment boundaries from
many partitions byte for byte; records stay whole while DeleteRecords deletes the
segments being read; a TLS consumer (no sendfile there) reads the same large records.
That sendfile is used at all, and what a truncated segment does, is in
tests/server/test_sendfile.py (an in-process broker)."""

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_tls import certificates, tls_settings  # noqa: F401 (a fixture)
from tidelog.testing import Broker

PARTITIONS = 12
RECORDS = 24                    # per partition
VALUE_BYTES = 40_000            # above SENDFILE_MIN_BYTES: every fetch carries file regions


def _value(partition: int, index: int, size: int = VALUE_BYTES) -> bytes:
    """A value that says where it belongs all along its length (a misplaced byte shows)."""
    unit = b"<%d:%d>" % (partition, index)
    return (unit * (size // len(unit) + 1))[:size]


def _create(settings: dict, topic: str, partitions: int, config: dict) -> None:
    admin = AdminClient(settings)          # (kept alive until the answer is in)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(15)


def _produce(settings: dict, topic: str, partitions: int, records: int, size: int = VALUE_BYTES) -> None:
    # Batches of 3 records: below the consumers' max.partition.fetch.bytes.
    producer = Producer({**settings, "acks": "all", "linger.ms": 5, "batch.size": 3 * size + 1000})
    for index in range(records):
        for partition in range(partitions):
            producer.produce(topic, _value(partition, index, size), partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0


def _consume_confluent(settings: dict, topic: str, partitions: int, records: int) -> dict[int, list]:
    consumer = Consumer({**settings, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 300_000})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 90
    while any(len(v) < records for v in got.values()) and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            assert message.error() is None, message.error()
            got[message.partition()].append((message.offset(), message.value()))
    consumer.close()
    return got


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"log.segment.bytes": "250000"}) as running:
        yield running


def test_confluent_kafka_and_kafka_python_read_large_records_of_many_partitions_across_segments(broker):
    """12 partitions of 24 records of 40 kB in segments of 250 kB (about 4 per partition):
    both clients get every record, in order, byte for byte."""
    settings = {"bootstrap.servers": broker.bootstrap}
    topic = "sendfile-many"
    _create(settings, topic, PARTITIONS, {})
    _produce(settings, topic, PARTITIONS, RECORDS)
    expected = {p: [(i, _value(p, i)) for i in range(RECORDS)] for p in range(PARTITIONS)}
    assert _consume_confluent(settings, topic, PARTITIONS, RECORDS) == expected

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000, max_partition_fetch_bytes=300_000)
    consumer.assign([KafkaPythonPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for message in consumer:
        got[message.partition].append((message.offset, message.value))
        if sum(map(len, got.values())) == PARTITIONS * RECORDS:
            break
    consumer.close()
    assert got == expected


def test_records_stay_whole_while_delete_records_deletes_the_segments_being_read(broker):
    """A consumer reads a partition of 300 records of 20 kB (segments of 250 kB) while
    DeleteRecords moves its start forward every few reads (deleting the segments below):
    whatever it gets is the record at that offset, byte for byte, up to the last one."""
    settings = {"bootstrap.servers": broker.bootstrap}
    topic, records, size = "sendfile-deleted", 300, 20_000
    _create(settings, topic, 1, {})
    _produce(settings, topic, 1, records, size)
    admin = AdminClient(settings)
    stop = threading.Event()
    deleted_to = []

    def delete_behind():
        for offset in range(20, records - 20, 20):
            if stop.wait(0.05):
                return
            result = admin.delete_records([TopicPartition(topic, 0, offset)])
            list(result.values())[0].result(15)
            deleted_to.append(offset)
    deleter = threading.Thread(target=delete_behind)
    consumer = Consumer({**settings, "group.id": "unused", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                         "max.partition.fetch.bytes": 100_000, "fetch.max.bytes": 100_000, "message.max.bytes": 100_000,
                         "queued.max.messages.kbytes": 200})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deleter.start()
    try:
        deadline = time.monotonic() + 90
        while (not got or got[-1][0] < records - 1) and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                error = message.error()
                if error is not None:
                    # A consumer the deletions overtook is told so, then starts over at the new start.
                    assert error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET), error
                    continue
                got.append((message.offset(), message.value()))
            # A fast reader could be done before the first deletion (the test then proved
            # nothing, and failed on deleted_to): mid-way, it waits for one.
            pause_until = time.monotonic() + 30
            while got and got[-1][0] >= records // 3 and not deleted_to and time.monotonic() < pause_until:
                time.sleep(0.01)
    finally:
        stop.set()
        deleter.join()
        consumer.close()
    assert deleted_to, "DeleteRecords never ran"
    assert got and got[-1][0] == records - 1
    for offset, value in got:
        assert value == _value(0, offset, size), f"record {offset} is not what was produced"
    offsets = [offset for offset, _ in got]
    assert offsets == sorted(offsets)


def test_a_tls_consumer_reads_the_same_large_records(certificates):  # noqa: F811
    """Over TLS the records are copied through the SSL object, not sent by sendfile: a
    confluent-kafka consumer still reads large records of several segments byte for byte."""
    with Broker(overrides={**tls_settings(certificates), "log.segment.bytes": "250000"}) as tls_broker:
        settings = {"bootstrap.servers": tls_broker.bootstrap, "security.protocol": "SSL",
                    "ssl.ca.location": str(certificates / "ca.pem")}
        _create(settings, "sendfile-tls", 2, {})
        _produce(settings, "sendfile-tls", 2, 16)
        expected = {p: [(i, _value(p, i)) for i in range(16)] for p in range(2)}
        assert _consume_confluent(settings, "sendfile-tls", 2, 16) == expected
