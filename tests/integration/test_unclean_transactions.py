"""Unclean elections and transactions on real processes (issue 28 item 3;
docs/transactions.md, "Unclean elections").

A transaction's record reaches both replicas of ``dirty-0``; the follower dies and
leaves the ISR; the producer aborts (the ABORT marker reaches the leader only); the
leader dies and the stale follower comes back and is elected uncleanly, without
the marker. Before the fix its last stable offset stayed at the aborted record for
good — a read_committed consumer read nothing more — and the same producer's next
transaction joined the one left open there, so its COMMIT would expose the aborted
record. Now the new leader aborts what its log left open before it serves.
"""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000", "unclean.leader.election.enable": "true"}


def _read_committed(bootstrap: str, expected: int, timeout_s: float = 40.0) -> list[bytes]:
    """read_committed from offset 0 until ``expected`` records arrived (then 2 s more
    for anything that should not be there), or the time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("dirty", 0, 0)])
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


def _transaction_state(bootstrap: str) -> str:
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "transactions", "-b", bootstrap, "describe",
                          "--transactional-id", "dirty-tx"], capture_output=True, text=True, timeout=60).stdout
    return out


def _transaction(bootstrap: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dirty-tx"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("dirty", value, partition=0)
    producer.commit_transaction(60)


def test_an_uncleanly_elected_leader_aborts_the_transaction_it_lacks_the_marker_of():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("dirty", num_partitions=1, replica_assignment=[[1, 2]])])["dirty"].result(15)

        def partition():
            return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(
                "dirty", timeout=10).topics["dirty"].partitions[0]
        wait_until(lambda: sorted(partition().isrs) == [1, 2] and partition().leader == 1, 30,
                   "both replicas in sync, 1 leading")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "dirty-tx"})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce("dirty", b"t1-aborted", partition=0)
        producer.flush(30)                          # acks=all: on both replicas
        cluster.kill(2)
        wait_until(lambda: partition().isrs == [1], 30, "the follower out of the ISR")
        producer.abort_transaction(60)              # the ABORT marker reaches broker 1 only
        # Its markers written (CompleteAbort), the coordinator will not send them again.
        wait_until(lambda: "CompleteAbort" in _transaction_state(cluster.bootstrap), 30, "the abort complete")
        cluster.kill(1)
        cluster.start_node(2)
        wait_until(lambda: partition().leader == 2, 60, "the stale replica elected")
        bootstrap = f"127.0.0.1:{cluster.port(2)}"

        plain = Producer({"bootstrap.servers": bootstrap})
        plain.produce("dirty", b"after", partition=0)
        assert plain.flush(30) == 0
        # Broker 2 holds the transaction it never got the marker of *in doubt* (it cannot
        # tell a lost ABORT from a COMMIT its coordinator is still sending: docs/
        # transactions.md, "Unclean elections"). The same producer, still at its epoch,
        # tries its next transaction there: refused, so its records cannot join the
        # aborted ones.
        try:
            producer.begin_transaction()
            producer.produce("dirty", b"t2-fenced", partition=0)
            producer.commit_transaction(30)
            fenced = False
        except KafkaException:
            fenced = True
        assert fenced
        # A new instance: a newer epoch proves the coordinator finished the old
        # transaction, so broker 2 aborts it, then takes the new one. The LSO moves past
        # the aborted records, which read_committed never shows.
        _transaction(bootstrap, b"t3-committed")
        assert _read_committed(bootstrap, expected=2) == [b"after", b"t3-committed"]
