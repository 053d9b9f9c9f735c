"""Kafka Streams 4.4.0, unchanged, with ``processing.guarantee=exactly_once_v2`` on a
3-broker tidelog cluster.

The app (interop/java/src/.../WordCountApp.java) is Kafka Streams' word count: lines in,
``groupBy(word)`` (a repartition topic), ``count()`` (a state store and its changelog
topic), counts out. It runs as a process of its own with two stream threads (a
transactional producer per thread, KIP-447). The input is a known multiset of words; the
output topic, read with ``isolation.level=read_committed``, must give every word's true
count as its last value and never a value above it (no double counting), across a
SIGKILL mid-transaction and a restart, and across a clean stop and a restart.
"""

from __future__ import annotations

import collections
import contextlib
import random
import shutil
import tempfile
import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.interop.connect_fixture import JavaApp, three_brokers
from tidelog.testing import wait_until

APP = "dev.tidelog.interop.WordCountApp"
VOCABULARY = [f"w{i:02d}" for i in range(40)]
# Two stream threads: two transactional producers (one per thread, KIP-447); internal
# topics with three replicas; the repartition topic purged (DeleteRecords) every second.
STREAMS_SETTINGS = ["num.stream.threads=2", "replication.factor=3", "repartition.purge.interval.ms=1000"]


@pytest.fixture(scope="module")
def cluster():
    with three_brokers() as cluster:
        yield cluster


def lines_of_words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 6))) for _ in range(count)]


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 3, 3) for name in names]).values():
        future.result(30)


