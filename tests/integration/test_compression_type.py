"""Topic-level ``compression.type`` on a real broker: what a producer sends
uncompressed is stored in the topic's codec, and a consumer reads it unchanged."""

import glob
import os

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tidelog.records.batch import iter_batches
from tidelog.records.compression import Compression
from tidelog.testing import Broker


def stored_codecs(broker, topic) -> list[int]:
    codecs = []
    for path in sorted(glob.glob(os.path.join(broker.data_dir, "data", f"{topic}-0", "*.log"))):
        with open(path, "rb") as f:
            codecs += [header.compression for _, header in iter_batches(f.read())]
    return codecs


def test_a_topic_codec_recompresses_what_producers_send():
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("zipped", 1, 1, config={"compression.type": "zstd"})])["zipped"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "none", "linger.ms": 0})
        for i in range(50):
            producer.produce("zipped", key=b"k%d" % i, value=b"v" * 500)
        producer.flush(15)
        change = ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", "zipped", incremental_configs=[change])
        admin.incremental_alter_configs([resource])[resource].result(30)
        producer.produce("zipped", key=b"last", value=b"w" * 500)
        producer.flush(15)
        codecs = stored_codecs(broker, "zipped")
        assert set(codecs[:-1]) == {Compression.ZSTD} and codecs[-1] == Compression.LZ4
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "zipped-reader"})
        consumer.assign([TopicPartition("zipped", 0, 0)])
        got = []
        while len(got) < 51:
            message = consumer.poll(5)
            assert message is not None, f"only {len(got)} records came back"
            got.append((message.offset(), message.key(), message.value()))
        consumer.close()
        assert got == [(i, b"k%d" % i, b"v" * 500) for i in range(50)] + [(50, b"last", b"w" * 500)]
