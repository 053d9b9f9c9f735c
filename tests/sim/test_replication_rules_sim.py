"""Replication rules end to end on the simulator, over the production ``BrokerNode``:
a broker in controlled shutdown stops fetching the partitions whose ISR it left, and
a failure in one partition of a follower's fetch answer fails only that partition.

Each test scripts one ``Simulation`` (no nemesis) with the scenario helpers
(``tidelog.sim.scenarios.Script``); the checker runs after every event, so the
simulator's invariants hold along the way too."""

from __future__ import annotations

import logging

from tidelog.broker.lifecycle import BrokerState
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.replication.fetcher import FetchRequestPlan
from tidelog.sim.config import SimConfig, TopicSpec
from tidelog.sim.scenarios import Script
from tidelog.sim.simulation import Simulation


def _config(brokers: int, assignments: tuple[tuple[int, ...], ...]) -> SimConfig:
    topic = TopicSpec("t0", len(assignments), len(assignments[0]), 1, False, 1, 1 << 20, None, assignments)
    return SimConfig(seed=0, brokers=brokers, topics=(topic,), clients=(), session_timeout_ms=3000,
                     heartbeat_interval_ms=500, replica_lag_time_max_ms=2000, replica_fetch_wait_max_ms=200,
                     replica_fetch_backoff_ms=200, request_timeout_ms=1000, hw_checkpoint_interval_ms=5000,
                     net_delay_ms=1, net_jitter_ms=0, fault_kinds=())


def _run(tmp_path, config: SimConfig, script) -> None:
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sim = Simulation(config, str(tmp_path))
    try:
        sim.setup()
        script(Script(sim))
    finally:
        sim.close()
        quiet.setLevel(level)


T0, T1 = TopicPartition("t0", 0), TopicPartition("t0", 1)


def test_a_broker_in_controlled_shutdown_stops_fetching_partitions_whose_isr_it_left(tmp_path):
    """Broker 3 follows t0-0 (leader 1) and leads t0-1. On SIGTERM the controller takes
    it out of both ISRs and moves t0-1 to broker 1 (a new leader epoch). From the
    moment broker 3 learns each new state it has no fetch state for the partition and
    sends no Fetch naming it — t0-0 is not kept, t0-1 is not started — until it stops."""
    def script(s: Script) -> None:
        shutting = 3
        broker = s.sim.brokers[shutting]
        assert (s.leader(T0), s.leader(T1)) == (1, 3)
        learned: dict[TopicPartition, tuple[int, object]] = {}     # tp -> (position in sent, fetch state)

        def watch() -> None:
            if not broker.up or broker.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
                return
            for tp in (T0, T1):
                registration = broker.image.partition(tp)
                if tp not in learned and shutting not in registration.isr:
                    learned[tp] = (s.mark(), broker.replica_manager.fetcher_manager.fetch_state(tp))

        s.watch(watch)
        before = s.wait_request(FetchRequestPlan, f"b{shutting}", "b1", "broker 3 fetching t0-0", after=0)
        assert T0 in before.message.body.partitions        # the check below is not vacuous
        s.sim.stop(shutting)
        s.wait(lambda: not broker.up, "broker 3 stopped after its controlled shutdown")
        assert set(learned) == {T0, T1}, f"broker 3 stopped before learning both ISR changes: {learned}"
        assert s.leader(T1) == 1 and shutting not in s.isr(T0) and shutting not in s.isr(T1)
        assert {tp: state for tp, (_, state) in learned.items()} == {T0: None, T1: None}
        for tp, (position, _) in learned.items():
            later = [r for r in s.requests(FetchRequestPlan, f"b{shutting}", None, position)
                     if tp in r.message.body.partitions]
            assert later == [], f"broker 3 fetched {tp} after it left its ISR"

    _run(tmp_path, _config(3, ((1, 2, 3), (3, 1, 2))), script)


def test_a_failure_appending_one_partition_fails_only_that_partition_and_the_broker_runs_on(tmp_path):
    """Broker 2 follows t0-0 and t0-1 from broker 1 in one fetcher. Its append of
    t0-1 raises an unexpected error: t0-1 goes to the fetcher's failed partitions,
    t0-0 keeps replicating in the same answers, and the broker keeps running."""
    def script(s: Script) -> None:
        follower = 2
        assert (s.leader(T0), s.leader(T1)) == (1, 1)
        fetcher_manager = s.sim.brokers[follower].replica_manager.fetcher_manager
        assert fetcher_manager.fetcher_of(T0) is fetcher_manager.fetcher_of(T1)
        partition = s.partition(follower, T1)
        calls = []

        def broken(records):
            calls.append(len(records))
            raise RuntimeError("a bug in the append path")

        partition.append_records_as_follower = broken
        for tp in (T0, T1):
            assert s.produce(["a"], acks=1, broker=1, tp=tp)["error_code"] == ErrorCode.NONE
        s.wait(lambda: s.failed_partitions().get(follower) == {T1}, "t0-1 failed on broker 2")
        s.wait(lambda: s.leo(follower, T0) == 1, "t0-0 replicated to broker 2")
        assert s.produce(["b"], acks=1, broker=1, tp=T0)["error_code"] == ErrorCode.NONE
        s.wait(lambda: s.leo(follower, T0) == 2, "t0-0 goes on replicating")
        s.sim.run_for(2000)
        assert s.running(follower) and s.failed_partitions() == {follower: {T1}}
        assert s.leo(follower, T1) == 0 and len(calls) == 1       # not retried: failed until new metadata
        assert fetcher_manager.fetch_state(T1) is None and fetcher_manager.fetch_state(T0) is not None

    _run(tmp_path, _config(2, ((1, 2), (1, 2))), script)
