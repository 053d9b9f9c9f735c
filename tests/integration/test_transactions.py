"""Transactions with real clients against real brokers: commit and abort as
read_committed and read_uncommitted consumers see them, zombie fencing, and a
consume-transform-produce loop killed with kill -9 that still writes every
output exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

WORKER = os.path.join(os.path.dirname(__file__), "eos_worker.py")


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
          quiet_s: float = 2.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    last = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
        for message in consumer.consume(1000, 0.3):
            if message.error() is None:
                values.append(message.value())
                last = time.monotonic()
        if expected is not None and len(values) >= expected and time.monotonic() - last > 0.5:
            break
    consumer.close()
    return values


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3) as cluster:
        yield cluster


def test_committed_records_are_visible_to_read_committed_and_aborted_ones_only_to_read_uncommitted(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-basic", 2, 3)])["txn-basic"].result(15)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "basic"})
    producer.init_transactions(30)
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(50):
            producer.produce("txn-basic", f"{'c' if commit else 'a'}{round_}-{i}".encode(), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    committed = _read(cluster.bootstrap, "txn-basic", 2, "read_committed", expected=150)
    everything = _read(cluster.bootstrap, "txn-basic", 2, "read_uncommitted", expected=250)
    assert sorted(committed) == sorted(f"c{r}-{i}".encode() for r in (0, 2, 4) for i in range(50))
    assert len(everything) == 250 and all(v[:1] in (b"c", b"a") for v in everything)


def test_an_open_transaction_holds_read_committed_readers_back(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-open", 1, 3)])["txn-open"].result(15)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "open"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-open", b"inside", partition=0)
    producer.flush(30)
    plain.produce("txn-open", b"after", partition=0)
    plain.flush(30)
    assert _read(cluster.bootstrap, "txn-open", 1, "read_committed") == []          # stopped at the LSO
    assert _read(cluster.bootstrap, "txn-open", 1, "read_uncommitted") == [b"inside", b"after"]
    assert "LastStableOffset: 0" in _describe(cluster, "txn-open")                   # HW 2, LSO 0
    assert [p["current_txn_start_offset"] for p in _producers(cluster, "txn-open") if p["open"]] == [0]
    producer.commit_transaction(30)
    assert _read(cluster.bootstrap, "txn-open", 1, "read_committed", expected=2) == [b"inside", b"after"]
    wait_until(lambda: "LastStableOffset: 3" in _describe(cluster, "txn-open"), what="the LSO past the marker")


def _producers(cluster, topic: str) -> list[dict]:
    """DescribeProducers on the partition's leader (what kafka-transactions.sh find-hanging asks)."""
    import asyncio

    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    async def ask():
        connection = await KafkaConnection.connect("127.0.0.1", cluster.port(leader))
        try:
            response = await connection.request(ApiKey.DESCRIBE_PRODUCERS, {
                "topics": [{"name": topic, "partition_indexes": [0]}]})
        finally:
            connection.close()
        partition = response.topics[0].partitions[0]
        assert partition.error_code.value == 0
        return [{"producer_id": int(p.producer_id), "current_txn_start_offset": int(p.current_txn_start_offset),
                 "open": int(p.current_txn_start_offset) >= 0} for p in partition.active_producers]
    return asyncio.run(ask())


