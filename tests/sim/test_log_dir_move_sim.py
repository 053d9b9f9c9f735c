"""A replica moved between log directories on the simulator, with the checker's
invariants after every event: the leader of t0-0 (replicas 1, 2, 3, min ISR 2,
two log directories per broker) moves its replica to its other directory
(AlterReplicaLogDirs, ``BrokerNode.alter_replica_log_dirs``) while acks=all
writes go on, then back, and loses power before the first copy step. It restarts as a follower of the new leader,
finds the ``-future`` directory, resumes the copy — reconciling with a current log
that the new leader's writes keep extending — and swaps; no acknowledged record is
lost and every replica ends with the same records."""

import logging

from tidelog.core.errors import ErrorCode
from tidelog.sim.scenarios import TP, Script, _config
from tidelog.sim.simulation import Simulation
from tidelog.storage.log_manager import LogManager


def test_a_move_interrupted_by_a_power_cut_resumes_and_the_logs_converge(tmp_path, monkeypatch):
    # Copy steps of one batch (the simulator's brokers copy replica.fetch.max.bytes, 1 MiB,
    # which would move this log in one step): the move takes many ticks, writes between.
    copy = LogManager.copy_to_future_logs
    monkeypatch.setattr(LogManager, "copy_to_future_logs", lambda self, chunk_bytes: copy(self, 1))
    config = _config(3, (1, 2, 3), 2, False, log_dirs_per_broker=2)
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sim = Simulation(config, str(tmp_path))
    try:
        sim.setup()
        s = Script(sim)
        old = s.leader()
        committed = s.write(20, acks=-1)
        broker = sim.brokers[old]
        manager = broker.node.log_manager
        # First the leader's replica moves while acks=all writes go on.
        first = manager.log_dir_of(TP)
        other = next(d for d in broker.log_dirs if d != first)
        assert broker.node.alter_replica_log_dirs({TP: other}) == {TP: ErrorCode.NONE}
        steps = 0
        while manager.log_dir_of(TP) == first:
            committed += s.write(1, acks=-1)
            steps += 1
        assert steps > 1
        assert s.leader() == old and manager.future_log(TP) is None
        assert [v for v in committed if v.encode() not in s.values(old)] == []
        # Then back, and the power goes before the first copy step.
        source, target = other, first
        assert broker.node.alter_replica_log_dirs({TP: target}) == {TP: ErrorCode.NONE}
        assert manager.future_log(TP) is not None
        sim.power_cut(old)
        s.wait(lambda: s.leader() not in (old, -1), "a new leader")
        committed += s.write(20, acks=-1)
        sim.start(old)
        resumed = sim.brokers[old].node.log_manager.future_log(TP)       # found at load
        assert resumed is not None and resumed.log_dir == target
        s.wait(lambda: s.running(old), "the old leader runs again", 30_000)
        s.wait(lambda: sim.brokers[old].node.log_manager.log_dir_of(TP) == target
               and sim.brokers[old].node.log_manager.future_log(TP) is None, "the move to finish", 30_000)
        committed += s.write(10, acks=-1)
        s.converge([1, 2, 3])
        logs = [s.values(b) for b in (1, 2, 3)]
        assert logs[0] == logs[1] == logs[2]
        assert [v for v in committed if v.encode() not in logs[0]] == []
        assert sim.brokers[old].node.replica_manager.get_partition(TP).log.directory.startswith(target)
    finally:
        sim.close()
        quiet.setLevel(level)
