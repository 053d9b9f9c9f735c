"""MirrorMaker 2, Apache Kafka's own, between the real Apache Kafka and a tidelog cluster.

One MM2 (dedicated mode, tests/interop/mirror_maker.py) mirrors topic ``a`` from a Kafka
node (tests/kafka_fixture.py, the session's ``kafka_node``) to a 3-broker tidelog cluster,
where it arrives as ``kafka.a``, and topic ``b`` (replication factor 3) from tidelog to
Kafka, as ``tidelog.b``. Records go into both sources before MM2 starts and while it
runs; midway the broker leading ``b``'s partition 0 on tidelog is killed (SIGKILL) and
stays down. Then:

- every source record is on the target, in the same partition, in the same order, with
  its key, value, headers and timestamp (MM2 is at-least-once: a record may arrive more
  than once, e.g. when Connect's producer, not idempotent by default, resends a request
  that was in flight to the killed leader; the test checks that dropping repeats gives
  the source exactly, and prints how many repeats there were);
- the committed offsets of a consumer group on each source are translated on the other
  side: MM2's checkpoint (``<source>.checkpoints.internal``) and the target group's own
  committed offset (``sync.group.offsets.enabled``) name the target's end for a group
  that read everything; for a group that stopped midway, each partition MM2 could
  translate (it keeps only some of its old offset syncs) gets an offset from which
  nothing the source group had still to read is missing on the target, and the target
  group's committed offset is that checkpoint;
- the topic configuration set on the source (``retention.ms``) is on the mirrored topic.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest

from tests.interop.mirror_maker import MirrorMaker, decode_checkpoint, missing_tools
from tidelog.testing import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=f"MirrorMaker 2 unavailable: {missing_tools()}")

PARTITIONS = 3
BEFORE = 300          # records per topic before MM2 starts
DURING = 600          # records per topic while it runs (the leader kill halfway)
WAIT_S = 240          # how long to wait for MM2 to catch up before giving up (not a timed assertion)
FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0",
        "replica.lag.time.max.ms": "5000"}
RETENTION_MS = "86400000"

# Every interval short, and an offset sync for every record (offset.lag.max=0), so that
# a group that read to the end is translated to the target's end.
MM2_SETTINGS = {
    "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": "1",
    "emit.checkpoints.interval.seconds": "1", "refresh.topics.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1", "emit.heartbeats.interval.seconds": "1",
    "offset.lag.max": "0", "plugin.discovery": "service_load",
    # The Kafka node is one broker: replication factor 1 for what MM2 creates there.
    "replication.factor": "1", "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
}
# What MM2 creates on tidelog is replicated 3 times, so the leader kill loses none of it.
TO_TIDELOG = {"topics": "a", "replication.factor": "3", "checkpoints.topic.replication.factor": "3",
              "heartbeats.topic.replication.factor": "3"}
FROM_TIDELOG = {"topics": "b", "offset-syncs.topic.replication.factor": "3"}
# The worker whose target is a cluster keeps its offsets, configs and status there. (Given
# per cluster only: MM2 lets a top-level offset.storage.* override the cluster's own.)
WORKER_KAFKA = {"offset.storage.replication.factor": "1", "config.storage.replication.factor": "1",
                "status.storage.replication.factor": "1"}
WORKER_TIDELOG = {"offset.storage.replication.factor": "3", "config.storage.replication.factor": "3",
                  "status.storage.replication.factor": "3"}


# librdkafka's log lines (connection refused after the kill, ...) go nowhere.
_QUIET = logging.getLogger("tests.interop.mirror_maker.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def client(bootstrap: str, **settings) -> dict:
    return {"bootstrap.servers": bootstrap, "logger": _QUIET, **settings}


def wait_until(probe, what: str, timeout_s: float = WAIT_S, mm2: MirrorMaker | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if mm2 is not None and not mm2.running():
            raise AssertionError(f"MirrorMaker exited while waiting for {what}:\n{mm2.log_tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                                 + (f"; MM2 log:\n{mm2.log_tail()}" if mm2 else ""))
        time.sleep(0.5)


def produce(bootstrap: str, topic: str, start: int, count: int, pause_at: int | None = None,
            paused: threading.Event | None = None, resume: threading.Event | None = None) -> None:
    """``count`` records (keys k<i>, values <topic>-<i>, a header) round-robin over the
    partitions, idempotent with acks=all (so that the source holds each once, in order)."""
    producer = Producer(client(bootstrap, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5}))
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)
    for i in range(start, start + count):
        if pause_at is not None and i == pause_at:
            producer.flush(60)
            paused.set()
            resume.wait(120)
        producer.produce(topic, key=f"k{i}", value=f"{topic}-{i}", partition=i % PARTITIONS,
                         headers=[("n", str(i).encode())], on_delivery=delivered)
        producer.poll(0)
        if i % 50 == 0:
            time.sleep(0.05)       # spread over MM2's run, not one burst
    assert producer.flush(120) == 0
    assert not errors, errors[:5]


def read_partition(bootstrap: str, topic: str, partition: int, start: int = 0) -> list[tuple]:
    """Every record of one partition from ``start`` to its end: (key, value, headers, timestamp)."""
    consumer = Consumer(client(bootstrap, **{"group.id": f"reader-{uuid.uuid4()}", "enable.auto.commit": False}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        out = []
        if high <= max(low, start):
            return out
        consumer.assign([TopicPartition(topic, partition, max(low, start))])
        deadline = time.monotonic() + 60
        while True:
            message = consumer.poll(1.0)
            if message is not None:
                if message.error():
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(f"reading {topic}-{partition}: {message.error()}")
                else:
                    out.append((message.key(), message.value(), tuple(message.headers() or ()),
                                message.timestamp()[1]))
                    if message.offset() + 1 >= high:
                        return out
            assert time.monotonic() < deadline, f"reading {topic}-{partition} stalled at {len(out)}"
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer(client(bootstrap, **{"group.id": f"ends-{uuid.uuid4()}"}))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def consume_and_commit(bootstrap: str, topic: str, group: str, upto: dict[int, int]) -> None:
    """Group ``group`` reads ``topic`` up to ``upto`` (per partition) and commits there, then leaves."""
    consumer = Consumer(client(bootstrap, **{"group.id": group, "enable.auto.commit": False,
                                             "auto.offset.reset": "earliest"}))
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        position = {p: 0 for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(position[p] < upto[p] for p in upto):
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                position[message.partition()] = message.offset() + 1
            assert time.monotonic() < deadline, f"{group} stalled at {position}"
        consumer.commit(offsets=[TopicPartition(topic, p, upto[p]) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer(client(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def checkpoints(bootstrap: str, topic: str) -> dict[tuple[str, str, int], dict]:
    """The latest checkpoint of every (group, topic, partition) in MM2's checkpoints topic."""
    latest = {}
    for partition in range(1):     # MM2 creates the checkpoints topic with one partition
        consumer = Consumer(client(bootstrap, **{"group.id": f"cp-{uuid.uuid4()}", "enable.auto.commit": False}))
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 30
            while True:
                message = consumer.poll(1.0)
                if message is not None and not message.error():
                    cp = decode_checkpoint(message.key(), message.value())
                    latest[(cp["group"], cp["topic"], cp["partition"])] = cp
                    if message.offset() + 1 >= high:
                        break
                assert time.monotonic() < deadline
        finally:
            consumer.close()
    return latest


