"""The real-process nemesis: a schedule of faults against a running cluster.

Theory of operation. A schedule is a list of ``Fault(at_s, kind, targets,
duration_s)``; ``Nemesis`` runs it on a thread against a ``tidelog.testing.Cluster``
and the ``LinkProxy`` in front of it, undoing each fault after its duration and
everything that is left at ``heal()``:

=============  ===================================================================
kill           SIGKILL a broker; start it again after the duration
pause          SIGSTOP a broker; SIGCONT after the duration
restart        SIGTERM (controlled shutdown, clean stop), then start at once
partition      cut both directions between two nodes (brokers, or 1000 = controller)
isolate        cut a node from every other node and from the clients
client-cut     cut the clients from one broker
controller     SIGKILL the controller; start it again after the duration
=============  ===================================================================

``SHORT`` is the one schedule CI runs (tests/chaos); ``random_schedule`` draws a
long one from a seed (``python -m tidelog.chaos --long``). Every fault injected
is recorded with its time, for the report.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from tidelog.chaos.proxy import CLIENT, LinkProxy

CONTROLLER = 1000


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    targets: tuple[int, ...]
    duration_s: float = 0.0

    def describe(self) -> str:
        return f"{self.kind} {','.join(map(str, self.targets))} for {self.duration_s:.1f} s"


# One nemesis schedule, 3 brokers (1..3): every kind of fault, twice for the worst ones.
SHORT = (
    Fault(4, "kill", (1,), 5),
    Fault(12, "partition", (2, 3), 6),
    Fault(20, "pause", (3,), 5),
    Fault(27, "isolate", (2,), 6),
    Fault(35, "restart", (3,)),
    Fault(40, "client-cut", (1,), 4),
    Fault(46, "kill", (2,), 4),
    Fault(52, "partition", (1, CONTROLLER), 5),
)
SHORT_DURATION_S = 60


def random_schedule(seed: int, brokers: int, duration_s: float) -> tuple[Fault, ...]:
    rng = random.Random(f"tidelog-chaos-{seed}")
    faults, at = [], 3.0
    kinds = ["kill", "pause", "restart", "partition", "isolate", "client-cut", "controller"]
    ids = list(range(1, brokers + 1))
    while at < duration_s - 5:
        kind = rng.choice(kinds)
        length = round(rng.uniform(2, 10), 1)
        if kind == "partition":
            targets = tuple(rng.sample(ids + [CONTROLLER], 2))
        elif kind == "controller":
            targets = (CONTROLLER,)
        else:
            targets = (rng.choice(ids),)
        faults.append(Fault(round(at, 1), kind, targets, 0.0 if kind == "restart" else length))
        at += rng.uniform(3, 9)
    return tuple(faults)


@dataclass
class Nemesis:
    cluster: object                  # tidelog.testing.Cluster
    proxy: LinkProxy
    schedule: tuple[Fault, ...]
    injected: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._undo: list[tuple[float, str, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidelog-nemesis", daemon=True)
        self._started = 0.0
        self._lock = threading.Lock()
        self._starting: set[int] = set()
        self._start_threads: list[threading.Thread] = []

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def _now(self) -> float:
        return time.monotonic() - self._started

    def _run(self) -> None:
        pending = sorted(self.schedule, key=lambda f: f.at_s)
        while not self._stop.is_set() and (pending or self._undo):
            now = self._now()
            with self._lock:
                due_undo = [u for u in self._undo if u[0] <= now]
                for entry in due_undo:
                    self._undo.remove(entry)
            for _, label, action in due_undo:
                self._do(f"undo {label}", action)
            while pending and pending[0].at_s <= now:
                self._inject(pending.pop(0))
            self._stop.wait(0.1)

    def _do(self, label: str, action) -> None:
        try:
            action()
            self.injected.append((round(self._now(), 1), label))
        except Exception as e:   # a fault that cannot be applied is reported, not fatal
            self.errors.append(f"{label}: {type(e).__name__}: {e}")

    def _later(self, fault: Fault, label: str, action) -> None:
        with self._lock:
            self._undo.append((self._now() + fault.duration_s, label, action))

    def _start(self, node_id: int, stop_first: bool = False) -> None:
        """(Stop and) start a node without blocking the schedule — a broker that cannot
        reach the controller takes long to become ready, a controlled shutdown waits
        for its leaderships to move; faults skip the node meanwhile."""
        if node_id in self._starting:
            return
        if not stop_first and self.cluster.processes.process_states()[node_id] != "dead":
            return
        self.injected.append((round(self._now(), 1), f"{'restart' if stop_first else 'start'} {node_id}"))

        def run() -> None:
            try:
                if stop_first:
                    self.cluster.stop(node_id)
                self.cluster.start_node(node_id)
            except Exception as e:
                self.errors.append(f"start {node_id}: {type(e).__name__}: {e}")
            finally:
                self._starting.discard(node_id)
        self._starting.add(node_id)
        thread = threading.Thread(target=run, name=f"tidelog-nemesis-start-{node_id}", daemon=True)
        self._start_threads.append(thread)
        thread.start()

    def _inject(self, fault: Fault) -> None:
        c, p = self.cluster, self.proxy
        target = fault.targets[0]
        label = fault.describe()
        if fault.kind in ("kill", "controller", "pause", "restart") and target in self._starting:
            self.injected.append((round(self._now(), 1), f"skipped {label}: node {target} is starting"))
            return
        if fault.kind == "kill":
            self._do(label, lambda: c.kill(target))
            self._later(fault, f"start {target}", lambda: self._start(target))
        elif fault.kind == "controller":
            self._do(label, lambda: c.kill(CONTROLLER))
            self._later(fault, "start controller", lambda: self._start(CONTROLLER))
        elif fault.kind == "pause":
            if c.processes.process_states()[target] != "running":
                self.injected.append((round(self._now(), 1), f"skipped {label}: node {target} is not running"))
                return
            self._do(label, lambda: c.pause(target))
            self._later(fault, f"resume {target}", lambda: c.resume(target))
        elif fault.kind == "restart":
            if c.processes.process_states()[target] != "running":
                self.injected.append((round(self._now(), 1), f"skipped {label}: node {target} is not running"))
                return
            self._start(target, stop_first=True)
        elif fault.kind == "partition":
            a, b = fault.targets
            self._do(label, lambda: p.partition(a, b))
            self._later(fault, f"heal {a}<->{b}", lambda: self._unblock({(a, b), (b, a)}))
        elif fault.kind == "isolate":
            self._do(label, lambda: p.isolate(target))
            others = [n for n in p.node_ids + [CLIENT] if n != target]
            pairs = {(target, o) for o in others} | {(o, target) for o in others}
            self._later(fault, f"heal isolation of {target}", lambda: self._unblock(pairs))
        elif fault.kind == "client-cut":
            self._do(label, lambda: p.partition(CLIENT, target))
            self._later(fault, f"heal clients<->{target}", lambda: self._unblock({(CLIENT, target), (target, CLIENT)}))
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _unblock(self, pairs) -> None:
        self.proxy.unblock(pairs)

    def heal(self) -> None:
        """Stop injecting; undo every fault still active; every node runs again."""
        self._stop.set()
        self._thread.join(30)
        with self._lock:
            undo, self._undo = self._undo, []
        for _, label, action in undo:
            self._do(f"undo {label} (healing)", action)
        self.proxy.heal()
        states = self.cluster.processes.process_states()
        for node_id, state in sorted(states.items()):
            if state == "paused":
                self._do(f"resume {node_id} (healing)", lambda n=node_id: self.cluster.resume(n))
        for thread in self._start_threads:
            thread.join(90)
        states = self.cluster.processes.process_states()
        for node_id in [CONTROLLER] + sorted(n for n in states if n != CONTROLLER):
            if states[node_id] == "dead":
                self._do(f"start {node_id} (healing)", lambda n=node_id: self.cluster.start_node(n))

    @property
    def faults_injected(self) -> int:
        return sum(1 for _, label in self.injected if not label.startswith(("undo", "start", "resume", "skipped")))

