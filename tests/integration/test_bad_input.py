"""Bad input against a real broker: each gets the right error or a closed
connection; the broker keeps serving and no data is lost or altered."""

import asyncio
import os
import socket
import struct

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.protocol.client import KafkaConnection
from tidelog.records import SimpleRecord, build_batch

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _connect(broker) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", broker.port)


async def _produce(connection, topic, records, acks=1, partition=0):
    response = await connection.request(PRODUCE, {
        "acks": acks, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": records}]}]}, version=12)
    result = response.responses[0].partition_responses[0]
    return ErrorCode(result.error_code.value), int(result.base_offset)


async def _fetch_all(connection, topic, partition=0) -> bytes:
    response = await connection.request(FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50_000_000, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                    "partition_max_bytes": 50_000_000,
                                                    "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                                    "log_start_offset": -1}]}]},
        version=12)
    return response.responses[0].partitions[0].records or b""


async def _create(connection, topic, configs=None):
    response = await connection.request(CREATE_TOPICS, {"topics": [{
        "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 5000, "validate_only": False})
    return ErrorCode(response.topics[0].error_code.value), response.topics[0].error_message


def test_acks_2_is_invalid_required_acks_and_writes_nothing(broker):
    async def go():
        connection = await _connect(broker)
        await _create(connection, "acks")
        assert await _produce(connection, "acks", build_batch([b"x"]), acks=2) == (
            ErrorCode.INVALID_REQUIRED_ACKS, -1)
        assert await _fetch_all(connection, "acks") == b""
        connection.close()
    run(go())


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "spaces here", "ünïcode"])
def test_invalid_topic_names_are_rejected(broker, name):
    async def go():
        connection = await _connect(broker)
        error, message = await _create(connection, name)
        assert error == ErrorCode.INVALID_TOPIC_EXCEPTION, message
        assert message
        connection.close()
    run(go())


def test_corrupt_batch_is_corrupt_message_and_the_log_is_unchanged(broker):
    async def go():
        connection = await _connect(broker)
        await _create(connection, "corrupt")
        good = build_batch([b"good"])
        assert (await _produce(connection, "corrupt", good))[0] == ErrorCode.NONE
        before = await _fetch_all(connection, "corrupt")
        bad = bytearray(build_batch([b"evil-bytes"]))
        bad[-3] ^= 0x55
        assert (await _produce(connection, "corrupt", bytes(bad)))[0] == ErrorCode.CORRUPT_MESSAGE
        truncated = build_batch([b"x" * 100])[:-10]
        assert (await _produce(connection, "corrupt", truncated))[0] == ErrorCode.CORRUPT_MESSAGE
        assert (await _produce(connection, "corrupt", os.urandom(200)))[0] == ErrorCode.CORRUPT_MESSAGE
        assert await _fetch_all(connection, "corrupt") == before
        connection.close()
    run(go())


def test_batch_over_max_message_bytes_is_message_too_large(broker):
    async def go():
        connection = await _connect(broker)
        await _create(connection, "small", {"max.message.bytes": "1000"})
        big = build_batch([SimpleRecord(os.urandom(2000))])
        assert (await _produce(connection, "small", big))[0] == ErrorCode.MESSAGE_TOO_LARGE
        assert (await _produce(connection, "small", build_batch([b"ok"])))[0] == ErrorCode.NONE
        connection.close()
    run(go())


def test_producing_to_an_internal_topic_is_refused(broker):
    async def go():
        connection = await _connect(broker)
        error, _ = await _produce(connection, "__consumer_offsets", build_batch([b"x"]))
        assert error in (ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        connection.close()
    run(go())


def test_garbage_and_oversized_frames_close_only_their_connection(broker):
    async def go():
        healthy = await _connect(broker)
        await _create(healthy, "survivor")
        assert (await _produce(healthy, "survivor", build_batch([b"before"])))[0] == ErrorCode.NONE
        for payload in (os.urandom(64), struct.pack(">i", 200 * 1024 * 1024) + b"x" * 10,
                        struct.pack(">i", 12) + b"\x00\x00\x00\x0c\x00\x00\x00\x01\xff\xff",
                        struct.pack(">i", 6) + b"\x00\x00"):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
            sock.sendall(payload)
            if len(payload) > 10 and payload[:4] != struct.pack(">i", 200 * 1024 * 1024):
                sock.shutdown(socket.SHUT_WR)
            try:
                assert sock.recv(100) == b""
            except (ConnectionResetError, socket.timeout):
                pass
            sock.close()
        assert (await _produce(healthy, "survivor", build_batch([b"after"])))[0] == ErrorCode.NONE
        data = await _fetch_all(healthy, "survivor")
        assert b"before" in data and b"after" in data
        healthy.close()
    run(go())


def test_fetch_with_wrong_leader_epoch_is_fenced_or_unknown(broker):
    async def go():
        connection = await _connect(broker)
        await _create(connection, "epochs")
        for epoch, expected in ((5, ErrorCode.UNKNOWN_LEADER_EPOCH),):
            response = await connection.request(FETCH, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1000, "isolation_level": 0,
                "topics": [{"topic": "epochs", "partitions": [{
                    "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000,
                    "current_leader_epoch": epoch, "last_fetched_epoch": -1, "log_start_offset": -1}]}]},
                version=12)
            partition = response.responses[0].partitions[0]
            assert partition.error_code.value == expected
            assert partition.records is not None  # never null: librdkafka rejects null records
        connection.close()
    run(go())