def create_topic(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient(client(bootstrap))      # kept alive until the answer is in
    admin.create_topics([topic])[topic.topic].result(timeout=60)


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient(client(bootstrap))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return configs[name].value if name in configs else None


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient(client(bootstrap)).list_topics(topic, timeout=30)
    return metadata.topics[topic].partitions[partition].leader


def compare_partition(source: list[tuple], target: list[tuple], where: str) -> int:
    """The target holds the source's records in the source's order, each at least once and
    nothing else; repeats (at-least-once) are dropped before comparing. Returns their number."""
    seen, first_copies = set(), []
    for record in target:
        if record not in seen:
            seen.add(record)
            first_copies.append(record)
    assert first_copies == source, (
        f"{where}: the target's records (repeats dropped) differ from the source's: {len(first_copies)} vs "
        f"{len(source)}; first difference at "
        f"{next((i for i, (x, y) in enumerate(zip(first_copies, source)) if x != y), min(len(first_copies), len(source)))}")
    return len(target) - len(first_copies)


@pytest.fixture(scope="module")
def tidelog_cluster():
    with Cluster(brokers=3, overrides=FAST) as cluster:
        yield cluster


def test_mirror_maker_both_ways_across_a_tidelog_leader_kill(kafka_node, tidelog_cluster, tmp_path):
    kafka, tidelog = kafka_node.bootstrap, tidelog_cluster.bootstrap
    create_topic(kafka, NewTopic("a", PARTITIONS, 1, config={"retention.ms": RETENTION_MS}))
    create_topic(tidelog, NewTopic("b", PARTITIONS, 3, config={"retention.ms": RETENTION_MS,
                                                              "min.insync.replicas": "2"}))
    produce(kafka, "a", 0, BEFORE)
    produce(tidelog, "b", 0, BEFORE)

    # A group that read part of each source (and left) before MM2 starts.
    midway = {p: 40 for p in range(PARTITIONS)}
    consume_and_commit(kafka, "a", "group-a-midway", midway)
    consume_and_commit(tidelog, "b", "group-b-midway", midway)

    mm2 = MirrorMaker({"kafka": kafka, "tidelog": tidelog},
                      flows={"kafka->tidelog": TO_TIDELOG, "tidelog->kafka": FROM_TIDELOG},
                      settings=MM2_SETTINGS, cluster_settings={"kafka": WORKER_KAFKA, "tidelog": WORKER_TIDELOG},
                      directory=str(tmp_path / "mm2"))
    mm2.start()
    try:
        _run(mm2, kafka, tidelog, tidelog_cluster, midway)
    except BaseException:
        print(f"MM2 log (last lines):\n{mm2.log_tail(120)}")
        raise
    finally:
        mm2.stop()


def _run(mm2: MirrorMaker, kafka: str, tidelog: str, cluster: Cluster, midway: dict[int, int]) -> None:
    def mirrored(bootstrap: str, topic: str, count: int):
        def probe():
            try:
                return sum(end_offsets(bootstrap, topic).values()) >= count
            except Exception:
                return False
        return probe
    wait_until(mirrored(tidelog, "kafka.a", BEFORE), "kafka.a on tidelog to catch up", mm2=mm2)
    wait_until(mirrored(kafka, "tidelog.b", BEFORE), "tidelog.b on Kafka to catch up", mm2=mm2)

    # Both sources take records while MM2 mirrors them; halfway, tidelog's leader of b-0 dies.
    victim = leader_of(tidelog, "b", 0)
    paused, resume = threading.Event(), threading.Event()
    half = BEFORE + DURING // 2
    writers = [threading.Thread(target=produce, args=(kafka, "a", BEFORE, DURING)),
               threading.Thread(target=produce, args=(tidelog, "b", BEFORE, DURING, half, paused, resume))]
    failures = []
    for w in writers:
        w.run = _capturing(w.run, failures)
        w.start()
    assert paused.wait(120), "the producer to b never reached the halfway mark"
    cluster.kill(victim)
    resume.set()
    for w in writers:
        w.join(300)
    assert not failures, failures
    assert leader_of(tidelog, "b", 0) not in (victim, -1)

    total = BEFORE + DURING
    sources = {("a", kafka): ("kafka.a", tidelog), ("b", tidelog): ("tidelog.b", kafka)}
    for (topic, source), (mirror, target) in sources.items():
        assert sum(end_offsets(source, topic).values()) == total      # the idempotent producer wrote each once
        wait_until(mirrored(target, mirror, total), f"{mirror} to hold all {total} records", mm2=mm2)

    # Every record, in order per partition, exactly as on the source.
    repeats = {}
    for (topic, source), (mirror, target) in sources.items():
        for p in range(PARTITIONS):
            def complete(p=p):
                have = {r for r in read_partition(target, mirror, p)}
                return set(read_partition(source, topic, p)) <= have
            wait_until(complete, f"every record of {topic}-{p} on {mirror}", mm2=mm2)
            repeats[f"{mirror}-{p}"] = compare_partition(read_partition(source, topic, p),
                                                         read_partition(target, mirror, p), f"{mirror}-{p}")
    print(f"records mirrored more than once (at-least-once): {repeats}")

    # Consumer groups: one reads everything (and leaves), one stopped midway before MM2 started.
    ends = {"a": end_offsets(kafka, "a"), "b": end_offsets(tidelog, "b")}
    consume_and_commit(kafka, "a", "group-a-all", ends["a"])
    consume_and_commit(tidelog, "b", "group-b-all", ends["b"])
    for (topic, source), (mirror, target) in sources.items():
        alias = "kafka" if topic == "a" else "tidelog"
        target_ends = end_offsets(target, mirror)
        group_all, group_mid = f"group-{topic}-all", f"group-{topic}-midway"

        def translated_to_end():
            cps = checkpoints(target, f"{alias}.checkpoints.internal")
            return all(cps.get((group_all, mirror, p), {}).get("downstream_offset") == target_ends[p]
                       and cps[(group_all, mirror, p)]["upstream_offset"] == ends[topic][p]
                       for p in range(PARTITIONS))
        wait_until(translated_to_end, f"checkpoints of {group_all} at {mirror}'s end {target_ends}", mm2=mm2)
        wait_until(lambda: committed(target, group_all, mirror) == target_ends,
                   f"{group_all}'s offsets on {mirror} synced to {target_ends}", mm2=mm2)

        # The midway group: MM2 translates conservatively, never past a record the group
        # had still to read, and only from the offset syncs it still keeps (its
        # OffsetSyncStore thins out old ones): a partition whose offset is older than
        # every sync kept gets no checkpoint, on Kafka and on tidelog alike.
        def translated_midway():
            cps = checkpoints(target, f"{alias}.checkpoints.internal")
            mine = {p: cps[(group_mid, mirror, p)] for p in range(PARTITIONS) if (group_mid, mirror, p) in cps}
            synced = committed(target, group_mid, mirror)
            return mine and all(synced[p] == cp["downstream_offset"] for p, cp in mine.items()) and (mine, synced)
        mine, synced = wait_until(translated_midway, f"checkpoints of {group_mid}, synced to the target group",
                                  mm2=mm2)
        for p, cp in mine.items():
            assert cp["upstream_offset"] == midway[p]
            still_to_read = set(read_partition(source, topic, p, start=midway[p]))
            assert still_to_read <= set(read_partition(target, mirror, p, start=cp["downstream_offset"])), (
                f"{group_mid}: translated to {cp['downstream_offset']} on {mirror}-{p}, past a record it had "
                "still to read")
        print(f"{group_mid} at {midway} on {topic}: translated to "
              f"{ {p: cp['downstream_offset'] for p, cp in mine.items()} } on {mirror}, synced {synced}")

    # The source topic's configuration came along.
    assert topic_config(tidelog, "kafka.a", "retention.ms") == RETENTION_MS
    assert topic_config(kafka, "tidelog.b", "retention.ms") == RETENTION_MS
    assert mm2.running()


def _capturing(run, failures):
    def wrapped():
        try:
            run()
        except BaseException as exc:     # noqa: BLE001 - reported by the test thread
            failures.append(repr(exc))
    return wrapped
