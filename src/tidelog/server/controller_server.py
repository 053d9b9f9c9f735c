"""The controller role (``process.roles`` contains ``controller``) as a network service.

Theory of operation. ``ControllerServer`` owns the ``QuorumController`` and the
on-disk metadata log, and answers on its own listener (the one named by
``controller.listener.names``; in combined mode it also shares the broker's):

* BrokerRegistration, BrokerHeartbeat, AlterPartition — the broker lifecycle
  (docs/controller.md), translated to the controller's own request objects;
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
import logging
import random

from tidelog.controller.messages import (
    AllocateProducerIdsReply,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
)
from tidelog.controller.quorum_controller import QuorumController
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.metadata.records import BrokerFeature, Endpoint
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ZERO_UUID, millis
from tidelog.server.admin import AdminApis
from tidelog.broker.config import BrokerConfig
from tidelog.broker.topic_configs import topic_config_values

log = logging.getLogger("tidelog.controller_server")

# Topic defaults the controller's own decisions read from its server.properties
# (elections, min ISR) when no topic or cluster-wide dynamic config sets them.
STATIC_TOPIC_DEFAULTS = ("unclean.leader.election.enable", "min.insync.replicas")

METADATA_FETCH_BYTES_MAX = 8 * 1024 * 1024


class ControllerServer:
    def __init__(self, config: BrokerConfig, clock: Clock, cluster_id: str,
                 co_located_broker_id: int | None = None, rng: random.Random | None = None):
        self.config = config
        self.clock = clock
        # auto.leader.rebalance.enable: the first check one interval after start, as Kafka's.
        self._next_balance_ms = clock.monotonic_ms() + config["leader.imbalance.check.interval.seconds"] * 1000
        self.cluster_id = cluster_id
        self.node_id = config["node.id"]
        self.metadata_log = FileMetadataLog(config["log.dirs"][0], clock)
        self.controller = QuorumController(
            clock=clock, log=self.metadata_log, cluster_id=cluster_id, rng=rng or random.Random(),
            session_timeout_ms=config["broker.session.timeout.ms"],
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            co_located_broker_id=co_located_broker_id,
            static_configs={name: str(config[name]).lower() if isinstance(config[name], bool) else str(config[name])
                            for name in STATIC_TOPIC_DEFAULTS if name in config.originals})
        self._committed = asyncio.Event()
        self._publish_hooks: list = []

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

    def register(self, dispatcher) -> None:
        """Put the controller's APIs on a controller listener — never on a client
        listener (runtime.plan_listeners), where anyone could fence or shut down a
        broker: the broker lifecycle (BrokerRegistration, BrokerHeartbeat,
        AlterPartition, AllocateProducerIds), the metadata log's Fetch, and the admin
        APIs brokers forward."""
        dispatcher.register(ApiKey.BROKER_REGISTRATION, self.handle_broker_registration, 0, 4)
        dispatcher.register(ApiKey.BROKER_HEARTBEAT, self.handle_broker_heartbeat, 0, 1)
        dispatcher.register(ApiKey.ALTER_PARTITION, self.handle_alter_partition, 2, 3)
        dispatcher.register(ApiKey.ALLOCATE_PRODUCER_IDS, self.handle_allocate_producer_ids, 0, 0)
        dispatcher.register(ApiKey.FETCH, self.handle_metadata_fetch, 4, 18)
        AdminApis(self).register(dispatcher)
        dispatcher.register(ApiKey.DESCRIBE_CLUSTER, self.handle_describe_cluster, 0, 2)

    # The broker lifecycle, as the controller's own request objects (an in-process
    # broker calls these directly; the wire handlers below translate to them).

    def register_broker(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        reply = self.controller.register_broker(request)
        self.publish()
        if reply.error_code == ErrorCode.NONE:
            log.info("registered broker %d at epoch %d", request.broker_id, reply.broker_epoch)
        return reply

    def broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        reply = self.controller.process_broker_heartbeat(request)
        self.publish()
        return reply

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        response = self.controller.alter_partition(request)
        self.publish()
        return response

    def handle_broker_registration(self, header, request):
        reply = self.register_broker(BrokerRegistrationRequest(
            broker_id=int(request.broker_id), incarnation_id=request.incarnation_id,
            cluster_id=request.cluster_id,
            listeners=tuple(Endpoint(l.name, l.host, int(l.port), int(l.security_protocol))
                            for l in request.listeners),
            features=tuple(BrokerFeature(f.name, int(f.min_supported_version), int(f.max_supported_version))
                           for f in request.features),
            rack=request.rack))
        return {"throttle_time": 0, "error_code": int(reply.error_code), "broker_epoch": reply.broker_epoch}

    def handle_broker_heartbeat(self, header, request):
        reply = self.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=int(request.broker_id), broker_epoch=int(request.broker_epoch),
            current_metadata_offset=int(request.current_metadata_offset),
            want_fence=bool(request.want_fence), want_shut_down=bool(request.want_shut_down)))
        return {"throttle_time": 0, "error_code": int(reply.error_code), "is_caught_up": reply.is_caught_up,
                "is_fenced": reply.is_fenced, "should_shut_down": reply.should_shut_down}

    def handle_alter_partition(self, header, request):
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

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> AllocateProducerIdsReply:
        reply = self.controller.allocate_producer_ids(broker_id, broker_epoch)
        self.publish()
        return reply

    def handle_allocate_producer_ids(self, header, request):
        reply = self.allocate_producer_ids(int(request.broker_id), int(request.broker_epoch))
        return {"throttle_time": 0, "error_code": int(reply.error_code),
                "producer_id_start": reply.producer_id_start, "producer_id_len": reply.producer_id_len}

    def handle_metadata_fetch(self, header, request):
        """Serve ``__cluster_metadata-0`` up to the committed offset, long-polling."""
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
        max_wait_ms = millis(request.max_wait)
        if fetch_offset >= self.metadata_log.log.high_watermark and max_wait_ms > 0:
            return self._metadata_fetch_later(fetch_offset, max_wait_ms)
        return self._metadata_fetch_response(fetch_offset)

    async def _metadata_fetch_later(self, fetch_offset: int, max_wait_ms: int):
        try:
            await asyncio.wait_for(self._committed.wait(), max_wait_ms / 1000)
        except asyncio.TimeoutError:
            pass
        return self._metadata_fetch_response(fetch_offset)

    def _metadata_fetch_response(self, fetch_offset: int) -> dict:
        log_ = self.metadata_log.log
        entry = {"partition_index": 0, "error_code": 0, "high_watermark": log_.high_watermark,
                 "last_stable_offset": log_.high_watermark, "log_start_offset": log_.log_start_offset,
                 "preferred_read_replica": -1, "records": b""}
        if fetch_offset < log_.log_start_offset or fetch_offset > log_.log_end_offset:
            entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
        elif fetch_offset < log_.high_watermark:
            entry["records"] = log_.read(fetch_offset, METADATA_FETCH_BYTES_MAX,
                                         max_offset=log_.high_watermark).records.read_bytes()
        return {"throttle_time": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": METADATA_TOPIC, "topic_id": ZERO_UUID, "partitions": [entry]}]}

    def handle_describe_cluster(self, header, request):
        brokers = []
        for broker_id in sorted(self.image.brokers):
            registration = self.image.brokers[broker_id]
            endpoint = registration.endpoints[0] if registration.endpoints else None
            if endpoint is None:
                continue
            brokers.append({"broker_id": broker_id, "host": endpoint.host, "port": endpoint.port,
                            "rack": registration.rack, "is_fenced": registration.fenced})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 2,
                "cluster_id": self.cluster_id, "controller_id": self.node_id, "brokers": brokers,
                "cluster_authorized_operations": -2147483648}

    # ------------------------------------------------------------------ timers

    def on_tick(self) -> None:
        fenced = self.controller.fire_due_deadlines()
        if fenced:
            for broker_id in fenced:
                log.warning("fenced broker %d: its session expired", broker_id)
            self.publish()
        now_ms = self.clock.monotonic_ms()
        if self.config["auto.leader.rebalance.enable"] and now_ms >= self._next_balance_ms:
            self._next_balance_ms = now_ms + self.config["leader.imbalance.check.interval.seconds"] * 1000
            moved = self.controller.balance_partition_leaders(self.config["leader.imbalance.per.broker.percentage"])
            if moved:
                log.info("auto leader rebalance: %d partitions back on their preferred leader", moved)
                self.publish()

    def close(self) -> None:
        self.metadata_log.close()
