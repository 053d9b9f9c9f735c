"""Several brokers in one process, wired synchronously (tests now, the simulator later).

Theory of operation. A ``LocalCluster`` runs the real replication core of every
broker — ``LogManager`` over a ``CrashableFileSystem``, ``ReplicaManager``,
fetchers — plus the real ``QuorumController`` (through ``ControllerTestEnv``) on
one ``ManualClock``. Nothing goes over a socket: a fetcher's request plan is
handed to the source broker's ``ReplicaManager`` and the answer queued for the
fetcher, as the network would deliver it. What the network would do badly is
modelled explicitly:

* ``cut(a, b)`` / ``isolate(b)`` / ``heal()`` drop requests between brokers, and
  ``isolate`` also cuts the broker from the controller (no heartbeats, no
  metadata); a request in flight across a cut fails at once;
* ``stop(b)`` is a clean shutdown (flush, checkpoints), ``crash(b)`` a power cut
  (``CrashableFileSystem.crash``: unsynced bytes are lost); either way the
  controller fences the broker at once unless ``fence_now=False`` (then its
  session times out as time passes); ``start(b)`` is a new process that
  recovers its logs, registers with a new incarnation and catches up.

Time moves only in ``advance(ms)``: each tick sends heartbeats, fires the
controller's deadlines, runs the periodic ISR-shrink check and purgatory expiry,
then ``settle()`` — request rounds at a fixed time until the cluster's state stops
changing. A round polls every fetcher once, delivers the answers, sends queued
AlterPartition proposals to the controller and publishes new metadata to every
reachable broker (SPEC §5.2 via ``MetadataDelta.local_changes``).

Every check a test needs reads real state: ``records(b, tp)``, ``log_bytes``
(the concatenated batches, for byte-for-byte comparison) and
``check_invariants()`` (SPEC §10.2–10.3).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from tidelog.controller.messages import AlterPartitionItem, AlterPartitionRequest, ElectionType
from tidelog.controller.testing import ControllerTestEnv
from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.loader import MetadataLoader
from tidelog.records.batch import build_batch, iter_batches, iter_records
from tidelog.replication.fetcher import (
    FetcherConfig,
    FetcherState,
    FetchPartitionResult,
    FetchRequestPlan,
    ListOffsetsPlan,
    OffsetsForLeaderEpochPlan,
    Plan,
)
from tidelog.replication.metadata_changes import apply_local_changes
from tidelog.replication.partition import Partition, ReplicationSettings
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.storage.config import LogConfig
from tidelog.storage.crashable import CrashableFileSystem
from tidelog.storage.log_manager import LogManager

logger = logging.getLogger("tidelog.local_cluster")

T0_MS = 1_700_000_000_000
TICK_MS = 250
HEARTBEAT_INTERVAL_MS = 2000
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 5000
# Tests use Kafka's test backoff (250 ms) and answer fetches at once unless asked.
DEFAULT_FETCHER_CONFIG = FetcherConfig(replica_fetch_wait_max_ms=0, replica_fetch_backoff_ms=250)


@dataclass
class ProduceHandle:
    """A produce request in flight; ``response`` is the partition's response dict."""

    broker_id: int
    topic_partition: TopicPartition
    response: dict | None = None

    @property
    def done(self) -> bool:
        return self.response is not None

    @property
    def error(self) -> ErrorCode | None:
        return None if self.response is None else ErrorCode(self.response["error_code"])

    @property
    def base_offset(self) -> int:
        assert self.response is not None, "not answered yet"
        return self.response["base_offset"]


@dataclass
class _InFlight:
    broker_id: int              # the fetching broker
    fetcher: FetcherState
    plan: Plan
    results: dict | None = None
    cancelled: bool = False


