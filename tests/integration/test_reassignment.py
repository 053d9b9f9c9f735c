"""Partition reassignment (KIP-455) with real processes and real clients: three
controllers (a Raft quorum) and three brokers.

A move under an acks=all producer and a consumer, with the new replica's broker
paused (so the reassignment is certainly under way) and the active controller
killed meanwhile: the next controller, replaying the metadata log, finishes it; no
acknowledged record is lost and the consumer sees only retriable errors. The APIs
through kafka-python's admin client and Kafka's own kafka-reassign-partitions
(confluent-kafka's AdminClient has no reassignment call: librdkafka implements
neither API). Bad input: Kafka's error codes, nothing changed."""

import json
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError

from tests.integration.test_controller_quorum import FAST, _create, _quorum
from tests.interop.line_driver import open_driver
from tidelog.testing import Cluster, wait_until


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, controllers=3, overrides=FAST) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster):
    # Every broker names itself as the controller (it forwards to the real one), so the
    # client's requests go to broker 2, which the test never pauses or kills.
    client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cluster.port(2)}", request_timeout_ms=20_000)
    yield client
    client.close()


def _partitions(cluster, topic) -> dict[int, tuple[tuple[int, ...], tuple[int, ...], int]]:
    """{partition: (replicas, isr, leader)} from the brokers' metadata (confluent-kafka)."""
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    return {p.id: (tuple(p.replicas), tuple(sorted(p.isrs)), p.leader)
            for p in metadata.topics[topic].partitions.values()}


def _create_assigned(cluster, admin, topic, assignment):
    admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                  replica_assignments=dict(enumerate(assignment)))])
    wait_until(lambda: topic in admin.list_topics(), 20, f"{topic} in the metadata")


