"""A simulated broker process: production's replication core, glued as broker.py glues it.

Theory of operation. ``SimBroker`` is ``tidelog.server.broker.Broker`` without
asyncio: the same objects (``LogManager`` on a crashable disk, ``MetadataLoader``,
``ReplicaManager`` with its fetchers and purgatories, ``BrokerConfig`` and the
topic-config resolution of ``server/topic_configs.py``) driven by events instead
of tasks. What each production task does maps onto one event chain here:

=====================================  =========================================
``Broker._lifecycle_loop``             ``_register`` → ``_heartbeat`` (states
                                       STARTING → RECOVERY → RUNNING, controlled
                                       shutdown)
``Broker._metadata_loop``              ``_fetch_metadata``: long-poll the
                                       controller, then ``publish()``
``Broker.publish``                     ``publish`` (local_changes →
                                       apply_partition_states, HW restore,
                                       config changes)
``FetcherDriver._run``                 ``_kick``: poll a fetcher, send its plan,
                                       feed back ``on_response`` /
                                       ``on_request_failed``, sleep until
                                       ``next_wakeup_ms``
``Broker._tick_loop``                  ``_tick``: purgatory expiry, offline log
                                       dirs, ISR shrink, AlterPartition, HW
                                       checkpoint, flush
``KafkaApis`` produce / fetch / …      ``on_request``
=====================================  =========================================

Requests from other nodes arrive as network messages whose bodies are the
replication layer's own plan objects (``FetchRequestPlan`` …); answers are the
result objects (``FetchPartitionResult`` copies the bytes at answer time, as a
response on the wire would). A broker process ends in one of three ways:
``stop`` (SIGTERM: controlled shutdown, checkpoints, flush), ``kill`` (kill -9:
nothing is lost from the page cache) or ``power_cut`` (the machine dies:
unsynced bytes go). ``start`` is a new process: a new incarnation id, log
recovery, the durable metadata prefix replayed, registration, catch-up.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING

from tidelog.controller.messages import (
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.loader import MetadataLoader
from tidelog.metadata.log import MetadataSnapshot
from tidelog.metadata.records import Endpoint
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.fetcher import (
    FetcherConfig,
    FetchPartitionResult,
    FetchRequestPlan,
    ListOffsetsPlan,
    OffsetsForLeaderEpochPlan,
)
from tidelog.replication.partition import Isolation, Partition, PartitionState, ReplicationSettings
from tidelog.replication.replica_manager import OFFLINE, ReplicaManager
from tidelog.server.config import BrokerConfig
from tidelog.server.topic_configs import log_config, static_log_config, topic_config_values
from tidelog.sim.disk import SimDisk
from tidelog.sim.loop import NodeClock
from tidelog.sim.network import NetworkNode
from tidelog.storage.log_manager import LogManager

if TYPE_CHECKING:
    from tidelog.sim.simulation import Simulation

log = logging.getLogger("tidelog.sim.broker")

STARTING, RECOVERY, RUNNING = "STARTING", "RECOVERY", "RUNNING"
PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
REGISTRATION_BACKOFF_MS_MAX = 2000
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 5000
METADATA_MAX_WAIT_MS = 500
CLUSTER_ID = "tidelog-sim"


class FollowerMetadataLog:
    """A broker's local copy of the committed metadata log (production: a
    ``FileMetadataLog(follower=True)``). It holds what it has fetched — a prefix of
    the controller's committed log — and survives restarts, like a file."""

    def __init__(self, source):
        self.source = source
        self.fetched_offset = -1       # last committed offset fetched

    @property
    def end_offset(self) -> int:
        return self.fetched_offset + 1

    @property
    def committed_offset(self) -> int:
        return self.fetched_offset

    @property
    def log_start_offset(self) -> int:
        return self.source.log_start_offset

    def append_fetched(self, committed_offset: int) -> None:
        self.fetched_offset = max(self.fetched_offset, min(committed_offset, self.source.committed_offset))

    def read(self, start_offset: int):
        for offset, record in self.source.read(start_offset):
            if offset > self.fetched_offset:
                return
            yield offset, record

    def latest_snapshot(self) -> MetadataSnapshot | None:
        snapshot = self.source.latest_snapshot()
        return snapshot if snapshot is not None and snapshot.last_offset <= self.fetched_offset else None


