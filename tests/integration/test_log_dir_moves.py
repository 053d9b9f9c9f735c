"""Moving a replica between a broker's log directories (AlterReplicaLogDirs, JBOD)
with real processes and real clients: one ``tidelog serve`` with two log
directories, Kafka's own ``kafka-reassign-partitions`` (its ``log_dirs``) moving a
partition while a confluent-kafka producer writes with acks=all; kafka-python's
admin client for DescribeLogDirs and the bad requests; ``tidelog reassign`` with a
plan naming a directory.

``replica.fetch.max.bytes`` and the producer's batches are small here so that the
copy of the 8 MB backlog takes thousands of steps and the future replica is seen in
DescribeLogDirs while it catches up."""

import json
import os
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError

from tests.interop.line_driver import open_driver
from tidelog.testing import Broker, wait_until

KAFKA_REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
TOPIC = "moved"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("jbod")
    dirs = [str(root / "d1"), str(root / "d2")]
    with Broker(data_dir=str(root), overrides={"log.dirs": ",".join(dirs), "replica.fetch.max.bytes": "4096"}) \
            as running:
        running.log_dirs = dirs
        yield running


@pytest.fixture(scope="module")
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20_000)
    yield client
    client.close()


@pytest.fixture(scope="module")
def java():
    from tests.interop.java_driver import JavaDriver
    with open_driver(JavaDriver()) as driver:
        yield driver


def _replicas(admin, topic: str) -> list[tuple[str, int, bool, int]]:
    """(log dir, partition, is future, offset lag) of each replica of ``topic`` (DescribeLogDirs)."""
    [response] = admin.describe_log_dirs()
    return sorted((result["log_dir"], p["partition_index"], bool(p["is_future_key"]), p["offset_lag"])
                  for result in response["log_dirs"] for t in result["topics"] if t["name"] == topic
                  for p in t["partitions"])


def _create(broker, topic: str) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)