def test_kafka_python_moves_lists_and_refuses_bad_input(cluster, admin):
    _create_assigned(cluster, admin, "moves", [[1, 2], [2, 3]])
    foo0, foo1 = TopicPartition("moves", 0), TopicPartition("moves", 1)
    # Bad input: Kafka's codes per partition, and nothing changes.
    results = admin.alter_partition_reassignments({foo0: [1, 9], foo1: [3, 3]})
    assert results == {foo0: InvalidReplicationAssignmentError, foo1: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({TopicPartition("nope", 0): [1]}) == {
        TopicPartition("nope", 0): UnknownTopicOrPartitionError}
    assert admin.alter_partition_reassignments({foo0: None}) == {foo0: NoReassignmentInProgressError}
    assert _partitions(cluster, "moves") == {0: ((1, 2), (1, 2), 1), 1: ((2, 3), (2, 3), 2)}
    assert admin.list_partition_reassignments() == {}

    assert admin.alter_partition_reassignments({foo0: [3, 2], foo1: [1, 2]}) == {foo0: None, foo1: None}
    wait_until(lambda: admin.list_partition_reassignments() == {}, 30, "the moves to finish")
    wait_until(lambda: _partitions(cluster, "moves") == {0: ((3, 2), (2, 3), 3), 1: ((1, 2), (1, 2), 2)}, 30,
               "the new replica sets in the brokers' metadata")


def _tidelog(cluster, verb, *args):
    """``tidelog reassign VERB ...`` through broker 2: (exit status, stdout, stderr)."""
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "reassign", verb, "-b",
                             f"127.0.0.1:{cluster.port(2)}", *args], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def test_a_move_under_load_survives_the_controller_being_killed_midway(cluster, admin, tmp_path):
    _create_assigned(cluster, admin, "moving", [[1, 2], [1, 2], [2, 1]])
    acked: list[bytes] = []
    failed: list[str] = []
    consumed: set[bytes] = set()
    consumer_errors: list[str] = []
    stop, flushed = threading.Event(), threading.Event()    # stop producing; every ack is in

    def produce():
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120_000})

        def delivered(error, message):
            (acked.append(message.value()) if error is None else failed.append(str(error)))
        i = 0
        while not stop.is_set():
            try:
                producer.produce("moving", b"%08d" % i, partition=i % 3, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001 if i % 50 else 0.01)
        producer.flush(120)
        flushed.set()

    def consume():
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "moving-reader",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([ConfluentPartition("moving", p, 0) for p in range(3)])
        while not flushed.is_set() or not set(acked) <= consumed:
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    consumed.add(message.value())
                    last = positions.get(message.partition(), -1)
                    if message.offset() > last + 1:
                        gaps.append((message.partition(), last, message.offset()))
                    positions[message.partition()] = message.offset()
                elif not error.retriable() and error.code() != KafkaError._PARTITION_EOF:
                    consumer_errors.append(str(error))
            if flushed.is_set() and time.monotonic() > give_up[0]:
                break
        consumer.close()

    positions, gaps = {}, []
    give_up = [float("inf")]
    writer, reader = threading.Thread(target=produce), threading.Thread(target=consume)
    writer.start()
    reader.start()
    old_leader = None
    try:
        wait_until(lambda: len(acked) > 300, 30, "records acknowledged before the move")
        # Broker 3 is paused: the reassignment onto it cannot finish before the kill. (The
        # moves go through `tidelog reassign` on broker 2: an admin client could pick the
        # paused broker 3 as the one it sends controller requests to.)
        cluster.pause(3)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": p, "replicas": [3, 2]} for p in range(3)]}))
        code, out, err = _tidelog(cluster, "execute", "--reassignment-json-file", str(plan))
        assert code == 0 and "Successfully started partition reassignments for moving-0,moving-1,moving-2" in out, err
        running = [f"moving-{p}: replicas: 3,2,1. adding: 3. removing: 1." for p in range(3)]
        assert _tidelog(cluster, "list")[1].splitlines() == ["Current partition reassignments:"] + running
        old_leader = _quorum(cluster)[0]
        cluster.kill(old_leader)
        wait_until(lambda: (q := _quorum(cluster)) is not None and q[0] not in (old_leader, -1), 30,
                   "a new quorum leader")
        acked_at_kill = len(acked)
        # The new controller has the reassignment from the metadata log.
        assert _tidelog(cluster, "list")[1].splitlines() == ["Current partition reassignments:"] + running
        cluster.resume(3)
        wait_until(lambda: admin.list_partition_reassignments() == {}, 60, "the moves to finish")
        wait_until(lambda: all(replicas == (3, 2) and isr == (2, 3) and leader in (2, 3)
                               for replicas, isr, leader in _partitions(cluster, "moving").values()), 30,
                   "replicas [3, 2] everywhere, broker 1 out")
        wait_until(lambda: len(acked) > acked_at_kill + 300, 60, "writes acknowledged after the move")
    finally:
        if cluster.processes.layout.node(3).process_state() == "paused":
            cluster.resume(3)
        give_up[0] = time.monotonic() + 120
        stop.set()
        writer.join(150)
        reader.join(150)
        if old_leader is not None and not cluster.processes.layout.node(old_leader).alive():
            cluster.start_node(old_leader)
    assert not failed, failed[:5]
    assert not consumer_errors, consumer_errors[:5]
    assert not gaps, f"the consumer skipped offsets (partition, last, next): {gaps[:5]}"
    lost = set(acked) - consumed
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records not consumed"
    print(f"{len(acked)} acknowledged and consumed across the move and the controller kill")


KAFKA_REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


@pytest.fixture(scope="module")
def java():
    from tests.interop.java_driver import JavaDriver
    with open_driver(JavaDriver()) as driver:
        yield driver


