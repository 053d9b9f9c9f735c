"""How a broker reaches the controller: in-process (combined mode) or over the wire.

Both channels offer the same async operations on the controller's own request
objects (``controller.messages``), so the broker's lifecycle and ISR changes are
one mechanism whatever the roles:

* ``register`` / ``heartbeat`` / ``alter_partition`` — the broker lifecycle
  (Kafka's BrokerRegistration, BrokerHeartbeat, AlterPartition);
* ``fetch_metadata(offset, max_wait_ms)`` — committed ``__cluster_metadata`` batches;
* ``forward(api_key, version, request)`` — client admin requests (CreateTopics…).

``RemoteController`` translates to and from the wire; ``InProcessController``
calls the ``ControllerServer`` in this process directly.
"""

from __future__ import annotations

import asyncio
import logging

from tidelog.controller.messages import (
    AllocateProducerIdsReply,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
)
from tidelog.core.errors import ErrorCode
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection

log = logging.getLogger("tidelog.controller_channel")


def _code(value) -> ErrorCode:
    return ErrorCode(int(getattr(value, "value", value)))


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

    async def register(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        reply = await self.request(ApiKey.BROKER_REGISTRATION, {
            "broker_id": request.broker_id, "cluster_id": request.cluster_id,
            "incarnation_id": request.incarnation_id,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                          for e in request.listeners],
            "features": [{"name": f.name, "min_supported_version": f.min_supported_version,
                          "max_supported_version": f.max_supported_version} for f in request.features],
            "rack": request.rack, "is_migrating_zk_broker": False, "log_dirs": [], "previous_broker_epoch": -1})
        return BrokerRegistrationReply(_code(reply.error_code), None, int(reply.broker_epoch))

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        reply = await self.request(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": request.broker_id, "broker_epoch": request.broker_epoch,
            "current_metadata_offset": request.current_metadata_offset, "want_fence": request.want_fence,
            "want_shut_down": request.want_shut_down, "offline_log_dirs": []})
        return BrokerHeartbeatReply(_code(reply.error_code), None, bool(reply.is_caught_up), bool(reply.is_fenced),
                                    False, bool(reply.should_shut_down))

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        by_topic: dict = {}
        for item in request.partitions:
            epochs = item.new_isr_broker_epochs or (-1,) * len(item.new_isr)
            by_topic.setdefault(item.topic_id, []).append({
                "partition_index": item.partition_id, "leader_epoch": item.leader_epoch,
                "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": e} for b, e in zip(item.new_isr, epochs)],
                "leader_recovery_state": item.leader_recovery_state, "partition_epoch": item.partition_epoch})
        reply = await self.request(ApiKey.ALTER_PARTITION, {
            "broker_id": request.broker_id, "broker_epoch": request.broker_epoch,
            "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()]})
        results = tuple(
            AlterPartitionResult(topic.topic_id, int(p.partition_index), _code(p.error_code), None,
                                 int(p.leader_id), int(p.leader_epoch), tuple(int(b) for b in p.isr),
                                 int(p.partition_epoch), int(p.leader_recovery_state))
            for topic in reply.topics for p in topic.partitions)
        return AlterPartitionResponse(_code(reply.error_code), None, results)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> AllocateProducerIdsReply:
        reply = await self.request(ApiKey.ALLOCATE_PRODUCER_IDS, {"broker_id": broker_id,
                                                                  "broker_epoch": broker_epoch})
        return AllocateProducerIdsReply(_code(reply.error_code), None, int(reply.producer_id_start),
                                        int(reply.producer_id_len))

    async def fetch_metadata(self, broker_id: int, broker_epoch: int, fetch_offset: int, max_wait_ms: int):
        response = await self.request(ApiKey.FETCH, {
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
    this process."""

    def __init__(self, controller_server):
        self.server = controller_server

    async def register(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        return self.server.register_broker(request)

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        return self.server.broker_heartbeat(request)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        return self.server.alter_partition(request)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> AllocateProducerIdsReply:
        return self.server.allocate_producer_ids(broker_id, broker_epoch)

    def close(self) -> None:
        pass
