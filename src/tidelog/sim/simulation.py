"""One simulated cluster and one run of it: set up, fault phase, healed phase, verdict.

Theory of operation. ``Simulation(config, directory)`` builds, from the seed:
one ``random.Random`` (every random choice of the run draws from it), the event
loop, the network, the controller, ``config.brokers`` brokers (ids 1..N, data
under ``directory``), the clients (producers, consumers, group members) and the
checker, which the loop calls after every event but a client's own (those
change nothing it reads). ``run()`` then:

1. starts the controller and the brokers, waits until all are RUNNING, creates
   the topics and waits until every partition has a leader and a full ISR;
2. starts the clients and the nemesis, and runs the fault phase
   (``fault_phase_ms`` of simulated time), checking invariants after each event;
3. heals everything (``Nemesis.heal_all``: network, disks, processes), lets the
   producers write until each has had an acknowledgement, stops them, and runs
   until the cluster has converged (``converged()`` returns no reason) or
   ``healed_phase_ms`` has passed (a ``10.5-convergence`` failure);
4. checks the end state: byte-identical replicas, the committed history in the
   final logs, every acks=all acknowledgement present, duplicates only as many
   as produce requests carried a value, producer order, equal metadata images.

A violated invariant stops the run at once; ``SimResult`` carries the verdict,
the invariant's name, the trace digest and the last trace lines. Scenarios
(``scenarios.py``) use the same object with their own script instead of the
nemesis: the fault methods here (``kill``, ``power_cut``, ``partition`` …) are
what both call.
"""

from __future__ import annotations

import logging
import random
import traceback
from dataclasses import dataclass, field

from tidelog.core.ids import TopicPartition
from tidelog.group.coordinator import OFFSETS_TOPIC
from tidelog.records.batch import iter_batches, iter_records
from tidelog.sim.broker import PENDING_CONTROLLED_SHUTDOWN, RUNNING, SimBroker
from tidelog.sim.checker import Checker, InvariantViolation, record_id
from tidelog.sim.clients import SimConsumer, SimProducer, record_is_tombstone, record_key, value_sequence
from tidelog.sim.txn_clients import SimTxnConsumer, SimTxnProducer, TxnBook
from tidelog.txn.coordinator import TRANSACTION_STATE_TOPIC
from tidelog.sim.config import RunStats, SimConfig
from tidelog.sim.controller import CONTROLLER_ID_BASE, SimController
from tidelog.sim.group_clients import SimGroupMember, group_unsettled
from tidelog.sim.loop import EventLoop, Trace
from tidelog.sim.nemesis import Nemesis
from tidelog.sim.network import Network

SETUP_TIMEOUT_MS = 30_000
PRODUCE_AFTER_HEAL_MS = 3000


@dataclass
class SimResult:
    seed: int
    config: SimConfig
    passed: bool
    invariant: str | None = None
    detail: str = ""
    digest: str = ""
    trace_tail: list[str] = field(default_factory=list)
    stats: RunStats = field(default_factory=RunStats)
    excused: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.passed:
            return (f"seed={self.seed} passed controllers={self.config.controllers} events={self.stats.events} "
                    f"elections={self.stats.controller_elections} digest={self.digest[:16]}")
        return f"seed={self.seed} config={self.config.describe()} invariant={self.invariant}"


