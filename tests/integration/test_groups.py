"""Consumer groups with real clients against a real ``tidelog serve`` process.

Each client library runs its own group consumers, unchanged: three members
share six partitions with no overlap; when one leaves, the others take its
partitions; commits (manual and automatic) survive a consumer's restart;
``close()`` returns; a static member comes back without a rebalance; kcat -G.
"""

import asyncio
import os
import shutil
import subprocess
import threading
import time
import uuid

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker, Cluster, wait_until

PARTITIONS = 6
RECORDS = 600
SETTINGS = {"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000", "group.consumer.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides=SETTINGS) as running:
        yield running


@pytest.fixture(scope="module")
def three_brokers():
    """A controller and three brokers: __consumer_offsets and the topics have RF 3."""
    with Cluster(brokers=3, overrides={**SETTINGS, "broker.session.timeout.ms": "3000",
                                       "broker.heartbeat.interval.ms": "500"}) as running:
        yield running


@pytest.fixture(params=["one node", "three brokers"])
def any_cluster(request):
    return request.getfixturevalue("broker" if request.param == "one node" else "three_brokers")


def new_topic(broker, records=RECORDS, partitions=PARTITIONS) -> str:
    name = f"groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    replicas = 3 if isinstance(broker, Cluster) else 1
    admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(name, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0
    if isinstance(broker, Cluster):
        # Every broker knows the topic before a member asks any of them: kafka-python asks
        # one broker, and a broker whose metadata lags answers UNKNOWN_TOPIC_OR_PARTITION
        # (Kafka's too); kafka-python then assigns nothing and asks again only after
        # metadata.max.age.ms (5 minutes). Seen once in a loaded make test.
        for node in broker.brokers:
            port = broker.port(node.node_id)
            wait_until(lambda: asyncio.run(_knows(port, name, partitions)), 30,
                       f"broker {node.node_id} to know {name}")
    return name


async def _knows(port: int, topic: str, partitions: int) -> bool:
    """Whether the broker on ``port`` itself answers Metadata for ``topic`` with a leader
    for every partition."""
    connection = await KafkaConnection.connect("127.0.0.1", port)
    try:
        response = await connection.request(ApiKey.METADATA, {
            "topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}, version=12)
    finally:
        connection.close()
    (found,) = response.topics
    return (found.error_code.value == 0 and len(found.partitions) == partitions
            and all(p.leader_id >= 0 for p in found.partitions))


def coordinator_lines(broker, group: str) -> str:
    """The brokers' log lines that name ``group`` (what a failing wait prints)."""
    if isinstance(broker, Cluster):
        lines = []
        for node in broker.brokers:
            path = os.path.join(broker.processes._node_dir(node), "server.log")
            with open(path, errors="replace") as log:
                lines += [f"[{node.node_id}] {line.rstrip()}" for line in log if group in line]
    else:
        lines = [line for line in broker.output if group in line]
    return "\n".join(lines[-60:])


def disjoint_and_complete(assignments: list[set]) -> bool:
    everything = [p for a in assignments for p in a]
    return len(everything) == len(set(everything)) == PARTITIONS


# ------------------------------------------------------------ the members, per client

class ThreadMember(threading.Thread):
    """A client's consumer polled in a thread until ``stop``; then ``close()`` is timed."""

    def __init__(self):
        super().__init__(daemon=True)
        self.assignment: set = set()
        self.seen: set = set()
        self.stop = threading.Event()
        self.close_s = None

    def run(self):
        while not self.stop.is_set():
            self.poll()
            self.assignment = {tp.partition for tp in self.consumer.assignment()}
        started = time.monotonic()
        self.consumer.close()
        self.close_s = time.monotonic() - started


class ConfluentMember(ThreadMember):
    def __init__(self, broker, topic, group, **extra):
        super().__init__()
        timeouts = {} if extra.get("group.protocol") == "consumer" else {   # the coordinator's, in KIP-848
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            **timeouts, **extra})
        self.consumer.subscribe([topic])

    def poll(self):
        message = self.consumer.poll(0.2)
        if message is not None and not message.error():
            self.seen.add((message.partition(), message.offset()))


class KafkaPythonMember(ThreadMember):
    def __init__(self, broker, topic, group):
        super().__init__()
        import kafka
        # kafka-python 3.0.12 has a client-side race that leaves a member joined but silent:
        # when it rejoins because its metadata snapshot changed (not because the coordinator
        # asked) and poll()'s timeout ends while that JoinGroup/SyncGroup is completing, the
        # next poll() sees nothing to rejoin for and never runs the join's completion — its
        # heartbeats stay disabled, the coordinator expires it after session.timeout.ms, and
        # it keeps its old assignment for ever (kafka-python DEBUG log, 2026-11-29: "poll:
        # timeout during coordinator.poll()" right after its SyncGroup answer, then
        # "need_rejoin: False" and no "Enabling heartbeat"). Its first join happens before its
        # metadata snapshot names the topic, so that rejoin came on every start; here the
        # member joins only once the snapshot holds the topic's partitions, and no metadata
        # change follows. Also: metadata_max_age_ms, so a leader that did assign with no
        # partition metadata ("No partition metadata for topic") asks again within 2 s, not 5
        # minutes.
        self.consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=500, metadata_max_age_ms=2000)
        wait_until(lambda: self.consumer.partitions_for_topic(topic), 30, f"kafka-python to know {topic}")
        self.consumer.subscribe([topic])
        coordinator = self.consumer._coordinator          # private; kafka-python is pinned
        wait_until(lambda: len(coordinator._metadata_snapshot.get(topic, ())) == PARTITIONS, 30,
                   f"kafka-python's group metadata to hold {topic}")

    def poll(self):
        for tp, messages in self.consumer.poll(200).items():
            self.seen.update((tp.partition, m.offset) for m in messages)


class AiokafkaMember(threading.Thread):
    """An aiokafka consumer in its own thread and event loop."""

    def __init__(self, broker, topic, group):
        super().__init__(daemon=True)
        self.args = (broker.bootstrap, topic, group)
        self.assignment: set = set()
        self.seen: set = set()
        self.stop = threading.Event()
        self.close_s = None
        self.start()

    def run(self):
        asyncio.run(self._main())

    async def _main(self):
        import aiokafka
        bootstrap, topic, group = self.args
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                             auto_offset_reset="earliest", session_timeout_ms=6000,
                                             heartbeat_interval_ms=500)
        await consumer.start()
        while not self.stop.is_set():
            for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                self.seen.update((tp.partition, m.offset) for m in messages)
            self.assignment = {tp.partition for tp in consumer.assignment()}
        started = time.monotonic()
        await consumer.stop()
        self.close_s = time.monotonic() - started


def make_member(kind, broker, topic, group):
    if kind == "confluent-kafka":
        member = ConfluentMember(broker, topic, group)
    elif kind == "confluent-kafka, KIP-848":
        member = ConfluentMember(broker, topic, group, **{"group.protocol": "consumer"})
    elif kind == "kafka-python":
        member = KafkaPythonMember(broker, topic, group)
    else:
        return AiokafkaMember(broker, topic, group)
    member.start()
    return member


@pytest.mark.parametrize("kind", ["confluent-kafka", "confluent-kafka, KIP-848", "kafka-python", "aiokafka"])
def test_three_members_share_six_partitions_then_two_take_over(any_cluster, kind):
    broker = any_cluster
    topic = new_topic(broker)
    group = f"{kind}-{uuid.uuid4().hex[:6]}"
    members = [make_member(kind, broker, topic, group) for _ in range(3)]
    try:
        try:
            wait_until(lambda: all(len(m.assignment) == 2 for m in members)
                       and disjoint_and_complete([m.assignment for m in members]), 60,
                       "three members with two partitions each")
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}; assignments {[sorted(m.assignment) for m in members]}; "
                                 f"the coordinator said:\n{coordinator_lines(broker, group)}") from None
        members[0].stop.set()
        members[0].join(30)
        assert members[0].close_s is not None and members[0].close_s < 10, "close() did not return promptly"
        wait_until(lambda: disjoint_and_complete([m.assignment for m in members[1:]]), 30,
                   "the two remaining members own all six partitions")
        wait_until(lambda: len(set().union(*(m.seen for m in members))) == RECORDS, 30,
                   "every record consumed")
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(30)
    assert all(m.close_s is not None for m in members)


