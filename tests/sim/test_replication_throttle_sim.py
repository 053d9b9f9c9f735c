"""A replication throttle on the simulator (the same BrokerNode, Fetch handler and
fetcher as the asyncio server; docs/reassignment.md): t0-0 on brokers 1 and 2 gets a
third replica under a leader throttle set through the controller. The leader answers
the new replica's fetches without records while over its rate, acks=1 writes go on, the
replica catches up and joins the ISR, and every replica ends with the same records; the
checker's invariants hold after every event."""

import logging

from tidelog.controller.messages import AlterConfigsResource
from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import ConfigResourceType
from tidelog.sim.scenarios import TP, Script, _config
from tidelog.sim.simulation import Simulation


def test_a_throttled_new_replica_is_held_back_then_catches_up(tmp_path):
    quiet = logging.getLogger("tidelog")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    sim = Simulation(_config(3, (1, 2), 1, False, flush_messages=1000), str(tmp_path))
    try:
        sim.setup()
        s = Script(sim)
        # About 2.4 MB: more than one fetch's replica.fetch.max.bytes (1 MiB), so the copy takes several.
        for batch in range(6):
            answer = s.produce([f"b{batch}-{i}-" + "x" * 4000 for i in range(100)], acks=-1)
            assert answer["error_code"] == 0, answer
        committed = s.write(5, acks=-1)
        leader = s.leader()
        results = sim.active_controller().alter_configs([
            AlterConfigsResource(int(ConfigResourceType.BROKER), "", {"leader.replication.throttled.rate": "200000"}),
            AlterConfigsResource(int(ConfigResourceType.TOPIC), "t0",
                                 {"leader.replication.throttled.replicas": "*"})])
        assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
        quota = sim.brokers[leader].node.replication_quotas.leader
        s.wait(lambda: quota.rate_bytes_per_second == 200_000 and quota.throttled_partitions, "the throttle published")
        assert sim.active_controller().reassign("t0", 0, (1, 2, 3)) == ErrorCode.NONE
        s.wait(lambda: quota.throttled_total > 0, "the leader to hold the new replica back", 60_000)
        assert 3 not in s.isr()
        committed += s.write(20, acks=1)                    # clients go on meanwhile
        s.wait(lambda: 3 in s.isr(), "the new replica to catch up and join the ISR", 600_000)
        s.converge([1, 2, 3])
        logs = [s.values(b) for b in (1, 2, 3)]
        assert logs[0] == logs[1] == logs[2]
        assert [v for v in committed if v.encode() not in logs[0]] == []
    finally:
        sim.close()
        quiet.setLevel(level)
