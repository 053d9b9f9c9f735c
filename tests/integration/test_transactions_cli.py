"""`tidelog transactions …` (kafka-transactions.sh) as an operator runs it, against real brokers.

Real confluent-kafka transactional producers open, commit and abort
transactions on a three-broker cluster (so transactional ids have different
coordinators and partitions leaders other than the bootstrap broker); the CLI
runs as a separate process. A producer killed with kill -9 leaves a
transaction open, and ``abort`` ends it: read_committed consumers, stuck at the
last stable offset before, read past it after. A truly hanging transaction (a
transactional write the coordinator never heard of, which a broker without
KIP-890 verification accepts) is found by ``find-hanging`` and cleared by
``abort``, both with ``--start-offset`` and with an explicit producer id, epoch
and coordinator epoch.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.core.errors import ErrorCode
from tidelog.group.records import partition_for
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records.batch import build_batch
from tidelog.testing import Broker, Cluster, wait_until

TXN_PARTITIONS = 6
TXN_TIMEOUT_MS = 45_000


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, overrides={"transaction.state.log.num.partitions": str(TXN_PARTITIONS)}) as running:
        yield running


@pytest.fixture(scope="module")
def unverified():
    """A broker that appends transactional batches without asking the coordinator (KIP-890
    verification off, as on Kafka before 3.6): how hanging transactions came about."""
    with Broker(overrides={"transaction.partition.verification.enable": "false",
                           "transaction.state.log.num.partitions": "1"}) as running:
        yield running


# ---------------------------------------------------------------- helpers

def transactions(bootstrap: str, *args, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "transactions", "-b", bootstrap, *args],
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    if check:
        assert result.returncode == 0, result.stderr
    return result


def table(output: str) -> list[dict[str, str]]:
    """The rows of the CLI's table (columns are separated by two or more spaces)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[1:]]


def listed(bootstrap: str) -> dict[str, dict[str, str]]:
    return {row["TransactionalId"]: row for row in table(transactions(bootstrap, "list").stdout)}


def described(bootstrap: str, transactional_id: str) -> dict[str, str]:
    (row,) = table(transactions(bootstrap, "describe", "--transactional-id", transactional_id).stdout)
    return row


def producers(bootstrap: str, topic: str, partition: int) -> dict[int, dict[str, str]]:
    out = transactions(bootstrap, "describe-producers", "--topic", topic, "--partition", str(partition)).stdout
    return {int(row["ProducerId"]): row for row in table(out)}


def hanging(bootstrap: str, *args) -> list[dict[str, str]]:
    return table(transactions(bootstrap, "find-hanging", *args).stdout)


def new_topic(bootstrap: str, partitions: int, replicas: int) -> str:
    name = f"tcli-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replicas)])[name].result(30)
    wait_until(lambda: all(p.leader >= 0 for p in admin.list_topics(name, timeout=10).topics[name].partitions.values()),
               what=f"leaders for {name}")
    return name


