"""Resource limits against real ``tidelog serve`` processes over real sockets
(docs/security.md): connections.max.idle.ms in the middle of a request,
queued.max.request.bytes bounding the broker's memory, max.connections and
max.connections.per.ip, the open file limit raised at start, and a broker out of
file descriptors (EMFILE) that waits instead of dropping or crashing."""

from __future__ import annotations

import asyncio
import os
import resource
import selectors
import socket
import struct
import time

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import encode_request
from tidelog.records import build_batch
from tidelog.testing import Broker, wait_until

MIB = 1024 * 1024
IDLE_MS = 2000
POOL_BYTES = 16 * MIB
DECLARED_BYTES = 15 * MIB           # each stalled request's declared size
SENT_BYTES = 14 * MIB               # ... and how much of it its client sends
LIMITED_IP = "127.0.0.3"            # a loopback address with max.connections.per.ip.overrides of 2


def api_versions_frame(correlation_id: int = 7) -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "limits",
                          {"client_software_name": "limits", "client_software_version": "1"})


def connect(port: int, source: str = "127.0.0.1", timeout_s: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def answered(sock: socket.socket, correlation_id: int = 7, timeout_s: float = 5.0) -> bool:
    """Send ApiVersions and wait for its answer: True if answered, False if the
    broker closed the connection; ``socket.timeout`` if neither happened."""
    sock.settimeout(timeout_s)
    try:
        sock.sendall(api_versions_frame(correlation_id))
        header = _recv_exactly(sock, 8)
    except (ConnectionResetError, BrokenPipeError):
        return False
    if header is None:
        return False
    size, got = struct.unpack(">ii", header)
    assert got == correlation_id
    _recv_exactly(sock, size - 4)
    return True


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def closed_by_broker(sock: socket.socket, timeout_s: float) -> bool:
    """True once the broker closes ``sock`` (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def lines(broker: Broker, since: int, text: str) -> list[str]:
    return [line for line in broker.output[since:] if text in line]


def produce_and_fetch(port: int, topic: str, value: bytes) -> None:
    """A normal client's round trip: create, produce, fetch the value back."""
    async def go():
        connection = await KafkaConnection.connect("127.0.0.1", port)
        try:
            await connection.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 5000, "validate_only": False})
            response = await connection.request(ApiKey.PRODUCE, {
                "acks": -1, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [
                    {"index": 0, "records": build_batch([value])}]}]}, version=9)
            assert response.responses[0].partition_responses[0].error_code.value == ErrorCode.NONE
            response = await connection.request(ApiKey.FETCH, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [{
                    "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                    "last_fetched_epoch": -1, "log_start_offset": -1}]}]}, version=12)
            assert value in (response.responses[0].partitions[0].records or b"")
        finally:
            connection.close()
    asyncio.run(asyncio.wait_for(go(), 30))


def send_as_much_as_possible(socks: list[socket.socket], payloads: list[bytes], quiet_s: float = 1.0,
                             while_sending=lambda: None) -> list[int]:
    """Send each payload on its socket without blocking; stop once no socket has
    made progress for ``quiet_s`` (the broker stopped reading). Bytes sent each."""
    sent = [0] * len(socks)
    selector = selectors.DefaultSelector()
    for index, sock in enumerate(socks):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_WRITE, index)
    last_progress = time.monotonic()
    while selector.get_map() and time.monotonic() - last_progress < quiet_s:
        while_sending()
        for key, _ in selector.select(0.05):
            index = key.data
            try:
                n = socks[index].send(memoryview(payloads[index])[sent[index]:sent[index] + 1 * MIB])
            except (BlockingIOError, InterruptedError):
                continue
            sent[index] += n
            last_progress = time.monotonic()
            if sent[index] == len(payloads[index]):
                selector.unregister(socks[index])
    selector.close()
    for sock in socks:
        sock.setblocking(True)
    return sent


# ------------------------------------------------------------------ idle, per-ip


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"connections.max.idle.ms": str(IDLE_MS),
                           "max.connections.per.ip.overrides": f"{LIMITED_IP}:2"}) as running:
        yield running


def test_a_request_whose_bytes_stop_arriving_is_closed_after_the_idle_timeout(broker):
    seen = len(broker.output)
    with connect(broker.port) as stalled:
        stalled.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x03" + b"x" * 6)  # 10 of 1000 bytes
        started = time.monotonic()
        assert closed_by_broker(stalled, IDLE_MS / 1000 + 5), "a half-sent request kept its connection open"
        waited = time.monotonic() - started
    assert IDLE_MS / 1000 - 0.3 <= waited <= IDLE_MS / 1000 + 3, waited
    wait_until(lambda: lines(broker, seen, "10 of a 1000-byte request received"), 5, "the close to be logged")
    with connect(broker.port) as healthy:
        assert answered(healthy)


