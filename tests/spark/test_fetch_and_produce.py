"""The executor read and write paths against a real broker, without Spark."""

import random
import time
from collections import Counter

import pyarrow as pa
import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.spark.arrow_records import arrow_schema
from tidelog.spark.fetcher import DataLossError, read_range
from tidelog.spark.options import ReadOptions, SinkOptions
from tidelog.spark.producer import partition_for_key
from tidelog.spark.sink import MARKER_HEADER, WriteResult, write_task
from tidelog.spark import wire
from tidelog.spark.wire import ClientConfig, Connection, error_of


def read(admin, topic, start, end, **options) -> list[tuple[int, bytes]]:
    read_options = ReadOptions(client=admin.config, **options)
    table = pa.Table.from_batches(list(read_range(read_options, topic, 0, start, end)), schema=arrow_schema(False))
    return list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist()))


def test_reads_exactly_the_range_in_many_pipelined_fetches(admin):
    topic = admin.create("range")
    for chunk in range(20):   # 20 batches of 50 records
        admin.produce(topic, 0, [b"%04d" % (chunk * 50 + i) + b"x" * 200 for i in range(50)])
    got = read(admin, topic, 123, 877, max_partition_fetch_bytes=4096)
    assert [o for o, _ in got] == list(range(123, 877))
    assert all(v.startswith(b"%04d" % o) for o, v in got)
    assert read(admin, topic, 999, 1000) == [(999, b"0999" + b"x" * 200)]
    assert read(admin, topic, 5, 5) == []


