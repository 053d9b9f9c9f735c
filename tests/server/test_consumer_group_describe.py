"""ConsumerGroupDescribe (KIP-848) answers a group it cannot describe as Kafka's
GroupMetadataManager does: GROUP_ID_NOT_FOUND with "Group <id> not found." for a group that
does not exist and "Group <id> is not a consumer group." for a classic one; a consumer
group is described."""

import asyncio

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.test_group_configs import join
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker


def describe(broker, *groups: str) -> dict:
    async def send():
        connection = await KafkaConnection.connect(broker.host, broker.port)
        try:
            for group in groups:    # each group's coordinator is this one broker
                found = await connection.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group]},
                                                 version=4)
                assert int(found.coordinators[0].error_code.value) == 0, found
            response = await connection.request(ApiKey.CONSUMER_GROUP_DESCRIBE, {
                "group_ids": list(groups), "include_authorized_operations": False}, version=0)
        finally:
            connection.close()
        return {g.group_id: (int(g.error_code.value), g.error_message) for g in response.groups}
    return asyncio.run(send())


def test_unknown_classic_and_consumer_groups():
    with Broker(overrides={"group.initial.rebalance.delay.ms": "0"}) as broker:
        assert join(broker, "modern")["error_code"] == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("classic-input", 1)])["classic-input"].result(30)
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "old-style",
                            "session.timeout.ms": 6000})
        try:
            classic.subscribe(["classic-input"])
            for _ in range(300):            # until the classic group has assigned the partition
                classic.poll(0.1)
                if classic.assignment():
                    break
            assert classic.assignment(), "the classic group never formed"
            answers = describe(broker, "absent", "old-style", "modern")
        finally:
            classic.close()
    assert answers["absent"] == (69, "Group absent not found.")
    assert answers["old-style"] == (69, "Group old-style is not a consumer group.")
    assert answers["modern"] == (0, None)