def test_a_slow_request_that_keeps_moving_is_not_cut(broker):
    frame = api_versions_frame(11)
    with connect(broker.port) as slow:
        slow.sendall(frame[:6])
        pieces = [frame[i:i + 3] for i in range(6, len(frame), 3)]
        step_s = 1.5 * IDLE_MS / 1000 / len(pieces)         # the whole request takes 1.5 idle timeouts
        for piece in pieces[:-1]:
            time.sleep(step_s)
            slow.sendall(piece)
        slow.sendall(pieces[-1])
        header = _recv_exactly(slow, 8)
        assert header is not None and struct.unpack(">ii", header)[1] == 11


def test_connections_over_max_connections_per_ip_are_closed_at_once(broker):
    seen = len(broker.output)
    first, second = connect(broker.port, LIMITED_IP), connect(broker.port, LIMITED_IP)
    try:
        assert answered(first) and answered(second)
        with connect(broker.port, LIMITED_IP) as third:
            assert closed_by_broker(third, 5), "a third connection from the address was served"
        wait_until(lambda: lines(broker, seen, f"Rejected connection from {LIMITED_IP}"), 5, "the rejection log line")
        with connect(broker.port) as other_address:     # the limit is per address
            assert answered(other_address)
        produce_and_fetch(broker.port, "per-ip", b"still-served")
        assert answered(first)                            # the first two were not touched
        first.close()
        wait_until(lambda: _serves_from(broker.port, LIMITED_IP), 5, "a freed slot to be usable")
    finally:
        first.close()
        second.close()


def _serves_from(port: int, source: str) -> bool:
    with connect(port, source) as sock:
        return answered(sock)


# ------------------------------------------------------- queued.max.request.bytes


@pytest.fixture(scope="module")
def pooled_broker():
    with Broker(overrides={"queued.max.request.bytes": str(POOL_BYTES),
                           "socket.request.max.bytes": str(POOL_BYTES)}) as running:
        yield running


def test_queued_max_request_bytes_bounds_the_memory_of_stalled_large_requests(pooled_broker):
    broker = pooled_broker
    pid = broker.process.pid
    produce_and_fetch(broker.port, "warm", b"warm-up")
    time.sleep(0.5)
    baseline_kib = vm_rss_kib(pid)
    seen = len(broker.output)
    count = 8
    socks = [connect(broker.port) for _ in range(count)]
    peak_kib = [baseline_kib]
    try:
        payload = struct.pack(">i", DECLARED_BYTES) + b"\x00" * SENT_BYTES
        sent = send_as_much_as_possible(socks, [payload] * count,
                                        while_sending=lambda: peak_kib.append(vm_rss_kib(pid)))
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            peak_kib.append(vm_rss_kib(pid))
            time.sleep(0.05)
        growth_mib = (max(peak_kib) - baseline_kib) / 1024
        offered_mib = sum(sent) / MIB
        print(f"\nRSS baseline {baseline_kib / 1024:.1f} MiB, peak growth {growth_mib:.1f} MiB "
              f"while clients pushed {offered_mib:.1f} MiB of {count} stalled {DECLARED_BYTES // MIB} MiB requests")
        # Clients got well over the pool into the kernel's buffers and the broker's.
        assert offered_mib > POOL_BYTES / MIB + 8, sent
        # The bound: the pool, plus one request (the oldest always proceeds, as with
        # Kafka's pool), plus slack for read-ahead and the interpreter.
        assert growth_mib < (POOL_BYTES + DECLARED_BYTES) / MIB + 12, growth_mib
        assert lines(broker, seen, "queued.max.request.bytes"), "the pool never filled"
    finally:
        for sock in socks:
            sock.close()
    # Given back when the connections go: a normal client is served again.
    produce_and_fetch(broker.port, "after-pool", b"served-again")
    assert broker.process.poll() is None


def test_a_declared_but_unsent_request_holds_no_memory(pooled_broker):
    """Many connections that declare a large request and send only its first bytes
    do not stop others: memory is taken as bytes arrive, not as they are promised."""
    broker = pooled_broker
    socks = [connect(broker.port) for _ in range(8)]
    try:
        for sock in socks:
            sock.sendall(struct.pack(">i", DECLARED_BYTES) + b"\x00" * 100)
        time.sleep(0.3)
        with connect(broker.port) as healthy:
            assert answered(healthy, timeout_s=3)
        produce_and_fetch(broker.port, "unsent", b"not-blocked")
    finally:
        for sock in socks:
            sock.close()


