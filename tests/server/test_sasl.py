"""server/sasl.py: JAAS settings as Kafka writes them, and the SASL/PLAIN session rules."""

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.sasl import (
    AUTHENTICATED,
    FAILED,
    SaslAuthenticator,
    listener_jaas,
    parse_jaas,
    plain_token,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="al\\"ice";')


def test_jaas_options_and_users_are_parsed():
    jaas = parse_jaas(JAAS)
    assert jaas.module.endswith("PlainLoginModule")
    assert jaas.options["username"] == "admin" and jaas.users == {"admin": "admin-secret", "alice": 'al"ice'}


@pytest.mark.parametrize("text", ["", "PlainLoginModule required user_a=\"x\"", "X maybe a=\"b\";"])
def test_a_malformed_jaas_setting_is_refused_without_echoing_it(text):
    with pytest.raises(InvalidConfigError) as error:
        parse_jaas(text)
    assert 'user_a="x"' not in str(error.value)


def test_the_listener_and_mechanism_prefixed_setting_wins():
    config = BrokerConfig({"sasl.jaas.config": JAAS,
                           "listener.name.external.plain.sasl.jaas.config":
                               'x.PlainLoginModule required user_bob="b";'})
    assert listener_jaas(config, "EXTERNAL", "PLAIN").users == {"bob": "b"}
    assert "alice" in listener_jaas(config, "INTERNAL", "PLAIN").users


def test_a_plain_listener_without_users_or_with_an_unknown_mechanism_is_refused():
    with pytest.raises(InvalidConfigError, match="no users"):
        SaslAuthenticator.from_config(BrokerConfig({}), "SASL_PLAINTEXT")
    with pytest.raises(InvalidConfigError, match="not supported"):
        SaslAuthenticator.from_config(BrokerConfig({"sasl.enabled.mechanisms": "GSSAPI", "sasl.jaas.config": JAAS}),
                                      "SASL_PLAINTEXT")


def session():
    return SaslAuthenticator.from_config(BrokerConfig({"sasl.jaas.config": JAAS}), "SASL_PLAINTEXT").session()


def test_only_the_handshake_apis_are_served_before_authentication():
    s = session()
    assert s.allows(ApiKey.API_VERSIONS) and s.allows(ApiKey.SASL_HANDSHAKE) and not s.allows(ApiKey.PRODUCE)
    assert s.handshake("PLAIN") == ErrorCode.NONE
    assert s.authenticate(plain_token("admin", "admin-secret"))[0] == ErrorCode.NONE
    assert s.state == AUTHENTICATED and s.principal == "User:admin"
    assert s.allows(ApiKey.PRODUCE) and not s.allows(ApiKey.SASL_HANDSHAKE)


def test_an_unknown_mechanism_and_an_early_authenticate_are_refused():
    s = session()
    assert s.authenticate(plain_token("admin", "admin-secret"))[0] == ErrorCode.ILLEGAL_SASL_STATE
    assert s.handshake("SCRAM-SHA-512") == ErrorCode.UNSUPPORTED_SASL_MECHANISM


@pytest.mark.parametrize("token", [plain_token("admin", "wrong"), plain_token("nobody", "admin-secret"),
                                   b"admin\x00admin-secret", b"other\x00admin\x00admin-secret",
                                   b"\x00admin\x00" + b"x" * 70_000])
def test_a_bad_plain_token_fails_for_good(token):
    s = session()
    s.handshake("PLAIN")
    error, message, _ = s.authenticate(token)
    assert error == ErrorCode.SASL_AUTHENTICATION_FAILED and s.state == FAILED
    assert "admin-secret" not in message
    assert s.authenticate(plain_token("admin", "admin-secret"))[0] == ErrorCode.ILLEGAL_SASL_STATE


def test_a_login_expires_and_is_renewed_with_the_same_principal_only():
    """KIP-368 (connections.max.reauth.ms): past its lifetime a login serves only its renewal;
    a renewal as another user fails."""
    authenticator = SaslAuthenticator.from_config(BrokerConfig({"sasl.jaas.config": JAAS}), "SASL_PLAINTEXT")
    authenticator.reauth_ms = 1000
    s = authenticator.session()
    s.handshake("PLAIN")
    assert s.authenticate(plain_token("admin", "admin-secret"), now_ms=0)[0] == ErrorCode.NONE
    assert s.allows(ApiKey.PRODUCE, now_ms=999) and not s.allows(ApiKey.PRODUCE, now_ms=1000)
    assert s.handshake("PLAIN") == ErrorCode.NONE
    assert s.authenticate(plain_token("admin", "admin-secret"), now_ms=1500)[0] == ErrorCode.NONE
    assert s.allows(ApiKey.PRODUCE, now_ms=2400)
    s.handshake("PLAIN")
    assert s.authenticate(plain_token("alice", 'al"ice'), now_ms=2600)[0] == ErrorCode.SASL_AUTHENTICATION_FAILED
