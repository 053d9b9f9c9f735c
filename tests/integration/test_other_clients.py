"""kafka-python, aiokafka and kcat against tidelog serve (consumers use assign)."""

import asyncio
import shutil
import subprocess

import pytest


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(broker, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = f"kp-{codec}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type=codec,
                             linger_ms=5)
    values = [b"kp-%05d" % i for i in range(5000)]
    futures = [producer.send(topic, value=v, key=b"k", partition=0) for v in values]
    producer.flush()
    offsets = [f.get(10).offset for f in futures]
    assert offsets == list(range(len(values)))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for message in consumer:
        got.append((message.offset, message.value))
        if len(got) == len(values):
            break
    consumer.close()
    assert got == list(enumerate(values))


def test_aiokafka_round_trip_across_partitions(broker):
    async def go():
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("aio", num_partitions=3, replication_factor=1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="zstd")
        await producer.start()
        sent = {p: [] for p in range(3)}
        for i in range(3000):
            value = b"aio-%d" % i
            await producer.send("aio", value, partition=i % 3)
            sent[i % 3].append(value)
        await producer.flush()
        await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        partitions = [TopicPartition("aio", p) for p in range(3)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        got = {p: [] for p in range(3)}
        for _ in range(100):
            batch = await consumer.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                got[tp.partition] += [(m.offset, m.value) for m in messages]
            if sum(map(len, got.values())) >= 3000:
                break
        await consumer.stop()
        for p in range(3):
            assert got[p] == list(enumerate(sent[p]))
    asyncio.run(asyncio.wait_for(go(), 60))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by `make test`")
def test_kcat_produce_and_consume(broker):
    lines = [f"line-{i}" for i in range(2000)]
    subprocess.run(["kcat", "-b", broker.bootstrap, "-t", "kcat", "-P", "-p", "0", "-z", "snappy"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-t", "kcat", "-C", "-p", "0", "-o", "beginning",
                          "-e", "-q", "-f", "%o %s\n"], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.splitlines() == [f"{i} line-{i}" for i in range(2000)]
    listing = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", "kcat"], capture_output=True,
                             text=True, check=True, timeout=30)
    assert "partition 0, leader 1, replicas: 1, isrs: 1" in listing.stdout
