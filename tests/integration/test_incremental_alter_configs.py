"""IncrementalAlterConfigs APPEND and SUBTRACT on list-valued configs, with confluent-kafka's
AdminClient against a real broker, answered as Kafka's controller answers them: applied to
the resource's own value or, without one, Kafka's default; a SUBTRACT of an absent item
changes nothing; an APPEND or SUBTRACT to a key that is not a list (or not a config at all)
is INVALID_CONFIG and changes nothing of the resource."""

import asyncio

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigResource, ConfigSource, NewTopic

from tests.admin_calls import incremental_alter
from tidelog.testing import Broker


TOPIC = "lists"
APPEND, SUBTRACT, SET = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT, AlterConfigOpType.SET


@pytest.fixture(scope="module")
def broker():
    with Broker() as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(broker):
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("defaults", 1, 1)])[TOPIC].result(30)
    return client


def alter(admin, *changes, resource_type="topic", name=TOPIC):
    """Apply ``(op, key, value)`` changes to one resource; the error code, or None."""
    return incremental_alter(admin, resource_type, name, changes)


def described(admin, key, resource_type="topic", name=TOPIC):
    resource = ConfigResource(resource_type, name)
    entry = admin.describe_configs([resource])[resource].result(30)[key]
    return entry.value, entry.source


def test_append_and_subtract_change_cleanup_policy_item_by_item(admin):
    assert described(admin, "cleanup.policy")[0] == "delete"                 # Kafka's default
    assert alter(admin, (APPEND, "cleanup.policy", "compact")) is None       # onto the default
    assert described(admin, "cleanup.policy") == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert alter(admin, (APPEND, "cleanup.policy", "compact")) is None       # present already: no change
    assert described(admin, "cleanup.policy")[0] == "delete,compact"
    assert alter(admin, (SUBTRACT, "cleanup.policy", "delete")) is None
    assert described(admin, "cleanup.policy")[0] == "compact"
    assert alter(admin, (SUBTRACT, "cleanup.policy", "delete")) is None      # absent: a no-op, as Kafka
    assert described(admin, "cleanup.policy")[0] == "compact"
    assert alter(admin, (APPEND, "cleanup.policy", "delete"), (SET, "retention.ms", "3600000")) is None
    assert described(admin, "cleanup.policy")[0] == "compact,delete"
    assert described(admin, "retention.ms")[0] == "3600000"


def test_append_and_subtract_on_the_replication_throttle_lists(admin):
    assert described(admin, "leader.replication.throttled.replicas")[0] == ""
    assert alter(admin, (APPEND, "leader.replication.throttled.replicas", "0:1,1:1"),
                 (APPEND, "follower.replication.throttled.replicas", "*")) is None
    assert described(admin, "leader.replication.throttled.replicas")[0] == "0:1,1:1"
    assert described(admin, "follower.replication.throttled.replicas")[0] == "*"
    assert alter(admin, (SUBTRACT, "leader.replication.throttled.replicas", "0:1,5:5")) is None
    assert described(admin, "leader.replication.throttled.replicas")[0] == "1:1"
    code, message = alter(admin, (APPEND, "leader.replication.throttled.replicas", "one:two"))
    assert code == KafkaError.INVALID_CONFIG and "must be the literal '*' or a list of replicas" in message
    assert described(admin, "leader.replication.throttled.replicas")[0] == "1:1"


def _raw_alter(broker, resource_type: int, name: str, configs: list[dict]) -> tuple[int, str | None]:
    """One IncrementalAlterConfigs request as sent on the wire (neither confluent-kafka nor
    kafka-python names the cluster-wide broker resource "", or sends a key twice)."""
    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection

    async def send():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            response = await connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                "validate_only": False, "resources": [
                    {"resource_type": resource_type, "resource_name": name, "configs": configs}]})
        finally:
            connection.close()
        answer = response.responses[0]
        return int(answer.error_code.value), answer.error_message
    return asyncio.run(send())


def test_the_cluster_wide_default_takes_append_too(admin, broker):
    def op(operation, value, key="log.cleanup.policy"):
        return {"name": key, "config_operation": operation, "value": value}
    assert _raw_alter(broker, 4, "", [op(APPEND.value, "compact")]) == (0, None)
    assert described(admin, "log.cleanup.policy", resource_type="broker", name="1")[0] == "delete,compact"
    assert described(admin, "cleanup.policy", name="defaults")[0] == "delete,compact"
    assert _raw_alter(broker, 4, "", [op(SUBTRACT.value, "compact")]) == (0, None)
    assert described(admin, "log.cleanup.policy", resource_type="broker", name="1")[0] == "delete"
    assert _raw_alter(broker, 4, "", [op(APPEND.value, "5", key="log.retention.ms")]) == (
        KafkaError.INVALID_CONFIG, "Config value append is not allowed for config key: log.retention.ms")
    # A key twice in one resource, or a null value but for DELETE: Kafka's INVALID_REQUEST.
    assert _raw_alter(broker, 2, TOPIC, [op(APPEND.value, "compact", "cleanup.policy"),
                                         op(SUBTRACT.value, "delete", "cleanup.policy")]) == (
        KafkaError.INVALID_REQUEST, "Error due to duplicate config keys")
    assert _raw_alter(broker, 2, TOPIC, [op(APPEND.value, None, "cleanup.policy"), op(SET.value, None, "retention.ms"),
                                         op(AlterConfigOpType.DELETE.value, None, "segment.ms")]) == (
        KafkaError.INVALID_REQUEST, "Null value not supported for : cleanup.policy, retention.ms")


def test_bad_appends_are_kafkas_errors_and_change_nothing(admin):
    before = {key: described(admin, key)[0] for key in ("cleanup.policy", "retention.ms", "segment.ms")}
    refusals = [
        ((APPEND, "retention.ms", "5"),
         "Can't APPEND to key retention.ms because its type is not LIST."),
        ((SUBTRACT, "segment.ms", "5"),
         "Can't SUBTRACT to key segment.ms because its type is not LIST."),
        ((APPEND, "no.such.config", "x"),
         "Can't APPEND to key no.such.config because its type is not LIST."),
        ((SET, "no.such.config", "x"), "Unknown topic config name: no.such.config"),
        ((APPEND, "cleanup.policy", "zip"), "cleanup.policy"),
    ]
    for change, message in refusals:
        # With a valid change beside it: a resource is changed all or nothing.
        code, text = alter(admin, (SET, "segment.ms", "1000"), change) if change[1] != "segment.ms" else \
            alter(admin, (SET, "retention.ms", "1000"), change)
        assert code == KafkaError.INVALID_CONFIG, (change, code, text)
        assert message in text, (change, text)
        assert {key: described(admin, key)[0] for key in before} == before, change
