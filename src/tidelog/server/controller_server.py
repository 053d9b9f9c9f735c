"""The controller role (``process.roles`` contains ``controller``) as a network service.

Theory of operation. ``ControllerServer`` owns the ``QuorumController`` and the
on-disk metadata log, and answers on its own listener (the one named by
``controller.listener.names``; in combined mode it also shares the broker's):

* BrokerRegistration, BrokerHeartbeat, AlterPartition, AssignReplicasToDirs — the
  broker lifecycle (docs/controller.md), translated to the controller's own
  request objects;
* Fetch of ``__cluster_metadata-0`` — brokers follow the committed metadata log
  exactly as followers fetch a partition (long-polling until something new is
  committed or ``max_wait`` passes);
* CreateTopics, DeleteTopics, CreatePartitions, (Incremental)AlterConfigs,
  DescribeConfigs — what brokers forward from clients (AdminApis);
* DescribeCluster and ApiVersions.

Every controller write wakes the metadata fetches waiting for news. The
stale-broker check runs on a timer at ``controller.next_deadline_ms()``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random

from tidelog.controller.messages import (
    AllocateProducerIdsReply,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    ReplicaDirectory,
    ReplicaLogEnd,
)
from tidelog.controller.feature_control import BOOTSTRAP_FEATURES
from tidelog.controller.quorum_controller import QuorumController
from tidelog.controller.quorum_member import ACTIVATED, DEACTIVATED, QuorumMember
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.metadata.authorizer import ResourceType
from tidelog.metadata.records import BrokerFeature, Endpoint
from tidelog.server.authorized_operations import requested as requested_operations
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ZERO_UUID, millis
from tidelog.raft.metadata_log import RaftMetadataLog
from tidelog.raft.replica import RaftConfig
from tidelog.server.admin import AdminApis
from tidelog.server.controller_channel import parse_address, parse_quorum_voters
from tidelog.server.storage_format import directory_id
from tidelog.server.voter_apis import VoterApis
from tidelog.server.dispatch import current_connection
from tidelog.server.raft_driver import RaftDriver
from tidelog.broker.config import BrokerConfig
from tidelog.broker.topic_configs import topic_config_values

logger = logging.getLogger("tidelog.controller_server")

# Topic defaults the controller's own decisions read from its server.properties
# (elections, min ISR) when no topic or cluster-wide dynamic config sets them.
STATIC_TOPIC_DEFAULTS = ("unclean.leader.election.enable", "min.insync.replicas",
                         # the bounds of GROUP configs (controller/config_defs.py GROUP_CONFIGS)
                         "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms",
                         "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms")

METADATA_FETCH_BYTES_MAX = 8 * 1024 * 1024
WRITE_COMMIT_TIMEOUT_S = 30        # a write's records not committed by then: NOT_CONTROLLER


class NotControllerError(Exception):
    """This node stopped being the active controller before a write was committed."""


def not_controller_answer(api_key: int, request) -> dict:
    """The answer of a controller that is not the active one (Kafka's NOT_CONTROLLER),
    in each write API's shape; the broker's channel then asks another voter."""
    code = int(ErrorCode.NOT_CONTROLLER)
    message = "not the active controller"
    if api_key == ApiKey.CREATE_TOPICS:
        return {"throttle_time": 0, "topics": [{"name": t.name, "error_code": code, "error_message": message,
                                                "num_partitions": -1, "replication_factor": -1}
                                               for t in request.topics]}
    if api_key == ApiKey.DELETE_TOPICS:
        names = list(getattr(request, "topic_names", None) or []) + [
            t.name for t in getattr(request, "topics", None) or []]
        return {"throttle_time": 0, "responses": [{"name": n, "error_code": code, "error_message": message}
                                                  for n in names]}
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {"throttle_time": 0, "results": [{"name": t.name, "error_code": code, "error_message": message}
                                                for t in request.topics]}
    if api_key == ApiKey.CREATE_ACLS:
        return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message}
                                                for _ in request.creations]}
    if api_key == ApiKey.DELETE_ACLS:
        return {"throttle_time": 0, "filter_results": [{"error_code": code, "error_message": message,
                                                        "matching_acls": []} for _ in request.filters]}
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        return {"throttle_time": 0, "results": [{"user": n, "error_code": code, "error_message": message}
                                                for n in names]}
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return {"throttle_time": 0, "entries": [
            {"error_code": code, "error_message": message,
             "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
            for entry in request.entries]}
    if api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
        return {"throttle_time": 0, "responses": [{"error_code": code, "error_message": message,
                                           "resource_type": r.resource_type, "resource_name": r.resource_name}
                                          for r in request.resources]}
    return {"throttle_time": 0, "error_code": code, "error_message": message}


class ControllerServer:
    def __init__(self, config: BrokerConfig, clock: Clock, cluster_id: str,
                 co_located_broker_id: int | None = None, rng: random.Random | None = None,
                 security=None):
        self.config = config
        self.clock = clock
        # auto.leader.rebalance.enable: the first check one interval after start, as Kafka's.
        self._next_balance_ms = clock.monotonic_ms() + config["leader.imbalance.check.interval.seconds"] * 1000
        self.cluster_id = cluster_id
        self.node_id = config["node.id"]
        self.own_endpoint: tuple[str, str, int] | None = None   # (listener, host, port), set by the runtime
        self.metadata_log = FileMetadataLog(config["log.dirs"][0], clock, follower=True,
                                            segment_bytes=config["metadata.log.segment.bytes"])
        voters = parse_quorum_voters(config["controller.quorum.voters"] or [])
        bootstrap = [parse_address(a) for a in config["controller.quorum.bootstrap.servers"] or []]
        # A dynamic quorum (KIP-853): no static voters, and bootstrap servers or a
        # formatted VotersRecord (`tidelog format --standalone/--initial-controllers`).
        dynamic = not voters and (bool(bootstrap) or self.metadata_log.last_voters() is not None)
        if not voters and not dynamic:      # a lone `tidelog serve`: its own single voter
            voters = [(self.node_id, "127.0.0.1", 0)]
        if not dynamic and self.node_id not in {voter for voter, _, _ in voters}:
            raise ValueError(f"node {self.node_id} has the controller role but is not in "
                             f"controller.quorum.voters {config['controller.quorum.voters']}")
        self.raft = RaftDriver(self.node_id, voters, self.metadata_log, clock,
                               RaftConfig(election_timeout_ms=config["controller.quorum.election.timeout.ms"],
                                          fetch_timeout_ms=config["controller.quorum.fetch.timeout.ms"]),
                               cluster_id, self._on_quorum_change, rng, security,
                               directory_id=directory_id(config["log.dirs"][0]),
                               bootstrap=bootstrap if dynamic else None,
                               listener_name=(config["controller.listener.names"] or ["CONTROLLER"])[0].upper())
        self.raft.own_endpoint = lambda: self.own_endpoint
        self.controller = QuorumController(
            clock=clock, log=RaftMetadataLog(self.raft.replica, self.metadata_log, self.raft.appended),
            cluster_id=cluster_id, rng=rng or random.Random(),
            session_timeout_ms=config["broker.session.timeout.ms"],
            unclean_recovery_wait_ms=config["tidelog.unclean.recovery.wait.ms"],
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            co_located_broker_id=co_located_broker_id, node_id=self.node_id,
            bootstrap_features=BOOTSTRAP_FEATURES,
            static_configs={name: str(config[name]).lower() if isinstance(config[name], bool) else str(config[name])
                            for name in STATIC_TOPIC_DEFAULTS if name in config.originals})
        # Only the quorum leader is the active controller, once its leader-change entry
        # (and so everything before it) is committed (controller/quorum_member.py).
        self.member = QuorumMember(self.controller, self.raft.replica)
        self._committed = asyncio.Event()
        self._publish_hooks: list = []
        self._observers: dict[int, tuple[int, int]] = {}     # broker → (fetch offset, at ms)
        self._principals: dict[int, str] = {}      # broker → the principal it registered as

    def start(self) -> None:
        """Join the quorum (a single voter leads, and so is active, at once)."""
        self.raft.start()

    @property
    def single_voter(self) -> bool:
        return self.raft.replica.voters == (self.node_id,)

    # ---------------------------------------------------- the quorum

    @property
    def active(self) -> bool:
        return self.member.active

    def _on_quorum_change(self) -> None:
        """Leadership or the high watermark moved: (de)activate, publish what is committed,
        answer the writes that now are."""
        change = self.member.on_quorum_change()
        replica = self.raft.replica
        if change == ACTIVATED:
            self._next_balance_ms = self.clock.monotonic_ms() + \
                self.config["leader.imbalance.check.interval.seconds"] * 1000
            logger.info("node %d is the active controller (epoch %d)", self.node_id, replica.epoch)
        elif change == DEACTIVATED:
            logger.info("node %d is no longer the active controller (epoch %d, leader %d)", self.node_id,
                     replica.epoch, replica.leader_id)
        self._maybe_snapshot()
        self.publish()

    def _maybe_snapshot(self) -> None:
        """Every controller, active or not, snapshots its committed image once
        ``metadata.log.max.record.bytes.between.snapshots`` new bytes are in its log,
        and its log then starts at the snapshot (KIP-630): a restart loads the
        snapshot and the tail; a voter or broker further behind fetches the snapshot."""
        if self.metadata_log.bytes_since_snapshot < self.config["metadata.log.max.record.bytes.between.snapshots"]:
            return
        image = self.controller.image
        latest = self.metadata_log.snapshot_id()
        if image.offset < 0 or (latest is not None and latest[0] > image.offset):
            return
        snapshot = self.controller.write_snapshot()
        deleted = self.metadata_log.delete_before_snapshot()
        logger.info("metadata snapshot at offset %d (%d records); the log now starts there (%d segments deleted)",
                 snapshot.last_offset + 1, len(snapshot.records), deleted)

    async def _until_committed(self, offset: int) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.member.after_commit(offset, lambda ok: waiter.done() or waiter.set_result(ok))
        if not await asyncio.wait_for(waiter, WRITE_COMMIT_TIMEOUT_S):
            raise NotControllerError()

    def _when_active(self, handler):
        """A write API: refused with NOT_CONTROLLER unless this node is the active
        controller; answered once the records it wrote are committed by the quorum."""
        def run(header, request):
            if not self.active:
                return not_controller_answer(header.api_key, request)
            result = handler(header, request)
            if not inspect.isawaitable(result) and self.controller.last_write_offset <= \
                    self.controller.committed_offset:
                return result
            return self._answer_when_committed(result, header, request)
        return run

    async def _answer_when_committed(self, result, header, request):
        if inspect.isawaitable(result):
            result = await result
        try:
            await self._until_committed(self.controller.last_write_offset)
        except (NotControllerError, asyncio.TimeoutError):
            return not_controller_answer(header.api_key, request)
        return result

    # ---------------------------------------------------- AdminApis' view of us

    @property
    def image(self):
        return self.controller.image

    def publish(self) -> None:
        """Called after every controller write: wake metadata fetches, tell listeners."""
        self._committed.set()
        self._committed = asyncio.Event()
        for hook in self._publish_hooks:
            hook()

    def on_publish(self, hook) -> None:
        self._publish_hooks.append(hook)

    def topic_config_values(self, topic: str):
        return topic_config_values(self.image, self.config, topic)

    # --------------------------------------------------------------- handlers

    def register(self, dispatcher, authorizer=None) -> None:
        """Put the controller's APIs on a controller listener — never on a client
        listener (runtime.plan_listeners), where anyone could fence or shut down a
        broker: the broker lifecycle (BrokerRegistration, BrokerHeartbeat,
        AlterPartition, AllocateProducerIds) and the admin APIs brokers forward —
        writes, served by the active controller only —, the metadata log's Fetch
        (brokers from the active controller, voters from the quorum leader), the
        quorum's own RPCs, DescribeQuorum and DescribeCluster."""
        writes = _ActiveOnly(dispatcher, self._when_active)
        writes.register(ApiKey.BROKER_REGISTRATION, self.handle_broker_registration, 0, 4)
        writes.register(ApiKey.BROKER_HEARTBEAT, self.handle_broker_heartbeat, 0, 1)
        writes.register(ApiKey.ALTER_PARTITION, self.handle_alter_partition, 2, 3)
        writes.register(ApiKey.ASSIGN_REPLICAS_TO_DIRS, self.handle_assign_replicas_to_dirs, 0, 0)
        writes.register(ApiKey.ALLOCATE_PRODUCER_IDS, self.handle_allocate_producer_ids, 0, 0)
        self._authorizer = authorizer             # DescribeCluster's authorized operations (KIP-430)
        admin = AdminApis(self, authorizer, receiving_broker=False)   # with ACLs, a broker's per-topic checks
        admin.register(writes)
        dispatcher.register(ApiKey.DESCRIBE_CONFIGS, admin.handle_describe_configs, 1, 4)   # a read: any voter
        dispatcher.register(ApiKey.FETCH, self.handle_fetch, 4, 18)
        dispatcher.register(ApiKey.FETCH_SNAPSHOT, self.handle_fetch_snapshot, 0, 0)
        dispatcher.register(ApiKey.VOTE, self.raft.handle_vote, 2, 2)
        dispatcher.register(ApiKey.BEGIN_QUORUM_EPOCH, self.raft.handle_begin_quorum_epoch, 0, 0)
        dispatcher.register(ApiKey.END_QUORUM_EPOCH, self.raft.handle_end_quorum_epoch, 0, 0)
        dispatcher.register(ApiKey.DESCRIBE_QUORUM, self.handle_describe_quorum, 0, 2)
        VoterApis(self.raft, self.cluster_id).register(dispatcher)     # KIP-853 (server/voter_apis.py)
        dispatcher.register(ApiKey.DESCRIBE_CLUSTER, self.handle_describe_cluster, 0, 2)

    # The broker lifecycle, as the controller's own request objects (an in-process
    # broker calls these directly; the wire handlers below translate to them).

    def register_broker(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        if not self.active:
            return BrokerRegistrationReply(ErrorCode.NOT_CONTROLLER, None, -1)
        reply = self.controller.register_broker(request)
        self.publish()
        if reply.error_code == ErrorCode.NONE:
            logger.info("registered broker %d at epoch %d", request.broker_id, reply.broker_epoch)
        return reply

    def broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        if not self.active:
            return BrokerHeartbeatReply(ErrorCode.NOT_CONTROLLER, None, False, True, False, False)
        reply = self.controller.process_broker_heartbeat(request)
        self.publish()
        return reply

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        if not self.active:
            return AlterPartitionResponse(ErrorCode.NOT_CONTROLLER, None, ())
        response = self.controller.alter_partition(request)
        self.publish()
        return response

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        if not self.active:
            return AssignReplicasToDirsResponse(ErrorCode.NOT_CONTROLLER, None, ())
        response = self.controller.assign_replicas_to_dirs(request)
        self.publish()
        return response

    def _acting_as(self, header, broker_id: int, registering: bool = False) -> dict | None:
        """A broker acts only as itself: the principal that registered broker ``broker_id``
        (its connection's, from TLS or SASL) is the only one that may heartbeat, change
        its partitions' ISR or take producer ids for it, and another may register the same
        id only once that broker is fenced. Kafka lets any CLUSTER_ACTION principal speak
        for any broker; with one certificate per node this stops one node (or anyone
        holding one node's key) from fencing or shutting down the others. The binding is
        the active controller's memory: after a failover the first caller binds again.
        None to go on, or the refusal (CLUSTER_AUTHORIZATION_FAILED)."""
        connection = current_connection.get()
        principal = getattr(connection, "principal", None)
        if principal is None:
            return None                         # no authorizer: nothing is checked, as Kafka
        bound = self._principals.get(broker_id)
        if bound is None or bound == principal or (registering and not self._unfenced(broker_id)):
            self._principals[broker_id] = principal
            return None
        logger.warning("%s from %s refused: broker %d is %s's", ApiKey(header.api_key).name, principal,
                    broker_id, bound)
        return {"throttle_time": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": f"broker {broker_id} is registered by another principal"}

    def _unfenced(self, broker_id: int) -> bool:
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def handle_broker_registration(self, header, request):
        refusal = self._acting_as(header, int(request.broker_id), registering=True)
        if refusal is not None:
            return refusal
        reply = self.register_broker(BrokerRegistrationRequest(
            broker_id=int(request.broker_id), incarnation_id=request.incarnation_id,
            cluster_id=request.cluster_id,
            listeners=tuple(Endpoint(l.name, l.host, int(l.port), int(l.security_protocol))
                            for l in request.listeners),
            features=tuple(BrokerFeature(f.name, int(f.min_supported_version), int(f.max_supported_version))
                           for f in request.features),
            rack=request.rack, log_dirs=tuple(getattr(request, "log_dirs", None) or ()),
            previous_broker_epoch=int(getattr(request, "previous_broker_epoch", -1))))
        return {"throttle_time": 0, "error_code": int(reply.error_code), "broker_epoch": reply.broker_epoch}

    def handle_broker_heartbeat(self, header, request):
        refusal = self._acting_as(header, int(request.broker_id))
        if refusal is not None:
            return refusal
        reply = self.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=int(request.broker_id), broker_epoch=int(request.broker_epoch),
            current_metadata_offset=int(request.current_metadata_offset),
            want_fence=bool(request.want_fence), want_shut_down=bool(request.want_shut_down),
            offline_log_dirs=tuple(getattr(request, "offline_log_dirs", None) or ()),
            replica_log_ends=None if getattr(request, "replica_log_ends", None) is None else tuple(
                ReplicaLogEnd(e.topic_id, int(e.partition_index), int(e.last_epoch), int(e.log_end_offset))
                for e in request.replica_log_ends)))
        return {"throttle_time": 0, "error_code": int(reply.error_code), "is_caught_up": reply.is_caught_up,
                "is_fenced": reply.is_fenced, "should_shut_down": reply.should_shut_down}

    def handle_alter_partition(self, header, request):
        refusal = self._acting_as(header, int(request.broker_id))
        if refusal is not None:
            return refusal
        items = []
        for topic in request.topics:
            topic_id = getattr(topic, "topic_id", None)
            if topic_id in (None, ZERO_UUID) and getattr(topic, "topic_name", None):
                image_topic = self.image.topic(topic.topic_name)
                topic_id = image_topic.topic_id if image_topic else ZERO_UUID
            for p in topic.partitions:
                with_epochs = getattr(p, "new_isr_with_epochs", None)
                if with_epochs is not None:
                    isr = tuple(int(b.broker_id) for b in with_epochs)
                    epochs = tuple(int(b.broker_epoch) for b in with_epochs)
                else:
                    isr, epochs = tuple(int(b) for b in p.new_isr), None
                items.append(AlterPartitionItem(
                    topic_id=topic_id, partition_id=int(p.partition_index), leader_epoch=int(p.leader_epoch),
                    partition_epoch=int(p.partition_epoch), new_isr=isr,
                    leader_recovery_state=int(getattr(p, "leader_recovery_state", 0)),
                    new_isr_broker_epochs=epochs))
        response = self.alter_partition(AlterPartitionRequest(
            int(request.broker_id), int(request.broker_epoch), tuple(items)))
        topics: dict = {}
        for r in response.partitions:
            topics.setdefault(r.topic_id, []).append({
                "partition_index": r.partition_id, "error_code": int(r.error_code), "leader_id": r.leader,
                "leader_epoch": r.leader_epoch, "isr": list(r.isr),
                "leader_recovery_state": r.leader_recovery_state, "partition_epoch": r.partition_epoch})
        return {"throttle_time": 0, "error_code": int(response.error_code),
                "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]}

    def handle_assign_replicas_to_dirs(self, header, request):
        refusal = self._acting_as(header, int(request.broker_id))
        if refusal is not None:
            return refusal
        response = self.assign_replicas_to_dirs(AssignReplicasToDirsRequest(
            int(request.broker_id), int(request.broker_epoch),
            tuple(ReplicaDirectory(topic.topic_id, int(p.partition_index), directory.id_)
                  for directory in request.directories for topic in directory.topics for p in topic.partitions)))
        answer: dict = {}
        for assignment, code in response.results:
            answer.setdefault(assignment.directory_id, {}).setdefault(assignment.topic_id, []).append(
                {"partition_index": assignment.partition_id, "error_code": int(code)})
        return {"throttle_time": 0, "error_code": int(response.error_code),
                "directories": [{"id_": d, "topics": [{"topic_id": t, "partitions": parts}
                                                      for t, parts in topics.items()]}
                                for d, topics in answer.items()]}

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> AllocateProducerIdsReply:
        if not self.active:
            return AllocateProducerIdsReply(ErrorCode.NOT_CONTROLLER, None, -1, 0)
        reply = self.controller.allocate_producer_ids(broker_id, broker_epoch)
        self.publish()
        return reply

    def handle_allocate_producer_ids(self, header, request):
        refusal = self._acting_as(header, int(request.broker_id))
        if refusal is not None:
            return refusal
        reply = self.allocate_producer_ids(int(request.broker_id), int(request.broker_epoch))
        return {"throttle_time": 0, "error_code": int(reply.error_code),
                "producer_id_start": reply.producer_id_start, "producer_id_len": reply.producer_id_len}

    def handle_fetch_snapshot(self, header, request):
        """FetchSnapshot: a voter's through the quorum; a broker's from the active controller."""
        if int(request.replica_id) in self.raft.addresses:
            return self.raft.handle_fetch_snapshot(header, request)
        data = None
        if self.active:
            p = request.topics[0].partitions[0]
            data = self.metadata_log.read_snapshot((int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch)))
        return self.raft.handle_fetch_snapshot(header, request, observer_data=data)

    def handle_fetch(self, header, request):
        if self.raft.is_voter_fetch(request):
            return self.raft.handle_fetch(header, request)
        return self.handle_metadata_fetch(header, request)

    def handle_metadata_fetch(self, header, request):
        """A broker follows ``__cluster_metadata-0`` up to the committed offset,
        long-polling, from the active controller only (others answer
        NOT_LEADER_OR_FOLLOWER naming the leader they know)."""
        wanted = None
        for topic in request.topics:
            name = getattr(topic, "topic", None)
            if name == METADATA_TOPIC:
                for p in topic.partitions:
                    if int(p.partition) == 0:
                        wanted = (topic, p)
        if wanted is None:
            return {"throttle_time": 0, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    "session_id": 0, "responses": []}
        fetch_offset = int(wanted[1].fetch_offset)
        replica_id = int(getattr(getattr(request, "replica_state", None), "replica_id", -1))
        if replica_id < 0:
            replica_id = int(getattr(request, "replica_id", -1))
        if not self.active:
            return self._metadata_fetch_response(fetch_offset, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if replica_id >= 0:
            self._observers[replica_id] = (fetch_offset, self.clock.monotonic_ms())
        max_wait_ms = millis(request.max_wait)
        if fetch_offset >= self.metadata_log.log.high_watermark and max_wait_ms > 0:
            # The event is taken now: a commit between this return and the coroutine's
            # first step must still wake it (a quorum commits while other requests run).
            return self._metadata_fetch_later(fetch_offset, max_wait_ms, self._committed)
        return self._metadata_fetch_response(fetch_offset)

    async def _metadata_fetch_later(self, fetch_offset: int, max_wait_ms: int, committed: asyncio.Event):
        try:
            await asyncio.wait_for(committed.wait(), max_wait_ms / 1000)
        except asyncio.TimeoutError:
            pass
        return self._metadata_fetch_response(fetch_offset)

    def _metadata_fetch_response(self, fetch_offset: int, error: ErrorCode = ErrorCode.NONE) -> dict:
        log_ = self.metadata_log.log
        replica = self.raft.replica
        entry = {"partition_index": 0, "error_code": int(error), "high_watermark": log_.high_watermark,
                 "last_stable_offset": log_.high_watermark, "log_start_offset": log_.log_start_offset,
                 "current_leader": {"leader_id": replica.leader_id, "leader_epoch": replica.epoch},
                 "preferred_read_replica": -1, "records": b""}
        snapshot_id = self.metadata_log.snapshot_id()
        if error != ErrorCode.NONE:
            pass
        elif fetch_offset < log_.log_start_offset and snapshot_id is not None:
            # Below the log start: the broker loads the snapshot first (FetchSnapshot).
            entry["snapshot_id"] = {"end_offset": snapshot_id[0], "epoch": snapshot_id[1]}
        elif fetch_offset < log_.log_start_offset or fetch_offset > log_.log_end_offset:
            entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
        elif fetch_offset < log_.high_watermark:
            entry["records"] = log_.read(fetch_offset, METADATA_FETCH_BYTES_MAX,
                                         max_offset=log_.high_watermark).records.read_bytes()
        return {"throttle_time": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": METADATA_TOPIC, "topic_id": ZERO_UUID, "partitions": [entry]}]}

    def _voter_nodes(self) -> list[dict]:
        """DescribeQuorum's nodes: each voter with its listeners. The quorum's only
        voter knows no address of its own (port 0): its controller listener's, set by
        the runtime; a lone `tidelog serve` has none, so no endpoint."""
        # A dynamic quorum's voters are shown with every listener of their VotersRecord entry (v2).
        nodes = []
        listed = {v.voter_id: v.endpoints for v in self.raft.replica.voter_set if v.endpoints}
        for voter in sorted(self.raft.replica.voters):
            endpoints = list(listed.get(voter, ()))
            if not endpoints and voter in self.raft.addresses:
                endpoints = [("CONTROLLER", *self.raft.addresses[voter])]
            if (not endpoints or not endpoints[0][2]) and voter == self.node_id and self.own_endpoint is not None:
                endpoints = [self.own_endpoint]
            endpoints = [e for e in endpoints if e[2]]
            if endpoints:
                nodes.append({"node_id": voter, "listeners": [{"name": name, "host": host, "port": port}
                                                              for name, host, port in endpoints]})
        return nodes

    def handle_describe_quorum(self, header, request):
        """Kafka's DescribeQuorum (``kafka-metadata-quorum describe``), from the leader;
        brokers following the metadata log are the observers."""
        if self.raft.replica.leader_id != self.node_id:
            return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
                "partition_index": 0, "error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                "error_message": "not the quorum leader", "leader_id": self.raft.replica.leader_id,
                "leader_epoch": self.raft.replica.epoch, "high_watermark": -1,
                "current_voters": [], "observers": []}]}], "nodes": []}
        partition = self.raft.describe()
        now_ms, wall_ms = self.clock.monotonic_ms(), self.clock.now_ms()
        high_watermark = self.raft.replica.high_watermark
        for broker_id, (offset, at_ms) in sorted(self._observers.items()):
            if broker_id in self.raft.replica.voters:
                continue
            fetched = wall_ms - (now_ms - at_ms)
            partition["observers"].append({"replica_id": broker_id, "log_end_offset": offset,
                                           "last_fetch_timestamp": fetched,
                                           "last_caught_up_timestamp": fetched if offset >= high_watermark else -1})
        # The quorum's only voter knows no address of its own (port 0): its controller
        # listener's, set by the runtime; a lone `tidelog serve` has none, so no endpoint.
        nodes = self._voter_nodes()
        return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
                "nodes": nodes}

    def handle_describe_cluster(self, header, request):
        if int(getattr(request, "endpoint_type", 1)) == 2:
            return self._describe_controllers(request)
        brokers = []
        for broker_id in sorted(self.image.brokers):
            registration = self.image.brokers[broker_id]
            endpoint = registration.endpoints[0] if registration.endpoints else None
            if endpoint is None:
                continue
            brokers.append({"broker_id": broker_id, "host": endpoint.host, "port": endpoint.port,
                            "rack": registration.rack, "is_fenced": registration.fenced})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 2,
                "cluster_id": self.cluster_id, "controller_id": self.raft.replica.leader_id, "brokers": brokers,
                "cluster_authorized_operations": requested_operations(   # KIP-430
                    request.include_cluster_authorized_operations, getattr(self, "_authorizer", None),
                    ResourceType.CLUSTER)}

    def _describe_controllers(self, request) -> dict:
        """DescribeCluster with EndpointType CONTROLLER (KIP-919, an admin client's
        ``bootstrap.controllers``): the quorum's voters where they are reached, and the
        leader as the controller to send quorum changes to."""
        controllers = [{"broker_id": node["node_id"], "host": node["listeners"][0]["host"],
                        "port": node["listeners"][0]["port"], "rack": None, "is_fenced": False}
                       for node in self._voter_nodes()]
        if not controllers and self.own_endpoint is not None:
            controllers = [{"broker_id": self.node_id, "host": self.own_endpoint[1], "port": self.own_endpoint[2],
                            "rack": None, "is_fenced": False}]
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 2,
                "cluster_id": self.cluster_id, "controller_id": self.raft.replica.leader_id, "brokers": controllers,
                "cluster_authorized_operations": requested_operations(
                    request.include_cluster_authorized_operations, getattr(self, "_authorizer", None),
                    ResourceType.CLUSTER)}

    # ------------------------------------------------------------------ timers

    def on_tick(self) -> None:
        if not self.active:
            return
        fenced = self.controller.fire_due_deadlines()
        if fenced:
            for broker_id in fenced:
                logger.warning("fenced broker %d: its session expired", broker_id)
            self.publish()
        now_ms = self.clock.monotonic_ms()
        if self.config["auto.leader.rebalance.enable"] and now_ms >= self._next_balance_ms:
            self._next_balance_ms = now_ms + self.config["leader.imbalance.check.interval.seconds"] * 1000
            moved = self.controller.balance_partition_leaders(self.config["leader.imbalance.per.broker.percentage"])
            if moved:
                logger.info("auto leader rebalance: %d partitions back on their preferred leader", moved)
                self.publish()

    def close(self) -> None:
        self.raft.close()
        self.metadata_log.close()


class _ActiveOnly:
    """A dispatcher view that registers every handler through ``wrap``."""

    def __init__(self, dispatcher, wrap):
        self.dispatcher, self.wrap = dispatcher, wrap

    def register(self, api_key: int, handler, min_version: int, max_version: int) -> None:
        self.dispatcher.register(api_key, self.wrap(handler), min_version, max_version)