def test_a_restarted_consumer_resumes_from_its_committed_offset(broker):
    topic = new_topic(broker, records=200, partitions=1)
    config = {"bootstrap.servers": broker.bootstrap, "group.id": "resume", "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    consumer = confluent_kafka.Consumer(config)
    consumer.subscribe([topic])
    consumed = []
    while len(consumed) < 120:
        message = consumer.poll(1)
        if message is not None and not message.error():
            consumed.append(message.offset())
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 120)], asynchronous=False)
    consumer.close()
    again = confluent_kafka.Consumer(config)
    again.subscribe([topic])
    try:
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = again.poll(1)
        assert message is not None and message.offset() == 120
        committed = again.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 120
    finally:
        again.close()


def test_auto_commit_then_assign_with_the_group_starts_at_the_committed_offset(broker):
    topic = new_topic(broker, records=100, partitions=1)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "auto", "auto.offset.reset": "earliest",
        "enable.auto.commit": True, "auto.commit.interval.ms": 100})
    consumer.subscribe([topic])
    count = 0
    while count < 100:
        message = consumer.poll(1)
        if message is not None and not message.error():
            count += 1
    consumer.close()                                   # commits the final position
    # assign() with the group id and no start offset: the committed offset, not auto.offset.reset.
    manual = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "auto",
                                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    manual.assign([confluent_kafka.TopicPartition(topic, 0)])
    try:
        assert manual.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)[0].offset == 100
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"next", partition=0)
        producer.flush(10)
        message = None
        deadline = time.monotonic() + 30
        while (message is None or message.error()) and time.monotonic() < deadline:
            message = manual.poll(1)
        assert message.offset() >= 100 and message.value() == b"next"
    finally:
        manual.close()
    # A group with no committed offset falls back to auto.offset.reset.
    fresh = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "never-committed",
                                      "auto.offset.reset": "earliest"})
    fresh.assign([confluent_kafka.TopicPartition(topic, 0)])
    try:
        message = None
        deadline = time.monotonic() + 30
        while (message is None or message.error()) and time.monotonic() < deadline:
            message = fresh.poll(1)
        assert message.offset() == 0
    finally:
        fresh.close()


