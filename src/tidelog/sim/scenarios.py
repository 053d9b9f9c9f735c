"""Named fault scenarios, scripted on the simulator, with expected outcomes.

Theory of operation. A scenario is a script over one ``Simulation`` with a fixed
configuration and no nemesis: it creates its topic with explicit replicas,
writes through a scripted client (``ScriptClient``), and injects exactly the
faults the scenario names at exactly the moments it names them — "when A has
fetched m2 but not yet the high watermark that commits it" is a
``wait(lambda: …)`` on real replica state, evaluated after every event. The
checker still runs after every event, so a scenario also proves the simulator's
invariants (docs/simulation.md, "Checks") along its path. Each returns what it
observed and whether that is the expected outcome; ``tests/sim/test_scenarios.py``
asserts it, and asserts that planted defects (``defects.py``) turn the outcome
around where the scenario exists to catch them.

Scripts record what they see with ``Script.expect``/``check`` (the outcome is as
expected when every expectation holds), and every message is recorded on its
way into the network, so a script can read a follower's exact Fetch and the
leader's exact answer. The replication scenarios (one fetch round step by step,
ISR shrink and rejoin, min ISR, acks=all across a leader crash, DeleteRecords,
long-poll fetches) are asserted by ``tests/sim/test_replication_scenarios.py``,
the truncation scenarios there in both fetcher modes (``fetcher_mode``).

``python -m tidelog.sim --scenario list`` prints them; ``--scenario NAME
[--defect D] [--trace]`` runs one.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import CONTROL_COMMIT, build_batch, iter_batches, iter_records, read_control
from tidelog.replication.fetcher import FetcherState, FetchRequestPlan, ListOffsetsPlan, OffsetsForLeaderEpochPlan
from tidelog.sim.checker import InvariantViolation
from tidelog.sim.controller import WRITES, sim_directory_id
from tidelog.sim.config import SimConfig, TopicSpec
from tidelog.sim.defects import planted
from tidelog.sim.loop import T0_WALL_MS, NodeClock, Trace
from tidelog.sim.network import Message, NetworkNode
from tidelog.sim.simulation import Simulation

TP = TopicPartition("t0", 0)


@dataclass
class ScenarioOutcome:
    name: str
    expected: str
    as_expected: bool = False
    observed: dict = field(default_factory=dict)
    violation: str | None = None
    trace_tail: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"scenario {self.name}: {'as expected' if self.as_expected else 'NOT AS EXPECTED'}",
                 f"  expected: {self.expected}"]
        lines += [f"  {key}: {value}" for key, value in self.observed.items()]
        if self.violation:
            lines.append(f"  invariant violated: {self.violation}")
        if not self.as_expected:
            lines += ["  last events:"] + [f"    {line}" for line in self.trace_tail[-40:]]
        return "\n".join(lines)


@dataclass(frozen=True)
class Scenario:
    name: str
    spec: str
    expected: str
    config: SimConfig
    script: Callable[["Script"], tuple[bool, dict]]


class _ProducerView:
    def __init__(self, name: str, acks: int):
        self.name, self.acks = name, acks


class ScriptClient(NetworkNode):
    """The scenario's client: one produce request at a time, to the broker it is told."""

    def __init__(self, sim: Simulation):
        super().__init__("client", sim.loop, sim.network)
        self.sim = sim
        self.clock = NodeClock(sim.loop)
        self.process_started()

    def on_request(self, message) -> None:
        raise AssertionError("the scenario client serves nothing")

    def produce(self, broker: int, tp: TopicPartition, values: list[bytes], acks: int,
                timeout_ms: int = 2000) -> dict:
        """Send one produce request (``timeout_ms`` is the request's own, as
        ``request.timeout.ms`` in a Kafka ProduceRequest); the answer lands in the
        returned dict when it arrives."""
        box: dict = {}
        body = {"tp": tp, "acks": acks, "timeout_ms": timeout_ms, "values": values,
                "batch": build_batch(values, timestamp_ms=self.clock.now_ms())}
        view = _ProducerView("client", acks)
        self.sim.checker.on_produce_started(view, tp, values)

        def on_reply(response) -> None:
            box.update(response)
            self.sim.checker.on_produce_done(view, tp, values, ErrorCode(response["error_code"]),
                                             response["base_offset"])

        self.rpc.request(f"b{broker}", "Produce", body, timeout_ms + 1000, on_reply,
                         lambda error: box.update(error_code=int(ErrorCode.NETWORK_EXCEPTION), why=error))
        return box


@dataclass(frozen=True, eq=False)
class Sent:
    """One message a node handed to the network, when, and whether the link was open."""

    at_ms: int
    message: Message
    reachable: bool


class Script:
    """What a scenario script works with: the simulation, a client, looking helpers,
    and ``expect``/``check``, which record an observation and whether it is the
    expected one (a scenario is as expected when every expectation was met).

    Every message a node sends is recorded (``sent``), so a script can wait for a
    follower's next Fetch and read exactly what it asked and what the leader answered."""

    def __init__(self, sim: Simulation, truncate_on_fetch: bool = True):
        self.sim = sim
        self.truncate_on_fetch = truncate_on_fetch
        self.client = ScriptClient(sim)
        self.written = 0
        self.observed: dict = {}
        self.unmet: list[str] = []
        self.sent: list[Sent] = []
        self.replies: dict[int, Sent] = {}       # correlation id -> the (non-refused) reply
        self._watches: list[Callable[[], None]] = []
        self._record_messages()
        self._run_watches()

    def _record_messages(self) -> None:
        network = self.sim.network
        send = network.send

        def recording(message: Message) -> None:
            entry = Sent(self.sim.loop.now_ms, message, network.reachable(message.src, message.dst))
            self.sent.append(entry)
            if message.is_reply and not message.refused and entry.reachable:
                self.replies.setdefault(message.correlation_id, entry)
            send(message)

        network.send = recording

    def _run_watches(self) -> None:
        loop, checker = self.sim.loop, self.sim.loop.after_event

        def after_event(event) -> None:
            if checker is not None:
                checker(event)
            for watch in self._watches:
                watch()

        loop.after_event = after_event

    def watch(self, action: Callable[[], None]) -> None:
        """Call ``action`` after every event from now on (with the invariant checker)."""
        self._watches.append(action)

    # ------------------------------------------------------------ expectations

    def expect(self, what: str, observed, expected) -> None:
        self.observed[what] = observed
        if observed != expected:
            self.unmet.append(f"{what}: {observed!r}, expected {expected!r}")

    def check(self, what: str, observed, ok: bool) -> None:
        self.observed[what] = observed
        if not ok:
            self.unmet.append(f"{what}: {observed!r}")

    def outcome(self) -> tuple[bool, dict]:
        if self.unmet:
            self.observed["unmet expectations"] = list(self.unmet)
        return not self.unmet, self.observed

    # ------------------------------------------------------------ looking

    def leader(self, tp: TopicPartition = TP) -> int:
        return self.sim.controller.image.partition(tp).leader

    def isr(self, tp: TopicPartition = TP) -> tuple[int, ...]:
        return self.sim.controller.image.partition(tp).isr

    def partition(self, broker: int, tp: TopicPartition = TP):
        return self.sim.brokers[broker].partition(tp)

    def leo(self, broker: int, tp: TopicPartition = TP) -> int:
        partition = self.partition(broker, tp)
        return -1 if partition is None else partition.log.log_end_offset

    def hw(self, broker: int, tp: TopicPartition = TP) -> int:
        partition = self.partition(broker, tp)
        return -1 if partition is None else partition.log.high_watermark

    def values(self, broker: int, tp: TopicPartition = TP) -> list[bytes]:
        data = self.sim.log_bytes(broker, tp)
        return [r.value for position, _ in iter_batches(data) for r in iter_records(data, position)]

    def leads(self, broker: int, tp: TopicPartition = TP) -> bool:
        """The controller names ``broker`` and it acts as leader at that epoch."""
        registration = self.sim.controller.image.partition(tp)
        partition = self.partition(broker, tp)
        return (registration.leader == broker and partition is not None and partition.is_leader
                and partition.leader_epoch == registration.leader_epoch)

    def running(self, broker: int) -> bool:
        state = self.sim.brokers[broker].state
        return self.sim.brokers[broker].up and getattr(state, "name", state) == "RUNNING"

    @property
    def now(self) -> int:
        return self.sim.loop.now_ms

    def monotonic(self, broker: int) -> int:
        """The broker's own monotonic clock, the one its replica states are kept in."""
        return self.sim.brokers[broker].replica_manager.clock.monotonic_ms()

    def records(self, broker: int, tp: TopicPartition = TP) -> list[tuple[int, int, bytes]]:
        """(offset, batch leader epoch, value) of every record in the replica's log."""
        return _records(self.sim.log_bytes(broker, tp))

    def leader_epoch(self, tp: TopicPartition = TP) -> int:
        return self.sim.controller.image.partition(tp).leader_epoch

    def failed_partitions(self) -> dict[int, set]:
        """Partitions some running broker's fetchers gave up on (waiting for new metadata)."""
        return {b: failed for b in self.sim.broker_ids if self.sim.brokers[b].up
                and (failed := self.sim.brokers[b].replica_manager.fetcher_manager.failed_partitions)}

    def mark(self) -> int:
        """A position in ``sent``: ``wait_request(..., after=mark)`` looks only past it."""
        return len(self.sent)

    def requests(self, kind: type | tuple[type, ...], src: str | None = None, dst: str | None = None,
                 after: int = 0) -> list[Sent]:
        return [e for e in self.sent[after:] if not e.message.is_reply and isinstance(e.message.body, kind)
                and src in (None, e.message.src) and dst in (None, e.message.dst)]

    def reply_to(self, request: Sent) -> Sent | None:
        return self.replies.get(request.message.correlation_id)

    # ------------------------------------------------------------ doing

    def wait(self, predicate, what: str, timeout_ms: int = 20_000) -> None:
        self.sim.run_until(predicate, timeout_ms, what)

    def wait_request(self, kind: type, src: str, dst: str, what: str, after: int,
                     timeout_ms: int = 20_000) -> Sent:
        """The first request of type ``kind`` from ``src`` to ``dst`` sent (over an
        open link) past the mark ``after``; runs the simulation until there is one.
        Returns right after the event that sent it, before it is delivered."""
        position, found = [after], []

        def seen() -> bool:
            while position[0] < len(self.sent):
                entry = self.sent[position[0]]
                position[0] += 1
                message = entry.message
                if (entry.reachable and not message.is_reply and isinstance(message.body, kind)
                        and (message.src, message.dst) == (src, dst)):
                    found.append(entry)
                    return True
            return False

        self.wait(seen, what, timeout_ms)
        return found[0]

    def wait_reply(self, request: Sent, what: str, timeout_ms: int = 20_000) -> Sent:
        """Runs until ``request`` is answered; returns right after the event that sent
        the answer (the answerer's state is as it was when it answered)."""
        self.wait(lambda: self.reply_to(request) is not None, what, timeout_ms)
        return self.reply_to(request)

    def produce(self, values: list[str], acks: int, broker: int | None = None,
                tp: TopicPartition = TP, timeout_ms: int = 2000) -> dict:
        broker = self.leader(tp) if broker is None else broker
        box = self.client.produce(broker, tp, [v.encode() for v in values], acks, timeout_ms)
        if acks == 0:
            return {"error_code": 0}
        self.wait(lambda: "error_code" in box, f"an answer to producing {values}")
        return box

    def write(self, n: int, acks: int = 1, broker: int | None = None) -> list[str]:
        values = []
        for _ in range(n):
            value = f"m{self.written}"
            self.written += 1
            answer = self.produce([value], acks, broker)
            assert answer["error_code"] == 0, (value, answer)
            values.append(value)
        return values

    def shrink(self, isr: tuple[int, ...], what: str) -> None:
        """Wait for the ISR to become ``isr``, writing an acks=1 record every 300 ms
        meanwhile: a follower that has everything is never out of sync, however long
        it is silent (Kafka's ``Partition.maybeShrinkIsr``)."""
        leader = self.leader()
        probes = [0]

        def probe() -> None:
            if self.isr() != isr:
                probes[0] += 1
                self.client.produce(leader, TP, [f"probe-{probes[0]}".encode()], 1)
                self.sim.loop.after(300, probe)

        probe()
        self.wait(lambda: self.isr() == isr, what)

    def expect_fetcher_mode(self) -> None:
        """The followers really ran in the scenario's mode: with truncate-on-fetch no
        OffsetsForLeaderEpoch is ever sent; without it, some were sent and answered."""
        asked = self.requests(OffsetsForLeaderEpochPlan)
        if self.truncate_on_fetch:
            self.expect("OffsetsForLeaderEpoch requests sent", len(asked), 0)
        else:
            answered = sum(1 for request in asked if self.reply_to(request) is not None)
            self.check("OffsetsForLeaderEpoch requests answered", answered, answered > 0)

    def converge(self, brokers: list[int], tp: TopicPartition = TP) -> None:
        def same() -> bool:
            if not all(self.partition(b, tp) is not None for b in brokers):
                return False
            ends = {(self.leo(b, tp), self.hw(b, tp)) for b in brokers}
            return len(ends) == 1 and len({self.sim.log_bytes(b, tp) for b in brokers}) == 1
        self.wait(same, f"replicas {brokers} byte-identical", 30_000)