def leader(bootstrap: str, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def through_another_broker(cluster, topic: str, partition: int) -> str:
    """A bootstrap address that is not the partition's leader: the CLI must find the leader."""
    led_by = leader(cluster.bootstrap, topic, partition)
    return f"127.0.0.1:{cluster.port(next(b.node_id for b in cluster.brokers if b.node_id != led_by))}"


def write_plain(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def read_committed(bootstrap: str, topic: str, partition: int, quiet_s: float = 2.0) -> tuple[list[bytes], int]:
    """What a read_committed confluent-kafka consumer reads from the start of the partition, and
    the latest offset it is told (ListOffsets with read_committed: the last stable offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tcli-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: list[bytes] = []
        last = time.monotonic()
        deadline = last + 60
        while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
            for message in consumer.consume(100, 0.3):
                if message.error() is None:
                    values.append(message.value())
                    last = time.monotonic()
        _, stable = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        return values, stable
    finally:
        consumer.close()


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tcli-hw", "isolation.level": "read_uncommitted"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def coordinators(bootstrap: str) -> dict[int, int]:
    """__transaction_state partition → its leader (the coordinator of the ids hashed there)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    state = admin.list_topics("__transaction_state", timeout=10).topics["__transaction_state"]
    return {index: p.leader for index, p in state.partitions.items()}


# ---------------------------------------------------------------- list, describe, describe-producers

def test_list_and_describe_follow_transactions_on_every_coordinator(cluster):
    topic = new_topic(cluster.bootstrap, 2, 3)
    prefix = f"tcli-{uuid.uuid4().hex[:6]}"
    first = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"{prefix}-warm",
                      "transaction.timeout.ms": TXN_TIMEOUT_MS})
    first.init_transactions(30)                     # creates __transaction_state
    wait_until(lambda: all(b >= 0 for b in coordinators(cluster.bootstrap).values()), what="coordinators")
    led_by = coordinators(cluster.bootstrap)
    # Ids whose coordinators are different brokers: each broker lists only its own.
    chosen: dict[int, str] = {}
    for i in range(200):
        candidate = f"{prefix}-{i}"
        chosen.setdefault(led_by[partition_for(candidate, TXN_PARTITIONS)], candidate)
    assert len(chosen) >= 2, chosen
    ids = sorted(chosen.values())
    expected_coordinator = {tid: led_by[partition_for(tid, TXN_PARTITIONS)] for tid in ids}
    clients = {tid: Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                              "transaction.timeout.ms": TXN_TIMEOUT_MS}) for tid in ids}
    for client in clients.values():
        client.init_transactions(30)

    before = listed(cluster.bootstrap)
    for tid in ids:
        assert before[tid]["TransactionState"] == "Empty"
        assert before[tid]["Coordinator"] == str(expected_coordinator[tid])
        empty = described(cluster.bootstrap, tid)
        assert (empty["TransactionState"], empty["CurrentTransactionStartTimeMs"], empty["TopicPartitions"]) == \
            ("Empty", "None", "-")

    opened_ms = int(time.time() * 1000)
    for n, (tid, client) in enumerate(sorted(clients.items())):
        client.begin_transaction()
        client.produce(topic, b"inside", partition=n % 2)
        client.flush(30)
    during = listed(cluster.bootstrap)
    for n, tid in enumerate(ids):
        row = during[tid]
        assert (row["TransactionState"], row["Coordinator"]) == ("Ongoing", str(expected_coordinator[tid]))
        assert row["ProducerId"] == before[tid]["ProducerId"]
        state = described(cluster.bootstrap, tid)
        assert state["CoordinatorId"] == str(expected_coordinator[tid])
        assert (state["TransactionalId"], state["ProducerId"], state["TransactionState"]) == \
            (tid, row["ProducerId"], "Ongoing")
        assert state["TransactionTimeoutMs"] == str(TXN_TIMEOUT_MS)
        assert state["TopicPartitions"] == f"{topic}-{n % 2}"
        assert opened_ms - 1000 <= int(state["CurrentTransactionStartTimeMs"]) <= int(time.time() * 1000)
        assert 0 <= int(state["TransactionDurationMs"]) < 60_000

    committed, aborted = ids[:-1], ids[-1]
    for tid in committed:
        clients[tid].commit_transaction(30)
    clients[aborted].abort_transaction(30)
    final_state = {tid: "CompleteAbort" if tid == aborted else "CompleteCommit" for tid in ids}
    preparing = {tid: "PrepareAbort" if tid == aborted else "PrepareCommit" for tid in ids}

    def completed() -> bool:
        # EndTxn is answered once PrepareCommit/PrepareAbort is written (as Kafka's
        # coordinator answers); the markers and the Complete* state follow.
        states = {tid: listed(cluster.bootstrap)[tid]["TransactionState"] for tid in ids}
        assert all(states[tid] in (preparing[tid], final_state[tid]) for tid in ids), states
        return all(states[tid] == final_state[tid] for tid in ids)
    wait_until(completed, 30, "every transaction to complete", interval_s=0.2)
    after = listed(cluster.bootstrap)
    for tid in ids:
        state = described(cluster.bootstrap, tid)
        final = "CompleteAbort" if tid == aborted else "CompleteCommit"
        assert after[tid]["TransactionState"] == state["TransactionState"] == final
        assert state["TopicPartitions"] == "-"                       # no open transaction
        assert state["ProducerEpoch"] == "0"


def test_describe_producers_shows_the_open_transactions_first_offset(cluster):
    topic = new_topic(cluster.bootstrap, 1, 3)
    elsewhere = through_another_broker(cluster, topic, 0)
    write_plain(cluster.bootstrap, topic, 0, [b"plain-0", b"plain-1", b"plain-2"])      # offsets 0-2
    tid = f"tcli-{uuid.uuid4().hex[:6]}"
    client = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
    client.init_transactions(30)
    client.begin_transaction()
    client.produce(topic, b"txn-0", partition=0)                                          # offsets 3-4
    client.produce(topic, b"txn-1", partition=0)
    client.flush(30)
    producer_id = int(described(cluster.bootstrap, tid)["ProducerId"])

    open_ = producers(elsewhere, topic, 0)[producer_id]
    assert open_["CurrentTransactionStartOffset"] == "3"
    assert (open_["ProducerEpoch"], open_["LastSequence"], open_["LatestCoordinatorEpoch"]) == ("0", "1", "-1")
    assert abs(int(open_["LastTimestamp"]) - time.time() * 1000) < 60_000

    client.commit_transaction(30)
    closed = producers(elsewhere, topic, 0)[producer_id]
    assert closed["CurrentTransactionStartOffset"] == "-1"
    assert int(closed["LatestCoordinatorEpoch"]) >= 0                  # the COMMIT marker's
    assert read_committed(cluster.bootstrap, topic, 0) == ([b"plain-0", b"plain-1", b"plain-2", b"txn-0", b"txn-1"], 6)


