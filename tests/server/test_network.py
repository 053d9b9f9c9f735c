"""The listener and dispatcher over real loopback sockets: framing, ordering,
limits, and bad input closing only the offending connection."""

import asyncio
import struct

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.server.dispatch import Dispatcher
from tidelog.server.network import Listener


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
