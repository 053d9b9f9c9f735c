"""Topic creation/deletion/growth rules, replica placement, and configuration control."""

import random
from collections import Counter

import pytest

from tidelog.controller import AlterConfigsResource, CreatableTopic, CreatePartitionsTopic
from tidelog.controller.config_defs import TOPIC_CONFIGS
from tidelog.controller.placement import place_replicas, rack_alternated
from tidelog.testing.controller import ControllerTestEnv
from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import ConfigRecord, ConfigResourceType, RemoveTopicRecord

TOPIC, BROKER = ConfigResourceType.TOPIC, ConfigResourceType.BROKER


def three_brokers(seed: int = 0) -> ControllerTestEnv:
    env = ControllerTestEnv(seed=seed)
    env.register_and_unfence(0, 1, 2)
    return env


# ---------------------------------------------------------------- names and counts

@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "ü", "x" * 250])
def test_topic_name_rules_refuse_illegal_names(name):
    result = three_brokers().create_topic(name, 1, 1)
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, result


@pytest.mark.parametrize("name", ["a", "A-z_0.9", "x" * 249, "...a"])
def test_topic_name_rules_accept_legal_names(name):
    assert three_brokers().create_topic(name, 1, 1).error_code == ErrorCode.NONE


def test_a_topic_name_colliding_after_dot_to_underscore_is_refused():
    env = three_brokers()
    env.create_topic("a.b", 1, 1)
    result = env.create_topic("a_b", 1, 1)
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in result.error_message


def test_an_existing_topic_is_refused_and_duplicates_in_one_request_are_invalid():
    env = three_brokers()
    assert env.create_topic("t", 1, 1).error_code == ErrorCode.NONE
    assert env.create_topic("t", 1, 1).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    results = env.controller.create_topics([CreatableTopic("u", 1, 1), CreatableTopic("u", 1, 1),
                                            CreatableTopic("v", 1, 1)])
    assert [r.error_code for r in results] == [
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, ErrorCode.NONE]


