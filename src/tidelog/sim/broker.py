"""A simulated broker process: the production ``BrokerNode`` driven over the simulator.

Theory of operation. ``SimBroker`` is a driver and nothing else: it builds a
``tidelog.broker.BrokerNode`` at every process start (on a ``SimDisk``, with a
``MemoryMetadataLog`` standing for the broker's copy of ``__cluster_metadata``),
feeds it inputs, and carries out the effects it returns — exactly what
``server/runtime.py`` does over asyncio:

=====================================  =========================================
effect / input                         here
=====================================  =========================================
``SendRegistration`` /                 an RPC to the active controller (its
``SendHeartbeat`` /                    ``ControllerChannel``, production's
``SendAlterPartition`` /               ``RemoteController``); the reply or a
``SendAssignReplicasToDirs``           failure goes back as ``on_*_reply`` /
                                       ``on_*_failed``
``next_wakeup_ms()``                   one timer event calling ``on_tick``
``FetcherAdded``                       the fetcher is driven by ``_kick``: poll a
                                       plan, send it, feed back ``on_response`` /
                                       ``on_request_failed``, sleep until
                                       ``next_wakeup_ms``
``MetadataPublished``                  wake every fetcher
``StopNow``                            ``BrokerNode.shutdown()``, process ends
metadata                               long-poll the active controller for
                                       committed batches, append them to the
                                       broker's copy, ``on_metadata_committed``
requests from brokers and clients      the request layer
                                       (``tidelog.broker.requests``, as the server):
                                       Produce, Fetch, ClientFetch, FindCoordinator,
                                       WriteTxnMarkers, AddPartitionsToTxn
``SendMarkers`` /                      an RPC to that broker; the answer (None on
``SendAddPartitionsToTxn`` /           failure) goes to the effect's ``on_done``
``SendListTransactions`` /
``SendDescribeTransactions`` /
``SendTopicLeaders``                   (a Metadata request: ``TopicLeaders``)
``ResolveInDoubt``                     the request layer's ``resolve_in_doubt``; its
                                       outcome back as ``on_in_doubt_answer``
group requests from members            the request layer (``GroupRequests``)
=====================================  =========================================

Requests from other nodes arrive as network messages whose bodies are the
request layer's domain requests (``FetchRequest``, ``WriteTxnMarkers`` …) or
the replication layer's own plan objects (``FetchRequestPlan`` …); answers are the
result objects (``FetchPartitionResult`` copies the bytes at answer time, as a
response on the wire would). A broker process ends in one of three ways:
``stop`` (SIGTERM: controlled shutdown, checkpoints, flush), ``kill`` (kill -9:
nothing is lost from the page cache) or ``power_cut`` (the machine dies:
unsynced bytes go). ``start`` is a new process: a new incarnation id, log
recovery, the durable metadata prefix replayed, registration, catch-up.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING

from tidelog.broker.config import BrokerConfig
from tidelog.broker.lifecycle import BrokerState
from tidelog.broker.requests import (
    AddPartitionsToTxn,
    FetchRequest,
    FetchRequests,
    GroupRequests,
    ProduceRequest,
    ProduceRequests,
    SendAddPartitionsToTxn,
    SendMarkers,
    TxnRequests,
)
from tidelog.broker.requests.effects import SendDescribeTransactions, SendListTransactions, SendTopicLeaders
from tidelog.broker.requests.fetch import READ_COMMITTED
from tidelog.broker.requests.group import GROUP_KEY, TRANSACTION_KEY, OffsetCommit, SyncGroup
from tidelog.broker.node import (
    BrokerNode,
    FetcherAdded,
    MetadataPublished,
    ResolveInDoubt,
    SendAlterPartition,
    SendAssignReplicasToDirs,
    SendHeartbeat,
    SendRegistration,
    StateChanged,
    StopNow,
)
from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import Endpoint
from tidelog.replication.fetcher import (
    FetchPartitionResult,
    FetchRequestPlan,
    ListOffsetsPlan,
    OffsetsForLeaderEpochPlan,
)
from tidelog.replication.partition import Partition
from tidelog.raft.memory_log import MemoryMetadataLog
from tidelog.sim.controller import ControllerChannel
from tidelog.sim.disk import SimDisk
from tidelog.sim.loop import NodeClock
from tidelog.sim.network import NetworkNode

if TYPE_CHECKING:
    from tidelog.sim.world import World

logger = logging.getLogger("tidelog.sim.broker")

STARTING, RECOVERY, RUNNING = BrokerState.STARTING, BrokerState.RECOVERY, BrokerState.RUNNING
PENDING_CONTROLLED_SHUTDOWN = BrokerState.PENDING_CONTROLLED_SHUTDOWN
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 5000
METADATA_MAX_WAIT_MS = 500
BACKGROUND_FLUSH_MAX_MS = 50                             # a rolled segment reaches the disk within this
CLUSTER_ID = "tidelog-sim"
LISTENER = "PLAINTEXT"


class SimBroker(NetworkNode):
    def __init__(self, sim: "World", broker_id: int, drift_ppm: int = 0):
        super().__init__(f"b{broker_id}", sim.loop, sim.network)
        self.sim = sim
        self.broker_id = broker_id
        self.clock = NodeClock(sim.loop, wall_offset_ms=0, drift_ppm=drift_ppm)
        self.root = os.path.join(sim.directory, self.name)
        os.makedirs(self.root, exist_ok=True)
        self.disk = SimDisk(self.root)
        self.log_dirs = [os.path.join(self.root, f"logs-{i}") for i in range(sim.config.log_dirs_per_broker)]
        # The broker's copy of the committed metadata log (production: a follower
        # FileMetadataLog): the batches it fetched, kept across restarts like a file.
        self.metadata = MemoryMetadataLog()
        self.channel: ControllerChannel | None = None
        self.config = self._broker_config()
        self.starts = 0
        self._ends_at_exit: dict | None = None   # tp -> (log dir, log end) when the process last exited
        self.node: BrokerNode | None = None
        # The request layer (tidelog.broker.requests), new with each process.
        self.txn: TxnRequests | None = None
        self.produce: ProduceRequests | None = None
        self.fetch: FetchRequests | None = None
        self.groups: GroupRequests | None = None
        self._wakeup_event = None
        self._wakeup_at_ms: int | None = None
        self._fetcher_wakeups: dict[tuple[int, int], int] = {}
        # Log directory ids (meta.properties' directory.id), deterministic: a disk
        # replaced by an empty one gets the next.
        self._directory_ids = itertools.count(1)

    def _new_directory_id(self) -> uuid.UUID:
        return uuid.UUID(int=(1 << 124) | (self.broker_id << 32) | next(self._directory_ids))

    def _broker_config(self) -> BrokerConfig:
        c = self.sim.config
        return BrokerConfig({
            "node.id": str(self.broker_id), "process.roles": "broker", "log.dirs": ",".join(self.log_dirs),
            "broker.session.timeout.ms": str(c.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(c.heartbeat_interval_ms),
            "replica.lag.time.max.ms": str(c.replica_lag_time_max_ms),
            "replica.high.watermark.checkpoint.interval.ms": str(c.hw_checkpoint_interval_ms),
            "replica.fetch.wait.max.ms": str(c.replica_fetch_wait_max_ms),
            "replica.fetch.backoff.ms": str(c.replica_fetch_backoff_ms),
            "offsets.topic.num.partitions": str(c.offsets_partitions),
            "offsets.commit.timeout.ms": str(c.request_timeout_ms),
            "request.timeout.ms": str(c.request_timeout_ms),
            "group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "100",
            "transaction.state.log.num.partitions": str(c.txn_partitions),
            "transactional.id.expiration.ms": str(c.txn_id_expiration_ms),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "tidelog.unclean.recovery.log.ends.enable": str(c.replica_log_ends).lower(),
            "log.cleaner.backoff.ms": str(c.log_cleaner_backoff_ms)})

    # ================================================================ the node's state

    @property
    def state(self) -> BrokerState:
        return self.node.state if self.node is not None and self.up else BrokerState.NOT_RUNNING

    @property
    def broker_epoch(self) -> int:
        return self.node.broker_epoch if self.node is not None else -1

    @property
    def replica_manager(self):
        return self.node.replica_manager if self.node is not None else None

    @property
    def log_manager(self):
        return self.node.log_manager if self.node is not None else None

    @property
    def loader(self):
        return self.node.loader if self.node is not None else None

    @property
    def image(self):
        return self.node.image

    @property
    def running(self) -> bool:
        return self.up

    # ================================================================ process

    def start(self) -> None:
        assert not self.up, f"{self.name} is already running"
        self.process_started()
        self.starts += 1
        self._wakeup_event = None
        self._wakeup_at_ms = None
        self._fetcher_wakeups = {}
        self.channel = ControllerChannel(self, self.sim.controller_ids)
        member_ids = itertools.count(1)
        self.node = BrokerNode(
            self.config, self.clock, self.metadata, CLUSTER_ID,
            uuid.UUID(int=(self.broker_id << 32) | self.starts),
            (Endpoint(LISTENER, self.name, 9092),), fs=self.disk,
            tick_interval_ms=self.sim.config.tick_ms,
            controlled_shutdown_timeout_ms=CONTROLLED_SHUTDOWN_TIMEOUT_MS,
            new_member_id=lambda prefix: f"{prefix}-{self.broker_id}.{self.starts}.{next(member_ids)}",
            background=self._background, new_directory_id=self._new_directory_id)
        ends, self._ends_at_exit = self._ends_at_exit, None
        if ends:
            self.sim.checker.on_logs_loaded(self.broker_id, ends, self.node.log_manager)
        self.txn = TxnRequests(self.node, self.clock, self._send)
        self.node.txn_coordinator.take_producer_id = self.sim.next_producer_id
        self.produce = ProduceRequests(self.node, self.txn)
        self.fetch = FetchRequests(self.node)
        self.groups = GroupRequests(self.node, LISTENER, self._create_topic)
        self._carry_out(self.node, self.node.start(self.clock.monotonic_ms()))
        self._fetch_metadata()

    def _background(self, work, done) -> None:
        """The logs' background runner, as ``tidelog serve``'s worker thread: a rolled
        segment's fsync happens a little later, or never if the process dies first."""
        def run() -> None:
            try:
                work()
            except OSError as e:
                done(e)
                return
            done(None)
        self.after(self.sim.rng.randint(1, BACKGROUND_FLUSH_MAX_MS), run, label=f"{self.name} log-flush")

    def kill(self) -> None:
        """kill -9 (the machine stays up): nothing written is lost."""
        self._ends_at_exit = self._log_ends()
        self._end()
        self.disk.process_exit()

    def power_cut(self, tear: bool) -> dict[str, int]:
        """The machine loses power: unsynced bytes are gone (maybe one torn write)."""
        self._ends_at_exit = None
        self._end()
        return self.disk.power_cut(self.sim.rng, tear)

    def disk_replaced(self, log_dir: str) -> None:
        """Its logs start empty: nothing to load back."""
        if self._ends_at_exit:
            self._ends_at_exit = {tp: v for tp, v in self._ends_at_exit.items() if v[0] != log_dir}

    def _log_ends(self) -> dict:
        """Where each log on a working directory ends, as the process exits: all of it is
        on disk (written, maybe not synced), so the next start must load it back whole
        (``Checker.on_logs_loaded``). A disk replaced meanwhile starts empty
        (``SimDisk.replace``: the directory's logs are left out then)."""
        manager, ends = self.log_manager, {}
        for log in manager.all_logs():
            log_dir = manager.log_dir_of(log.topic_partition)
            if not log.is_offline and not self.disk.is_failing(log_dir):
                ends[log.topic_partition] = (log_dir, log.log_end_offset)
        return ends

    def stop(self) -> None:
        """SIGTERM: controlled shutdown first (when others can take over), then a clean stop."""
        self._carry_out(self.node, self.node.on_stop_requested(self.clock.monotonic_ms()))

    def _stop_now(self) -> None:
        if not self.up:
            return
        self.node.shutdown()
        self._ends_at_exit = self._log_ends()
        self._end()
        self.disk.process_exit()
        self.loop.trace.add(self.loop.now_ms, self.name, "stopped cleanly")

    def _end(self) -> None:
        self.process_ended()

    # ================================================================ effects

    def _carry_out(self, node: BrokerNode, effects) -> None:
        """Execute what the node asked for, then arm its wake-up timer."""
        if node is not self.node or not self.up:
            return
        for effect in effects:
            if isinstance(effect, SendRegistration):
                self._rpc_to_controller(node, "BrokerRegistration", effect.request,
                                        node.on_registration_reply, node.on_registration_failed)
            elif isinstance(effect, SendHeartbeat):
                self._rpc_to_controller(node, "BrokerHeartbeat", effect.request,
                                        node.on_heartbeat_reply, node.on_heartbeat_failed)
            elif isinstance(effect, SendAlterPartition):
                sent = effect.sent
                self._rpc_to_controller(
                    node, "AlterPartition", effect.request,
                    lambda reply, now: node.on_alter_partition_reply(reply, sent, now),
                    lambda now, error: node.on_alter_partition_failed(sent, now, error))
            elif isinstance(effect, SendAssignReplicasToDirs):
                self._rpc_to_controller(node, "AssignReplicasToDirs", effect.request,
                                        node.on_assign_replicas_to_dirs_reply, node.on_assign_replicas_to_dirs_failed)
            elif isinstance(effect, FetcherAdded):
                fetcher = effect.fetcher
                fetcher.wakeup = lambda f=fetcher: self.after(0, lambda: self._kick(f))
                self.after(0, lambda f=fetcher: self._kick(f))
            elif isinstance(effect, MetadataPublished):
                self._kick_all()
            elif isinstance(effect, StateChanged):
                self.loop.trace.add(self.loop.now_ms, self.name,
                                    f"{effect.old.name} → {effect.new.name} ({effect.reason})")
            elif isinstance(effect, ResolveInDoubt):
                self.txn.resolve_in_doubt(effect, lambda answered, reason, asked=effect: self._carry_out(
                    node, node.on_in_doubt_answer(asked, answered, reason, self.clock.monotonic_ms())))
            elif isinstance(effect, StopNow):
                self._stop_now()
                return
        self._arm_wakeup(node)

    def _rpc_to_controller(self, node: BrokerNode, kind: str, request, on_reply, on_failed) -> None:
        def reply(body) -> None:
            self._carry_out(node, on_reply(body, self.clock.monotonic_ms()))

        def failed(error: str) -> None:
            self._carry_out(node, on_failed(self.clock.monotonic_ms(), error))

        self.channel.request(kind, request, self.sim.config.request_timeout_ms, reply, failed)

    def _arm_wakeup(self, node: BrokerNode) -> None:
        now = self.clock.monotonic_ms()
        wakeup = max(now, node.next_wakeup_ms())
        if self._wakeup_at_ms is not None and self._wakeup_at_ms <= wakeup and self._wakeup_event is not None \
                and not self._wakeup_event.cancelled:
            return
        if self._wakeup_event is not None:
            self._wakeup_event.cancel()
        self._wakeup_at_ms = wakeup
        self._wakeup_event = self.after(self.clock.to_global_delay(wakeup - now), lambda: self._tick(node))

    def _tick(self, node: BrokerNode) -> None:
        self._wakeup_event = None
        self._wakeup_at_ms = None
        self._carry_out(node, node.on_tick(self.clock.monotonic_ms()))
        self._kick_all()

    # ================================================================ metadata

    def _fetch_metadata(self) -> None:
        """The broker's metadata loop (runtime ``_metadata_loop``): fetch the committed
        batches after its copy's end from the active controller, long-polling."""
        self.channel.request("MetadataFetch", {"from_offset": self.metadata.end_offset,
                                               "max_wait_ms": METADATA_MAX_WAIT_MS},
                             METADATA_MAX_WAIT_MS + self.sim.config.request_timeout_ms,
                             self._on_metadata, lambda error: self.after(200, self._fetch_metadata))

    def _on_metadata(self, body) -> None:
        if body["error"] != ErrorCode.NONE:
            self.after(1000, self._fetch_metadata)       # as the runtime: an error, wait a second
            return
        self.metadata.append_fetched(body["records"], body["high_watermark"])
        self._carry_out(self.node, self.node.on_metadata_committed())
        if self.up:
            self._fetch_metadata()

    # ================================================================ fetchers

    def _kick_all(self) -> None:
        if not self.up:
            return
        fetchers = self.replica_manager.fetcher_manager.fetchers
        for key in sorted(fetchers):
            self._kick(fetchers[key])

    def _current(self, fetcher) -> bool:
        fetchers = self.replica_manager.fetcher_manager.fetchers
        return self.up and fetchers.get((fetcher.source_broker_id, fetcher.fetcher_id)) is fetcher

    def _kick(self, fetcher) -> None:
        """One turn of a fetcher's loop: send the next plan, or sleep."""
        if not self._current(fetcher) or fetcher.in_flight is not None:
            return
        now = self.clock.monotonic_ms()
        plan = fetcher.poll(now)
        if plan is None:
            wakeup = fetcher.next_wakeup_ms(now)
            key = (fetcher.source_broker_id, fetcher.fetcher_id)
            if wakeup is not None and self._fetcher_wakeups.get(key, 1 << 62) > wakeup:
                self._fetcher_wakeups[key] = wakeup
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
        if self._fetcher_wakeups.get(key) == wakeup:
            del self._fetcher_wakeups[key]
        self._kick(fetcher)

    # ================================================================ requests

    def on_request(self, message) -> None:
        handler = getattr(self, "_handle_" + message.kind, None)
        assert handler is not None, f"{self.name}: no handler for {message.kind}"
        handler(message)
        self._carry_out(self.node, [])      # the request may have queued work (an ISR change)

    def _handle_Fetch(self, message) -> None:
        def on_done(results) -> None:
            if self.up:
                self.reply(message, {tp: FetchPartitionResult.from_read_result(r) for tp, r in results.items()})
        self.fetch.handle_fetch(FetchRequest.of_plan(message.body), on_done)

    def _handle_OffsetsForLeaderEpoch(self, message) -> None:
        self.reply(message, self.replica_manager.last_offset_for_leader_epoch(dict(message.body.partitions)))

    def _handle_ListOffsets(self, message) -> None:
        self.reply(message, self.replica_manager.fetch_leader_offsets(dict(message.body.partitions)))

    def _handle_Produce(self, message) -> None:
        body, respond = message.body, self._answer(message)
        self.sim.checker.on_produce_received(body["values"])
        request = ProduceRequest(body["acks"], body["timeout_ms"], {body["tp"]: body["batch"]},
                                 body.get("transactional_id"), add_partitions=body.get("add_partitions", False),
                                 transaction_abortable=body.get("add_partitions", False))

        def on_done(responses) -> None:
            if request.acks != 0:
                respond(responses[body["tp"]])
        self.produce.handle_produce(request, on_done)

    def _handle_ClientFetch(self, message) -> None:
        request: FetchRequest = message.body
        respond = self._answer(message)

        def on_done(results) -> None:
            (tp, result), = results.items()
            if request.isolation_level == READ_COMMITTED:     # what sim/txn_clients.py reads
                respond({"error_code": int(result.error), "log_start_offset": result.log_start_offset,
                         "last_stable_offset": result.last_stable_offset,
                         "records": b"" if result.records is None else result.records.read_bytes(),
                         "aborted": [(t.producer_id, t.first_offset) for t in result.aborted_transactions or ()]})
            else:
                respond(FetchPartitionResult.from_read_result(result))
        self.fetch.handle_fetch(request, on_done)

    def _handle_Metadata(self, message) -> None:
        answer = {}
        for tp in message.body["topic_partitions"]:
            partition = self.image.partition(tp)
            answer[tp] = None if partition is None else partition.leader
        self.reply(message, answer)

    # ================================================================ effects of the request layer

    def _send(self, effect) -> None:
        """A request to another broker the request layer asked for; its answer (None: none)
        goes back to the effect while this process lives."""
        node = self.node
        kind, body = {SendMarkers: ("WriteTxnMarkers", "request"),
                      SendAddPartitionsToTxn: ("AddPartitionsToTxnV4", "request"),
                      SendListTransactions: ("ListTransactions", "producer_id"),
                      SendDescribeTransactions: ("DescribeTransactions", "transactional_id"),
                      SendTopicLeaders: ("TopicLeaders", "topic")}[type(effect)]

        def answered(errors) -> None:
            if self.up and self.node is node:
                effect.on_done(errors)
                self._carry_out(node, [])
        self.rpc.request(f"b{effect.broker_id}", kind, getattr(effect, body), effect.timeout_ms, answered,
                         lambda error: answered(None))

    def _handle_WriteTxnMarkers(self, message) -> None:
        self.txn.append_markers(message.body, self._answer(message))

    def _handle_AddPartitionsToTxnV4(self, message) -> None:
        self.txn.add_partitions_to_txn(message.body, self._answer(message))

    def _handle_ListTransactions(self, message) -> None:
        self.reply(message, self.node.txn_coordinator.transactions_of_producer(message.body))

    def _handle_DescribeTransactions(self, message) -> None:
        self.reply(message, self.node.txn_coordinator.describe_transaction(message.body))

    def _handle_TopicLeaders(self, message) -> None:
        """A Metadata request for one topic, as ``SendTopicLeaders`` reads its answer."""
        topic = self.node.image.topic(message.body)
        self.reply(message, None if topic is None else {
            index: (registration.leader, registration.leader_epoch) for index, registration in topic.partitions.items()})

    # ================================================================ group coordinator

    def _create_topic(self, topic: CreatableTopic) -> ErrorCode:
        """FindCoordinator's internal topics on first use, asked of the controller
        (runtime: ``create_internal_topic``); FindCoordinator does not wait for it."""
        self.channel.request("CreateTopics", topic, self.sim.config.request_timeout_ms,
                             lambda error_code: None, lambda error: None)
        return ErrorCode.NONE

    def _answer(self, message):
        """A callback answering ``message`` while this process lives."""
        node = self.node

        def respond(body) -> None:
            if self.up and self.node is node:
                self.reply(message, body)
        return respond

    def _handle_FindCoordinator(self, message) -> None:
        found = self.groups.find_coordinator(message.body["group_id"], GROUP_KEY)
        self.reply(message, {"error_code": found["error_code"], "node_id": found["node_id"]})

    # Group requests arrive as the request layer's domain requests (tidelog.broker.requests.group);
    # the answers are its results. Only the checker's hooks are the simulator's own.

    def _handle_JoinGroup(self, message) -> None:
        # The member's address is the connection's, as the server's translation takes it.
        self.groups.join_group(replace(message.body, client_host=message.src), self._answer(message))

    def _handle_SyncGroup(self, message) -> None:
        request: SyncGroup = message.body
        respond, shard = self._answer(message), self.node.group_coordinator.shard_for(request.group_id)

        def answered(response: dict) -> None:
            if response["error_code"] == ErrorCode.NONE:
                self.sim.checker.on_assignment(self.broker_id, shard, request.group_id, request.generation_id,
                                               request.member_id, response["assignment"])
            respond(response)
        self.groups.sync_group(request, answered)

    def _handle_Heartbeat(self, message) -> None:
        self.reply(message, self.groups.heartbeat(message.body))

    def _handle_LeaveGroup(self, message) -> None:
        self.reply(message, self.groups.leave_group(message.body))

    def _handle_OffsetCommit(self, message) -> None:
        request: OffsetCommit = message.body
        respond, shard = self._answer(message), self.node.group_coordinator.shard_for(request.group_id)
        # The checker knows a commit by its record's timestamp: wall time, as the shard writes it.
        taken = None if isinstance(shard, ErrorCode) else \
            self.sim.checker.on_commit_taken(self.broker_id, shard, request, self.clock.now_ms())

        def answered(errors: dict) -> None:
            if taken is not None:
                self.sim.checker.on_commit_answered(taken, errors)
            respond(errors)
        self.groups.offset_commit(request, answered)

    def _handle_OffsetFetch(self, message) -> None:
        self.reply(message, self.groups.offset_fetch(message.body))

    # ================================================================ transaction coordinator

    def _handle_FindTxnCoordinator(self, message) -> None:
        found = self.groups.find_coordinator(message.body["transactional_id"], TRANSACTION_KEY)
        self.reply(message, {"error_code": found["error_code"], "node_id": found["node_id"]})

    def _txn_shard(self, message):
        shard = self.node.txn_coordinator.shard_for(message.body["transactional_id"])
        if isinstance(shard, ErrorCode):
            self.reply(message, {"error_code": int(shard)})
            return None
        return shard

    def _handle_InitTxnProducer(self, message) -> None:
        shard, respond = self._txn_shard(message), self._answer(message)
        if shard is not None:
            shard.init_producer_id(message.body["transactional_id"], message.body["timeout_ms"], -1, -1,
                                   self.sim.next_producer_id(), self.node.txn_coordinator.now_ms(),
                                   lambda error, pid, epoch: respond({"error_code": int(error), "producer_id": pid,
                                                                      "producer_epoch": epoch}))

    def _handle_AddPartitionsToTxn(self, message) -> None:
        body, respond = message.body, self._answer(message)
        request = AddPartitionsToTxn(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                     tuple(sorted(body["partitions"])), verify_only=False)
        self.txn.add_partitions_to_txn(request, lambda errors: respond(
            {"error_code": int(next(iter(errors.values()), ErrorCode.NONE))}))

    def _handle_EndTxn(self, message) -> None:
        body, shard, respond = message.body, self._txn_shard(message), self._answer(message)
        if shard is not None and body.get("transaction_version", 1) >= 2:       # EndTxn v5
            transactional_id = body["transactional_id"]
            fresh = self.sim.next_producer_id() if shard.epoch_exhausted(transactional_id) else -1
            shard.end_transaction_v2(transactional_id, body["producer_id"], body["producer_epoch"], body["commit"],
                                     fresh, self.node.txn_coordinator.now_ms(),
                                     lambda error, pid, epoch: respond({"error_code": int(error), "producer_id": pid,
                                                                        "producer_epoch": epoch}))
        elif shard is not None:
            shard.end_transaction(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                  body["commit"], self.node.txn_coordinator.now_ms(),
                                  lambda error: respond({"error_code": int(error)}))

    # ================================================================ looking

    def partition(self, tp: TopicPartition) -> Partition | None:
        return self.replica_manager.get_partition(tp) if self.up else None
