"""Issue 24 item 3: password-type settings (Kafka's ConfigDef.Type.PASSWORD) are never
shown. DescribeConfigs, every version, with and without synonyms, answers them with a
null value and is_sensitive=true: sasl.jaas.config (every PLAIN password, the super
user's included), its listener and listener+mechanism forms, the TLS passwords and
inline keys, and a dynamic per-broker TLS password stored through
IncrementalAlterConfigs. The broker's log shows none of them."""

import asyncio

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tidelog.broker.config import HIDDEN, BrokerConfig, is_password, is_sensitive, parse_properties
from tidelog.core.errors import InvalidConfigError
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection
from tidelog.testing import Broker

SUPER_SECRET, ALICE_SECRET = "super-Secret-1", "alice-Secret-2"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="{SUPER_SECRET}" user_admin="{SUPER_SECRET}" user_alice="{ALICE_SECRET}";')
STATIC_SECRETS = {
    "sasl.jaas.config": JAAS,
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "ssl.key.password": "key-Secret-3",
    "ssl.keystore.password": "keystore-Secret-4",
    "ssl.truststore.password": "truststore-Secret-5",
    "listener.name.sasl_plaintext.ssl.key.password": "listener-key-Secret-6",
}
DYNAMIC_NAME, DYNAMIC_SECRET = "listener.name.ssl.ssl.key.password", "dynamic-Secret-7"
SECRETS = [SUPER_SECRET, ALICE_SECRET, DYNAMIC_SECRET] + [v for k, v in STATIC_SECRETS.items() if "jaas" not in k]


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0", **STATIC_SECRETS}) as running:
        yield running


def alice(broker):
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": ALICE_SECRET}


def describe_raw(broker, version: int, synonyms: bool):
    async def go():
        connection = await KafkaConnection.connect("127.0.0.1", broker.port, "sensitive-test", security=ClientSecurity(
            None, "PLAIN", "alice", ALICE_SECRET))
        try:
            return await connection.request(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                "include_synonyms": synonyms, "include_documentation": False}, version=version)
        finally:
            connection.close()
    return asyncio.run(go())


def test_password_configs_are_described_as_sensitive_with_a_null_value(broker):
    admin = AdminClient(alice(broker))
    alter = ConfigResource("BROKER", "1", incremental_configs=[ConfigEntry(
        DYNAMIC_NAME, DYNAMIC_SECRET, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter])[alter].result(15)

    resource = ConfigResource("BROKER", "1")
    entries = admin.describe_configs([resource])[resource].result(15)
    for name in [*STATIC_SECRETS, DYNAMIC_NAME]:
        assert name in entries, name
        assert entries[name].value is None and entries[name].is_sensitive, (name, entries[name].value)
    assert entries["ssl.keystore.key"].is_sensitive and entries["ssl.truststore.certificates"].is_sensitive
    assert entries["log.retention.hours"].value == "168" and not entries["log.retention.hours"].is_sensitive

    for version in (1, 2, 3, 4):
        for synonyms in (False, True):
            response = describe_raw(broker, version, synonyms)
            described = {c.name: c for c in response.results[0].configs}
            for name in [*STATIC_SECRETS, DYNAMIC_NAME]:
                assert described[name].value is None and described[name].is_sensitive, (version, name)
                assert all(s.value is None for s in getattr(described[name], "synonyms", ()))
            if version >= 3:
                assert described["sasl.jaas.config"].config_type == 9     # PASSWORD
            text = repr(response)
            assert not [s for s in SECRETS if s in text], (version, synonyms)


def test_the_log_never_shows_a_password(broker):
    test_password_configs_are_described_as_sensitive_with_a_null_value(broker)
    output = "\n".join(broker.output)
    assert not [s for s in SECRETS if s in output]


@pytest.mark.parametrize("name", [
    "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
    "listener.name.sasl_ssl.sasl.jaas.config", "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
    "listener.name.ssl.ssl.key.password", "listener.name.client.ssl.keystore.key",
])
def test_password_names_in_every_listener_form_are_passwords(name):
    assert is_password(name) and is_sensitive(name)


@pytest.mark.parametrize("name", ["log.retention.ms", "ssl.keystore.location", "listener.name.ssl.ssl.client.auth",
                                  "retention.ms", "log.preallocate", "sasl.enabled.mechanisms"])
def test_typed_settings_that_are_not_passwords_are_shown(name):
    assert not is_sensitive(name)


def test_a_name_of_unknown_type_is_sensitive_as_kafka_treats_it():
    assert is_sensitive("listener.name.ssl.some.future.secret") and is_sensitive("delegation.token.secret.key")


def test_config_errors_do_not_echo_a_secret():
    with pytest.raises(InvalidConfigError) as error:
        parse_properties(f'sasl.jaas.config=x required \\\n  user_admin="{SUPER_SECRET}"\nuser_alice {ALICE_SECRET}\n')
    assert SUPER_SECRET not in str(error.value) and ALICE_SECRET not in str(error.value)
    config = BrokerConfig({"sasl.jaas.config": JAAS})
    assert config["sasl.jaas.config"] == JAAS                  # still a plain string to the code that reads it
    assert HIDDEN == "[hidden]"
