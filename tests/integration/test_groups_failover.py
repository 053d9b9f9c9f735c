"""Coordinator failover on a real 3-broker cluster: kill -9 the broker that
coordinates a group while its consumer commits. The group moves to the new
leader of its ``__consumer_offsets`` partition, no acknowledged commit is lost,
and consumption resumes without skipping a record."""

import threading
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

SETTINGS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
            "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",
            "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
            "replica.lag.time.max.ms": "3000"}
PARTITIONS, RECORDS, GROUP = 4, 4000, "failover"


def produce(bootstrap, topic, start, count):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def coordinator_of(bootstrap, group) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).coordinator.id


_COORDINATOR_MOVING = {confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE, confluent_kafka.KafkaError.NOT_COORDINATOR}


def moved_coordinator(bootstrap, group, old: int) -> bool:
    """Whether another broker than ``old`` now serves ``group``. While the new one loads
    the group's partition it answers COORDINATOR_LOAD_IN_PROGRESS (Kafka's retriable
    error, what a client retries on): not yet."""
    try:
        return coordinator_of(bootstrap, group) != old
    except confluent_kafka.KafkaException as e:
        if e.args[0].code() in _COORDINATOR_MOVING:
            return False
        raise


def test_kill_the_coordinator_while_committing():
    with Cluster(brokers=3, overrides=SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("orders", PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
            "orders"].result(30)
        produce(cluster.bootstrap, "orders", 0, RECORDS)
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000, "max.partition.fetch.bytes": 1024})
        consumer.subscribe(["orders"])
        seen: set = set()
        acknowledged: dict[int, int] = {}            # partition → the last commit the coordinator acknowledged
        failed_commits = 0
        coordinator = coordinator_of(cluster.bootstrap, GROUP)
        killed = threading.Event()

        def killer():
            wait_until(lambda: len(seen) >= RECORDS // 4, 60, "a quarter of the records consumed")
            cluster.kill(coordinator)                # SIGKILL, in the middle of the commit stream
            killed.set()
        threading.Thread(target=killer, daemon=True).start()

        def consume(until, commit):
            nonlocal failed_commits
            deadline = time.monotonic() + 120
            while not until() and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is None or message.error():
                    continue
                seen.add((message.partition(), message.offset()))
                if not commit():
                    continue
                offsets = [confluent_kafka.TopicPartition("orders", message.partition(), message.offset() + 1)]
                try:
                    for tp in consumer.commit(offsets=offsets, asynchronous=False):
                        if tp.error is None:
                            acknowledged[tp.partition] = tp.offset
                except confluent_kafka.KafkaException:
                    failed_commits += 1              # not acknowledged: no promise was made
        # Commit after every record until the coordinator is killed; then stop committing,
        # so what the new coordinator holds can only come from the old one's log.
        consume(killed.is_set, lambda: not killed.is_set())
        assert killed.is_set()
        wait_until(lambda: moved_coordinator(cluster.bootstrap, GROUP, coordinator), 30, "a new coordinator")
        checker = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
        committed = {tp.partition: tp.offset for tp in checker.committed(
            [confluent_kafka.TopicPartition("orders", p) for p in range(PARTITIONS)], timeout=30)}
        for partition, offset in acknowledged.items():
            assert committed[partition] >= offset, (
                f"partition {partition}: acknowledged commit {offset}, committed now {committed[partition]}")
        # The same consumer carries on through the new coordinator: nothing skipped.
        consume(lambda: len(seen) == RECORDS, lambda: True)
        assert len(seen) == RECORDS, f"consumed {len(seen)} of {RECORDS} records"
        consumer.close()
        committed = {tp.partition: tp.offset for tp in checker.committed(
            [confluent_kafka.TopicPartition("orders", p) for p in range(PARTITIONS)], timeout=30)}
        checker.close()
        assert committed == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        # A consumer in the group resumes from there and skips nothing new.
        produce(cluster.bootstrap, "orders", RECORDS, 400)
        resumed = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
        resumed.subscribe(["orders"])
        first: dict[int, int] = {}
        values = set()
        deadline = time.monotonic() + 60
        while len({v for v in values if v >= RECORDS}) < 400 and time.monotonic() < deadline:
            message = resumed.poll(0.5)
            if message is None or message.error():
                continue
            first.setdefault(message.partition(), message.offset())
            values.add(int(message.value()))
        resumed.close()
        assert len({v for v in values if v >= RECORDS}) == 400
        for partition, offset in first.items():
            assert offset == committed[partition], "the resumed consumer did not start at the committed offset"
        print(f"killed coordinator {coordinator}; {failed_commits} commits failed during the failover")


def test_a_kip848_group_goes_on_through_a_coordinator_kill_without_reading_again():
    """KIP-848 (``group.protocol=consumer``, librdkafka): the group's state is in
    ``__consumer_offsets`` (epochs, subscriptions, assignments), so when its coordinator is
    killed the new one knows the members: they keep their partitions and positions. Each
    member reads on past records it read but did not commit — none is read twice, none is
    lost, no partition is lost or revoked (as on Kafka 4; a coordinator that forgot the
    members would fence them, and they would read again from the committed offsets)."""
    group, topic = "kip848-failover", "events"
    with Cluster(brokers=3, overrides={**SETTINGS, "group.consumer.heartbeat.interval.ms": "500",
                                       "group.consumer.min.heartbeat.interval.ms": "500",
                                       "group.consumer.session.timeout.ms": "20000",
                                       "group.consumer.min.session.timeout.ms": "6000"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
        produce_values(cluster.bootstrap, topic, 0, 400)
        lost, revoked, reads = [], [], []
        members = [confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}) for _ in range(2)]
        for member in members:
            member.subscribe([topic], on_lost=lambda c, ps: lost.extend(ps),
                             on_revoke=lambda c, ps: revoked.extend(ps))

        def poll_until(done, what):
            deadline = time.monotonic() + 60
            while not done() and time.monotonic() < deadline:
                for member in members:
                    message = member.poll(0.1)
                    if message is not None and not message.error():
                        reads.append(int(message.value()))
            assert done(), f"{what}: read {len(set(reads))} distinct of {len(reads)}"

        poll_until(lambda: len(set(reads)) == 400 and all(m.assignment() for m in members), "the first 400")
        for member in members:
            member.commit(asynchronous=False)
        produce_values(cluster.bootstrap, topic, 400, 200)                 # read, then not committed
        poll_until(lambda: len(set(reads)) == 600, "200 more")
        assignments = [sorted(tp.partition for tp in m.assignment()) for m in members]
        revoked_before = len(revoked)
        coordinator = coordinator_of(cluster.bootstrap, group)
        cluster.kill(coordinator)
        wait_until(lambda: moved_coordinator(cluster.bootstrap, group, coordinator), 30, "a new coordinator")
        produce_values(cluster.bootstrap, topic, 600, 200)
        poll_until(lambda: len(set(reads)) == 800, "200 after the kill")
        time.sleep(2)                                       # heartbeats to the new coordinator
        poll_until(lambda: True, "")
        # (The first 400 may be read twice while the two members first share the partitions,
        # before anything is committed: KIP-848 moves a partition before its first commit.)
        assert sorted(set(reads)) == list(range(800)), "a record missed"
        assert sorted(v for v in reads if v >= 400) == list(range(400, 800)), "a record read twice"
        assert lost == [] and len(revoked) == revoked_before, (lost, revoked)
        assert [sorted(tp.partition for tp in m.assignment()) for m in members] == assignments
        for member in members:
            member.close()


def produce_values(bootstrap, topic, start, count):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0