def test_kafkas_kafka_reassign_partitions_generates_executes_verifies_lists_and_cancels(cluster, admin, java,
                                                                                        tmp_path):
    b = f"127.0.0.1:{cluster.port(2)}"
    _create_assigned(cluster, admin, "tooled", [[1, 2], [2, 3], [3, 1]])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "tooled"}]}))
    generated = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--generate", "--topics-to-move-json-file",
                          str(topics), "--broker-list", "2,3")
    assert generated.exit_code == 0, generated.stdout + generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    current = json.loads(lines[1])["partitions"]      # log_dirs: the directories DescribeLogDirs names
    assert [(c["topic"], c["partition"], c["replicas"], len(c["log_dirs"])) for c in current] == [
        ("tooled", p, r, 2) for p, r in enumerate([[1, 2], [2, 3], [3, 1]])]
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert all(set(p["replicas"]) == {2, 3} for p in proposed["partitions"])

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(proposed))
    executed = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file", str(plan))
    assert executed.exit_code == 0, executed.stdout + executed.stderr
    assert "Successfully started partition reassignments for tooled-0,tooled-1,tooled-2" in executed.stdout

    def verified():
        result = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--verify", "--reassignment-json-file",
                           str(plan))
        return result.exit_code == 0 and all(f"Reassignment of partition tooled-{p} is completed." in result.stdout
                                             for p in range(3))
    wait_until(verified, 60, "kafka-reassign-partitions --verify to say every move completed")
    assert {p: r for p, (r, _, _) in _partitions(cluster, "tooled").items()} == {
        p["partition"]: tuple(p["replicas"]) for p in proposed["partitions"]}
    listed = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--list")
    assert listed.exit_code == 0 and "No partition reassignments found." in listed.stdout, listed.stdout

    # A move onto a paused broker stays in progress: the tool lists it, then cancels it.
    cluster.pause(1)
    try:
        stuck = tmp_path / "stuck.json"
        stuck.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tooled", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}))
        before = _partitions(cluster, "tooled")[0][0]
        executed = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file",
                             str(stuck))
        assert executed.exit_code == 0, executed.stdout + executed.stderr
        listed = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--list")
        assert "Current partition reassignments:" in listed.stdout and "tooled-0: replicas:" in listed.stdout, \
            listed.stdout
        # (--preserve-throttles: clearing throttles would ask the paused broker too)
        cancelled = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--cancel", "--reassignment-json-file",
                              str(stuck), "--preserve-throttles")
        assert cancelled.exit_code == 0, cancelled.stdout + cancelled.stderr
        assert "Successfully cancelled partition reassignment" in cancelled.stdout and "tooled-0" in cancelled.stdout
        # The revert keeps the original replicas in the order the move left them (as Kafka).
        wait_until(lambda: sorted(_partitions(cluster, "tooled")[0][0]) == sorted(before), 30,
                   "tooled-0 back to its replicas")
    finally:
        cluster.resume(1)
    # Bad input, nothing changes: an unknown broker (the tool checks DescribeCluster), and a
    # replication factor change the tool was told to disallow (the controller refuses it).
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tooled", "partition": 1, "replicas": [2, 9], "log_dirs": ["any", "any"]}]}))
    refused = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file", str(bad))
    assert refused.exit_code == 1 and "Unknown broker id 9" in refused.stdout, refused.stdout + refused.stderr
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tooled", "partition": 1, "replicas": [2], "log_dirs": ["any"]}]}))
    refused = java.tool(KAFKA_REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file", str(bad),
                        "--disallow-replication-factor-change")
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert "tooled-1: The replication factor is changed from 2 to 1" in refused.stdout, refused.stdout
    assert _partitions(cluster, "tooled")[1][0] == tuple(proposed["partitions"][1]["replicas"])