def _records(data: bytes) -> list[tuple[int, int, bytes]]:
    return [(r.offset, header.partition_leader_epoch, r.value)
            for position, header in iter_batches(data) for r in iter_records(data, position)]


def _config(brokers: int, replicas: tuple[int, ...], min_isr: int, unclean: bool, *, flush_messages=1,
            flush_ms=None, lag_ms: int = 2000, session_ms: int = 3000, fetch_wait_ms: int = 200,
            **options) -> SimConfig:
    topic = TopicSpec("t0", 1, len(replicas), min_isr, unclean, flush_messages, 1 << 20, flush_ms, (replicas,))
    return SimConfig(seed=0, brokers=brokers, topics=(topic,), clients=(), session_timeout_ms=session_ms,
                     heartbeat_interval_ms=session_ms // 6, replica_lag_time_max_ms=lag_ms,
                     replica_fetch_wait_max_ms=fetch_wait_ms, replica_fetch_backoff_ms=200, request_timeout_ms=1000,
                     hw_checkpoint_interval_ms=5000, net_delay_ms=1, net_jitter_ms=0, fault_kinds=(),
                     **options)


# ====================================================================== the scenarios


def kip_101_1(s: Script) -> tuple[bool, dict]:
    """A (1) holds [m1 m2] with HW 1 — the HW that commits m2 reaches a follower one
    fetch later — and restarts; B (2) dies before A can fetch again; A leads.

    The restarted A must not truncate to its HW: it asks B where its latest epoch
    ends (a Fetch with ``last_fetched_epoch``, or OffsetsForLeaderEpoch without
    truncate-on-fetch) and keeps m2, which it still holds when elected."""
    a, b = 1, 2
    s.write(1)
    s.wait(lambda: s.hw(a) == 1, "A has m1 and HW 1")
    s.write(1)
    s.wait(lambda: s.leo(a) == 2, "A fetched m2")
    s.expect("A's HW when it had m2", s.hw(a), 1)
    s.sim.network.cut("b2", "b1")                       # B's answers to A are lost from now on
    s.wait(lambda: s.hw(b) == 2, "A's next fetch commits m2 on B")
    s.expect("A's (LEO, HW) when B committed m2", (s.leo(a), s.hw(a)), (2, 1))
    s.sim.stop(a)                                       # clean: the HW checkpoint says 1
    s.wait(lambda: not s.sim.brokers[a].up, "A stopped")
    s.sim.network.heal()
    s.sim.network.partition("b1", "b2")                 # A cannot fetch again after its restart
    restarted = s.mark()
    s.sim.start(a)
    s.wait(lambda: s.running(a) and s.partition(a) is not None, "A back")
    s.expect("A's (LEO, HW) after its restart", (s.leo(a), s.hw(a)), (2, 1))
    kinds = (FetchRequestPlan, OffsetsForLeaderEpochPlan)
    s.wait(lambda: s.requests(kinds, "b1", "b2", restarted), "A's first request to B after its restart")
    first = _describe(s.requests(kinds, "b1", "b2", restarted)[0].message.body)
    s.expect("A's first request after its restart", first,
             ("Fetch", 2, 0) if s.truncate_on_fetch else ("OffsetsForLeaderEpoch", 0))
    s.expect("A's log when it asked", s.values(a), [b"m0", b"m1"])
    s.sim.run_for(1000)
    s.sim.kill(b)                                       # the unclean election picks A
    s.wait(lambda: s.leads(a), "A leads")
    s.expect("A's log when elected", s.values(a), [b"m0", b"m1"])
    s.sim.network.heal()
    s.sim.start(b)
    s.converge([a, b])
    s.expect("both logs at the end", (s.values(a), s.values(b)), ([b"m0", b"m1"], [b"m0", b"m1"]))
    s.expect_fetcher_mode()
    return s.outcome()


def kip_101_2(s: Script) -> tuple[bool, dict]:
    """A (1) [m1 m2], B (2) [m1]; both crash; B returns first, leads, writes m3 at
    offset 1; A returns as follower, learns that its epoch ends at 1 on B (a
    diverging epoch in a Fetch answer, or OffsetsForLeaderEpoch), truncates to 1
    and fetches m3."""
    a, b = 1, 2
    s.write(1)
    s.wait(lambda: s.leo(b) == 1, "B has m1")
    s.sim.network.partition("b1", "b2")
    s.write(1, broker=a)                                # m1 at offset 1 on A only
    s.expect("A's log before the crashes", _offsets_and_values(s.records(a)), [(0, b"m0"), (1, b"m1")])
    s.expect("B's log before the crashes", _offsets_and_values(s.records(b)), [(0, b"m0")])
    s.sim.kill(a)
    s.wait(lambda: s.leader() == b, "A fenced, B elected")
    s.sim.kill(b)
    s.wait(lambda: s.leader() == -1, "no leader")
    s.sim.network.heal()
    s.sim.start(b)
    s.wait(lambda: s.leads(b), "B leads again")
    s.write(1, broker=b)                                # m2 at offset 1 on B
    s.expect("B's log after its write", _offsets_and_values(s.records(b)), [(0, b"m0"), (1, b"m2")])
    restarted = s.mark()
    s.sim.start(a)
    s.converge([a, b])
    s.expect("A's log at the end", _offsets_and_values(s.records(a)), [(0, b"m0"), (1, b"m2")])
    s.expect("B's log at the end", _offsets_and_values(s.records(b)), [(0, b"m0"), (1, b"m2")])
    learned = None
    for request in s.requests((FetchRequestPlan, OffsetsForLeaderEpochPlan), "b1", "b2", restarted):
        reply = s.reply_to(request)
        answer = None if reply is None else reply.message.body.get(TP)
        if isinstance(request.message.body, FetchRequestPlan) and answer is not None and answer.diverging_epoch:
            learned = ("Fetch", tuple(answer.diverging_epoch))
        elif isinstance(request.message.body, OffsetsForLeaderEpochPlan) and answer is not None:
            learned = ("OffsetsForLeaderEpoch", (answer.leader_epoch, answer.end_offset))
        if learned is not None:
            break
    expected_kind = "Fetch" if s.truncate_on_fetch else "OffsetsForLeaderEpoch"
    s.expect("how A learned where epoch 0 ends on B (answer, (epoch, end offset))", learned, (expected_kind, (0, 1)))
    s.expect_fetcher_mode()
    return s.outcome()


def kip_279(s: Script) -> tuple[bool, dict]:
    """Kafka's logsShouldNotDivergeOnUncleanLeaderElections: stop one, (re)start the
    other, writing 1, 1, 3, 1, 2 records; each log holds epochs the other never saw
    (the leader epochs interleave: y wrote in e1, x in e3 > e1, y in e2 > e3, x in
    e4 > e2), and the logs still end byte-identical, epoch caches included."""
    x, y = 1, 2

    def switch(stop: int, start: int | None) -> None:
        s.sim.stop(stop)
        s.wait(lambda: not s.sim.brokers[stop].up, f"b{stop} stopped")
        if start is not None:
            s.sim.start(start)
            s.wait(lambda: s.leads(start), f"b{start} leads")

    s.write(1)
    s.converge([x, y])
    switch(x, None)
    s.wait(lambda: s.leads(y), "y leads")
    s.write(1)
    switch(y, x)
    s.write(3)
    switch(x, y)
    s.write(1)
    y_epochs = [epoch for _, epoch, _ in s.records(y)]
    switch(y, x)
    s.write(2)
    x_epochs = [epoch for _, epoch, _ in s.records(x)]
    s.observed["epochs of y's records when it stopped the last time"] = y_epochs
    s.observed["epochs of x's records before y returned"] = x_epochs
    interleaved = (len(y_epochs) == 3 and len(x_epochs) == 6 and y_epochs[0] == x_epochs[0] == 0
                   and x_epochs[1] == x_epochs[2] == x_epochs[3] and x_epochs[4] == x_epochs[5]
                   and 0 < y_epochs[1] < x_epochs[1] < y_epochs[2] < x_epochs[4])
    s.check("epochs interleave: y e1 < x e3 < y e2 < x e4", (y_epochs, x_epochs), interleaved)
    s.sim.start(y)
    s.converge([x, y])
    expected = [b"m0", b"m2", b"m3", b"m4", b"m6", b"m7"]   # as Kafka's test
    s.expect("final log (x, y)", (s.values(x), s.values(y)), (expected, expected))
    s.expect("epochs of the final log's records", [epoch for _, epoch, _ in s.records(y)], x_epochs)
    caches = [list(s.partition(b).log.leader_epoch_cache.entries) for b in (x, y)]
    s.check("leader epoch caches (x, y) equal", caches, caches[0] == caches[1])
    s.expect_fetcher_mode()
    return s.outcome()


def _offsets_and_values(records: list[tuple[int, int, bytes]]) -> list[tuple[int, bytes]]:
    return [(offset, value) for offset, _, value in records]


def _describe(plan) -> tuple:
    """A follower's request as Kafka would name it: ("Fetch", fetch offset, last
    fetched epoch), ("OffsetsForLeaderEpoch", epoch asked about) or ("ListOffsets",)."""
    if isinstance(plan, FetchRequestPlan):
        return "Fetch", plan.partitions[TP].fetch_offset, plan.partitions[TP].last_fetched_epoch
    if isinstance(plan, OffsetsForLeaderEpochPlan):
        return "OffsetsForLeaderEpoch", plan.partitions[TP].leader_epoch
    return (type(plan).__name__,)


