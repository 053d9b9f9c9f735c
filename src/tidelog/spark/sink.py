"""The ``tidelog`` sink: Spark batch and streaming writes to tidelog topics.

Theory of operation. Each Spark task converts its Arrow batches into records
(``value`` required; ``key``, ``headers``, ``topic`` (column or option; the
option wins) and ``partition`` optional), picks a partition (the column, else
Kafka's murmur2 of the key, else a spread described below) and hands them to
``producer.Producer``, acks=all by default.

Batch writes are at least once, like Spark's Kafka sink: a retried task writes
its records again.

Streaming writes (``idempotentWrites``, default true) make each
(query, micro-batch, Spark partition) write idempotent on replay:

1. every record carries the header ``tidelog.spark.write`` =
   ``<queryId>:<batchId>:<partitionId>``;
2. before writing, the task reads the query's control topic
   (``_tidelog-spark-sink-<queryId>``, one partition) back from its end to the
   previous micro-batch, collecting the start times of earlier attempts of the
   same (batch, partition); then it appends its own start marker there;
3. if there were earlier attempts (a task retry, or a restarted query
   re-running its last uncommitted micro-batch), then for each partition it
   writes to, it reads the records written since the first attempt began
   (ListOffsets by that time, less a clock-skew margin) and counts those that
   carry its header by content (key, value and headers). Each row whose content
   is already counted is skipped instead of written.

So a replay writes exactly the rows earlier attempts did not, whatever order
Spark gives them in this time. docs/spark.md states the conditions.

Streaming writes with ``transactional=true`` use Kafka transactions instead
(``spark.transactions``): a task's transactional id is
``tidelog-spark-<queryId>-<partitionId>``; InitProducerId fences its earlier
attempts and closes their transactions; the task then reads the control topic
(every batch, markers included) to see whether an earlier attempt of this
(batch, partition) *committed*: its control record followed, from the same
producer id, by a COMMIT marker. If so it writes nothing; otherwise it writes
its rows and its control record in one transaction and commits it. Readers with
``isolation.level=read_committed`` see each task's output all at once, exactly
once, or not at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from tidelog.records import SimpleRecord
from tidelog.records.batch import CONTROL_COMMIT, iter_records, read_control
from tidelog.spark.fetcher import read_batches, read_records
from tidelog.spark.options import CONTROL_TOPIC_PREFIX, OptionError, ReadOptions, SinkOptions
from tidelog.spark.producer import Producer, partition_for_key
from tidelog.spark.transactions import Transaction
from tidelog.spark.wire import EARLIEST, LATEST, Cluster

logger = logging.getLogger("tidelog.spark")
TopicPartition = tuple[str, int]

MARKER_HEADER = "tidelog.spark.write"
CLOCK_SKEW_MARGIN_MS = 120_000                       # executor clocks may disagree by this much
CONTROL_TOPIC_RETENTION_MS = 7 * 24 * 3600 * 1000    # replays older than this are not deduplicated
_CONTROL_SCAN_FIRST = 256                            # markers read back first, doubling after


@dataclass
class WriteResult(WriterCommitMessage):
    partition_id: int
    records_written: int
    records_skipped: int    # already written by an earlier attempt


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Fail at planning time, with the column's name, if the input cannot be written."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("the tidelog sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise OptionError(f"column {name!r} must be string or binary, not {types[name].simpleString()}")
    if options.topic is None and "topic" not in types:
        raise OptionError("set the option 'topic' or give the DataFrame a 'topic' column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"column 'topic' must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"column 'partition' must be int, not {types['partition'].simpleString()}")
    if "headers" in types:
        headers = types["headers"]
        ok = isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType) and \
            [(f.name, type(f.dataType)) for f in headers.elementType.fields] == [("key", StringType),
                                                                                ("value", BinaryType)]
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: binary>>")


def fingerprint(key: bytes | None, value: bytes | None, headers) -> int:
    """A stable 64-bit digest of a record's content (not Python's per-process hash)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (key, value):
        digest.update(b"\x00" if part is None else b"\x01" + len(part).to_bytes(4, "big") + part)
    for name, data in headers:
        raw = name.encode("utf-8")
        digest.update(len(raw).to_bytes(4, "big") + raw)
        digest.update(b"\x00" if data is None else b"\x01" + len(data).to_bytes(4, "big") + data)
    return int.from_bytes(digest.digest(), "big")


