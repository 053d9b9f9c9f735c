"""GROUP config resources (KIP-848): a consumer group's own session timeout and heartbeat
interval, set with confluent-kafka's AdminClient (IncrementalAlterConfigs on resource type
32), kept in the metadata log, described with their source and synonyms, refused outside
the broker's group.consumer.{min,max}.* bounds with Kafka 4.4's messages, and honoured by
the KIP-848 coordinator for that group only."""

import asyncio
import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigResource, ConfigSource

from tests.admin_calls import incremental_alter
from tidelog.core.errors import ErrorCode
from tidelog.group.shard import ConsumerHeartbeat, GroupConfig, GroupShard
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
GROUP_CONFIG, DEFAULT = ConfigSource.GROUP_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"group.initial.rebalance.delay.ms": "0"}) as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def alter(admin, group, *changes):
    return incremental_alter(admin, "group", group, changes)


def described(admin, group):
    resource = ConfigResource("group", group)
    return {k: (e.value, e.source) for k, e in admin.describe_configs([resource])[resource].result(30).items()}


def join(broker, group: str) -> dict:
    """A KIP-848 member's first heartbeat, as a consumer sends it; the coordinator's answer."""
    async def send():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            found = await connection.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group]},
                                             version=4)
            assert int(found.coordinators[0].error_code.value) == 0, found
            response = await connection.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                "group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0, "instance_id": None,
                "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["none-yet"],
                "server_assignor": None, "topic_partitions": []}, version=0)
        finally:
            connection.close()
        return {"error_code": int(response.error_code.value), "heartbeat_interval": int(
            response.heartbeat_interval.total_seconds() * 1000)}
    for _ in range(50):                         # the offsets topic is created on first use
        try:
            return asyncio.run(send())
        except AssertionError:
            asyncio.run(asyncio.sleep(0.2))
    return asyncio.run(send())


def test_a_groups_own_settings_are_described_and_the_coordinator_uses_them(broker, admin):
    assert described(admin, "payments")["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT)
    assert alter(admin, "payments", (SET, "consumer.heartbeat.interval.ms", "6000"),
                 (SET, "consumer.session.timeout.ms", "50000")) is None
    configs = described(admin, "payments")
    assert configs["consumer.heartbeat.interval.ms"] == ("6000", GROUP_CONFIG)
    assert configs["consumer.session.timeout.ms"] == ("50000", GROUP_CONFIG)
    assert described(admin, "orders")["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT)
    # The coordinator gives this group's members its own interval; another group keeps the broker's.
    assert join(broker, "payments") == {"error_code": 0, "heartbeat_interval": 6000}
    assert join(broker, "orders") == {"error_code": 0, "heartbeat_interval": 5000}
    assert alter(admin, "payments", (DELETE, "consumer.heartbeat.interval.ms", None)) is None
    assert described(admin, "payments")["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT)
    assert join(broker, "payments") == {"error_code": 0, "heartbeat_interval": 5000}


@pytest.mark.parametrize("changes, expected", [
    ([(SET, "consumer.session.timeout.ms", "1000")],
     "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."),
    ([(SET, "consumer.heartbeat.interval.ms", "20000")],
     "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."),
    ([(SET, "consumer.heartbeat.interval.ms", "soon")],
     "Invalid value soon for configuration consumer.heartbeat.interval.ms: Not a number of type INT"),
    ([(SET, "no.such.setting", "1")], "Unknown group config name: no.such.setting"),
    ([(APPEND, "consumer.session.timeout.ms", "50000")],
     "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
])
def test_refusals_are_kafkas_and_change_nothing(admin, changes, expected):
    before = described(admin, "refused")
    valid = ((SET, "consumer.session.timeout.ms", "50000") if changes[0][1] == "consumer.heartbeat.interval.ms"
             else (SET, "consumer.heartbeat.interval.ms", "7000"))       # refused with the bad one
    assert alter(admin, "refused", valid, *changes) == (
        KafkaError.INVALID_CONFIG, expected)
    assert described(admin, "refused") == before


def test_the_session_timeout_of_the_group_decides_when_a_silent_member_is_removed():
    now = [1_000]
    shard = GroupShard(0, GroupConfig(consumer_session_timeout_ms=45_000), lambda records, done: done(ErrorCode.NONE),
                       lambda prefix: f"{prefix}-id", lambda: now[0])
    shard.loaded(now[0])
    topic_id = uuid.UUID(int=7)

    def beat(group, member, own):
        request = ConsumerHeartbeat(group, member, 0, None, None, 30_000, ("t",), None, None, frozenset(),
                                    member, "/h")
        answers = []
        shard.consumer_group_heartbeat(request, lambda name: (topic_id, 2), ["t"], now[0], answers.append,
                                       group_configs=own)
        return answers[0]

    assert beat("long", "a", {"consumer.session.timeout.ms": "60000"})["heartbeat_interval"] == 5_000
    assert beat("short", "b", {})["error_code"] == 0
    now[0] += 50_000                       # past the broker's 45 s, within the group's 60 s
    shard.on_tick(now[0])
    assert "a" in shard.consumer_groups["long"].members
    # b is gone, and with it the group (empty, no offsets: deleted as Kafka's cleanup does)
    assert "b" not in getattr(shard.consumer_groups.get("short"), "members", {})
    now[0] += 11_000
    shard.on_tick(now[0])
    assert "a" not in shard.consumer_groups["long"].members
