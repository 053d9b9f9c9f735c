"""The fault phase: a nemesis that strikes at random, and heals what it broke.

Theory of operation. During the fault phase the nemesis strikes every
``fault_interval_ms`` on average (exponential gaps), choosing one of the kinds
the seed enabled (``SimConfig.fault_kinds``); each fault lasts about
``fault_duration_ms`` and then undoes itself (a killed broker restarts, a cut
link heals, a full disk drains and its broker restarts …). ``heal_all()``
ends the fault phase: every pending undo runs now, the network heals, every
process runs again.

=============  ===============================================================
partition      both directions between two nodes (brokers or controllers)
asymmetric     one direction only
isolate        one node from every other (brokers, controllers and clients)
split          a random group of brokers (maybe with some controllers) from the rest
swizzle        FoundationDB's swizzle-clog: clog k nodes one after another, then
               unclog them in random order (messages are held, not dropped)
lossy          message loss and duplication on every link
kill           kill -9 of a broker (page cache survives), restart later
power          power cut of a broker (unsynced bytes lost, maybe a torn write)
stop           SIGTERM: controlled shutdown, clean stop; start later
pause          SIGSTOP/SIGCONT of a broker
controller     kill -9 and restart of a controller, or a pause; with a quorum also
               the leader isolated; half the time aimed at the quorum's leader
disk-full      a broker's log directory fills up (ENOSPC), drains, broker restarts
disk-fail      a broker's log directory fails (EIO); the disk is replaced by an empty one
clock          a broker's wall clock jumps (forward or back)
reassign       a partition moved (KIP-455) to a random replica set (its replication
               factor ±1, at least min.insync.replicas) through the active
               controller; cancelled later if still running.
               Opt-in (``OPT_IN_FAULT_KINDS``): no seed draws it, so the fixed
               seeds replay as before; tests/sim/test_reassignment_sim.py runs it
voters         on a dynamic quorum of 3 or 5 (KIP-853): RemoveRaftVoter of a voter
               (the leader one time in four) through the active controller, and
               AddRaftVoter of it again later, once it caught up as an observer;
               at most (controllers - 1) // 2 voters out at a time. Opt-in;
               tests/sim/test_voter_changes_sim.py runs it
=============  ===============================================================

At most ``faults_at_once`` faults (a swarm option, 1–4) are active at a time and
at most ``brokers - 1`` brokers are down or paused, so the cluster is hurt but
rarely entirely gone: acks=all writes keep being acknowledged between faults,
which is what invariant 4 needs to have something to check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tidelog.core.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.sim.world import World

VOTER_RETRY_MS = 1000       # how often a removed voter's AddRaftVoter is tried again


class Nemesis:
    def __init__(self, sim: "World"):
        self.sim = sim
        self.rng = sim.rng
        self.undos: list[tuple[object, Callable[[], None], str]] = []
        self.next_strike = None
        self.active = False
        self._fault_id = 0

    def start(self) -> None:
        self.active = True
        self._schedule_strike()

    def _exp(self, mean_ms: int) -> int:
        return max(1, int(self.rng.expovariate(1.0 / max(1, mean_ms))))

    def _schedule_strike(self) -> None:
        self.next_strike = self.sim.loop.after(self._exp(self.sim.config.fault_interval_ms), self._strike)

    def _later(self, label: str, undo: Callable[[], None], delay_ms: int | None = None) -> None:
        """Undo after about ``fault_duration_ms`` (or now, at heal time)."""
        entry = [None, undo, label, self._fault_id]

        def fire() -> None:
            if entry in self.undos:
                self.undos.remove(entry)
                self.sim.loop.trace.add(self.sim.loop.now_ms, "nemesis", f"undo {label}")
                undo()

        entry[0] = self.sim.loop.after(delay_ms if delay_ms is not None else
                                       self._exp(self.sim.config.fault_duration_ms), fire)
        self.undos.append(entry)

    def heal_all(self) -> None:
        self.active = False
        if self.next_strike is not None:
            self.next_strike.cancel()
        for entry in list(self.undos):
            entry[0].cancel()
            self.undos.remove(entry)
            self.sim.loop.trace.add(self.sim.loop.now_ms, "nemesis", f"undo {entry[2]} (healing)")
            entry[1]()

    # ------------------------------------------------------------ choosing

    def _strike(self) -> None:
        if not self.active:
            return
        kinds = list(self.sim.config.fault_kinds)
        if len(self.sim.controllers) > 1:
            # A quorum's own faults (a voter or the leader killed, paused or isolated):
            # about one strike in five, whatever kinds the seed drew.
            kinds += ["controller"] * (3 - kinds.count("controller"))
        kind = self.rng.choice(kinds)
        if len({entry[3] for entry in self.undos}) >= self.sim.config.faults_at_once:
            self._schedule_strike()      # enough is broken for now
            return
        self._fault_id += 1
        done = getattr(self, "_" + kind.replace("-", "_"))()
        if done:
            self.sim.stats.faults[kind] = self.sim.stats.faults.get(kind, 0) + 1
        self._schedule_strike()

    def _nodes(self) -> list[str]:
        return self.sim.controller_names + [f"b{b}" for b in self.sim.broker_ids]

    def _live_brokers(self) -> list[int]:
        return [b for b in self.sim.broker_ids if self.sim.brokers[b].up and not self.sim.brokers[b].owned.paused]

    def _can_take_down(self) -> list[int]:
        live = self._live_brokers()
        return live if len(live) > 1 else []

    # ------------------------------------------------------------ network faults

    def _partition(self) -> bool:
        a, b = self.rng.sample(self._nodes(), 2)
        self.sim.fault(f"partition {a} <-> {b}", lambda: self.sim.network.partition(a, b))
        self._later(f"partition {a} <-> {b}", lambda: self._unblock({(a, b), (b, a)}))
        return True

    def _asymmetric(self) -> bool:
        a, b = self.rng.sample(self._nodes(), 2)
        self.sim.fault(f"cut {a} -> {b}", lambda: self.sim.network.cut(a, b))
        self._later(f"cut {a} -> {b}", lambda: self._unblock({(a, b)}))
        return True

    def _isolate(self) -> bool:
        node = self.rng.choice(self._nodes())
        pairs = {(node, o) for o in self.sim.network.nodes if o != node}
        pairs |= {(o, node) for o in self.sim.network.nodes if o != node}
        self.sim.fault(f"isolate {node}", lambda: self.sim.network.blocked.update(pairs))
        self._later(f"isolate {node}", lambda: self._unblock(pairs))
        return True

    def _split(self) -> bool:
        brokers = [f"b{b}" for b in self.sim.broker_ids]
        side = self.rng.sample(brokers, self.rng.randint(1, len(brokers) - 1))
        if self.rng.random() < 0.5:
            controllers = self.sim.controller_names
            side += controllers if len(controllers) == 1 else \
                self.rng.sample(controllers, self.rng.randint(1, len(controllers)))
        rest = [n for n in self._nodes() if n not in side]
        pairs = {(a, b) for a in side for b in rest} | {(b, a) for a in side for b in rest}
        self.sim.fault(f"split {sorted(side)} | {sorted(rest)}", lambda: self.sim.network.blocked.update(pairs))
        self._later(f"split {sorted(side)}", lambda: self._unblock(pairs))
        return True

    def _unblock(self, pairs) -> None:
        self.sim.network.blocked -= pairs

    def _swizzle(self) -> bool:
        nodes = self.rng.sample(self._nodes(), self.rng.randint(2, len(self._nodes())))
        step = self.rng.randint(50, 500)
        for i, node in enumerate(nodes):
            self.sim.loop.after(i * step, lambda n=node: self.active and self.sim.fault(
                f"clog {n}", lambda: self.sim.network.clog(n)))
        order = list(nodes)
        self.rng.shuffle(order)
        base = len(nodes) * step + self._exp(self.sim.config.fault_duration_ms)
        for i, node in enumerate(order):
            self._later(f"clog {node}", lambda n=node: self.sim.network.unclog(n), base + i * step)
        return True

    def _lossy(self) -> bool:
        from tidelog.sim.network import LinkFaults
        loss = self.sim.config.fault_loss or 0.05
        duplicate = self.sim.config.fault_duplicate or 0.02
        self.sim.fault(f"lossy links loss={loss} dup={duplicate}",
                       lambda: setattr(self.sim.network, "faults", LinkFaults(loss, duplicate)))
        self._later("lossy links", lambda: setattr(self.sim.network, "faults", LinkFaults()))
        return True

    # ------------------------------------------------------------ process faults

    def _kill(self) -> bool:
        candidates = self._can_take_down()
        if not candidates:
            return False
        b = self.rng.choice(candidates)
        self.sim.kill(b)
        self._later(f"kill b{b}", lambda: self.sim.start(b))
        return True

    def _power(self) -> bool:
        candidates = self._can_take_down()
        if not candidates:
            return False
        b = self.rng.choice(candidates)
        self.sim.power_cut(b, tear=self.rng.random() < 0.5)
        self._later(f"power cut b{b}", lambda: self.sim.start(b))
        return True

    def _stop(self) -> bool:
        candidates = self._can_take_down()
        if not candidates:
            return False
        b = self.rng.choice(candidates)
        self.sim.stop(b)
        self._later(f"stop b{b}", lambda: self.sim.start(b))
        return True

    def _pause(self) -> bool:
        candidates = self._can_take_down()
        if not candidates:
            return False
        b = self.rng.choice(candidates)
        self.sim.pause(f"b{b}")
        self._later(f"pause b{b}", lambda: self.sim.resume(f"b{b}"))
        return True

    def _controller(self) -> bool:
        """A controller fault. One controller: kill -9 (restart later) or pause it. A
        quorum: the same, or the leader isolated from everyone — aimed at the leader
        half the time, else at any voter; a kill or pause only while another voter runs."""
        if len(self.sim.controllers) == 1:
            controller = self.sim.controllers[self.sim.controller_ids[0]]
            if not controller.up or controller.owned.paused:
                return False
            action = "pause" if self.rng.random() < 0.5 else "kill"
            stats = self.sim.stats.controller_faults
            stats[f"{action}-leader"] = stats.get(f"{action}-leader", 0) + 1
            if action == "pause":
                self._pause_controller(controller)
            else:
                self._kill_controller(controller)
            return True
        running = [c for c in self.sim.controllers.values() if c.up and not c.owned.paused]
        leaders = [c for c in running if c.replica.state == "Leader"]
        action = self.rng.choice(["kill", "pause", "isolate"])
        target = leaders[0] if leaders and self.rng.random() < 0.5 else self.rng.choice(running) if running else None
        if target is None or (action != "isolate" and len(running) < 2):
            return False
        stats = self.sim.stats.controller_faults
        key = f"{action}-{'leader' if target in leaders else 'voter'}"
        stats[key] = stats.get(key, 0) + 1
        if action == "kill":
            self._kill_controller(target)
        elif action == "pause":
            self._pause_controller(target)
        else:
            node = target.name
            pairs = {(node, o) for o in self.sim.network.nodes if o != node}
            pairs |= {(o, node) for o in self.sim.network.nodes if o != node}
            self.sim.fault(f"isolate {node} (the controller quorum's {'leader' if target in leaders else 'voter'})",
                           lambda: self.sim.network.blocked.update(pairs))
            self._later(f"isolate {node}", lambda: self._unblock(pairs))
        return True

    def _pause_controller(self, controller) -> None:
        self.sim.pause(controller.name)
        self._later(f"pause {controller.name}", lambda: self.sim.resume(controller.name))

    def _kill_controller(self, controller) -> None:
        self.sim.kill_controller(controller.node_id)
        self._later(f"kill {controller.name}", lambda: self.sim.start_controller(controller.node_id))

    def _disk(self, kind: str) -> bool:
        candidates = self._can_take_down()
        if not candidates:
            return False
        b = self.rng.choice(candidates)
        broker = self.sim.brokers[b]
        log_dir = self.rng.choice(broker.log_dirs)
        self.sim.disk_fault(b, log_dir, kind)
        self._later(f"{kind} b{b}", lambda: self.sim.heal_disk(b, log_dir))
        return True

    def _disk_full(self) -> bool:
        return self._disk("full")

    def _disk_fail(self) -> bool:
        return self._disk("fail")

    def _reassign(self) -> bool:
        active = [c for c in self.sim.controllers.values() if c.active]
        if not active:
            return False
        topic = self.rng.choice(self.sim.config.topics)
        partition = self.rng.randrange(topic.partitions)
        # One replica fewer or more than the topic's factor, or as many: the simulated
        # clusters are small, and a move must add replicas to make them catch up. Never
        # below min.insync.replicas, so acks=all keeps its meaning (invariant 4).
        low = max(topic.min_insync_replicas, topic.replication_factor - 1, 1)
        high = min(len(self.sim.broker_ids), topic.replication_factor + 1)
        replicas = tuple(self.rng.sample(self.sim.broker_ids, self.rng.randint(min(low, high), high)))
        where = f"{topic.name}-{partition}"
        self.sim.fault(f"reassign {where} to {list(replicas)}",
                       lambda: active[0].reassign(topic.name, partition, replicas))

        def cancel() -> None:
            now_active = [c for c in self.sim.controllers.values() if c.active]
            if now_active:
                code = now_active[0].reassign(topic.name, partition, None)
                self.sim.loop.trace.add(self.sim.loop.now_ms, "nemesis", f"cancel {where}: {code.name}")
        self._later(f"reassign {where}", cancel)
        return True

    def _voters(self) -> bool:
        """A voter change (KIP-853) through the active controller, on a dynamic quorum
        of three or five (``SimConfig.initial_voters``): RemoveRaftVoter of a voter —
        the leader itself one time in four — and, as the undo, AddRaftVoter of it again
        (the Raft leader appends it once it has fetched up to the log end as an
        observer). At most ``(controllers - 1) // 2`` voters are out at a time, what the
        full quorum tolerates down, so the smallest set is still a majority of the
        formatted one; a strike that finds the most out adds one back instead."""
        if len(self.sim.controllers) < 3 or not self.sim.config.initial_voters:
            return False
        active = [c for c in self.sim.controllers.values() if c.active]
        if not active:
            return False
        leader = active[0]
        out = [c for c in self.sim.controller_ids if c not in leader.replica.voters]
        if len(out) >= (len(self.sim.controllers) - 1) // 2:
            return self._add_voter(self.rng.choice(out))
        others = [v for v in leader.replica.voters if v != leader.node_id]
        target = leader.node_id if self.rng.random() < 0.25 else self.rng.choice(others)
        number, error = leader.change_voters("remove", target)
        self.sim.loop.trace.add(self.sim.loop.now_ms, "nemesis",
                                f"RemoveRaftVoter {target} on {leader.name}: {error.name}")
        if error != ErrorCode.NONE:
            return False             # another change is not committed yet: try another time
        self._later(f"remove voter {target}", lambda: self._add_voter_back(target))
        return True

    def _add_voter(self, voter_id: int) -> bool:
        """AddRaftVoter of ``voter_id`` on the active controller; whether it was accepted."""
        active = [c for c in self.sim.controllers.values() if c.active]
        if not active or voter_id in active[0].replica.voters:
            return False
        number, error = active[0].change_voters("add", voter_id)
        self.sim.loop.trace.add(self.sim.loop.now_ms, "nemesis",
                                f"AddRaftVoter {voter_id} on {active[0].name}: {error.name}")
        return error == ErrorCode.NONE

    def _add_voter_back(self, voter_id: int) -> None:
        """The undo of a removal: AddRaftVoter until ``voter_id`` is a voter again. A
        refusal (no active controller, another change not committed) or an add that
        times out (the voter killed or cut off while catching up) is retried every
        ``VOTER_RETRY_MS`` — after healing too, so the run converges to the full quorum."""
        active = [c for c in self.sim.controllers.values() if c.active]
        if active and voter_id in active[0].replica.voters and \
                active[0].replica.voters_offset < active[0].replica.high_watermark:
            return                   # a voter again, and that VotersRecord is committed
        self._add_voter(voter_id)
        self.sim.loop.after(VOTER_RETRY_MS, lambda: self._add_voter_back(voter_id))

    def _clock(self) -> bool:
        b = self.rng.choice(self.sim.broker_ids)
        jump = self.rng.choice([-3_600_000, -5000, 5000, 3_600_000])
        clock = self.sim.brokers[b].clock
        self.sim.fault(f"clock b{b} wall {jump:+d} ms",
                       lambda: setattr(clock, "wall_offset_ms", clock.wall_offset_ms + jump))
        self._later(f"clock b{b}", lambda: setattr(clock, "wall_offset_ms", clock.wall_offset_ms - jump))
        return True
