"""Three controller processes (a Raft quorum) and three brokers, with real clients.

Killing the active controller (kill -9) while a producer writes with acks=all and a
broker dies too: a new controller is elected, fences the dead broker, moves its
partitions' leadership, creates topics again; no acknowledged record is lost.
Stopping and restarting every controller keeps the metadata."""

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.controller_channel import RemoteController
import tidelog.testing
from tidelog.testing import Cluster, wait_until

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300",
        "replica.lag.time.max.ms": "3000"}
CONTROLLERS = (1000, 1001, 1002)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, controllers=3, overrides=FAST, metrics=True) as running:
        yield running


def _ask(cluster, api_key, body):
    layout = cluster.processes.layout
    voters = [(c.node_id, layout.host, c.port) for c in layout.controllers if c.alive()]

    async def go():
        channel = RemoteController(voters, "quorum-test")
        try:
            return await channel.request(api_key, body, timeout_s=5)
        finally:
            channel.close()
    return asyncio.run(go())


def _quorum(cluster):
    """(leader id, epoch, {voter: log end offset}) from the quorum leader."""
    answer = _ask(cluster, ApiKey.DESCRIBE_QUORUM, {"topics": [
        {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    p = answer.topics[0].partitions[0]
    if int(p.error_code.value) != 0:
        return None
    return int(p.leader_id), int(p.leader_epoch), {int(v.replica_id): int(v.log_end_offset)
                                                   for v in p.current_voters}


def _fenced(cluster) -> dict[int, bool]:
    answer = _ask(cluster, ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False})
    return {int(b.broker_id): bool(b.is_fenced) for b in answer.brokers}


def _create(bootstrap: str, name, partitions=3, replication=3, timeout_s=60.0):
    """CreateTopics until it succeeds, each attempt with a new admin client: librdkafka's
    keeps the broker its last metadata named as controller and, once that broker is
    killed, can wait for it for the whole request timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})    # kept alive until answered
            admin.create_topics([NewTopic(name, partitions, replication)],
                                operation_timeout=10, request_timeout=15)[name].result()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_quorum_elects_one_leader_and_brokers_follow_it(cluster):
    quorum = _quorum(cluster)
    assert quorum is not None
    leader, epoch, ends = quorum
    assert leader in CONTROLLERS and epoch >= 1 and set(ends) == set(CONTROLLERS)
    assert _fenced(cluster) == {1: False, 2: False, 3: False}


def test_only_the_active_controller_counts_itself_active_and_all_name_the_leader(cluster):
    from prometheus_client.parser import text_string_to_metric_families
    import urllib.request

    def scrape(node_id) -> dict:
        text = urllib.request.urlopen(cluster.metrics_url(node_id), timeout=10).read().decode()
        return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    leader = _quorum(cluster)[0]
    samples = {c: scrape(c) for c in CONTROLLERS}
    assert {c: s["kafka_controller_kafkacontroller_activecontrollercount"] for c, s in samples.items()} == {
        c: (1.0 if c == leader else 0.0) for c in CONTROLLERS}
    assert {s["kafka_server_raft_metrics_current_leader"] for s in samples.values()} == {float(leader)}
    assert len({s["kafka_server_raft_metrics_current_epoch"] for s in samples.values()}) == 1


def test_killing_the_active_controller_and_a_broker_loses_no_acknowledged_record(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _create(cluster.bootstrap, "quorum-writes")
    acked: list[bytes] = []
    failed: list[str] = []
    stop = threading.Event()

    def produce():
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60_000})

        def delivered(error, message):
            if error is None:
                acked.append(message.value())
            else:
                failed.append(str(error))
        i = 0
        while not stop.is_set():
            try:
                producer.produce("quorum-writes", b"%08d" % i, partition=i % 3, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001 if i % 50 else 0.01)
        producer.flush(60)

    writer = threading.Thread(target=produce)
    writer.start()
    old_leader = None
    try:
        wait_until(lambda: len(acked) > 500, 30, "records acknowledged before the kills")
        old_leader = _quorum(cluster)[0]
        killed_at = time.monotonic()
        cluster.kill(old_leader)
        cluster.kill(1)
        # A new controller is elected, in a later epoch, among the survivors.
        wait_until(lambda: (q := _quorum(cluster)) is not None and q[0] not in (old_leader, -1), 20,
                   "a new quorum leader")
        # It fences the dead broker and moves the leadership of its partitions.
        wait_until(lambda: _fenced(cluster).get(1) is True, 20, "broker 1 fenced by the new controller")
        _create(cluster.bootstrap, "after-failover")
        created_s = time.monotonic() - killed_at

        def leaders():
            metadata = admin.list_topics("quorum-writes", timeout=10)
            return {p.id: p.leader for p in metadata.topics["quorum-writes"].partitions.values()}
        wait_until(lambda: all(leader in (2, 3) for leader in leaders().values()), 20,
                   "new leaders for broker 1's partitions")
        acked_at_kill = len(acked)
        wait_until(lambda: len(acked) > acked_at_kill + 500, 30, "writes acknowledged after the failover")
    except BaseException:
        # The module's other tests run on this cluster: give them its nodes back.
        for node in (old_leader, 1):
            if node is not None and not cluster.processes.layout.node(node).alive():
                cluster.start_node(node)
        raise
    finally:
        stop.set()
        writer.join(90)
    assert not failed, failed[:5]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "quorum-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("quorum-writes", p, 0) for p in range(3)])
    seen = set()
    deadline = time.monotonic() + 60
    wanted = set(acked)
    while not wanted <= seen and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            assert message.error() is None, message.error()
            seen.add(message.value())
    consumer.close()
    assert wanted <= seen, f"{len(wanted - seen)} acknowledged records lost"
    print(f"{len(acked)} acknowledged; topic created {created_s:.2f} s after the controller kill")
    cluster.start_node(old_leader)
    cluster.start_node(1)
    wait_until(lambda: _fenced(cluster) == {1: False, 2: False, 3: False}, 30, "broker 1 back")
    wait_until(lambda: (q := _quorum(cluster)) is not None and len(set(q[2].values())) == 1, 30,
               "the restarted controller caught up")


def test_every_controller_restarted_from_disk_keeps_the_metadata(cluster):
    _create(cluster.bootstrap, "survives-restart", partitions=2)
    before_leader, before_epoch, before_ends = _quorum(cluster)
    for controller in CONTROLLERS:
        cluster.stop(controller)
    for controller in CONTROLLERS:
        cluster.start_node(controller)
    wait_until(lambda: (q := _quorum(cluster)) is not None and q[1] > before_epoch, 30, "a leader after the restart")
    # The restarted quorum knows every broker and every topic it had.
    wait_until(lambda: _fenced(cluster) == {1: False, 2: False, 3: False}, 30, "brokers registered")
    answer = _ask(cluster, ApiKey.CREATE_TOPICS, {"topics": [
        {"name": "survives-restart", "num_partitions": 2, "replication_factor": 3, "assignments": [],
         "configs": []}], "timeout": 10_000, "validate_only": False})
    assert int(answer.topics[0].error_code.value) == 36      # TOPIC_ALREADY_EXISTS
    # Nothing committed was lost: every voter's log reaches the old end (a voter's end is
    # known to the leader from its first fetch).
    wait_until(lambda: min(_quorum(cluster)[2].values()) >= max(before_ends.values()), 30,
               "every voter holding the log from before the restart")
    _create(cluster.bootstrap, "after-restart")


def test_snapshots_let_a_lagging_controller_and_a_fresh_broker_catch_up():
    """KIP-630 with real processes: controllers snapshot every few KiB of metadata and
    their logs then start at the snapshot; a controller that was down and a broker
    whose metadata copy was wiped both load the snapshot (FetchSnapshot), then the tail."""
    import glob
    import os
    import shutil
    from confluent_kafka.admin import AdminClient as Admin
    small = {**FAST, "metadata.log.max.record.bytes.between.snapshots": "4096"}
    with Cluster(brokers=3, controllers=3, overrides=small) as cluster:
        leader = _quorum(cluster)[0]
        lagging = next(c for c in CONTROLLERS if c != leader)
        cluster.stop(lagging)
        for i in range(25):
            _create(cluster.bootstrap, f"snap-{i}", partitions=2, replication=2)
        directory = cluster.processes.directory if hasattr(cluster.processes, "directory") else cluster.directory

        def checkpoints(node_id):
            node = cluster.processes.layout.node(node_id)
            return sorted(os.path.basename(p) for p in glob.glob(
                os.path.join(directory, node.name, "data", "__cluster_metadata-0", "*.checkpoint")))
        assert checkpoints(leader), "the leader took no snapshot"
        cluster.start_node(lagging)
        wait_until(lambda: (q := _quorum(cluster)) is not None and q[2][lagging] >= max(q[2].values()), 30,
                   "the lagging controller caught up")
        assert checkpoints(lagging), "the lagging controller did not load a snapshot"
        # A broker whose metadata copy is gone starts from the controller's snapshot.
        cluster.stop(3)
        broker_dir = os.path.join(directory, cluster.processes.layout.node(3).name, "data", "__cluster_metadata-0")
        shutil.rmtree(broker_dir)
        cluster.start_node(3)
        consumer_admin = Admin({"bootstrap.servers": f"127.0.0.1:{cluster.port(3)}"})
        topics = consumer_admin.list_topics(timeout=10).topics
        assert {f"snap-{i}" for i in range(25)} <= set(topics)
        assert glob.glob(os.path.join(broker_dir, "*.checkpoint")), "the broker did not load a snapshot"
        # Every controller restarted: snapshot + tail give the same metadata.
        for controller in CONTROLLERS:
            cluster.stop(controller)
        for controller in CONTROLLERS:
            cluster.start_node(controller)
        answer = _ask(cluster, ApiKey.CREATE_TOPICS, {"topics": [
            {"name": "snap-24", "num_partitions": 2, "replication_factor": 2, "assignments": [],
             "configs": []}], "timeout": 10_000, "validate_only": False})
        assert int(answer.topics[0].error_code.value) == 36      # TOPIC_ALREADY_EXISTS


def test_a_broker_finds_the_quorum_through_bootstrap_servers(cluster):
    """controller.quorum.bootstrap.servers (KIP-853) instead of the voters' ids: the
    broker learns which controller is active from the answers and registers."""
    layout = cluster.processes.layout
    addresses = ",".join(f"{layout.host}:{c.port}" for c in layout.controllers)
    with tidelog.testing.Broker(overrides={
            "node.id": "4", "process.roles": "broker", "cluster.id": layout.cluster_id,
            "controller.quorum.bootstrap.servers": addresses, **FAST}) as extra:
        wait_until(lambda: _fenced(cluster).get(4) is False, 30, "broker 4 registered and unfenced")
        admin = AdminClient({"bootstrap.servers": extra.bootstrap})
        assert 4 in admin.list_topics(timeout=10).brokers
