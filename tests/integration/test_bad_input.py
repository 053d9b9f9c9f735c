"""Bad input against a real broker: each gets the right error or a closed
connection; the broker keeps serving and no data is lost or altered."""

import asyncio
import os
import socket
import struct

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records import SimpleRecord, build_batch
from tidelog.testing import wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _connect(broker) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", broker.port)


async def _produce(connection, topic, records, acks=1, partition=0):
    response = await connection.request(ApiKey.PRODUCE, {
        "acks": acks, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": records}]}]}, version=12)
    result = response.responses[0].partition_responses[0]
    return ErrorCode(result.error_code.value), int(result.base_offset)


async def _fetch_all(connection, topic, partition=0) -> bytes:
    response = await connection.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50_000_000, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                    "partition_max_bytes": 50_000_000,
                                                    "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                                    "log_start_offset": -1}]}]},
        version=12)
    return response.responses[0].partitions[0].records or b""


async def _create(connection, topic, configs=None):
    response = await connection.request(ApiKey.CREATE_TOPICS, {"topics": [{
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


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _header(api_key: int, api_version: int, client_id: bytes = b"c", flexible: bool = False) -> bytes:
    header = struct.pack(">hhih", api_key, api_version, 1, len(client_id)) + client_id
    return header + (b"\x00" if flexible else b"")  # request header v2: no tagged fields


# Kafka closes the connection, without answering, on each of these: a size
# outside [0, socket.request.max.bytes] (InvalidReceiveException), a header it
# cannot parse, an API key it does not know, and a body that does not decode
# (InvalidRequestException).
MALFORMED = {
    "size over socket.request.max.bytes": struct.pack(">i", 200 * 1024 * 1024) + b"x" * 10,
    "negative size": struct.pack(">i", -2),
    "header shorter than its fixed fields": _frame(b"\x00\x12\x00\x03"),
    "client id runs past the frame": _frame(struct.pack(">hhih", 18, 3, 1, 0x7FFF) + b"ab"),
    "unknown api key": _frame(_header(999, 0)),
    "metadata body does not decode": _frame(_header(ApiKey.METADATA, 12, flexible=True) + b"\x80" * 8),
}
# Arrays their schema says are not nullable, sent as null (length -1): refused by
# the parser, as Kafka's does, before a handler sees them (they raised TypeError).
NULL_ARRAYS = {
    "produce with null topic_data": _frame(_header(ApiKey.PRODUCE, 8) + struct.pack(">hhii", -1, 1, 1000, -1)),
    "fetch with null topics": _frame(_header(ApiKey.FETCH, 11) + struct.pack(
        ">iiiibiiiih", -1, 100, 1, 1000, 0, 0, -1, -1, 0, 0)),
}
CLOSE_TIMEOUT_S = 10  # far below connections.max.idle.ms: the close is for the bad frame


def _assert_broker_closes(broker, payload: bytes) -> None:
    """Send ``payload`` and keep our side open: the broker must close the connection."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=CLOSE_TIMEOUT_S) as sock:
        sock.sendall(payload)
        try:
            reply = sock.recv(100)
        except ConnectionResetError:
            return  # closed with our unread bytes still queued: a reset is a close too
        except socket.timeout:
            pytest.fail(f"the broker kept the connection open for {CLOSE_TIMEOUT_S}s after a malformed frame")
        assert reply == b"", f"the broker answered a malformed frame with {reply!r}"


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_frame_closes_only_its_connection(broker, payload):
    async def go():
        healthy = await _connect(broker)
        await _create(healthy, "survivor")
        assert (await _produce(healthy, "survivor", build_batch([b"before"])))[0] == ErrorCode.NONE
        await asyncio.to_thread(_assert_broker_closes, broker, payload)
        assert (await _produce(healthy, "survivor", build_batch([b"after"])))[0] == ErrorCode.NONE
        data = await _fetch_all(healthy, "survivor")
        assert b"before" in data and b"after" in data
        healthy.close()
        fresh = await _connect(broker)  # and the listener still accepts new connections
        assert (await _produce(fresh, "survivor", build_batch([b"fresh"])))[0] == ErrorCode.NONE
        fresh.close()
    run(go())


def test_truncated_frame_then_disconnect_leaves_other_connections_working(broker):
    async def go():
        healthy = await _connect(broker)
        await _create(healthy, "truncated")
        # A frame that promises 256 bytes and sends 2 is only incomplete: the
        # broker waits for the rest, as Kafka does, until the client goes away.
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
            sock.sendall(struct.pack(">i", 256) + b"\x00\x12")
        assert (await _produce(healthy, "truncated", build_batch([b"after"])))[0] == ErrorCode.NONE
        assert b"after" in await _fetch_all(healthy, "truncated")
        healthy.close()
    run(go())


def test_fetch_with_wrong_leader_epoch_is_fenced_or_unknown(broker):
    async def go():
        connection = await _connect(broker)
        await _create(connection, "epochs")
        for epoch, expected in ((5, ErrorCode.UNKNOWN_LEADER_EPOCH),):
            response = await connection.request(ApiKey.FETCH, {
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


@pytest.mark.parametrize("payload", NULL_ARRAYS.values(), ids=NULL_ARRAYS.keys())
def test_a_null_array_the_schema_forbids_is_a_protocol_error_not_a_handler_crash(broker, payload):
    seen = len(broker.output)
    _assert_broker_closes(broker, payload)
    wait_until(lambda: any("is null but not nullable" in line for line in broker.output[seen:]), 5,
               "the broker to log the protocol error")
    assert not any("TypeError" in line or "Traceback" in line for line in broker.output[seen:])


def _recrc(batch: bytearray) -> bytes:
    """Recompute the CRC of a batch whose bytes were changed (what a buggy or hostile
    client would send: the CRC matches, the records are garbage)."""
    from crc32c import crc32c
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_batches_whose_records_are_not_records_are_refused_and_consumers_keep_reading(broker):
    """A CRC-correct batch with compression attribute 7, or with garbage where its
    records should be, is refused (nothing appended); a real consumer then reads
    every good record, including ones written after the bad attempts."""
    from confluent_kafka import Consumer, TopicPartition

    async def go():
        connection = await _connect(broker)
        await _create(connection, "validated")
        assert (await _produce(connection, "validated", build_batch([b"before"])))[0] == ErrorCode.NONE
        codec7 = bytearray(build_batch([b"x"]))
        struct.pack_into(">h", codec7, 21, 7)
        garbage = bytearray(build_batch([SimpleRecord(b"v" * 40, b"k")] * 3))
        garbage[61:] = b"\xff" * (len(garbage) - 61)          # no record length varint ever ends
        offsets = bytearray(build_batch([b"a", b"b"]))
        offsets[61 + 3] = 9 * 2                              # the first record's offset delta: 9
        future = build_batch([b"too late"], timestamp_ms=int(__import__("time").time() * 1000) + 7_200_000)
        answers = [(await _produce(connection, "validated", _recrc(bad)))[0]
                   for bad in (codec7, garbage, offsets)]
        answers.append((await _produce(connection, "validated", future))[0])
        assert answers[:2] == [ErrorCode.CORRUPT_MESSAGE, ErrorCode.CORRUPT_MESSAGE]
        # A record offset out of sequence is INVALID_RECORD; a timestamp past
        # log.message.timestamp.after.max.ms is INVALID_TIMESTAMP (Kafka's LogValidator).
        assert answers[2:] == [ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP]
        assert (await _produce(connection, "validated", build_batch([b"after"])))[0] == ErrorCode.NONE
        connection.close()
    run(go())
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "validated",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("validated", 0, 0)])
    values = []
    for _ in range(40):
        message = consumer.poll(0.25)
        if message is not None and message.error() is None:
            values.append(message.value())
        if len(values) == 2:
            break
    consumer.close()
    assert values == [b"before", b"after"]