def test_kafkas_tool_moves_a_partition_between_directories_under_acks_all_writes(broker, admin, java, tmp_path):
    _create(broker, TOPIC)
    wait_until(lambda: _replicas(admin, TOPIC), 20, "the replica in DescribeLogDirs")
    [(source, _, _, _)] = _replicas(admin, TOPIC)
    target = next(d for d in broker.log_dirs if d != source)

    acked: list[bytes] = []
    failed: list[str] = []
    stop = threading.Event()
    # Small batches: the copy moves at least one whole batch a step.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 4096, "message.timeout.ms": 120_000})

    def delivered(error, message):
        (acked.append(message.value()) if error is None else failed.append(str(error)))

    for i in range(40_000):                       # a backlog: about 8 MB to copy, 4 KiB a step
        while True:
            try:
                producer.produce(TOPIC, b"%08d" % i + b"x" * 192, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    assert len(acked) == 40_000 and not failed

    def write():
        i = 40_000
        while not stop.is_set():
            try:
                producer.produce(TOPIC, b"%08d" % i + b"y" * 64, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.002)
        producer.flush(60)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": [target]}]}))
        executed = java.tool(KAFKA_REASSIGN, "--bootstrap-server", broker.bootstrap, "--execute",
                             "--reassignment-json-file", str(plan))
        assert executed.exit_code == 0, executed.stdout + executed.stderr
        assert f"Successfully started moving log directory to {target} for replica moved-0 with broker 1" \
            in executed.stdout, executed.stdout

        # The future replica catches up in the target directory, reported with its lag.
        seen_future = []

        def moved() -> bool:
            replicas = _replicas(admin, TOPIC)
            seen_future.extend(r for r in replicas if r[2])
            return replicas == [(target, 0, False, 0)]
        wait_until(moved, 120, "the replica to be in the target directory alone")
        assert seen_future and all(log_dir == target and lag >= 0 for log_dir, _, _, lag in seen_future)
        assert any(lag > 0 for *_, lag in seen_future)
        acked_at_move = len(acked)
        wait_until(lambda: len(acked) > acked_at_move + 500, 60, "writes acknowledged after the move")

        def verified() -> bool:
            result = java.tool(KAFKA_REASSIGN, "--bootstrap-server", broker.bootstrap, "--verify",
                               "--reassignment-json-file", str(plan))
            return result.exit_code == 0 and "Reassignment of replica moved-0-1 completed successfully." \
                in result.stdout
        wait_until(verified, 30, "kafka-reassign-partitions --verify to report the move completed")
    finally:
        stop.set()
        writer.join(90)
    assert not failed, failed[:5]
    # The old directory is gone; the new one holds the partition.
    assert not [n for n in os.listdir(source) if n.startswith(TOPIC)]
    assert [n for n in os.listdir(target) if n.startswith(TOPIC)] == [f"{TOPIC}-0"]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "moved-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(TOPIC, 0, 0)])
    consumed, expected = [], len(acked)
    while len(consumed) < expected:
        messages = consumer.consume(5000, 10)
        assert messages, f"consumed {len(consumed)} of {expected}"
        for message in messages:
            assert message.error() is None, message.error()
            assert message.offset() == len(consumed), "an offset skipped or repeated"
            consumed.append(message.value())
    consumer.close()
    assert consumed == acked                    # every acknowledged record, in order, once
    print(f"{len(acked)} acknowledged records read back after the move")


def test_bad_moves_get_kafkas_codes_and_move_nothing(broker, admin):
    _create(broker, "unmoved")
    wait_until(lambda: _replicas(admin, "unmoved"), 20, "the replica in DescribeLogDirs")
    before = _replicas(admin, "unmoved")
    [(current, _, _, _)] = before
    other = next(d for d in broker.log_dirs if d != current)
    traversal = os.path.join(current, "..", os.path.basename(other))
    answers = admin.alter_replica_log_dirs({
        ("unmoved", 0, 1): "/nonexistent/dir",
        ("no-such-topic", 0, 1): other,
    })
    by_topic = {replica[0]: error for replica, error in answers.items()}
    assert by_topic == {"unmoved": LogDirNotFoundError, "no-such-topic": ReplicaNotAvailableError}
    for path in (traversal, os.path.basename(other), other + "/"):
        [(_, error)] = admin.alter_replica_log_dirs({("unmoved", 0, 1): path}).items()
        assert error is LogDirNotFoundError, path
    [(_, error)] = admin.alter_replica_log_dirs({("unmoved", 0, 1): current}).items()
    assert error is NoError                           # where it is already: nothing to do
    assert _replicas(admin, "unmoved") == before
    assert not [n for n in os.listdir(other) if n.startswith("unmoved")]


def _tidelog_reassign(broker, verb, plan):
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "reassign", verb, "-b", broker.bootstrap,
                             "--reassignment-json-file", str(plan)], capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def test_tidelog_reassign_moves_a_replica_to_the_directory_its_plan_names(broker, admin, tmp_path):
    _create(broker, "cli-moved")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(500):
        producer.produce("cli-moved", b"%d" % i)
    assert producer.flush(30) == 0
    wait_until(lambda: _replicas(admin, "cli-moved"), 20, "the replica in DescribeLogDirs")
    [(source, _, _, _)] = _replicas(admin, "cli-moved")
    target = next(d for d in broker.log_dirs if d != source)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli-moved", "partition": 0, "replicas": [1], "log_dirs": [target]}]}))
    code, out, err = _tidelog_reassign(broker, "execute", plan)
    assert code == 0, out + err
    assert f"Successfully started moving log directory to {target} for replica cli-moved-0 with broker 1" in out
    wait_until(lambda: _tidelog_reassign(broker, "verify", plan)[0] == 0, 60, "tidelog reassign verify to pass")
    assert "Reassignment of replica cli-moved-0-1 completed successfully." in _tidelog_reassign(
        broker, "verify", plan)[1]
    assert _replicas(admin, "cli-moved") == [(target, 0, False, 0)]
    # A directory the broker does not have: Kafka's code on standard error, exit 1, nothing moved.
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli-moved", "partition": 0, "replicas": [1], "log_dirs": ["/no/such/dir"]}]}))
    code, out, err = _tidelog_reassign(broker, "execute", plan)
    assert code == 1 and "cli-moved-0 on broker 1 to /no/such/dir: LOG_DIR_NOT_FOUND" in err, out + err
    code, out, _ = _tidelog_reassign(broker, "verify", plan)
    assert code == 1 and f"Partition cli-moved-0 on broker 1 is not being moved from log dir {target} to " \
        "/no/such/dir." in out, out
    assert _replicas(admin, "cli-moved") == [(target, 0, False, 0)]


def test_a_move_killed_midway_resumes_after_the_restart_and_loses_nothing(broker, admin):
    """SIGKILL while the future replica catches up: the restarted broker finds the
    ``-future`` directory, resumes the copy and swaps; every acknowledged record is
    read back. (Last in the module: it restarts the broker.)"""
    topic = "crashed"
    _create(broker, topic)
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 4096})
    for i in range(20_000):
        while True:
            try:
                producer.produce(topic, b"%08d" % i + b"z" * 192,
                                 on_delivery=lambda error, message: error is None and acked.append(message.value()))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0 and len(acked) == 20_000
    wait_until(lambda: _replicas(admin, topic), 20, "the replica in DescribeLogDirs")
    [(source, _, _, _)] = _replicas(admin, topic)
    target = next(d for d in broker.log_dirs if d != source)
    [(_, error)] = admin.alter_replica_log_dirs({(topic, 0, 1): target}).items()
    assert error is NoError
    wait_until(lambda: any(future for _, _, future, _ in _replicas(admin, topic)), 30, "the future replica")
    broker.restart(clean=False)
    assert any(f"resuming the move of {topic}-0" in line for line in broker.output), broker.output[-20:]
    after = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20_000)
    try:
        wait_until(lambda: _replicas(after, topic) == [(target, 0, False, 0)], 120, "the move to finish")
    finally:
        after.close()
    assert not [n for n in os.listdir(source) if n.startswith(topic)]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crashed-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(topic, 0, 0)])
    consumed: list[bytes] = []
    while len(consumed) < len(acked):
        messages = consumer.consume(5000, 10)
        assert messages, f"consumed {len(consumed)} of {len(acked)}"
        consumed += [m.value() for m in messages if m.error() is None]
    consumer.close()
    assert consumed == acked
