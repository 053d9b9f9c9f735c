"""A user quota on a SASL listener: the quota names the authenticated principal's user
(``User:alice`` → ``alice``), and it is shared by all of that user's client ids, while
another user is not held back."""

import asyncio

import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection
from tidelog.protocol.codec import millis
from tidelog.records.batch import build_batch
from tidelog.testing import Broker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                           "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}) as running:
        yield running


async def _connect(broker, user: str, client_id: str) -> KafkaConnection:
    security = ClientSecurity(sasl_mechanism="PLAIN", username=user, password=f"{user}-secret")
    return await KafkaConnection.connect("127.0.0.1", broker.port, client_id=client_id, security=security)


async def _produce(broker, user: str, client_id: str, size: int) -> int:
    connection = await _connect(broker, user, client_id)
    try:
        response = await connection.request(ApiKey.PRODUCE, {
            "acks": 1, "timeout": 5000, "topic_data": [{"name": "sasl-quota", "partition_data": [
                {"index": 0, "records": build_batch([b"q" * size])}]}]}, version=9)
        assert response.responses[0].partition_responses[0].error_code.value == 0
        return millis(response.throttle_time)
    finally:
        connection.close()


def test_a_user_quota_follows_the_sasl_principal_across_its_client_ids(broker):
    async def go():
        admin = await _connect(broker, "admin", "admin")
        try:
            created = await admin.request(ApiKey.CREATE_TOPICS, {"topics": [{
                "name": "sasl-quota", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": 10_000, "validate_only": False})
            assert created.topics[0].error_code.value == 0
            altered = await admin.request(ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "ops": [{"key": "producer_byte_rate", "value": 50_000.0, "remove": False}]}]})
            assert altered.entries[0].error_code.value == 0
        finally:
            admin.close()
        # 300 kB is 30 kB/s over the 10 s window: under alice's 50 kB/s; the next 300 kB from
        # another of her client ids makes 60 kB/s for alice: throttled. bob has no quota.
        assert await _produce(broker, "alice", "alice-one", 300_000) == 0
        assert await _produce(broker, "bob", "bob-one", 600_000) == 0
        assert await _produce(broker, "alice", "alice-two", 300_000) > 0
        assert await _produce(broker, "bob", "bob-two", 600_000) == 0
    asyncio.run(go())
