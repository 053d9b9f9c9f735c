"""Fuzzing the secured listener (TLS + SASL) of a real broker, Hypothesis with a fixed seed.

(a) random bytes where the TLS handshake should be; (b) over TLS, SaslHandshake
with random mechanism names; (c) SaslAuthenticate with random tokens — random
bytes, SCRAM client-first messages with random user names and nonces, and
client-final messages with random nonces and proofs, up to 100 KB. After each
example the broker process is alive and the connection was answered or closed
within the timeout; afterwards a real client logs in with SCRAM and produces."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
TIMEOUT_S = 5.0
EXAMPLES = 150


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fuzz-tls")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    with Broker(overrides={"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(directory / "server.pem"),
                           "sasl.jaas.config": JAAS, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                           "connection.failed.authentication.delay.ms": "0"}) as broker:
        context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
        yield broker, context, directory


def tls(broker, context) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def exchange(sock, api_key: int, version: int, body: dict, correlation: int = 1):
    """Send one request; the decoded answer, or None if the broker closed the connection."""
    sock.sendall(encode_request(api_key, version, correlation, "fuzz", body))
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    frame = b""
    while len(frame) < size:
        chunk = sock.recv(size - len(frame))
        if not chunk:
            return None
        frame += chunk
    return decode_response(api_key, version, frame)[1]


def alive(broker):
    assert broker.process.poll() is None, "the broker died"


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(data=st.binary(min_size=1, max_size=600))
def test_random_bytes_instead_of_a_tls_handshake(secured, data):
    broker, _, _ = secured
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass                             # a TLS alert at most, then the close
        except (ConnectionResetError, BrokenPipeError):
            pass
    alive(broker)


@FUZZ
@given(mechanism=st.text(max_size=200))
def test_random_mechanism_names(secured, mechanism):
    broker, context, _ = secured
    with tls(broker, context) as sock:
        answer = exchange(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        assert answer is not None
        assert (int(answer.error_code.value) == 0) == (mechanism.upper() in ("PLAIN", "SCRAM-SHA-512"))
    alive(broker)


scram_first = st.builds(lambda user, nonce: f"n,,n={user},r={nonce}".encode(), st.text(max_size=40),
                        st.text(max_size=80))
plain = st.builds(lambda user, password: b"\x00" + user.encode() + b"\x00" + password.encode(),
                  st.sampled_from(["admin", "nobody", ""]) | st.text(max_size=20), st.text(max_size=40))
scram_final = st.builds(lambda nonce, proof: f"c=biws,r={nonce},p={proof}".encode(), st.text(max_size=80),
                        st.text(max_size=120))


@FUZZ
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-512"]),
       tokens=st.lists(st.one_of(st.binary(max_size=300), plain, scram_first, scram_final,
                                 st.just(b"x" * 100_000)), min_size=1, max_size=3))
def test_random_authentication_tokens_never_authenticate(secured, mechanism, tokens):
    broker, context, _ = secured
    with tls(broker, context) as sock:
        assert int(exchange(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code.value) == 0
        for i, token in enumerate(tokens):
            try:
                answer = exchange(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, correlation=2 + i)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                answer = None
            if answer is None:
                break                           # closed after a refusal: right
            # A random SCRAM client-first for an unknown user is refused; nothing ever logs in.
            code = int(answer.error_code.value)
            assert code in (0, 58, 34), code     # NONE (a SCRAM step), SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE
            if code == 0:
                assert mechanism == "SCRAM-SHA-512" and i == 0 and token.startswith(b"n,,")
    alive(broker)


def test_a_real_client_still_logs_in_after_the_fuzzing(secured):
    from confluent_kafka import Producer
    broker, _, directory = secured
    producer = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(directory / "ca.pem"), "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-secret"})
    producer.produce("after-fuzz", b"x")
    assert producer.flush(30) == 0