def test_a_connections_receive_buffer_is_reused_without_changing_earlier_answers(admin, monkeypatch):
    """Responses are read into one buffer per connection (``Connection._read_frame``):
    answers decoded earlier keep their records while later, smaller and larger ones
    arrive, whether the buffer grows to take them or (past the size a connection
    keeps) they get a buffer of their own."""
    topic = admin.create("reuse")
    for chunk in range(8):
        admin.produce(topic, 0, [bytes([65 + chunk]) * (100 * (chunk + 1))] * 20)
    fetches = ((0, 3000), (20, 1 << 20), (40, 6000), (100, 1 << 20), (0, 1), (60, 20_000))
    expected = None
    for kept_max in (1024, 1 << 20):
        monkeypatch.setattr(wire, "RECEIVE_BUFFER_KEPT_MAX_BYTES", kept_max)
        connection = Connection(*wire.parse_bootstrap(admin.bootstrap)[0])
        try:
            small = len(connection._buffer)
            pending = [connection.send(ApiKey.FETCH, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                             "partition_max_bytes": max_bytes}]}]})
                for offset, max_bytes in fetches]          # all in flight at once
            answers = [connection.receive(c).responses[0].partitions[0].records for c in pending]
            largest = max(len(r) for r in answers)
            assert largest > small
            assert len(connection._buffer) == small if kept_max < largest else largest < len(connection._buffer) < largest + 100
        finally:
            connection.close()
        assert expected is None or [bytes(r) for r in answers] == expected
        expected = [bytes(r) for r in answers]
    assert [len(r) > 0 for r in expected] == [True] * len(fetches)
    values = [v for _, v in read(admin, topic, 0, 160)]
    assert values == [bytes([65 + i // 20]) * (100 * (i // 20 + 1)) for i in range(160)]


def test_deleted_offsets_fail_the_read_or_are_skipped_with_failondataloss_false(admin):
    topic = admin.create("deleted")
    admin.produce(topic, 0, [b"%d" % i for i in range(30)])
    admin.delete_records(topic, 0, 10)
    with pytest.raises(DataLossError, match=r"offsets \[4, 10\) of deleted-0 were deleted .*failOnDataLoss"):
        read(admin, topic, 4, 30)
    assert [o for o, _ in read(admin, topic, 4, 30, fail_on_data_loss=False)] == list(range(10, 30))


def test_a_deleted_topic_is_data_loss_at_once(admin):
    topic = admin.create("doomed")
    admin.produce(topic, 0, [b"x"] * 5)
    response = admin.cluster.any_connection().request(ApiKey.DELETE_TOPICS, {
        "topics": [{"name": topic}], "topic_names": [topic], "timeout": 10_000})
    assert error_of(response.responses[0].error_code).name == "NONE"
    started = time.monotonic()
    with pytest.raises(DataLossError, match="doomed-0 was deleted while offsets \\[2, 5\\) were still to be read"):
        read(admin, topic, 2, 5)
    assert read(admin, topic, 2, 5, fail_on_data_loss=False) == []
    assert time.monotonic() - started < 10


def test_read_follows_the_broker_through_a_restart(admin, broker):
    topic = admin.create("restart")
    for chunk in range(10):
        admin.produce(topic, 0, [b"r%d" % (chunk * 100 + i) for i in range(100)])
    options = ReadOptions(client=ClientConfig(broker.bootstrap, retry_backoff_ms=50), max_partition_fetch_bytes=2048)
    batches = read_range(options, topic, 0, 0, 1000)
    first = next(batches)
    broker.restart(clean=False)   # SIGKILL: the connection and the in-flight fetch are lost
    offsets = first.column("offset").to_pylist() + [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(1000))


def test_keyed_records_land_where_librdkafka_murmur2_puts_them(admin):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = admin.create("keyed", partitions=5)
    producer = confluent_kafka.Producer({"bootstrap.servers": admin.bootstrap, "partitioner": "murmur2_random"})
    keys = [b"key-%d" % i for i in range(200)] + [b"", b"a", b"ab", b"abc", bytes(range(256))]
    for key in keys:
        producer.produce(topic, key=key, value=b"v")
    assert producer.flush(30) == 0
    for partition in range(5):
        for record in admin.records(topic, partition):
            assert partition_for_key(record.key, 5) == partition, record.key


class FakeTaskContext:
    """What sink.write_task reads from Spark's TaskContext."""

    def __init__(self, query_id, batch_id, partition_id, attempt):
        self.properties = {"sql.streaming.queryId": query_id, "streaming.sql.batchId": str(batch_id)}
        self.partition_id, self.attempt = partition_id, attempt

    def getLocalProperty(self, name):
        return self.properties.get(name)

    def partitionId(self):
        return self.partition_id

    def attemptNumber(self):
        return self.attempt


def arrow_rows(rows, fail_after=None):
    """Input batches of 7 rows (value, key); raise after ``fail_after`` rows, like a dying task."""
    for i in range(0, len(rows), 7):
        if fail_after is not None and i >= fail_after:
            raise RuntimeError("executor lost")
        chunk = rows[i:i + 7]
        yield pa.RecordBatch.from_pydict({"value": [v for v, _ in chunk], "key": [k for _, k in chunk]},
                                         schema=pa.schema([("value", pa.binary()), ("key", pa.binary())]))


def test_a_replayed_stream_write_skips_what_earlier_attempts_wrote(admin, monkeypatch):
    topic = admin.create("replayed", partitions=3)
    rows = [(b"row-%03d" % i, None if i % 3 else b"k%d" % (i % 5)) for i in range(200)]
    rows += [(b"same", None)] * 4          # identical rows count as separate records
    options = SinkOptions(client=admin.config, topic=topic, batch_size_bytes=200, idempotent=True)

    def attempt(number, batch_rows, fail_after=None, batch_id=4):
        context = FakeTaskContext("7f0c1d2e-query", batch_id, partition_id=1, attempt=number)
        monkeypatch.setattr("tidelog.spark.sink.TaskContext.get", lambda: context)
        return write_task(options, arrow_rows(batch_rows, fail_after), idempotent=True)

    with pytest.raises(RuntimeError, match="executor lost"):
        attempt(0, rows, fail_after=84)
    written_before = sum(len(admin.records(topic, p)) for p in range(3))
    assert 0 < written_before < len(rows)
    shuffled = list(rows)
    random.Random(3).shuffle(shuffled)    # a replay may see its rows in another order
    result = attempt(1, shuffled)
    assert result == WriteResult(1, len(rows) - written_before, written_before)
    assert attempt(2, rows) == WriteResult(1, 0, len(rows))          # replay after a full write
    records = [r for p in range(3) for r in admin.records(topic, p)]
    assert Counter((r.value, r.key) for r in records) == Counter(rows)
    assert {r.headers[-1] for r in records} == {(MARKER_HEADER, b"7f0c1d2e-query:4:1")}
    assert attempt(0, rows[:10], batch_id=5) == WriteResult(1, 10, 0)   # the next batch writes normally
