"""Eligible leader replicas (KIP-966) on real processes: a partition whose in-sync
replicas die one by one is led again from the ELR, and no acknowledged write is lost.

3 brokers, RF 3, min.insync.replicas 2, acks=all. Broker C is killed (ISR {A, B}),
then B stops answering (SIGSTOP: the ISR drops below min ISR, B becomes eligible),
then the leader A is killed (the ISR is empty; ELR {B, A}). When B answers again it
is elected from the ELR — it holds every acknowledged record, since nothing could
be acknowledged while the ISR was below min ISR. Before ELR, the ISR kept A as its
last member and the partition had no leader until A itself came back.
"""

import os
import shutil
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000"}
TOPIC = "elr"


def _partition(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]


def _leader_or_none(bootstrap):
    """The partition's leader as ``bootstrap`` sees it; None while it cannot answer (a broker
    just resumed from a pause may drop the first connection)."""
    try:
        return _partition(bootstrap).leader
    except KafkaException:
        return None


def _produce(bootstrap, values):
    """acks=all; returns the (offset, value) of every acknowledged record."""
    acked, errors = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 20_000, "linger.ms": 5})

    def delivered(err, msg):
        (errors if err else acked).append(err or (msg.offset(), msg.value()))
    for value in values:
        producer.produce(TOPIC, value, partition=0, on_delivery=delivered)
    producer.flush(30)
    assert not errors, errors
    return acked


def _read_all(bootstrap, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "elr-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.offset(), m.value()) for m in consumer.consume(1000, 0.5) if m.error() is None]
    consumer.close()
    return got


def _all_in_sync_with_200_records(cluster) -> list:
    """The topic on brokers [A, B, C] (min ISR 2), all in sync, 200 records acknowledged."""
    a, b, c = (broker.node_id for broker in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[a, b, c]],
                                  config={"min.insync.replicas": "2"})])[TOPIC].result(15)
    wait_until(lambda: sorted(_partition(cluster.bootstrap).isrs) == sorted([a, b, c]), 30, "all in sync")
    return _produce(cluster.bootstrap, [b"all-%d" % i for i in range(200)])


def test_a_partition_whose_isr_members_die_one_by_one_is_led_again_from_the_elr():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        a, b, c = (broker.node_id for broker in cluster.brokers)
        acked = _all_in_sync_with_200_records(cluster)

        cluster.kill(c)
        wait_until(lambda: sorted(_partition(cluster.bootstrap).isrs) == sorted([a, b]), 30, "C out of the ISR")
        acked += _produce(cluster.bootstrap, [b"two-%d" % i for i in range(200)])

        cluster.pause(b)                                       # B stops answering: below min ISR
        alive = f"127.0.0.1:{cluster.port(a)}"
        wait_until(lambda: _partition(alive).isrs == [a], 30, "B out of the ISR")
        cluster.kill(a)                                        # the last in-sync replica dies
        cluster.resume(b)
        bootstrap_b = f"127.0.0.1:{cluster.port(b)}"
        wait_until(lambda: _leader_or_none(bootstrap_b) == b, 30, "B elected from the ELR")
        assert _partition(bootstrap_b).isrs == [b]

        # ISR {B} is below min ISR: nothing is acknowledged until C catches up and joins.
        cluster.start_node(c)
        wait_until(lambda: sorted(_partition(bootstrap_b).isrs) == sorted([b, c]), 60, "C back in the ISR")
        acked += _produce(bootstrap_b, [b"after-%d" % i for i in range(50)])
        got = dict(_read_all(bootstrap_b, len(acked)))
        missing = [(offset, value) for offset, value in acked if got.get(offset) != value]
        assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:3]}"
        assert len(acked) == 450


def _all_killed_a_last(cluster) -> list:
    """200 records in sync; C killed, 200 more; B killed (ISR {A}, ELR {B}); A killed
    (ISR empty, ELR {A, B}, last known leader A). The acknowledged (offset, value)s."""
    a, b, c = (broker.node_id for broker in cluster.brokers)
    acked = _all_in_sync_with_200_records(cluster)
    cluster.kill(c)
    alive = f"127.0.0.1:{cluster.port(a)}"
    wait_until(lambda: sorted(_partition(alive).isrs) == sorted([a, b]), 30, "C out of the ISR")
    acked += _produce(alive, [b"two-%d" % i for i in range(200)])
    cluster.kill(b)
    wait_until(lambda: _partition(alive).isrs == [a], 30, "B out of the ISR")
    cluster.kill(a)
    return acked


