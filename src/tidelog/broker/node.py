"""The broker, sans I/O: one ``BrokerNode`` that ``tidelog serve`` and the simulator both run.

Theory of operation. A ``BrokerNode`` owns what a broker process is made of — the
``LogManager`` (logs recovered at construction), a ``MetadataLoader`` over the
broker's copy of the committed metadata log, the ``ReplicaManager`` with its
purgatories and fetchers — and the broker lifecycle of Kafka's
``BrokerLifecycleManager`` (``lifecycle.py``). It never touches a socket, a timer
or the wall clock: the driver (``server/runtime.py`` over asyncio,
``sim/broker.py`` over the simulator) feeds it inputs and carries out what comes
back, as etcd raft's ``Step``/``Ready`` or h11's events do.

Inputs, each a method that returns the effects to carry out, in order:

    start(now_ms)                          → SendRegistration
    on_registration_reply / _failed        → SendHeartbeat soon, or retry with backoff
    on_heartbeat_reply / _failed           → lifecycle moves; StopNow when allowed
    on_metadata_committed()                → apply the new image: become leader /
                                             follower, FetcherAdded / FetcherRemoved,
                                             MetadataPublished
    on_alter_partition_reply / _failed     → ISR changes applied or queued again
    on_assign_replicas_to_dirs_reply / _failed → directory placements sent again if needed
    on_tick(now_ms)                        → due work: purgatory expiry, offline log
                                             dirs, ISR shrink, checkpoints, flush,
                                             retention, heartbeat, AlterPartition,
                                             AssignReplicasToDirs, the group
                                             coordinator's deadlines, a step of each
                                             replica moving between log directories,
                                             ResolveInDoubt for a transaction an
                                             unclean election left in doubt, or open
                                             longer than transaction.max.timeout.ms
    on_in_doubt_answer                     → a doubt still open is asked about again
    alter_replica_log_dirs(dirs)           → AlterReplicaLogDirs: moves started
    on_stop_requested(now_ms)              → controlled shutdown, or StopNow
    shutdown()                             → final checkpoints; logs closed

``next_wakeup_ms()`` says when ``on_tick`` is next due. Requests from clients and
other brokers are answered by ``replica_manager`` (produce, fetch, the follower's
OffsetsForLeaderEpoch and ListOffsets), so one set of rules serves every world;
consumer-group requests by ``group_coordinator`` (``tidelog.group``), which loads
and unloads the ``__consumer_offsets`` partitions this broker leads after every
metadata change.

The image is applied only once this incarnation is registered and its copy of
the metadata log has reached its own registration record: by then the
controller has fenced the previous incarnation and moved its leaderships, so a
broker that restarts with less data than before never leads at its old epoch.

Errors come in three tiers: expected conditions are Kafka error codes inside the
replica manager; a storage failure takes the affected log directory's partitions
offline and is reported to the controller (below); anything else escaping a method here (an ``AssertionError``, an
``IllegalTransition``) is a bug, and the driver stops the broker.

Log directories (KIP-858). The registration carries the ids of the online log
directories; every heartbeat carries the ids of those that failed
(``offline_log_dirs``), and a directory that fails makes the next heartbeat go at
once rather than at the next interval (Kafka's ``propagateDirectoryFailure``): the
controller then moves leadership and ISR membership of that directory's partitions
to other brokers. With no online directory left the broker asks to be fenced
(``want_fence``) and stays up, fenced, until it is restarted with working disks
(Kafka's broker halts; staying up lets the report reach the controller first, and
the operator sees the broker). Where a replica's log lives is told to the
controller with AssignReplicasToDirs whenever the metadata says otherwise — a
broker with several directories, a replaced disk, a log in a directory that failed
before it was placed — one request in flight, a placement sent again after
``ASSIGNMENT_RETRY_MS`` if the metadata still does not show it. A replica moved to
another directory (AlterReplicaLogDirs) is copied one bounded step per tick
(``replica.fetch.max.bytes``, more when writes outpace it; ``storage/future_log.py``)
while it has work, then swapped in: the partition serves the new log from that
moment, and the placement that follows tells the controller.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from tidelog.broker.config import BrokerConfig
from tidelog.broker.lifecycle import BrokerState, LifecycleEvent, next_state
from tidelog.broker.replication_quota import ReplicationQuotas
from tidelog.broker.topic_configs import log_config, static_log_config, topic_config_values
from tidelog.controller.feature_control import broker_features
from tidelog.controller.messages import (
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
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from tidelog.group.shard import GroupConfig
from tidelog.txn.coordinator import TRANSACTION_STATE_TOPIC, TransactionCoordinator
from tidelog.txn.shard import TxnConfig
from tidelog.metadata.loader import MetadataLoader
from tidelog.metadata.records import Endpoint
from tidelog.replication.fetcher import FetcherConfig, FetcherState
from tidelog.replication.metadata_changes import apply_local_changes, apply_waiting, delete_stray_logs
from tidelog.replication.partition import IsrProposal, Partition, ReplicationSettings
from tidelog.replication.replica_manager import OFFLINE, ReplicaManager
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Background
from tidelog.storage.log_manager import LogManager

logger = logging.getLogger("tidelog.broker")

REGISTRATION_BACKOFF_MS_MIN = 50
REGISTRATION_BACKOFF_MS_MAX = 2_000
HEARTBEAT_RETRY_MS_MAX = 500             # after a failed heartbeat (Kafka's failure backoff)
HEARTBEAT_CATCH_UP_MS = 10               # while catching up or waiting to be unfenced
HEARTBEAT_SHUTDOWN_MS = 50               # while waiting for leaderships to move away
RECOVERY_CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms
TICK_INTERVAL_MS = 50
# New partitions hosted per publish or tick: a metadata change creating thousands (one
# CreateTopics) hosts them in slices, the event loop serving requests and heartbeats in
# between (~1 ms each on a slow disk: four file creations; docs/performance.md).
PARTITIONS_HOSTED_PER_SLICE = 100
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 30_000
ASSIGNMENT_RETRY_MS = 1_000              # a placement the metadata does not show yet is sent again
REPLICA_MOVE_INTERVAL_MS = 1             # between two copy steps of a replica moving between log dirs

FETCHER_PROPERTIES = ("num.replica.fetchers", "replica.fetch.max.bytes", "replica.fetch.response.max.bytes",
                      "replica.fetch.wait.max.ms", "replica.fetch.min.bytes", "replica.fetch.backoff.ms")


# ---------------------------------------------------------------- effects

@dataclass(frozen=True)
class SendRegistration:
    request: BrokerRegistrationRequest


@dataclass(frozen=True)
class SendHeartbeat:
    request: BrokerHeartbeatRequest


@dataclass(frozen=True)
class SendAlterPartition:
    request: AlterPartitionRequest
    # (topic id, partition) → (topic partition, the proposal sent), to route the answer
    sent: dict[tuple[Any, int], tuple[TopicPartition, IsrProposal]]


@dataclass(frozen=True)
class SendAssignReplicasToDirs:
    request: AssignReplicasToDirsRequest


@dataclass(frozen=True)
class FetcherAdded:
    fetcher: FetcherState


@dataclass(frozen=True)
class FetcherRemoved:
    fetcher: FetcherState


@dataclass(frozen=True)
class StateChanged:
    old: BrokerState
    new: BrokerState
    reason: str


@dataclass(frozen=True)
class MetadataPublished:
    offset: int


@dataclass(frozen=True)
class StopNow:
    reason: str


@dataclass(frozen=True)
class ResolveInDoubt:
    """Ask the coordinators about producer ``producer_id``'s transaction this leader holds
    in doubt at ``producer_epoch`` since its unclean election at ``leader_epoch``, and
    write the verdict's marker (``TxnRequests.resolve_in_doubt``); the outcome comes
    back as ``on_in_doubt_answer``."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    leader_epoch: int


