"""Kafka Connect 4.3.1, unchanged, in distributed mode on a 3-broker tidelog cluster.

Two workers (``org.apache.kafka.connect.cli.ConnectDistributed``, each a process of its
own with a REST API on a free loopback port) form one group; they create their config,
offset and status topics themselves (compacted, three replicas). Over the REST API the
FileStream source connector reads a file into a one-partition topic and the FileStream
sink connector writes that topic to another file. Then the worker running the source
task is killed with SIGKILL, more lines are appended, and the survivor takes the tasks
over and carries the rest of the file through.

Connect is at-least-once: a task that resumes after a kill starts from the last offsets
its worker flushed (source: the file position in the offset topic; sink: the consumer
group's committed offset), so lines between the last flush and a kill are written
again (seen here: killed 1 s after the source task started, before its first flush, the
survivor re-read the file from the start and the sink file held the first 500 lines
twice). The test kills the worker once both tasks have flushed the offsets of
everything they carried, so from then on nothing may be lost or repeated: the sink file
must equal the source file, line for line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.interop.connect_fixture import ConnectWorker, connect_missing, three_brokers
from tidelog.testing import wait_until

MISSING = connect_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"Kafka Connect tests skipped: {MISSING}")

GROUP = "tidelog-connect"
TOPIC = "connect-lines"


@pytest.fixture(scope="module")
def cluster():
    with three_brokers() as cluster:
        yield cluster


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def task_workers(worker: ConnectWorker, connector: str) -> list[tuple[str, str]]:
    status, body = worker.get(f"/connectors/{connector}/status")
    if status != 200:
        return []
    return [(task["worker_id"], task["state"]) for task in body["tasks"]]


def running(tasks: list[tuple[str, str]]) -> bool:
    return bool(tasks) and all(state == "RUNNING" for _, state in tasks)


def source_position(bootstrap: str, connector: str) -> int | None:
    """The file position the source task last flushed to the offset topic (None before
    its first flush)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        topic = f"{GROUP}-offsets"
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        position = None
        while (message := consumer.poll(0.5)) is not None:
            if not message.error() and message.value() and json.loads(message.key())[0] == connector:
                position = json.loads(message.value())["position"]
        return position
    finally:
        consumer.close()


def sink_committed(admin: AdminClient, connector: str) -> int | None:
    """The offset the sink task's consumer group last committed on the topic."""
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(f"connect-{connector}")])
    partitions = result[f"connect-{connector}"].result(30).topic_partitions
    return next((tp.offset for tp in partitions if tp.topic == TOPIC and tp.offset >= 0), None)


def test_file_source_and_sink_across_a_worker_kill(cluster, tmp_path):
    b = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    # One partition: the sink file keeps the source file's order.
    for future in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
        future.result(30)
    source_file, sink_file = tmp_path / "source.txt", tmp_path / "sink.txt"
    source = [f"line {i:05d} of the source file" for i in range(500)]
    source_file.write_text("".join(line + "\n" for line in source))
    workers = [ConnectWorker(b, GROUP, tmp_path, name) for name in ("worker-a", "worker-b")]
    try:
        for worker in workers:
            worker.wait_ready()
        first = workers[0]
        status, body = first.request("POST", "/connectors", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source_file), "topic": TOPIC}})
        assert status == 201, body
        status, body = first.request("POST", "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink_file), "topics": TOPIC}})
        assert status == 201, body
        wait_until(lambda: read_lines(sink_file) == source, 120, "the sink file to hold the source file",
                   interval_s=0.5)

        # Both workers see both connectors' tasks running (they share one config topic).
        for worker in workers:
            wait_until(lambda: all(running(task_workers(worker, c)) for c in ("file-source", "file-sink")), 60,
                       f"{worker.name} to report the tasks running")
        urls = {worker.url.removeprefix("http://"): worker for worker in workers}
        placement = {c: task_workers(first, c)[0][0] for c in ("file-source", "file-sink")}
        victim = urls[placement["file-source"]]
        survivor = next(worker for worker in workers if worker is not victim)
        print(f"placement before the kill: {placement}; killing {victim.name}")

        # The internal topics the workers created: compacted, three replicas.
        internal = [f"{GROUP}-configs", f"{GROUP}-offsets", f"{GROUP}-status"]
        topics = admin.list_topics(timeout=10).topics
        assert len(topics[f"{GROUP}-configs"].partitions) == 1
        assert len(topics[f"{GROUP}-offsets"].partitions) == 5 and len(topics[f"{GROUP}-status"].partitions) == 3
        for name in internal:
            assert all(len(p.replicas) == 3 for p in topics[name].partitions.values())
        configs = admin.describe_configs([ConfigResource("topic", name) for name in internal])
        for resource, future in configs.items():
            assert future.result(30)["cleanup.policy"].value == "compact", resource.name

        # Both tasks flush their offsets (every second here): the source task the file
        # position, the sink task its consumer group's offset. From then on a kill
        # loses nothing and repeats nothing.
        wait_until(lambda: source_position(b, "file-source") == source_file.stat().st_size, 60,
                   "the source task to flush the file's end position to the offset topic", interval_s=0.5)
        wait_until(lambda: sink_committed(admin, "file-sink") == len(source), 60,
                   "the sink task to commit the topic's end", interval_s=0.5)
        victim.kill()
        more = [f"line {i:05d} of the source file" for i in range(500, 800)]
        with source_file.open("a") as f:
            f.writelines(line + "\n" for line in more)
        source += more
        survivor_id = survivor.url.removeprefix("http://")
        wait_until(lambda: all(task_workers(survivor, c) == [(survivor_id, "RUNNING")]
                               for c in ("file-source", "file-sink")), 120,
                   "the survivor to run both tasks", interval_s=0.5)
        wait_until(lambda: len(read_lines(sink_file)) >= len(source), 120,
                   "every line, the appended ones too, in the sink file", interval_s=0.5)
        probe = Consumer({"bootstrap.servers": b, "group.id": "unused"})
        in_topic = probe.get_watermark_offsets(TopicPartition(TOPIC, 0), 10)[1]
        probe.close()
        sink = read_lines(sink_file)
        print(f"sink file: {len(sink)} lines for {len(source)}; the topic holds {in_topic} records")
        assert in_topic == len(source) and sink == source
        # The survivor answers for the group: the connectors and their configs are there.
        status, names = survivor.get("/connectors")
        assert status == 200 and sorted(names) == ["file-sink", "file-source"]
        for connector in ("file-sink", "file-source"):
            assert survivor.request("DELETE", f"/connectors/{connector}")[0] == 204
    except BaseException:
        for worker in workers:
            print(f"--- {worker.name}\n{worker.app.log_tail(60)}")
        raise
    finally:
        for worker in workers:
            worker.close()
