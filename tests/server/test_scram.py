"""SCRAM (RFC 5802/7677): the controller's credential rules and the server exchange,
driven by a client written from the RFC."""

import base64
import hashlib
import hmac

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.controller.scram_control import ScramControlManager, ScramUpsertion, keys, salted_password
from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    decode,
    encode,
)
from tidelog.server.sasl import AUTHENTICATED, FAILED, SaslAuthenticator

SHA512 = 2


def credential(name="bob", password="bob-secret", iterations=4096, mechanism=SHA512):
    salt = b"0123456789abcdef"
    stored, server = keys(mechanism, salted_password(mechanism, password, salt, iterations))
    return UserScramCredentialRecord(name, mechanism, salt, stored, server, iterations)


def test_records_round_trip_and_keep_keys_out_of_repr():
    record = credential()
    assert decode(encode(record)) == record
    assert "stored_key" not in repr(record) and decode(encode(RemoveUserScramCredentialRecord("bob", 2))).name == "bob"


def test_the_controller_checks_each_alteration_like_kafka():
    manager = ScramControlManager()
    salt, salted = b"s" * 16, b"p" * 64
    result = manager.alter([], [ScramUpsertion("bob", SHA512, 4096, salt, salted),
                                ScramUpsertion("eve", SHA512, 100, salt, salted),
                                ScramUpsertion("", SHA512, 4096, salt, salted),
                                ScramUpsertion("max", 9, 4096, salt, salted)])
    assert [r.error_code for r in result.response] == [ErrorCode.NONE, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                                       ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                                       ErrorCode.UNSUPPORTED_SASL_MECHANISM]
    assert len(result.records) == 1 and result.records[0].stored_key == keys(SHA512, salted)[0]
    for record in result.records:
        manager.replay(record)
    again = manager.alter([("bob", SHA512), ("nobody", SHA512)], [ScramUpsertion("bob", SHA512, 4096, salt, salted)])
    assert [r.error_code for r in again.response] == [ErrorCode.DUPLICATE_RESOURCE, ErrorCode.RESOURCE_NOT_FOUND,
                                                      ErrorCode.DUPLICATE_RESOURCE]


def session(stored=None):
    stored = stored or {("bob", SHA512): credential()}
    authenticator = SaslAuthenticator.from_config(BrokerConfig({"sasl.enabled.mechanisms": "SCRAM-SHA-512"}),
                                                  "SASL_PLAINTEXT", lambda name, m: stored.get((name, m)))
    s = authenticator.session()
    assert s.handshake("SCRAM-SHA-512") == ErrorCode.NONE
    return s


def client_final(server_first: bytes, password: str, client_first_bare="n=bob,r=abc", nonce_suffix=""):
    fields = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salt, iterations, nonce = base64.b64decode(fields["s"]), int(fields["i"]), fields["r"] + nonce_suffix
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    expected = b"v=" + base64.b64encode(hmac.new(server_key, auth, "sha512").digest())
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), expected


def test_a_scram_exchange_authenticates_and_proves_the_server():
    s = session()
    error, _, server_first = s.authenticate(b"n,,n=bob,r=abc")
    assert error == ErrorCode.NONE and server_first.startswith(b"r=abc")
    final, expected = client_final(server_first, "bob-secret")
    error, _, server_final = s.authenticate(final)
    assert error == ErrorCode.NONE and server_final == expected
    assert s.state == AUTHENTICATED and s.principal == "User:bob"


@pytest.mark.parametrize("password, suffix", [("wrong", ""), ("bob-secret", "x")])
def test_a_bad_proof_or_nonce_fails(password, suffix):
    s = session()
    _, _, server_first = s.authenticate(b"n,,n=bob,r=abc")
    final, _ = client_final(server_first, password, nonce_suffix=suffix)
    assert s.authenticate(final)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED and s.state == FAILED


@pytest.mark.parametrize("first", [b"n,,n=nobody,r=abc", b"garbage", b"p=tls-unique,,n=bob,r=abc",
                                   b"n,,n=b=ob,r=abc", b"\xff\xfe"])
def test_an_unknown_user_or_a_malformed_first_message_fails(first):
    s = session()
    assert s.authenticate(first)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_the_client_side_exchange_matches_the_server_and_checks_its_signature():
    """protocol/sasl_client.py against server/sasl.py, and against a server that does
    not know the password (its signature is refused)."""
    from tidelog.protocol.sasl_client import SaslClientError, tokens
    s = session()
    exchange = tokens("SCRAM-SHA-512", "bob", "bob-secret")
    first = next(exchange)
    _, _, server_first = s.authenticate(first)
    final = exchange.send(server_first)
    error, _, server_final = s.authenticate(final)
    assert error == ErrorCode.NONE and s.state == AUTHENTICATED
    with pytest.raises(StopIteration):
        exchange.send(server_final)
    second = session()
    exchange = tokens("SCRAM-SHA-512", "bob", "bob-secret")
    _, _, server_first = second.authenticate(next(exchange))
    exchange.send(server_first)
    with pytest.raises(SaslClientError):                   # a server that cannot prove it knows the key
        exchange.send(b"v=" + base64.b64encode(b"x" * 64))


def test_old_librdkafkas_doubled_client_nonce_is_accepted_and_nothing_else():
    """librdkafka < 2.6.1 sends r=<client nonce><client nonce + server nonce> (Kafka 3.8.1-3.9
    accept it); a nonce without the whole server nonce still fails."""
    for doubled, ok in ((True, True), (False, False)):
        s = session()
        _, _, server_first = s.authenticate(b"n,,n=bob,r=abc")
        server_nonce = server_first.split(b",")[0][2:].decode()
        prefix = "abc" if doubled else ""
        fields = dict(p.split("=", 1) for p in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac("sha512", b"bob-secret", base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha512").digest()
        nonce = prefix + server_nonce if doubled else "abc"
        without_proof = f"c=biws,r={nonce}"
        auth = f"n=bob,r=abc,{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        error = s.authenticate(f"{without_proof},p={proof}".encode())[0]
        assert (error == ErrorCode.NONE) == ok