class OutputReader:
    """The whole output topic, from the beginning, at one isolation level (no group)."""

    def __init__(self, bootstrap: str, topic: str, isolation: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        self.records: list[tuple[int, int, str, int]] = []    # (partition, offset, word, count)

    def drain(self, quiet_s: float = 0.3) -> "OutputReader":
        while True:
            message = self.consumer.poll(quiet_s)
            if message is None:
                return self
            if message.error():
                continue
            self.records.append((message.partition(), message.offset(), message.key().decode(),
                                 int(message.value())))

    def last(self) -> dict[str, int]:
        return {word: count for _, _, word, count in self.records}

    def per_word(self) -> dict[str, list[int]]:
        values = collections.defaultdict(list)
        for _, _, word, count in self.records:
            values[word].append(count)
        return values

    def close(self) -> None:
        self.consumer.close()


class WordCount:
    def __init__(self, bootstrap: str, application_id: str, input_topic: str, output_topic: str, state_dir: str,
                 *extra: str):
        self.app = JavaApp(APP, bootstrap, application_id, input_topic, output_topic, state_dir,
                           *STREAMS_SETTINGS, *extra, name=f"streams-{application_id}")

    def wait_running(self, after: int = 0) -> int:
        return self.app.wait_for_line("STATE RUNNING", 180, start=after)


def produce(bootstrap: str, topic: str, lines: list[str], pause_s: float = 0.0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for index, line in enumerate(lines):
        producer.produce(topic, line.encode(), key=str(index).encode())
        if pause_s and index % 20 == 19:
            producer.flush()
            time.sleep(pause_s)
    assert producer.flush(30) == 0


def assert_exact(reader: OutputReader, lines: list[str]) -> None:
    truth = collections.Counter(word for line in lines for word in line.split())

    def reached() -> bool:
        last = reader.drain().last()
        over = {word: (count, truth[word]) for word, count in last.items() if count > truth[word]}
        assert not over, f"counted twice (committed count, true count): {over}"
        return last == truth
    wait_until(reached, 180, "the committed output to reach the true counts", interval_s=0.5)
    for word, values in reader.per_word().items():
        # Each committed value is the count of a prefix of the input: never above the
        # truth, never going back (an aborted transaction's records are not read).
        assert values == sorted(values) and values[-1] == truth[word], (word, values, truth[word])


@contextlib.contextmanager
def app_runs(*readers):
    """A state directory and the list of WordCount runs that share it; on the way out every
    run and reader is closed and the directory removed, and on a failure each run's log
    tail is printed."""
    state_dir = tempfile.mkdtemp(prefix="tidelog-streams-")
    runs: list[WordCount] = []
    try:
        yield state_dir, runs
    except BaseException:
        for run in runs:
            print(f"--- {run.app.name}\n{run.app.log_tail(80)}")
        raise
    finally:
        for reader in readers:
            reader.close()
        for run in runs:
            run.app.close()
        shutil.rmtree(state_dir, ignore_errors=True)


def test_exactly_once_v2_word_count_across_a_kill_and_a_restart(cluster):
    b = cluster.bootstrap
    create_topics(b, "wc-lines", "wc-counts")
    committed = OutputReader(b, "wc-counts", "read_committed")
    uncommitted = OutputReader(b, "wc-counts", "read_uncommitted")
    with app_runs(committed, uncommitted) as (state_dir, runs):
        # Commits every 5 s, so that a kill lands inside an open transaction; no record cache,
        # so each new count is written at once, inside the open transaction (with Streams'
        # default cache the counts are flushed only at the commit, and the window in which
        # output is written but not committed lasts milliseconds: a CI run waited 120 s for one).
        settings = (b, "wc-kill", "wc-lines", "wc-counts", state_dir, "commit.interval.ms=5000",
                    "statestore.cache.max.bytes=0")
        batches = [lines_of_words(seed, 600) for seed in range(1, 6)]
        produced: list[str] = []
        runs.append(WordCount(*settings))
        runs[-1].wait_running()
        produce(b, "wc-lines", batches[0])
        produced += batches[0]
        wait_until(lambda: committed.drain().records, 120, "a first committed count")

        # A batch flows in slowly; the app is killed as soon as it has written output
        # that is not committed (an open transaction with records and input offsets).
        # The readers may lag the commit by a moment: if the kill came just after one,
        # nothing was aborted, and the next batch tries again.
        aborted = []
        for attempt, batch in enumerate(batches[1:4]):
            feeder = threading.Thread(target=produce, args=(b, "wc-lines", batch, 0.05))
            feeder.start()
            wait_until(lambda: len(uncommitted.drain(0.05).records) > len(committed.drain(0.05).records), 120,
                       "output not yet committed", interval_s=0.02)
            runs[-1].app.kill()
            feeder.join()
            produced += batch
            runs.append(WordCount(*settings))
            runs[-1].wait_running()
            assert_exact(committed, produced)
            # The killed transaction's records were aborted: read_uncommitted sees records
            # (partition, offset) that read_committed never returns.
            seen = {(p, o) for p, o, _, _ in committed.records}
            aborted = [r for r in uncommitted.drain().records if (r[0], r[1]) not in seen]
            print(f"kill {attempt + 1}: {len(aborted)} aborted output records, {len(seen)} committed")
            if aborted:
                break
        assert aborted, "no kill landed in an open transaction"

        produce(b, "wc-lines", batches[4])
        produced += batches[4]
        assert_exact(committed, produced)
        runs[-1].app.terminate()
        assert "CLOSED" in runs[-1].app.lines, runs[-1].app.lines[-10:]


def test_graceful_restart_internal_topics_and_offsets(cluster):
    b = cluster.bootstrap
    create_topics(b, "wcg-lines", "wcg-counts")
    committed = OutputReader(b, "wcg-counts", "read_committed")
    probe = Consumer({"bootstrap.servers": b, "group.id": "unused"})
    with app_runs(committed, probe) as (state_dir, runs):
        batches = [lines_of_words(seed, 400) for seed in (4, 5)]
        runs.append(WordCount(b, "wcg", "wcg-lines", "wcg-counts", state_dir))
        runs[-1].wait_running()
        produce(b, "wcg-lines", batches[0])
        assert_exact(committed, batches[0])
        runs[-1].app.terminate()
        assert "CLOSED" in runs[-1].app.lines, runs[-1].app.lines[-10:]

        # The restarted app reads its state from the local checkpoint, goes on from the
        # committed offsets and counts on from where it stopped.
        runs.append(WordCount(b, "wcg", "wcg-lines", "wcg-counts", state_dir))
        runs[-1].wait_running()
        produce(b, "wcg-lines", batches[1])
        assert_exact(committed, batches[0] + batches[1])

        # The internal topics Streams created, with the settings it asked for.
        admin = AdminClient({"bootstrap.servers": b})
        changelog, repartition = "wcg-counts-changelog", "wcg-by-word-repartition"
        topics = admin.list_topics(timeout=10).topics
        assert len(topics[changelog].partitions) == 3 and len(topics[repartition].partitions) == 3
        assert all(len(p.replicas) == 3 for p in topics[changelog].partitions.values())
        configs = {}
        for resource, future in admin.describe_configs([ConfigResource("topic", changelog),
                                                        ConfigResource("topic", repartition)]).items():
            configs[resource.name] = {k: v.value for k, v in future.result(30).items()}
        assert configs[changelog]["cleanup.policy"] == "compact"
        assert configs[repartition]["cleanup.policy"] == "delete"
        assert configs[repartition]["retention.ms"] == "-1"
        # Streams deletes what it consumed from the repartition topic (DeleteRecords).

        def repartition_purged():
            return sum(probe.get_watermark_offsets(TopicPartition(repartition, p), 10)[0] for p in range(3)) > 0
        wait_until(repartition_purged, 60, "the repartition topic's log start offset to move (DeleteRecords)")
        # The group's committed input offsets are the input's end.
        group = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("wcg")])["wcg"].result(30)
        input_offsets = {tp.partition: tp.offset for tp in group.topic_partitions if tp.topic == "wcg-lines"}
        ends = {p: probe.get_watermark_offsets(TopicPartition("wcg-lines", p), 10)[1] for p in range(3)}
        assert input_offsets == ends and sum(ends.values()) == 800 and all(ends.values())
        runs[-1].app.terminate()