Effect = (SendRegistration | SendHeartbeat | SendAlterPartition | SendAssignReplicasToDirs | FetcherAdded
          | FetcherRemoved | StateChanged | MetadataPublished | StopNow | ResolveInDoubt)


class BrokerNode:
    def __init__(self, config: BrokerConfig, clock: Clock, metadata_log, cluster_id: str,
                 incarnation_id: uuid.UUID, listeners: tuple[Endpoint, ...], fs=None,
                 rack: str | None = None, tick_interval_ms: int = TICK_INTERVAL_MS,
                 controlled_shutdown_timeout_ms: int = CONTROLLED_SHUTDOWN_TIMEOUT_MS,
                 new_member_id: Callable[[str], str] | None = None, background: Background | None = None,
                 new_directory_id: Callable[[], uuid.UUID] | None = None):
        self.config = config
        self.clock = clock
        self.node_id: int = config["node.id"]
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.listeners = listeners
        self.rack = rack if rack is not None else config["broker.rack"]   # registered; KIP-392
        self.tick_interval_ms = tick_interval_ms
        self.controlled_shutdown_timeout_ms = controlled_shutdown_timeout_ms
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self._effects: list[Effect] = []
        self.metadata_log = metadata_log
        self.loader = MetadataLoader(metadata_log)
        self.log_manager = LogManager(config["log.dirs"], clock, fs, default_config=static_log_config(config),
                                      background=background, new_directory_id=new_directory_id)
        self.replica_manager = ReplicaManager(
            self.node_id, self.log_manager, clock, self.replication_settings, self.log_config,
            self._alive_broker_epoch,
            fetcher_config=FetcherConfig.from_properties({k: config[k] for k in FETCHER_PROPERTIES}),
            is_broker_alive=self._is_fetchable)
        self.replica_manager.in_metadata = lambda tp: self.image.partition(tp) is not None
        # KIP-392: consumers may be sent to followers, so followers learn the high watermark at once.
        self.replica_manager.prompt_follower_high_watermark = config["replica.selector.class"] is not None
        # Replication throttles (KIP-73): the leader side is read by the Fetch handler, the follower's by its fetchers.
        self.replication_quotas = ReplicationQuotas(self.node_id, config)
        fetchers = self.replica_manager.fetcher_manager
        fetchers.quota = self.replication_quotas.follower
        fetchers.on_fetcher_added = lambda fetcher: self._effects.append(FetcherAdded(fetcher))
        fetchers.on_fetcher_removed = lambda fetcher: self._effects.append(FetcherRemoved(fetcher))
        self._restore_high_watermarks = self.log_manager.read_high_watermarks()
        self._waiting_states: dict = {}          # placed here, not hosted yet: ``_host_waiting``
        self._strays_deleted = False             # the first publish after start looks for stray logs
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_settings(config), self.replica_manager, clock, self.offsets_topic_partition_count,
            new_member_id)
        self.txn_coordinator = TransactionCoordinator(
            TxnConfig.from_settings(config), self.replica_manager, clock, self.transaction_topic_partition_count,
            self._leader_of, lambda tp: self.image.partition(tp) is not None)
        # Timers, in this node's monotonic milliseconds; None = not armed.
        self._registration_backoff_ms = REGISTRATION_BACKOFF_MS_MIN
        self._registration_in_flight = False
        self._next_registration_ms: int | None = None
        self._heartbeat_in_flight = False
        self._next_heartbeat_ms: int | None = None
        self._shutdown_deadline_ms: int | None = None
        self._isr_in_flight = False
        # Log directories (KIP-858): the offline ones the in-flight heartbeat reports,
        # those the controller has acknowledged, and placements sent (tp → (dir, ms)).
        self._heartbeat_offline_dirs: tuple[uuid.UUID, ...] = ()
        self._reported_offline_dirs: tuple[uuid.UUID, ...] = ()
        self._assignment_in_flight = False
        self._assignments_sent: dict[TopicPartition, tuple[uuid.UUID, int]] = {}
        # What the last placement check saw (image, placements) and when a retry is due:
        # nothing changed and nothing due means nothing to send, without a scan.
        self._assignments_checked: tuple[object, int] | None = None   # (image, placements_version)
        self._assignments_retry_ms: int | None = None
        self._topic_configs_of = self._configs_applied = None   # image.configs: cached / applied
        self._topic_configs_cache: dict[str, tuple[dict[str, tuple[str, str]], LogConfig]] = {}
        self._seen_offline_dirs: frozenset[str] = frozenset()
        self._next_tick_ms = self._next_isr_check_ms = 0
        self._next_high_watermark_checkpoint_ms = self._next_recovery_checkpoint_ms = 0
        self._next_retention_ms = self._next_producer_expiration_ms = self._next_old_transaction_check_ms = 0
        self._partitions_in_doubt: set[TopicPartition] = set()    # led here, transactions in doubt

    # ============================================================ inputs

    def start(self, now_ms: int) -> list[Effect]:
        self._transition(LifecycleEvent.START, "process started")
        self._next_isr_check_ms = now_ms + self.config["replica.lag.time.max.ms"] // 2
        self._next_high_watermark_checkpoint_ms = now_ms + self.config["replica.high.watermark.checkpoint.interval.ms"]
        self._next_recovery_checkpoint_ms = now_ms + RECOVERY_CHECKPOINT_INTERVAL_MS
        self._next_retention_ms = now_ms + self.config["log.retention.check.interval.ms"]
        self._next_producer_expiration_ms = now_ms + self.config["producer.id.expiration.check.interval.ms"]
        self._next_old_transaction_check_ms = now_ms + self.config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        self._next_tick_ms = now_ms + self.tick_interval_ms
        self._send_registration()
        return self._drain()

    def on_registration_reply(self, reply: BrokerRegistrationReply, now_ms: int) -> list[Effect]:
        self._registration_in_flight = False
        if not self._running_process():
            return self._drain()
        if reply.error_code == ErrorCode.NONE:
            self.broker_epoch = reply.broker_epoch
            self.replica_manager.broker_epoch = reply.broker_epoch
            self._registration_backoff_ms = REGISTRATION_BACKOFF_MS_MIN
            logger.info("broker %d registered with the controller: broker epoch %d", self.node_id, self.broker_epoch)
            self._publish()
            self._next_heartbeat_ms = now_ms
            self._maybe_send_heartbeat(now_ms)
        else:
            logger.warning("registration refused: %s%s; retrying", reply.error_code.name,
                        f" ({reply.error_message})" if reply.error_message else "")
            self._retry_registration(now_ms)
        return self._drain()

    def on_registration_failed(self, now_ms: int, error: str = "") -> list[Effect]:
        self._registration_in_flight = False
        if self._running_process():
            logger.info("controller not reachable for registration (%s); retrying", error)
            self._retry_registration(now_ms)
        return self._drain()

    def on_heartbeat_reply(self, reply: BrokerHeartbeatReply, now_ms: int) -> list[Effect]:
        """Kafka's BrokerLifecycleManager response handling, state by state."""
        self._heartbeat_in_flight = False
        if self.broker_epoch < 0 or not self._running_process():
            return self._drain()
        interval_ms = self.config["broker.heartbeat.interval.ms"]
        next_ms = interval_ms
        state = self.state
        if reply.error_code == ErrorCode.STALE_BROKER_EPOCH:
            self._on_registration_lost(reply, now_ms)
            return self._drain()
        if reply.error_code != ErrorCode.NONE:
            logger.warning("heartbeat answered %s", reply.error_code.name)
            next_ms = min(interval_ms, HEARTBEAT_RETRY_MS_MAX)
        elif state == BrokerState.STARTING:
            if reply.is_caught_up:
                self._transition(LifecycleEvent.CAUGHT_UP, "the controller says the metadata is caught up")
            next_ms = HEARTBEAT_CATCH_UP_MS
        elif state == BrokerState.RECOVERY:
            if not reply.is_fenced:
                self._transition(LifecycleEvent.UNFENCED, "the controller unfenced this broker")
            elif not self._no_online_log_dir():     # else fenced for good: no hurry
                next_ms = HEARTBEAT_CATCH_UP_MS
        elif state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if reply.should_shut_down:
                self._shut_down("controlled shutdown complete: this broker leads no partition")
                return self._drain()
            next_ms = HEARTBEAT_SHUTDOWN_MS
        if reply.error_code == ErrorCode.NONE:
            self._reported_offline_dirs = self._heartbeat_offline_dirs
            if self._offline_dirs_unreported():
                next_ms = 0                 # a directory failed while this heartbeat was out
        self._next_heartbeat_ms = now_ms + next_ms
        return self._drain()

    def on_heartbeat_failed(self, now_ms: int, error: str = "") -> list[Effect]:
        self._heartbeat_in_flight = False
        if self.broker_epoch >= 0 and self._running_process():
            logger.warning("heartbeat failed: %s", error)
            self._next_heartbeat_ms = now_ms + min(self.config["broker.heartbeat.interval.ms"],
                                                   HEARTBEAT_RETRY_MS_MAX)
        return self._drain()

    def on_metadata_committed(self) -> list[Effect]:
        """The broker's copy of the metadata log has new committed records."""
        if self._running_process():
            self._publish()
        return self._drain()

    def on_alter_partition_reply(self, response: AlterPartitionResponse, sent, now_ms: int) -> list[Effect]:
        self._isr_in_flight = False
        manager = self.replica_manager
        answered = {(r.topic_id, r.partition_id): r for r in response.partitions}
        woken: list[TopicPartition] = []     # woken once: a rejoining follower's ISR expansions come together
        for key, (tp, proposal) in sent.items():
            result = answered.get(key)
            if result is None:
                manager.on_alter_partition_response(tp, response.error_code, proposal=proposal, woken=woken)
            else:
                manager.on_alter_partition_response(tp, result.error_code, result.leader_epoch,
                                                    result.partition_epoch, result.isr, proposal, woken)
        manager.wake_all(woken)
        return self._drain()

    def on_alter_partition_failed(self, sent, now_ms: int, error: str = "") -> list[Effect]:
        """No answer: queue each proposal again unless a newer one replaced it."""
        self._isr_in_flight = False
        logger.warning("AlterPartition failed (%s); will retry", error)
        for tp, proposal in sent.values():
            partition = self.replica_manager.get_partition(tp)
            if partition is not None and partition.pending_proposal is proposal:
                self.replica_manager.pending_isr_proposals.setdefault(tp, proposal)
        return self._drain()

    def on_assign_replicas_to_dirs_reply(self, response: AssignReplicasToDirsResponse, now_ms: int) -> list[Effect]:
        """Placements the controller took show in the metadata soon; the others (and
        all of them on a request-level error) are sent again after ASSIGNMENT_RETRY_MS
        if the metadata still disagrees."""
        self._assignment_in_flight = False
        if response.error_code != ErrorCode.NONE:
            logger.warning("AssignReplicasToDirs answered %s", response.error_code.name)
        for assignment, code in response.results:
            if code != ErrorCode.NONE:
                logger.info("AssignReplicasToDirs: %s-%d answered %s", assignment.topic_id, assignment.partition_id,
                         code.name)
        return self._drain()

    def on_assign_replicas_to_dirs_failed(self, now_ms: int, error: str = "") -> list[Effect]:
        self._assignment_in_flight = False
        logger.warning("AssignReplicasToDirs failed (%s); will retry", error)
        return self._drain()

    def on_tick(self, now_ms: int) -> list[Effect]:
        if not self._running_process():
            return self._drain()
        manager = self.replica_manager
        if self._waiting_states and self._may_publish():
            self._host_waiting()
        manager.on_tick(now_ms)
        self.group_coordinator.on_tick(self.group_coordinator.now_ms())
        self.txn_coordinator.on_tick(self.txn_coordinator.now_ms())
        if now_ms >= self._next_tick_ms:
            self._next_tick_ms = now_ms + self.tick_interval_ms
            self._periodic_work(now_ms)
        if self.log_manager.has_future_work():
            self._move_replicas()
        self._mark_failed_log_dirs_offline()       # failed by a request, a fetch or the work above
        if self._offline_dirs_unreported() and self._next_heartbeat_ms is not None:
            self._next_heartbeat_ms = min(self._next_heartbeat_ms, now_ms)    # tell the controller now
        if self._next_registration_ms is not None and now_ms >= self._next_registration_ms:
            self._next_registration_ms = None
            self._send_registration()
        self._maybe_send_heartbeat(now_ms)
        if self._shutdown_deadline_ms is not None and now_ms >= self._shutdown_deadline_ms:
            self._shut_down(f"controlled shutdown did not complete within "
                            f"{self.controlled_shutdown_timeout_ms} ms; stopping anyway")
            return self._drain()
        self._maybe_send_alter_partition()
        self._maybe_send_assignments(now_ms)
        self._question_old_transactions(now_ms)
        self._ask_about_transactions_in_doubt(now_ms)
        return self._drain()

    def on_in_doubt_answer(self, asked: ResolveInDoubt, answered: bool, reason: str, now_ms: int) -> list[Effect]:
        """The outcome of a ``ResolveInDoubt`` (``answered`` False: no answer, or the
        verdict's marker was not written): a transaction still in doubt is asked about
        again after a backoff."""
        partition = self.replica_manager.get_partition(asked.topic_partition)
        if partition is not None:
            partition.on_in_doubt_answer(asked.producer_id, asked.producer_epoch, asked.leader_epoch, answered,
                                         reason, now_ms)
        return self._drain()

    def on_stop_requested(self, now_ms: int) -> list[Effect]:
        """SIGTERM: a controlled shutdown when other brokers can take over, else stop now."""
        state = self.state
        if state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return self._drain()
        if state == BrokerState.NOT_RUNNING:
            self._effects.append(StopNow("stop requested before start"))
            return self._drain()
        others = [b for b in self.image.brokers.values() if b.broker_id != self.node_id and not b.fenced]
        if state == BrokerState.RUNNING and others and self.broker_epoch >= 0:
            # First, as Kafka's BrokerServer: partitions whose ISR this broker leaves stop fetching.
            self.replica_manager.begin_controlled_shutdown()
            self._transition(LifecycleEvent.CONTROLLED_SHUTDOWN, "stop requested: moving leaderships away")
            self._shutdown_deadline_ms = now_ms + self.controlled_shutdown_timeout_ms
            self._next_heartbeat_ms = now_ms
            self._maybe_send_heartbeat(now_ms)
        else:
            self._shut_down("stop requested" + ("" if others else ": no other broker to hand leadership to"))
        return self._drain()

    def shutdown(self) -> None:
        """The clean end of the process: waiting requests answered, checkpoints written,
        logs flushed and closed, the clean-shutdown marker written."""
        if self.state not in (BrokerState.SHUTTING_DOWN, BrokerState.NOT_RUNNING):
            self._transition(LifecycleEvent.SHUT_DOWN, "shutdown")
        self.group_coordinator.unload_all()
        self.txn_coordinator.unload_all()
        self.replica_manager.shutdown()
        try:
            self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
        except (OSError, StorageError) as e:    # that directory is offline now; the rest close cleanly
            logger.warning("cannot write high watermarks at shutdown: %s", e)
        self.log_manager.shutdown(self.broker_epoch)
        if self.state == BrokerState.SHUTTING_DOWN:
            self._transition(LifecycleEvent.STOPPED, "logs closed")
        self._effects.clear()

    # ============================================================ queries

    @property
    def image(self):
        return self.loader.image

    def next_wakeup_ms(self) -> int:
        """When ``on_tick`` is next due."""
        heartbeat_ms = None if self._heartbeat_in_flight or self.broker_epoch < 0 else self._next_heartbeat_ms
        candidates = [self._next_tick_ms, self._next_registration_ms, heartbeat_ms,
                      self._shutdown_deadline_ms, self.replica_manager.next_deadline_ms()]
        if self.log_manager.has_future_work():
            candidates.append(self.clock.monotonic_ms() + REPLICA_MOVE_INTERVAL_MS)
        if self._waiting_states and self._may_publish():
            candidates.append(self.clock.monotonic_ms())
        for tp in self._partitions_in_doubt:
            partition = self.replica_manager.get_partition(tp)
            if partition is not None and partition.is_leader:
                candidates.append(partition.next_in_doubt_question_ms())
        for coordinator in (self.group_coordinator, self.txn_coordinator):
            deadline = coordinator.next_wakeup_ms()      # on the coordinator's clock (monotonic or wall)
            if deadline is not None:
                candidates.append(self.clock.monotonic_ms() + max(0, deadline - coordinator.now_ms()))
        return min(c for c in candidates if c is not None)

    def offsets_topic_partition_count(self) -> int:
        """Partitions of ``__consumer_offsets``: as created, or as it will be."""
        topic = self.image.topic(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else self.config["offsets.topic.num.partitions"]

    def transaction_topic_partition_count(self) -> int:
        """Partitions of ``__transaction_state``: as created, or as it will be."""
        topic = self.image.topic(TRANSACTION_STATE_TOPIC)
        return len(topic.partitions) if topic is not None else self.config["transaction.state.log.num.partitions"]

    def _leader_of(self, tp) -> int:
        """The current leader of ``tp`` in the metadata image, or -1."""
        registration = self.image.partition(tp)
        return registration.leader if registration is not None and registration.leader >= 0 else -1

    def replication_settings(self, topic: str) -> ReplicationSettings:
        values = self._topic_configs(topic)[0]
        return ReplicationSettings(min_insync_replicas=int(values["min.insync.replicas"][0]),
                                   replica_lag_time_max_ms=self.config["replica.lag.time.max.ms"])

    def log_config(self, topic: str) -> LogConfig:
        return self._topic_configs(topic)[1]

    def topic_config_values(self, topic: str) -> dict[str, tuple[str, str]]:
        return dict(self._topic_configs(topic)[0])

    def _topic_configs(self, topic: str) -> tuple[dict[str, tuple[str, str]], LogConfig]:
        """``topic``'s config values and LogConfig, resolved once per set of configs (an
        image keeps its predecessor's ``configs`` when no config record changed them): a
        broker asks for them per partition, and resolving costs a millisecond, so 10,000
        partitions must not resolve 10,000 times, nor again at every publish."""
        image = self.image
        if self._topic_configs_of is not image.configs:
            self._topic_configs_of, self._topic_configs_cache = image.configs, {}
        cached = self._topic_configs_cache.get(topic)
        if cached is None:
            cached = self._topic_configs_cache[topic] = (topic_config_values(image, self.config, topic),
                                                         log_config(image, self.config, topic))
        return cached

    def _alive_broker_epoch(self, broker_id: int) -> int | None:
        """The epoch of a broker that may join an ISR: registered, unfenced, not shutting down."""
        registration = self.image.brokers.get(broker_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return None
        return registration.broker_epoch

    def _is_fetchable(self, broker_id: int) -> bool:
        """A leader is fetched from while registered and unfenced — also while it is in
        controlled shutdown (it serves until its leaderships move)."""
        registration = self.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    # ============================================================ lifecycle

    def _running_process(self) -> bool:
        return self.state not in (BrokerState.NOT_RUNNING, BrokerState.SHUTTING_DOWN)

    def _transition(self, event: LifecycleEvent, reason: str) -> None:
        old = self.state
        self.state = next_state(old, event)
        if self.state != old:
            logger.info("broker %d: %s → %s (%s)", self.node_id, old.name, self.state.name, reason)
            self._effects.append(StateChanged(old, self.state, reason))

    def _shut_down(self, reason: str) -> None:
        self._transition(LifecycleEvent.SHUT_DOWN, reason)
        self._shutdown_deadline_ms = None
        self._next_heartbeat_ms = None
        self._next_registration_ms = None
        self._effects.append(StopNow(reason))

    def _send_registration(self) -> None:
        self._registration_in_flight = True
        self._reported_offline_dirs = ()
        self._effects.append(SendRegistration(BrokerRegistrationRequest(
            self.node_id, self.incarnation_id, self.cluster_id, self.listeners, features=broker_features(),
            rack=self.rack, log_dirs=self.log_manager.directory_ids,
            previous_broker_epoch=self.log_manager.previous_broker_epoch)))

    def _retry_registration(self, now_ms: int) -> None:
        self._next_registration_ms = now_ms + self._registration_backoff_ms
        self._registration_backoff_ms = min(self._registration_backoff_ms * 2, REGISTRATION_BACKOFF_MS_MAX)

    def _on_registration_lost(self, reply: BrokerHeartbeatReply, now_ms: int) -> None:
        """STALE_BROKER_EPOCH: the registration we heartbeat for was replaced. Register
        again (same incarnation); stop applying metadata until the new registration is
        in our copy of the log, as at start."""
        reason = f"registration replaced ({reply.error_message or 'STALE_BROKER_EPOCH'})"
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self._transition(LifecycleEvent.REGISTRATION_LOST, reason + "; stopping")
            self._shutdown_deadline_ms = None
            self._next_heartbeat_ms = None
            self._effects.append(StopNow(reason))
            return
        self._transition(LifecycleEvent.REGISTRATION_LOST, reason + "; registering again")
        self.broker_epoch = -1
        self.replica_manager.broker_epoch = -1
        self._next_heartbeat_ms = None
        self._send_registration()

    def _maybe_send_heartbeat(self, now_ms: int) -> None:
        if (self._heartbeat_in_flight or self.broker_epoch < 0 or self._next_heartbeat_ms is None
                or now_ms < self._next_heartbeat_ms):
            return
        self._heartbeat_in_flight = True
        self._next_heartbeat_ms = None
        self._heartbeat_offline_dirs = self.log_manager.offline_directory_ids
        self._effects.append(SendHeartbeat(BrokerHeartbeatRequest(
            self.node_id, self.broker_epoch, self.image.offset,
            want_fence=self.state == BrokerState.STARTING or self._no_online_log_dir(),
            want_shut_down=self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN,
            offline_log_dirs=self._heartbeat_offline_dirs,
            replica_log_ends=self._leaderless_log_ends())))

    def _leaderless_log_ends(self) -> tuple[ReplicaLogEnd, ...] | None:
        """Where this broker's replicas of leaderless partitions end, for the
        controller's choice of the longest log (KIP-966 unclean recovery), if
        ``tidelog.unclean.recovery.log.ends.enable``. Only once this incarnation's
        metadata is applied; an offline replica says nothing, one without a log says
        it is empty — unless a log directory is offline and the metadata does not place
        the replica in an online one. A scan of the image: 0.45 ms per heartbeat at 10,000 partitions."""
        if not self.config["tidelog.unclean.recovery.log.ends.enable"]:
            return None
        if self.broker_epoch < 0 or self.image.offset < self.broker_epoch:
            return ()
        ends = []
        # A log directory that failed as this process started is offline before any of its
        # logs was listed: a replica without a log may live there, and is empty only if
        # the metadata places it in a directory that is online (simulator seed 1921: a
        # broker back on a failed disk said its replicas were empty, and the last known
        # leader, back on a new disk, was elected over the records it held).
        online = set(self.log_manager.directory_ids) if self.log_manager.offline_dirs else None
        for name in self.image.topic_names():
            topic = self.image.topic(name)
            for partition_id, partition in topic.partitions.items():
                if partition.leader >= 0 or self.node_id not in partition.replicas:
                    continue
                tp = TopicPartition(name, partition_id)
                if self.log_manager.is_offline(tp):
                    continue
                log = self.log_manager.get_log(tp)
                if log is None and online is not None and partition.directory(self.node_id) not in online:
                    continue
                epoch = -1 if log is None or log.latest_epoch is None else log.latest_epoch
                ends.append(ReplicaLogEnd(topic.topic_id, partition_id, epoch,
                                          0 if log is None else log.log_end_offset))
        return tuple(ends)

    def _offline_dirs_unreported(self) -> bool:
        return self.broker_epoch >= 0 and self.log_manager.offline_directory_ids != self._reported_offline_dirs

    def _no_online_log_dir(self) -> bool:
        return len(self.log_manager.offline_dirs) == len(self.log_manager.log_dirs)

    # ============================================================ metadata

    def _publish(self) -> None:
        """Replay newly committed metadata and become leader/follower as it says —
        only past this incarnation's own registration record."""
        if not self._may_publish():
            return
        delta = self.loader.catch_up()
        if delta is None:
            return
        states = apply_local_changes(self.replica_manager, delta, self.node_id, self._waiting_states,
                                     PARTITIONS_HOSTED_PER_SLICE)
        if not self._strays_deleted or self.loader.from_snapshot:
            # The image now holds everything up to our registration (or a snapshot replaced
            # it: a delta from nothing names no deletion either).
            self._strays_deleted = True
            delete_stray_logs(self.replica_manager, self.image, self.node_id)
        self._on_states_applied(states)

    def _host_waiting(self) -> None:
        """The next slice of the partitions a publish left waiting (``on_tick``). One the
        image no longer places here is dropped (a snapshot replaced the image: a delta from
        nothing names no deletion)."""
        states = apply_waiting(self.replica_manager, self._waiting_states, PARTITIONS_HOSTED_PER_SLICE,
                               placed=lambda tp: self.node_id in self._replicas_of(tp))
        if not self._waiting_states:
            logger.info("hosted every partition the metadata places here")
        self._on_states_applied(states)

    def _replicas_of(self, tp: TopicPartition) -> tuple[int, ...]:
        partition = self.image.partition(tp)
        return () if partition is None else tuple(partition.replicas)

    def _on_states_applied(self, states) -> None:
        for tp in states:
            restored = self._restore_high_watermarks.pop(tp, None)
            partition = self.replica_manager.get_partition(tp)
            if restored is not None and partition is not None and partition.is_leader:
                partition.log.update_high_watermark(min(restored, partition.log.log_end_offset))
            if partition is not None and partition.has_questions:
                self._partitions_in_doubt.add(tp)
        self._apply_config_changes(states)
        self.group_coordinator.reconcile(self.group_coordinator.now_ms())
        self.txn_coordinator.reconcile(self.txn_coordinator.now_ms())
        self._effects.append(MetadataPublished(self.image.offset))

    def _may_publish(self) -> bool:
        return self.broker_epoch >= 0 and self.metadata_log.committed_offset >= self.broker_epoch

    def _apply_config_changes(self, changed) -> None:
        """Every hosted partition's log config and replication settings, when a config
        record changed the image's configs; otherwise only the partitions this publish
        changed (at 10,000 partitions the full pass cost 250 ms of every publish)."""
        configs = self.image.configs
        if configs is self._configs_applied:
            partitions = [(tp, self.replica_manager.partitions.get(tp)) for tp in changed]
        else:
            self._configs_applied = configs
            self.replication_quotas.on_configs(configs)
            partitions = list(self.replica_manager.partitions.items())
        for tp, partition in partitions:
            if isinstance(partition, Partition):
                new_config = self.log_config(tp.topic)
                self.log_manager.topic_configs[tp.topic] = new_config    # for the logs it opens later
                if partition.log.config != new_config:
                    partition.log.update_config(new_config)
                partition.settings = self.replication_settings(tp.topic)

    # ============================================================ periodic work

    def _periodic_work(self, now_ms: int) -> None:
        manager, logs = self.replica_manager, self.log_manager
        if now_ms >= self._next_isr_check_ms:
            manager.maybe_shrink_isr()
            self._next_isr_check_ms = now_ms + self.config["replica.lag.time.max.ms"] // 2
        try:
            if now_ms >= self._next_high_watermark_checkpoint_ms:
                self._next_high_watermark_checkpoint_ms = (
                    now_ms + self.config["replica.high.watermark.checkpoint.interval.ms"])
                logs.write_high_watermarks(manager.high_watermarks())
            logs.flush_dirty_logs()
            if now_ms >= self._next_recovery_checkpoint_ms:
                self._next_recovery_checkpoint_ms = now_ms + RECOVERY_CHECKPOINT_INTERVAL_MS
                logs.checkpoint_recovery_points()
                logs.checkpoint_log_start_offsets()
            if now_ms >= self._next_producer_expiration_ms:
                self._next_producer_expiration_ms = now_ms + self.config["producer.id.expiration.check.interval.ms"]
                expired = logs.remove_expired_producers(self.config["producer.id.expiration.ms"])
                if expired:
                    logger.info("forgot %d producer ids silent for producer.id.expiration.ms", expired)
            if now_ms >= self._next_retention_ms:
                self._next_retention_ms = now_ms + self.config["log.retention.check.interval.ms"]
                deleted = logs.delete_old_segments()
                if deleted:
                    logger.info("retention deleted %d segments", deleted)
            logs.clean_logs(self.config)     # one bounded step of compaction (docs/compaction.md)
        except (OSError, StorageError) as e:
            # The failing directory is offline now (LogManager marked it); its
            # partitions go Offline below, the other directories keep serving.
            logger.error("periodic log work failed: %s", e)

    def alter_replica_log_dirs(self, dirs: dict[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """AlterReplicaLogDirs: each partition's answer (``LogManager.alter_log_dir``)."""
        return {tp: self.log_manager.alter_log_dir(tp, log_dir, self.replica_manager.hosting(tp).value)
                for tp, log_dir in dirs.items()}

    def _move_replicas(self) -> None:
        """One step of every replica moving between log directories; a partition whose
        log was swapped serves the new one from now on."""
        swapped = self.log_manager.copy_to_future_logs(self.config["replica.fetch.max.bytes"])
        for tp, log_ in swapped.items():
            partition = self.replica_manager.get_partition(tp)
            if partition is not None:
                partition.log = log_
                self.replica_manager.wake(tp)

    def _mark_failed_log_dirs_offline(self) -> None:
        """Partitions of a failed log directory go Offline (KAFKA_STORAGE_ERROR);
        partitions on other directories keep serving. The next heartbeat reports the
        directory (``on_tick``)."""
        offline = self.log_manager.offline_dirs
        if offline != self._seen_offline_dirs:
            logger.error("log directories %s failed: reporting them to the controller%s",
                      ", ".join(sorted(offline - self._seen_offline_dirs)),
                      "; no log directory is left online: this broker asks to be fenced until it is "
                      "restarted with working disks" if self._no_online_log_dir() else "")
            self._seen_offline_dirs = offline
        for tp in sorted(self.log_manager.offline_partitions):
            if self.replica_manager.partitions.get(tp) not in (None, OFFLINE):
                logger.error("partition %s is offline: its log directory %s failed", tp,
                          self.log_manager.log_dir_of(tp))
                self.replica_manager.mark_offline(tp)

    def _maybe_send_alter_partition(self) -> None:
        """Batch every pending ISR change into one AlterPartition, one request in flight.
        Each ISR member carries the broker epoch it fetched with (KIP-903); the leader
        its own."""
        manager = self.replica_manager
        if self._isr_in_flight or not manager.pending_isr_proposals or self.broker_epoch < 0:
            return
        proposals = manager.drain_isr_proposals()
        items, sent = [], {}
        for tp, proposal in sorted(proposals.items()):
            topic = self.image.topic(tp.topic)
            if topic is None:
                continue
            epochs = proposal.new_isr_broker_epochs or (-1,) * len(proposal.new_isr)
            epochs = tuple(self.broker_epoch if b == self.node_id else e for b, e in zip(proposal.new_isr, epochs))
            items.append(AlterPartitionItem(topic.topic_id, tp.partition, proposal.leader_epoch,
                                            proposal.partition_epoch, proposal.new_isr,
                                            proposal.leader_recovery_state, epochs))
            sent[(topic.topic_id, tp.partition)] = (tp, proposal)
        if items:
            self._isr_in_flight = True
            self._effects.append(SendAlterPartition(
                AlterPartitionRequest(self.node_id, self.broker_epoch, tuple(items)), sent))

    def _question_old_transactions(self, now_ms: int) -> None:
        """The age rule (``Partition.maybe_question_old_transactions``), checked as often as
        a coordinator looks for its own timed-out transactions
        (``transaction.abort.timed.out.transaction.cleanup.interval.ms``): a transaction open
        longer than ``transaction.max.timeout.ms`` on a partition led here is asked about."""
        if now_ms < self._next_old_transaction_check_ms:
            return
        self._next_old_transaction_check_ms = now_ms + self.config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        max_age_ms, wall_now_ms = self.config["transaction.max.timeout.ms"], self.clock.now_ms()
        for tp, partition in self.replica_manager.partitions.items():
            if (isinstance(partition, Partition) and partition.is_leader
                    and partition.maybe_question_old_transactions(wall_now_ms, max_age_ms, now_ms)):
                self._partitions_in_doubt.add(tp)

    def _ask_about_transactions_in_doubt(self, now_ms: int) -> None:
        """A ``ResolveInDoubt`` for each transaction in doubt whose question is due
        (``Partition.in_doubt_questions_due``); a partition whose doubts are settled, or
        that this broker no longer leads, is forgotten."""
        for tp in sorted(self._partitions_in_doubt):
            partition = self.replica_manager.get_partition(tp)
            if partition is None or not partition.is_leader or not partition.has_questions:
                self._partitions_in_doubt.discard(tp)
                continue
            for producer_id, epoch in partition.in_doubt_questions_due(now_ms):
                self._effects.append(ResolveInDoubt(tp, producer_id, epoch, partition.leader_epoch))

    def _maybe_send_assignments(self, now_ms: int) -> None:
        """AssignReplicasToDirs for each hosted replica whose log is not where the
        metadata says (module docstring), once this incarnation's metadata is applied."""
        if self._assignment_in_flight or self.broker_epoch < 0 or not self._may_publish():
            return
        image, hosted = self.image, self.replica_manager.partitions
        version = self.log_manager.placements_version
        if (self._assignments_checked is not None and self._assignments_checked[0] is image
                and self._assignments_checked[1] == version
                and (self._assignments_retry_ms is None or now_ms < self._assignments_retry_ms)):
            return          # a scan per tick costs O(partitions): only when something changed
        self._assignments_checked, self._assignments_retry_ms = (image, version), None
        placements = self.log_manager.placements()
        items = []
        for tp, directory in sorted(placements.items()):
            registration = image.partition(tp)
            topic = image.topic(tp.topic)
            if registration is None or topic is None or self.node_id not in registration.replicas \
                    or hosted.get(tp) is None:
                self._assignments_sent.pop(tp, None)
                continue
            if registration.directory(self.node_id) == directory:
                self._assignments_sent.pop(tp, None)
                continue
            sent = self._assignments_sent.get(tp)
            if sent is not None and sent[0] == directory and now_ms < sent[1] + ASSIGNMENT_RETRY_MS:
                self._assignments_retry_ms = min(self._assignments_retry_ms or sent[1] + ASSIGNMENT_RETRY_MS,
                                                 sent[1] + ASSIGNMENT_RETRY_MS)
                continue
            self._assignments_sent[tp] = (directory, now_ms)
            self._assignments_retry_ms = min(self._assignments_retry_ms or now_ms + ASSIGNMENT_RETRY_MS,
                                             now_ms + ASSIGNMENT_RETRY_MS)
            items.append(ReplicaDirectory(topic.topic_id, tp.partition, directory))
        if items:
            self._assignment_in_flight = True
            self._effects.append(SendAssignReplicasToDirs(
                AssignReplicasToDirsRequest(self.node_id, self.broker_epoch, tuple(items))))

    # ============================================================ plumbing

    def _drain(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects
