"""Log compaction end to end: a real ``tidelog serve`` cleans a ``cleanup.policy=compact``
topic that confluent-kafka (librdkafka) writes to, and refuses records without a key."""

import glob
import os
import re
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.records.batch import iter_batches
from tidelog.testing import Broker, wait_until

TOPIC = "latest-values"
KEYS = 10
UPDATES = 3000


def _segment_files(broker: Broker) -> list[str]:
    return sorted(glob.glob(os.path.join(broker.data_dir, "data", f"{TOPIC}-0", "*.log")))


def _while_files_settle(read):
    """``read()`` over the partition's files, again if the cleaner swapped a segment
    between listing the directory and opening a file."""
    for _ in range(100):
        try:
            return read()
        except FileNotFoundError:
            time.sleep(0.05)
    return read()


def _log_bytes(broker: Broker) -> int:
    return _while_files_settle(lambda: sum(os.path.getsize(path) for path in _segment_files(broker)))


def _empty_producer_batches(broker: Broker) -> int:
    """Batches of an idempotent producer with no record left, in the partition's files."""
    def count() -> int:
        found = 0
        for path in _segment_files(broker):
            with open(path, "rb") as f:
                data = f.read()
            found += sum(1 for _, header in iter_batches(data) if header.record_count == 0 and header.producer_id >= 0)
        return found
    return _while_files_settle(count)