def test_a_static_member_restarts_without_a_rebalance(broker):
    topic = new_topic(broker, records=10)
    revoked = []
    steady = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "static", "group.instance.id": "steady",
        "session.timeout.ms": 10000, "auto.offset.reset": "earliest"})
    steady.subscribe([topic], on_revoke=lambda consumer, partitions: revoked.append(partitions))

    def restarting():
        return ConfluentMember(broker, topic, "static", **{"group.instance.id": "restarting",
                                                            "session.timeout.ms": 10000})
    first = restarting()
    first.start()
    try:
        wait_until(lambda: (steady.poll(0.1), True)[1] and len(first.assignment) == 3
                   and len({tp.partition for tp in steady.assignment()}) == 3, 60, "two static members")
        revoked.clear()
        first.stop.set()
        first.join(30)                                 # a static member's close() does not leave
        second = restarting()
        second.start()
        try:
            wait_until(lambda: len(second.assignment) == 3, 30, "the restarted member's partitions")
            end = time.monotonic() + 2
            while time.monotonic() < end:
                steady.poll(0.1)
            assert revoked == [], "the other member was rebalanced"
            assert second.assignment == first.assignment
        finally:
            second.stop.set()
            second.join(30)
    finally:
        steady.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make test installs it)")
def test_kcat_balanced_consumer(any_cluster):
    topic = new_topic(any_cluster)
    result = subprocess.run(
        ["kcat", "-b", any_cluster.bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest",
         "-c", str(RECORDS), "-f", "%p %o\n", topic], capture_output=True, text=True, timeout=60)
    lines = result.stdout.split()
    assert result.returncode == 0, result.stderr
    assert len(set(zip(lines[::2], lines[1::2]))) == RECORDS
    assert "assigned" in result.stderr


def test_offset_delete_of_an_unknown_topic_is_unknown_topic_or_partition(broker):
    import asyncio

    from tidelog.core.errors import ErrorCode
    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection

    topic = new_topic(broker, records=1, partitions=1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offset-delete"})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()

    async def delete():
        connection = await KafkaConnection.connect("127.0.0.1", broker.port)
        try:
            response = await connection.request(ApiKey.OFFSET_DELETE, {"group_id": "offset-delete", "topics": [
                {"name": topic, "partitions": [{"partition_index": 0}]},
                {"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]})
            return {t.name: ErrorCode(t.partitions[0].error_code.value) for t in response.topics}
        finally:
            connection.close()
    assert asyncio.run(delete()) == {topic: ErrorCode.NONE, "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