def _as_bytes(column: pa.Array | None, n: int) -> list:
    if column is None:
        return [None] * n
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def rows_of(batches: Iterator[pa.RecordBatch], topic_option: str | None) -> Iterator[tuple]:
    """(topic, partition or None, key, value, headers) per input row."""
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        column = lambda name: batch.column(name) if name in names else None  # noqa: E731
        keys, values = _as_bytes(column("key"), n), _as_bytes(column("value"), n)
        topics = [topic_option] * n if topic_option else column("topic").to_pylist()
        partitions = column("partition").to_pylist() if "partition" in names else [None] * n
        headers = column("headers").to_pylist() if "headers" in names else [None] * n
        for i in range(n):
            row_headers = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
            yield topics[i], partitions[i], keys[i], values[i], row_headers


class ReplayGuard:
    """What earlier attempts of this (query, batch, partition) wrote."""

    def __init__(self, cluster: Cluster, read: ReadOptions, query_id: str, batch_id: int, partition_id: int,
                 attempt: int):
        self.cluster, self.read = cluster, read
        self.query_id, self.batch_id, self.partition_id, self.attempt = query_id, batch_id, partition_id, attempt
        self.marker = f"{query_id}:{batch_id}:{partition_id}".encode()
        self.control = (CONTROL_TOPIC_PREFIX + query_id, 0)
        self.anchor_ms: int | None = None              # set when earlier attempts exist
        self._written: dict[TopicPartition, Counter] = {}

    def start(self) -> None:
        """Find earlier attempts, then record this one (in that order)."""
        created = self.cluster.create_topic(self.control[0], 1, configs={
            "retention.ms": str(CONTROL_TOPIC_RETENTION_MS), "cleanup.policy": "delete"})
        self.cluster.wait_for_leaders(self.control[0])
        earlier = [] if created else self._earlier_attempt_times()
        now_ms = int(time.time() * 1000)
        producer = Producer(self.cluster, _control_sink_options(self.read), exactly_once_attempts=False)
        producer.append(self.control, SimpleRecord(
            json.dumps({"batch": self.batch_id, "partition": self.partition_id, "attempt": self.attempt,
                        "time_ms": now_ms}).encode(),
            key=f"{self.batch_id}:{self.partition_id}".encode()))
        producer.flush()
        if earlier:
            self.anchor_ms = min(earlier) - CLOCK_SKEW_MARGIN_MS
            logger.warning("tidelog sink: batch %d partition %d of query %s was attempted before (%d time(s)); "
                        "skipping the records those attempts wrote", self.batch_id, self.partition_id,
                        self.query_id, len(earlier))

    @property
    def replaying(self) -> bool:
        return self.anchor_ms is not None

    def _earlier_attempt_times(self) -> list[int]:
        """Read the control topic backwards until a marker of an earlier batch."""
        bounds = self.cluster.list_offsets({self.control: EARLIEST})[self.control], \
            self.cluster.list_offsets({self.control: LATEST})[self.control]
        low, stop = bounds
        window = _CONTROL_SCAN_FIRST
        times: list[int] = []
        while stop > low:
            begin = max(low, stop - window)
            older = False
            for record in read_records(self.cluster, self.read, *self.control, begin, stop):
                marker = json.loads(record.value)
                if marker["batch"] == self.batch_id and marker["partition"] == self.partition_id:
                    times.append(int(marker["time_ms"]))
                elif marker["batch"] < self.batch_id:
                    older = True
            if older:
                break
            stop, window = begin, window * 2
        return times

    def already_written(self, tp: TopicPartition, digest: int) -> bool:
        """True (and counted off) if an earlier attempt wrote a record with this content to ``tp``."""
        written = self._written.get(tp)
        if written is None:
            written = self._written[tp] = self._scan(tp)
        if written[digest] > 0:
            written[digest] -= 1
            return True
        return False

    def _scan(self, tp: TopicPartition) -> Counter:
        found: Counter = Counter()
        begin = self.cluster.list_offsets({tp: self.anchor_ms})[tp]
        if begin < 0:
            return found   # nothing written since the first attempt began
        end = self.cluster.list_offsets({tp: LATEST})[tp]
        for record in read_records(self.cluster, self.read, tp[0], tp[1], begin, end):
            headers = list(record.headers)
            if headers and headers[-1] == (MARKER_HEADER, self.marker):
                found[fingerprint(record.key, record.value, headers[:-1])] += 1
        return found


