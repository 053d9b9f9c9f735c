"""Issue 24 item 7: requests of unimplemented APIs (delegation tokens, keys 38-41),
unknown keys and unsupported versions, sent by anyone before any authentication,
cost the broker at most a rate-limited log line each and never a traceback: they
are answered UNSUPPORTED_VERSION in the API's own shape where that shape can be
written, else the connection is closed, and the broker goes on serving."""

import logging
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

from tidelog.protocol.codec import decode_response, is_flexible, kio_versions
from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
KEYS = (38, 39, 40, 41, 999)
VERSIONS = range(0, 8)
REQUESTS = 2000
UNSUPPORTED_VERSION = 35


def raw_request(api_key: int, version: int, correlation_id: int) -> bytes:
    """A request header and an empty body, flexible (tagged fields) where kio says so."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"probe"
    known = kio_versions(api_key)
    if known and known[0] <= version <= known[1] and is_flexible(api_key, version):
        header += b"\x00"
    frame = header + b"\x00"
    return struct.pack(">i", len(frame)) + frame


def exchange(port: int, api_key: int, version: int, correlation_id: int) -> bytes | None:
    """The response frame, or None when the broker closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw_request(api_key, version, correlation_id))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        return data[4:]


def flood(port: int) -> dict[tuple[int, int], object]:
    outcomes = {}
    for i in range(REQUESTS):
        api_key, version = KEYS[i % len(KEYS)], VERSIONS[(i // len(KEYS)) % len(VERSIONS)]
        reply = exchange(port, api_key, version, i)
        if reply is None:
            outcomes[(api_key, version)] = "closed"
        else:
            correlation_id, body = decode_response(api_key, version, reply)
            assert correlation_id == i
            outcomes[(api_key, version)] = int(body.error_code.value)
    return outcomes


def assert_quiet(broker: Broker, before: int) -> None:
    time.sleep(0.5)                                   # the last lines reach broker.output
    added = broker.output[before:]
    assert not any("Traceback" in line for line in added), "\n".join(added[:60])
    # 2,000 requests: a burst of 20 lines, then one per 10 s; not one (or 25) per request.
    assert len(added) <= 25, f"{len(added)} log lines:\n" + "\n".join(added[:60])


def test_unimplemented_and_unknown_apis_on_a_plaintext_listener():
    with Broker() as broker:
        before = len(broker.output)
        outcomes = flood(broker.port)
        assert_quiet(broker, before)
        # Answered in their own shape where kio can write that version (Kafka's error response)...
        for api_key in (38, 39, 40, 41):
            low, high = kio_versions(api_key)
            assert outcomes[(api_key, low)] == UNSUPPORTED_VERSION, outcomes
        # ... and closed where no shape exists.
        assert all(outcomes[(999, v)] == "closed" for v in VERSIONS)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("after-flood", b"x")
        assert producer.flush(15) == 0


def test_unimplemented_and_unknown_apis_before_sasl_authentication():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS}) as broker:
        before = len(broker.output)
        outcomes = flood(broker.port)
        assert_quiet(broker, before)
        # Before authentication nothing but the handshake's APIs is served (Kafka's SaslServerAuthenticator).
        assert set(outcomes.values()) == {"closed"}, outcomes
        producer = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
        producer.produce("after-flood", b"x")
        assert producer.flush(15) == 0


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_rate_limited_log_writes_a_burst_then_one_line_per_interval_and_counts_the_rest(caplog):
    from tidelog.server.network import RateLimitedLog
    clock = _Clock()
    limited = RateLimitedLog(logging.getLogger("test.rejected"), interval_s=10, burst=3, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.rejected"):
        assert [limited.log(logging.INFO, "bad request %d", i) for i in range(1000)] == [True] * 3 + [False] * 997
        clock.now += 5
        assert not limited.log(logging.INFO, "bad request %d", 1000)
        clock.now += 5
        assert limited.log(logging.INFO, "bad request %d", 1001)
        assert not limited.log(logging.INFO, "bad request %d", 1002)
        clock.now += 3600                              # quiet for an hour: a full burst again
        assert all(limited.log(logging.INFO, "bad request %d", 2000 + i) for i in range(3))
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:4] == ["bad request 0", "bad request 1", "bad request 2",
                            "bad request 1001 (998 more such not logged: at most one line per 10 s "
                            "after a burst of 3)"]
    assert messages[4:] == ["bad request 2000 (1 more such not logged: at most one line per 10 s after a "
                            "burst of 3)", "bad request 2001", "bad request 2002"]
    assert not any(r.exc_info for r in caplog.records)
    assert limited.total == 1006 and limited.suppressed == 0


@pytest.mark.parametrize("api_key", [38, 39, 40])
def test_every_encodable_version_of_a_delegation_token_api_is_answered_in_its_shape(api_key):
    from tidelog.protocol.codec import RequestHeader, encode_response
    from tidelog.server.dispatch import _unsupported_version_body
    low, high = kio_versions(api_key)
    for version in range(low, high + 1):
        frame = encode_response(RequestHeader(api_key, version, 7, "x"),
                                _unsupported_version_body(api_key, version))
        correlation_id, body = decode_response(api_key, version, frame[4:])
        assert correlation_id == 7 and int(body.error_code.value) == UNSUPPORTED_VERSION