class Simulation:
    def __init__(self, config: SimConfig, directory: str, trace: Trace | None = None):
        self.config = config
        self.directory = directory
        self.rng = random.Random(f"tidelog-sim-run-{config.seed}")
        self.loop = EventLoop(trace or Trace())
        self.network = Network(self.loop, self.rng, config.net_delay_ms, config.net_jitter_ms,
                               config.net_link_spread_ms, config.seed)
        self.stats = RunStats()
        drift = list(config.clock_drift_ppm) or [0] * (config.brokers + 1)
        self.controller_ids = [CONTROLLER_ID_BASE + i for i in range(config.controllers)]
        controller_drift = [drift[0]] + list(config.controller_drift_ppm) + [0] * config.controllers
        self.controllers = {c: SimController(self, c, tuple(self.controller_ids), controller_drift[i])
                            for i, c in enumerate(self.controller_ids)}
        self.broker_ids = list(range(1, config.brokers + 1))
        self.brokers = {b: SimBroker(self, b, drift[b % len(drift)]) for b in self.broker_ids}
        self.checker = Checker(self)
        self.producers: list[SimProducer] = []
        self.consumers: list[SimConsumer] = []
        for i, client in enumerate(config.clients):
            if client.kind == "producer":
                # acks=all producers are idempotent on even seeds (decided without drawing
                # from the run's random stream, so odd seeds replay as before).
                idempotent = client.acks == -1 and config.seed % 2 == 0
                self.producers.append(SimProducer(self, f"p{i}", client.topic, client.acks,
                                                  producer_id=1000 + i if idempotent else -1))
            else:
                self.consumers.append(SimConsumer(self, f"c{i}", client.topic))
        self.members = {group.name: [SimGroupMember(self, f"{group.name}m{j}", group) for j in range(group.members)]
                        for group in config.groups}
        self.txn_book = TxnBook(self)
        self._producer_ids = 5000
        self.txn_clients = [SimTxnProducer(self, "txp"), SimTxnConsumer(self, "txc")] if config.transactions else []
        self.nemesis = Nemesis(self)
        self.healed = False
        self._client_processes = {c.owned for c in self.producers + self.consumers + self.group_members
                                  + self.txn_clients}
        # The processes whose state an event of each can change: its own.
        self._scopes = {**{c.owned: ((c,), ()) for c in self.controllers.values()},
                        **{b.owned: ((), (b,)) for b in self.brokers.values()}}
        self._changed_outside_events = True    # setup, a scenario's step: check everything next
        self.loop.after_event = self._after_event

    # ================================================================ the controller quorum

    @property
    def controller_names(self) -> list[str]:
        return [self.controllers[c].name for c in self.controller_ids]

    def active_controller(self) -> SimController | None:
        """The active controller that runs (not paused), if any."""
        active = [c for c in self.controllers.values() if c.active and not c.owned.paused]
        return active[0] if len(active) == 1 else None

    @property
    def controller(self) -> SimController:
        """The active controller; else the one with the most committed (what the
        operator's tools would show)."""
        active = self.active_controller()
        if active is not None:
            return active
        up = [c for c in self.controllers.values() if c.up]
        return max(up or self.controllers.values(),
                   key=lambda c: (c.up, c.replica.high_watermark if c.replica else -1, -c.node_id))

    def next_producer_id(self) -> int:
        """Producer ids for the transaction coordinators (production allocates blocks
        through the controller; here one counter serves every broker)."""
        self._producer_ids += 1
        return self._producer_ids

    @property
    def group_members(self) -> list[SimGroupMember]:
        return [member for members in self.members.values() for member in members]

    def _after_event(self, event) -> None:
        """The invariants, after every event that can change what they read: a client's
        own events (its timers, the answers it gets) change no broker or controller, and
        a message in transit changes only the network (its delivery is the receiver's
        event)."""
        if event.transit or event.owner in self._client_processes:
            return
        # A broker's or controller's event changes only that process (its messages to
        # others are delivered in their events). An event of no process (the nemesis, a
        # restart) or changes made between runs of the loop may change any.
        scope = None if self._changed_outside_events else self._scopes.get(event.owner)
        self._changed_outside_events = False
        if scope is None:
            self.checker.check()
        else:
            self.checker.check(*scope)

    @property
    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t.name, p) for t in self.config.topics for p in range(t.partitions)]

    def offsets_partitions(self, image) -> list[TopicPartition]:
        """``__consumer_offsets``, once a FindCoordinator has had it created."""
        topic = image.topic(OFFSETS_TOPIC)
        return [] if topic is None else [TopicPartition(OFFSETS_TOPIC, p) for p in sorted(topic.partitions)]

    # ================================================================ faults (nemesis and scenarios)

    def fault(self, label: str, action) -> None:
        self.loop.trace.add(self.loop.now_ms, "nemesis", label)
        action()

    def start(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.up and broker.state == PENDING_CONTROLLED_SHUTDOWN and not broker.owned.paused:
            broker._stop_now()    # SIGTERM was sent; the restart waits for the stop
        if broker.up:
            return
        if broker.disk.faulted():
            # A broker whose disk is full or failed stays down until the disk is back
            # (else it would re-create the lost partitions on another directory).
            self.fault(f"start b{broker_id} deferred: its disk is faulted", lambda: None)
            return
        self.fault(f"start b{broker_id}", broker.start)

    def kill(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.up:
            self.fault(f"kill -9 b{broker_id}", broker.kill)

    def power_cut(self, broker_id: int, tear: bool = False) -> None:
        broker = self.brokers[broker_id]
        if broker.up:
            lost = broker.power_cut(tear)
            self.fault(f"power cut b{broker_id}{' (torn write)' if tear else ''}: lost "
                       f"{sum(lost.values())} bytes in {sorted(lost)}", lambda: None)
            self.checker.on_data_loss(broker_id, lost, "a power cut")

    def stop(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.up and not broker.owned.paused:
            self.fault(f"SIGTERM b{broker_id}", broker.stop)

    def pause(self, name: str) -> None:
        node = self.network.nodes[name]
        if node.up and not node.owned.paused:
            self.fault(f"pause {name}", lambda: setattr(node.owned, "paused", True))

    def resume(self, name: str) -> None:
        node = self.network.nodes[name]
        if node.owned.paused:
            self.fault(f"resume {name}", lambda: self.loop.resume(node.owned))

    def kill_controller(self, node_id: int | None = None) -> None:
        controller = self.controllers[node_id if node_id is not None else self.controller_ids[0]]
        if controller.up:
            self.fault(f"kill -9 {controller.name}", controller.kill)

    def start_controller(self, node_id: int | None = None) -> None:
        for c in [node_id] if node_id is not None else self.controller_ids:
            controller = self.controllers[c]
            if not controller.up:
                self.fault(f"start {controller.name}", controller.start)

    def disk_fault(self, broker_id: int, log_dir: str, kind: str) -> None:
        disk = self.brokers[broker_id].disk
        name = f"b{broker_id}/{log_dir.rsplit('/', 1)[-1]}"
        if kind == "full":
            self.fault(f"disk full {name}", lambda: disk.fill(log_dir))
        else:
            self.fault(f"disk failed {name}", lambda: disk.fail(log_dir))

    def heal_disk(self, broker_id: int, log_dir: str) -> None:
        """A full disk drains; a failed one is replaced by an empty disk (the broker
        restarts either way if the directory had gone offline, or had been down)."""
        broker = self.brokers[broker_id]
        disk = broker.disk
        if disk.is_failing(log_dir):
            if broker.up:
                self.fault(f"kill -9 b{broker_id} to replace its disk", broker.kill)
            lost = disk.replace(log_dir)
            broker.disk_replaced(log_dir)
            self.fault(f"replaced the disk {log_dir.rsplit('/', 1)[-1]} of b{broker_id}: "
                       f"{len(lost)} partitions start empty", lambda: None)
            self.checker.on_data_loss(broker_id, {name: 1 for name in lost}, "its disk was replaced")
        disk.drain(log_dir)
        if broker.up and not broker.owned.paused and broker.log_manager.offline_dirs:
            self.fault(f"restart b{broker_id} (log directory back)", broker.kill)
        self.start(broker_id)

    def heal(self) -> None:
        """End the fault phase: every fault undone, every process running."""
        self.nemesis.heal_all()
        self.fault("heal network", self.network.heal)
        for name in sorted(self.network.nodes):
            self.resume(name)
        self.start_controller()
        for broker_id in self.broker_ids:
            broker = self.brokers[broker_id]
            for log_dir in broker.log_dirs:
                self.heal_disk(broker_id, log_dir)
            broker.clock.wall_offset_ms = 0
            self.start(broker_id)
        self.healed = True

    # ================================================================ running

    def run_until(self, predicate, timeout_ms: int, what: str = "condition") -> None:
        deadline = self.loop.now_ms + timeout_ms
        if predicate():
            return
        self._changed_outside_events = True
        if not self.loop.run_until(deadline, predicate):
            raise TimeoutError(f"timed out after {timeout_ms} ms waiting for {what}")

    def run_for(self, ms: int) -> None:
        self._changed_outside_events = True
        self.loop.run_until(self.loop.now_ms + ms)

    def setup(self) -> None:
        for controller in self.controllers.values():
            controller.start()
        self.run_until(lambda: self.active_controller() is not None, SETUP_TIMEOUT_MS, "an active controller")
        for broker_id in self.broker_ids:
            self.brokers[broker_id].start()
        self.run_until(lambda: all(b.state == RUNNING for b in self.brokers.values()), SETUP_TIMEOUT_MS,
                       "every broker RUNNING")
        for topic in self.config.topics:
            configs = {"min.insync.replicas": str(topic.min_insync_replicas),
                       "unclean.leader.election.enable": str(topic.unclean).lower(),
                       "segment.bytes": str(topic.segment_bytes)}
            if topic.flush_messages is not None:
                configs["flush.messages"] = str(topic.flush_messages)
            if topic.flush_ms is not None:
                configs["flush.ms"] = str(topic.flush_ms)
            if topic.compact:
                configs["cleanup.policy"] = "compact"
                configs["min.cleanable.dirty.ratio"] = str(topic.min_cleanable_dirty_ratio)
                if topic.delete_retention_ms is not None:
                    configs["delete.retention.ms"] = str(topic.delete_retention_ms)
            self.run_until(lambda: self.active_controller() is not None, SETUP_TIMEOUT_MS, "an active controller")
            self.active_controller().create_topic(topic.name, topic.partitions, topic.replication_factor,
                                                  configs, topic.assignments)
        self.run_until(self.fully_replicated, SETUP_TIMEOUT_MS, "every partition fully in sync")
        self.loop.trace.add(self.loop.now_ms, "sim", f"set up: {self.config.describe()}")

    def fully_replicated(self) -> bool:
        for tp in self.partitions:
            active = self.active_controller()
            registration = active.image.partition(tp) if active is not None else None
            if registration is None or registration.leader < 0 or set(registration.isr) != set(registration.replicas):
                return False
            for replica in registration.replicas:
                partition = self.brokers[replica].partition(tp)
                if partition is None or partition.leader_epoch != registration.leader_epoch:
                    return False
        return True

    def start_clients(self) -> None:
        for client in self.producers + self.consumers + self.group_members + self.txn_clients:
            client.start()

    def run(self) -> SimResult:
        """The whole run; never raises for a violated invariant (see ``SimResult``)."""
        result = SimResult(self.config.seed, self.config, passed=False)
        try:
            self.setup()
            self.start_clients()
            self.nemesis.start()
            self.run_for(self.config.fault_phase_ms)
            self.heal()
            self.healed_phase()
            self.final_checks()
            result.passed = True
        except InvariantViolation as e:
            result.invariant, result.detail = e.invariant, e.detail
        except TimeoutError as e:
            result.invariant, result.detail = "10.5-convergence", str(e)
        except Exception as e:   # a crash inside production code is a failure too
            result.invariant = f"exception:{type(e).__name__}"
            result.detail = "".join(traceback.format_exception(e))[-4000:]
        if not result.passed:
            self.loop.trace.add(self.loop.now_ms, "check", f"FAILED {result.invariant}: {result.detail}")
        self.stats.events = self.loop.events_run
        self.stats.sim_ms = self.loop.now_ms
        result.stats = self.stats
        result.digest = self.loop.trace.digest
        result.trace_tail = list(self.loop.trace.recent)
        result.excused = [f"{tp}: {reason}" for tp, h in sorted(self.checker.histories.items()) for reason in h.resets]
        return result

    def close(self) -> None:
        """Release every file the run still holds (processes end as by kill -9)."""
        for broker in self.brokers.values():
            if broker.up:
                broker.kill()
            broker.disk.process_exit()

    # ================================================================ healed phase

    def healed_phase(self) -> None:
        healed_at = self.loop.now_ms
        deadline = healed_at + self.config.healed_phase_ms
        writing = [p for p in self.producers if p.acks != 0]
        txn_producers = [c for c in self.txn_clients if isinstance(c, SimTxnProducer)]
        self.run_until(lambda: self.loop.now_ms >= healed_at + PRODUCE_AFTER_HEAL_MS
                       and all(p.acked_since_heal > 0 for p in writing)
                       and all(p.committed_since_heal > 0 for p in txn_producers),
                       self.config.healed_phase_ms, "every producer acknowledged after healing")
        for producer in self.producers + txn_producers:
            producer.active = False
        self.loop.trace.add(self.loop.now_ms, "sim", "producers stopped")
        reasons = self.converged()
        while reasons and self.loop.now_ms < deadline:
            self.run_for(250)
            reasons = self.converged()
        if reasons:
            raise InvariantViolation("10.5-convergence", "; ".join(reasons[:5]))
        for consumer in self.consumers + self.group_members + self.txn_clients:
            consumer.active = False
        self.loop.trace.add(self.loop.now_ms, "sim", f"converged {self.loop.now_ms - healed_at} ms after healing")

    def converged(self) -> list[str]:
        reasons = []
        if any(p.in_flight for p in self.producers + self.txn_clients if isinstance(p, (SimProducer, SimTxnProducer))):
            reasons.append("produce requests (or a transaction) in flight")
        active = self.active_controller()
        if active is None:
            return reasons + ["no active controller"]
        reasons += self.quorum_unsettled(active)
        image = active.image
        for broker in self.brokers.values():
            if broker.state != RUNNING:
                reasons.append(f"b{broker.broker_id} is {broker.state}")
            elif broker.image.offset != image.offset:
                reasons.append(f"b{broker.broker_id} metadata at {broker.image.offset}, controller at {image.offset}")
        ends: dict[TopicPartition, int] = {}
        for tp in self.partitions + self.offsets_partitions(image) + self.transaction_partitions(image):
            registration = image.partition(tp)
            if registration.leader < 0:
                reasons.append(f"{tp} has no leader")
                continue
            if set(registration.isr) != set(registration.replicas):
                reasons.append(f"{tp} ISR {list(registration.isr)} of {list(registration.replicas)}")
            leader = self.brokers[registration.leader].partition(tp)
            if leader is None or not leader.is_leader:
                reasons.append(f"{tp}: b{registration.leader} does not lead it yet")
                continue
            end = ends[tp] = leader.log.log_end_offset
            for replica in registration.replicas:
                partition = self.brokers[replica].partition(tp)
                if partition is None:
                    reasons.append(f"{tp}: b{replica} does not host it")
                elif (partition.leader_epoch, partition.log.log_end_offset, partition.log.high_watermark) != (
                        registration.leader_epoch, end, end):
                    reasons.append(f"{tp}: b{replica} epoch {partition.leader_epoch} LEO "
                                   f"{partition.log.log_end_offset} HW {partition.log.high_watermark}, leader "
                                   f"epoch {registration.leader_epoch} LEO {end}")
            txn_readers = [] if self.txn_state_lost() else [c for c in self.txn_clients if isinstance(c, SimTxnConsumer)]
            for consumer in self.consumers + txn_readers:
                if consumer.topic == tp.topic and consumer.positions[tp] < end:
                    reasons.append(f"{consumer.name} at {tp} offset {consumer.positions[tp]} of {end}")
        for group in self.config.groups:
            reasons += group_unsettled(self, group, self.members[group.name], ends)
        return reasons

    def quorum_unsettled(self, active: SimController) -> list[str]:
        """Every voter runs, follows the active controller and holds its whole log, committed."""
        reasons = []
        leader = active.replica
        for controller in self.controllers.values():
            replica = controller.replica
            if not controller.up:
                reasons.append(f"{controller.name} is down")
            elif (replica.epoch, replica.leader_id, controller.log.end_offset, replica.high_watermark) != (
                    leader.epoch, leader.node_id, active.log.end_offset, active.log.end_offset):
                reasons.append(f"{controller.name}: epoch {replica.epoch} leader {replica.leader_id} log end "
                               f"{controller.log.end_offset} HW {replica.high_watermark}; the leader "
                               f"{active.name}'s epoch {leader.epoch} log end {active.log.end_offset}")
        return reasons

    # ================================================================ the end state

    def log_bytes(self, broker_id: int, tp: TopicPartition) -> bytes:
        log = self.brokers[broker_id].partition(tp).log
        out, offset = bytearray(), log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20, max_offset=None).records.read_bytes()
            if not data:
                break
            for position, header in iter_batches(data):
                out += data[position:position + header.size_bytes]
                offset = header.next_offset
        return bytes(out)

    def txn_state_lost(self) -> bool:
        """A ``__transaction_state`` partition lost acknowledged records (excused, as every
        such loss): a transaction its coordinator forgot stays open, holding the last
        stable offset back for good — Kafka's "hanging transaction", which an operator
        aborts by hand. Its read_committed reader is then not waited for."""
        return any(h.resets for tp, h in self.checker.histories.items() if tp.topic == TRANSACTION_STATE_TOPIC)

    def transaction_partitions(self, image) -> list[TopicPartition]:
        topic = image.topic(TRANSACTION_STATE_TOPIC)
        return [] if topic is None else [TopicPartition(TRANSACTION_STATE_TOPIC, p) for p in sorted(topic.partitions)]

    def final_checks(self) -> None:
        active = self.active_controller()
        image = active.image
        reference = active.log.read_entries(0, 1 << 30)
        for controller in self.controllers.values():
            if controller.log.read_entries(0, 1 << 30) != reference:
                raise InvariantViolation("10.5-convergence", f"{controller.name}'s metadata log differs from "
                                         f"the active controller {active.name}'s")
            if controller.image != image:
                raise InvariantViolation("10.7-metadata-images-agree", f"{controller.name} after convergence")
        self.stats.metadata_records_committed = active.log.end_offset
        self.stats.compaction_rewrites = sum(mirror.rewrites for mirror in self.checker.mirrors.values())
        for broker in self.brokers.values():
            if broker.image != image:
                raise InvariantViolation("10.7-metadata-images-agree", f"b{broker.broker_id} after convergence")
        for tp in self.partitions + self.offsets_partitions(image) + self.transaction_partitions(image):
            registration = image.partition(tp)
            logs = {b: self.log_bytes(b, tp) for b in registration.replicas}
            reference = logs[registration.leader]
            if self.checker.history(tp).compacted:
                self._check_compacted_replicas(tp, logs, registration.leader)
                logs = {}
            for b, data in logs.items():
                if data != reference:
                    raise InvariantViolation("10.5-convergence", f"{tp}: b{b}'s log differs from leader "
                                             f"b{registration.leader}'s ({len(data)} vs {len(reference)} bytes)")
            self._check_final_log(tp, reference)
        if not self.txn_state_lost():
            self.txn_book.final_check()

    def _check_compacted_replicas(self, tp: TopicPartition, logs: dict[int, bytes], leader: int) -> None:
        """10.5 for a compacted topic: each replica's cleaner runs on its own, so replicas
        need not be byte-identical; where two hold a record at an offset it is the same
        record, and a record only some hold is one a later record of its key superseded."""
        history = self.checker.history(tp)
        reference = _records(logs[leader], compacted=True)
        for b, data in logs.items():
            records = _records(data, compacted=True)
            self._check_no_resurrection(tp, b, records)
            for offset in reference.keys() | records.keys():
                mine, leaders = records.get(offset), reference.get(offset)
                if not history.replicas_agree(offset, mine, leaders):
                    raise InvariantViolation("10.5-convergence", f"{tp}: b{b} holds {mine and mine[2]!r} at "
                                             f"offset {offset}, leader b{leader} {leaders and leaders[2]!r}")

    def _check_no_resurrection(self, tp: TopicPartition, broker_id: int, records: dict) -> None:
        """compaction-no-resurrection: a replica that lacks its key's last committed record,
        an expired tombstone, holds none of the key's older records — unless it never held
        the tombstone: it lagged behind (out of the ISR, or down) while the leader removed it,
        and fetched past the gap (Kafka's design allows it: ``delete.retention.ms`` is how far
        behind any reader may fall). Those are counted (``tombstones_missed``)."""
        history = self.checker.history(tp)
        if not history.deletes_expire:
            return
        older: dict[bytes, int] = {}
        for offset, record in records.items():
            older.setdefault(record[3], offset)
        seen = self.checker.mirrors[(broker_id, tp)].tombstones_seen
        for key, last in history.latest.items():
            record = history.records[last][0]
            if last in records or not record[4] or older.get(key, last) >= last or last < history.tainted_below:
                continue
            if last in seen:
                raise InvariantViolation("compaction-no-resurrection", f"{tp}: b{broker_id} removed the tombstone "
                                         f"of {key!r} at {last} but keeps its older record at {older[key]}")
            self.stats.tombstones_missed += 1

    def _check_final_log(self, tp: TopicPartition, data: bytes) -> None:
        checker = self.checker
        history = checker.history(tp)
        records = _records(data, history.compacted)
        for offset, (record, epoch) in sorted(history.records.items()):
            if offset not in records and history.may_lack(offset, record):
                self.stats.compacted_away += 1
                if history.expired_tombstone(offset, record):
                    self.stats.tombstones_removed += 1
            elif records.get(offset) != record:
                raise InvariantViolation("10.4-acknowledged-write-kept", f"{tp} offset {offset} committed at "
                                         f"epoch {epoch} as {record[2]!r} is {records.get(offset)} at the end")
        if tp.topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            return                      # the coordinators' records: no producer wrote them
        markers = {offset for position, header in iter_batches(data) if header.is_control
                   for offset in range(header.base_offset, header.next_offset)}
        values = [value for offset, (_, _, value, _, _) in sorted(records.items()) if offset not in markers]
        counts: dict[bytes, int] = {}
        for value in values:
            counts[value] = counts.get(value, 0) + 1
        idempotent = {p.name.encode() for p in self.producers if p.producer_id >= 0} | {b"tx"}
        for value, count in counts.items():
            if count > 1 and value.split(b"-", 1)[0] in idempotent:
                raise InvariantViolation("idempotent-exactly-once", f"{tp}: {value!r} from an idempotent "
                                         f"producer appears {count} times")
            if count > checker.received.get(value, 0):
                raise InvariantViolation("producer-duplicates", f"{tp}: {value!r} appears {count} times but "
                                         f"only {checker.received.get(value, 0)} produce requests carried it")
        first = {}
        for offset, (_, _, value, _, _) in sorted(records.items()):
            first.setdefault(value, offset)
        last_by_producer: dict[str, tuple[int, int]] = {}
        held = {record[2] for record in history.held_at_reset}
        held_eligible = {record[2] for record in history.held_eligible_at_reset}
        topic = self.config.topic(tp.topic)
        for offset, value, acks, producer, resets in checker.acked.get(tp, []):
            if acks == -1 and records.get(offset, (0, 0, None))[2] != value and not (
                    topic.compact and history.superseded_or_expired(
                        offset, (0, 0, value, record_key(value, topic), record_is_tombstone(value, topic)))):
                # Excused only by a reset after the send (see Checker.on_produce_done); on a
                # clean topic no lineage outlives its reset, so a record sent after the
                # last one must be there (0 in 2,000 unseen seeds before this was enforced).
                if history.resets and (topic.unclean or resets < len(history.resets)):
                    self.stats.excused_losses += 1
                    if not topic.unclean:
                        self.stats.excused_losses_clean += 1
                        if topic.flush_messages == 1:
                            self.stats.excused_losses_clean_fsync += 1
                        if value in held:
                            self.stats.excused_losses_clean_held += 1
                        if value in held_eligible:
                            self.stats.excused_losses_clean_held_eligible += 1
                    continue
                self.stats.acked_all_lost += 1
                raise InvariantViolation("10.4-acknowledged-write-kept", f"{producer}: acks=all {value!r} "
                                         f"acknowledged at {tp} offset {offset} is not there at the end")
        for offset, value, acks, producer, _ in sorted(checker.acked.get(tp, []), key=lambda e: value_sequence(e[1])):
            where = first.get(value)
            if where is None or (topic.compact and producer.encode() not in idempotent):
                # A retry's duplicate supersedes the first copy of its key: on a compacted
                # topic a value's first copy may go, so only values written once are
                # ordered (an idempotent producer's; seed 1967 --compact)
                continue
            previous = last_by_producer.get(producer)
            if previous is not None and where < previous[1]:
                raise InvariantViolation("producer-order", f"{tp}: {producer}'s {value!r} first at offset {where}, "
                                         f"before its earlier acknowledged write #{previous[0]} at {previous[1]}")
            last_by_producer[producer] = (value_sequence(value), where)


def _records(data: bytes, compacted: bool = False) -> dict:
    """Offset -> ``RecordId`` of every record in ``data`` (whole batches)."""
    return {record.offset: record_id(header, record, compacted)
            for position, header in iter_batches(data) for record in iter_records(data, position)}


def run_seed(seed: int, directory: str, *, long: bool = False, defect: str | None = None,
             trace: Trace | None = None, config: SimConfig | None = None,
             controllers: int | None = None, elr: bool = True, audit_scope: bool = False,
             log_ends: bool = True, compact: bool = False) -> SimResult:
    """Run one seed (with a planted defect if asked; a quorum of ``controllers`` voters
    if given, else the seed's; eligible leader replicas on unless ``elr`` is False; the
    brokers' log-end reports on unless ``log_ends`` is False; the seed's topics compacted
    if ``compact``) in ``directory``. ``audit_scope``: see ``Checker.audit_scope`` (tests)."""
    from tidelog.sim.defects import planted
    config = config or SimConfig.from_seed(seed, long=long, defect=defect, controllers=controllers,
                                           compact=compact).with_options(eligible_leader_replicas=elr,
                                                          replica_log_ends=log_ends)
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        with planted(config.defect):
            simulation = Simulation(config, directory, trace)
            simulation.checker.audit_scope = audit_scope
            try:
                return simulation.run()
            finally:
                simulation.close()
    finally:
        quiet.setLevel(level)