def kip_966(s: Script, flushed: bool) -> tuple[bool, dict]:
    """Replicas {1,2,3}, leader 3, min ISR 2. Broker 1 falls out of the ISR, then
    broker 2 (ISR {3}); 3 loses power with its unflushed tail, and returns as the
    only ISR member."""
    leader, second, third = 3, 2, 1
    committed = s.write(3, acks=-1)
    s.sim.network.partition("b3", "b1")
    s.shrink((3, 2), "broker 1 out of the ISR")
    committed += s.write(2, acks=-1)
    if flushed:
        s.sim.run_for(1500)                              # flush.ms passes: the tail is on disk
    s.sim.network.partition("b3", "b2")
    s.shrink((3,), "broker 2 out of the ISR")
    refused = ErrorCode(s.produce(["refused"], acks=-1)["error_code"])
    high_watermark = s.hw(leader)
    uncommitted = s.produce(["uncommitted"], acks=1)
    hw_after_acks_1 = s.hw(leader)
    s.sim.power_cut(leader)
    s.sim.network.heal()
    s.wait(lambda: s.leader() == -1, "the last ISR member is fenced")
    s.sim.start(leader)
    s.wait(lambda: s.leads(leader), "broker 3 leads again (the only ISR member)")
    s.converge([1, 2, 3])
    final = s.values(leader)
    lost = [v for v in committed if v.encode() not in final]
    observed = {"acks=all while ISR {3}": refused.name, "HW before/after an acks=1 write": (
                high_watermark, hw_after_acks_1), "acks=1 write while ISR {3}": ErrorCode(
                uncommitted["error_code"]).name, "committed (acks=all) records lost": lost,
                "excused by the checker": [r for h in s.sim.checker.histories.values() for r in h.resets]}
    strict = refused == ErrorCode.NOT_ENOUGH_REPLICAS and high_watermark == hw_after_acks_1
    return strict and (not lost if flushed else bool(lost)), observed


def kip_966_elr(s: Script) -> tuple[bool, dict]:
    """kip_966's faults with eligible leader replicas on: when broker 2 leaves the ISR
    {3, 2} (below min ISR 2) it stays eligible; 3 loses power with its unflushed tail.
    Fencing 3 empties the ISR and elects 2 from the ELR; 3 comes back from an unclean
    shutdown out of the ISR and ELR and follows. Nothing acknowledged is lost and the
    checker excuses nothing."""
    leader = 3
    committed = s.write(3, acks=-1)
    s.sim.network.partition("b3", "b1")
    s.shrink((3, 2), "broker 1 out of the ISR")
    committed += s.write(2, acks=-1)
    s.sim.network.partition("b3", "b2")
    s.shrink((3,), "broker 2 out of the ISR (it stays eligible)")
    elr = s.sim.active_controller().image.partition(TP).elr
    s.sim.power_cut(leader)
    s.sim.network.heal()
    s.wait(lambda: s.leads(2), "broker 2 leads: elected from the ELR")
    s.sim.start(leader)
    s.converge([1, 2, 3])
    final = s.values(2)
    lost = [v for v in committed if v.encode() not in final]
    resets = [r for h in s.sim.checker.histories.values() for r in h.resets]
    observed = {"ELR while ISR {3}": list(elr), "leader after the power cut": s.leader(),
                "committed (acks=all) records lost": lost, "excused by the checker": resets}
    return list(elr) == [2] and not lost and not resets, observed


def jepsen_2013(s: Script, safe: bool) -> tuple[bool, dict]:
    """RF 3, acks=all. The followers are cut off from the leader; the ISR shrinks;
    writes go on; the leader dies."""
    leader = s.leader()
    followers = [b for b in (1, 2, 3) if b != leader]
    s.write(2, acks=-1)
    for f in followers:
        s.sim.network.partition(f"b{leader}", f"b{f}")
    s.shrink((leader,), "ISR shrinks to the leader")
    acked, refused = [], []
    for i in range(4):
        answer = s.produce([f"during-{i}"], acks=-1, broker=leader)
        (acked if answer["error_code"] == 0 else refused).append(ErrorCode(answer["error_code"]).name)
    s.sim.kill(leader)
    if safe:
        s.sim.run_for(4000)
        leaderless = s.leader() == -1
    else:
        s.wait(lambda: s.leader() in followers, "an out-of-date follower is elected (unclean)")
        leaderless = False
    s.sim.network.heal()
    s.sim.start(leader)
    s.wait(lambda: s.leader() >= 0 and s.running(leader), "a leader again")
    s.converge([1, 2, 3])
    final = s.values(s.leader())
    lost = [f"during-{i}" for i in range(len(acked)) if f"during-{i}".encode() not in final]
    observed = {"acks=all acknowledged while ISR={leader}": len(acked), "refused": refused,
                "no leader after the leader died": leaderless, "acknowledged writes lost": lost}
    if safe:
        return (not acked and bool(refused) and set(refused) <= {"NOT_ENOUGH_REPLICAS"} and leaderless
                and not lost), observed
    return len(acked) == 4 and len(lost) == 4, observed


def stale_leader_write(s: Script) -> tuple[bool, dict]:
    """A leader cut off from the cluster (not from the client) that has not heard of
    its successor still takes an acks=1 write and acknowledges it; its acks=all write
    is never acknowledged (no follower fetches from it), and fails with
    NOT_LEADER_OR_FOLLOWER once it learns of the new leader. Both are truncated away
    when it follows again; the logs converge and it rejoins the ISR."""
    old = s.leader()
    old_epoch = s.leader_epoch()
    s.write(2, acks=-1)
    for other in s.sim.controller_names + [f"b{b}" for b in (1, 2, 3) if b != old]:
        s.sim.network.partition(f"b{old}", other)
    s.wait(lambda: s.leader() not in (old, -1) and s.leads(s.leader()), "a new leader")
    stale_partition = s.partition(old)
    s.expect("the old leader when its successor leads (leads?, its epoch, the new epoch > it?)",
             (stale_partition.is_leader, stale_partition.leader_epoch, s.leader_epoch() > old_epoch),
             (True, old_epoch, True))
    stale = s.produce(["stale"], acks=1, broker=old)
    stale_all = s.client.produce(old, TP, [b"stale-all"], -1, timeout_ms=30_000)
    fresh = s.produce(["fresh"], acks=-1)
    s.expect("answers (stale acks=1, fresh acks=all)", (ErrorCode(stale["error_code"]).name,
             ErrorCode(fresh["error_code"]).name), ("NONE", "NONE"))
    s.expect("the old leader's log before healing", s.values(old), [b"m0", b"m1", b"stale", b"stale-all"])
    s.expect("stale acks=all answered before healing", "error_code" in stale_all, False)
    s.sim.network.heal()
    s.wait(lambda: "error_code" in stale_all, "an answer to the stale acks=all write")
    s.expect("stale acks=all answer", ErrorCode(stale_all["error_code"]).name, "NOT_LEADER_OR_FOLLOWER")
    s.converge([1, 2, 3])
    s.wait(lambda: set(s.isr()) == {1, 2, 3}, "the old leader back in the ISR")
    everywhere = [s.values(b) for b in (1, 2, 3)]
    s.expect("logs at the end", everywhere, [[b"m0", b"m1", b"fresh"]] * 3)
    s.expect("stale writes in any log at the end", any(b"stale" in v or b"stale-all" in v for v in everywhere),
             False)
    s.expect_fetcher_mode()
    return s.outcome()


def stale_metadata_restart(s: Script) -> tuple[bool, dict]:
    """The leader's disk is replaced (it restarts empty) while its followers still
    follow it at the same epoch. Applying its local metadata copy before registering
    (the planted defect ``publish-before-registration``) makes it lead, empty, at the
    old epoch: followers truncate to it and committed records are lost. BrokerNode
    applies the image only past its own registration, whose incarnation change moves
    leadership away first."""
    leader = s.leader()
    committed = s.write(4, acks=-1)
    disk = s.sim.brokers[leader].log_dirs[0]
    s.sim.disk_fault(leader, disk, "fail")
    s.sim.heal_disk(leader, disk)                         # kill, empty disk, start
    s.wait(lambda: s.running(leader), "the old leader runs again", 30_000)
    s.converge([1, 2, 3])
    final = s.values(s.leader())
    lost = [v for v in committed if v.encode() not in final]
    return not lost, {"new leader": s.leader(), "committed records lost": lost}


def failed_directory_reported(s: Script) -> tuple[bool, dict]:
    """The leader's only log directory fails (EIO) while its process keeps running
    and heartbeating, so its session never expires. The write that finds the failed
    disk makes the broker send a heartbeat at once naming the directory
    (``offline_log_dirs``, KIP-858): the controller moves the leadership and, no
    directory being left, fences the broker — well within a session timeout. Every
    acks=all write acknowledged before is on the new leader, new ones are
    acknowledged there. Without the report (simulator seed 2070) the leadership
    stayed on the dead directory until the broker was restarted, and the broker could
    even be elected again in the meantime, then restart on an empty disk."""
    leader = s.leader()
    committed = s.write(3, acks=-1)
    failed_at = s.now
    s.sim.disk_fault(leader, s.sim.brokers[leader].log_dirs[0], "fail")
    probe = s.produce(["probe"], acks=-1, broker=leader)      # the next write finds the failed disk
    s.expect("the write on the failed directory", ErrorCode(probe["error_code"]).name, "KAFKA_STORAGE_ERROR")
    session_ms = s.sim.config.session_timeout_ms
    s.wait(lambda: s.leader() not in (leader, -1), "the leadership to leave the failed directory", session_ms)
    moved_ms = s.now - failed_at
    s.observed["leadership moved after (ms)"] = moved_ms
    s.check("moved within a session timeout", moved_ms, moved_ms < session_ms)
    s.expect("the old leader fenced", s.sim.controller.image.brokers[leader].fenced, True)
    s.expect("the old leader in the ISR", leader in s.isr(), False)
    s.expect("the old leader's process still up", s.sim.brokers[leader].up, True)
    fresh = s.write(2, acks=-1)
    final = s.values(s.leader())
    s.expect("acknowledged records missing on the new leader",
             [v for v in committed + fresh if v.encode() not in final], [])
    s.sim.heal_disk(leader, s.sim.brokers[leader].log_dirs[0])      # kill, empty disk, start
    s.wait(lambda: s.running(leader), "the old leader runs again", 30_000)
    s.converge([1, 2, 3])
    return s.outcome()


# ---------------------------------------------------------------------- replication, step by step


def replication_steps(s: Script) -> tuple[bool, dict]:
    """One follower's fetch round, step by step (Kafka's ReplicaFetcherThread on one
    side, ``ReplicaManager.fetchMessages`` / ``Partition.updateFollowerFetchState`` on
    the other), then its return to the ISR and an acks=all write.

    The follower (2) is first cut off until it leaves the ISR, so that the leader (1)
    holds m0–m4 with HW 5 and the follower nothing. Then: 1–2 the leader appends and
    its LEO moves; 3 the follower fetches from its LEO with its current leader epoch,
    last fetched epoch and log start; 4 the leader records the follower's LEO (= the
    fetch offset) and fetch time; 5–6 not caught up: no ISR change, the HW stays;
    7 the answer carries the records from the fetch offset, the HW and the log start;
    8–9 the follower appends and its HW becomes min(its LEO, the leader's HW). At
    the leader's LEO the follower is caught up and the leader proposes it back into
    the ISR (AlterPartition). An acks=all write is acknowledged once the follower
    has fetched past it; the follower learns that HW one round trip later."""
    leader, follower = 1, 2
    epoch = s.leader_epoch()
    s.sim.network.partition("b1", "b2")
    s.write(3)
    s.wait(lambda: s.isr() == (leader,) and s.partition(leader).isr == (leader,), "the follower out of the ISR")
    s.write(2)
    s.expect("1-2. the leader's (LEO, HW) after appending m0-m4", (s.leo(leader), s.hw(leader)), (5, 5))
    healed = s.mark()
    s.sim.network.heal()
    answered = _first_fetch_round(s, leader, follower, epoch, healed)
    _back_into_the_isr(s, leader, follower, epoch, answered)
    _acks_all_write(s, leader, follower)
    s.converge([leader, follower])
    return s.outcome()


