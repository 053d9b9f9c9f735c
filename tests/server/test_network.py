"""The listener and dispatcher over real loopback sockets: framing, ordering,
limits, and bad input closing only the offending connection."""

import asyncio
import errno
import logging
import socket
import struct

import pytest

from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.server.dispatch import Dispatcher
from tidelog.server.network import ConnectionQuotas, Listener, MemoryPool, ServerLimits, parse_per_ip_overrides


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _listener(dispatcher=None, **kwargs) -> Listener:
    listener = Listener(dispatcher or Dispatcher(), "127.0.0.1", 0, **kwargs)
    await listener.start()
    return listener


async def _until(condition, what: str, timeout_s: float = 5.0) -> None:
    """Poll ``condition`` on the event loop until it holds; fail after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def _raw_exchange(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def test_api_versions_round_trip_through_our_client():
    async def go():
        listener = await _listener()
        connection = await KafkaConnection.connect("127.0.0.1", listener.port)
        assert connection.api_versions[ApiKey.API_VERSIONS] == (0, 4)
        connection.close()
        await listener.stop()
    run(go())


def test_too_new_api_versions_is_answered_in_v0_format_kip_511():
    async def go():
        listener = await _listener()
        frame = bytearray(encode_request(ApiKey.API_VERSIONS, 3, 42, "c", {"client_software_name": "x",
                                                                           "client_software_version": "1"}))
        struct.pack_into(">h", frame, 6, 99)  # claim ApiVersions v99
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(bytes(frame))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        reply = await reader.readexactly(size)
        writer.close()
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, reply)
        assert correlation_id == 42
        assert body.error_code.value == ErrorCode.UNSUPPORTED_VERSION
        assert any(int(k.api_key) == ApiKey.API_VERSIONS for k in body.api_keys)
        await listener.stop()
    run(go())


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x04\xff\xff\xff\xff",                         # garbage header
    b"\x00\x00\x00\x0c" + b"\x00\x12\x00\x03\x00\x00\x00\x01\x7f\xff\xff\xff",  # client id runs past
    b"\x7f\xff\xff\xff",                                          # frame over the size limit
    b"\xff\xff\xff\xfe",                                          # negative size
    b"\x00\x00\x00\x0c" + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x00\x01",  # unhandled version
    b"\x00\x00\x00\x0b" + b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff\x00",  # unknown api key 999
])
def test_bad_frames_close_that_connection_and_others_keep_working(payload):
    async def go():
        listener = await _listener()
        healthy = await KafkaConnection.connect("127.0.0.1", listener.port)
        reply = await _raw_exchange(listener.port, payload)
        assert reply == b""  # closed without an answer
        response = await healthy.request(ApiKey.API_VERSIONS,
                                         {"client_software_name": "x", "client_software_version": "1"})
        assert response.error_code.value == 0
        healthy.close()
        await listener.stop()
    run(go())


def test_truncated_frame_then_disconnect_does_not_disturb_the_listener():
    async def go():
        listener = await _listener()
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        await _until(lambda: len(listener.connections) == 1, "the listener to accept the connection")
        truncated = next(iter(listener.connections))
        writer.write(b"\x00\x00\x01\x00\x00\x12")  # promises 256 bytes, sends 2
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        await _until(lambda: truncated.closed and truncated not in listener.connections,
                     "the listener to drop the truncated connection")
        connection = await KafkaConnection.connect("127.0.0.1", listener.port)
        assert connection.api_versions[ApiKey.API_VERSIONS] == (0, 4)
        connection.close()
        await listener.stop()
    run(go())


def test_delayed_response_is_not_overtaken_by_a_later_one():
    async def go():
        dispatcher = Dispatcher()
        release = asyncio.Event()
        later_ones_answered = asyncio.Event()

        async def slow():
            await release.wait()
            return {"error_code": 0, "api_keys": [], "throttle_time": 0}

        def handler(header, request):
            # correlation id 1 waits; later ones answer at once
            if header.correlation_id == 1:
                return slow()
            if header.correlation_id == 3:
                later_ones_answered.set()
            return {"error_code": 0, "api_keys": [], "throttle_time": 0}

        listener = await _listener(dispatcher)
        dispatcher.handlers[ApiKey.API_VERSIONS] = (handler, 0, 4)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        for correlation_id in (1, 2, 3):
            writer.write(encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "c", {
                "client_software_name": "x", "client_software_version": "1"}))
        await writer.drain()
        # The server dispatches in arrival order, so once request 3 has been
        # answered, the answers to 2 and 3 are ready while 1 still waits.
        await asyncio.wait_for(later_ones_answered.wait(), 5)
        release.set()
        order = []
        for _ in range(3):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            order.append(struct.unpack_from(">i", frame)[0])
        assert order == [1, 2, 3]
        writer.close()
        await listener.stop()
    run(go())


def test_idle_connection_is_closed():
    async def go():
        listener = await _listener(idle_timeout_ms=200)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await listener.stop()
    run(go())


# ------------------------------------------------------------- resource limits


def test_a_request_whose_bytes_stop_arriving_is_closed_after_the_idle_timeout():
    async def go():
        listener = await _listener(idle_timeout_ms=300)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"\x00\x00\x01\x00\x00\x12")  # promises 256 bytes, sends 2, stays connected
        await writer.drain()
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert asyncio.get_running_loop().time() - started >= 0.25
        writer.close()
        await listener.stop()
    run(go())


def test_memory_pool_waits_when_full_and_serves_first_come_first():
    async def go():
        pool = MemoryPool(100)
        oldest, second, third = pool.begin(), pool.begin(), pool.begin()
        await pool.take(second, 60)
        await pool.take(third, 40)
        assert pool.used_bytes == 100
        granted = []

        async def take(request, size, name):
            await pool.take(request, size)
            granted.append(name)
        later = asyncio.create_task(take(third, 30, "third"))
        await asyncio.sleep(0)
        assert granted == [] and pool.used_bytes == 100          # full: it waits
        # The oldest request being read always gets memory (no two partial requests
        # can wait on each other for ever): the bound is the pool plus one request.
        await pool.take(oldest, 50)
        assert pool.used_bytes == 150 and granted == []
        pool.finish(second)
        await asyncio.sleep(0)
        assert granted == [] and pool.used_bytes == 90           # 90 + 30 > 100: still waits
        pool.finish(oldest)
        await later
        assert granted == ["third"] and pool.used_bytes == 70
        pool.finish(third)
        assert pool.used_bytes == 0
    run(go())


def test_memory_pool_a_cancelled_waiter_leaves_nothing_behind():
    async def go():
        pool = MemoryPool(10)
        holder, waiter = pool.begin(), pool.begin()
        await pool.take(holder, 10)
        task = asyncio.create_task(pool.take(waiter, 5))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pool.finish(waiter)
        pool.finish(holder)
        assert pool.used_bytes == 0
        late = pool.begin()
        await asyncio.wait_for(pool.take(late, 10), 1)   # nothing stuck in the queue
        pool.finish(late)
    run(go())


def test_a_listeners_connections_share_its_memory_pool():
    """Two connections each sending part of a request larger than the pool: the
    second waits for memory (it reads nothing) until the first is done."""
    async def go():
        pool = MemoryPool(90 * 1024)
        listener = await _listener(limits=ServerLimits(pool, ConnectionQuotas()))
        frame = encode_request(ApiKey.API_VERSIONS, 3, 5, "c", {   # a ~60 KB request (strings stay
            "client_software_name": "x" * 30_000, "client_software_version": "1" * 30_000})  # under 32,767 bytes)
        first = await asyncio.open_connection("127.0.0.1", listener.port)
        second = await asyncio.open_connection("127.0.0.1", listener.port)
        for _, writer in (first, second):
            writer.write(frame[:-10])
            await writer.drain()
        size = len(frame) - 4
        await _until(lambda: pool.used_bytes == size and pool._waiters, "the second to wait for memory")
        await asyncio.sleep(0.1)
        assert pool.used_bytes == size and len(pool._waiters) == 1   # it still waits: both do not fit
        for reader, writer in (first, second):   # the first is answered, then the second
            writer.write(frame[-10:])
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            assert struct.unpack_from(">i", await reader.readexactly(size))[0] == 5
        await _until(lambda: pool.used_bytes == 0, "the pool to be given back")
        for _, writer in (first, second):
            writer.close()
        await listener.stop()
    run(go())


class _ShortOfDescriptors(socket.socket):
    """A listening socket whose accept() fails with EMFILE the next ``failures`` times."""

    failures = 0

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_accept_out_of_descriptors_backs_off_logs_once_and_serves_the_waiting_connection(caplog):
    async def go():
        listener = Listener(Dispatcher(), "127.0.0.1", 0, accept_backoff_ms=20)
        sock = _ShortOfDescriptors(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.failures = 5
        listener._sock, listener.port = sock, sock.getsockname()[1]
        with caplog.at_level(logging.INFO, logger="tidelog.network"):
            await listener.start()
            connection = await asyncio.wait_for(KafkaConnection.connect("127.0.0.1", listener.port), 5)
            assert connection.api_versions[ApiKey.API_VERSIONS] == (0, 4)
            connection.close()
            await listener.stop()
        assert listener.accept_failures == 5
        messages = [r.getMessage() for r in caplog.records]
        assert sum("cannot accept connections" in m for m in messages) == 1, messages
        assert sum("accepts connections again after 5 failed accepts" in m for m in messages) == 1, messages
    run(go())


def test_max_connections_blocks_accepting_and_per_ip_closes_at_once():
    async def go():
        quotas = ConnectionQuotas(max_connections=2, max_per_ip=1, per_ip_overrides={"127.0.0.1": 2})
        listener = await _listener(limits=ServerLimits(MemoryPool(), quotas))
        # max.connections.per.ip: 127.0.0.2 may have one connection; its second is closed.
        reader, writer = await _open_from("127.0.0.2", listener.port)
        extra_reader, extra_writer = await _open_from("127.0.0.2", listener.port)
        assert await asyncio.wait_for(extra_reader.read(), 5) == b""
        extra_writer.close()
        # max.connections: two are open, so a third (allowed by its override) waits.
        first = await KafkaConnection.connect("127.0.0.1", listener.port)
        await _until(lambda: quotas.total == 2, "two connections counted")
        waiting = asyncio.create_task(KafkaConnection.connect("127.0.0.1", listener.port))
        await asyncio.sleep(0.3)
        assert not waiting.done() and quotas.total == 2
        writer.close()                                    # a slot frees: the third is served
        third = await asyncio.wait_for(waiting, 5)
        assert quotas.counts == {"127.0.0.1": 2}
        first.close()
        third.close()
        await listener.stop()
    run(go())


async def _open_from(source: str, port: int):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


def test_per_ip_overrides_parse_addresses_and_host_names():
    assert parse_per_ip_overrides(["127.0.0.1:5", "::ffff:10.0.0.1:7", "[::1]:3"]) == {
        "127.0.0.1": 5, "10.0.0.1": 7, "::1": 3}
    assert parse_per_ip_overrides(["localhost:4"]).get("127.0.0.1") == 4
    with pytest.raises(InvalidConfigError):
        parse_per_ip_overrides(["no-such-host.invalid:4"])
