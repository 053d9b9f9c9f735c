"""Dynamic broker configs (KIP-226) with confluent-kafka's AdminClient against a real broker.

BROKER "<id>" and BROKER "" (the cluster-wide default) take the settings Kafka changes at
run time; they are ConfigRecords in the metadata log (so a restart keeps them), the
broker-level names of topic settings apply at once (a smaller message.max.bytes refuses
a producer's record), and DescribeConfigs reports DYNAMIC_BROKER_CONFIG /
DYNAMIC_DEFAULT_BROKER_CONFIG with synonyms in Kafka's order. Refusals carry Kafka 4.4's
error codes and messages (each checked against a running Kafka 4.4.0) and change nothing.
"""

import asyncio

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigResource, ConfigSource, NewTopic

from tests.admin_calls import incremental_alter
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker, wait_until


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT
DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value


@pytest.fixture(scope="module")
def broker():
    with Broker() as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(admin, *changes, name="1"):
    """``(op, key, value)`` changes to one broker resource; None, or (error code, message)."""
    return incremental_alter(admin, "broker", name, changes)


def described(admin, resource_type="broker", name="1"):
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(30)




def raw_alter(broker, name: str, configs: list[dict]) -> tuple[int, str | None]:
    """On the wire: no client library names the cluster-wide resource ""."""
    async def send():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            response = await connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                "validate_only": False, "resources": [{"resource_type": 4, "resource_name": name, "configs": configs}]})
        finally:
            connection.close()
        answer = response.responses[0]
        return int(answer.error_code.value), answer.error_message
    return asyncio.run(send())


def raw_describe(broker, name: str = "1", resource_type: int = 4) -> dict:
    """``{key: (value, source, synonyms)}`` on the wire (confluent-kafka keys synonyms by
    name, so a chain naming one setting twice shows one of them)."""
    async def send():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            response = await connection.request(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": False}, version=4)
        finally:
            connection.close()
        return {c.name: (c.value, int(c.config_source), [(s.name, s.value, int(s.source)) for s in c.synonyms])
                for c in response.results[0].configs}
    return asyncio.run(send())


def topic_value(admin, topic, key):
    entry = described(admin, "topic", topic)[key]
    return entry.value, entry.source


def produce(broker, topic, size):
    outcome = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000,
                         "message.max.bytes": 10_000_000})
    producer.produce(topic, b"x" * size, on_delivery=lambda error, message: outcome.append(error))
    producer.flush(30)
    return None if outcome[0] is None else outcome[0].code()


def test_one_brokers_setting_is_stored_described_and_applied_at_once(broker, admin):
    admin.create_topics([NewTopic("sized", 1, 1)])["sized"].result(30)
    assert produce(broker, "sized", 5000) is None
    assert alter(admin, (SET, "message.max.bytes", "2000")) is None
    entry = described(admin)["message.max.bytes"]
    assert (entry.value, entry.source, entry.is_read_only) == ("2000", DYNAMIC_BROKER, False)
    assert raw_describe(broker)["message.max.bytes"][2] == [("message.max.bytes", "2000", DYNAMIC_BROKER),
                                                            ("message.max.bytes", "1048588", DEFAULT)]
    # The topic without its own max.message.bytes takes this broker's, without a restart.
    assert topic_value(admin, "sized", "max.message.bytes") == ("2000", DYNAMIC_BROKER)
    assert produce(broker, "sized", 5000) == KafkaError.MSG_SIZE_TOO_LARGE
    assert alter(admin, (DELETE, "message.max.bytes", None)) is None
    assert topic_value(admin, "sized", "max.message.bytes") == ("1048588", DEFAULT)
    assert produce(broker, "sized", 5000) is None