def _control_sink_options(read: ReadOptions) -> SinkOptions:
    return SinkOptions(client=read.client, acks=-1, idempotent=False)


def _committed_before(cluster: Cluster, read: ReadOptions, control: TopicPartition, batch_id: int,
                      partition_id: int) -> bool:
    """Whether a transaction of an earlier attempt of (batch, partition) committed: its
    control record followed by a COMMIT marker of the same producer. Read backwards
    from the end until a record of an earlier batch (as ``ReplayGuard``)."""
    low = cluster.list_offsets({control: EARLIEST})[control]
    stop = cluster.list_offsets({control: LATEST})[control]
    window = _CONTROL_SCAN_FIRST
    begin = stop
    while begin > low:
        begin = max(low, begin - window)
        held: dict[int, bool] = {}       # producer id → its open transaction wrote our record
        older = False
        for data, position, header in read_batches(cluster, read, *control, begin, stop):
            if header.is_control:
                if held.pop(header.producer_id, False) and read_control(data, position)[0] == CONTROL_COMMIT:
                    return True
                continue
            for record in iter_records(data, position):
                marker = json.loads(record.value)
                if marker["batch"] == batch_id and marker["partition"] == partition_id and header.is_transactional:
                    held[header.producer_id] = True
                elif marker["batch"] < batch_id:
                    older = True
        if older:
            break
        window *= 2
    return False


def write_task_transactional(options: SinkOptions, rows, first, context) -> WriteResult:
    """One task's rows and its control record in one transaction (``transactional=true``)."""
    query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
    batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    if not query_id or batch_id is None:
        raise RuntimeError("tidelog sink: transactional=true needs a streaming write (no query id or batch id)")
    batch_id, partition_id = int(batch_id), context.partitionId()
    cluster = Cluster(options.client)
    try:
        control = (CONTROL_TOPIC_PREFIX + query_id, 0)
        cluster.create_topic(control[0], 1, configs={
            "retention.ms": str(CONTROL_TOPIC_RETENTION_MS), "cleanup.policy": "delete"})
        cluster.wait_for_leaders(control[0])
        transaction = Transaction(cluster, f"tidelog-spark-{query_id}-{partition_id}", options.transaction_timeout_ms)
        transaction.init()
        read = ReadOptions(client=options.client, fail_on_data_loss=False)
        if _committed_before(cluster, read, control, batch_id, partition_id):
            skipped = 1 + sum(1 for _ in rows)
            logger.warning("tidelog sink: batch %d partition %d of query %s was committed by an earlier attempt; "
                        "writing nothing", batch_id, partition_id, query_id)
            return WriteResult(partition_id, 0, skipped)
        producer = Producer(cluster, options, exactly_once_attempts=False, transaction=transaction)
        spread = 0
        for topic, partition, key, value, headers in _chain(first, rows):
            if topic is None:
                raise OptionError("a row has a null 'topic' and no 'topic' option is set")
            count = producer.partition_count(topic)
            if partition is None:
                if key is not None:
                    partition = partition_for_key(key, count)
                else:
                    partition = (partition_id + spread) % count
                    spread += 1
            elif not 0 <= partition < count:
                raise OptionError(f"row partition {partition} is out of range: topic {topic} has {count} partitions")
            producer.append((topic, partition), SimpleRecord(value, key=key, headers=headers))
        producer.append(control, SimpleRecord(
            json.dumps({"batch": batch_id, "partition": partition_id, "attempt": context.attemptNumber(),
                        "time_ms": int(time.time() * 1000), "transactional": True}).encode(),
            key=f"{batch_id}:{partition_id}".encode()))
        producer.flush()
        transaction.end(commit=True)
        return WriteResult(partition_id, producer.records_sent - 1, 0)
    finally:
        cluster.close()


