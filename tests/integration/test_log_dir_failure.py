"""A leader's log directory fails on a real cluster (KIP-858, issue 28 item 1).

3 brokers, RF 3, min.insync.replicas 2, an acks=all producer writing all along.
A leader's log directory is made to fail in a way root cannot bypass: the
directory is moved away and a plain file put at its path, so every later
operation by path in it fails (ENOTDIR) while the files already open keep
working — a disk failing under a running broker, found by the next segment roll
or checkpoint (small segments here, so the producer's own writes find it). The
broker reports the directory in a heartbeat sent at once and the controller moves
the leadership. Before, nothing reached the controller: the broker kept
heartbeating and stayed leader, and the partition took no writes until it was
restarted (17-23 s in the disk-full drills).
"""

import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, topic_in_sync
from tidelog.testing import wait_until as _wait

SESSION_TIMEOUT_MS = 10_000     # long enough that a loaded machine still moves the leadership well before it
FAST = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS), "broker.heartbeat.interval.ms": "500"}
TOPIC_CONFIGS = {"min.insync.replicas": "2", "segment.bytes": "65536"}
VALUE = b"." * 100


def _partition(bootstrap, topic, partition=0):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]


def _consume(bootstrap, topic, partition, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.offset(), m.value()) for m in consumer.consume(10_000, 0.3) if m.error() is None]
    consumer.close()
    return got


def _fail_directory(path: str) -> None:
    """What root cannot write through: the directory's path is now a plain file."""
    os.rename(path, path + ".failed")
    with open(path, "w") as f:
        f.write("not a directory: the disk failed\n")


class Writer:
    """An acks=all producer writing ``partitions`` of ``topic`` round robin, recording
    when each record was acknowledged, and a watcher noting when ``watched``'s leader
    leaves ``failed_broker``."""

    def __init__(self, cluster, topic, partitions, watched, failed_broker):
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.acked = {p: [] for p in partitions}
        self.errors = []
        # Idempotent: a batch whose answer was an error although it reached the log (the
        # directory failed during its acks=all wait) is retried without a duplicate.
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 1,
                                  "enable.idempotence": True, "message.timeout.ms": 60_000,
                                  "retry.backoff.ms": 50, "batch.size": 16384})
        self.sent = 0
        self.moved_at = None
        self._stop = threading.Event()
        others = [b.node_id for b in cluster.brokers if b.node_id != failed_broker]
        self._watcher = threading.Thread(target=self._watch, args=(watched, failed_broker, others[0]), daemon=True)

    def _delivered(self, err, msg):
        if err:
            self.errors.append(err)
        else:
            self.acked[msg.partition()].append((time.monotonic(), msg.offset(), msg.value()))

    def write(self, count=None, until=None):
        while (count is None or count > 0) and (until is None or not until()):
            partition = self.partitions[self.sent % len(self.partitions)]
            self.producer.produce(self.topic, b"%08d" % self.sent + VALUE, partition=partition,
                                  on_delivery=self._delivered)
            self.producer.poll(0 if count else 0.001)
            self.sent += 1
            count = None if count is None else count - 1
        assert self.producer.flush(60) == 0

    def watch(self):
        self._watcher.start()

    def _watch(self, partition, failed_broker, ask):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.cluster.port(ask)}"})
        while not self._stop.is_set() and self.moved_at is None:
            try:
                leader = admin.list_topics(self.topic, timeout=2).topics[self.topic].partitions[partition].leader
                if leader not in (failed_broker, -1):
                    self.moved_at = time.monotonic()
            except Exception:
                pass
            time.sleep(0.02)

    def close(self):
        self._stop.set()
        self._watcher.join(5)

    def report(self, failed_at, partition):
        """(leadership moved, first acknowledged write after the move, longest pause
        between acknowledged writes), in seconds after the failure."""
        assert self.moved_at is not None, "the leadership never left the broker whose directory failed"
        resumed = min(t for t, _, _ in self.acked[partition] if t >= self.moved_at)
        return self.moved_at - failed_at, resumed - failed_at, self.longest_pause(failed_at, partition)

    def longest_pause(self, failed_at, partition):
        times = [failed_at] + [t for t, _, _ in self.acked[partition] if t >= failed_at]
        return max(b - a for a, b in zip(times, times[1:]))

    def check_read_back(self, partition):
        acked = sorted((offset, value) for _, offset, value in self.acked[partition])
        got = _consume(self.cluster.bootstrap, self.topic, partition, len(acked))
        assert acked == got            # every acknowledged record, once, at its offset
        assert [o for o, _ in got] == list(range(len(got)))