def _c_back_and_every_record_read(cluster, bootstrap: str, acked: list) -> None:
    """C starts again; once all three are in sync, every acknowledged record is read back."""
    a, b, c = (broker.node_id for broker in cluster.brokers)
    cluster.start_node(c)
    wait_until(lambda: sorted(_partition(bootstrap).isrs) == sorted([a, b, c]), 60, "all back in sync")
    got = dict(_read_all(bootstrap, len(acked)))
    missing = [(offset, value) for offset, value in acked if got.get(offset) != value]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:3]}"
    assert len(acked) == 400


def test_when_every_eligible_replica_restarted_uncleanly_the_longest_log_leads():
    """KIP-966's unclean recovery. The ISR shrinks to the leader A (C killed, then B:
    ELR {B}); A is killed too (ISR empty, ELR {A, B}, last known leader A). Every one of
    them comes back from an unclean shutdown, so all leave the ELR, and A lost its copy
    of the partition meanwhile (its directory for it is gone: the power cut took the
    unflushed files). Kafka 4.4 elects the last known leader, A, and the other replicas
    truncate to its empty log; tidelog's controller knows from the heartbeats where
    each replica's log ends and elects B, which holds every acknowledged record."""
    with Cluster(brokers=3, overrides={**FAST, "tidelog.unclean.recovery.log.ends.enable": "true"}) as cluster:
        a, b, c = (broker.node_id for broker in cluster.brokers)
        acked = _all_killed_a_last(cluster)
        a_dir = os.path.join(cluster.directory, cluster.processes.layout.node(a).name, "data", f"{TOPIC}-0")
        assert os.path.isdir(a_dir)

        cluster.start_node(b)                                  # back uncleanly: up, eligible for nothing
        bootstrap_b = f"127.0.0.1:{cluster.port(b)}"
        wait_until(lambda: b in AdminClient({"bootstrap.servers": bootstrap_b}).list_topics(timeout=5).brokers,
                   30, "B registered and unfenced")
        wait_until(lambda: _leader_or_none(bootstrap_b) == -1, 30, "A fenced: no leader")
        time.sleep(1.5)                                        # a heartbeat or two: B's log end reported
        assert _leader_or_none(bootstrap_b) == -1              # B may not lead: it is in no ISR or ELR
        shutil.rmtree(a_dir)
        cluster.start_node(a)
        wait_until(lambda: _leader_or_none(bootstrap_b) not in (None, -1), 30, "a leader elected")
        assert _partition(bootstrap_b).leader == b, "the last known leader's empty log was elected"

        _c_back_and_every_record_read(cluster, bootstrap_b, acked)


def test_the_eligible_replica_that_comes_back_last_is_waited_for():
    """Simulator seed 6813, with real processes. As above, but the last known leader A,
    which lost its copy of the partition, comes back *first* (out of the ELR: ELR {B});
    B, which holds every acknowledged record, comes back last, and its own unclean
    registration empties the ELR. Kafka 4.4 — and tidelog before — elected A in that
    very write (A is up and said its log is empty; B had not said anything yet), and B
    truncated to A's empty log. B left the ELR for an unclean shutdown while nobody
    led, so it is a last known eligible replica: the election waits for its report."""
    with Cluster(brokers=3, overrides={**FAST, "tidelog.unclean.recovery.log.ends.enable": "true"}) as cluster:
        a, b, c = (broker.node_id for broker in cluster.brokers)
        acked = _all_killed_a_last(cluster)
        shutil.rmtree(os.path.join(cluster.directory, cluster.processes.layout.node(a).name, "data", f"{TOPIC}-0"))

        cluster.start_node(a)                                  # back uncleanly, empty: out of the ELR
        bootstrap_a = f"127.0.0.1:{cluster.port(a)}"
        wait_until(lambda: a in AdminClient({"bootstrap.servers": bootstrap_a}).list_topics(timeout=5).brokers,
                   30, "A registered and unfenced")
        time.sleep(1.5)                                        # a heartbeat or two: A's empty log reported
        assert _leader_or_none(bootstrap_a) == -1              # B is still eligible
        cluster.start_node(b)                                  # its registration empties the ELR
        wait_until(lambda: _leader_or_none(bootstrap_a) not in (None, -1), 30, "a leader elected")
        assert _partition(bootstrap_a).leader == b, "the last known leader's empty log was elected"

        _c_back_and_every_record_read(cluster, bootstrap_a, acked)
