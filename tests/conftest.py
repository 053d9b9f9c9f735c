"""Fixtures shared by every test directory.

``kafka_node``: the real Apache Kafka (the release interop/kafka-server/pom.xml pins), one
combined KRaft node on free loopback ports, started once per test session the first time
a test asks for it (tests/kafka_fixture.py). Without java or mvn those tests skip.
"""

import pytest

from tests.kafka_fixture import KafkaCluster, missing_tools

# Beside the fixture's own (internal topics replicated once, no initial rebalance delay):
# small internal topics, so the first group or transaction does not wait for 50 partitions.
KAFKA_NODE_SETTINGS = {"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "5",
                       "share.coordinator.state.topic.num.partitions": "5"}


@pytest.fixture(scope="session")
def kafka_node():
    reason = missing_tools()
    if reason:
        pytest.skip(f"real Kafka unavailable: {reason}")
    with KafkaCluster(overrides=KAFKA_NODE_SETTINGS) as kafka:
        yield kafka
