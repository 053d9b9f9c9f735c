"""``tidelog serve``: a broker, a controller, or both in one process (``process.roles``).

Theory of operation. This is the asyncio shell around the sans-IO core.

    start:  meta.properties (cluster id, node id) in every log dir
            controller role → ControllerServer (QuorumController + metadata log)
            broker role     → LogManager loads and recovers the logs; a MetadataLoader
                              follows the committed metadata log (shared with the
                              controller in combined mode, fetched from it otherwise)
            → the listener opens; the broker registers (fenced), catches up with
              the metadata, heartbeats until unfenced → RUNNING; one "ready" line
    run:    requests → Dispatcher → KafkaApis / AdminApis / controller APIs; a ticker
            fires purgatory expiry, the controller's stale-broker check, HW and
            recovery checkpoints, retention, the ISR-shrink check and AlterPartition
            sending
    stop:   (SIGTERM/SIGINT) controlled shutdown (leaderships move away first when
            other brokers exist), close the listener, complete waiting requests,
            checkpoint, flush, write the clean-shutdown marker

Every metadata change goes through the controller; after each committed change
the broker replays it (``publish``) and becomes leader or follower as it says.
The broker reaches the controller through one channel interface
(``controller_channel``), in-process or over the wire.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid

from tidelog.core.clock import Clock, SystemClock
from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.core.ids import TopicPartition
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.loader import MetadataLoader
from tidelog.replication.fetcher import FetcherConfig
from tidelog.replication.metadata_changes import apply_local_changes
from tidelog.replication.partition import ReplicationSettings
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.server.admin import AdminApis, ForwardingAdminApis
from tidelog.server.apis import KafkaApis
from tidelog.server.config import BrokerConfig
from tidelog.server.controller_channel import InProcessController, RemoteController, parse_quorum_voters
from tidelog.server.controller_server import ControllerServer
from tidelog.server.dispatch import Dispatcher
from tidelog.server.fetcher_driver import FetcherDriver
from tidelog.server.network import Listener
from tidelog.server.storage_format import META_PROPERTIES, StorageFormatError, format_log_dirs
from tidelog.server.topic_configs import log_config, static_log_config, topic_config_values
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

log = logging.getLogger("tidelog.broker")

TICK_MS = 50
RECOVERY_CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms
REGISTRATION_BACKOFF_MS_MAX = 2_000
INITIAL_REGISTRATION_TIMEOUT_MS = 60_000
DESCRIBE_CLUSTER = 60


class BrokerStartupError(Exception):
    pass


class BrokerState:
    NOT_RUNNING, STARTING, RECOVERY, RUNNING = "NOT_RUNNING", "STARTING", "RECOVERY", "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN = "PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None):
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id: int = config["node.id"]
        roles = set(config["process.roles"])
        if not roles or not roles <= {"broker", "controller"}:
            raise InvalidConfigError(f"process.roles must be broker, controller or both, got {sorted(roles)}")
        self.is_broker = "broker" in roles
        self.is_controller = "controller" in roles
        if not self.is_controller and not config["controller.quorum.voters"]:
            raise InvalidConfigError("a broker-only node needs controller.quorum.voters (id@host:port)")
        endpoints = config.listener_endpoints()
        self.listener_name, self.bind_host, self.bind_port = endpoints[0]
        advertised = config.listener_endpoints(advertised=True)[0]
        self.advertised_host = advertised[1] if advertised[1] not in ("0.0.0.0", "") else "127.0.0.1"
        self.advertised_port = advertised[2] if config["advertised.listeners"] else 0
        # What Metadata/DescribeCluster call the "controller": as in KRaft, a broker
        # names an alive broker (itself) and forwards admin requests to the real
        # controller, which clients cannot reach on their listener.
        self.controller_id = self.node_id
        self.cluster_id = ""
        self.broker_epoch = -1
        self.state = BrokerState.NOT_RUNNING
        self.listener: Listener | None = None
        self.controller_server: ControllerServer | None = None
        self._tasks: list[asyncio.Task] = []
        self._running = asyncio.Event()
        self._metadata_changed = asyncio.Event()
        self._shutdown_allowed = asyncio.Event()
        self._restore_high_watermarks: dict = {}

    # ------------------------------------------------------------------ start

    async def _discover_cluster_id(self) -> str | None:
        """A broker-only node with an unformatted dir learns the cluster id from its controller."""
        import os
        if self.is_controller or self.config["cluster.id"]:
            return self.config["cluster.id"]
        if any(os.path.exists(os.path.join(d, META_PROPERTIES)) for d in self.config["log.dirs"]):
            return None
        deadline = self.clock.monotonic_ms() + INITIAL_REGISTRATION_TIMEOUT_MS
        while True:
            try:
                response = await self.channel.request(DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False})
                return response.cluster_id
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                if self.clock.monotonic_ms() > deadline:
                    raise BrokerStartupError(f"cannot reach the controller: {e}") from None
                await asyncio.sleep(0.2)

    async def start(self) -> None:
        config = self.config
        if not self.is_controller:
            _, host, port = parse_quorum_voters(config["controller.quorum.voters"])[0]
            self.channel = RemoteController(host, port, client_id=f"broker-{self.node_id}")
        self.cluster_id = format_log_dirs(config["log.dirs"], self.node_id, await self._discover_cluster_id())
        self.dispatcher = Dispatcher()
        if self.is_controller:
            self.controller_server = ControllerServer(
                config, self.clock, self.cluster_id,
                co_located_broker_id=self.node_id if self.is_broker else None)
            self.controller = self.controller_server.controller
            self.controller_server.register(self.dispatcher, include_admin=not self.is_broker,
                                            include_fetch=not self.is_broker)
        if self.is_broker:
            self._start_broker_role()
        self.listener = Listener(self.dispatcher, self.bind_host, self.bind_port,
                                 request_size_max_bytes=config["socket.request.max.bytes"],
                                 idle_timeout_ms=config["connections.max.idle.ms"])
        self.bind_port = self.listener.bind()
        await self.listener.start()
        self._tasks.append(asyncio.create_task(self._tick_loop()))
        if self.is_broker:
            if not self.is_controller:
                self._tasks.append(asyncio.create_task(self._metadata_loop()))
            self._tasks.append(asyncio.create_task(self._lifecycle_loop()))
            try:
                await asyncio.wait_for(self._running.wait(), INITIAL_REGISTRATION_TIMEOUT_MS / 1000)
            except asyncio.TimeoutError:
                raise BrokerStartupError("the broker did not become RUNNING within "
                                         f"{INITIAL_REGISTRATION_TIMEOUT_MS} ms (is the controller up?)") from None
        roles = "broker+controller" if self.is_broker and self.is_controller else (
            "broker" if self.is_broker else "controller")
        log.info("tidelog node %d (%s) ready: listening on %s://%s:%d (cluster %s, data in %s)",
                 self.node_id, roles, self.listener_name, self.bind_host, self.listener.port,
                 self.cluster_id, ",".join(config["log.dirs"]))

    def _start_broker_role(self) -> None:
        config = self.config
        self.log_manager = LogManager(config["log.dirs"], self.clock, default_config=static_log_config(config))
        if self.is_controller:
            self.metadata_log = self.controller_server.metadata_log
            self.channel = InProcessController(self.controller_server)
            self.controller_server.on_publish(self.publish)
            self.admin = AdminApis(self)
        else:
            self.metadata_log = FileMetadataLog(config["log.dirs"][0], self.clock, follower=True)
            self.admin = ForwardingAdminApis(self)
        self.loader = MetadataLoader(self.metadata_log)
        fetcher_keys = ("num.replica.fetchers", "replica.fetch.max.bytes", "replica.fetch.response.max.bytes",
                        "replica.fetch.wait.max.ms", "replica.fetch.min.bytes", "replica.fetch.backoff.ms")
        self.replica_manager = ReplicaManager(
            self.node_id, self.log_manager, self.clock, self.replication_settings, self.log_config,
            self._alive_broker_epoch,
            fetcher_config=FetcherConfig.from_properties({k: config[k] for k in fetcher_keys}),
            is_broker_alive=self._is_fetchable)
        self.fetcher_driver = FetcherDriver(self)
        self._restore_high_watermarks = self.log_manager.read_high_watermarks()
        KafkaApis(self).register(self.dispatcher)
        self.admin.register(self.dispatcher)
        self.publish()

    # -------------------------------------------------------------- lifecycle

    async def _lifecycle_loop(self) -> None:
        """SPEC §8.2: register (retrying with backoff), then heartbeat by state."""
        backoff_ms = 50
        incarnation_id = uuid.uuid4()
        self.state = BrokerState.STARTING
        while self.broker_epoch < 0:
            try:
                reply = await self.channel.register({
                    "broker_id": self.node_id, "cluster_id": self.cluster_id, "incarnation_id": incarnation_id,
                    "listeners": [{"name": self.listener_name, "host": self.advertised_host,
                                   "port": self.advertised_port or self.bind_port, "security_protocol": 0}],
                    "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
                    "previous_broker_epoch": -1})
                code = ErrorCode(reply.error_code.value)
                if code == ErrorCode.NONE:
                    self.broker_epoch = int(reply.broker_epoch)
                    self.replica_manager.broker_epoch = self.broker_epoch
                    log.info("registered with the controller: broker epoch %d", self.broker_epoch)
                    break
                log.warning("registration refused: %s; retrying", code.name)
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                log.info("controller not reachable for registration (%s); retrying", e)
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, REGISTRATION_BACKOFF_MS_MAX)
        interval_ms = self.config["broker.heartbeat.interval.ms"]
        while True:
            next_ms = interval_ms
            try:
                reply = await self.channel.heartbeat({
                    "broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                    "current_metadata_offset": self.image.offset,
                    "want_fence": self.state == BrokerState.STARTING,
                    "want_shut_down": self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN,
                    "offline_log_dirs": []})
                code = ErrorCode(reply.error_code.value)
                if code != ErrorCode.NONE:
                    log.warning("heartbeat answered %s", code.name)
                    next_ms = min(interval_ms, 500)
                elif self.state == BrokerState.STARTING:
                    if reply.is_caught_up:
                        self.state = BrokerState.RECOVERY
                        next_ms = 10
                    else:
                        next_ms = 10
                elif self.state == BrokerState.RECOVERY:
                    if not reply.is_fenced:
                        self.state = BrokerState.RUNNING
                        self._running.set()
                        log.info("broker %d is RUNNING (unfenced)", self.node_id)
                    else:
                        next_ms = 10
                elif self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
                    if reply.should_shut_down:
                        self._shutdown_allowed.set()
                        return
                    next_ms = 50
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                log.warning("heartbeat failed: %s", e)
                next_ms = min(interval_ms, 500)
            await asyncio.sleep(next_ms / 1000)

    async def _metadata_loop(self) -> None:
        """A broker-only node follows the controller's committed metadata log."""
        while True:
            try:
                error, records, high_watermark = await self.channel.fetch_metadata(
                    self.node_id, self.broker_epoch, self.metadata_log.end_offset, 500)
                if error != 0:
                    log.error("metadata fetch at offset %d answered error %d",
                              self.metadata_log.end_offset, error)
                    await asyncio.sleep(1)
                    continue
                self.metadata_log.append_fetched(records, high_watermark)
                self.publish()
            except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                log.debug("metadata fetch failed: %s", e)
                await asyncio.sleep(0.2)

    # -------------------------------------------------------------- metadata

    @property
    def image(self):
        return self.loader.image

    def _alive_broker_epoch(self, broker_id: int) -> int | None:
        registration = self.image.brokers.get(broker_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return None
        return registration.broker_epoch

    def _is_fetchable(self, broker_id: int) -> bool:
        """A leader can be fetched from while registered and unfenced — also while it
        is in controlled shutdown (it still serves until its leaderships move)."""
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def publish(self) -> None:
        """Replay newly committed metadata and become leader/follower as it says."""
        delta = self.loader.catch_up()
        if delta is None:
            return
        states = apply_local_changes(self.replica_manager, delta, self.node_id)
        if states:
            for tp in states:
                restored = self._restore_high_watermarks.pop(tp, None)
                partition = self.replica_manager.get_partition(tp)
                if restored is not None and partition is not None and partition.is_leader:
                    partition.log.update_high_watermark(min(restored, partition.log.log_end_offset))
            self.on_partition_states(states)
        self._apply_config_changes()
        self._metadata_changed.set()
        self._metadata_changed = asyncio.Event()

    def on_partition_states(self, states) -> None:
        """New leaders or followers: wake the fetchers so new partitions start at once."""
        self.fetcher_driver.wake_all()

    async def wait_for_metadata(self, predicate, timeout_s: float = 5.0) -> bool:
        """Wait until ``predicate(image)`` holds (after forwarding an admin request)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate(self.image):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    def _apply_config_changes(self) -> None:
        for tp, partition in list(self.replica_manager.partitions.items()):
            if hasattr(partition, "log"):
                new_config = self.log_config(tp.topic)
                if partition.log.config != new_config:
                    partition.log.update_config(new_config)
                partition.settings = self.replication_settings(tp.topic)

    # ---------------------------------------------------------------- configs

    def topic_config_values(self, topic: str) -> dict[str, tuple[str, str]]:
        return topic_config_values(self.image, self.config, topic)

    def log_config(self, topic: str) -> LogConfig:
        return log_config(self.image, self.config, topic)

    def replication_settings(self, topic: str) -> ReplicationSettings:
        values = self.topic_config_values(topic)
        return ReplicationSettings(min_insync_replicas=int(values["min.insync.replicas"][0]),
                                   replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"])

    def auto_create_topics(self, names: list[str]) -> dict[str, ErrorCode]:
        """Metadata's auto-creation (``auto.create.topics.enable``): in combined mode
        at once; otherwise forwarded, and the answer says LEADER_NOT_AVAILABLE."""
        if not self.config["auto.create.topics.enable"]:
            return {}
        return self.admin.auto_create(names)

    async def next_producer_id(self) -> int:
        """Producer ids from blocks the controller allocates (Kafka's ProducerIdManager)."""
        block = getattr(self, "_producer_ids", None)
        if block is None or block[0] >= block[1]:
            reply = await self.channel.allocate_producer_ids(
                {"broker_id": self.node_id, "broker_epoch": self.broker_epoch})
            if reply.error_code.value != ErrorCode.NONE:
                raise RuntimeError(f"producer id allocation failed: {ErrorCode(reply.error_code.value).name}")
            block = [int(reply.producer_id_start), int(reply.producer_id_start) + int(reply.producer_id_len)]
        self._producer_ids = [block[0] + 1, block[1]]
        return block[0]

    @staticmethod
    def read_bytes(file_slice) -> bytes:
        return b"" if file_slice is None else file_slice.read_bytes()

    # ----------------------------------------------------------------- timers

    async def _tick_loop(self) -> None:
        c = self.config
        next_checkpoint = next_retention = next_isr_check = 0
        next_recovery_checkpoint = self.clock.monotonic_ms() + RECOVERY_CHECKPOINT_INTERVAL_MS
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            now = self.clock.monotonic_ms()
            try:
                if self.controller_server is not None:
                    self.controller_server.on_tick()
                if not self.is_broker:
                    continue
                self.replica_manager.on_tick(now)
                self._mark_failed_log_dirs_offline()
                if now >= next_isr_check:
                    self.replica_manager.maybe_shrink_isr()
                    next_isr_check = now + c["replica.lag.time.max.ms"] // 2
                if self.replica_manager.pending_isr_proposals:
                    asyncio.create_task(self._send_isr_proposals())
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

    def _mark_failed_log_dirs_offline(self) -> None:
        """SPEC §5.1: partitions of a failed log directory go Offline (KAFKA_STORAGE_ERROR);
        partitions on other directories keep serving."""
        for tp in self.log_manager.offline_partitions:
            if self.replica_manager.partitions.get(tp) not in (None, "offline"):
                log.error("partition %s is offline: its log directory %s failed", tp,
                          self.log_manager.log_dir_of(tp))
                self.replica_manager.mark_offline(tp)

    async def _send_isr_proposals(self) -> None:
        """Batch every pending ISR change into one AlterPartition request (SPEC §5.5)."""
        if getattr(self, "_isr_in_flight", False) or not self.replica_manager.pending_isr_proposals:
            return
        self._isr_in_flight = True
        batch = self.replica_manager.drain_isr_proposals()
        by_topic: dict = {}
        for tp, proposal in batch.items():
            topic = self.image.topic(tp.topic)
            if topic is None:
                continue
            epochs = proposal.new_isr_broker_epochs or (-1,) * len(proposal.new_isr)
            by_topic.setdefault(topic.topic_id, []).append({
                "partition_index": tp.partition, "leader_epoch": proposal.leader_epoch,
                "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": e}
                                        for b, e in zip(proposal.new_isr, epochs)],
                "leader_recovery_state": 0, "partition_epoch": proposal.partition_epoch})
        try:
            response = await self.channel.alter_partition({
                "broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()]})
            if ErrorCode(response.error_code.value) != ErrorCode.NONE:
                raise ConnectionError(f"AlterPartition answered {ErrorCode(response.error_code.value).name}")
            for topic in response.topics:
                name = self.image.topic_name(topic.topic_id)
                for p in topic.partitions:
                    tp = TopicPartition(name, int(p.partition_index))
                    self.replica_manager.on_alter_partition_response(
                        tp, ErrorCode(p.error_code.value), int(p.leader_epoch), int(p.partition_epoch),
                        tuple(int(b) for b in p.isr), batch.get(tp))
        except (OSError, ConnectionError, asyncio.TimeoutError) as e:
            log.warning("AlterPartition failed (%s); will retry", e)
            for tp, proposal in batch.items():
                self.replica_manager.pending_isr_proposals.setdefault(tp, proposal)
        finally:
            self._isr_in_flight = False

    # ------------------------------------------------------------------- stop

    async def stop(self) -> None:
        log.info("shutting down node %d", self.node_id)
        if self.is_broker and self.state == BrokerState.RUNNING and self.broker_epoch >= 0:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        if self.listener is not None:
            await self.listener.stop()
        if self.is_broker:
            self.fetcher_driver.shutdown()
            self.replica_manager.shutdown()
            self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
            self.log_manager.shutdown()
            if not self.is_controller:
                self.metadata_log.close()
                self.channel.close()
        if self.controller_server is not None:
            self.controller_server.close()
        log.info("node %d stopped cleanly", self.node_id)

    async def _controlled_shutdown(self, timeout_s: float = 30.0) -> None:
        """SPEC §8.2: ask to shut down; the controller moves leaderships away first."""
        others = [b for b in self.image.brokers.values()
                  if b.broker_id != self.node_id and not b.fenced]
        if not others:
            return  # nobody to hand leadership to: a single node just stops
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        try:
            await asyncio.wait_for(self._shutdown_allowed.wait(), timeout_s)
            log.info("controlled shutdown complete: this broker leads no partition")
        except asyncio.TimeoutError:
            log.warning("controlled shutdown did not complete within %.0f s; stopping anyway", timeout_s)
        self.state = BrokerState.SHUTTING_DOWN


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
        try:
            broker = Broker(config)
            await broker.start()
        except (BrokerStartupError, StorageFormatError, InvalidConfigError, OSError) as e:
            log.error("cannot start: %s", e)
            return 1
        print(f"tidelog ready: node {broker.node_id} listening on "
              f"{broker.listener_name}://{broker.bind_host}:{broker.bind_port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await broker.stop()
        return 0

    return asyncio.run(main())