# ------------------------------------------------------------------ max.connections


def test_max_connections_stops_accepting_until_a_connection_closes(tmp_path):
    with Broker(overrides={"max.connections": "2"}) as broker:
        seen = len(broker.output)
        first, second = connect(broker.port), connect(broker.port)
        try:
            assert answered(first) and answered(second)
            third = connect(broker.port)     # the kernel completes it; the broker does not take it
            try:
                with pytest.raises(socket.timeout):
                    answered(third, timeout_s=1.0)
                wait_until(lambda: lines(broker, seen, "max.connections (2) reached"), 5, "the blocked log line")
                first.close()
                # Its request was waiting in the socket: answered once a slot frees.
                third.settimeout(10)
                header = _recv_exactly(third, 8)
                assert header is not None and struct.unpack(">ii", header)[1] == 7
            finally:
                third.close()
        finally:
            first.close()
            second.close()


# --------------------------------------------------------- file descriptors


def test_the_open_file_limit_is_raised_to_the_hard_limit_at_start():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(1024, hard)
    if low == hard:
        pytest.skip("the hard limit is too low to show a raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))   # inherited by the broker
    try:
        broker = Broker().start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert resource.prlimit(broker.process.pid, resource.RLIMIT_NOFILE)[0] == hard
        assert lines(broker, 0, f"raised the open file limit (RLIMIT_NOFILE) from {low} to {hard}")
    finally:
        broker.close()


def test_out_of_file_descriptors_the_broker_waits_and_then_accepts_again():
    """EMFILE on accept(): the broker neither crashes nor drops the waiting
    connections; it pauses accepting, logs once, and serves them when descriptors
    free up. A connection opened before keeps working throughout."""
    overrides = {"replica.high.watermark.checkpoint.interval.ms": "600000"}   # no file writes meanwhile
    with Broker(overrides=overrides) as broker:
        pid = broker.process.pid
        seen = len(broker.output)
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)

        async def exhausted():
            healthy = await KafkaConnection.connect("127.0.0.1", broker.port)
            await healthy.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": "fds", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 5000, "validate_only": False})
            # Once before: the broker imports a request's schema on first use, and an
            # import needs a descriptor too.
            await _produce(healthy, "fds", b"before")
            spare = 3
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")) + spare, hard))
            socks = []
            try:
                for _ in range(spare + 5):
                    socks.append(await asyncio.to_thread(connect, broker.port))
                served = [await asyncio.to_thread(_answered_or_waiting, sock) for sock in socks]
                # The first few are served; then accept() fails and the rest wait:
                # not reset, not closed (uvloop's own accept would reset them).
                assert served[0] == "answered" and served[-1] == "waiting" and "closed" not in served, served
                assert await _produce(healthy, "fds", b"while-out-of-fds") == ErrorCode.NONE
                # Descriptors free up: every waiting connection is taken and answered.
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
                for sock in (s for s, outcome in zip(socks, served) if outcome == "waiting"):
                    sock.settimeout(10)
                    header = await asyncio.to_thread(_recv_exactly, sock, 8)
                    assert header is not None
                    await asyncio.to_thread(_recv_exactly, sock, struct.unpack(">i", header[:4])[0] - 4)
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
                for sock in socks:
                    sock.close()
                healthy.close()
        try:
            asyncio.run(asyncio.wait_for(exhausted(), 60))
        except BaseException:
            print("\n".join(broker.output[seen:]))
            raise
        assert broker.process.poll() is None
        wait_until(lambda: lines(broker, seen, "accepts connections again"), 5, "the recovery log line")
        assert len(lines(broker, seen, "cannot accept connections")) == 1, broker.output[seen:]
        assert not lines(broker, seen, "Traceback")
        produce_and_fetch(broker.port, "fds-after", b"after")


async def _produce(connection: KafkaConnection, topic: str, value: bytes) -> ErrorCode:
    response = await connection.request(ApiKey.PRODUCE, {
        "acks": 1, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": build_batch([value])}]}]}, version=9)
    return ErrorCode(response.responses[0].partition_responses[0].error_code.value)


def _answered_or_waiting(sock: socket.socket) -> str:
    try:
        return "answered" if answered(sock, timeout_s=0.5) else "closed"
    except socket.timeout:
        return "waiting"
