"""AlterClientQuotas and DescribeClientQuotas, the same requests to the session's real Kafka
(tests/kafka_fixture.py) and to ``tidelog serve``: every refusal's code and message, what is
stored, and every describe filter's answer must be equal."""

import asyncio

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker

# Entities named "diff-…" only: the Kafka node is shared with the session's other tests.
ALTERATIONS = [
    [({"user": "diff-a"}, {"producer_byte_rate": -1})],
    [({"user": "diff-a"}, {"bogus_rate": 5})],
    [({"user": "diff-a"}, {"producer_byte_rate": 1.5})],
    [({"user": ""}, {"producer_byte_rate": 5})],
    [({"group": "diff-g"}, {"producer_byte_rate": 5})],
    [({}, {"producer_byte_rate": 5})],
    [({"user": "diff-a", "ip": "10.0.0.1"}, {"connection_creation_rate": 5})],
    [({"ip": "10.0.0.1"}, {"producer_byte_rate": 5})],
    [({"client-id": "diff-c"}, {"consumer_byte_rate": 2.0 ** 64})],
    [({"user": "diff-a"}, {"producer_byte_rate": 5}), ({"user": "diff-a"}, {"producer_byte_rate": 6})],
    [({"user": "diff-b"}, {"request_percentage": 5}), ({"user": "diff-b", "client-id": None}, {"producer_byte_rate": 7})],
]
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
FILTERS = [([("user", EXACT, None)], False), ([("user", DEFAULT, "x")], False), ([("user", SPECIFIED, "x")], False),
           ([("group", SPECIFIED, None)], False), ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], False),
           ([("user", SPECIFIED, None), ("user", SPECIFIED, None)], False), ([("user", 9, None)], False),
           ([("", SPECIFIED, None)], False), ([("user", EXACT, "diff-a")], False), ([("user", EXACT, "diff-b")], False),
           ([("user", EXACT, "diff-b")], True), ([("user", EXACT, "diff-b"), ("client-id", DEFAULT, None)], False)]


def _entity(parts):
    return tuple(sorted((p.entity_type, p.entity_name) for p in parts))


async def _answers(port: int) -> list:
    connection = await KafkaConnection.connect("127.0.0.1", port, client_id="quota-differential")
    out = []
    try:
        for entries in ALTERATIONS:
            answer = await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                "ops": [{"key": k, "value": float(v), "remove": False} for k, v in ops.items()]}
                for entity, ops in entries]}, version=1)
            out.append(sorted((_entity(e.entity), e.error_code.value, e.error_message) for e in answer.entries))
        for components, strict in FILTERS:
            answer = await connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"strict": strict, "components": [
                {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]}, version=1)
            out.append((answer.error_code.value, answer.error_message, sorted(
                (_entity(e.entity), sorted((v.key, v.value) for v in e.values)) for e in answer.entries or ())))
        # Leave the shared Kafka node as it was.
        for entity, key in (({"user": "diff-a"}, "producer_byte_rate"), ({"user": "diff-b"}, "request_percentage"),
                            ({"user": "diff-b", "client-id": None}, "producer_byte_rate")):
            await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": False, "entries": [{
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                "ops": [{"key": key, "value": 0.0, "remove": True}]}]}, version=1)
    finally:
        connection.close()
    return out


def test_client_quota_answers_equal_kafkas(kafka_node):
    kafka = asyncio.run(_answers(kafka_node.port))
    with Broker() as broker:
        tidelog = asyncio.run(_answers(broker.port))
    labels = [f"alter {a}" for a in ALTERATIONS] + [f"describe {f}" for f in FILTERS]
    assert [(label, t) for label, k, t in zip(labels, kafka, tidelog) if k != t] == [], \
        [(label, k) for label, k, t in zip(labels, kafka, tidelog) if k != t]
    assert len(kafka) == len(tidelog) == len(labels)
