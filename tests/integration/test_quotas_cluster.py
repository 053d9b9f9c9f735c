"""Client quotas in a cluster whose controller is its own process: AlterClientQuotas is
forwarded by the broker that receives it, validate_only and refusals come back from the
controller unchanged, and every broker describes the same quotas. (The receiving broker
also waits until its own metadata has the change before it answers; on loopback the
change arrives too fast for this test to see that wait missing.)"""

import asyncio

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Cluster, wait_until


async def _call(port: int, api_key: int, body: dict):
    connection = await KafkaConnection.connect("127.0.0.1", port, client_id="quota-cluster")
    try:
        return await connection.request(api_key, body)
    finally:
        connection.close()


def _alter(port, entity: dict, ops: dict, validate_only=False):
    answer = asyncio.run(_call(port, ApiKey.ALTER_CLIENT_QUOTAS, {"validate_only": validate_only, "entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
        "ops": [{"key": k, "value": float(v), "remove": False} for k, v in ops.items()]}]}))
    (entry,) = answer.entries
    return ErrorCode(int(entry.error_code.value)), entry.error_message


def _describe(port):
    answer = asyncio.run(_call(port, ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False}))
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in answer.entries}


def test_quotas_are_forwarded_to_the_controller_and_seen_by_every_broker():
    with Cluster(brokers=2) as cluster:
        first, second = cluster.port(1), cluster.port(2)
        assert _alter(first, {"user": "carol"}, {"producer_byte_rate": 4096}, validate_only=True) == (
            ErrorCode.NONE, None)
        assert _alter(first, {"user": "carol"}, {"producer_byte_rate": -1}) == (
            ErrorCode.INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0")
        assert _describe(first) == {}
        assert _alter(first, {"user": "carol"}, {"producer_byte_rate": 4096}) == (ErrorCode.NONE, None)
        assert _describe(first) == {(("user", "carol"),): {"producer_byte_rate": 4096.0}}
        wait_until(lambda: _describe(second) == {(("user", "carol"),): {"producer_byte_rate": 4096.0}},
                   what="the other broker's image has the quota")
