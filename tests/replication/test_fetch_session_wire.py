"""Incremental fetch sessions (KIP-227) over the wire: a combined node (`Server`) on
loopback answering Fetch v12 requests that open a session, fetch incrementally, forget
partitions, and name sessions or epochs the broker does not know."""

import asyncio

from tidelog.broker.config import BrokerConfig
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records import build_batch
from tidelog.server.runtime import Server
from tests.admin_calls import connect_creating

VERSION = 12          # topics by name; sessions since v7


def _config(tmp_path, **extra) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                         "broker.heartbeat.interval.ms": "100", "num.partitions": "3", **extra})


async def _produce(connection, partition: int, values: list[bytes]) -> None:
    response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": partition, "records": build_batch(values)}]}]}, version=9)
    assert response.responses[0].partition_responses[0].error_code.value == 0


async def _fetch(connection, session_id, epoch, offsets: dict[int, int], forgotten=()):
    request = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
               "session_id": session_id, "session_epoch": epoch, "rack_id": "",
               "topics": [{"topic": "t", "partitions": [
                   {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "log_start_offset": -1,
                    "current_leader_epoch": -1, "last_fetched_epoch": -1} for p, offset in offsets.items()]}]
               if offsets else [],
               "forgotten_topics_data": [{"topic": "t", "partitions": list(forgotten)}] if forgotten else []}
    response = await connection.request(ApiKey.FETCH, request, version=VERSION)
    partitions = {int(p.partition_index): p for topic in response.responses for p in topic.partitions}
    return ErrorCode(response.error_code.value), int(response.session_id), partitions


def run(tmp_path, scenario, **config):
    async def main():
        server = Server(_config(tmp_path, **config))
        await server.start()
        try:
            connection = await connect_creating(server.bind_port, "t")
            for p in range(3):
                await _produce(connection, p, [b"a", b"b"])
            await scenario(connection)
        finally:
            await server.stop()
    asyncio.run(main())


def test_a_session_answers_only_what_changed_and_reads_what_it_cached(tmp_path):
    async def scenario(connection):
        # Full fetch, epoch 0: every partition answered, a session opened.
        error, session_id, parts = await _fetch(connection, 0, 0, {0: 0, 1: 0, 2: 0})
        assert error == ErrorCode.NONE and session_id != 0 and sorted(parts) == [0, 1, 2]
        assert all(len(p.records) > 0 for p in parts.values())
        # Incremental, epoch 1: the new offsets of 0 and 1 named; 2 is read at its cached
        # offset 0 and has records again, so it is answered too.
        error, sid, parts = await _fetch(connection, session_id, 1, {0: 2, 1: 2})
        assert (error, sid) == (ErrorCode.NONE, session_id) and sorted(parts) == [2]
        # Epoch 2: 2 moves on; nothing new anywhere -> an empty response.
        error, sid, parts = await _fetch(connection, session_id, 2, {2: 2})
        assert (error, sid, parts) == (ErrorCode.NONE, session_id, {})
        # New records in partition 1 only: only 1 is answered, read from its cached offset.
        await _produce(connection, 1, [b"c"])
        error, sid, parts = await _fetch(connection, session_id, 3, {})
        assert sorted(parts) == [1] and parts[1].high_watermark == 3 and len(parts[1].records) > 0
        # Partition 0 forgotten: new records there are no longer read.
        await _produce(connection, 0, [b"d"])
        error, sid, parts = await _fetch(connection, session_id, 4, {1: 3}, forgotten=[0])
        assert (error, parts) == (ErrorCode.NONE, {})
    run(tmp_path, scenario)


def test_unknown_session_and_stale_epoch_are_refused_as_kafka_does(tmp_path):
    async def scenario(connection):
        error, sid, parts = await _fetch(connection, 987654, 1, {0: 0})
        assert (error, sid, parts) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, {})
        _, session_id, _ = await _fetch(connection, 0, 0, {0: 0})
        assert (await _fetch(connection, session_id, 1, {}))[0] == ErrorCode.NONE
        error, sid, parts = await _fetch(connection, session_id, 1, {})       # epoch 1 again
        assert (error, sid, parts) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, {})
        # A full fetch naming the session closes it; the old id is gone.
        error, new_id, _ = await _fetch(connection, session_id, 0, {0: 0})
        assert error == ErrorCode.NONE and new_id not in (0, session_id)
        assert (await _fetch(connection, session_id, 2, {}))[0] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # Epoch -1: no session.
        assert (await _fetch(connection, 0, -1, {0: 0}))[1] == 0
    run(tmp_path, scenario)


def test_no_slots_no_sessions(tmp_path):
    async def scenario(connection):
        error, session_id, parts = await _fetch(connection, 0, 0, {0: 0})
        assert (error, session_id, sorted(parts)) == (ErrorCode.NONE, 0, [0])
    run(tmp_path, scenario, **{"max.incremental.fetch.session.cache.slots": "0"})