def test_the_cluster_default_is_below_the_brokers_own_and_listed_alone(broker, admin):
    admin.create_topics([NewTopic("retained", 1, 1)])["retained"].result(30)
    assert raw_alter(broker, "", [{"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]) == (0, None)
    entry = described(admin)["log.retention.ms"]
    assert (entry.value, entry.source) == ("3600000", DYNAMIC_DEFAULT)
    assert raw_describe(broker)["log.retention.ms"][2] == [                 # Kafka's order and synonyms
        ("log.retention.ms", "3600000", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)]
    assert topic_value(admin, "retained", "retention.ms") == ("3600000", DYNAMIC_DEFAULT)
    assert raw_describe(broker, "") == {"log.retention.ms": ("3600000", DYNAMIC_DEFAULT, [
        ("log.retention.ms", "3600000", DYNAMIC_DEFAULT)])}                  # only what is set, as Kafka
    # This broker's own value wins over the cluster-wide default.
    assert alter(admin, (SET, "log.retention.ms", "7200000")) is None
    assert raw_describe(broker)["log.retention.ms"][2] == [
        ("log.retention.ms", "7200000", DYNAMIC_BROKER), ("log.retention.ms", "3600000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "168", DEFAULT)]
    assert topic_value(admin, "retained", "retention.ms") == ("7200000", DYNAMIC_BROKER)
    assert alter(admin, (DELETE, "log.retention.ms", None)) is None
    assert raw_alter(broker, "", [{"name": "log.retention.ms", "config_operation": 1, "value": None}]) == (0, None)
    assert topic_value(admin, "retained", "retention.ms") == ("604800000", DEFAULT)


def test_settings_without_a_live_effect_and_unknown_names_are_stored_as_kafka_stores_them(broker, admin):
    assert alter(admin, (SET, "num.replica.fetchers", "3"),
                 (SET, "listener.name.plaintext.sasl.kerberos.service.name", "kafka"),
                 (SET, "listener.name.plaintext.ssl.key.password", "s3cret"),
                 (SET, "no.such.setting", "1")) is None
    configs = described(admin)
    assert (configs["num.replica.fetchers"].value, configs["num.replica.fetchers"].source) == ("3", DYNAMIC_BROKER)
    kerberos = configs["listener.name.plaintext.sasl.kerberos.service.name"]
    assert (kerberos.value, kerberos.is_sensitive, kerberos.is_read_only) == ("kafka", False, True)
    for secret in ("listener.name.plaintext.ssl.key.password", "no.such.setting"):   # never shown
        assert (configs[secret].value, configs[secret].is_sensitive) == (None, True), secret
        assert all(s.value is None for s in configs[secret].synonyms.values())
    assert alter(admin, *((DELETE, k, None) for k in ("num.replica.fetchers", "no.such.setting",
                                                      "listener.name.plaintext.sasl.kerberos.service.name",
                                                      "listener.name.plaintext.ssl.key.password"))) is None


def test_the_changes_are_in_the_metadata_log_and_survive_a_restart(broker, admin):
    assert alter(admin, (SET, "log.cleaner.backoff.ms", "20000")) is None
    broker.restart(clean=True)
    again = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = described(again)["log.cleaner.backoff.ms"]
    assert (entry.value, entry.source) == ("20000", DYNAMIC_BROKER)
    assert alter(again, (DELETE, "log.cleaner.backoff.ms", None)) is None


@pytest.mark.parametrize("name, changes, expected", [
    ("1", [(SET, "log.dirs", "/elsewhere")],
     (KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: [log.dirs]")),
    ("1", [(SET, "log.retention.hours", "1")],
     (KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: [log.retention.hours]")),
    ("1", [(SET, "ssl.keystore.password", "x")],
     (KafkaError.INVALID_REQUEST, "These security configs can be dynamically updated only per-listener using "
                                  "the listener prefix: [ssl.keystore.password]")),
    ("1", [(SET, "message.max.bytes", "abc")],
     (KafkaError.INVALID_REQUEST, "Invalid value abc for configuration message.max.bytes: Not a number of type INT")),
    ("1", [(SET, "max.connections", "-1")],
     (KafkaError.INVALID_REQUEST, "Invalid value -1 for configuration max.connections: Value must be at least 0")),
    # Kafka's parser bounds each integer type (Integer/Long.parseX): one past it is no number.
    ("1", [(SET, "message.max.bytes", "2147483648")],
     (KafkaError.INVALID_REQUEST, "Invalid value 2147483648 for configuration message.max.bytes: Not a number of "
                                  "type INT")),
    ("1", [(SET, "leader.replication.throttled.rate", "9223372036854775808")],
     (KafkaError.INVALID_REQUEST, "Invalid value 9223372036854775808 for configuration "
                                  "leader.replication.throttled.rate: Not a number of type LONG")),
    ("1", [(SET, "log.cleaner.max.compaction.lag.ms", "soon")],
     (KafkaError.INVALID_REQUEST, "Invalid value soon for configuration log.cleaner.max.compaction.lag.ms: Not a number of "
                                  "type LONG")),
    ("1", [(SET, "sasl.kerberos.service.name", "kafka")],
     (KafkaError.INVALID_REQUEST, "Invalid value org.apache.kafka.common.config.ConfigException: Configs cannot "
                                  "be updated dynamically for existing listener ListenerName(PLAINTEXT), restart "
                                  "broker or create a new listener for update for configuration Invalid dynamic "
                                  "configuration")),
    ("1", [(SET, "log.roll.ms", "-3")],
     (KafkaError.INVALID_REQUEST, "requirement failed: log.roll.ms must be greater than or equal to 1")),
    ("1", [(SET, "log.cleaner.min.cleanable.ratio", "2")],
     (KafkaError.INVALID_REQUEST, "Invalid value 2.0 for configuration log.cleaner.min.cleanable.ratio: Value must "
                                  "be no more than 1")),
    ("1", [(APPEND, "message.max.bytes", "5")],
     (KafkaError.INVALID_CONFIG, "Config value append is not allowed for config key: message.max.bytes")),
    ("1", [(APPEND, "no.such.setting", "5")], (KafkaError.INVALID_CONFIG, "Unknown config name: no.such.setting")),
    ("1", [(APPEND, "log.cleanup.policy", "archive")],
     (KafkaError.INVALID_REQUEST, "Invalid value archive for configuration log.cleanup.policy: String must be one "
                                  "of: compact, delete")),
])
def test_refusals_are_kafkas_and_change_nothing(admin, name, changes, expected):
    before = {k: (e.value, e.source) for k, e in described(admin).items()}
    assert alter(admin, (SET, "log.cleaner.backoff.ms", "16000"), *changes, name=name) == expected
    assert {k: (e.value, e.source) for k, e in described(admin).items()} == before


def test_the_cluster_default_refuses_per_broker_settings_and_a_broker_another_brokers(broker, admin):
    # (An admin client sends broker 2's settings to broker 2; this one is not broker 2.)
    assert raw_alter(broker, "2", [{"name": "message.max.bytes", "config_operation": 0, "value": "2000"}]) == (
        KafkaError.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")
    for key, message in (("listener.name.plaintext.ssl.keystore.location",
                          "Cannot update these configs at default cluster level, broker id must be specified: "
                          "[listener.name.plaintext.ssl.keystore.location]"),
                         ("sasl.kerberos.service.name",
                          "Cannot update these configs at default cluster level, broker id must be specified: "
                          "[sasl.kerberos.service.name]"),
                         ("log.dirs", "Cannot update these configs dynamically: [log.dirs]")):
        assert raw_alter(broker, "", [{"name": key, "config_operation": 0, "value": "x"}]) == (
            KafkaError.INVALID_REQUEST, message)
    assert raw_alter(broker, "", [{"name": "message.max.bytes", "config_operation": 3, "value": "5"}]) == (
        KafkaError.INVALID_CONFIG, "Config value subtract is not allowed for config key: message.max.bytes")
    # SUBTRACT of an item the list does not have: a no-op, as Kafka.
    assert raw_alter(broker, "", [{"name": "log.cleanup.policy", "config_operation": 3, "value": "compact"}]) == (
        0, None)
    assert raw_describe(broker, "").get("log.cleanup.policy", ("delete",))[0] == "delete"


def test_in_a_cluster_each_broker_takes_its_own_through_the_controller():
    """Brokers forward to the controller (server/admin.py ForwardingAdminApis): the admin
    client sends broker 2's settings to broker 2, which checks the id itself; the cluster
    default reaches every broker."""
    from tidelog.testing import Cluster
    with Cluster(brokers=2) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        assert alter(admin, (SET, "message.max.bytes", "3000"), name="2") is None
        # The controller answers once the change is committed; each broker describes it
        # once its own metadata has it (Kafka's brokers alike): a moment later.
        wait_until(lambda: described(admin, name="2")["message.max.bytes"].value == "3000", 15,
                   "broker 2 describing its own setting")
        assert described(admin, name="1")["message.max.bytes"].value == "1048588"

        class One:                                 # broker 1's client listener, on the wire
            host, port = "127.0.0.1", cluster.port(1)
        assert raw_alter(One, "2", [{"name": "message.max.bytes", "config_operation": 0, "value": "4000"}]) == (
            KafkaError.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")
        assert raw_alter(One, "", [{"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]) == (
            0, None)
        for broker_id in ("1", "2"):
            wait_until(lambda: (lambda e: (e.value, e.source))(described(admin, name=broker_id)["log.retention.ms"])
                       == ("3600000", DYNAMIC_DEFAULT), 15, f"broker {broker_id} describing the cluster default")
        assert described(admin, name="2")["message.max.bytes"].value == "3000"
