"""Topic DescribeConfigs lists every topic config Kafka 4.4 lists (issue 32 item 7): seen by
confluent-kafka's AdminClient, and on the wire at v4 with each entry's type and
documentation. The names are those a Kafka 4.4.0 node answers for a new topic; the ones
tidelog stores without acting on say so in their documentation; what tidelog cannot do
(tiered storage) is refused as a Kafka broker without it refuses it."""

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker

# What Kafka 4.4.0 lists for a topic (DescribeConfigs v4, measured), with its config_type numbers.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": 7, "compression.gzip.level": 3, "compression.lz4.level": 3, "compression.type": 2,
    "compression.zstd.level": 3, "delete.retention.ms": 5, "errors.deadletterqueue.group.enable": 1,
    "file.delete.delay.ms": 5, "flush.messages": 5, "flush.ms": 5, "follower.replication.throttled.replicas": 7,
    "index.interval.bytes": 3, "leader.replication.throttled.replicas": 7, "local.retention.bytes": 5,
    "local.retention.ms": 5, "max.compaction.lag.ms": 5, "max.decompressed.message.bytes": 3,
    "max.message.bytes": 3, "message.timestamp.after.max.ms": 5, "message.timestamp.before.max.ms": 5,
    "message.timestamp.type": 2, "min.cleanable.dirty.ratio": 6, "min.compaction.lag.ms": 5,
    "min.insync.replicas": 3, "preallocate": 1, "remote.copy.lag.bytes": 5, "remote.copy.lag.ms": 5,
    "remote.log.copy.disable": 1, "remote.log.delete.on.disable": 1, "remote.storage.enable": 1,
    "retention.bytes": 5, "retention.ms": 5, "segment.bytes": 3, "segment.index.bytes": 3, "segment.jitter.ms": 5,
    "segment.ms": 5, "unclean.leader.election.enable": 1,
}


@pytest.fixture(scope="module")
def broker():
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("listed", 1, 1)])["listed"].result(30)
        yield broker


def test_the_client_sees_every_topic_config_kafka_lists(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", "listed")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert set(configs) == set(KAFKA_TOPIC_CONFIGS)
    assert configs["compression.zstd.level"].value == "3" and configs["remote.storage.enable"].value == "false"


def test_each_entry_has_kafkas_type_and_a_documentation(broker):
    async def describe():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            return await connection.request(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": 2, "resource_name": "listed", "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": True}, version=4)
        finally:
            connection.close()
    entries = asyncio.run(describe()).results[0].configs
    assert {e.name: int(e.config_type) for e in entries} == KAFKA_TOPIC_CONFIGS
    documentation = {e.name: e.documentation for e in entries}
    assert all(documentation.values()), [n for n, d in documentation.items() if not d]
    for stored_only in ("remote.copy.lag.ms", "compression.gzip.level", "preallocate", "segment.jitter.ms"):
        assert "does not act on it" in documentation[stored_only], stored_only


def test_tiered_storage_is_refused_and_stored_only_keys_are_kept(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(key, value):
        resource = ConfigResource("topic", "listed", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        try:
            admin.incremental_alter_configs([resource])[resource].result(30)
        except KafkaException as e:
            return e.args[0].code(), e.args[0].str()
        return None
    assert alter("remote.storage.enable", "true") == (
        KafkaError.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                                   "configured with remote log storage.")
    assert alter("compression.zstd.level", "23") == (
        KafkaError.INVALID_CONFIG, "Invalid value 23 for configuration compression.zstd.level: Value must be no "
                                   "more than 22")
    assert alter("min.cleanable.dirty.ratio", "2") == (     # Kafka shows the parsed double
        KafkaError.INVALID_CONFIG, "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no "
                                   "more than 1")
    assert alter("leader.replication.throttled.replicas", "bogus")[1].startswith(  # and a list as [a, b]
        "Invalid value [bogus] for configuration leader.replication.throttled.replicas: ")
    assert alter("compression.zstd.level", "9") is None
    resource = ConfigResource("topic", "listed")
    assert admin.describe_configs([resource])[resource].result(30)["compression.zstd.level"].value == "9"
