"""A Fetch's records sent by sendfile (protocol/file_region.py, server/network.py).

The encoder's file regions against plain bytes for every Fetch version (the length
prefixes), then an in-process broker on a real socket: pipelined fetches whose frames
are byte-identical to the segment files and come back in request order, with sendfile
on and off (the listener's ``sendfile_bytes`` says which way they went); a reader that
does not read while the segments are deleted under it; a segment truncated under it
(the connection closes; no frame is short)."""

import asyncio
import dataclasses
import os
import socket
import struct

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import (RequestHeader, _request_class, decode_response, encode_request,
                                    encode_response, kio_versions)
from tidelog.protocol.file_region import FileRegion, ResponseFrame
from tidelog.records import build_batch
from tidelog.server.runtime import Server

SEGMENT_BYTES = 300_000
VALUE_BYTES = 100_000
BATCHES = 12


# ------------------------------------------------------------------ the encoder

def _fetch_body(records) -> dict:
    """Two partitions, each with ``records()``."""
    partitions = [{"partition_index": index, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
                   "log_start_offset": 0, "preferred_read_replica": -1, "aborted_transactions": None,
                   "records": records()} for index in (3, 4)]
    return {"throttle_time": 0, "error_code": 0, "session_id": 7, "responses": [
        {"topic": "t", "partitions": partitions}]}


def _join(frame) -> bytes:
    if isinstance(frame, bytes):
        return frame
    return b"".join(part.read() if isinstance(part, FileRegion) else part for part in frame.parts)


@pytest.mark.parametrize("version", range(4, kio_versions(ApiKey.FETCH)[1] + 1))
def test_a_frame_with_file_regions_is_the_frame_with_their_bytes(tmp_path, version):
    """Every Fetch version (int32 length prefixes up to v11, compact ones from v12): the
    parts of a frame with regions, the regions read, are the bytes of the frame encoded
    from the records themselves; without file regions the same bytes come back whole."""
    data = os.urandom(70_000)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"x" * 123 + data + b"y" * 50)
    header = RequestHeader(ApiKey.FETCH, version, 42, "c")
    expected = encode_response(header, _fetch_body(lambda: data))
    fd = os.open(path, os.O_RDONLY)
    try:
        def region():
            return FileRegion(os.dup(fd), 123, len(data), str(path))
        with_regions = encode_response(header, _fetch_body(region), file_regions=True)
        assert isinstance(with_regions, ResponseFrame)
        # (before v12 the records are a partition's last field: nothing follows the last region)
        tail = [bytes] if version >= 12 else []
        assert [type(part) for part in with_regions.parts] == [bytes, FileRegion, bytes, FileRegion, *tail]
        assert with_regions.size == len(expected)
        assert _join(with_regions) == expected
        assert encode_response(header, _fetch_body(region), file_regions=False) == expected
    finally:
        os.close(fd)


# ------------------------------------------------------------- a broker in-process

def _config(tmp_path, sendfile: bool = True) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                         "log.segment.bytes": str(SEGMENT_BYTES),
                         "tidelog.network.sendfile.enable": "true" if sendfile else "false"})


async def _fill(server: Server, topic: str = "t") -> object:
    """``BATCHES`` batches of one ``VALUE_BYTES`` record each (2 per segment); the topic id."""
    connection = await KafkaConnection.connect("127.0.0.1", server.bind_port)
    try:
        metadata = await connection.request(ApiKey.METADATA, {
            "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False}, version=12)
        for i in range(BATCHES):
            response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": build_batch([os.urandom(VALUE_BYTES)])}]}]},
                version=9)
            assert response.responses[0].partition_responses[0].error_code.value == 0
        return metadata.topics[0].topic_id
    finally:
        connection.close()


def _fetch_request(version: int, correlation_id: int, topic_id, fetch_offset: int, topic: str = "t") -> bytes:
    partition = {"partition": 0, "fetch_offset": fetch_offset, "partition_max_bytes": 1 << 22,
                 "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [partition]}]}
    fields = {f.name for f in dataclasses.fields(_request_class(ApiKey.FETCH, version))}
    return encode_request(ApiKey.FETCH, version, correlation_id, "raw", {k: v for k, v in body.items() if k in fields})


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


class _SlowReader:
    """A raw socket read only when asked, ``chunk`` bytes at a time (a slow consumer)."""

    def __init__(self, sock: socket.socket, chunk: int = 8192):
        self.sock, self.chunk = sock, chunk

    async def readexactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = await self.read(min(self.chunk, n - len(data)))
            if not more:
                raise asyncio.IncompleteReadError(data, n)
            data += more
        return data

    async def read(self, n: int = -1) -> bytes:
        loop = asyncio.get_running_loop()
        if n >= 0:
            return await loop.sock_recv(self.sock, n)
        data = b""
        while more := await loop.sock_recv(self.sock, self.chunk):
            data += more
        return data


def _expected(server: Server, fetch_offset: int, topic: str = "t") -> bytes:
    """What a Fetch from ``fetch_offset`` should carry: the segment's bytes from its batch on."""
    return server.node.log_manager.get_log(TopicPartition(topic, 0)).read(fetch_offset, 1 << 22).records.read_bytes()


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "copied"])
def test_pipelined_fetches_are_byte_identical_and_in_request_order(tmp_path, sendfile):
    """Fetches of every segment at v4, v11, v12 and the newest version, sent at once on one
    connection with Metadata requests between them: each answer in request order, its
    records the segment's bytes. With sendfile every record byte went by sendfile; with
    ``tidelog.network.sendfile.enable=false`` none did."""
    async def main():
        server = Server(_config(tmp_path, sendfile))
        await server.start()
        try:
            topic_id = await _fill(server)
            newest = kio_versions(ApiKey.FETCH)[1]
            plan = []                       # (correlation id, version, fetch offset or None for Metadata)
            for i, fetch_offset in enumerate(range(0, BATCHES, 2)):
                for version in (4, 11, 12, newest):
                    plan.append((len(plan), version, fetch_offset))
                plan.append((len(plan), 12, None))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.bind_port)
            writer.write(b"".join(
                _fetch_request(version, cid, topic_id, offset) if offset is not None else
                encode_request(ApiKey.METADATA, 12, cid, "raw", {"topics": None, "allow_auto_topic_creation": False,
                                                                 "include_topic_authorized_operations": False})
                for cid, version, offset in plan))
            sent = 0
            for cid, version, offset in plan:
                frame = await _read_frame(reader)
                correlation_id, response = decode_response(ApiKey.FETCH if offset is not None else ApiKey.METADATA,
                                                           version, frame)
                assert correlation_id == cid
                if offset is None:
                    continue
                partition = response.responses[0].partitions[0]
                assert partition.error_code.value == 0
                assert bytes(partition.records) == _expected(server, offset)
                sent += len(partition.records)
            writer.close()
            assert sent > BATCHES * VALUE_BYTES
            assert server.listener.sendfile_bytes == (sent if sendfile else 0)
        finally:
            await server.stop()
    asyncio.run(main())


