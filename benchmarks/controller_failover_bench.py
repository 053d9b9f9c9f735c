"""Controller failover: from kill -9 of the active controller to the next topic created.

A real cluster (3 controller processes in a Raft quorum, 3 brokers). Each round
creates a topic with nothing failing (the reference, same run), then kills the
active controller and creates topics until one succeeds, timing from the kill;
then restarts the killed controller and waits for it to catch up. Prints each
round, the medians, and the ratio to the target (election timeout + 1 s).

    python benchmarks/controller_failover_bench.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.controller_channel import RemoteController
from tidelog.testing import Cluster, wait_until

ELECTION_TIMEOUT_MS = 1000      # controller.quorum.election.timeout.ms (Kafka's default)
FETCH_TIMEOUT_MS = 2000         # controller.quorum.fetch.timeout.ms (Kafka's default)


def quorum(cluster):
    layout = cluster.processes.layout
    voters = [(c.node_id, layout.host, c.port) for c in layout.controllers if c.alive()]

    async def go():
        channel = RemoteController(voters, "failover-bench")
        try:
            answer = await channel.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, timeout_s=5)
        finally:
            channel.close()
        p = answer.topics[0].partitions[0]
        if int(p.error_code.value) != 0:
            return None
        return int(p.leader_id), {int(v.replica_id): int(v.log_end_offset) for v in p.current_voters}
    return asyncio.run(go())


def create_until_done(admin, name) -> float:
    started = time.monotonic()
    while True:
        try:
            admin.create_topics([NewTopic(name, 3, 3)], operation_timeout=10, request_timeout=15)[name].result()
            return time.monotonic() - started
        except Exception:
            time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    overrides = {"controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS),
                 "controller.quorum.fetch.timeout.ms": str(FETCH_TIMEOUT_MS)}
    baseline, failover = [], []
    with Cluster(brokers=3, controllers=3, overrides=overrides) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for round_ in range(args.rounds):
            baseline.append(create_until_done(admin, f"baseline-{round_}"))
            leader = quorum(cluster)[0]
            killed_at = time.monotonic()
            cluster.kill(leader)
            created = create_until_done(admin, f"failover-{round_}")
            took = time.monotonic() - killed_at
            failover.append(took)
            new_leader = quorum(cluster)[0]
            print(f"round {round_ + 1}: killed controller {leader}, controller {new_leader} active; "
                  f"topic created {took:.3f} s after the kill (the create call itself {created:.3f} s); "
                  f"with nothing failing {baseline[-1]:.3f} s", flush=True)
            cluster.start_node(leader)
            wait_until(lambda: (q := quorum(cluster)) is not None and len(set(q[1].values())) == 1, 30,
                       "the restarted controller caught up")
    target = ELECTION_TIMEOUT_MS / 1000 + 1
    median = statistics.median(failover)
    print(f"kill -9 of the active controller -> next topic created: median {median:.3f} s, "
          f"max {max(failover):.3f} s over {len(failover)} rounds")
    print(f"reference (same run, nothing failing): median {statistics.median(baseline):.3f} s")
    print(f"target < election timeout + 1 s = {target:.1f} s: median/target = {median / target:.2f} "
          f"({'met' if max(failover) < target else 'NOT met'} in every round: max {max(failover):.3f} s)")


if __name__ == "__main__":
    main()
