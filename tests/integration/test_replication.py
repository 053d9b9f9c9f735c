"""Replication on real broker processes (multi-broker replication).

Each test runs its own controller + 3 brokers (``tidelog.testing.Cluster``) and
asserts exact offsets, epochs and ISR."""

import asyncio
import glob
import os
import shutil
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records import build_batch
from tidelog.testing import Cluster, topic_in_sync
from tidelog.testing import wait_until as _wait

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def _partition(bootstrap, topic, partition=0):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]




def _create(cluster, topic, partitions=1, rf=3, configs=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})])[topic].result(15)
    _wait(lambda: topic_in_sync(admin, topic, rf, range(partitions)), what=f"{topic} fully in sync")


def _consume(bootstrap, topic, count, partition=0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.offset(), m.value()) for m in consumer.consume(10_000, 0.3) if m.error() is None]
    consumer.close()
    return got


def _log_bytes(cluster, node_id, topic_partition) -> bytes:
    node = cluster.processes.layout.node(node_id)
    pattern = os.path.join(cluster.directory, node.name, "data", topic_partition, "*.log")
    return b"".join(open(path, "rb").read() for path in sorted(glob.glob(pattern)))


def _end_offsets(cluster, topic) -> dict[int, tuple[int, int]]:
    """(log end offset, high watermark) per broker, asked of each replica (debug replica id)."""
    return {b.node_id: _end_offsets_one(b.port, topic) for b in cluster.brokers}


def test_kill_9_of_the_leader_mid_stream_loses_no_acknowledged_record():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        _create(cluster, "fo", configs={"min.insync.replicas": "2"})
        leader = _partition(cluster.bootstrap, "fo").leader
        acked, errors = [], []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2,
                             "enable.idempotence": False, "message.timeout.ms": 60_000})

        def delivered(err, msg):
            (errors.append(err) if err else acked.append((msg.offset(), msg.value())))
        for i in range(12_000):
            producer.produce("fo", b"%06d" % i, partition=0, on_delivery=delivered)
            producer.poll(0)
            if i == 5000:
                producer.flush(30)
                cluster.kill(leader)
        assert producer.flush(90) == 0
        assert errors == []
        new = _partition(cluster.bootstrap, "fo")
        assert new.leader not in (leader, -1)
        got = _consume(cluster.bootstrap, "fo", len(acked))
        assert sorted(acked) == got  # each acknowledged record once, at its offset, in order
        assert [o for o, _ in got] == list(range(len(got)))
        cluster.start_node(leader)
        _wait(lambda: len(_partition(cluster.bootstrap, "fo").isrs) == 3, what="old leader back in the ISR")
        _wait(lambda: len(set(_end_offsets(cluster, "fo").values())) == 1, what="replicas converged")
        assert set(_end_offsets(cluster, "fo").values()) == {(len(acked), len(acked))}
        logs = {b.node_id: _log_bytes(cluster, b.node_id, "fo-0") for b in cluster.brokers}
        assert len(set(logs.values())) == 1, "replica logs differ"


def test_paused_follower_leaves_the_isr_after_lag_time_and_rejoins_after_resume():
    overrides = {"replica.lag.time.max.ms": "1500", "broker.session.timeout.ms": "60000",
                 "broker.heartbeat.interval.ms": "500"}
    with Cluster(brokers=3, overrides=overrides) as cluster:
        _create(cluster, "lag")
        state = _partition(cluster.bootstrap, "lag")
        follower = next(r for r in state.replicas if r != state.leader)
        cluster.pause(follower)
        try:
            producer = Producer({"bootstrap.servers": f"127.0.0.1:{cluster.port(state.leader)}", "acks": "1"})
            for i in range(100):
                producer.produce("lag", b"x", partition=0)
            producer.flush(10)
            _wait(lambda: follower not in _partition(f"127.0.0.1:{cluster.port(state.leader)}", "lag").isrs,
                  timeout_s=15, what="the paused follower to leave the ISR")
        finally:
            cluster.resume(follower)
        _wait(lambda: follower in _partition(cluster.bootstrap, "lag").isrs, timeout_s=15,
              what="the follower to rejoin the ISR")
        assert _partition(cluster.bootstrap, "lag").leader == state.leader