class SimBroker(NetworkNode):
    def __init__(self, sim: "Simulation", broker_id: int, drift_ppm: int = 0):
        super().__init__(f"b{broker_id}", sim.loop, sim.network)
        self.sim = sim
        self.broker_id = broker_id
        self.clock = NodeClock(sim.loop, wall_offset_ms=0, drift_ppm=drift_ppm)
        self.root = os.path.join(sim.directory, self.name)
        os.makedirs(self.root, exist_ok=True)
        self.disk = SimDisk(self.root)
        self.log_dirs = [os.path.join(self.root, f"logs-{i}") for i in range(sim.config.log_dirs_per_broker)]
        self.metadata = FollowerMetadataLog(sim.controller.log)
        self.config = self._broker_config()
        self.fetcher_config = FetcherConfig.from_properties({
            "replica.fetch.wait.max.ms": sim.config.replica_fetch_wait_max_ms,
            "replica.fetch.backoff.ms": sim.config.replica_fetch_backoff_ms})
        self.starts = 0
        self.state = "NOT_RUNNING"
        self.broker_epoch = -1
        self.replica_manager: ReplicaManager | None = None
        self.log_manager: LogManager | None = None
        self.loader: MetadataLoader | None = None
        self._wakeups: dict[tuple[int, int], int] = {}
        self._isr_in_flight = False
        self._restore_high_watermarks: dict = {}

    def _broker_config(self) -> BrokerConfig:
        c = self.sim.config
        return BrokerConfig({
            "node.id": str(self.broker_id), "process.roles": "broker", "log.dirs": ",".join(self.log_dirs),
            "broker.session.timeout.ms": str(c.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(c.heartbeat_interval_ms),
            "replica.lag.time.max.ms": str(c.replica_lag_time_max_ms),
            "replica.high.watermark.checkpoint.interval.ms": str(c.hw_checkpoint_interval_ms)})

    # ================================================================ process

    @property
    def running(self) -> bool:
        return self.up

    def start(self) -> None:
        assert not self.up, f"{self.name} is already running"
        self.process_started()
        self.starts += 1
        self.state = STARTING
        self.broker_epoch = -1
        self._wakeups = {}
        self._isr_in_flight = False
        self.log_manager = LogManager(self.config["log.dirs"], self.clock, self.disk,
                                      default_config=static_log_config(self.config))
        self.loader = MetadataLoader(self.metadata)
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, self.clock, self.replication_settings, self.log_config,
            self._alive_broker_epoch, fetcher_config=self.fetcher_config,
            is_broker_alive=self._is_fetchable)
        manager = self.replica_manager.fetcher_manager
        manager.on_fetcher_added = self._on_fetcher_added
        self._restore_high_watermarks = self.log_manager.read_high_watermarks()
        self.publish()
        self.incarnation_id = uuid.UUID(int=(self.broker_id << 32) | self.starts)
        now = self.clock.monotonic_ms()
        self.next_isr_check_ms = now + self.config["replica.lag.time.max.ms"] // 2
        self.next_checkpoint_ms = now + self.config["replica.high.watermark.checkpoint.interval.ms"]
        self._register(50)
        self._fetch_metadata()
        self.after(self.sim.config.tick_ms, self._tick)

    def kill(self) -> None:
        """kill -9 (the machine stays up): nothing written is lost."""
        self._end()
        self.disk.process_exit()

    def power_cut(self, tear: bool) -> dict[str, int]:
        """The machine loses power: unsynced bytes are gone (maybe one torn write)."""
        self._end()
        return self.disk.power_cut(self.sim.rng, tear)

    def stop(self) -> None:
        """SIGTERM: controlled shutdown first (when others can take over), then a clean stop."""
        others = [b for b in self.loader.image.brokers.values() if b.broker_id != self.broker_id and not b.fenced]
        if self.state == RUNNING and others:
            self.state = PENDING_CONTROLLED_SHUTDOWN
            self.after(CONTROLLED_SHUTDOWN_TIMEOUT_MS, self._stop_now, "controlled shutdown timed out")
            return
        self._stop_now()

    def _stop_now(self) -> None:
        if not self.up:
            return
        self.replica_manager.shutdown()
        try:
            self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
        except Exception as e:   # an offline directory: as production, it is logged
            log.warning("%s: cannot write high watermarks at shutdown: %s", self.name, e)
        self.log_manager.shutdown()
        self._end()
        self.disk.process_exit()
        self.loop.trace.add(self.loop.now_ms, self.name, "stopped cleanly")

    def _end(self) -> None:
        self.process_ended()
        self.state = "NOT_RUNNING"

    # ================================================================ metadata

    @property
    def image(self):
        return self.loader.image

    def _alive_broker_epoch(self, broker_id: int) -> int | None:
        registration = self.image.brokers.get(broker_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return None
        return registration.broker_epoch

    def _is_fetchable(self, broker_id: int) -> bool:
        """``Broker._is_fetchable``: a leader is fetched from while registered and unfenced,
        also in controlled shutdown (it serves until its leaderships move)."""
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def replication_settings(self, topic: str) -> ReplicationSettings:
        values = topic_config_values(self.image, self.config, topic)
        return ReplicationSettings(min_insync_replicas=int(values["min.insync.replicas"][0]),
                                   replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"])

    def log_config(self, topic: str):
        return log_config(self.image, self.config, topic)

    def publish(self) -> None:
        """``Broker.publish``: replay committed metadata, become leader/follower.

        SPEC §8.2 order: the image is applied only once this process is registered
        and has fetched the metadata up to its own registration record, so the first
        image it acts on already has its previous incarnation fenced and its old
        leaderships moved. (``publish_before_registration`` reproduces server/broker.py,
        which applies the local metadata copy at start: a broker that lost data then
        leads, at the old epoch, replicas that truncate to it — scenario
        ``stale-metadata-restart``.)"""
        if not self.sim.config.publish_before_registration and (
                self.broker_epoch < 0 or self.metadata.fetched_offset < self.broker_epoch):
            return
        delta = self.loader.catch_up()
        if delta is None:
            return
        changes = delta.local_changes(self.broker_id)
        if changes.deletes:
            self.replica_manager.stop_partitions(sorted(changes.deletes), delete=True)
        states = {}
        for tp, local in sorted(list(changes.leaders.items()) + list(changes.followers.items())):
            p = local.partition
            states[tp] = PartitionState(p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas),
                                        p.partition_epoch)
        if states:
            self.replica_manager.apply_partition_states(states)
            for tp in states:
                restored = self._restore_high_watermarks.pop(tp, None)
                partition = self.replica_manager.get_partition(tp)
                if restored is not None and partition is not None and partition.is_leader:
                    partition.log.update_high_watermark(min(restored, partition.log.log_end_offset))
            self._kick_all()
        self._apply_config_changes()

    def _apply_config_changes(self) -> None:
        for tp, partition in list(self.replica_manager.partitions.items()):
            if isinstance(partition, Partition):
                new_config = self.log_config(tp.topic)
                if partition.log.config != new_config:
                    partition.log.update_config(new_config)
                partition.settings = self.replication_settings(tp.topic)

    def _fetch_metadata(self) -> None:
        self.rpc.request("ctl", "MetadataFetch", {"from_offset": self.metadata.end_offset,
                                                  "max_wait_ms": METADATA_MAX_WAIT_MS},
                         METADATA_MAX_WAIT_MS + self.sim.config.request_timeout_ms,
                         self._on_metadata, lambda error: self.after(200, self._fetch_metadata))

    def _on_metadata(self, body) -> None:
        self.metadata.append_fetched(body["committed_offset"])
        self.publish()
        self._fetch_metadata()

    # ================================================================ lifecycle

    def _register(self, backoff_ms: int) -> None:
        request = BrokerRegistrationRequest(
            self.broker_id, self.incarnation_id, CLUSTER_ID, (Endpoint("PLAINTEXT", self.name, 9092),))

        def on_reply(reply) -> None:
            if reply.error_code == ErrorCode.NONE:
                self.broker_epoch = reply.broker_epoch
                self.replica_manager.broker_epoch = reply.broker_epoch
                self.publish()
                self._heartbeat()
            else:
                retry()

        def retry(error: str = "") -> None:
            self.after(backoff_ms, lambda: self._register(min(backoff_ms * 2, REGISTRATION_BACKOFF_MS_MAX)))

        self.rpc.request("ctl", "BrokerRegistration", request, self.sim.config.request_timeout_ms,
                         on_reply, retry)

    def _heartbeat(self) -> None:
        interval_ms = self.config["broker.heartbeat.interval.ms"]
        request = BrokerHeartbeatRequest(self.broker_id, self.broker_epoch, self.image.offset,
                                         want_fence=self.state == STARTING,
                                         want_shut_down=self.state == PENDING_CONTROLLED_SHUTDOWN)

        def on_reply(reply) -> None:
            next_ms = interval_ms
            if reply.error_code == ErrorCode.STALE_BROKER_EPOCH and self.state != PENDING_CONTROLLED_SHUTDOWN:
                # Our registration was replaced — by a registration of an earlier
                # incarnation that the network delivered late (seed 11). server/broker.py
                # retries the heartbeat forever; registering again recovers.
                self.loop.trace.add(self.loop.now_ms, self.name, f"registration replaced ({reply.error_message}); "
                                    f"registering again")
                self._register(50)
                return
            if reply.error_code != ErrorCode.NONE:
                next_ms = min(interval_ms, 500)
            elif self.state == STARTING:
                if reply.is_caught_up:
                    self.state = RECOVERY
                next_ms = 10
            elif self.state == RECOVERY:
                if not reply.is_fenced:
                    self.state = RUNNING
                    self.loop.trace.add(self.loop.now_ms, self.name, "RUNNING (unfenced)")
                else:
                    next_ms = 10
            elif self.state == PENDING_CONTROLLED_SHUTDOWN:
                if reply.should_shut_down:
                    self._stop_now()
                    return
                next_ms = 50
            self.after(self.clock.to_global_delay(next_ms), self._heartbeat)

        def on_error(error: str) -> None:
            self.after(self.clock.to_global_delay(min(interval_ms, 500)), self._heartbeat)

        self.rpc.request("ctl", "BrokerHeartbeat", request, self.sim.config.request_timeout_ms, on_reply, on_error)

    # ================================================================ periodic work

    def _tick(self) -> None:
        """``Broker._tick_loop``: one pass of the periodic work."""
        now = self.clock.monotonic_ms()
        manager = self.replica_manager
        manager.on_tick(now)
        self._mark_failed_log_dirs_offline()
        if now >= self.next_isr_check_ms:
            manager.maybe_shrink_isr()
            self.next_isr_check_ms = now + self.config["replica.lag.time.max.ms"] // 2
        if manager.pending_isr_proposals:
            self._send_isr_proposals()
        try:
            if now >= self.next_checkpoint_ms:
                self.log_manager.write_high_watermarks(manager.high_watermarks())
                self.next_checkpoint_ms = now + self.config["replica.high.watermark.checkpoint.interval.ms"]
            self.log_manager.flush_dirty_logs()
        except Exception as e:   # production logs "periodic work failed" and carries on
            log.warning("%s: periodic work failed: %s", self.name, e)
        self._kick_all()
        self.after(self.clock.to_global_delay(self.sim.config.tick_ms), self._tick)

    def _mark_failed_log_dirs_offline(self) -> None:
        for tp in sorted(self.log_manager.offline_partitions):
            if self.replica_manager.partitions.get(tp) not in (None, OFFLINE):
                self.loop.trace.add(self.loop.now_ms, self.name, f"{tp} offline (log directory failed)")
                self.replica_manager.mark_offline(tp)

    def _send_isr_proposals(self) -> None:
        """Batch every pending ISR change into one AlterPartition (SPEC §5.5)."""
        manager = self.replica_manager
        if self._isr_in_flight or not manager.pending_isr_proposals:
            return
        proposals = manager.drain_isr_proposals()
        items, sent = [], {}
        for tp, proposal in sorted(proposals.items()):
            topic = self.image.topic(tp.topic)
            if topic is None:
                continue
            items.append(AlterPartitionItem(topic.topic_id, tp.partition, proposal.leader_epoch,
                                            proposal.partition_epoch, proposal.new_isr, 0,
                                            proposal.new_isr_broker_epochs))
            sent[(topic.topic_id, tp.partition)] = (tp, proposal)
        if not items:
            return
        self._isr_in_flight = True

        def on_reply(response) -> None:
            self._isr_in_flight = False
            answered = {(r.topic_id, r.partition_id): r for r in response.partitions}
            for key, (tp, proposal) in sent.items():
                result = answered.get(key)
                if result is None:
                    manager.on_alter_partition_response(tp, response.error_code, proposal=proposal)
                else:
                    manager.on_alter_partition_response(tp, result.error_code, result.leader_epoch,
                                                        result.partition_epoch, result.isr, proposal)

        def on_error(error: str) -> None:
            self._isr_in_flight = False
            for tp, proposal in sent.values():
                partition = manager.get_partition(tp)
                if partition is not None and partition.pending_proposal is proposal:
                    manager.pending_isr_proposals.setdefault(tp, proposal)

        self.rpc.request("ctl", "AlterPartition", AlterPartitionRequest(self.broker_id, self.broker_epoch,
                                                                        tuple(items)),
                         self.sim.config.request_timeout_ms, on_reply, on_error)

    # ================================================================ fetchers

    def _on_fetcher_added(self, fetcher) -> None:
        fetcher.wakeup = lambda: self.after(0, lambda: self._kick(fetcher))

    def _kick_all(self) -> None:
        for key in sorted(self.replica_manager.fetcher_manager.fetchers):
            self._kick(self.replica_manager.fetcher_manager.fetchers[key])

    def _current(self, fetcher) -> bool:
        fetchers = self.replica_manager.fetcher_manager.fetchers
        return self.up and fetchers.get((fetcher.source_broker_id, fetcher.fetcher_id)) is fetcher

    def _kick(self, fetcher) -> None:
        """One turn of ``FetcherDriver._run``: send the next plan, or sleep."""
        if not self._current(fetcher) or fetcher.in_flight is not None:
            return
        now = self.clock.monotonic_ms()
        plan = fetcher.poll(now)
        if plan is None:
            wakeup = fetcher.next_wakeup_ms(now)
            key = (fetcher.source_broker_id, fetcher.fetcher_id)
            if wakeup is not None and self._wakeups.get(key, 1 << 62) > wakeup:
                self._wakeups[key] = wakeup
                self.after(self.clock.to_global_delay(wakeup - now), lambda: self._woken(fetcher, key, wakeup))
            return
        kind = {FetchRequestPlan: "Fetch", OffsetsForLeaderEpochPlan: "OffsetsForLeaderEpoch",
                ListOffsetsPlan: "ListOffsets"}[type(plan)]
        timeout_ms = getattr(plan, "max_wait_ms", 0) + self.sim.config.request_timeout_ms

        def on_reply(results) -> None:
            if self._current(fetcher):
                fetcher.on_response(plan, results, self.clock.monotonic_ms())
                self._kick(fetcher)

        def on_error(error: str) -> None:
            if self._current(fetcher):
                fetcher.on_request_failed(plan, self.clock.monotonic_ms())
                self._kick(fetcher)

        self.rpc.request(f"b{plan.source_broker_id}", kind, plan, timeout_ms, on_reply, on_error)

    def _woken(self, fetcher, key, wakeup) -> None:
        if self._wakeups.get(key) == wakeup:
            del self._wakeups[key]
        self._kick(fetcher)

    # ================================================================ requests

    def on_request(self, message) -> None:
        handler = getattr(self, "_handle_" + message.kind, None)
        assert handler is not None, f"{self.name}: no handler for {message.kind}"
        handler(message)

    def _handle_Fetch(self, message) -> None:
        plan: FetchRequestPlan = message.body

        def on_done(results) -> None:
            if self.up:
                self.reply(message, {tp: FetchPartitionResult.from_read_result(r) for tp, r in results.items()})

        self.replica_manager.fetch_messages(plan.to_fetch_params(), on_done)

    def _handle_OffsetsForLeaderEpoch(self, message) -> None:
        self.reply(message, self.replica_manager.last_offset_for_leader_epoch(dict(message.body.partitions)))

    def _handle_ListOffsets(self, message) -> None:
        self.reply(message, self.replica_manager.fetch_leader_offsets(dict(message.body.partitions)))

    def _handle_Produce(self, message) -> None:
        body = message.body
        tp = body["tp"]
        self.sim.checker.on_produce_received(body["values"])

        def on_done(responses) -> None:
            if body["acks"] != 0 and self.up:
                self.reply(message, responses[tp])

        self.replica_manager.append_records(body["acks"], body["timeout_ms"], {tp: body["batch"]}, on_done)

    def _handle_ClientFetch(self, message) -> None:
        body = message.body
        tp = body["tp"]
        params = FetchParams(replica_id=-1, max_wait_ms=body["max_wait_ms"], min_bytes=1, max_bytes=1 << 20,
                             isolation=Isolation.HIGH_WATERMARK,
                             partitions={tp: FetchPartitionRequest(body["offset"], 1 << 20)})

        def on_done(results) -> None:
            if self.up:
                self.reply(message, FetchPartitionResult.from_read_result(results[tp]))

        self.replica_manager.fetch_messages(params, on_done)

    def _handle_Metadata(self, message) -> None:
        answer = {}
        for tp in message.body["topic_partitions"]:
            partition = self.image.partition(tp)
            answer[tp] = None if partition is None else partition.leader
        self.reply(message, answer)

    # ================================================================ looking

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.replica_manager.get_partition(tp) if self.up else None
