"""confluent-kafka (librdkafka) producers, consumers and AdminClient against tidelog serve."""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

PARTITIONS = 4


def _create(broker, topic, partitions=PARTITIONS, config=None):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(15)


def _consume_all(broker, topic, counts: dict[int, int], timeout_s=60):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in counts])
    got: dict[int, list] = {p: [] for p in counts}
    deadline = time.monotonic() + timeout_s
    while any(len(got[p]) < n for p, n in counts.items()) and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            assert message.error() is None, message.error()
            got[message.partition()].append(message)
    consumer.close()
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_100k_records_round_trip_byte_for_byte_in_every_codec(broker, codec):
    topic = f"bulk-{codec}"
    _create(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "linger.ms": 5, "acks": "all", "batch.size": 256 * 1024})
    failures = []
    sent: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for i in range(100_000):
        partition = i % PARTITIONS
        key, value = b"key-%d" % (i % 97), b"value-%06d-" % i + bytes([i % 251]) * (i % 64)
        headers = [("h", b"%d" % i)] if i % 10 == 0 else None
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
        sent[partition].append((key, value, headers))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    got = _consume_all(broker, topic, {p: len(v) for p, v in sent.items()})
    for partition, messages in got.items():
        assert [m.offset() for m in messages] == list(range(len(sent[partition])))
        assert [(m.key(), m.value()) for m in messages] == [(k, v) for k, v, _ in sent[partition]]
        for message, (_, _, headers) in zip(messages, sent[partition]):
            assert (message.headers() or None) == headers


def test_admin_client_creates_describes_alters_and_deletes_a_topic(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("admin-t", 2, 1, config={"retention.ms": "3600000",
                                                           "max.message.bytes": "2000000"})])["admin-t"].result(15)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["admin-t"].partitions) == 2
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-t")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value == "3600000"
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["segment.bytes"].value == "1073741824"
    duplicate = admin.create_topics([NewTopic("admin-t", 1, 1)])["admin-t"]
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        duplicate.result(15)
    bad = admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"]
    with pytest.raises(Exception, match="TOPIC_EXCEPTION|INVALID_TOPIC"):
        bad.result(15)
    admin.delete_topics(["admin-t"])["admin-t"].result(15)
    assert "admin-t" not in admin.list_topics(timeout=10).topics


def test_list_offsets_by_timestamp(broker):
    topic = "by-time"
    _create(broker, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=1_000_000 + i * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_004_500)], timeout=10)
    assert found[0].offset == 5
    past_end = consumer.offsets_for_times([TopicPartition(topic, 0, 9_000_000)], timeout=10)
    assert past_end[0].offset == -1
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 10)
    consumer.close()


def test_delete_records_then_fetch_below_the_new_start_is_out_of_range(broker):
    topic = "deleted"
    _create(broker, topic, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic, value=b"%d" % i, partition=0)
    producer.flush(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.delete_records([TopicPartition(topic, 0, 12)])
    deleted = list(result.values())[0].result(15)
    assert deleted.low_watermark == 12
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "auto.offset.reset": "error"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (12, 20)
    consumer.assign([TopicPartition(topic, 0, 3)])
    error = None
    deadline = time.monotonic() + 15
    while error is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is not None:
            error = message.error()
    consumer.close()
    assert error is not None
    assert error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