@pytest.mark.parametrize("partitions, rf, code", [
    (0, 1, ErrorCode.INVALID_PARTITIONS),
    (-5, 1, ErrorCode.INVALID_PARTITIONS),
    (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
    (1, -3, ErrorCode.INVALID_REPLICATION_FACTOR),
    (1, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
])
def test_partition_count_and_replication_factor_rules(partitions, rf, code):
    assert three_brokers().create_topic("t", partitions, rf).error_code == code


def test_placement_uses_fenced_brokers_when_it_must():
    """Kafka's StripedReplicaPlacer: unfenced brokers first and as leaders, fenced ones
    only to reach the replication factor; the ISR holds the unfenced replicas."""
    env = three_brokers()
    env.fence(1)
    env.fence(2)
    result = env.create_topic("t", 2, 3)
    assert result.error_code == ErrorCode.NONE
    for p in range(2):
        partition = env.partition("t", p)
        assert sorted(partition.replicas) == [0, 1, 2]
        assert (partition.replicas[0], partition.leader, partition.isr) == (0, 0, (0,))
    assert env.create_topic("u", 1, 4).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    env.fence(0)
    refused = env.create_topic("v", 1, 1)
    assert refused.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "all brokers are currently fenced" in refused.error_message


def test_minus_one_takes_the_cluster_defaults():
    env = ControllerTestEnv(default_num_partitions=3, default_replication_factor=2)
    env.register_and_unfence(0, 1, 2)
    result = env.create_topic("t")
    assert (result.num_partitions, result.replication_factor) == (3, 2)


@pytest.mark.parametrize("assignments", [[[0, 0]], [[0, 9]], [[0, 1], [2]], [[]], []])
def test_manual_assignments_are_validated(assignments):
    result = three_brokers().create_topic("t", assignments=assignments)
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, result


def test_a_manual_assignment_puts_only_active_replicas_in_the_isr():
    env = three_brokers()
    env.fence(1)
    env.create_topic("t", assignments=[[1, 2, 0]])
    partition = env.partition("t", 0)
    assert (partition.leader, partition.isr) == (2, (2, 0))


def test_a_manual_assignment_cannot_come_with_counts():
    result = three_brokers().controller.create_topics(
        [CreatableTopic("t", 1, -1, assignments=((0,),))])[0]
    assert result.error_code == ErrorCode.INVALID_REQUEST


def test_topic_configs_are_validated_and_written_with_the_topic():
    env = three_brokers()
    bad = env.create_topic("t", 1, 1, configs={"retention.ms": "soon"})
    assert bad.error_code == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in bad.error_message
    end = env.log.end_offset
    env.create_topic("t", 1, 1, configs={"segment.bytes": "1048576", "retention.ms": "10"})
    assert env.records_from(end)[1:3] == [ConfigRecord(TOPIC, "t", "retention.ms", "10"),
                                          ConfigRecord(TOPIC, "t", "segment.bytes", "1048576")]
    assert env.controller.image.topic_config("t") == {"retention.ms": "10",
                                                      "segment.bytes": "1048576"}


# ---------------------------------------------------------------- delete and grow

def test_deleting_topics_by_name_and_id():
    env = three_brokers()
    env.create_topic("a", 1, 1)
    env.create_topic("b", 1, 1)
    b = env.topic_id("b")
    end = env.log.end_offset
    results = env.controller.delete_topics(["a", "nope"], [b, b])
    assert [r.error_code for r in results] == [
        ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE, ErrorCode.NONE]
    assert len(env.records_from(end)) == 2
    assert isinstance(env.records_from(end)[1], RemoveTopicRecord)
    assert env.controller.image.topic_names() == []
    unknown = env.controller.delete_topics([], [b])
    assert unknown[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_creating_partitions_adds_partitions_with_the_topics_replication_factor():
    env = three_brokers()
    env.create_topic("t", 2, 2)
    results = env.controller.create_partitions([CreatePartitionsTopic("t", 5)])
    assert results[0].error_code == ErrorCode.NONE
    partitions = env.controller.image.topic("t").partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 for p in partitions.values())


@pytest.mark.parametrize("count, assignments, code", [
    (2, None, ErrorCode.INVALID_PARTITIONS),
    (1, None, ErrorCode.INVALID_PARTITIONS),
    (4, ((0, 1),), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (3, ((0, 7),), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
])
def test_creating_partitions_is_validated(count, assignments, code):
    env = three_brokers()
    env.create_topic("t", 2, 2)
    result = env.controller.create_partitions([CreatePartitionsTopic("t", count, assignments)])
    assert result[0].error_code == code


# ---------------------------------------------------------------- placement

def test_placement_spreads_preferred_leaders_round_robin():
    replicas = place_replicas([(b, None) for b in range(5)], 10, 3, random.Random(4))
    assert Counter(r[0] for r in replicas) == {b: 2 for b in range(5)}
    assert all(len(set(r)) == 3 for r in replicas)


def test_placement_puts_replicas_of_a_partition_in_different_racks():
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    racks = dict(brokers)
    for seed in range(20):
        for replicas in place_replicas(brokers, 12, 3, random.Random(seed)):
            assert len({racks[b] for b in replicas}) == 3, replicas
    assert rack_alternated(brokers) == [0, 2, 4, 1, 3, 5]


def test_placement_starts_at_a_random_broker_and_is_deterministic_per_seed():
    brokers = [(b, None) for b in range(6)]
    first_leaders = {place_replicas(brokers, 1, 1, random.Random(s))[0][0] for s in range(40)}
    assert len(first_leaders) > 3
    assert place_replicas(brokers, 4, 2, random.Random(7)) == \
        place_replicas(brokers, 4, 2, random.Random(7))


# ---------------------------------------------------------------- configuration control

def test_effective_topic_config_is_topic_then_cluster_then_default():
    env = three_brokers()
    env.create_topic("t", 1, 1)
    configs = env.controller.configs
    assert configs.min_insync_replicas("t") == 1
    assert configs.unclean_leader_election_enabled("t") is False
    assert configs.topic_value("t", "retention.ms") == 604_800_000
    env.controller.incremental_alter_configs([AlterConfigsResource(
        BROKER, "", {"min.insync.replicas": "2", "log.retention.ms": "1000"})])
    assert configs.min_insync_replicas("t") == 2
    assert configs.topic_value("t", "retention.ms") == 1000
    env.controller.incremental_alter_configs([AlterConfigsResource(
        TOPIC, "t", {"min.insync.replicas": "3"})])
    assert configs.min_insync_replicas("t") == 3
    env.controller.incremental_alter_configs([AlterConfigsResource(
        TOPIC, "t", {"min.insync.replicas": None})])
    assert configs.min_insync_replicas("t") == 2


def test_every_topic_config_default_is_valid():
    for definition in TOPIC_CONFIGS.values():
        definition.parse(definition.default)


@pytest.mark.parametrize("key, value, message", [
    ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number"),
    ("min.insync.replicas", "0", "min.insync.replicas: Value must be at least 1"),
    ("unclean.leader.election.enable", "yes", "unclean.leader.election.enable"),
    ("cleanup.policy", "compact,zip", "cleanup.policy"),
    ("message.timestamp.type", "Now", "message.timestamp.type"),
    ("segment.bytes", "99999999999", "segment.bytes"),
    ("max.message.bytes", "-1", "max.message.bytes"),
    ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio"),
    ("bogus", "1", "Unknown topic config name: bogus"),
])
def test_invalid_topic_configs_are_refused_with_a_message_naming_the_key(key, value, message):
    env = three_brokers()
    env.create_topic("t", 1, 1)
    result = env.controller.incremental_alter_configs([AlterConfigsResource(TOPIC, "t",
                                                                            {key: value})])[0]
    assert result.error_code == ErrorCode.INVALID_CONFIG
    assert message in result.error_message


def test_config_changes_are_all_or_nothing_per_resource():
    env = three_brokers()
    env.create_topic("t", 1, 1)
    end = env.log.end_offset
    results = env.controller.incremental_alter_configs([
        AlterConfigsResource(TOPIC, "t", {"retention.ms": "5", "segment.ms": "0"}),
        AlterConfigsResource(TOPIC, "nope", {"retention.ms": "5"}),
        AlterConfigsResource(BROKER, "3", {"log.retention.ms": "5", "log.dirs": "/elsewhere"}),
        AlterConfigsResource(BROKER, "", {"log.retention.ms": "5", "message.max.bytes": "many"}),
    ])
    assert [r.error_code for r in results] == [
        ErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert [r.error_message for r in results[2:]] == [   # Kafka 4.4's messages (KIP-226)
        "Cannot update these configs dynamically: [log.dirs]",
        "Invalid value many for configuration message.max.bytes: Not a number of type INT"]
    assert env.log.end_offset == end


def test_append_and_subtract_work_item_by_item_on_list_values_only():
    """Kafka's controller: on the resource's own value or else the key's default; an item
    already there (APPEND) or absent (SUBTRACT) changes nothing and writes nothing."""
    env = three_brokers()
    env.create_topic("t", 1, 1)
    configs = env.controller.configs

    def alter(resource_type, name, list_changes, changes=None):
        return env.controller.incremental_alter_configs([AlterConfigsResource(
            resource_type, name, changes or {}, list_changes)])[0]
    assert alter(TOPIC, "t", {"cleanup.policy": ("APPEND", "compact")}).error_code == ErrorCode.NONE
    assert configs.topic_value("t", "cleanup.policy") == ["delete", "compact"]
    end = env.log.end_offset
    assert alter(TOPIC, "t", {"cleanup.policy": ("APPEND", "delete,compact")}).error_code == ErrorCode.NONE
    assert alter(TOPIC, "t", {"cleanup.policy": ("SUBTRACT", "zip")}).error_code == ErrorCode.NONE
    assert env.log.end_offset == end                                    # nothing changed, nothing written
    # Without an own value, the default's items are the topic's from now on (as Kafka writes them).
    assert alter(TOPIC, "t", {"leader.replication.throttled.replicas": ("SUBTRACT", "0:1")}).error_code == 0
    assert configs.configs[configs_resource(TOPIC, "t")]["leader.replication.throttled.replicas"] == ""
    assert alter(TOPIC, "t", {"cleanup.policy": ("SUBTRACT", "delete,zip")}).error_code == ErrorCode.NONE
    assert configs.topic_value("t", "cleanup.policy") == ["compact"]
    assert alter(BROKER, "", {"log.cleanup.policy": ("APPEND", "compact")}).error_code == ErrorCode.NONE
    assert configs.configs[configs_resource(BROKER, "")] == {"log.cleanup.policy": "delete,compact"}
    end = env.log.end_offset
    for resource_type, name, key in ((TOPIC, "t", "retention.ms"), (TOPIC, "t", "bogus")):
        result = alter(resource_type, name, {key: ("APPEND", "5")}, {"segment.ms": "1000"} if name == "t" else None)
        assert (result.error_code, result.error_message) == (
            ErrorCode.INVALID_CONFIG, f"Can't APPEND to key {key} because its type is not LIST."), key
    # A broker resource answers in the words of Kafka's broker-side check (Kafka 4.4).
    for name, key, operation, message in (
            ("", "log.retention.ms", "APPEND", "Config value append is not allowed for config key: log.retention.ms"),
            ("1", "ssl.keystore.location", "SUBTRACT",
             "Config value subtract is not allowed for config key: ssl.keystore.location"),
            ("1", "no.such.config", "APPEND", "Unknown config name: no.such.config")):
        result = alter(BROKER, name, {key: (operation, "5")})
        assert (result.error_code, result.error_message) == (ErrorCode.INVALID_CONFIG, message), key
    result = alter(TOPIC, "t", {"leader.replication.throttled.replicas": ("APPEND", "0:1,x")})
    assert result.error_code == ErrorCode.INVALID_CONFIG and "must be the literal '*'" in result.error_message
    assert env.log.end_offset == end


def configs_resource(resource_type, name):
    from tidelog.metadata.image import ConfigResource
    return ConfigResource(resource_type, name)


def test_deleting_a_topic_deletes_its_configs_in_the_controller_and_the_image():
    env = three_brokers()
    env.create_topic("t", 1, 1, configs={"retention.ms": "5"})
    env.controller.delete_topics(["t"])
    env.create_topic("t", 1, 1)
    assert env.controller.configs.topic_value("t", "retention.ms") == 604_800_000
    assert env.controller.image.topic_config("t") == {}
    env.check_consistent()