def test_a_broker_added_to_the_running_cluster_takes_partitions_moved_onto_it(cluster, admin):
    """``cluster add-broker`` (ProcessCluster.add_broker): broker 4 starts, registers, and a
    partition moved onto it replicates there (it joins the ISR), while broker 1 drops it."""
    _create_assigned(cluster, admin, "growing", [[1, 2]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("growing", b"%03d" % i, partition=0)
    assert producer.flush(30) == 0
    node = cluster.processes.add_broker()
    assert node.node_id == 4 and node.alive()
    assert admin.alter_partition_reassignments({TopicPartition("growing", 0): [4, 2]}) == {
        TopicPartition("growing", 0): None}
    wait_until(lambda: admin.list_partition_reassignments() == {}, 60, "the move onto broker 4")
    wait_until(lambda: _partitions(cluster, "growing")[0][:2] == ((4, 2), (2, 4)), 30, "broker 4 in the ISR")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "growing-check"})
    consumer.assign([ConfluentPartition("growing", 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 100 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    assert values == [b"%03d" % i for i in range(100)]


def test_draining_a_broker_then_unregistering_it_with_kafkas_kafka_cluster(cluster, admin, java):
    """Retire a broker: move its partitions away, stop it, unregister it (UnregisterBroker,
    Kafka's ``kafka-cluster unregister``); unknown ids are refused by name."""
    if len(cluster.brokers) < 4:
        cluster.processes.add_broker()
    retired = max(b.node_id for b in cluster.brokers)
    _create_assigned(cluster, admin, "retiring", [[retired, 2]])
    assert admin.alter_partition_reassignments({TopicPartition("retiring", 0): [1, 2]}) == {
        TopicPartition("retiring", 0): None}
    wait_until(lambda: _partitions(cluster, "retiring")[0][0] == (1, 2), 60, f"broker {retired} drained")
    cluster.kill(retired)
    b = f"127.0.0.1:{cluster.port(2)}"
    tool = "org.apache.kafka.tools.ClusterTool"
    result = java.tool(tool, "unregister", "--bootstrap-server", b, "--id", str(retired))
    assert result.exit_code == 0 and f"Broker {retired} is no longer registered." in result.stdout, \
        result.stdout + result.stderr
    brokers = lambda: set(AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).brokers)
    wait_until(lambda: brokers() == {1, 2, 3}, 20, f"broker {retired} gone from the metadata")
    refused = java.tool(tool, "unregister", "--bootstrap-server", b, "--id", "9")
    assert refused.exit_code == 1 and "Broker ID 9 is not registered." in refused.stdout + refused.stderr, \
        refused.stdout + refused.stderr


def test_tidelog_reassign_generates_verifies_cancels_and_refuses_bad_files(cluster, admin, tmp_path):
    _create_assigned(cluster, admin, "clitool", [[1, 2], [2, 3]])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "clitool"}]}))
    code, out, err = _tidelog(cluster, "generate", "--topics-to-move-json-file", str(topics), "--broker-list", "3,1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"] == [
        {"topic": "clitool", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "clitool", "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "any"]}]
    assert json.loads(lines[4])["partitions"] == [
        {"topic": "clitool", "partition": 0, "replicas": [3, 1], "log_dirs": ["any", "any"]},
        {"topic": "clitool", "partition": 1, "replicas": [1, 3], "log_dirs": ["any", "any"]}]
    plan = tmp_path / "plan.json"
    plan.write_text(lines[4])
    assert _tidelog(cluster, "execute", "--reassignment-json-file", str(plan))[0] == 0
    wait_until(lambda: _tidelog(cluster, "verify", "--reassignment-json-file", str(plan))[0] == 0, 60,
               "tidelog reassign verify to report every move completed")
    assert _tidelog(cluster, "verify", "--reassignment-json-file", str(plan))[1].splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition clitool-0 is completed.",
        "Reassignment of partition clitool-1 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3",         # as Kafka's tool, once all completed
        "Clearing topic-level throttles on topic clitool"]
    assert _tidelog(cluster, "cancel", "--reassignment-json-file", str(plan))[1] == \
        "None of the specified partition reassignments are active.\n"
    # Files the tool refuses before asking anything, naming the problem.
    for document, problem in (
            ({"version": 1, "partitions": [{"topic": "clitool", "partition": 0, "replicas": [1]},
                                           {"topic": "clitool", "partition": 0, "replicas": [2]}]},
             "partition clitool-0 appears more than once"),
            ({"version": 1, "partitions": [{"topic": "clitool", "partition": 0, "replicas": [1, 1]}]},
             "partition clitool-0 has duplicate replicas [1, 1]"),
            ({"version": 1, "partitions": [{"topic": "clitool", "partition": 0, "replicas": [1],
                                            "log_dirs": ["data"]}]},
             "log_dirs entry 'data' is neither \"any\" nor an absolute directory"),
            ({"partitions": "all"}, '"partitions": [{"topic": ..., "partition": ..., "replicas": [...]}')):
        plan.write_text(json.dumps(document))
        code, out, err = _tidelog(cluster, "execute", "--reassignment-json-file", str(plan))
        assert code == 1 and problem in err, (document, err)
    # The controller's refusal, one line per partition on standard error.
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "clitool", "partition": 0, "replicas": [7]}]}))
    code, out, err = _tidelog(cluster, "execute", "--reassignment-json-file", str(plan))
    assert code == 1 and "clitool-0: INVALID_REPLICA_ASSIGNMENT: The manual partition assignment includes " \
        "broker 7, but no such broker is registered." in err, err