def write_task(options: SinkOptions, batches: Iterator[pa.RecordBatch], idempotent: bool) -> WriteResult:
    """One Spark task's write: all its rows, then flush."""
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    rows = rows_of(batches, options.topic)
    first = next(rows, None)
    if first is None:
        return WriteResult(partition_id, 0, 0)
    if options.transactional:
        return write_task_transactional(options, rows, first, context)
    cluster = Cluster(options.client)
    try:
        guard = None
        if idempotent:
            guard = _guard_for_task(cluster, options, context)
            guard.start()
        producer = Producer(cluster, options, exactly_once_attempts=idempotent)
        skipped = spread = 0
        for topic, partition, key, value, headers in _chain(first, rows):
            if topic is None:
                raise OptionError("a row has a null 'topic' and no 'topic' option is set")
            count = producer.partition_count(topic)
            digest = fingerprint(key, value, headers) if guard is not None else None
            if partition is None:
                if key is not None:
                    partition = partition_for_key(key, count)
                elif digest is not None:
                    partition = digest % count       # the same on every attempt
                else:
                    partition = (partition_id + spread) % count
                    spread += 1
            elif not 0 <= partition < count:
                raise OptionError(f"row partition {partition} is out of range: topic {topic} has {count} partitions")
            tp = (topic, partition)
            if guard is not None:
                if guard.replaying and guard.already_written(tp, digest):
                    skipped += 1
                    continue
                headers = headers + [(MARKER_HEADER, guard.marker)]
            producer.append(tp, SimpleRecord(value, key=key, headers=headers))
        producer.flush()
        return WriteResult(partition_id, producer.records_sent, skipped)
    finally:
        cluster.close()


def _chain(first, rest):
    yield first
    yield from rest


def _guard_for_task(cluster: Cluster, options: SinkOptions, context) -> ReplayGuard:
    query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
    batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    if not query_id or batch_id is None:
        raise RuntimeError("tidelog sink: a streaming write task has no query id or batch id; "
                           "set idempotentWrites=false to write at least once")
    return ReplayGuard(cluster, ReadOptions(client=options.client, fail_on_data_loss=False), query_id,
                       int(batch_id), context.partitionId(), context.attemptNumber())


def _totals(messages) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, WriteResult)]
    return sum(m.records_written for m in done), sum(m.records_skipped for m in done)


class TidelogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("tidelog")``: at least once, acks=all by default."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return write_task(self.options, iterator, idempotent=False)

    def commit(self, messages) -> None:
        written, _ = _totals(messages)
        logger.info("tidelog sink: batch write committed, %d records", written)

    def abort(self, messages) -> None:
        written, _ = _totals(messages)
        logger.warning("tidelog sink: batch write aborted after %d records were written (they stay written)",
                    written)


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("tidelog")``: idempotent per (query, batch, partition) on replay."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return write_task(self.options, iterator, idempotent=self.options.idempotent)

    def commit(self, messages, batchId: int) -> None:
        written, skipped = _totals(messages)
        logger.info("tidelog sink: micro-batch %d committed, %d records written, %d skipped as already written",
                 batchId, written, skipped)

    def abort(self, messages, batchId: int) -> None:
        written, _ = _totals(messages)
        logger.warning("tidelog sink: micro-batch %d aborted after %d records were written; a replay will not "
                    "write them again", batchId, written)
