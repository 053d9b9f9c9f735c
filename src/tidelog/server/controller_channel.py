"""How a broker reaches the controller: in-process (combined mode) or over the wire.

Both channels offer the same async operations, so the broker's lifecycle,
metadata-following and ISR-change code is one mechanism whatever the roles:

* ``register`` / ``heartbeat`` / ``alter_partition`` — SPEC §8.2–8.3;
* ``fetch_metadata(offset, max_wait_ms)`` — committed ``__cluster_metadata`` batches;
* ``forward(api_key, version, request)`` — client admin requests (CreateTopics…).
"""

from __future__ import annotations

import asyncio
import logging

from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.client import KafkaConnection

log = logging.getLogger("tidelog.controller_channel")

FETCH, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT, ALLOCATE_PRODUCER_IDS = 1, 56, 62, 63, 67


def parse_quorum_voters(voters: list[str]) -> list[tuple[int, str, int]]:
    """Kafka's ``controller.quorum.voters``: ``id@host:port,...``."""
    out = []
    for voter in voters:
        node, _, address = voter.partition("@")
        host, _, port = address.rpartition(":")
        if not node.isdigit() or not port.isdigit() or not host:
            raise ValueError(f"controller.quorum.voters entry {voter!r} is not id@host:port")
        out.append((int(node), host.strip("[]"), int(port)))
    return out


class RemoteController:
    """The controller behind ``controller.quorum.voters`` (one voter for now)."""

    def __init__(self, host: str, port: int, client_id: str):
        self.host, self.port, self.client_id = host, port, client_id
        self._connection: KafkaConnection | None = None
        self._lock = asyncio.Lock()

    async def _conn(self) -> KafkaConnection:
        async with self._lock:
            if self._connection is None or self._connection.closed:
                self._connection = await KafkaConnection.connect(self.host, self.port, self.client_id,
                                                                 timeout_s=5)
            return self._connection

    async def request(self, api_key: int, body, version: int | None = None, timeout_s: float = 30):
        connection = await self._conn()
        try:
            return await connection.request(api_key, body, version=version, timeout_s=timeout_s)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            connection.close()
            raise

    async def register(self, body: dict):
        return await self.request(BROKER_REGISTRATION, body)

    async def heartbeat(self, body: dict):
        return await self.request(BROKER_HEARTBEAT, body)

    async def alter_partition(self, body: dict):
        return await self.request(ALTER_PARTITION, body)

    async def allocate_producer_ids(self, body: dict):
        return await self.request(ALLOCATE_PRODUCER_IDS, body)

    async def fetch_metadata(self, broker_id: int, broker_epoch: int, fetch_offset: int, max_wait_ms: int):
        response = await self.request(FETCH, {
            "replica_id": broker_id, "replica_state": {"replica_id": broker_id, "replica_epoch": broker_epoch},
            "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 8 * 1024 * 1024, "isolation_level": 0,
            "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                "partition": 0, "fetch_offset": fetch_offset, "partition_max_bytes": 8 * 1024 * 1024,
                "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}]},
            version=12, timeout_s=max_wait_ms / 1000 + 30)
        partition = response.responses[0].partitions[0]
        return int(partition.error_code.value), partition.records or b"", int(partition.high_watermark)

    async def forward(self, api_key: int, version: int, request):
        return await self.request(api_key, request, version=version)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


class InProcessController:
    """Combined mode: the same operations, answered by the ``ControllerServer`` in
    this process through the very handlers remote brokers reach over the wire."""

    def __init__(self, controller_server):
        self.server = controller_server

    async def _call(self, api_key: int, handler, body: dict):
        from tidelog.protocol.codec import _request_class, _response_class, kio_versions, to_entity
        version = kio_versions(api_key)[1]
        request = to_entity(_request_class(api_key, version), body)
        result = handler(None, request)
        if not isinstance(result, dict):
            result = await result
        return to_entity(_response_class(api_key, version), result)

    async def register(self, body: dict):
        return await self._call(BROKER_REGISTRATION, self.server.handle_broker_registration, body)

    async def heartbeat(self, body: dict):
        return await self._call(BROKER_HEARTBEAT, self.server.handle_broker_heartbeat, body)

    async def alter_partition(self, body: dict):
        return await self._call(ALTER_PARTITION, self.server.handle_alter_partition, body)

    async def allocate_producer_ids(self, body: dict):
        return await self._call(ALLOCATE_PRODUCER_IDS, self.server.handle_allocate_producer_ids, body)

    def close(self) -> None:
        pass
