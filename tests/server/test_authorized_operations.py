"""Authorized operations (KIP-430) as confluent-kafka's AdminClient reads them: describe_topics
(Metadata include_topic_authorized_operations), describe_cluster (DescribeCluster) and
describe_consumer_groups (DescribeGroups include_authorized_operations).

Without an authorizer every operation Kafka supports for the resource type is reported (Kafka
4.4 answers topic 3576, group 3400, cluster 8096); with ACLs, what the caller's ACLs allow,
implied operations included."""

import time

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tidelog.testing import Broker

Op = AclOperation
TOPIC_OPERATIONS = {Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                    Op.ALTER_CONFIGS}
GROUP_OPERATIONS = {Op.READ, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
CLUSTER_OPERATIONS = {Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                      Op.IDEMPOTENT_WRITE}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def described(admin: AdminClient, topic: str, group: str) -> tuple[set, set, set]:
    """(topic, group, cluster) authorized operations as the client reports them."""
    topic_ops = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    group_ops = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    return (set(topic_ops.authorized_operations), set(group_ops.authorized_operations),
            set(cluster.authorized_operations))


def test_without_an_authorizer_every_supported_operation_is_reported():
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("open", 1, 1)])["open"].result(30)
        assert described(admin, "open", "anyone") == (TOPIC_OPERATIONS, GROUP_OPERATIONS, CLUSTER_OPERATIONS)
        # A client that does not ask is told nothing (None: "not provided").
        plain = admin.describe_cluster().result(30)
        assert plain.authorized_operations is None


@pytest.fixture(scope="module")
def secured():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
                           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users": "User:admin"}) as broker:
        yield broker


def user(broker, name):
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": name, "sasl.password": f"{name}-secret"}


def test_with_acls_the_callers_own_operations_are_reported(secured):
    admin = AdminClient(user(secured, "admin"))
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
    assert described(admin, "orders", "billing") == (TOPIC_OPERATIONS, GROUP_OPERATIONS, CLUSTER_OPERATIONS)

    def allow(resource_type, name, operation):
        return AclBinding(resource_type, name, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                          AclPermissionType.ALLOW)
    bindings = [allow(ResourceType.TOPIC, "orders", Op.WRITE), allow(ResourceType.TOPIC, "orders", Op.ALTER_CONFIGS),
                allow(ResourceType.GROUP, "billing", Op.READ), allow(ResourceType.BROKER, "kafka-cluster", Op.DESCRIBE)]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    alice = AdminClient(user(secured, "alice"))
    deadline = time.monotonic() + 30              # the ACLs reach the broker's metadata image
    while True:
        try:
            reported = described(alice, "orders", "billing")
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    # WRITE implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; READ on a group implies DESCRIBE.
    assert reported == ({Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS},
                        {Op.READ, Op.DESCRIBE}, {Op.DESCRIBE})
