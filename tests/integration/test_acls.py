"""ACLs with real clients (StandardAuthorizer semantics): a principal without an ACL
gets the authorization error and with one succeeds; a prefixed ACL and a deny ACL
behave as Kafka's; unauthorized topics are not listed; super users may do anything;
ACLs are managed with `tidelog acls` (CreateAcls/DescribeAcls/DeleteAcls)."""

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
                           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users": "User:admin", "group.initial.rebalance.delay.ms": "0"}) as running:
        admin = AdminClient(user(running, "admin"))
        for name in ("orders", "orders-secret", "payments"):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        yield running


def user(broker, name):
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": name, "sasl.password": f"{name}-secret"}


def acls(broker, tmp_path, *args):
    properties = tmp_path / "admin.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          "sasl.username=admin\nsasl.password=admin-secret\n")
    done = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "acls", "-b", broker.bootstrap,
                           "--command-config", str(properties), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def produce(broker, name, topic):
    outcome = []
    producer = Producer({**user(broker, name), "message.timeout.ms": 5000})
    producer.produce(topic, b"x", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(15)
    return None if outcome[0] is None else outcome[0].name()


def test_a_principal_needs_an_acl_to_write_and_a_prefixed_acl_covers_a_prefix(broker, tmp_path):
    assert produce(broker, "alice", "orders") == "TOPIC_AUTHORIZATION_FAILED"
    acls(broker, tmp_path, "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders",
         "--resource-pattern-type", "prefixed")
    assert produce(broker, "alice", "orders") is None
    assert produce(broker, "alice", "orders-secret") is None
    assert produce(broker, "alice", "payments") == "TOPIC_AUTHORIZATION_FAILED"
    assert produce(broker, "admin", "payments") is None                              # a super user


def test_a_deny_acl_wins_over_an_allow(broker, tmp_path):
    acls(broker, tmp_path, "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders",
         "--resource-pattern-type", "prefixed")
    acls(broker, tmp_path, "add", "--deny-principal", "User:alice", "--operation", "Write",
         "--topic", "orders-secret")
    assert produce(broker, "alice", "orders-secret") == "TOPIC_AUTHORIZATION_FAILED"
    assert produce(broker, "alice", "orders") is None
    listed = acls(broker, tmp_path, "list", "--topic", "orders-secret")
    assert "User:alice from *: DENY WRITE" in listed


def test_reading_needs_read_on_the_topic_and_the_group_and_listing_hides_topics(broker, tmp_path):
    assert "orders" not in AdminClient(user(broker, "bob")).list_topics(timeout=10).topics
    acls(broker, tmp_path, "add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders")
    assert "orders" in AdminClient(user(broker, "bob")).list_topics(timeout=10).topics    # READ implies DESCRIBE
    assert "payments" not in AdminClient(user(broker, "bob")).list_topics(timeout=10).topics

    def consume(group):
        consumer = Consumer({**user(broker, "bob"), "group.id": group, "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 15
        try:
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is not None:
                    return message.error().name()
                return "read"
            return "nothing"
        finally:
            consumer.close()
    assert consume("bob-group") != "read"                                      # no READ on the group yet
    acls(broker, tmp_path, "add", "--allow-principal", "User:bob", "--operation", "Read", "--group", "bob-",
         "--resource-pattern-type", "prefixed")
    produce(broker, "admin", "orders")
    assert consume("bob-group") == "read"
    acls(broker, tmp_path, "remove", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders",
         "--resource-pattern-type", "literal")
    assert "orders" not in AdminClient(user(broker, "bob")).list_topics(timeout=10).topics