def _consume_all(bootstrap: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got, idle_polls = [], 0
    while idle_polls < 3:
        messages = consumer.consume(10_000, 0.3)
        idle_polls = 0 if messages else idle_polls + 1
        for message in messages:
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
    consumer.close()
    return got


def test_a_compacted_topic_keeps_the_latest_value_of_each_key_at_its_offset():
    """Thousands of updates to a few keys, a delete, and an idempotent producer's records
    that all get overwritten: once the cleaner has run, a consumer reading from the start
    gets exactly the last record of each key at the offset it was written at."""
    with Broker(overrides={"log.cleaner.backoff.ms": "100"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "16384", "segment.ms": "1000",
            "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(15)
        written: dict[int, tuple[bytes, bytes | None]] = {}
        failures = []

        def delivered(error, message):
            if error is not None:
                failures.append(error)
            else:
                written[message.offset()] = (message.key(), message.value())

        # An idempotent producer's records, all overwritten below: its last batch stays as an
        # empty batch (for the producer state), which the consumer must step over.
        idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        for i in range(KEYS):
            idempotent.produce(TOPIC, b"overwritten", f"key-{i}".encode(), partition=0, on_delivery=delivered)
        assert idempotent.flush(30) == 0 and not failures, failures
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "acks": "all",
                             "batch.size": 4096})      # a produce request must fit segment.bytes
        for i in range(UPDATES):
            producer.produce(TOPIC, f"value-{i}-".encode() + b"x" * 80, f"key-{i % KEYS}".encode(),
                             partition=0, on_delivery=delivered)
            if i == UPDATES // 2:
                producer.produce(TOPIC, b"soon deleted", b"deleted", partition=0, on_delivery=delivered)
                producer.produce(TOPIC, None, b"deleted", partition=0, on_delivery=delivered)   # a tombstone
            producer.poll(0)
        assert producer.flush(30) == 0 and not failures, failures
        time.sleep(1.2)                 # past segment.ms: the next record rolls the segment holding the last values
        producer.produce(TOPIC, b"last", b"filler", partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0 and not failures, failures
        value_bytes = sum(len(value or b"") for _, value in written.values())

        latest = {key: (offset, value) for offset, (key, value) in sorted(written.items())}
        expected = sorted((offset, key, value) for key, (offset, value) in latest.items())
        assert (written[max(written)] == (b"filler", b"last")) and len(expected) == KEYS + 2
        wait_until(lambda: _log_bytes(broker) < value_bytes / 20, timeout_s=60, what="the log to shrink")
        wait_until(lambda: _consume_all(broker.bootstrap) == expected, timeout_s=30,
                   what="exactly the latest value of each key, at its offset")
        assert any("cleaned offsets" in line for line in broker.output)
        assert _empty_producer_batches(broker) == 1         # the idempotent producer's last batch

        keyless: list = []
        producer.produce(TOPIC, b"no key", partition=0, on_delivery=lambda error, message: keyless.append(error))
        assert producer.flush(30) == 0
        assert len(keyless) == 1 and keyless[0] is not None and keyless[0].code() == KafkaError.INVALID_RECORD, keyless


def _deliver(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, int | None]]) -> list:
    """Produce ``records`` (key, value, timestamp) as one batch; the delivery error codes in order.

    One batch, whatever the machine's load: a linger no produce loop outlasts, ended by
    flush() (librdkafka sends what is queued at once on flush). A producer of its own each
    time: right after a flush() librdkafka may still send each new message at once, so a
    reused producer split the next call's records ([0], [1], [2..19]: seen 1 run in ~45)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 60_000, "acks": "all",
                         "batch.num.messages": 1000})
    producer.list_topics(topic, timeout=10)          # the leader known before the first record
    reports: dict[bytes, object] = {}
    for key, value, timestamp in records:
        producer.produce(topic, value, key, partition=0, timestamp=timestamp or 0,
                         on_delivery=lambda error, message: reports.__setitem__(message.value(), error))
    assert producer.flush(30) == 0
    return [None if reports[value] is None else reports[value].code() for _, value, _ in records]


def test_records_refused_one_by_one_are_named_and_the_others_fail_as_different_records():
    """KIP-467: a batch to a compacted topic with a keyless record in ten is refused whole, and the
    response's record_errors name the ten, so librdkafka fails them INVALID_RECORD and the other 90
    _INVALID_DIFFERENT_RECORD (with an empty record_errors it failed all 100 INVALID_RECORD). The
    same for timestamps out of range (the partition's code INVALID_TIMESTAMP, which kafka-python
    raises with Kafka's message for the record). Nothing is appended, nothing logged per record."""
    from kafka import KafkaProducer
    from kafka import errors as kafka_errors
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("keys-required", 1, 1, config={"cleanup.policy": "compact"}),
                             NewTopic("recent-only", 1, 1, config={"message.timestamp.before.max.ms": "3600000"})])
        wait_until(lambda: {"keys-required", "recent-only"} <= set(admin.list_topics(timeout=10).topics),
                   what="the topics")
        lines_before = len(broker.output)

        codes = _deliver(broker.bootstrap, "keys-required",
                         [(None if i % 10 == 3 else b"k%d" % i, b"v%d" % i, None) for i in range(100)])
        assert [i for i, code in enumerate(codes) if code == KafkaError.INVALID_RECORD] == list(range(3, 100, 10)), codes
        assert codes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 90, codes
        now = int(time.time() * 1000)
        codes = _deliver(broker.bootstrap, "recent-only",
                         [(b"k", b"t%d" % i, now - 3 * 3_600_000 if i in (0, 7) else now) for i in range(20)])
        assert [i for i, code in enumerate(codes) if code == KafkaError.INVALID_RECORD] == [0, 7], str(codes)
        assert codes.count(KafkaError._INVALID_DIFFERENT_RECORD) == 18, str(codes)

        # kafka-python (as the Java client) fails each named record with its own message; with one
        # record named, with the partition's error (INVALID_TIMESTAMP).
        python_producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=60_000, acks="all")
        futures = [python_producer.send("recent-only", b"p%d" % i, b"k", partition=0,
                                        timestamp_ms=now - 3 * 3_600_000 if i == 1 else now) for i in range(4)]
        futures += [python_producer.send("keys-required", b"q%d" % i, None if i in (0, 2) else b"k", partition=0)
                    for i in range(3)]
        python_producer.flush(30)
        failures = [future.exception for future in futures]
        python_producer.close()
        assert isinstance(failures[1], kafka_errors.InvalidTimestampError), failures
        assert re.fullmatch(r"\[Error 32\] InvalidTimestampError: Timestamp \d+ of message with offset 1 is out of "
                            r"range\. The timestamp should be within \[\d+, \d+\]", str(failures[1])), failures[1]
        assert all(type(failures[i]) is kafka_errors.KafkaError for i in (0, 2, 3)), failures
        assert [type(failures[i]) for i in (4, 6)] == [kafka_errors.InvalidRecordError] * 2, failures
        assert str(failures[4]).endswith("Compacted topic cannot accept message without key in topic partition "
                                         "keys-required-0."), failures[4]

        time.sleep(0.5)
        logged = broker.output[lines_before:]
        assert not [line for line in logged if "key" in line or "imestamp" in line or "refused" in line
                    or "rejected" in line], logged                              # no line per record
        assert _deliver(broker.bootstrap, "keys-required", [(b"k", b"kept", None)]) == [None]
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
        assert consumer.get_watermark_offsets(TopicPartition("keys-required", 0), timeout=10) == (0, 1)
        assert consumer.get_watermark_offsets(TopicPartition("recent-only", 0), timeout=10) == (0, 0)
        consumer.close()


