"""How a broker reaches the controller: in-process (combined mode) or over the wire.

Both channels offer the same async operations on the controller's own request
objects (``controller.messages``), so the broker's lifecycle and ISR changes are
one mechanism whatever the roles:

* ``register`` / ``heartbeat`` / ``alter_partition`` / ``assign_replicas_to_dirs`` —
  the broker lifecycle (Kafka's BrokerRegistration, BrokerHeartbeat, AlterPartition,
  AssignReplicasToDirs);
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
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ReplicaDirectory,
)
from tidelog.core.errors import ErrorCode
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection

logger = logging.getLogger("tidelog.controller_channel")


def _code(value) -> ErrorCode:
    return ErrorCode(int(getattr(value, "value", value)))


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``controller.quorum.bootstrap.servers``)."""
    host, _, port = address.strip().rpartition(":")
    if not port.isdigit() or not host:
        raise ValueError(f"controller address {address!r} is not host:port")
    return host.strip("[]"), int(port)


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


# The connection each request to a controller goes on (others: "requests").
_LANES = {ApiKey.FETCH: "metadata", ApiKey.FETCH_SNAPSHOT: "metadata",
          ApiKey.BROKER_REGISTRATION: "lifecycle", ApiKey.BROKER_HEARTBEAT: "lifecycle"}