class LocalBroker:
    """One broker process: storage, replica manager, metadata loader."""

    def __init__(self, cluster: "LocalCluster", broker_id: int):
        self.cluster = cluster
        self.broker_id = broker_id
        self.data_dir = os.path.join(cluster.base_dir, f"broker-{broker_id}")
        os.makedirs(self.data_dir, exist_ok=True)
        self.fs = CrashableFileSystem(self.data_dir)
        self.log_dir = os.path.join(self.data_dir, "logs")
        self.running = False
        self.starts = 0
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.loader: MetadataLoader | None = None
        self.next_heartbeat_ms = 0
        self.next_isr_check_ms = 0
        self.next_checkpoint_ms = 0

    # ------------------------------------------------------------ process

    def start(self) -> None:
        assert not self.running, f"broker {self.broker_id} is already running"
        cluster = self.cluster
        self.log_manager = LogManager([self.log_dir], cluster.clock, self.fs, default_config=cluster.log_config)
        self.loader = MetadataLoader(cluster.env.log)
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, cluster.clock, self._settings_for,
            alive_broker_epoch=self._alive_broker_epoch, fetcher_config=cluster.fetcher_config,
            is_broker_alive=lambda b: b in self.loader.image.brokers)
        env = cluster.env
        reply = env.register(self.broker_id) if self.starts == 0 else env.restart(self.broker_id)
        assert reply.error_code == ErrorCode.NONE, reply
        self.starts += 1
        self.replica_manager.broker_epoch = reply.broker_epoch
        self.running = True
        self.publish()
        for _ in range(3):   # FENCED -> UNFENCED once caught up with our registration
            if not self.heartbeat().is_fenced:
                break
        now_ms = cluster.clock.monotonic_ms()
        self.next_heartbeat_ms = now_ms + HEARTBEAT_INTERVAL_MS
        self.next_isr_check_ms = now_ms + cluster.replica_lag_time_max_ms // 2
        self.next_checkpoint_ms = now_ms + HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS

    def stop(self) -> None:
        """Clean shutdown: complete waiters, write the HW checkpoint, flush, close."""
        assert self.running
        self.running = False
        self.replica_manager.shutdown()
        self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())
        self.log_manager.shutdown()

    def crash(self) -> None:
        """Power cut: whatever was not fsynced is gone; nothing is checkpointed."""
        assert self.running
        self.running = False
        self.fs.crash()

    # ------------------------------------------------------------ metadata

    def publish(self) -> bool:
        """Replay newly committed metadata and become leader/follower as it says."""
        delta = self.loader.catch_up()
        if delta is None:
            return False
        apply_local_changes(self.replica_manager, delta, self.broker_id)
        return True

    def heartbeat(self):
        reply = self.cluster.env.heartbeat(self.broker_id, metadata_offset=self.loader.image.offset)
        self.cluster.publish_all()
        return reply

    def _settings_for(self, topic: str) -> ReplicationSettings:
        config = self.loader.image.topic_config(topic)
        return ReplicationSettings(min_insync_replicas=int(config.get("min.insync.replicas", "1")),
                                   replica_lag_time_max_ms=self.cluster.replica_lag_time_max_ms)

    def _alive_broker_epoch(self, broker_id: int) -> int | None:
        registration = self.loader.image.brokers.get(broker_id)
        if registration is None or not registration.is_active:
            return None
        return registration.broker_epoch

    # ------------------------------------------------------------ state

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.replica_manager.get_partition(tp) if self.running else None

    def topic_id(self, topic: str):
        return self.loader.image.topics_by_name[topic].topic_id