def _first_fetch_round(s: Script, leader: int, follower: int, epoch: int, healed: int) -> int:
    """Steps 3-9 of ``replication_steps``: the follower's first fetch after ``healed``, the
    leader's side of it, its answer and the follower's append; returns the mark after the answer."""
    fetch = s.wait_request(FetchRequestPlan, "b2", "b1", "the follower's first fetch after healing", healed)
    asked = fetch.message.body.partitions[TP]
    s.expect("3. fetch (offset, current leader epoch, last fetched epoch, log start)",
             (asked.fetch_offset, asked.current_leader_epoch, asked.last_fetched_epoch, asked.log_start_offset),
             (0, epoch, -1, 0))
    answer = s.wait_reply(fetch, "the leader's answer")
    answered = s.mark()
    partition = s.partition(leader)
    remote = partition.replica_states[follower]
    s.expect("4. the leader's record of the follower (LEO, fetch time is now)",
             (remote.log_end_offset, remote.last_fetch_time_ms == s.monotonic(leader)), (0, True))
    s.expect("5-6. ISR change proposed, leader HW", (partition.pending_proposal, s.hw(leader)), (None, 5))
    result = answer.message.body[TP]
    records = _offsets_and_values(_records(result.records))
    s.expect("7. answer (error, HW, log start, records)",
             (result.error, result.high_watermark, result.log_start_offset, records),
             (ErrorCode.NONE, 5, 0, [(i, f"m{i}".encode()) for i in range(5)]))
    s.wait(lambda: s.leo(follower) == 5, "the follower appended the answer")
    s.expect("8-9. the follower's (LEO, HW)", (s.leo(follower), s.hw(follower)), (5, 5))
    return answered


def _back_into_the_isr(s: Script, leader: int, follower: int, epoch: int, answered: int) -> None:
    """The follower's next fetch (after ``answered``) reaches the leader's LEO: the leader
    proposes it back into the ISR and the controller commits that."""
    fetch = s.wait_request(FetchRequestPlan, "b2", "b1", "the follower's next fetch", answered)
    asked = fetch.message.body.partitions[TP]
    s.expect("next fetch (offset, last fetched epoch)", (asked.fetch_offset, asked.last_fetched_epoch), (5, epoch))
    s.wait(lambda: s.partition(leader).replica_states[follower].log_end_offset == 5, "the leader saw the fetch at 5")
    partition = s.partition(leader)
    remote = partition.replica_states[follower]
    proposal = partition.pending_proposal
    s.expect("caught up: (last caught-up time is now, proposed ISR)",
             (remote.last_caught_up_time_ms == s.monotonic(leader), None if proposal is None else proposal.new_isr),
             (True, (leader, follower)))
    s.wait(lambda: s.isr() == (leader, follower) and s.partition(leader).isr == (leader, follower),
           "AlterPartition committed")
    s.expect("ISR (controller, leader)", (s.isr(), s.partition(leader).isr), ((1, 2), (1, 2)))


def _acks_all_write(s: Script, leader: int, follower: int) -> None:
    """An acks=all write: answered once the follower's fetch past it moves the leader's HW;
    the follower learns that HW one round trip later."""
    box = s.client.produce(leader, TP, [b"m5"], -1)
    s.wait(lambda: s.leo(leader) == 6, "the leader appended m5")
    s.expect("acks=all: (answered, leader HW) right after the append", ("error_code" in box, s.hw(leader)), (False, 5))
    s.wait(lambda: s.leo(follower) == 6, "the follower fetched m5")
    s.expect("acks=all: the follower's (LEO, HW) after fetching m5", (s.leo(follower), s.hw(follower)), (6, 5))
    s.wait(lambda: s.hw(leader) == 6, "the follower's next fetch moves the leader's HW")
    s.expect("acks=all: (answered, follower HW) when the leader's HW moved to 6", ("error_code" in box, s.hw(follower)),
             (False, 5))
    s.wait(lambda: "error_code" in box, "the acks=all answer")
    s.expect("acks=all answer", ErrorCode(box["error_code"]).name, "NONE")
    s.wait(lambda: s.hw(follower) == 6, "the follower learns HW 6")


# ---------------------------------------------------------------------- DeleteRecords