def _describe(cluster, topic: str) -> str:
    """``tidelog topics describe`` as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "topics", "-b", cluster.bootstrap,
                           "describe", topic], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_second_instance_fences_the_first(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-zombie", 1, 3)])["txn-zombie"].result(15)
    zombie = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "zombie"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("txn-zombie", b"from the zombie", partition=0)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "zombie"})
    successor.init_transactions(30)                      # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("txn-zombie", b"from the successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(30)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort()
    assert _read(cluster.bootstrap, "txn-zombie", 1, "read_committed", expected=1) == [b"from the successor"]


def test_a_consume_transform_produce_loop_killed_at_random_writes_every_output_exactly_once(cluster):
    count, partitions = 3000, 2
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for topic in ("eos-in", "eos-out"):
        admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(15)
    source = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(count):
        source.produce("eos-in", f"record-{i:05d}".encode(), partition=i % partitions)
    assert source.flush(30) == 0
    rng = random.Random(7)
    argv = [sys.executable, WORKER, cluster.bootstrap, "eos-in", "eos-out", "eos-group", "eos-worker"]
    kills = 0
    for _ in range(3):                                   # run, kill -9 at a random point, restart
        worker = subprocess.Popen(argv + ["30"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        wait_until(lambda: worker.stdout.readline().startswith("committed") or worker.poll() is not None,
                   timeout_s=60, what="the worker committing a transaction")
        time.sleep(rng.uniform(0.1, 1.5))
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
            kills += 1
        worker.wait(10)
    final = subprocess.run(argv + ["6"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    assert final.returncode == 0, final.stderr[-2000:]
    assert kills >= 1
    outputs = _read(cluster.bootstrap, "eos-out", partitions, "read_committed", expected=count)
    expected = sorted(f"RECORD-{i:05d}".encode() for i in range(count))
    duplicates = len(outputs) - len(set(outputs))
    assert duplicates == 0, f"{duplicates} outputs written twice"
    assert sorted(outputs) == expected


def test_kafka_python_and_aiokafka_transactional_producers(cluster):
    """kafka-python 3 and aiokafka commit and abort against the same coordinator."""
    import asyncio

    import aiokafka
    import kafka
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-clients", 1, 3)])["txn-clients"].result(15)
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="kafka-python-txn")
    producer.init_transactions()
    for commit in (True, False):
        producer.begin_transaction()
        producer.send("txn-clients", f"kafka-python-{'commit' if commit else 'abort'}".encode(), partition=0)
        if commit:
            producer.commit_transaction()
        else:
            producer.flush()
            producer.abort_transaction()
    producer.close()

    async def with_aiokafka():
        aio = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="aiokafka-txn")
        await aio.start()
        try:
            for commit in (True, False):
                await aio.begin_transaction()
                await aio.send_and_wait("txn-clients", f"aiokafka-{'commit' if commit else 'abort'}".encode(),
                                        partition=0)
                if commit:
                    await aio.commit_transaction()
                else:
                    await aio.abort_transaction()
        finally:
            await aio.stop()
    asyncio.run(with_aiokafka())
    committed = _read(cluster.bootstrap, "txn-clients", 1, "read_committed", expected=2)
    everything = _read(cluster.bootstrap, "txn-clients", 1, "read_uncommitted", expected=4)
    assert committed == [b"kafka-python-commit", b"aiokafka-commit"]
    assert sorted(everything) == sorted([b"kafka-python-commit", b"kafka-python-abort", b"aiokafka-commit",
                                         b"aiokafka-abort"])


@pytest.mark.parametrize("when", ["before-commit", "after-prepare"])
def test_the_transaction_completes_when_its_coordinator_is_killed(when):
    """kill -9 of the broker leading the transactional id's __transaction_state
    partition, with records written but the transaction not committed (the new
    coordinator gets the commit), or right after EndTxn (the new coordinator finds
    the decision in the log and writes the markers)."""
    from tidelog.group.records import partition_for
    with Cluster(brokers=3, overrides={"broker.session.timeout.ms": "4000",
                                       "broker.heartbeat.interval.ms": "500"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("txn-failover", 2, 3)])["txn-failover"].result(15)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "failover",
                             "transaction.timeout.ms": 60000})
        producer.init_transactions(30)
        index = partition_for("failover", 50)
        coordinator = admin.list_topics("__transaction_state", timeout=10).topics[
            "__transaction_state"].partitions[index].leader
        producer.begin_transaction()
        for i in range(100):
            producer.produce("txn-failover", f"v{i}".encode(), partition=i % 2)
        producer.flush(30)
        if when == "before-commit":
            cluster.kill(coordinator)
            producer.commit_transaction(90)
        else:
            producer.commit_transaction(30)
            cluster.kill(coordinator)
        values = _read(f"127.0.0.1:{cluster.port(next(n for n in (1, 2, 3) if n != coordinator))}",
                       "txn-failover", 2, "read_committed", expected=100, quiet_s=5.0)
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(100))
        new_coordinator = admin.list_topics("__transaction_state", timeout=10).topics[
            "__transaction_state"].partitions[index].leader
        assert new_coordinator not in (-1, coordinator)


def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(cluster):
    """KIP-890 part 1: the leader asks the coordinator (itself or, over the network,
    another broker) before appending a transaction's first batch; a write to a partition
    the producer never added (a late or zombie write) is refused instead of opening a
    transaction nobody will end — on partitions led by the coordinator and by others."""
    import asyncio

    from tidelog.group.records import partition_for
    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection
    from tidelog.records.batch import build_batch
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-verify", 3, 3)])["txn-verify"].result(15)
    warm = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "verify"})
    warm.init_transactions(30)                      # creates the coordinator's state for "verify"
    coordinator = admin.list_topics("__transaction_state", timeout=10).topics[
        "__transaction_state"].partitions[partition_for("verify", 50)].leader
    leaders = {p: m.leader for p, m in admin.list_topics("txn-verify", timeout=10).topics["txn-verify"].partitions.items()}

    async def scenario():
        connections = {}

        async def to(broker):
            if broker not in connections:
                connections[broker] = await KafkaConnection.connect("127.0.0.1", cluster.port(broker))
            return connections[broker]
        init = await (await to(coordinator)).request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": "verify", "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
        pid, epoch = int(init.producer_id), int(init.producer_epoch)

        async def produce(partition, sequence, version=9):
            batch = build_batch([b"value"], producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                is_transactional=True)
            response = await (await to(leaders[partition])).request(ApiKey.PRODUCE, {
                "transactional_id": "verify", "acks": -1, "timeout": 5000, "topic_data": [
                    {"name": "txn-verify", "partition_data": [{"index": partition, "records": batch}]}]},
                version=version)
            return ErrorCode(response.responses[0].partition_responses[0].error_code.value)
        refused = {p: await produce(p, 0) for p in leaders}
        # Produce v11 knows TRANSACTION_ABORTABLE (KIP-890), what Kafka answers it instead.
        refused.update({("v11", p): await produce(p, 0, version=11) for p in leaders})
        await (await to(coordinator)).request(ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": "verify", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "txn-verify", "partitions": list(leaders)}]}, version=3)
        accepted = {p: await produce(p, 0) for p in leaders}
        await (await to(coordinator)).request(ApiKey.END_TXN, {
            "transactional_id": "verify", "producer_id": pid, "producer_epoch": epoch, "committed": False})
        for connection in connections.values():
            connection.close()
        return refused, accepted

    from tidelog.core.errors import ErrorCode
    refused, accepted = asyncio.run(scenario())
    assert {e for key, e in refused.items() if key not in leaders} == {ErrorCode.TRANSACTION_ABORTABLE}, refused
    assert {e for key, e in refused.items() if key in leaders} == {ErrorCode.INVALID_TXN_STATE}, refused
    assert set(accepted.values()) == {ErrorCode.NONE}, accepted
    # (Leaders are spread over the three brokers, so partitions led by the coordinator
    # and by other brokers are both covered; the assertions hold for either kind.)
    # Nothing of the refused writes is in the logs: the aborted transaction held 3 records in all.
    values = _read(cluster.bootstrap, "txn-verify", 3, "read_uncommitted", expected=3)
    assert values == [b"value"] * 3


def test_transactional_batches_without_a_transactional_id_are_refused(cluster):
    """Kafka refuses the whole request (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): without the id
    no coordinator checks the partition, and the batch would open a transaction that nothing
    ever ends, holding read_committed readers back."""
    import asyncio

    from tidelog.core.errors import ErrorCode
    from tidelog.protocol.api_keys import ApiKey
    from tidelog.protocol.client import KafkaConnection
    from tidelog.records.batch import build_batch
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-no-id", 1, 3)])["txn-no-id"].result(15)
    leader = admin.list_topics("txn-no-id", timeout=10).topics["txn-no-id"].partitions[0].leader

    async def produce(batch: bytes) -> ErrorCode:
        connection = await KafkaConnection.connect("127.0.0.1", cluster.port(leader))
        try:
            response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": "txn-no-id", "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
            return ErrorCode(response.responses[0].partition_responses[0].error_code.value)
        finally:
            connection.close()
    transactional = build_batch([b"hidden"], producer_id=4242, producer_epoch=0, base_sequence=0,
                                is_transactional=True)
    assert asyncio.run(produce(transactional)) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert asyncio.run(produce(build_batch([b"plain"]))) == ErrorCode.NONE
    # Nothing was appended, and no open transaction holds read_committed readers below the plain record.
    assert _read(cluster.bootstrap, "txn-no-id", 1, "read_committed", expected=1) == [b"plain"]
    assert _read(cluster.bootstrap, "txn-no-id", 1, "read_uncommitted", expected=1) == [b"plain"]


def test_a_fenced_producers_produce_is_answered_invalid_producer_epoch_and_is_fatal(cluster):
    """Kafka answers a fenced transactional producer's Produce INVALID_PRODUCER_EPOCH (the
    coordinator's PRODUCER_FENCED from the KIP-890 verification is mapped so, and the
    partition's own epoch check raises the same). librdkafka takes 47 on a transactional
    Produce for "fenced by a newer instance", a fatal error; PRODUCER_FENCED there would be
    only abortable, and the zombie could go on."""
    from confluent_kafka import KafkaError
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("txn-fenced-produce", 1, 3)])["txn-fenced-produce"].result(15)
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": "fenced-produce"}
    first = Producer(config)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("txn-fenced-produce", b"before", partition=0)
    first.flush(30)
    second = Producer(config)
    second.init_transactions(30)                    # bumps the epoch, aborts the first's transaction
    first.produce("txn-fenced-produce", b"zombie", partition=0)
    # The delivery failure is fatal at once; flush raises it (a delivery callback would see
    # INVALID_PRODUCER_EPOCH, but confluent-kafka calls it with the fatal error pending).
    with pytest.raises(KafkaException) as flushed:
        first.flush(30)
    error = flushed.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    assert "Producer attempted an operation with an old epoch" in error.str(), error   # 47's text
    with pytest.raises(KafkaException) as committed:
        first.commit_transaction(30)
    assert committed.value.args[0].fatal(), committed.value.args[0]
    assert _read(cluster.bootstrap, "txn-fenced-produce", 1, "read_committed") == []