async def _stalled_connection(server: Server, requests: list[bytes]):
    """A connection that asked ``requests`` and reads nothing (a tiny receive buffer): once
    the broker is stuck sending the first answer, with the others queued."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    before = set(server.listener.connections)
    await loop.sock_connect(sock, ("127.0.0.1", server.bind_port))
    deadline = loop.time() + 20

    async def until(condition, what):
        while not condition():
            assert loop.time() < deadline, f"timed out waiting until {what}"
            await asyncio.sleep(0.01)
    await until(lambda: server.listener.connections - before, "the broker has the connection")
    (connection,) = server.listener.connections - before
    # A small send buffer on the broker's side too (loopback's would grow to megabytes).
    connection.writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    await loop.sock_sendall(sock, b"".join(requests))
    await until(lambda: connection._pending.qsize() == len(requests) - 1, "every request is answered")
    assert server.listener.sendfile_bytes == 0            # the first answer is not out yet
    reader = _SlowReader(sock)
    return reader, sock


def test_a_reader_that_does_not_read_gets_whole_frames_of_segments_deleted_meanwhile(tmp_path):
    """Three fetches of the oldest segments, then the reader stops reading; DeleteRecords'
    work deletes those segments (their files gone) while the answers wait. Read slowly
    afterwards, every answer is whole and byte-identical: the regions hold their files."""
    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        try:
            topic_id = await _fill(server)
            offsets = [0, 2, 4]
            expected = [_expected(server, offset) for offset in offsets]
            log_ = server.node.log_manager.get_log(TopicPartition("t", 0))
            paths = [segment.log.path for segment in log_.segments[:3]]
            reader, sock = await _stalled_connection(
                server, [_fetch_request(12, cid, topic_id, offset) for cid, offset in enumerate(offsets)])
            assert log_.maybe_increment_log_start_offset(6)
            assert not any(os.path.exists(path) for path in paths)
            for cid, records in enumerate(expected):
                correlation_id, response = decode_response(ApiKey.FETCH, 12, await _read_frame(reader))
                assert correlation_id == cid
                assert bytes(response.responses[0].partitions[0].records) == records
            assert server.listener.sendfile_bytes == sum(map(len, expected))
            sock.close()
        finally:
            await server.stop()
    asyncio.run(main())


def test_a_segment_truncated_before_its_answer_is_sent_closes_the_connection(tmp_path, caplog):
    """The second answer's segment is cut to nothing while the first is being sent: the
    first arrives whole; the second never does (the connection closes after its first
    bytes, as Kafka's FileRecords.writeTo fails "truncated during write"); nothing else."""
    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        try:
            topic_id = await _fill(server)
            first = _expected(server, 0)
            log_ = server.node.log_manager.get_log(TopicPartition("t", 0))
            reader, sock = await _stalled_connection(
                server, [_fetch_request(12, 0, topic_id, 0), _fetch_request(12, 1, topic_id, 2)])
            os.truncate(log_.segments[1].log.path, 0)
            correlation_id, response = decode_response(ApiKey.FETCH, 12, await _read_frame(reader))
            assert correlation_id == 0 and bytes(response.responses[0].partitions[0].records) == first
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            rest = await reader.read()                      # up to the end of the stream
            assert 0 < len(rest) < size
            sock.close()
            assert any("truncated during write" in r.getMessage() for r in caplog.records)
        finally:
            await server.stop()
    asyncio.run(main())