class LocalCluster:
    def __init__(self, base_dir: str, broker_ids: Sequence[int] = (0, 1, 2), *,
                 clock: ManualClock | None = None, fetcher_config: FetcherConfig | None = None,
                 log_config: LogConfig | None = None, replica_lag_time_max_ms: int = 30_000,
                 session_timeout_ms: int = 9000, tick_ms: int = TICK_MS, start: bool = True):
        self.base_dir = base_dir
        self.clock = clock or ManualClock(T0_MS)
        self.fetcher_config = fetcher_config or DEFAULT_FETCHER_CONFIG
        self.log_config = log_config or LogConfig()
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.tick_ms = tick_ms
        self.env = ControllerTestEnv(clock=self.clock, session_timeout_ms=session_timeout_ms)
        self.brokers: dict[int, LocalBroker] = {b: LocalBroker(self, b) for b in broker_ids}
        self._cuts: set[frozenset[int]] = set()
        self._isolated: set[int] = set()
        self._in_flight: list[_InFlight] = []
        self._produces: list[ProduceHandle] = []
        if start:
            for broker_id in broker_ids:
                self.brokers[broker_id].start()

    # ------------------------------------------------------------ topology

    @property
    def running(self) -> list[int]:
        return [b for b, broker in sorted(self.brokers.items()) if broker.running]

    def reachable(self, a: int, b: int) -> bool:
        if not (self.brokers[a].running and self.brokers[b].running):
            return False
        if a == b:
            return True
        return a not in self._isolated and b not in self._isolated and frozenset((a, b)) not in self._cuts

    def controller_reachable(self, broker_id: int) -> bool:
        return self.brokers[broker_id].running and broker_id not in self._isolated

    def cut(self, a: int, b: int) -> None:
        self._cuts.add(frozenset((a, b)))
        self._fail_unreachable()

    def isolate(self, broker_id: int) -> None:
        """Cut ``broker_id`` from every broker and from the controller."""
        self._isolated.add(broker_id)
        self._fail_unreachable()

    def heal(self) -> None:
        self._cuts.clear()
        self._isolated.clear()

    # ------------------------------------------------------------ processes

    def start(self, broker_id: int) -> None:
        self.brokers[broker_id].start()
        self.publish_all()

    def stop(self, broker_id: int, fence_now: bool = True) -> None:
        self._fail_in_flight_of(broker_id)
        self.brokers[broker_id].stop()
        self._after_process_end(broker_id, fence_now)

    def crash(self, broker_id: int, fence_now: bool = True) -> None:
        self._fail_in_flight_of(broker_id)
        self.brokers[broker_id].crash()
        self._after_process_end(broker_id, fence_now)

    def _after_process_end(self, broker_id: int, fence_now: bool) -> None:
        for handle in self._produces:
            if handle.broker_id == broker_id and not handle.done:
                handle.response = {"error_code": int(ErrorCode.NETWORK_EXCEPTION), "base_offset": -1}
        if fence_now:
            # What the controller does once the session expires, without the wait.
            self.env.heartbeat(broker_id, want_fence=True)
        self.publish_all()

    # ------------------------------------------------------------ admin

    def create_topic(self, name: str, assignments: Sequence[Sequence[int]], *,
                     min_insync_replicas: int = 1, unclean_leader_election: bool = False) -> None:
        configs = {"min.insync.replicas": str(min_insync_replicas)}
        if unclean_leader_election:
            configs["unclean.leader.election.enable"] = "true"
        result = self.env.create_topic(name, assignments=assignments, configs=configs)
        assert result.error_code == ErrorCode.NONE, result
        self.publish_all()

    def elect_unclean(self, tp: TopicPartition) -> None:
        self.env.controller.elect_leaders(ElectionType.UNCLEAN, [tp])
        self.publish_all()

    def registration(self, tp: TopicPartition):
        """The controller's committed view of the partition."""
        return self.env.partition(tp.topic, tp.partition)

    def leader_of(self, tp: TopicPartition) -> int:
        return self.registration(tp).leader

    # ------------------------------------------------------------ clients

    def produce(self, tp: TopicPartition, values: Iterable[bytes | str], *, acks: int = -1,
                broker_id: int | None = None, timeout_ms: int = 30_000) -> ProduceHandle:
        """Send one batch of ``values`` to ``broker_id`` (default: the leader the
        controller names — a client with fresh metadata)."""
        broker_id = self.leader_of(tp) if broker_id is None else broker_id
        handle = ProduceHandle(broker_id, tp)
        broker = self.brokers[broker_id]
        if not broker.running:   # clients are never cut off: isolation is between cluster nodes
            handle.response = {"error_code": int(ErrorCode.NETWORK_EXCEPTION), "base_offset": -1}
            return handle
        encoded = [v.encode() if isinstance(v, str) else v for v in values]
        batch = build_batch(encoded, timestamp_ms=self.clock.now_ms())

        def on_done(responses: dict) -> None:
            handle.response = responses[tp]

        broker.replica_manager.append_records(acks, timeout_ms, {tp: batch}, on_done)
        if not handle.done:
            self._produces.append(handle)
        return handle

    # ------------------------------------------------------------ running

    def publish_all(self) -> None:
        for broker_id in self.running:
            if self.controller_reachable(broker_id):
                self.brokers[broker_id].publish()

    def step(self, broker_ids: Iterable[int] | None = None, deliver: bool = True) -> list[Plan]:
        """One request round: every fetcher (of ``broker_ids``, default all) sends what
        it has, answers come back, ISR proposals go to the controller, metadata goes
        out. With ``deliver=False`` the leaders act on the requests but the answers
        are lost (the fetchers see a failed request). Returns the requests sent."""
        now_ms = self.clock.monotonic_ms()
        sent = []
        for broker_id in self.running if broker_ids is None else list(broker_ids):
            for fetcher in list(self.brokers[broker_id].replica_manager.fetcher_manager.fetchers.values()):
                plan = fetcher.poll(now_ms)
                if plan is not None:
                    sent.append(plan)
                    self._send(broker_id, fetcher, plan)
        if not deliver:
            for entry in self._in_flight:
                if entry.plan in sent and not entry.cancelled:
                    entry.cancelled = True
                    entry.fetcher.on_request_failed(entry.plan, now_ms)
        self._deliver_answers()
        self._send_alter_partitions()
        self.publish_all()
        self._produces = [h for h in self._produces if not h.done]
        return sent

    def settle(self, max_rounds: int = 200, quiet_rounds: int = 3) -> int:
        """Run rounds at the current time until nothing changes for ``quiet_rounds``
        rounds; returns the rounds run. Raises if it never settles."""
        quiet, previous = 0, self.snapshot()
        for rounds in range(1, max_rounds + 1):
            self.step()
            current = self.snapshot()
            quiet = quiet + 1 if current == previous else 0
            previous = current
            if quiet >= quiet_rounds:
                return rounds
        raise AssertionError(f"the cluster did not settle in {max_rounds} rounds")

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass in ticks; each tick runs periodic work and settles."""
        remaining = ms
        while remaining > 0:
            step_ms = min(self.tick_ms, remaining)
            remaining -= step_ms
            self.clock.advance(step_ms)
            self._tick()
            self.settle()

    def _tick(self) -> None:
        now_ms = self.clock.monotonic_ms()
        for broker_id in self.running:
            broker = self.brokers[broker_id]
            if now_ms >= broker.next_heartbeat_ms and self.controller_reachable(broker_id):
                broker.heartbeat()
                broker.next_heartbeat_ms = now_ms + HEARTBEAT_INTERVAL_MS
        self.env.controller.fire_due_deadlines()
        self.publish_all()
        for broker_id in self.running:
            broker = self.brokers[broker_id]
            broker.replica_manager.on_tick(now_ms)
            if now_ms >= broker.next_isr_check_ms:
                broker.replica_manager.maybe_shrink_isr()
                broker.next_isr_check_ms = now_ms + self.replica_lag_time_max_ms // 2
            if now_ms >= broker.next_checkpoint_ms:
                broker.log_manager.write_high_watermarks(broker.replica_manager.high_watermarks())
                broker.next_checkpoint_ms = now_ms + HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS

    # ------------------------------------------------------------ the "network"

    def _send(self, broker_id: int, fetcher: FetcherState, plan: Plan) -> None:
        now_ms = self.clock.monotonic_ms()
        source = plan.source_broker_id
        if not self.reachable(broker_id, source):
            fetcher.on_request_failed(plan, now_ms)
            return
        entry = _InFlight(broker_id, fetcher, plan)
        self._in_flight.append(entry)
        leader = self.brokers[source].replica_manager
        if isinstance(plan, FetchRequestPlan):
            def on_done(results: dict) -> None:
                # Copy the records now: a file slice goes stale once the log changes.
                entry.results = {tp: FetchPartitionResult.from_read_result(r) for tp, r in results.items()}
            leader.fetch_messages(plan.to_fetch_params(), on_done)
        elif isinstance(plan, OffsetsForLeaderEpochPlan):
            entry.results = leader.last_offset_for_leader_epoch(dict(plan.partitions))
        elif isinstance(plan, ListOffsetsPlan):
            entry.results = leader.fetch_leader_offsets(dict(plan.partitions))
        else:
            raise TypeError(plan)

    def _deliver_answers(self) -> None:
        now_ms = self.clock.monotonic_ms()
        waiting = []
        for entry in self._in_flight:
            if entry.cancelled:
                continue
            if entry.results is None:
                waiting.append(entry)   # parked in the leader's fetch purgatory
                continue
            if self._fetcher_alive(entry):
                entry.fetcher.on_response(entry.plan, entry.results, now_ms)
        self._in_flight = waiting

    def _fetcher_alive(self, entry: _InFlight) -> bool:
        broker = self.brokers[entry.broker_id]
        if not broker.running:
            return False
        fetchers = broker.replica_manager.fetcher_manager.fetchers
        return fetchers.get((entry.fetcher.source_broker_id, entry.fetcher.fetcher_id)) is entry.fetcher

    def _fail_in_flight_of(self, broker_id: int) -> None:
        """Connections to and from ``broker_id`` close: its requests fail."""
        now_ms = self.clock.monotonic_ms()
        for entry in self._in_flight:
            if entry.cancelled or broker_id not in (entry.broker_id, entry.plan.source_broker_id):
                continue
            entry.cancelled = True
            if entry.broker_id != broker_id and self._fetcher_alive(entry):
                entry.fetcher.on_request_failed(entry.plan, now_ms)

    def _fail_unreachable(self) -> None:
        now_ms = self.clock.monotonic_ms()
        for entry in self._in_flight:
            if entry.cancelled or self.reachable(entry.broker_id, entry.plan.source_broker_id):
                continue
            entry.cancelled = True
            if self._fetcher_alive(entry):
                entry.fetcher.on_request_failed(entry.plan, now_ms)

    def _send_alter_partitions(self) -> None:
        for broker_id in self.running:
            broker = self.brokers[broker_id]
            manager = broker.replica_manager
            if not manager.pending_isr_proposals or not self.controller_reachable(broker_id):
                continue
            proposals = manager.drain_isr_proposals()
            items = []
            for tp, proposal in proposals.items():
                items.append(AlterPartitionItem(
                    broker.topic_id(tp.topic), tp.partition, proposal.leader_epoch, proposal.partition_epoch,
                    proposal.new_isr, 0, proposal.new_isr_broker_epochs))
            response = self.env.controller.alter_partition(
                AlterPartitionRequest(broker_id, manager.broker_epoch, tuple(items)))
            by_key = {(r.topic_id, r.partition_id): r for r in response.partitions}
            for (tp, proposal), item in zip(proposals.items(), items):
                result = by_key.get((item.topic_id, item.partition_id))
                if result is None:
                    manager.on_alter_partition_response(tp, response.error_code, proposal=proposal)
                else:
                    manager.on_alter_partition_response(tp, result.error_code, result.leader_epoch,
                                                        result.partition_epoch, result.isr, proposal)
            self.publish_all()

    # ------------------------------------------------------------ looking

    def partition(self, broker_id: int, tp: TopicPartition) -> Partition:
        partition = self.brokers[broker_id].partition(tp)
        assert partition is not None, f"broker {broker_id} does not host {tp}"
        return partition

    def log_bytes(self, broker_id: int, tp: TopicPartition, up_to: int | None = None) -> bytes:
        """Every batch from the log start up to ``up_to`` (default: the LEO), concatenated."""
        log = self.partition(broker_id, tp).log
        end = log.log_end_offset if up_to is None else up_to
        out, offset = bytearray(), log.log_start_offset
        while offset < end:
            data = log.read(offset, 1 << 20, max_offset=None).records.read_bytes()
            if not data:
                break
            for position, header in iter_batches(data):
                if header.base_offset >= end:
                    return bytes(out)
                out += data[position:position + header.size_bytes]
                offset = header.next_offset
        return bytes(out)

    def records(self, broker_id: int, tp: TopicPartition) -> list[tuple[int, int, bytes]]:
        """``(offset, leader epoch, value)`` of every record in the broker's log."""
        data = self.log_bytes(broker_id, tp)
        return [(r.offset, header.partition_leader_epoch, r.value)
                for position, header in iter_batches(data) for r in iter_records(data, position)]

    def values(self, broker_id: int, tp: TopicPartition) -> list[bytes]:
        return [value for _, _, value in self.records(broker_id, tp)]

    def snapshot(self) -> tuple:
        """Everything whose change means the cluster has not settled yet."""
        out = [self.env.log.end_offset, len(self._in_flight)]
        for broker_id in self.running:
            broker = self.brokers[broker_id]
            manager = broker.replica_manager
            out.append((broker_id, broker.loader.image.offset, len(manager.pending_isr_proposals)))
            for tp, partition in sorted(manager.partitions.items()):
                if not isinstance(partition, Partition):
                    out.append((tp, partition))
                    continue
                log = partition.log
                out.append((tp, log.log_start_offset, log.high_watermark, log.log_end_offset, partition.leader,
                            partition.leader_epoch, partition.isr, partition.pending_isr,
                            manager.fetcher_manager.fetch_state(tp)))
        return tuple(out)

    def check_invariants(self, tp: TopicPartition) -> None:
        """SPEC §10.2–10.3 on running brokers: offsets ordered; every record below the
        leader's HW is on every ISR member, byte for byte."""
        for broker_id in self.running:
            partition = self.brokers[broker_id].partition(tp)
            if partition is not None:
                log = partition.log
                assert log.log_start_offset <= log.high_watermark <= log.log_end_offset, (broker_id, log)
        leader_id = self.leader_of(tp)
        if leader_id < 0 or not self.brokers[leader_id].running:
            return
        leader = self.partition(leader_id, tp)
        if not leader.is_leader:
            return
        committed = self.log_bytes(leader_id, tp, leader.log.high_watermark)
        for member in leader.isr:
            if member != leader_id and self.brokers[member].running:
                assert self.log_bytes(member, tp, leader.log.high_watermark) == committed, \
                    f"ISR member {member} differs from leader {leader_id} below HW {leader.log.high_watermark}"

    def assert_logs_identical(self, tp: TopicPartition, broker_ids: Iterable[int] | None = None) -> bytes:
        broker_ids = list(self.running if broker_ids is None else broker_ids)
        logs = {b: self.log_bytes(b, tp) for b in broker_ids}
        first = logs[broker_ids[0]]
        for b, data in logs.items():
            assert data == first, (f"broker {b}'s log differs from broker {broker_ids[0]}'s: "
                                   f"{self.records(b, tp)} vs {self.records(broker_ids[0], tp)}")
        return first
