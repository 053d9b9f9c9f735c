"""The asyncio runtime in-process: `Server` driving a BrokerNode over a real
listener, with the controller channel faked where a test needs an answer the
controller would not give on its own."""

import asyncio
import os

from tidelog.broker.config import BrokerConfig
from tidelog.broker.lifecycle import BrokerState
from tidelog.controller.messages import BrokerHeartbeatReply
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records import build_batch
from tidelog.server.runtime import Server
from tidelog.storage.log_manager import CLEAN_SHUTDOWN_FILE


def _config(tmp_path) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                         "broker.heartbeat.interval.ms": "100"})


async def _wait(predicate, timeout_s=10.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _produce(port: int, topic: str, value: bytes) -> tuple[ErrorCode, int]:
    connection = await KafkaConnection.connect("127.0.0.1", port)
    try:
        await connection.request(ApiKey.METADATA, {"topics": [{"name": topic, "topic_id": None}],
                                                   "allow_auto_topic_creation": True,
                                                   "include_topic_authorized_operations": False}, version=12)
        response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch([value])}]}]}, version=9)
        partition = response.responses[0].partition_responses[0]
        return ErrorCode(partition.error_code.value), int(partition.base_offset)
    finally:
        connection.close()


def test_start_serve_and_stop_cleanly(tmp_path):
    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        assert server.node.state == BrokerState.RUNNING
        assert await _produce(server.bind_port, "t", b"a") == (ErrorCode.NONE, 0)
        assert await _produce(server.bind_port, "t", b"b") == (ErrorCode.NONE, 1)
        await server.stop()
        assert server.exit_status == 0
        assert server.node.state == BrokerState.NOT_RUNNING
        assert os.path.exists(tmp_path / "data" / CLEAN_SHUTDOWN_FILE)
    asyncio.run(main())


def test_a_broken_invariant_stops_the_process_with_status_1(tmp_path):
    async def main():
        server = Server(_config(tmp_path))
        await server.start()

        def broken(now_ms):
            raise AssertionError("high_watermark > log_end_offset")

        server.node.replica_manager.on_tick = broken
        await asyncio.wait_for(server.wait_stopped_by_node(), 5)
        await server.stop()
        assert server.exit_status == 1
    asyncio.run(main())


def test_no_response_confirms_a_log_write_that_failed_behind_it(tmp_path, monkeypatch):
    """The log's appends are made by the write-behind thread (storage/files.py). One
    fails (ENOSPC; a batch too big to be written inline): the produce it belongs to is never answered NONE, the connection
    closes instead, and the partition's next write finds the failure and answers
    KAFKA_STORAGE_ERROR. Writes before it were confirmed and are on file."""
    import errno

    from tidelog.storage import files

    real = files._write_all

    def write_all(fd, data):
        if b"doomed" in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)
    monkeypatch.setattr(files, "_write_all", write_all)

    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        assert server.write_behind is not None            # tidelog serve's default
        assert await _produce(server.bind_port, "t", b"kept") == (ErrorCode.NONE, 0)
        try:
            answer = await _produce(server.bind_port, "t", b"doomed" + bytes(100_000))   # past inline_bytes
        except ConnectionError:
            answer = None                                 # closed: the client retries, or reports
        assert answer is None or answer[0] != ErrorCode.NONE, answer
        assert (await _produce(server.bind_port, "t", b"later"))[0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert server.node.log_manager.offline_dirs
        await server.stop()
    asyncio.run(main())


def test_a_heartbeat_answered_stale_broker_epoch_registers_again(tmp_path):
    """The fake channel answers one heartbeat STALE_BROKER_EPOCH, as the controller
    does once another registration replaced this one."""
    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        real_heartbeat = server.channel.heartbeat
        registrations = []
        real_register = server.channel.register
        stale_once = [True]

        async def heartbeat(request):
            if stale_once[0]:
                stale_once[0] = False
                return BrokerHeartbeatReply(ErrorCode.STALE_BROKER_EPOCH, "replaced by a test")
            return await real_heartbeat(request)

        async def register(request):
            registrations.append(request)
            return await real_register(request)

        server.channel.heartbeat, server.channel.register = heartbeat, register
        await _wait(lambda: registrations, what="a new registration")
        await _wait(lambda: server.node.state == BrokerState.RUNNING and server.node.broker_epoch >= 0,
                    what="RUNNING again")
        assert await _produce(server.bind_port, "t", b"after") == (ErrorCode.NONE, 0)
        await server.stop()
        assert server.exit_status == 0
    asyncio.run(main())


_MMAPPED_BLOCKS = """
import ctypes, sys

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "tuned":
    from tidelog.server.runtime import keep_request_buffers
    assert keep_request_buffers()
before = libc.mallinfo2().hblks
held = [bytearray(3 << 20) for _ in range(4)]       # requests of a few MB in flight
print(libc.mallinfo2().hblks - before)
"""


def test_request_sized_buffers_come_from_the_heap_not_fresh_mappings():
    """Without the tuning each multi-megabyte buffer is its own mmap (fresh, zeroed pages)."""
    import subprocess
    import sys

    def mapped(variant: str) -> int:
        out = subprocess.run([sys.executable, "-c", _MMAPPED_BLOCKS, variant], capture_output=True, text=True,
                             check=True, timeout=60)
        return int(out.stdout.split()[-1])
    assert mapped("default") == 4
    assert mapped("tuned") == 0


def test_write_behind_bytes_refuses_absurd_values_and_zero_writes_on_the_loop(tmp_path):
    """tidelog.log.write.behind.max.bytes: below 0, above 1 GiB or not a number is
    refused by name at start; 0 turns write-behind off."""
    import pytest

    from tidelog.core.errors import InvalidConfigError

    for value in ("-1", str((1 << 30) + 1), str(1 << 62), "lots", ""):
        with pytest.raises(InvalidConfigError, match="tidelog.log.write.behind.max.bytes"):
            BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path), "tidelog.log.write.behind.max.bytes": value})
    config = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"),
                           "listeners": "PLAINTEXT://127.0.0.1:0", "tidelog.log.write.behind.max.bytes": "0"})
    assert Server(config).write_behind is None
    assert Server(_config(tmp_path)).write_behind.max_bytes == 16 * 1024 * 1024