# ---------------------------------------------------------------- abort

KILLED_WRITER = """
import sys
from confluent_kafka import Producer
bootstrap, topic, tid = sys.argv[1:]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 600000})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(5):
    producer.produce(topic, b"doomed-%d" % i, partition=0)
producer.flush(30)
print("open", flush=True)
sys.stdin.read()                      # until killed
"""


def test_abort_ends_the_open_transaction_of_a_killed_producer(cluster):
    topic = new_topic(cluster.bootstrap, 1, 3)
    elsewhere = through_another_broker(cluster, topic, 0)
    write_plain(cluster.bootstrap, topic, 0, [b"before-0", b"before-1", b"before-2"])   # offsets 0-2
    tid = f"tcli-{uuid.uuid4().hex[:6]}"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, cluster.bootstrap, topic, tid],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"                             # offsets 3-7
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(10)
    write_plain(cluster.bootstrap, topic, 0, [b"after-0", b"after-1"])                   # offsets 8-9
    producer_id = int(described(cluster.bootstrap, tid)["ProducerId"])

    # Stuck: read_committed readers stop at the open transaction (the LSO), 10 records written.
    assert read_committed(cluster.bootstrap, topic, 0) == ([b"before-0", b"before-1", b"before-2"], 3)
    assert high_watermark(cluster.bootstrap, topic, 0) == 10
    assert producers(elsewhere, topic, 0)[producer_id]["CurrentTransactionStartOffset"] == "3"
    # The coordinator still tracks it (it would abort it after transaction.timeout.ms): not hanging.
    assert described(cluster.bootstrap, tid)["TransactionState"] == "Ongoing"
    assert hanging(elsewhere, "--topic", topic, "--max-transaction-timeout", "0") == []

    done = transactions(elsewhere, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
    assert f"producer {producer_id} (epoch 0) in {topic}-0 starting at offset 3" in done.stdout

    # The marker is at offset 10: the LSO is past it and the doomed records are skipped.
    values, stable = read_committed(cluster.bootstrap, topic, 0)
    assert values == [b"before-0", b"before-1", b"before-2", b"after-0", b"after-1"]
    assert stable == high_watermark(cluster.bootstrap, topic, 0) == 11
    assert producers(elsewhere, topic, 0)[producer_id]["CurrentTransactionStartOffset"] == "-1"
    again = transactions(elsewhere, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3",
                         check=False)
    assert again.returncode == 1
    assert f"no open transaction starts at offset 3 in {topic}-0 (it has no open transaction)" in again.stderr


# ---------------------------------------------------------------- a hanging transaction

async def _write_behind_the_coordinators_back(bootstrap: str, topic: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Two transactional writes no coordinator will ever end: partition 0 by the producer of
    transactional id "<topic>-hang", which never added the partition to a transaction (the
    coordinator has it Empty); partition 1 by a producer id no coordinator knows."""
    host, _, port = bootstrap.rpartition(":")
    connection = await KafkaConnection.connect(host, int(port))
    try:
        async def init(transactional_id):
            while True:
                answer = await connection.request(ApiKey.INIT_PRODUCER_ID, {
                    "transactional_id": transactional_id, "transaction_timeout": 60_000,
                    "producer_id": -1, "producer_epoch": -1})
                error = ErrorCode(answer.error_code.value)
                if error == ErrorCode.NONE:
                    return int(answer.producer_id), int(answer.producer_epoch)
                assert error in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 ErrorCode.NOT_COORDINATOR), error
                await asyncio.sleep(0.2)

        async def write(partition, transactional_id, producer):
            batch = build_batch([b"stray-0", b"stray-1"], producer_id=producer[0], producer_epoch=producer[1],
                                base_sequence=0, is_transactional=True, timestamp_ms=int(time.time() * 1000))
            answer = await connection.request(ApiKey.PRODUCE, {
                "transactional_id": transactional_id, "acks": -1, "timeout": 5000, "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}, version=9)
            assert ErrorCode(answer.responses[0].partition_responses[0].error_code.value) == ErrorCode.NONE
        await connection.request(ApiKey.FIND_COORDINATOR, {"key": f"{topic}-hang", "key_type": 1,
                                                           "coordinator_keys": [f"{topic}-hang"]})
        known = await init(f"{topic}-hang")
        unknown = await init(None)
        await write(0, f"{topic}-hang", known)
        await write(1, f"{topic}-ghost", unknown)
        return known, unknown
    finally:
        connection.close()


def test_find_hanging_and_abort_transactions_no_coordinator_will_end(unverified):
    bootstrap = unverified.bootstrap
    topic = new_topic(bootstrap, 2, 1)
    (known_id, known_epoch), (unknown_id, unknown_epoch) = asyncio.run(
        _write_behind_the_coordinators_back(bootstrap, topic))
    for partition in (0, 1):
        write_plain(bootstrap, topic, partition, [b"plain-0", b"plain-1"])            # offsets 2-3
    assert read_committed(bootstrap, topic, 0, quiet_s=1.0) == ([], 0)
    state = described(bootstrap, f"{topic}-hang")
    assert (state["ProducerId"], state["TransactionState"], state["TopicPartitions"]) == (str(known_id), "Empty", "-")

    assert hanging(bootstrap, "--topic", topic) == []              # younger than 15 minutes: not yet suspect
    time.sleep(0.05)
    found = hanging(bootstrap, "--max-transaction-timeout", "0")  # every topic
    assert [(r["Topic"], r["Partition"], r["ProducerId"], r["ProducerEpoch"], r["CoordinatorEpoch"],
             r["StartOffset"], r["Duration(min)"]) for r in found] == [
        (topic, "0", str(known_id), str(known_epoch), "-1", "0", "0"),
        (topic, "1", str(unknown_id), str(unknown_epoch), "-1", "0", "0")]
    only = hanging(bootstrap, "--topic", topic, "--partition", "1", "--max-transaction-timeout", "0")
    assert [(r["Partition"], r["ProducerId"]) for r in only] == [("1", str(unknown_id))]

    transactions(bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    done = transactions(bootstrap, "abort", "--topic", topic, "--partition", "1", "--producer-id", str(unknown_id),
                        "--producer-epoch", str(unknown_epoch), "--coordinator-epoch", "-1")
    assert f"producer {unknown_id} (epoch {unknown_epoch}) in {topic}-1" in done.stdout
    assert "coordinator epoch 0" in done.stdout
    assert hanging(bootstrap, "--max-transaction-timeout", "0") == []
    for partition in (0, 1):
        assert read_committed(bootstrap, topic, partition) == ([b"plain-0", b"plain-1"], 5)   # marker at 4


# ---------------------------------------------------------------- bad input

def test_bad_input_gets_a_clear_error(unverified):
    bootstrap = unverified.bootstrap
    topic = new_topic(bootstrap, 2, 1)
    write_plain(bootstrap, topic, 0, [b"plain"])
    missing = f"tcli-missing-{uuid.uuid4().hex[:6]}"

    def fails(*args, says: str, code: int = 1, server: str = bootstrap) -> None:
        result = transactions(server, *args, check=False)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert says in result.stderr, (args, result.stderr)

    fails("describe", "--transactional-id", missing, says="TRANSACTIONAL_ID_NOT_FOUND")
    fails("describe", "--transactional-id", missing, says=f"transactional id {missing!r} does not exist")
    fails("describe-producers", "--topic", missing, "--partition", "0",
          says=f"topic {missing!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
    fails("describe-producers", "--topic", topic, "--partition", "9",
          says=f"topic {topic!r} has no partition 9 (it has partitions 0-1)")
    fails("abort", "--topic", missing, "--partition", "0", "--start-offset", "0", says="does not exist")
    fails("abort", "--topic", topic, "--partition", "0", "--start-offset", "0",
          says=f"no open transaction starts at offset 0 in {topic}-0 (it has no open transaction)")
    fails("abort", "--topic", topic, "--partition", "0", says="with --start-offset")
    fails("abort", "--topic", topic, "--partition", "0", "--producer-id", "7",
          says="missing --producer-epoch, --coordinator-epoch")
    fails("abort", "--topic", topic, "--partition", "0", "--start-offset", "0", "--producer-id", "7",
          says="not both")
    fails("abort", "--topic", topic, "--partition", "0", "--producer-id", "-5", "--producer-epoch", "0",
          "--coordinator-epoch", "0", says="out of range")
    fails("find-hanging", "--topic", missing, says="does not exist")
    fails("find-hanging", "--partition", "0", says="--partition needs --topic")
    fails("find-hanging", "--topic", topic, "--max-transaction-timeout", "-1", says="cannot be negative")
    fails("describe-producers", "--topic", topic, "--partition", "zero", says="invalid int value", code=2)
    fails("list", says="cannot connect to 127.0.0.1:1", server="127.0.0.1:1")
    fails("list", says="expected HOST:PORT", server="no-port")
    fails("list", "--command-config", "/nonexistent/client.properties", says="--command-config")
