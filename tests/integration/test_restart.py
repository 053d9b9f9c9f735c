"""Durability across restarts of a real broker process."""

import glob
import os

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidelog.testing import Broker


def _produce(bootstrap, topic, count, start=0):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2})
    acked = []
    for i in range(start, start + count):
        producer.produce(topic, value=b"r-%06d" % i, partition=0,
                         on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
    assert producer.flush(30) == 0
    return acked


def _consume(bootstrap, topic, expected):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    for _ in range(200):
        for message in consumer.consume(10_000, 0.2):
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
        if len(got) >= expected:
            break
    consumer.close()
    return got


def test_clean_stop_then_restart_loses_nothing():
    with Broker() as broker:
        acked = _produce(broker.bootstrap, "clean", 20_000)
        broker.restart(clean=True)
        assert any("after a clean shutdown" in line for line in broker.output)
        acked += _produce(broker.bootstrap, "clean", 1000, start=20_000)
        got = _consume(broker.bootstrap, "clean", len(acked))
        assert [v for _, v in got] == acked
        assert [o for o, _ in got] == list(range(len(acked)))


@pytest.mark.parametrize("segment_bytes", [None, 16_384])
def test_kill_9_then_restart_keeps_every_acknowledged_record_and_a_sound_log(segment_bytes):
    """With 16 KiB segments the log rolls ~60 times, each roll's fsync on the worker
    thread, so the kill lands among background flushes and recovery-point moves."""
    overrides = {"log.segment.bytes": str(segment_bytes)} if segment_bytes else {}
    with Broker(overrides=overrides) as broker:
        acked = _produce(broker.bootstrap, "killed", 20_000)
        broker.restart(clean=False)  # SIGKILL: page cache survives, the process does not
        got = _consume(broker.bootstrap, "killed", len(acked))
        assert [v for _, v in got] == acked
        acked += _produce(broker.bootstrap, "killed", 500, start=20_000)
        got = _consume(broker.bootstrap, "killed", len(acked))
        assert [o for o, _ in got] == list(range(len(acked)))
        assert [v for _, v in got] == acked


def test_a_restart_with_empty_checkpoint_files_serves_every_record():
    """A crash can leave 0-byte checkpoint files (the rename is atomic, the data on
    some file systems is not). The broker reads them as empty, as Kafka does: its log
    directory stays online and every record is served after the restart."""
    with Broker() as broker:
        acked = _produce(broker.bootstrap, "emptied", 2000)
        broker.stop()
        data = os.path.join(broker.data_dir, "data")
        emptied = [os.path.join(data, name) for name in (
            "replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint")]
        emptied += glob.glob(os.path.join(data, "emptied-0", "leader-epoch-checkpoint"))
        assert len(emptied) == 4
        for path in emptied:
            assert os.path.getsize(path) > 0, path
            open(path, "wb").close()
        broker.start()
        assert not any("is offline" in line for line in broker.output), broker.output[-20:]
        got = _consume(broker.bootstrap, "emptied", len(acked))
        assert [v for _, v in got] == acked
        assert [o for o, _ in got] == list(range(len(acked)))
        acked += _produce(broker.bootstrap, "emptied", 10, start=2000)
        assert [v for _, v in _consume(broker.bootstrap, "emptied", len(acked))] == acked