def test_pipelined_transactional_batches_wait_behind_the_first_ones_verification(cluster, java):
    """What a Streams thread's producer does at each transaction's start: up to 5
    requests in flight to a leader while the first batch in a partition waits for the
    (other broker's) coordinator to confirm the partition is in the transaction (KIP-890).
    A later batch must not overtake it (Kafka reads no further request on a connection
    until it answered): it would be refused with OUT_OF_ORDER_SEQUENCE_NUMBER, which
    Streams takes for a fenced producer and answers by dropping its tasks."""
    b = cluster.bootstrap
    create_topics(b, "pipelined")
    java.call("producer.create", name="pipelined", config={
        "bootstrap.servers": b, "transactional.id": "pipelined", "linger.ms": "0", "batch.size": "0",
        "max.in.flight.requests.per.connection": "5"})
    java.call("producer.initTransactions", name="pipelined")
    for transaction in range(5):
        java.call("producer.beginTransaction", name="pipelined")
        sent = java.call("producer.send", name="pipelined", topic="pipelined", records=[
            {"value": f"{transaction}-{i}", "partition": i % 3} for i in range(300)])
        assert [r.get("error") for r in sent if "error" in r] == [], sent[:3]
        java.call("producer.commitTransaction", name="pipelined")
    java.call("producer.close", name="pipelined")
    reader = Consumer({"bootstrap.servers": b, "group.id": "unused", "isolation.level": "read_committed",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition("pipelined", p, 0) for p in range(3)])
    values = []
    try:
        def all_read():
            while (message := reader.poll(0.3)) is not None:
                if not message.error():
                    values.append(message.value().decode())
            return len(values) >= 1500
        wait_until(all_read, 60, "the 1,500 committed records")
    finally:
        reader.close()
    assert sorted(values) == sorted(f"{t}-{i}" for t in range(5) for i in range(300))