class RemoteController:
    """The active controller among ``controller.quorum.voters``.

    Requests go to the voter believed to be active. An answer of NOT_CONTROLLER (or
    NOT_LEADER_OR_FOLLOWER to a metadata fetch) or a lost connection moves on — to the
    leader the answer names, else to the next voter — and the request is sent again,
    until its deadline. With a single voter a lost connection is the caller's at once.

    Each voter gets one connection per lane (``_LANES``), as Kafka's broker has separate
    channels for the metadata fetch (the Raft client), its lifecycle (registration and
    heartbeats) and everything else (AlterPartition, forwarding): a connection answers
    its requests in order, so a metadata fetch long-polling for up to its ``max_wait``
    would otherwise hold a forwarded admin request or a heartbeat behind it.
    """

    ATTEMPT_TIMEOUT_S = 5.0      # per voter, beyond a request's own long-poll wait

    def __init__(self, voters: list[tuple[int, str, int]], client_id: str, security=None):
        self.voters = list(voters)
        self.client_id = client_id
        self.security = security          # TLS / SASL towards the controller listener
        self._index = 0
        self._next_learn_s = 0.0          # when _learn_controllers may ask again
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._lock = asyncio.Lock()

    @property
    def leader_guess(self) -> int:
        return self.voters[self._index][0]

    async def _conn(self, lane: str, index: int) -> KafkaConnection:
        async with self._lock:
            connection = self._connections.get((lane, index))
            if connection is None or connection.closed:
                _, host, port = self.voters[index]
                connection = await KafkaConnection.connect(host, port, self.client_id, timeout_s=5,
                                                           security=self.security)
                self._connections[(lane, index)] = connection
            return connection

    def _drop(self, lane: str, index: int) -> None:
        connection = self._connections.pop((lane, index), None)
        if connection is not None:
            connection.close()

    async def _learn_controllers(self, connection: KafkaConnection, hint: int) -> int:
        """A controller that is not the active one named a leader this channel has no
        address for (or none): a dynamic quorum's voters change (KIP-853), so ask it for
        the voters it knows (DescribeCluster, EndpointType CONTROLLER) and add the new
        ones; the leader it names then, else ``hint``. At most once a second."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_learn_s or ApiKey.DESCRIBE_CLUSTER not in connection.api_versions \
                or connection.api_versions[ApiKey.DESCRIBE_CLUSTER][1] < 1:
            return hint
        self._next_learn_s = loop.time() + 1.0
        try:
            answer = await connection.request(ApiKey.DESCRIBE_CLUSTER, {
                "include_cluster_authorized_operations": False, "endpoint_type": 2}, timeout_s=self.ATTEMPT_TIMEOUT_S)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            return hint
        known = {voter for voter, _, _ in self.voters}
        for node in answer.brokers if _code(answer.error_code) == 0 else ():
            if int(node.broker_id) >= 0 and int(node.broker_id) not in known and 0 < int(node.port) < 65536:
                self.voters.append((int(node.broker_id), str(node.host), int(node.port)))
        leader = int(getattr(answer, "controller_id", -1))
        return leader if leader in {voter for voter, _, _ in self.voters} else hint

    def _move_on(self, index: int, hint: int) -> None:
        ids = [voter for voter, _, _ in self.voters]
        if hint in ids and ids.index(hint) != index:
            self._index = ids.index(hint)
        elif self._index == index:
            self._index = (index + 1) % len(self.voters)

    async def request(self, api_key: int, body, version: int | None = None, timeout_s: float = 30,
                      wait_ms: int = 0):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff_s = 0.05
        lane = _LANES.get(api_key, "requests")
        while True:
            index = self._index
            remaining = deadline - loop.time()
            attempt_s = remaining if len(self.voters) == 1 else \
                min(remaining, self.ATTEMPT_TIMEOUT_S + wait_ms / 1000)
            try:
                connection = await self._conn(lane, index)
                response = await connection.request(api_key, body, version=version, timeout_s=max(0.01, attempt_s))
            except (ConnectionError, OSError, asyncio.TimeoutError):
                self._drop(lane, index)
                if len(self.voters) == 1 or loop.time() + backoff_s >= deadline:
                    raise
                self._move_on(index, -1)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 0.25)
                continue
            hint = not_active_hint(api_key, response)
            if hint is None or loop.time() + backoff_s >= deadline:
                return response
            if hint not in [voter for voter, _, _ in self.voters]:
                hint = await self._learn_controllers(connection, hint)
            self._move_on(index, hint)
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 0.25)

    async def register(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        reply = await self.request(ApiKey.BROKER_REGISTRATION, {
            "broker_id": request.broker_id, "cluster_id": request.cluster_id,
            "incarnation_id": request.incarnation_id,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                          for e in request.listeners],
            "features": [{"name": f.name, "min_supported_version": f.min_supported_version,
                          "max_supported_version": f.max_supported_version} for f in request.features],
            "rack": request.rack, "is_migrating_zk_broker": False, "log_dirs": list(request.log_dirs),
            "previous_broker_epoch": request.previous_broker_epoch})
        return BrokerRegistrationReply(_code(reply.error_code), None, int(reply.broker_epoch))

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        reply = await self.request(ApiKey.BROKER_HEARTBEAT, {
            "broker_id": request.broker_id, "broker_epoch": request.broker_epoch,
            "current_metadata_offset": request.current_metadata_offset, "want_fence": request.want_fence,
            "want_shut_down": request.want_shut_down, "offline_log_dirs": list(request.offline_log_dirs),
            "replica_log_ends": None if request.replica_log_ends is None else [
                {"topic_id": e.topic_id, "partition_index": e.partition_id,
                 "last_epoch": e.last_epoch, "log_end_offset": e.log_end_offset}
                for e in request.replica_log_ends]})
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

    async def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        directories: dict = {}
        for a in request.assignments:
            directories.setdefault(a.directory_id, {}).setdefault(a.topic_id, []).append(
                {"partition_index": a.partition_id})
        reply = await self.request(ApiKey.ASSIGN_REPLICAS_TO_DIRS, {
            "broker_id": request.broker_id, "broker_epoch": request.broker_epoch,
            "directories": [{"id_": d, "topics": [{"topic_id": t, "partitions": parts} for t, parts in topics.items()]}
                            for d, topics in directories.items()]})
        return AssignReplicasToDirsResponse(_code(reply.error_code), None, tuple(
            (ReplicaDirectory(topic.topic_id, int(p.partition_index), directory.id_), _code(p.error_code))
            for directory in reply.directories for topic in directory.topics for p in topic.partitions))

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
            version=12, timeout_s=max_wait_ms / 1000 + 30, wait_ms=max_wait_ms)
        partition = response.responses[0].partitions[0]
        snapshot = getattr(partition, "snapshot_id", None)
        snapshot_id = (int(snapshot.end_offset), int(snapshot.epoch)) \
            if snapshot is not None and int(snapshot.end_offset) >= 0 else None
        return (int(partition.error_code.value), partition.records or b"", int(partition.high_watermark),
                snapshot_id)

    async def fetch_snapshot(self, broker_id: int, snapshot_id: tuple[int, int]) -> bytes:
        """The active controller's snapshot ``snapshot_id`` (FetchSnapshot, in chunks)."""
        data = bytearray()
        while True:
            response = await self.request(ApiKey.FETCH_SNAPSHOT, {
                "cluster_id": None, "replica_id": broker_id, "max_bytes": 8 * 1024 * 1024,
                "topics": [{"name": METADATA_TOPIC, "partitions": [{
                    "partition": 0, "current_leader_epoch": -1,
                    "snapshot_id": {"end_offset": snapshot_id[0], "epoch": snapshot_id[1]},
                    "position": len(data)}]}]}, version=0)
            p = response.topics[0].partitions[0]
            if _code(p.error_code) != ErrorCode.NONE:
                raise ConnectionError(f"FetchSnapshot {snapshot_id} answered {_code(p.error_code).name}")
            data += bytes(p.unaligned_records or b"")
            if len(data) >= int(p.size):
                return bytes(data)

    async def forward(self, api_key: int, version: int, request):
        return await self.request(api_key, request, version=version)

    def close(self) -> None:
        for lane, index in list(self._connections):
            self._drop(lane, index)


def not_active_hint(api_key: int, response) -> int | None:
    """None if ``response`` is an answer of the active controller; else the leader it
    names (-1 if none): NOT_CONTROLLER at the top or on any item (forwarded admin
    requests answer per topic or resource), NOT_LEADER_OR_FOLLOWER to a metadata fetch
    or a DescribeQuorum."""
    if _code(getattr(response, "error_code", 0)) == ErrorCode.NOT_CONTROLLER:
        return -1
    for field in ("topics", "responses", "results", "filter_results"):
        for item in getattr(response, field, None) or ():
            if _code(getattr(item, "error_code", 0)) == ErrorCode.NOT_CONTROLLER:
                return -1
            if api_key not in (ApiKey.FETCH, ApiKey.DESCRIBE_QUORUM):
                continue
            for partition in getattr(item, "partitions", None) or ():
                if _code(partition.error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    leader = getattr(partition, "current_leader", None)
                    return int(leader.leader_id) if leader is not None else int(partition.leader_id)
    return None


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

    async def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        return self.server.assign_replicas_to_dirs(request)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> AllocateProducerIdsReply:
        return self.server.allocate_producer_ids(broker_id, broker_epoch)

    def close(self) -> None:
        pass