def test_isr_below_min_isr_refuses_acks_all_and_the_high_watermark_stays():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        _create(cluster, "strict", configs={"min.insync.replicas": "2"})
        state = _partition(cluster.bootstrap, "strict")
        for replica in state.replicas:
            if replica != state.leader:
                cluster.kill(replica)
        leader_port = cluster.port(state.leader)
        _wait(lambda: _partition(f"127.0.0.1:{leader_port}", "strict").isrs == [state.leader], timeout_s=20,
              what="ISR to shrink to the leader")

        async def produce(acks):
            connection = await KafkaConnection.connect("127.0.0.1", leader_port)
            try:
                response = await connection.request(ApiKey.PRODUCE, {"acks": acks, "timeout": 2000, "topic_data": [
                    {"name": "strict", "partition_data": [{"index": 0, "records": build_batch([b"v"])}]}]},
                    version=12)
                return ErrorCode(response.responses[0].partition_responses[0].error_code.value)
            finally:
                connection.close()
        before = _end_offsets_one(leader_port, "strict")
        assert asyncio.run(produce(-1)) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert _end_offsets_one(leader_port, "strict") == before  # nothing written
        assert asyncio.run(produce(1)) == ErrorCode.NONE
        log_end_offset, high_watermark = _end_offsets_one(leader_port, "strict")
        assert log_end_offset == before[0] + 1
        assert high_watermark == before[1]  # strict min ISR: nothing becomes committed


def _end_offsets_one(port, topic):
    async def ask():
        connection = await KafkaConnection.connect("127.0.0.1", port)
        try:
            out = []
            for isolation in (0, 1):
                response = await connection.request(ApiKey.LIST_OFFSETS, {
                    "replica_id": -2, "isolation_level": isolation, "timeout": 5000,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
                out.append(int(response.topics[0].partitions[0].offset))
            return tuple(out)
        finally:
            connection.close()
    return asyncio.run(ask())


def test_controlled_shutdown_moves_every_leadership_before_the_process_exits():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        _create(cluster, "cs", partitions=6)
        leaders = {p: _partition(cluster.bootstrap, "cs", p).leader for p in range(6)}
        victim = leaders[0]
        assert victim in leaders.values()
        cluster.stop(victim)  # SIGTERM: controlled shutdown, then exit
        node = cluster.processes.layout.node(victim)
        log = open(os.path.join(cluster.directory, node.name, "server.log")).read()
        assert "controlled shutdown complete" in log
        after = {p: _partition(cluster.bootstrap, "cs", p).leader for p in range(6)}
        assert victim not in after.values()
        assert -1 not in after.values()


def test_a_wiped_follower_catches_up_after_delete_records_moved_the_log_start_into_a_batch():
    """DeleteRecords to offset 55, inside the batch [50..59]; then follower 2 loses its
    copy. It starts empty at 55 (ListOffsets), is sent the whole batch from 50, and
    must restart its log at 50 and rejoin the ISR — not refetch the batch forever."""
    with Cluster(brokers=2, overrides=FAST) as cluster:
        _create(cluster, "trim", rf=2)
        leader = _partition(cluster.bootstrap, "trim").leader
        follower = 2 if leader == 1 else 1
        leader_port = cluster.port(leader)

        async def leader_requests():
            connection = await KafkaConnection.connect("127.0.0.1", leader_port)
            try:
                for base in range(0, 100, 10):       # ten batches of ten records
                    response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
                        {"name": "trim", "partition_data": [{"index": 0, "records": build_batch(
                            [f"v{base + i}".encode() for i in range(10)])}]}]}, version=9)
                    assert response.responses[0].partition_responses[0].error_code.value == 0
                response = await connection.request(ApiKey.DELETE_RECORDS, {"topics": [
                    {"name": "trim", "partitions": [{"partition_index": 0, "offset": 55}]}], "timeout": 5000},
                    version=2)
                return int(response.topics[0].partitions[0].low_watermark)
            finally:
                connection.close()

        assert asyncio.run(leader_requests()) == 55
        cluster.kill(follower)
        node = cluster.processes.layout.node(follower)
        shutil.rmtree(os.path.join(cluster.directory, node.name, "data", "trim-0"))
        cluster.start_node(follower)
        _wait(lambda: sorted(_partition(f"127.0.0.1:{leader_port}", "trim").isrs) == [1, 2], timeout_s=30,
              what="the wiped follower to rejoin the ISR")
        # The follower holds the leader's last five batches, byte for byte.
        copy = _log_bytes(cluster, follower, "trim-0")
        assert copy and _log_bytes(cluster, leader, "trim-0").endswith(copy)
