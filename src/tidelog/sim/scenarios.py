"""Named fault scenarios (SPEC §11), scripted on the simulator, with expected outcomes.

Theory of operation. A scenario is a script over one ``Simulation`` with a fixed
configuration and no nemesis: it creates its topic with explicit replicas,
writes through a scripted client (``ScriptClient``), and injects exactly the
faults the scenario names at exactly the moments it names them — "when A has
fetched m2 but not yet the high watermark that commits it" is a
``wait(lambda: …)`` on real replica state, evaluated after every event. The
checker still runs after every event, so a scenario also proves the SPEC §10
invariants along its path. Each returns what it observed and whether that is
the expected outcome; ``tests/sim/test_scenarios.py`` asserts it, and asserts
that planted defects (``defects.py``) turn the outcome around where the
scenario exists to catch them.

``python -m tidelog.sim --scenario list`` prints them; ``--scenario NAME
[--defect D] [--trace]`` runs one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import build_batch, iter_batches, iter_records
from tidelog.sim.broker import RUNNING
from tidelog.sim.checker import InvariantViolation
from tidelog.sim.config import SimConfig, TopicSpec
from tidelog.sim.defects import planted
from tidelog.sim.loop import NodeClock, Trace
from tidelog.sim.network import NetworkNode
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

    def produce(self, broker: int, tp: TopicPartition, values: list[bytes], acks: int) -> dict:
        box: dict = {}
        body = {"tp": tp, "acks": acks, "timeout_ms": 2000, "values": values,
                "batch": build_batch(values, timestamp_ms=self.clock.now_ms())}
        view = _ProducerView("client", acks)
        self.sim.checker.on_produce_started(view, tp, values)

        def on_reply(response) -> None:
            box.update(response)
            self.sim.checker.on_produce_done(view, tp, values, ErrorCode(response["error_code"]),
                                             response["base_offset"])

        self.rpc.request(f"b{broker}", "Produce", body, 3000, on_reply,
                         lambda error: box.update(error_code=int(ErrorCode.NETWORK_EXCEPTION), why=error))
        return box


class Script:
    def __init__(self, sim: Simulation):
        self.sim = sim
        self.client = ScriptClient(sim)
        self.written = 0

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
        return self.sim.brokers[broker].up and self.sim.brokers[broker].state == RUNNING

    # ------------------------------------------------------------ doing

    def wait(self, predicate, what: str, timeout_ms: int = 20_000) -> None:
        self.sim.run_until(predicate, timeout_ms, what)

    def produce(self, values: list[str], acks: int, broker: int | None = None,
                tp: TopicPartition = TP) -> dict:
        broker = self.leader(tp) if broker is None else broker
        box = self.client.produce(broker, tp, [v.encode() for v in values], acks)
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
        """Wait for the ISR to become ``isr``, writing acks=1 records meanwhile: a
        follower that has everything is never out of sync, however long it is silent."""
        leader = self.leader()
        probes = 0

        def done() -> bool:
            nonlocal probes
            if self.isr() == isr:
                return True
            if self.sim.loop.now_ms % 500 == 0 and self.leo(leader) == self.hw(leader):
                probes += 1
                self.client.produce(leader, TP, [f"probe-{probes}".encode()], 1)
            return False

        self.client.produce(leader, TP, [b"probe-0"], 1)
        self.wait(done, what)

    def converge(self, brokers: list[int], tp: TopicPartition = TP) -> None:
        def same() -> bool:
            if not all(self.partition(b, tp) is not None for b in brokers):
                return False
            ends = {(self.leo(b, tp), self.hw(b, tp)) for b in brokers}
            return len(ends) == 1 and len({self.sim.log_bytes(b, tp) for b in brokers}) == 1
        self.wait(same, f"replicas {brokers} byte-identical", 30_000)


def _config(brokers: int, replicas: tuple[int, ...], min_isr: int, unclean: bool, *, flush_messages=1,
            flush_ms=None, lag_ms: int = 2000, session_ms: int = 3000, **options) -> SimConfig:
    topic = TopicSpec("t0", 1, len(replicas), min_isr, unclean, flush_messages, 1 << 20, flush_ms, (replicas,))
    return SimConfig(seed=0, brokers=brokers, topics=(topic,), clients=(), session_timeout_ms=session_ms,
                     heartbeat_interval_ms=session_ms // 6, replica_lag_time_max_ms=lag_ms,
                     replica_fetch_wait_max_ms=200, replica_fetch_backoff_ms=200, request_timeout_ms=1000,
                     hw_checkpoint_interval_ms=5000, net_delay_ms=1, net_jitter_ms=0, fault_kinds=(),
                     **options)


# ====================================================================== the scenarios


def kip_101_1(s: Script) -> tuple[bool, dict]:
    """A (1) holds [m1 m2] with HW 1 — the HW that commits m2 reaches a follower one
    fetch later — and restarts; B (2) dies before A can fetch again; A leads."""
    a, b = 1, 2
    s.write(1)
    s.wait(lambda: s.hw(a) == 1, "A has m1 and HW 1")
    s.write(1)
    s.wait(lambda: s.leo(a) == 2, "A fetched m2")
    a_high_watermark = s.hw(a)
    s.sim.network.cut("b2", "b1")                       # B's answers to A are lost from now on
    s.wait(lambda: s.hw(b) == 2, "A's next fetch commits m2 on B")
    s.sim.stop(a)                                       # clean: the HW checkpoint says 1
    s.wait(lambda: not s.sim.brokers[a].up, "A stopped")
    s.sim.network.heal()
    s.sim.network.partition("b1", "b2")                 # A cannot fetch again after its restart
    s.sim.start(a)
    s.wait(lambda: s.running(a) and s.partition(a) is not None, "A back")
    s.sim.run_for(1000)
    s.sim.kill(b)                                       # the unclean election picks A
    s.wait(lambda: s.leads(a), "A leads")
    after_election = s.values(a)
    s.sim.network.heal()
    s.sim.start(b)
    s.converge([a, b])
    observed = {"A's HW when it had m2": a_high_watermark, "A's log when elected": after_election,
                "both logs at the end": s.values(b)}
    return after_election == [b"m0", b"m1"] and s.values(b) == [b"m0", b"m1"], observed


def kip_101_2(s: Script) -> tuple[bool, dict]:
    """A (1) [m1 m2], B (2) [m1]; both crash; B returns first, leads, writes m3 at
    offset 1; A returns as follower."""
    a, b = 1, 2
    s.write(1)
    s.wait(lambda: s.leo(b) == 1, "B has m1")
    s.sim.network.partition("b1", "b2")
    s.write(1, broker=a)                                # m1 at offset 1 on A only
    s.sim.kill(a)
    s.wait(lambda: s.leader() == b, "A fenced, B elected")
    s.sim.kill(b)
    s.wait(lambda: s.leader() == -1, "no leader")
    s.sim.network.heal()
    s.sim.start(b)
    s.wait(lambda: s.leads(b), "B leads again")
    s.write(1, broker=b)                                # m2 at offset 1 on B
    s.sim.start(a)
    s.converge([a, b])
    observed = {"A": s.values(a), "B": s.values(b)}
    return s.values(a) == [b"m0", b"m2"] == s.values(b), observed


def kip_279(s: Script) -> tuple[bool, dict]:
    """Kafka's logsShouldNotDivergeOnUncleanLeaderElections: stop one, (re)start the
    other, writing 1, 1, 3, 1, 2 records; each log holds epochs the other never saw."""
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
    y_epochs = sorted({e for e in _epochs(s, y)})
    switch(y, x)
    s.write(2)
    x_epochs = sorted({e for e in _epochs(s, x)})
    s.sim.start(y)
    s.converge([x, y])
    observed = {"epochs y wrote": y_epochs, "epochs x wrote": x_epochs, "final log": s.values(x)}
    identical = s.sim.log_bytes(x, TP) == s.sim.log_bytes(y, TP)
    expected = [b"m0", b"m2", b"m3", b"m4", b"m6", b"m7"]   # as Kafka's test (and tests/replication)
    return identical and set(y_epochs) != set(x_epochs) and s.values(x) == expected, observed


def _epochs(s: Script, broker: int) -> list[int]:
    data = s.sim.log_bytes(broker, TP)
    return [header.partition_leader_epoch for _, header in iter_batches(data)]


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
    """SPEC §11.7: a leader cut off from the cluster (not from the client) accepts an
    acks=1 write after a new leader was elected; it truncates it away later."""
    old = s.leader()
    s.write(2, acks=-1)
    for other in ["ctl"] + [f"b{b}" for b in (1, 2, 3) if b != old]:
        s.sim.network.partition(f"b{old}", other)
    s.wait(lambda: s.leader() not in (old, -1), "a new leader")
    stale = s.produce(["stale"], acks=1, broker=old)
    s.sim.network.heal()
    s.converge([1, 2, 3])
    everywhere = [s.values(b) for b in (1, 2, 3)]
    observed = {"stale write answered": ErrorCode(stale["error_code"]).name,
                "stale write in any log at the end": any(b"stale" in v for v in everywhere)}
    return stale["error_code"] == 0 and not observed["stale write in any log at the end"], observed


def stale_metadata_restart(s: Script) -> tuple[bool, dict]:
    """The leader's disk is replaced (it restarts empty) while its followers still
    follow it at the same epoch. Applying its local metadata copy before registering
    (server/broker.py's order) makes it lead, empty, at the old epoch: followers
    truncate to it and committed records are lost. SPEC §8.2's order (the default
    here) applies the image only past its own registration, whose incarnation change
    moves leadership away first."""
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


SCENARIOS = {scenario.name: scenario for scenario in [
    Scenario("kip-101-1", "SPEC §11.2", "m2 survives: A asks where epoch 0 ends instead of truncating to its HW",
             _config(2, (2, 1), 1, True), kip_101_1),
    Scenario("kip-101-2", "SPEC §11.3", "A truncates to 1 and fetches m3: no offset holds m2 on one replica and "
             "m3 on another", _config(2, (1, 2), 1, False), kip_101_2),
    Scenario("kip-279", "SPEC §11.4", "five restarts with unclean election: both logs byte-identical",
             _config(2, (1, 2), 1, True), kip_279),
    Scenario("kip-966-strict-min-isr", "SPEC §11.5", "with ISR {3}: acks=all refused, HW still; 3 returns as "
             "the only ISR member and no committed record is lost (the lost tail was never committed)",
             _config(3, (3, 2, 1), 2, False, flush_messages=None, flush_ms=500), lambda s: kip_966(s, True)),
    Scenario("kip-966-last-replica-standing", "SPEC §11.5", "without ELR, a last ISR member that lost unflushed "
             "committed records in a power cut leads without them (excused by the checker as KIP-966's case)",
             _config(3, (3, 2, 1), 2, False, flush_messages=None), lambda s: kip_966(s, False)),
    Scenario("jepsen-2013-unclean", "SPEC §11.1", "ISR of one, min ISR 1, unclean election: the acknowledged "
             "writes vanish", _config(3, (1, 2, 3), 1, True), lambda s: jepsen_2013(s, False)),
    Scenario("jepsen-2013-safe", "SPEC §11.1", "min ISR 2, clean election: acks=all refused with "
             "NOT_ENOUGH_REPLICAS, no leader rather than an unclean one, nothing acknowledged is lost",
             _config(3, (1, 2, 3), 2, False), lambda s: jepsen_2013(s, True)),
    Scenario("stale-leader-write", "SPEC §11.7", "the stale leader's acks=1 write is truncated away; logs converge",
             _config(3, (1, 2, 3), 1, False), stale_leader_write),
    Scenario("stale-metadata-restart", "SPEC §8.2", "a leader restarting with an empty disk does not lead its "
             "old epoch: no committed record is lost", _config(3, (1, 2, 3), 2, False), stale_metadata_restart),
]}


def run_scenario(name: str, directory: str, *, defect: str | None = None, trace: Trace | None = None,
                 **config_changes) -> ScenarioOutcome:
    scenario = SCENARIOS[name]
    outcome = ScenarioOutcome(name, scenario.expected)
    config = scenario.config.with_options(defect=defect, **config_changes)
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sim = None
    try:
        with planted(defect):
            sim = Simulation(config, directory, trace)
            try:
                sim.setup()
                outcome.as_expected, outcome.observed = scenario.script(Script(sim))
            except InvariantViolation as e:
                outcome.violation = f"{e.invariant}: {e.detail}"
            except (TimeoutError, AssertionError) as e:
                outcome.observed["stopped"] = f"{type(e).__name__}: {e}"
            finally:
                outcome.trace_tail = list(sim.loop.trace.recent)
                sim.close()
    finally:
        quiet.setLevel(level)
    return outcome
