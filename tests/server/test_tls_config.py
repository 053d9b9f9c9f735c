"""server/tls.py: Kafka's ssl.* settings into contexts, and certificate principals."""

import ssl

import pytest
import trustme

from tidelog.broker.config import BrokerConfig
from tidelog.core.errors import InvalidConfigError
from tidelog.server import tls


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pem")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return directory, server, ca


def config(**settings) -> BrokerConfig:
    return BrokerConfig({key.replace("_", "."): value for key, value in settings.items()})


def test_a_listener_context_from_a_pem_keystore_file(pem):
    directory, _, _ = pem
    context = tls.server_context(config(ssl_keystore_location=str(directory / "server.pem")), "SSL")
    assert context.verify_mode == ssl.CERT_NONE and context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_inline_pem_keystore_and_truststore_with_client_auth_required(pem):
    directory, server, ca = pem
    settings = BrokerConfig({"ssl.keystore.certificate.chain": server.cert_chain_pems[0].bytes().decode(),
                             "ssl.keystore.key": server.private_key_pem.bytes().decode(),
                             "ssl.truststore.certificates": ca.cert_pem.bytes().decode(),
                             "ssl.client.auth": "required"})
    assert tls.server_context(settings, "SSL").verify_mode == ssl.CERT_REQUIRED


def test_per_listener_settings_win_over_bare_ones(pem):
    directory, _, _ = pem
    settings = BrokerConfig({"ssl.keystore.location": "/nonexistent.pem",
                             "listener.name.internal.ssl.keystore.location": str(directory / "server.pem"),
                             "listener.name.internal.ssl.enabled.protocols": "TLSv1.3"})
    assert tls.server_context(settings, "INTERNAL").minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(InvalidConfigError, match="ssl.keystore.location"):
        tls.server_context(settings, "EXTERNAL")


@pytest.mark.parametrize("settings, message", [
    ({}, "no key and certificate"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x.jks"}, "PEM"),
    ({"ssl.keystore.certificate.chain": "x"}, "go together"),
    ({"ssl.enabled.protocols": "SSLv3"}, "ssl.enabled.protocols"),
])
def test_bad_settings_are_refused_naming_the_setting(settings, message):
    with pytest.raises(InvalidConfigError, match=message):
        tls.server_context(BrokerConfig(settings), "SSL")


def test_client_auth_without_trusted_certificates_is_refused(pem):
    directory, _, _ = pem
    with pytest.raises(InvalidConfigError, match="truststore"):
        tls.server_context(config(ssl_keystore_location=str(directory / "server.pem"),
                                  ssl_client_auth="required"), "SSL")


def test_a_key_password_is_never_in_an_error(pem, tmp_path):
    directory, server, _ = pem
    encrypted = tmp_path / "encrypted.pem"
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"right-secret"))
                          + server.cert_chain_pems[0].bytes())
    tls.server_context(BrokerConfig({"ssl.keystore.location": str(encrypted),
                                     "ssl.key.password": "right-secret"}), "SSL")
    with pytest.raises(InvalidConfigError) as error:
        tls.server_context(BrokerConfig({"ssl.keystore.location": str(encrypted),
                                         "ssl.key.password": "wrong-secret"}), "SSL")
    assert "secret" not in str(error.value)


def test_iana_cipher_suite_names_map_to_openssl_names():
    assert tls._openssl_cipher("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert tls._openssl_cipher("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384") == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert tls._openssl_cipher("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert tls._openssl_cipher("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"


def test_the_principal_is_the_distinguished_name_in_rfc2253_order(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("alice.example.com", common_name="alice", organization_name="Example",
                         organization_unit_name="eng")
    path = tmp_path / "alice.crt"
    cert.cert_chain_pems[0].write_to_path(str(path))
    decoded = ssl._ssl._test_decode_cert(str(path))
    dn = tls.distinguished_name(decoded)
    assert dn == "CN=alice,OU=eng,O=Example"
    assert tls.principal_for(dn, "DEFAULT") == "User:CN=alice,OU=eng,O=Example"
    assert tls.principal_for(dn, "RULE:^CN=(.*?),OU=eng.*$/$1/U,DEFAULT") == "User:ALICE"
    assert tls.principal_for("CN=bob,OU=ops", "RULE:^CN=(.*?),OU=eng.*$/$1/,DEFAULT") == "User:CN=bob,OU=ops"
    assert tls.principal_for(None, "DEFAULT") == "User:ANONYMOUS"


def test_a_bad_mapping_rule_is_refused():
    with pytest.raises(InvalidConfigError, match="mapping"):
        tls.parse_mapping_rules("RULE:^CN=((/x/")
