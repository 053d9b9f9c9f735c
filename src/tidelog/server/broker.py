"""``tidelog serve``: one process that is a broker and (by default) the controller.

Theory of operation. This is the asyncio shell around the sans-IO core, in
Kafka's *combined* mode (``process.roles=broker,controller``):

    start:  meta.properties (cluster id, node id) in every log dir
            → LogManager loads and recovers the logs
            → the controller replays ``__cluster_metadata`` (QuorumController)
            → the broker registers (fenced), catches up its own MetadataLoader,
              applies the image (become leader/follower), heartbeats → unfenced
            → the listener opens; one line "ready" naming it
    run:    requests → Dispatcher → KafkaApis; a ticker fires purgatory expiry,
            heartbeats, the controller's stale-broker check, HW checkpoints,
            retention and the ISR-shrink check
    stop:   (SIGTERM/SIGINT) close the listener, complete waiting requests,
            checkpoint high watermarks, flush, write the clean-shutdown marker

Every metadata change goes through the controller; after each write the broker
replays the newly committed records (``publish``) and applies the local changes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import uuid

from tidelog.controller.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from tidelog.controller.quorum_controller import QuorumController
from tidelog.core.clock import Clock, SystemClock
from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.core.ids import TopicPartition
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.loader import MetadataLoader
from tidelog.metadata.records import ConfigResourceType, Endpoint
from tidelog.replication.partition import PartitionState, ReplicationSettings
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.server.admin import AdminApis
from tidelog.server.apis import KafkaApis
from tidelog.server.config import BrokerConfig
from tidelog.server.dispatch import Dispatcher
from tidelog.server.network import Listener
from tidelog.server.storage_format import StorageFormatError, format_log_dirs
from tidelog.server.topic_configs import log_config, static_log_config, topic_config_values
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

log = logging.getLogger("tidelog.broker")

TICK_MS = 50
RECOVERY_CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms


class BrokerStartupError(Exception):
    pass


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None):
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id: int = config["node.id"]
        roles = set(config["process.roles"])
        if roles != {"broker", "controller"}:
            raise InvalidConfigError("process.roles: only the combined mode 'broker,controller' is "
                                     "supported by this version of tidelog serve")
        endpoints = config.listener_endpoints()
        self.listener_name, self.bind_host, self.bind_port = endpoints[0]
        advertised = config.listener_endpoints(advertised=True)[0]
        self.advertised_host = advertised[1] if advertised[1] not in ("0.0.0.0", "") else "127.0.0.1"
        self.advertised_port = advertised[2] if config["advertised.listeners"] else 0
        self.controller_id = self.node_id
        self.cluster_id: str = ""
        self.broker_epoch = -1
        self.listener: Listener | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        config = self.config
        self.cluster_id = format_log_dirs(config["log.dirs"], self.node_id, config["cluster.id"])
        self.log_manager = LogManager(config["log.dirs"], self.clock,
                                      default_config=self._broker_log_config())
        self.metadata_log = FileMetadataLog(config["log.dirs"][0], self.clock)
        self.controller = QuorumController(
            clock=self.clock, log=self.metadata_log, cluster_id=self.cluster_id, rng=random.Random(),
            session_timeout_ms=config["broker.session.timeout.ms"],
            default_num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            co_located_broker_id=self.node_id)
        self.loader = MetadataLoader(self.metadata_log)
        self.replica_manager = ReplicaManager(
            self.node_id, self.log_manager, self.clock, self.replication_settings, self.log_config,
            self._alive_broker_epoch)
        self._restore_high_watermarks = self.log_manager.read_high_watermarks()
        self.publish()
        self.dispatcher = Dispatcher()
        KafkaApis(self).register(self.dispatcher)
        AdminApis(self).register(self.dispatcher)
        self.listener = Listener(self.dispatcher, self.bind_host, self.bind_port,
                                 request_size_max_bytes=config["socket.request.max.bytes"],
                                 idle_timeout_ms=config["connections.max.idle.ms"])
        self.bind_port = self.listener.bind()
        advertised_port = self.advertised_port or self.bind_port
        reply = self.controller.register_broker(BrokerRegistrationRequest(
            broker_id=self.node_id, incarnation_id=uuid.uuid4(), cluster_id=self.cluster_id,
            listeners=(Endpoint(self.listener_name, self.advertised_host, advertised_port),)))
        if reply.error_code != ErrorCode.NONE:
            raise BrokerStartupError(f"broker registration failed: {reply.error_code.name}: "
                                     f"{reply.error_message}")
        self.broker_epoch = reply.broker_epoch
        self.publish()
        for _ in range(3):  # FENCED -> UNFENCED once caught up with our own registration
            if self.heartbeat().is_fenced is False:
                break
        await self.listener.start()
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        log.info("tidelog broker %d ready: listening on %s://%s:%d (cluster %s, data in %s)",
                 self.node_id, self.listener_name, self.bind_host, self.listener.port, self.cluster_id,
                 ",".join(config["log.dirs"]))

    # -------------------------------------------------------------- metadata

    @property
    def image(self):
        return self.loader.image

    def _alive_broker_epoch(self, broker_id: int) -> int | None:
        registration = self.image.brokers.get(broker_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return None
        return registration.broker_epoch

    def heartbeat(self):
        reply = self.controller.process_broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=self.node_id, broker_epoch=self.broker_epoch,
            current_metadata_offset=self.image.offset, want_fence=False))
        self.publish()
        return reply

    def publish(self) -> None:
        """Replay newly committed metadata and become leader/follower as it says."""
        delta = self.loader.catch_up()
        if delta is None:
            return
        changes = delta.local_changes(self.node_id)
        if changes.deletes:
            self.replica_manager.stop_partitions(changes.deletes, delete=True)
        states = {}
        for tp, local in list(changes.leaders.items()) + list(changes.followers.items()):
            p = local.partition
            states[tp] = PartitionState(p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas),
                                        p.partition_epoch)
        if states:
            self.replica_manager.apply_partition_states(states)
            for tp in states:
                restored = self._restore_high_watermarks.pop(tp, None)
                partition = self.replica_manager.get_partition(tp)
                if restored is not None and partition is not None:
                    partition.log.update_high_watermark(min(restored, partition.log.log_end_offset))
        self._apply_config_changes()

    def _apply_config_changes(self) -> None:
        for tp, partition in list(self.replica_manager.partitions.items()):
            if hasattr(partition, "log"):
                new_config = self.log_config(tp.topic)
                if partition.log.config != new_config:
                    partition.log.update_config(new_config)
                partition.settings = self.replication_settings(tp.topic)

    # ---------------------------------------------------------------- configs

    def _broker_log_config(self) -> LogConfig:
        return static_log_config(self.config)

    def topic_config_values(self, topic: str) -> dict[str, tuple[str, str]]:
        return topic_config_values(self.image, self.config, topic)

    def log_config(self, topic: str) -> LogConfig:
        return log_config(self.image, self.config, topic)

    def replication_settings(self, topic: str) -> ReplicationSettings:
        values = self.topic_config_values(topic)
        min_isr = values["min.insync.replicas"][0]
        return ReplicationSettings(min_insync_replicas=int(min_isr),
                                   replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"])

    def auto_create_topics(self, names: list[str]) -> dict[str, ErrorCode]:
        """Metadata's auto-creation (``auto.create.topics.enable``)."""
        from tidelog.controller.messages import CreatableTopic
        if not self.config["auto.create.topics.enable"]:
            return {}
        results = self.controller.create_topics([CreatableTopic(name) for name in names])
        self.publish()
        out = {}
        for result in results:
            if result.error_code == ErrorCode.NONE:
                log.info("auto-created topic %s with %d partitions", result.name, result.num_partitions)
            elif result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                out[result.name] = (ErrorCode.INVALID_TOPIC_EXCEPTION
                                    if result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
                                    else result.error_code)
        return out

    def next_producer_id(self) -> int:
        """Hand out producer ids from blocks the controller allocates (Kafka's
        ProducerIdManager)."""
        block = getattr(self, "_producer_ids", None)
        if block is None or block[0] >= block[1]:
            reply = self.controller.allocate_producer_ids(self.node_id, self.broker_epoch)
            if reply.error_code != ErrorCode.NONE:
                raise RuntimeError(f"producer id allocation failed: {reply.error_code.name}")
            self.publish()
            block = [reply.producer_id_start, reply.producer_id_start + reply.producer_id_len]
        self._producer_ids = [block[0] + 1, block[1]]
        return block[0]

    # ------------------------------------------------------------------- data

    @staticmethod
    def read_bytes(file_slice) -> bytes:
        return b"" if file_slice is None else file_slice.read_bytes()

    # ----------------------------------------------------------------- timers

    async def _tick_loop(self) -> None:
        c = self.config
        next_heartbeat = next_checkpoint = next_retention = next_isr_check = 0
        next_recovery_checkpoint = self.clock.monotonic_ms() + RECOVERY_CHECKPOINT_INTERVAL_MS
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            now = self.clock.monotonic_ms()
            try:
                self.replica_manager.on_tick(now)
                if self.controller.fire_due_deadlines():
                    self.publish()
                if now >= next_heartbeat:
                    self.heartbeat()
                    next_heartbeat = now + c["broker.heartbeat.interval.ms"]
                if now >= next_isr_check:
                    self.replica_manager.maybe_shrink_isr()
                    next_isr_check = now + c["replica.lag.time.max.ms"] // 2
                if now >= next_checkpoint:
                    self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
                    next_checkpoint = now + c["replica.high.watermark.checkpoint.interval.ms"]
                self.log_manager.flush_dirty_logs()
                if now >= next_recovery_checkpoint:
                    self.log_manager.checkpoint_recovery_points()
                    self.log_manager.checkpoint_log_start_offsets()
                    next_recovery_checkpoint = now + RECOVERY_CHECKPOINT_INTERVAL_MS
                if now >= next_retention:
                    if next_retention:
                        deleted = self.log_manager.delete_old_segments()
                        if deleted:
                            log.info("retention deleted %d segments", deleted)
                    next_retention = now + c["log.retention.check.interval.ms"]
            except Exception:
                log.exception("periodic work failed")

    # ------------------------------------------------------------------- stop

    async def stop(self) -> None:
        log.info("shutting down broker %d", self.node_id)
        for task in self._tasks:
            task.cancel()
        if self.listener is not None:
            await self.listener.stop()
        self.replica_manager.shutdown()
        self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
        self.log_manager.shutdown()
        self.metadata_log.close()
        log.info("broker %d stopped cleanly", self.node_id)


def run_broker(properties: str | None, overrides: list[str]) -> int:
    try:
        config = BrokerConfig.load(properties, overrides)
    except InvalidConfigError as e:
        log.error("%s", e)
        return 2
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    async def main() -> int:
        broker = Broker(config)
        try:
            await broker.start()
        except (BrokerStartupError, StorageFormatError, InvalidConfigError, OSError) as e:
            log.error("cannot start: %s", e)
            return 1
        print(f"tidelog ready: broker {broker.node_id} listening on "
              f"{broker.listener_name}://{broker.bind_host}:{broker.bind_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await broker.stop()
        return 0

    return asyncio.run(main())
