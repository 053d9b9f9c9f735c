"""Unclean elections and transactions on real processes (issue 28; docs/transactions.md,
"Unclean elections").

Two transactions' records reach both replicas of their partitions (``dirty-0`` and
``dirty-1``, on brokers 1 and 2); the follower dies and leaves the ISRs; one producer
aborts, the other commits — each marker reaches broker 1 only, and the coordinator
completes both. Broker 1 dies; the stale broker 2 comes back and is elected uncleanly
(RECOVERING), without the markers, and holds both transactions in doubt. Neither
producer comes back: broker 2 asks the coordinators (ListTransactions filtered by the
producer id, DescribeTransactions at the id's coordinator) and writes the marker each
answer says. A read_committed consumer reads the committed record and never the
aborted one, and does not hang: both last stable offsets move past the transactions
(before this, they stayed there until the producer returned at a newer epoch).
"""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000", "unclean.leader.election.enable": "true"}


def _read_committed(bootstrap: str, partition: int, expected: int, timeout_s: float = 40.0) -> list[bytes]:
    """read_committed from offset 0 of ``dirty-<partition>`` until ``expected`` records
    arrived (then 2 s more for anything that should not be there), or the time is up:
    a consumer held behind a transaction nobody settles reads nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("dirty", partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settled = None
    while time.monotonic() < (deadline if settled is None else min(deadline, settled)):
        for message in consumer.consume(100, 0.3):
            if message.error() is None:
                values.append(message.value())
        if settled is None and len(values) >= expected:
            settled = time.monotonic() + 2.0
    consumer.close()
    return values


def _transaction_state(bootstrap: str, transactional_id: str) -> str:
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "transactions", "-b", bootstrap, "describe",
                          "--transactional-id", transactional_id], capture_output=True, text=True, timeout=60).stdout
    return out


def _begin(bootstrap: str, transactional_id: str, value: bytes, partition: int) -> Producer:
    """A transaction with one record on ``dirty-<partition>``, left open (acks=all: on both replicas)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("dirty", value, partition=partition)
    producer.flush(30)
    return producer


def test_an_uncleanly_elected_leader_settles_its_transactions_in_doubt_with_their_coordinator():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("dirty", num_partitions=2, replica_assignment=[[1, 2], [1, 2]])]
                            )["dirty"].result(15)

        def partitions():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "dirty", timeout=10).topics["dirty"].partitions
        wait_until(lambda: all(sorted(p.isrs) == [1, 2] and p.leader == 1 for p in partitions().values()), 30,
                   "both replicas in sync, 1 leading")
        aborting = _begin(cluster.bootstrap, "dirty-abort", b"t1-aborted", 0)
        committing = _begin(cluster.bootstrap, "dirty-commit", b"t1-committed", 1)
        cluster.kill(2)
        wait_until(lambda: all(p.isrs == [1] for p in partitions().values()), 30, "the follower out of the ISRs")
        aborting.abort_transaction(60)              # the ABORT marker reaches broker 1 only
        committing.commit_transaction(60)           # the COMMIT marker too
        # Their markers written, the coordinator will not send them again.
        wait_until(lambda: "CompleteAbort" in _transaction_state(cluster.bootstrap, "dirty-abort")
                   and "CompleteCommit" in _transaction_state(cluster.bootstrap, "dirty-commit"), 30,
                   "both transactions complete")
        cluster.kill(1)
        cluster.start_node(2)
        wait_until(lambda: all(p.leader == 2 for p in partitions().values()), 60, "the stale replica elected")
        bootstrap = f"127.0.0.1:{cluster.port(2)}"

        plain = Producer({"bootstrap.servers": bootstrap})
        plain.produce("dirty", b"after-0", partition=0)
        plain.produce("dirty", b"after-1", partition=1)
        assert plain.flush(30) == 0
        # Neither producer comes back; broker 2 asked the coordinators and wrote the
        # markers they decided: read_committed reads past both transactions.
        assert _read_committed(bootstrap, 0, expected=1) == [b"after-0"]
        assert _read_committed(bootstrap, 1, expected=2) == [b"t1-committed", b"after-1"]
        # The aborting producer, still at its epoch, runs its next transaction there: the
        # ABORT closed the old one, so the new one does not join it.
        aborting.begin_transaction()
        aborting.produce("dirty", b"t2-committed", partition=0)
        aborting.commit_transaction(30)
        assert _read_committed(bootstrap, 0, expected=2) == [b"after-0", b"t2-committed"]