def _horizon_marked_segment_above(directory: str, segment_bytes: int) -> bool:
    """Whether a cleaned segment in ``directory`` is larger than ``segment_bytes`` and holds
    tombstone batches marked with their delete horizon (attribute bit 6, KIP-534)."""
    def find() -> bool:
        for path in glob.glob(os.path.join(directory, "*.log")):
            with open(path, "rb") as f:
                data = f.read()
            if len(data) > segment_bytes and any(h.attributes & 0x40 for _, h in iter_batches(data)):
                return True
        return False
    return _while_files_settle(find)


def test_a_follower_catches_up_on_a_cleaned_segment_larger_than_segment_bytes():
    """A leader's cleaner marks tombstone batches with their delete horizon, which
    re-encodes every record's timestamp a few bytes longer, so a cleaned segment can be
    larger than ``segment.bytes``. A follower that was down fetches it whole and must
    append it (Kafka's follower append refuses it, and the partition stops replicating
    on that broker for good; simulator seed 1581 --compact found it)."""
    from tidelog.testing import Cluster, topic_in_sync
    segment_bytes = 2048
    with Cluster(brokers=3, overrides={"log.cleaner.backoff.ms": "100"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("deletes", num_partitions=1, replication_factor=3, config={
            "cleanup.policy": "compact", "segment.bytes": str(segment_bytes), "segment.ms": "200",
            "min.cleanable.dirty.ratio": "0.01"})])["deletes"].result(30)
        partition = lambda: admin.list_topics("deletes", timeout=10).topics["deletes"].partitions[0]  # noqa: E731
        wait_until(lambda: topic_in_sync(admin, "deletes", 3), 30, "the topic in sync")
        leader = partition().leader
        follower = next(b for b in (1, 2, 3) if b != leader)
        cluster.kill(follower)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 50})
        for i in range(600):
            # tombstones of keys never written: a cleaning pass keeps every one and marks it;
            # batches of 25 (511 bytes), four to a segment (2,044 bytes, ~2,340 once marked)
            producer.produce("deletes", key=b"deleted-%03d" % i, value=None)
            if i % 25 == 24:
                assert producer.flush(30) == 0
        for i in range(30):
            producer.produce("deletes", key=b"after-%d" % i, value=b"v")
        assert producer.flush(30) == 0
        leader_dir = os.path.join(cluster.directory, f"broker-{leader}", "data", "deletes-0")
        wait_until(lambda: _horizon_marked_segment_above(leader_dir, segment_bytes), 30,
                   "a cleaned segment above segment.bytes on the leader")
        cluster.start_node(follower)
        wait_until(lambda: sorted(partition().isrs) == [1, 2, 3], 30, f"broker {follower} back in the ISR")
        assert _horizon_marked_segment_above(os.path.join(cluster.directory, f"broker-{follower}", "data",
                                                          "deletes-0"), segment_bytes)