def delete_records_race(s: Script) -> tuple[bool, dict]:
    """KIP-107 DeleteRecords while followers lag (``ReplicaManager.deleteRecords`` on
    the leader, as an operator's request would arrive). Broker 3 is cut off at
    LEO 5 and leaves the ISR; broker 2 holds m0–m9 but its HW is still 5 when the
    leader's log start moves to 8 — past the follower's HW, between its append and
    its log-start update. Broker 2 takes log start 8 from its next fetch answer;
    broker 3, healed, fetches at 5 < 8, is out of range, asks the leader's offsets
    (ListOffsets) and restarts its log at 8. No fetcher ever gives a partition up."""
    leader, caught_up, behind = 1, 2, 3
    gave_up: list = []

    def fetchers_ok() -> None:
        failed = s.failed_partitions()
        if failed and not gave_up:
            gave_up.append((s.now, failed))

    s.watch(fetchers_ok)
    s.write(5, acks=-1)
    s.converge([1, 2, 3])
    s.sim.network.partition("b1", "b3")
    s.write(5)
    s.expect("leader HW while 3 is still in the ISR", s.hw(leader), 5)
    s.wait(lambda: s.hw(leader) == 10, "3 out of the ISR: the HW moves to 10")
    s.expect("ISR when the leader's HW moved to 10", s.isr(), (1, 2))
    s.expect("2's (HW, LEO) when the leader's log start moves", (s.hw(caught_up), s.leo(caught_up)), (5, 10))
    answer = s.sim.brokers[leader].replica_manager.delete_records(TP, 8)
    s.expect("DeleteRecords(8) on the leader", (answer[0].name, answer[1]), ("NONE", 8))
    s.wait(lambda: s.partition(caught_up).log.log_start_offset == 8, "2 learns the new log start")
    log = s.partition(caught_up).log
    s.expect("2's (log start, HW, LEO) once it learned", (log.log_start_offset, log.high_watermark,
                                                         log.log_end_offset), (8, 10, 10))
    healed = s.mark()
    s.sim.network.heal()
    s.converge([1, 2, 3])
    s.wait(lambda: s.isr() == (1, 2, 3), "3 back in the ISR")
    offsets = {b: (s.partition(b).log.log_start_offset, s.partition(b).log.log_end_offset) for b in (1, 2, 3)}
    s.expect("(log start, LEO) per broker", offsets, {1: (8, 10), 2: (8, 10), 3: (8, 10)})
    s.expect("logs at the end", [s.values(b) for b in (1, 2, 3)], [[b"m8", b"m9"]] * 3)
    out_of_range = [r for r in s.requests(FetchRequestPlan, "b3", "b1", healed) if s.reply_to(r) is not None
                    and s.reply_to(r).message.body[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE]
    s.expect("3's fetch at 5 answered OFFSET_OUT_OF_RANGE", [r.message.body.partitions[TP].fetch_offset
                                                               for r in out_of_range][:1], [5])
    asked = [r for r in s.requests(ListOffsetsPlan, "b3", "b1", healed) if s.reply_to(r) is not None]
    s.check("3 asked the leader's offsets (ListOffsets)", len(asked), len(asked) > 0)
    s.expect("fetchers that gave a partition up (when, which)", gave_up, [])
    return s.outcome()


# ---------------------------------------------------------------------- ISR, min ISR, acks=all


def lagging_follower(s: Script) -> tuple[bool, dict]:
    """``replica.lag.time.max.ms`` (Kafka's ``Partition.maybeShrinkIsr``, checked every
    half lag time): a follower cut off from the leader leaves the ISR once it has not
    been caught up for longer than the lag time, not before; an acks=all write
    waiting for it is acknowledged once the shrink is committed; healed, it catches
    up and rejoins the ISR."""
    leader, cut_off = 1, 3
    lag = s.sim.config.replica_lag_time_max_ms
    s.sim.network.partition("b1", "b3")
    box = s.client.produce(leader, TP, [b"a"], -1, timeout_ms=4 * lag)
    s.wait(lambda: s.leo(leader) == 1, "the leader appended the acks=all write")
    caught_up_at = s.partition(leader).replica_states[cut_off].last_caught_up_time_ms
    s.wait(lambda: s.partition(leader).pending_proposal is not None, "the leader proposes an ISR change", 3 * lag)
    proposal = s.partition(leader).pending_proposal
    out_of_sync_ms = s.monotonic(leader) - caught_up_at
    s.expect("proposed ISR", proposal.new_isr, (1, 2))
    s.check("3 not caught up for (ms) when the shrink was proposed: more than the lag time, at most one check "
            "interval more", out_of_sync_ms, lag < out_of_sync_ms <= lag + lag // 2 + s.sim.config.tick_ms)
    s.expect("ISR (committed) and acks=all answered when the shrink was proposed", (s.isr(), "error_code" in box),
             ((1, 2, 3), False))
    s.wait(lambda: s.isr() == (1, 2), "the shrink committed")
    s.expect("acks=all answered when the shrink committed", "error_code" in box, False)
    s.wait(lambda: "error_code" in box, "the acks=all answer")
    s.expect("acks=all answer once 3 was out", ErrorCode(box["error_code"]).name, "NONE")
    s.expect("acks=all with ISR {1,2}", ErrorCode(s.produce(["b"], acks=-1)["error_code"]).name, "NONE")
    healed_at = s.now
    s.sim.network.heal()
    s.wait(lambda: s.isr() == (1, 2, 3), "3 back in the ISR")
    s.check("ms from healing to 3 back in the ISR", s.now - healed_at, s.now - healed_at <= 3000)
    s.converge([1, 2, 3])
    s.expect("logs at the end", [s.values(b) for b in (1, 2, 3)], [[b"a", b"b"]] * 3)
    return s.outcome()


def below_min_isr(s: Script) -> tuple[bool, dict]:
    """``min.insync.replicas`` 2 with the ISR down to the leader: acks=all is refused
    with NOT_ENOUGH_REPLICAS, acks=1 is taken, and the HW does not advance while the
    ISR is below min ISR (KIP-966's strict min ISR). A follower back in the ISR
    commits the acks=1 record."""
    leader = 1
    s.expect("acks=all with the full ISR", ErrorCode(s.produce(["a"], acks=-1)["error_code"]).name, "NONE")
    s.sim.stop(2)
    s.sim.stop(3)
    s.wait(lambda: not s.sim.brokers[2].up and not s.sim.brokers[3].up, "2 and 3 stopped")
    s.wait(lambda: s.isr() == (leader,) and s.partition(leader).isr == (leader,), "ISR {1}")
    s.expect("acks=all with ISR {1}", ErrorCode(s.produce(["b"], acks=-1)["error_code"]).name, "NOT_ENOUGH_REPLICAS")
    s.expect("acks=1 with ISR {1}", ErrorCode(s.produce(["c"], acks=1)["error_code"]).name, "NONE")
    s.sim.run_for(1000)
    s.expect("the leader's (LEO, HW) a second later", (s.leo(leader), s.hw(leader)), (2, 1))
    s.expect("the leader's log", s.values(leader), [b"a", b"c"])
    started = s.now
    s.sim.start(2)
    s.wait(lambda: s.isr() == (1, 2) and s.hw(leader) == 2, "2 back in the ISR, c committed")
    s.check("ms from restarting 2 to c committed", s.now - started, s.now - started <= 5000)
    s.converge([1, 2])
    return s.outcome()


def acks_all_leader_crash(s: Script) -> tuple[bool, dict]:
    """RF 3, min ISR 2, nothing fsynced: 30 acks=all writes, pipelined; the leader
    loses power after the 16th and takes its unsynced tail with it. Every write
    that was acknowledged is on the new leader exactly once, in order; the old
    leader returns, truncates to the new leader and rejoins the ISR."""
    old = s.leader()
    boxes: list[tuple[bytes, dict]] = []
    for i in range(30):
        value = f"r{i}".encode()
        boxes.append((value, s.client.produce(s.leader(), TP, [value], -1)))
        s.sim.run_for(2)
        if i == 15:
            s.sim.power_cut(old)
            s.wait(lambda: s.leader() not in (old, -1) and s.leads(s.leader()), "a new leader")
    s.wait(lambda: all("error_code" in box for _, box in boxes), "an answer to every write", 30_000)
    acknowledged = [value for value, box in boxes if box["error_code"] == 0]
    s.check("writes acknowledged (of 30)", len(acknowledged), len(acknowledged) >= 20)
    new = s.leader()
    on_leader = s.values(new)
    s.expect("acknowledged writes on the new leader, in log order", [v for v in on_leader if v in acknowledged],
             acknowledged)
    s.sim.start(old)
    s.converge([1, 2, 3])
    s.wait(lambda: set(s.isr()) == {1, 2, 3}, "the old leader back in the ISR")
    s.expect("the old leader's log equals the new leader's", s.values(old) == s.values(new), True)
    s.expect("losses the checker had to excuse", [r for h in s.sim.checker.histories.values() for r in h.resets], [])
    return s.outcome()


def long_poll(s: Script) -> tuple[bool, dict]:
    """``replica.fetch.wait.max.ms`` 500: an idle follower's Fetch waits in the
    leader's fetch purgatory (Kafka's DelayedFetch) and completes as soon as a
    produce appends, well before the max wait; the leader then acknowledges an
    acks=all write within a few network delays. The followers learn the new HW from
    their next fetch, at most one max wait later."""
    leader = s.leader()
    followers = [b for b in (1, 2, 3) if b != leader]
    max_wait = s.sim.config.replica_fetch_wait_max_ms
    idle = s.mark()
    s.wait(lambda: all(s.requests(FetchRequestPlan, f"b{f}", f"b{leader}", idle) for f in followers),
           "a new fetch from each follower")
    s.sim.run_for(max_wait // 2)                        # half way through their wait
    parked = {f: s.requests(FetchRequestPlan, f"b{f}", f"b{leader}", idle)[-1] for f in followers}
    s.expect("the followers' last fetches before the produce: (max wait, answered)",
             [(p.message.body.max_wait_ms, s.reply_to(p) is not None) for p in parked.values()],
             [(max_wait, False)] * len(followers))
    produced_at = s.now
    box = s.client.produce(leader, TP, [b"a"], -1)
    s.wait(lambda: all(s.leo(f) == 1 for f in followers), "both followers fetched the record")
    answered = [s.reply_to(p) for p in parked.values()]
    s.check("ms from the produce to the parked fetches' answers",
            [None if a is None else a.at_ms - produced_at for a in answered],
            all(a is not None and a.at_ms - produced_at <= 5 for a in answered))
    s.check("ms the parked fetches waited (well below the max wait)",
            [None if a is None else a.at_ms - p.at_ms for a, p in zip(answered, parked.values())],
            all(a is not None and a.at_ms - p.at_ms <= max_wait - 100 for a, p in zip(answered, parked.values())))
    s.wait(lambda: s.hw(leader) == 1, "the leader's HW moves to 1")
    s.expect("the followers' (LEO, HW) when the leader's HW moved", [(s.leo(f), s.hw(f)) for f in followers],
             [(1, 0)] * len(followers))
    s.wait(lambda: "error_code" in box, "the acks=all answer")
    s.expect("acks=all answer", ErrorCode(box["error_code"]).name, "NONE")
    s.check("ms from the produce to its acknowledgement", s.now - produced_at, s.now - produced_at <= 10)
    s.wait(lambda: all(s.hw(f) == 1 for f in followers), "the followers learn HW 1")
    s.check("ms from the produce to the followers' HW 1 (at most one max wait)", s.now - produced_at,
            s.now - produced_at <= max_wait + 10)
    return s.outcome()


# ---------------------------------------------------------------------- the controller quorum


def _write_answers(s: Script, controller: str, after: int) -> list[tuple[str, str]]:
    """(request kind, error name) of every answer ``controller`` gave a broker's write past ``after``."""
    out = []
    for entry in s.sent[after:]:
        message = entry.message
        if message.is_reply and not message.refused and message.src == controller and message.kind in WRITES:
            body = message.body
            code = body if isinstance(body, ErrorCode) else body.error_code
            out.append((message.kind, ErrorCode(code).name))
    return out


def _brokers_on(s: Script, controller) -> bool:
    """Every broker runs, its channel on ``controller``, its image at the controller's."""
    return all(b.up and b.state.name == "RUNNING" and b.channel.leader_guess == controller.node_id
               and b.image.offset == controller.image.offset for b in s.sim.brokers.values())


def _fenced(image) -> list[int]:
    return sorted(b for b, registration in image.brokers.items() if registration.fenced)


def quorum_leader_cut_off(s: Script) -> tuple[bool, dict]:
    """The active controller is cut off from the other voters, not from the brokers,
    and writes a topic ``lost`` (the operator's CreateTopics): appended, never
    committed. Every broker write it takes after that waits for that commit (a
    write is answered once the records before it are committed), so none is answered
    successfully; after ``controller.quorum.fetch.timeout.ms`` without a majority
    fetching it resigns (check quorum) and answers them NOT_CONTROLLER. The other
    voters elect a leader, which becomes active; the brokers' channels move to it.
    No broker ever applies ``lost`` (the checker's metadata-only-committed, after
    every event); healed, the old leader follows and truncates it, and no broker was
    fenced because the controller moved."""
    old = s.sim.active_controller()
    epoch = old.replica.epoch
    mark = s.mark()
    for other in s.sim.controller_names:
        if other != old.name:
            s.sim.network.partition(old.name, other)
    old.create_topic("lost", 1, 3, {})
    written = old.log.end_offset
    s.wait(lambda: (new := s.sim.active_controller()) is not None and new is not old,
           "a new active controller", 20_000)
    new = s.sim.active_controller()
    answers = _write_answers(s, old.name, mark)
    s.expect("the cut-off leader's successful answers to broker writes", [a for a in answers if a[1] == "NONE"], [])
    s.check("…and NOT_CONTROLLER answers (writes that waited for a commit)",
            sum(1 for a in answers if a[1] == "NOT_CONTROLLER"), any(a[1] == "NOT_CONTROLLER" for a in answers))
    s.expect("the old leader resigned (state, active)", (old.replica.state != "Leader", old.active), (True, False))
    s.expect("a later epoch", new.replica.epoch > epoch, True)
    s.wait(lambda: _brokers_on(s, new), "every broker on the new active controller", 20_000)
    s.sim.network.heal()
    s.wait(lambda: not s.sim.quorum_unsettled(new), "the quorum converged", 20_000)
    s.expect("'lost' on any voter or broker", [n for n, image in
                                               [(c.name, c.image) for c in s.sim.controllers.values()]
                                               + [(b.name, b.image) for b in s.sim.brokers.values()]
                                               if image.topic("lost") is not None], [])
    s.expect("the old leader's log, truncated and refilled, equals the new leader's",
             old.log.read_entries(0, 1 << 30) == new.log.read_entries(0, 1 << 30), True)
    s.check("the cut (an offset of the old leader's uncommitted write)", (written, old.log.truncations),
            any(cut < written for cut in old.log.truncations))
    s.expect("brokers fenced", _fenced(new.image), [])
    return s.outcome()


def quorum_leader_killed(s: Script) -> tuple[bool, dict]:
    """kill -9 of the active controller: the followers' fetches are refused, they ask
    for pre-votes within a fraction of the election timeout, one is elected and
    becomes active once its LeaderChange entry is committed; the brokers' channels
    move to it (NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER naming it, or no answer). No
    broker is fenced because the controller moved (the new one gives every broker a
    fresh session). Restarted, the old leader finds its log and vote and follows."""
    old = s.sim.active_controller()
    epoch, killed_at = old.replica.epoch, s.now
    s.sim.kill_controller(old.node_id)
    s.wait(lambda: s.sim.active_controller() is not None, "a new active controller", 20_000)
    new = s.sim.active_controller()
    s.check("ms until a new controller is active", s.now - killed_at, s.now - killed_at < 5000)
    s.expect("a later epoch", new.replica.epoch > epoch, True)
    s.wait(lambda: _brokers_on(s, new), "every broker on the new active controller", 20_000)
    s.expect("brokers fenced", _fenced(new.image), [])
    s.sim.start_controller(old.node_id)
    s.wait(lambda: not s.sim.quorum_unsettled(new), "the quorum converged", 20_000)
    s.expect("the old leader after its restart (state, leader)", (old.replica.state, old.replica.leader_id),
             ("Follower", new.node_id))
    return s.outcome()


def _voter_change(s: Script, controller, kind: str, voter_id: int, what: str,
                  killing: int | None = None) -> None:
    """One AddRaftVoter / RemoveRaftVoter on ``controller``, accepted and then answered
    NONE once committed; ``killing`` is a voter killed right after the record is
    appended (mid-change), checked to be uncommitted then."""
    number, error = controller.change_voters(kind, voter_id)
    s.expect(f"{what}: accepted", error.name, "NONE")
    if killing is not None:              # a removal's record is appended at once
        s.expect(f"{what}: uncommitted when {killing} was killed",
                 controller.replica.high_watermark <= controller.replica.voters_offset, True)
        s.sim.kill_controller(killing)
    s.wait(lambda: number in controller.voter_change_answers, f"{what}: answered", 20_000)
    s.expect(f"{what}: answer", controller.voter_change_answers[number].name, "NONE")


def quorum_voter_changes(s: Script) -> tuple[bool, dict]:
    """A dynamic quorum (KIP-853): three controllers formatted as the voters, a
    fourth started empty with them as bootstrap servers. The fourth follows as an
    observer and is added; a follower voter is removed while another voter is
    killed right after the record's append (the new set's majority commits it);
    that voter restarts, and the leader removes itself: it resigns once that is
    committed, the others elect a leader, the brokers move to it. Bad changes are
    refused with Kafka's errors and change nothing. Every committed batch stays
    (raft-committed-kept after every event), the topic created first is still there."""
    ids = s.sim.controller_ids
    initial, newcomer = tuple(ids[:3]), s.sim.controllers[ids[3]]
    active = s.sim.active_controller()
    s.expect("the formatted voters", active.replica.voters, initial)
    active.create_topic("before", 1, 3, {})
    s.wait(lambda: newcomer.replica.state == "Follower" and newcomer.replica.leader_id == active.node_id,
           "the new controller follows the leader as an observer", 20_000)
    _voter_change(s, active, "add", newcomer.node_id, "add the new controller")
    s.wait(lambda: all(c.replica.voters == tuple(ids) for c in s.sim.controllers.values()),
           "every controller sees four voters", 20_000)
    followers = [c for c in ids if c != active.node_id]
    removed, killed = followers[0], followers[1]
    _voter_change(s, active, "remove", removed, f"remove {removed}", killing=killed)
    s.expect("the voters after the removal", active.replica.voters, tuple(c for c in ids if c != removed))
    s.sim.start_controller(killed)
    s.wait(lambda: not s.sim.quorum_unsettled(active), "the quorum converged", 20_000)
    end = active.log.end_offset
    refusals = (active.change_voters("remove", removed)[1].name,
                active.change_voters("add", active.node_id)[1].name,
                active.change_voters("remove", killed, sim_directory_id(removed))[1].name)
    s.expect("refused: an unknown voter, a duplicate, a wrong directory id", refusals,
             ("VOTER_NOT_FOUND", "DUPLICATE_VOTER", "VOTER_NOT_FOUND"))
    s.expect("…and nothing appended", active.log.end_offset == end, True)
    old = active
    _voter_change(s, old, "remove", old.node_id, "the leader removes itself")
    s.wait(lambda: (new := s.sim.active_controller()) is not None and new is not old,
           "a new active controller", 20_000)
    new = s.sim.active_controller()
    s.expect("the old leader (state, a voter)", (old.replica.state != "Leader", old.replica.is_voter), (True, False))
    s.wait(lambda: _brokers_on(s, new), "every broker on the new active controller", 20_000)
    new.create_topic("after", 1, 3, {})
    s.wait(lambda: not s.sim.quorum_unsettled(new), "the quorum converged again", 20_000)
    s.expect("the voters at the end", new.replica.voters, tuple(c for c in ids if c not in (removed, old.node_id)))
    s.expect("topics on every controller", sorted({name for c in s.sim.controllers.values()
                                                    for name in ("before", "after") if c.image.topic(name)}),
             ["after", "before"])
    s.expect("brokers fenced", _fenced(new.image), [])
    return s.outcome()


def _read_committed(s: Script, broker: int) -> list[bytes]:
    """The values a read_committed consumer reads from ``broker``'s replica of t0-0, as
    it reads them: up to the last stable offset, aborted transactions dropped."""
    from tidelog.records.batch import CONTROL_ABORT
    from tidelog.replication.partition import Isolation
    partition = s.partition(broker)
    result = partition.read_records(0, 1 << 20, Isolation.TXN_COMMITTED, partition.leader_epoch)
    data = b"" if result.records is None else result.records.read_bytes()
    aborted = sorted((t.first_offset, t.producer_id) for t in result.aborted_transactions or ())
    aborting, seen = set(), []
    for position, header in iter_batches(data):
        while aborted and aborted[0][0] <= header.last_offset:
            aborting.add(aborted.pop(0)[1])
        if header.is_control:
            if read_control(data, position)[0] == CONTROL_ABORT:
                aborting.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborting):
            seen += [r.value for r in iter_records(data, position)]
    return seen


def unclean_open_transaction(s: Script) -> tuple[bool, dict]:
    """Issue 28 item 3 (seeds 20091 and 10570 of an earlier build). Producer 7's
    transaction T1 reaches both replicas; the follower B is cut off and leaves the
    ISR; the coordinator's ABORT marker for T1 reaches the leader A only; A dies and
    B is elected uncleanly (RECOVERING), without the marker. B holds T1 in doubt: its
    last stable offset waits at T1 and producer 7's next batch at that epoch is
    refused, so the next transaction cannot join T1 (10570); the producer comes back
    at a newer epoch, which proves the coordinator is done with T1, and B aborts T1
    before that batch (20091: the LSO moves). A, back, truncates to B's log and keeps
    the abort; B's AlterPartition adding it says RECOVERED. (The transaction's
    batches and markers are appended as the produce path and WriteTxnMarkers do,
    without the coordinator.)"""
    from tidelog.records.batch import build_marker
    a = s.leader()
    b = next(r for r in s.sim.controller.image.partition(TP).replicas if r != a)

    def txn_batch(sequence: int, value: str, epoch: int = 0) -> bytes:
        return build_batch([value.encode()], timestamp_ms=T0_WALL_MS + s.now, producer_id=7, producer_epoch=epoch,
                           base_sequence=sequence, is_transactional=True)

    def marker(broker: int, commit: bool) -> str:
        try:
            s.partition(broker).append_records_to_leader(build_marker(7, 0, commit, 0, s.now), 1,
                                                         from_coordinator=True)
            return "NONE"
        except KafkaError as e:
            return e.error_code.name

    s.partition(a).append_records_to_leader(txn_batch(0, "tx-1-0"), 1)
    s.wait(lambda: s.leo(b) == 1 and s.hw(a) == 1, "T1's record on both replicas")
    s.sim.network.partition(f"b{a}", f"b{b}")
    s.shrink((a,), "B leaves the ISR")
    s.expect("the ABORT marker of T1 on A", marker(a, commit=False), "NONE")
    s.sim.kill(a)
    s.wait(lambda: s.leads(b), "B is elected uncleanly")
    log = s.partition(b).log
    s.expect("B's transactions in doubt once it leads", dict(s.partition(b).transactions_in_doubt), {7: 0})
    s.expect("B's last stable offset waits at T1", log.last_stable_offset, 0)
    try:
        s.partition(b).append_records_to_leader(txn_batch(1, "tx-2-0"), 1)
        next_txn = "NONE"
    except KafkaError as e:
        next_txn = e.error_code.name
    s.expect("producer 7's next transaction at the same epoch on B", next_txn, "INVALID_PRODUCER_EPOCH")
    s.partition(b).append_records_to_leader(txn_batch(0, "tx-3-0", epoch=1), 1)
    s.expect("T1 in B's aborted-transaction index after producer 7's batch at epoch 1",
             [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(0, 1 << 30)], [(7, 0)])
    s.expect("B's open transactions", log.ongoing_transactions(), {7: 2})
    s.expect("T1's record read with read_committed on B", b"tx-1-0" in _read_committed(s, b), False)
    s.sim.network.heal()
    s.sim.start(a)
    s.converge([a, b])
    s.wait(lambda: s.sim.controller.image.partition(TP).leader_recovery_state == 0,
           "B says RECOVERED with A's return to the ISR (KIP-704)")
    s.expect("A's open transactions after following B", s.partition(a).log.ongoing_transactions(), {7: 2})
    s.expect("T1's record read with read_committed on A's copy", b"tx-1-0" in _read_committed(s, a), False)
    return s.outcome()


# ------------------------------------------------------------ transactions through the request layer

def _ask(s: Script, broker: int, kind: str, body: dict, what: str, timeout_ms: int = 5000) -> dict:
    """One request of the scenario client to ``broker``, waited for; a timeout or a
    failure is answered as {"error_code": NETWORK_EXCEPTION}."""
    box: dict = {}
    s.client.rpc.request(f"b{broker}", kind, body, timeout_ms, box.update,
                         lambda error: box.update(error_code=int(ErrorCode.NETWORK_EXCEPTION), why=error))
    s.wait(lambda: "error_code" in box, what, timeout_ms + 1000)
    return box


def _transaction_on_both_then_cut(s) -> "_ScriptedProducer":
    """A transaction coordinated by broker 3 writes one record to t0-0, which both of
    its replicas (1 leading, 2) then hold; then 1 and 2 are cut apart."""
    producer = _ScriptedProducer(s, _transactional_id_on(s, 3))
    s.expect("the coordinator", producer.coordinator, 3)
    s.expect("AddPartitionsToTxn t0-0", producer.add(TP).name, "NONE")
    s.expect("the transaction's record", producer.produce(TP, "tx-record", 0).name, "NONE")
    s.wait(lambda: s.leo(2) == 1 and s.hw(1) == 1, "the record on both replicas")
    s.sim.network.partition("b1", "b2")
    return producer


def _transactional_id_on(s: Script, coordinator: int, other_than: bool = False) -> str:
    """A transactional id whose coordinator is ``coordinator`` (or, with ``other_than``,
    any other broker); the first lookup creates __transaction_state."""
    for i in range(100):
        transactional_id = f"tx-{i}"
        while True:
            found = _ask(s, 1, "FindTxnCoordinator", {"transactional_id": transactional_id},
                         f"the coordinator of {transactional_id}")
            if found["error_code"] == ErrorCode.NONE:
                break
            s.sim.run_for(200)
        if (found["node_id"] != coordinator) == other_than:
            return transactional_id
    raise AssertionError(f"no transactional id found on broker {coordinator}")


class _ScriptedProducer:
    """A transactional producer written step by step (FindCoordinator, InitProducerId,
    AddPartitionsToTxn, Produce, EndTxn as a Kafka client sends them)."""

    def __init__(self, s: Script, transactional_id: str):
        self.s, self.transactional_id = s, transactional_id
        self.coordinator = _ask(s, 1, "FindTxnCoordinator", {"transactional_id": transactional_id},
                                "the coordinator")["node_id"]
        init = _ask(s, self.coordinator, "InitTxnProducer", {"transactional_id": transactional_id,
                                                             "timeout_ms": 60_000}, "InitProducerId")
        assert init["error_code"] == ErrorCode.NONE, init
        self.producer_id, self.producer_epoch = init["producer_id"], init["producer_epoch"]

    def _ids(self) -> dict:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch}

    def add(self, tp: TopicPartition) -> ErrorCode:
        return ErrorCode(_ask(self.s, self.coordinator, "AddPartitionsToTxn", {**self._ids(), "partitions": {tp}},
                              "AddPartitionsToTxn")["error_code"])

    def produce(self, tp: TopicPartition, value: str, sequence: int) -> ErrorCode:
        batch = build_batch([value.encode()], timestamp_ms=T0_WALL_MS + self.s.now, producer_id=self.producer_id,
                            producer_epoch=self.producer_epoch, base_sequence=sequence, is_transactional=True)
        body = {"tp": tp, "acks": -1, "timeout_ms": 2000, "values": [value.encode()], "batch": batch,
                "transactional_id": self.transactional_id}
        return ErrorCode(_ask(self.s, self.s.leader(tp), "Produce", body, f"producing {value}")["error_code"])

    def end(self, commit: bool) -> ErrorCode:
        return ErrorCode(_ask(self.s, self.coordinator, "EndTxn", {**self._ids(), "commit": commit},
                              "EndTxn")["error_code"])


def _markers(s: Script, broker: int) -> list[str]:
    data = s.sim.log_bytes(broker, TP)
    return ["COMMIT" if read_control(data, position)[0] == CONTROL_COMMIT else "ABORT"
            for position, header in iter_batches(data) if header.is_control]


def txn_markers_acks_all(s: Script) -> tuple[bool, dict]:
    """A transaction marker is a replicated write: the leader appends it acks=all, and the
    coordinator completes the transaction only once every ISR member has it. t0 lives on
    brokers 1 (leader) and 2, min ISR 2; the transaction's coordinator is broker 3. The
    producer's record reaches both replicas; 1 and 2 are cut apart; EndTxn(commit): the
    COMMIT marker is on the leader only, waiting for 2, when the leader loses power (the
    marker was never fsynced). 2 is elected; the coordinator, which never heard the marker
    acknowledged, writes it again to 2 once 1 is back in the ISR: the record is committed
    on the new leader. (Written with acks=1, the marker would be acknowledged at once, the
    transaction completed, and the new leader would hold an open transaction for good.)"""
    producer = _transaction_on_both_then_cut(s)
    s.expect("EndTxn(commit)", producer.end(commit=True).name, "NONE")
    s.wait(lambda: s.leo(1) == 2, "the COMMIT marker on the leader")
    s.sim.run_for(50)                                # time for an acks=1 answer to reach the coordinator
    s.expect("the leader's ISR when it loses power", s.isr(), (1, 2))
    s.sim.power_cut(1)
    s.sim.network.heal()
    s.wait(lambda: s.leads(2), "2 is elected")
    s.expect("2's log when elected: the record, no marker", (s.leo(2), _markers(s, 2)), (1, []))
    s.sim.start(1)

    def committed() -> bool:
        log = s.partition(2).log
        return _markers(s, 2) == ["COMMIT"] and log.last_stable_offset == log.high_watermark == log.log_end_offset
    try:
        s.wait(committed, "the coordinator's COMMIT marker committed on the new leader", 30_000)
    except TimeoutError:
        pass
    log = s.partition(2).log
    s.expect("markers on the new leader", _markers(s, 2), ["COMMIT"])
    s.expect("its last stable offset, high watermark, log end", (log.last_stable_offset, log.high_watermark,
                                                                   log.log_end_offset), (2, 2, 2))
    s.expect("read with read_committed on the new leader", _read_committed(s, 2), [b"tx-record"])
    return s.outcome()


def txn_produce_verified(s: Script) -> tuple[bool, dict]:
    """KIP-890 part 1 through the request layer of a simulated broker: a transactional
    Produce to a partition the producer never added to its transaction is refused with
    INVALID_TXN_STATE and not appended — when the leader is the coordinator (it checks
    itself) and when another broker is (asked with AddPartitionsToTxn v4); once the
    partition is added, the same batch is appended."""
    for where, other in (("on the leader", False), ("on another broker", True)):
        producer = _ScriptedProducer(s, _transactional_id_on(s, 1, other_than=other))
        s.expect(f"the coordinator is the leader, broker 1 ({where})", producer.coordinator == 1, not other)
        s.expect(f"a write to t0-0 never added (coordinator {where})",
                 producer.produce(TP, f"zombie-{other}", 0).name, "INVALID_TXN_STATE")
        s.expect(f"AddPartitionsToTxn t0-0 (coordinator {where})", producer.add(TP).name, "NONE")
        s.expect(f"the same write once added (coordinator {where})",
                 producer.produce(TP, f"added-{other}", 0).name, "NONE")
        s.expect(f"EndTxn(abort) (coordinator {where})", producer.end(commit=False).name, "NONE")
    s.wait(lambda: _markers(s, 1) == ["ABORT", "ABORT"], "both transactions aborted")
    data = s.sim.log_bytes(1, TP)
    s.expect("t0-0's records", [r.value for position, header in iter_batches(data) if not header.is_control
                                for r in iter_records(data, position)], [b"added-False", b"added-True"])
    return s.outcome()


def _kill_1_and_let_2_settle_in_doubt(s: Script, producer):
    """1 dies; 2, without the marker, is elected uncleanly (RECOVERING), holds the
    producer's transaction in doubt and settles it by asking; 2's log."""
    s.sim.kill(1)
    s.sim.network.heal()
    s.wait(lambda: s.leads(2), "2 is elected uncleanly")
    s.expect("2 elected RECOVERING (KIP-704)", s.sim.controller.image.partition(TP).leader_recovery_state, 1)
    s.expect("2's markers when elected", _markers(s, 2), [])
    s.expect("2's transactions in doubt once it leads", dict(s.partition(2).transactions_in_doubt),
             {producer.producer_id: producer.producer_epoch})
    try:
        s.wait(lambda: not s.partition(2).transactions_in_doubt, "2 settles the transaction with its coordinator")
    except TimeoutError:
        pass
    s.expect("2's transactions in doubt after asking", dict(s.partition(2).transactions_in_doubt), {})
    return s.partition(2).log


def unclean_transaction_settled_by_coordinator(s: Script, commit: bool) -> tuple[bool, dict]:
    """Issue 28: a transaction's marker lost with the old leader, settled by asking the
    coordinator. t0-0 lives on brokers 1 (leader) and 2, min ISR 1, unclean elections on;
    the transaction's coordinator is broker 3. The producer's record reaches both
    replicas; 1 and 2 are cut apart and 2 leaves the ISR; EndTxn: the marker is written
    to 1 alone and the coordinator completes the transaction. 1 dies; 2 is elected
    uncleanly (RECOVERING) without the marker and holds the transaction in doubt. The
    producer never comes back: 2 asks the coordinators (ListTransactions by producer id,
    then DescribeTransactions at broker 3), writes the marker the coordinator's answer
    says, and its last stable offset moves on — the record read with read_committed if
    the coordinator committed, never if it aborted."""
    name = "COMMIT" if commit else "ABORT"
    producer = _transaction_on_both_then_cut(s)
    s.shrink((1,), "2 leaves the ISR")
    s.expect(f"EndTxn({name.lower()})", producer.end(commit).name, "NONE")
    coordinator = s.sim.brokers[3].node.txn_coordinator
    s.wait(lambda: coordinator.describe_transaction(producer.transactional_id)[0] == f"Complete{name.capitalize()}",
           "the coordinator completed the transaction")
    s.expect("markers on 1", _markers(s, 1), [name])
    log = _kill_1_and_let_2_settle_in_doubt(s, producer)
    s.expect("markers on 2", _markers(s, 2), [name])
    s.expect("2's last stable offset is its log end", log.last_stable_offset, log.log_end_offset)
    s.expect("the record read with read_committed on 2", b"tx-record" in _read_committed(s, 2), commit)
    s.expect("the producer's epoch on 2 (it never came back)",
             {pid: epoch for pid, epoch, *_ in log.active_producers()}.get(producer.producer_id), 0)
    return s.outcome()


def unclean_transaction_of_a_forgotten_id(s: Script) -> tuple[bool, dict]:
    """Issue 28: the in-doubt question's one verdict drawn from an absence. As
    ``unclean-aborted-transaction``, but the coordinator (broker 3) forgets the
    transactional id (``transactional.id.expiration.ms``) before 2 asks: no coordinator
    lists the producer. 2 trusts that only once every broker it asked names itself, in
    its own metadata (a Metadata request, ``SendTopicLeaders``), leader of the
    ``__transaction_state`` partitions it was asked for at the epochs 2 knows; then it
    aborts at the next epoch, and the LSO moves without the producer."""
    producer = _transaction_on_both_then_cut(s)
    s.shrink((1,), "2 leaves the ISR")
    s.expect("EndTxn(abort)", producer.end(False).name, "NONE")
    coordinator = s.sim.brokers[3].node.txn_coordinator
    s.wait(lambda: coordinator.describe_transaction(producer.transactional_id) == "unknown",
           "the coordinator forgot the transactional id")
    s.expect("markers on 1", _markers(s, 1), ["ABORT"])
    asked: list[tuple[int, str]] = []
    for broker in s.sim.brokers.values():
        handle = broker._handle_TopicLeaders

        def counted(message, broker_id=broker.broker_id, handle=handle) -> None:
            asked.append((broker_id, message.body))
            handle(message)
        broker._handle_TopicLeaders = counted
    log = _kill_1_and_let_2_settle_in_doubt(s, producer)
    s.expect("markers on 2", _markers(s, 2), ["ABORT"])
    s.expect("the coordinators' leaders confirmed by Metadata", bool(asked) and {topic for _, topic in asked},
             {"__transaction_state"})
    s.expect("2's last stable offset is its log end", log.last_stable_offset, log.log_end_offset)
    s.expect("the record read with read_committed on 2", b"tx-record" in _read_committed(s, 2), False)
    return s.outcome()


def hanging_transaction_after_second_election(s: Script) -> tuple[bool, dict]:
    """Issue 28's age rule: a doubt forgotten by a second, clean election still ends.
    t0-0 lives on brokers 1 (leader), 2 and 3, min ISR 1, unclean elections on; the
    transaction's coordinator is broker 4. The record reaches all three replicas; 1 is
    cut from 2 and 3, the ISR shrinks to {1}, and the COMMIT marker is written to 1
    alone. 1 dies; another replica (L) is elected uncleanly and holds the transaction in
    doubt, but its questions are lost (2 and 3 are cut from the coordinator). The third
    replica (F) joins L's ISR, L reports RECOVERED and dies: F is elected cleanly and
    holds no doubt — its producer state only shows the transaction open, so its LSO
    waits. Nothing but the age rule settles it: once the transaction has been open
    longer than transaction.max.timeout.ms (900 s), F asks the coordinator like any
    in-doubt question, writes the COMMIT, and the record is read with read_committed."""
    producer = _ScriptedProducer(s, _transactional_id_on(s, 4))
    s.expect("the coordinator", producer.coordinator, 4)
    s.expect("AddPartitionsToTxn t0-0", producer.add(TP).name, "NONE")
    s.expect("the transaction's record", producer.produce(TP, "tx-record", 0).name, "NONE")
    s.wait(lambda: s.leo(2) == 1 and s.leo(3) == 1 and s.hw(1) == 1, "the record on all three replicas")
    s.sim.network.partition("b1", "b2")
    s.sim.network.partition("b1", "b3")
    s.shrink((1,), "2 and 3 leave the ISR")
    s.expect("EndTxn(commit)", producer.end(True).name, "NONE")
    coordinator = s.sim.brokers[4].node.txn_coordinator
    s.wait(lambda: coordinator.describe_transaction(producer.transactional_id)[0] == "CompleteCommit",
           "the coordinator completed the commit")
    s.expect("markers on 1", _markers(s, 1), ["COMMIT"])
    s.sim.kill(1)
    s.sim.network.heal()
    s.sim.network.partition("b2", "b4")                   # the in-doubt questions are lost
    s.sim.network.partition("b3", "b4")
    s.wait(lambda: s.leads(2) or s.leads(3), "2 or 3 is elected uncleanly")
    first = 2 if s.leads(2) else 3
    third = 5 - first
    s.expect("the unclean leader's transactions in doubt", dict(s.partition(first).transactions_in_doubt),
             {producer.producer_id: producer.producer_epoch})
    s.wait(lambda: s.isr() == tuple(sorted((first, third))) or set(s.isr()) == {first, third},
           "the third replica joins the ISR")
    s.wait(lambda: s.sim.controller.image.partition(TP).leader_recovery_state == 0, "RECOVERED reported")
    s.expect("the unclean leader's transaction still in doubt (its questions unanswered)",
             dict(s.partition(first).transactions_in_doubt), {producer.producer_id: producer.producer_epoch})
    s.sim.kill(first)
    s.wait(lambda: s.leads(third), "the third replica is elected cleanly")
    s.sim.network.heal()
    s.expect("elected RECOVERED", s.sim.controller.image.partition(TP).leader_recovery_state, 0)
    s.expect("the new leader's transactions in doubt (a clean election)",
             dict(s.partition(third).transactions_in_doubt), {})
    log = s.partition(third).log
    elected = s.now
    s.wait(lambda: s.now >= elected + 60_000, "a minute later", timeout_ms=70_000)
    s.expect("the LSO still waits a minute later (nothing else settles it)", log.last_stable_offset, 0)
    try:
        s.wait(lambda: log.last_stable_offset == log.log_end_offset, "the age rule settles the transaction",
               timeout_ms=1_000_000)
    except TimeoutError:
        pass
    s.expect("the LSO reached the log end", log.last_stable_offset == log.log_end_offset, True)
    s.expect("settled after transaction.max.timeout.ms", s.now - elected >= 800_000, True)
    s.expect("markers on the third replica", _markers(s, third), ["COMMIT"])
    s.expect("the record read with read_committed", b"tx-record" in _read_committed(s, third), True)
    return s.outcome()


SCENARIOS = {scenario.name: scenario for scenario in [
    Scenario("kip-101-1", "KIP-101 scenario 1", "m2 survives: A asks where epoch 0 ends instead of truncating to its HW",
             _config(2, (2, 1), 1, True), kip_101_1),
    Scenario("kip-101-2", "KIP-101 scenario 2", "A truncates to 1 and fetches m3: no offset holds m2 on one replica and "
             "m3 on another", _config(2, (1, 2), 1, False), kip_101_2),
    Scenario("kip-279", "KIP-279", "five restarts with unclean election: both logs byte-identical",
             _config(2, (1, 2), 1, True), kip_279),
    Scenario("kip-966-strict-min-isr", "KIP-966", "with ISR {3}: acks=all refused, HW still; 3 returns as "
             "the only ISR member and no committed record is lost (the lost tail was never committed)",
             _config(3, (3, 2, 1), 2, False, flush_messages=None, flush_ms=500, eligible_leader_replicas=False),
             lambda s: kip_966(s, True)),
    Scenario("kip-966-last-replica-standing", "KIP-966", "without ELR, a last ISR member that lost unflushed "
             "committed records in a power cut leads without them (excused by the checker as KIP-966's case)",
             _config(3, (3, 2, 1), 2, False, flush_messages=None, eligible_leader_replicas=False),
             lambda s: kip_966(s, False)),
    Scenario("kip-966-eligible-leader-replicas", "KIP-966", "with ELR (the default), the same faults: broker 2 "
             "left the ISR below min ISR and stays eligible, is elected when 3 loses power, and 3 comes back "
             "out of the ISR and ELR; nothing acknowledged is lost, nothing excused",
             _config(3, (3, 2, 1), 2, False, flush_messages=None), kip_966_elr),
    Scenario("jepsen-2013-unclean", "Jepsen 2013 Kafka analysis", "ISR of one, min ISR 1, unclean election: "
             "the acknowledged writes vanish", _config(3, (1, 2, 3), 1, True), lambda s: jepsen_2013(s, False)),
    Scenario("jepsen-2013-safe", "Jepsen 2013 Kafka analysis", "min ISR 2, clean election, no ELR (Kafka before "
             "4.4): acks=all refused with NOT_ENOUGH_REPLICAS, no leader rather than an unclean one, nothing "
             "acknowledged is lost (with ELR an eligible follower leads: kip-966-eligible-leader-replicas)",
             _config(3, (1, 2, 3), 2, False, eligible_leader_replicas=False), lambda s: jepsen_2013(s, True)),
    Scenario("unclean-open-transaction", "KIP-704, issue 28 item 3", "the uncleanly elected leader lacks T1's "
             "ABORT marker and holds T1 in doubt: its LSO waits, producer 7's next batch at that epoch is refused, "
             "its batch at a newer epoch aborts T1 first; T1's record never read with read_committed; RECOVERED "
             "reported; the old leader follows and keeps the abort",
             _config(2, (1, 2), 1, True), unclean_open_transaction),
    Scenario("unclean-committed-transaction", "issue 28 (KIP-664 ListTransactions, DescribeTransactions)",
             "the coordinator completed COMMIT, its marker lost with the old leader: the uncleanly elected leader "
             "asks the coordinators, writes the COMMIT, and read_committed reads the record without the producer "
             "coming back", _config(3, (1, 2), 1, True, flush_messages=None, txn_partitions=3),
             lambda s: unclean_transaction_settled_by_coordinator(s, True)),
    Scenario("unclean-aborted-transaction", "issue 28 (KIP-664 ListTransactions, DescribeTransactions)",
             "the coordinator completed ABORT, its marker lost with the old leader: the uncleanly elected leader "
             "asks the coordinators and writes the ABORT; the LSO moves and the record is never read with "
             "read_committed", _config(3, (1, 2), 1, True, flush_messages=None, txn_partitions=3),
             lambda s: unclean_transaction_settled_by_coordinator(s, False)),
    Scenario("unclean-forgotten-transaction", "issue 28 (KIP-664 ListTransactions, Metadata)",
             "the coordinator completed ABORT and then forgot the transactional id; its marker lost with the old "
             "leader: no coordinator lists the producer, the uncleanly elected leader confirms by Metadata that "
             "each broker it asked still leads what it was asked for, then aborts; the LSO moves",
             _config(3, (1, 2), 1, True, flush_messages=None, txn_partitions=3, txn_id_expiration_ms=5000),
             unclean_transaction_of_a_forgotten_id),
    Scenario("hanging-transaction-second-election", "issue 28 (hanging transactions, KIP-664)",
             "an unclean leader's doubt is forgotten by a clean election to a third replica before its question "
             "is answered; the transaction open longer than transaction.max.timeout.ms is asked about anyway, "
             "its COMMIT written, the LSO moves and read_committed reads the record",
             _config(4, (1, 2, 3), 1, True, txn_partitions=3), hanging_transaction_after_second_election),
    Scenario("stale-leader-write", "Kafka: stale leader write", "the stale leader's acks=1 write is acknowledged "
             "and truncated away, its acks=all write never acknowledged; logs converge",
             _config(3, (1, 2, 3), 2, False), stale_leader_write),
    Scenario("stale-metadata-restart", "broker start-up order (docs/broker.md)", "a leader restarting with an "
             "empty disk does not lead its old epoch: no committed record is lost",
             _config(3, (1, 2, 3), 2, False), stale_metadata_restart),
    Scenario("failed-directory-reported", "KIP-858 (log directory failure in KRaft)", "the leader's only "
             "directory fails while it runs: its heartbeat reports it, the controller fences it and moves the "
             "leadership within a session timeout; nothing acknowledged is lost",
             _config(3, (1, 2, 3), 2, False), failed_directory_reported),
    Scenario("replication-steps", "Kafka ReplicaFetcherThread / ReplicaManager.fetchMessages", "one fetch round "
             "step by step: the follower's request, the leader's record of it, the answer, the follower's HW; "
             "back into the ISR; acks=all", _config(2, (1, 2), 1, False), replication_steps),
    Scenario("delete-records-race", "KIP-107 DeleteRecords", "the leader's log start moves past a follower's HW and "
             "past a cut-off follower's LEO: both follow it, no fetcher fails, logs converge at [8, 10)",
             _config(3, (1, 2, 3), 2, False), delete_records_race),
    Scenario("lagging-follower", "replica.lag.time.max.ms", "a cut-off follower leaves the ISR after the lag time, "
             "not before; the waiting acks=all write is then acknowledged; healed, it rejoins",
             _config(3, (1, 2, 3), 2, False), lagging_follower),
    Scenario("below-min-isr", "min.insync.replicas, KIP-966", "ISR {1} of min 2: acks=all refused with "
             "NOT_ENOUGH_REPLICAS, the acks=1 record uncommitted until a follower is back",
             _config(3, (1, 2, 3), 2, False), below_min_isr),
    Scenario("acks-all-leader-crash", "acks=all, min.insync.replicas 2", "the leader loses power mid-stream: every "
             "acknowledged write on the new leader exactly once, in order; logs converge",
             _config(3, (1, 2, 3), 2, False, flush_messages=None), acks_all_leader_crash),
    Scenario("long-poll-fetch", "replica.fetch.wait.max.ms (DelayedFetch)", "a follower fetch waiting in the "
             "leader's purgatory completes on append, well before the max wait",
             _config(3, (1, 2, 3), 2, False, fetch_wait_ms=500), long_poll),
    Scenario("quorum-leader-cut-off", "KIP-595 check quorum, KRaft writes", "the active controller cut off from "
             "the voters answers no write successfully, resigns; a new one is active, brokers move to it, its "
             "uncommitted topic is truncated and never applied; nobody fenced",
             _config(3, (1, 2, 3), 2, False, controllers=3), quorum_leader_cut_off),
    Scenario("quorum-leader-killed", "KIP-595 elections, KIP-996 pre-vote", "kill -9 of the active controller: a "
             "new one within seconds, brokers move to it unfenced; restarted, the old one follows",
             _config(3, (1, 2, 3), 2, False, controllers=3), quorum_leader_killed),
    Scenario("quorum-voter-changes", "KIP-853 dynamic voters", "a controller started from bootstrap servers is "
             "added, a voter removed with another killed mid-change, the leader removes itself: one leader per "
             "epoch, every committed batch kept, bad changes refused",
             _config(3, (1, 2, 3), 2, False, controllers=4, initial_voters=3), quorum_voter_changes),
    Scenario("txn-markers-acks-all", "KIP-98 transaction markers (WriteTxnMarkers acks=all)", "the COMMIT marker "
             "only on the leader (cut from its follower) when it loses power: the coordinator, never told it was "
             "written, writes it again to the new leader; the record is committed there",
             _config(3, (1, 2), 2, False, flush_messages=None, txn_partitions=3), txn_markers_acks_all),
    Scenario("txn-produce-verified", "KIP-890 part 1 (transaction verification)", "a transactional write to a "
             "partition never added is refused INVALID_TXN_STATE and not appended, whether the leader is the "
             "coordinator or asks it; accepted once added", _config(3, (1, 2), 1, False, txn_partitions=3),
             txn_produce_verified),
]}


@contextmanager
def fetcher_mode(truncate_on_fetch: bool):
    """Run every follower fetcher created in the block with ``truncate_on_fetch`` as
    given. True is Kafka's normal mode since IBP 2.7 (KIP-595's diverging epochs:
    Fetch carries ``last_fetched_epoch`` and the leader answers a divergence);
    False is the older one, where a follower that (re)starts following first asks
    OffsetsForLeaderEpoch where its latest epoch ends (KIP-101, KIP-279)."""
    if truncate_on_fetch:
        yield
        return
    original = FetcherState.__init__

    def init(self, source_broker_id, fetcher_id, replica_id, config, *args, **kwargs):
        original(self, source_broker_id, fetcher_id, replica_id,
                 dataclasses.replace(config, truncate_on_fetch=False), *args, **kwargs)

    FetcherState.__init__ = init
    try:
        yield
    finally:
        FetcherState.__init__ = original


def run_scenario(name: str, directory: str, *, defect: str | None = None, trace: Trace | None = None,
                 truncate_on_fetch: bool = True, **config_changes) -> ScenarioOutcome:
    """Run one named scenario. ``truncate_on_fetch=False`` runs the followers in the
    OffsetsForLeaderEpoch mode (see ``fetcher_mode``)."""
    scenario = SCENARIOS[name]
    outcome = ScenarioOutcome(name, scenario.expected)
    config = scenario.config.with_options(defect=defect, **config_changes)
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sim = None
    try:
        with planted(defect), fetcher_mode(truncate_on_fetch):
            sim = Simulation(config, directory, trace)
            script = None
            try:
                sim.setup()
                script = Script(sim, truncate_on_fetch)
                outcome.as_expected, outcome.observed = scenario.script(script)
            except InvariantViolation as e:
                outcome.violation = f"{e.invariant}: {e.detail}"
                outcome.observed = dict(script.observed) if script is not None else {}
            except (TimeoutError, AssertionError) as e:
                outcome.observed = dict(script.observed) if script is not None else {}
                outcome.observed["stopped"] = f"{type(e).__name__}: {e}"
            finally:
                outcome.trace_tail = list(sim.loop.trace.recent)
                sim.close()
    finally:
        quiet.setLevel(level)
    return outcome