def _server_log(cluster, node) -> str:
    with open(os.path.join(cluster.directory, node.name, "server.log")) as f:
        return "\n".join(line for line in f.read().splitlines() if not line.startswith(" "))


def test_a_leaders_only_directory_failing_moves_the_leadership_within_a_session_timeout():
    """The broker's only directory — its metadata log's too, so, as Kafka's broker
    does when its metadata directory fails, it stops; but its report reached the
    controller first: the leadership moved well before its session would expire."""
    with Cluster(brokers=3, overrides=FAST) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("dirs", 1, 3, config=TOPIC_CONFIGS)])["dirs"].result(15)
        _wait(lambda: topic_in_sync(admin, "dirs", 3), what="dirs fully in sync")
        leader = _partition(cluster.bootstrap, "dirs").leader
        writer = Writer(cluster, "dirs", [0], 0, leader)
        writer.write(2000)
        writer.watch()
        node = cluster.processes.layout.node(leader)
        failed_at = time.monotonic()
        _fail_directory(os.path.join(cluster.directory, node.name, "data"))
        writer.write(until=lambda: time.monotonic() > failed_at + 12 or (
            writer.moved_at is not None and time.monotonic() > writer.moved_at + 2))
        writer.close()
        assert writer.errors == []
        moved_s, resumed_s, gap_s = writer.report(failed_at, 0)
        print(f"\nonly directory of leader {leader} failed: leadership moved after {moved_s * 1000:.0f} ms, "
              f"first acknowledged write after the move at {resumed_s * 1000:.0f} ms, "
              f"longest pause between acknowledged writes {gap_s * 1000:.0f} ms")
        assert resumed_s < SESSION_TIMEOUT_MS / 1000, _server_log(cluster, node)
        state = _partition(cluster.bootstrap, "dirs")
        assert state.leader != leader and leader not in state.isrs
        log = _server_log(cluster, node)
        assert "reporting them to the controller" in log and "asks to be fenced" in log
        writer.check_read_back(0)


def test_one_of_two_directories_failing_moves_only_its_partition_and_the_broker_stays():
    """Two directories per broker: the leader of both partitions put one in each. The
    second one fails: that partition moves, the broker stays up, unfenced, leading the
    other, whose writes never stop."""
    cluster = Cluster(brokers=3, overrides=FAST)
    try:
        for broker in cluster.brokers:
            data = os.path.join(cluster.directory, broker.name)
            broker.overrides["log.dirs"] = f"{data}/data,{data}/data2"
        cluster.start()
        leader = cluster.brokers[0].node_id
        a, b = (n.node_id for n in cluster.brokers[1:])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("dirs", 2, replica_assignment=[[leader, a, b], [leader, b, a]],
                                      config=TOPIC_CONFIGS)])["dirs"].result(15)
        _wait(lambda: topic_in_sync(admin, "dirs", 3, (0, 1)), what="dirs fully in sync")
        node = cluster.processes.layout.node(leader)
        data = os.path.join(cluster.directory, node.name)
        placed = {p: d for p in (0, 1) for d in ("data", "data2") if os.path.isdir(f"{data}/{d}/dirs-{p}")}
        assert sorted(placed.values()) == ["data", "data2"], placed
        failing = next(p for p, d in placed.items() if d == "data2")      # not the metadata log's directory
        writer = Writer(cluster, "dirs", [0, 1], failing, leader)
        writer.write(2000)
        writer.watch()
        failed_at = time.monotonic()
        _fail_directory(f"{data}/data2")
        writer.write(until=lambda: time.monotonic() > failed_at + 12 or (
            writer.moved_at is not None and time.monotonic() > writer.moved_at + 2))
        writer.close()
        assert writer.errors == []
        moved_s, resumed_s, gap_s = writer.report(failed_at, failing)
        kept = 1 - failing
        kept_gap_s = writer.longest_pause(failed_at, kept)
        print(f"\none of two directories of leader {leader} failed: its partition's leadership moved after "
              f"{moved_s * 1000:.0f} ms, first acknowledged write after the move at {resumed_s * 1000:.0f} ms, "
              f"longest pause {gap_s * 1000:.0f} ms; the other partition's longest pause {kept_gap_s * 1000:.0f} ms")
        assert resumed_s < SESSION_TIMEOUT_MS / 1000, _server_log(cluster, node)
        moved, stayed = _partition(cluster.bootstrap, "dirs", failing), _partition(cluster.bootstrap, "dirs", kept)
        assert moved.leader != leader and leader not in moved.isrs
        assert stayed.leader == leader and len(stayed.isrs) == 3
        assert node.alive(), _server_log(cluster, node)
        writer.check_read_back(failing)
        writer.check_read_back(kept)
    finally:
        cluster.close()
