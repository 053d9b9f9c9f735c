"""A small blocking producer for the sink's executor tasks.

Theory of operation. ``Producer.append`` buffers records per topic-partition;
a buffer is sent as one record batch when it reaches ``kafka.batch.size``
bytes, and ``flush`` sends the rest. Batches for partitions with the same
leader go in one Produce request; the task waits for the answer (acks=all by
default, so a record is acknowledged once it is replicated to the ISR).

A failed partition is retried only when the broker certainly did not append
it (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION,
NOT_ENOUGH_REPLICAS: the leader refused before appending). When the outcome is
unknown (the connection broke, REQUEST_TIMED_OUT,
NOT_ENOUGH_REPLICAS_AFTER_APPEND) a retry could write the batch twice, so with
``exactly_once_attempts`` the producer raises ``AmbiguousWriteError``, failing
the Spark task: its retry then finds what this attempt wrote
(``idempotence``). Without it, the batch is retried (at least once).

Rows without a partition column go where Kafka's default partitioner puts
keyed records: ``murmur2(key) % partitions`` (``murmur2`` below, the
32-bit MurmurHash2 Kafka's Java client and librdkafka's murmur2 partitioner use).
"""

from __future__ import annotations

import logging
import time

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records import Compression, SimpleRecord, build_batch
from tidelog.spark.options import SinkOptions
from tidelog.spark.wire import BrokerError, BrokerUnreachable, Cluster, error_of

logger = logging.getLogger("tidelog.spark")
TopicPartition = tuple[str, int]

# The leader refused these before appending anything: safe to send again.
_NOT_APPENDED = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
})
# The outcome is unknown: the batch may or may not be in the log.
_AMBIGUOUS = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        ErrorCode.NETWORK_EXCEPTION})


class AmbiguousWriteError(RuntimeError):
    """A produce may or may not have been appended; the task must be retried."""


class Producer:
    def __init__(self, cluster: Cluster, options: SinkOptions, exactly_once_attempts: bool,
                 transaction=None):
        self.cluster = cluster
        self.options = options
        self.exactly_once_attempts = exactly_once_attempts
        # A spark.transactions.Transaction: batches join it, carry its producer id,
        # epoch and per-partition sequences (a retried batch is deduplicated).
        self.transaction = transaction
        self._sequences: dict[TopicPartition, int] = {}
        self.compression = Compression.from_name(options.compression)
        self._buffers: dict[TopicPartition, list[SimpleRecord]] = {}
        self._sizes: dict[TopicPartition, int] = {}
        self._partition_counts: dict[str, int] = {}
        self.records_sent = 0

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic``, creating it if the broker auto-creates topics."""
        count = self._partition_counts.get(topic)
        if count is None:
            def once():
                self.cluster.refresh_metadata([topic], allow_auto_create=True)
                info = self.cluster.topics.get(topic)
                if info is None or info.error != ErrorCode.NONE or not info.leaders:
                    code = info.error if info is not None and info.error != ErrorCode.NONE \
                        else ErrorCode.LEADER_NOT_AVAILABLE
                    raise BrokerError(f"topic {topic}", code)
                return len(info.leaders)
            count = self.cluster.retrying(f"Metadata {topic}", once)
            self._partition_counts[topic] = count
        return count

    def append(self, tp: TopicPartition, record: SimpleRecord) -> None:
        self._buffers.setdefault(tp, []).append(record)
        size = self._sizes.get(tp, 0) + 24 + len(record.value or b"") + len(record.key or b"") \
            + sum(len(k) + len(v or b"") + 4 for k, v in record.headers)
        self._sizes[tp] = size
        if size >= self.options.batch_size_bytes:
            self._send([tp])

    def flush(self) -> None:
        if self._buffers:
            self._send(list(self._buffers))

    def _send(self, tps: list[TopicPartition]) -> None:
        now_ms = int(time.time() * 1000)
        transaction = self.transaction
        if transaction is None:
            batches = {tp: (build_batch(self._buffers[tp], compression=self.compression, timestamp_ms=now_ms),
                            len(self._buffers[tp])) for tp in tps}
        else:
            transaction.add_partitions(tps)
            batches = {tp: (build_batch(self._buffers[tp], compression=self.compression, timestamp_ms=now_ms,
                                        producer_id=transaction.producer_id,
                                        producer_epoch=transaction.producer_epoch,
                                        base_sequence=self._sequences.get(tp, 0), is_transactional=True),
                            len(self._buffers[tp])) for tp in tps}
        for tp in tps:
            del self._buffers[tp]
            del self._sizes[tp]
        deadline = time.monotonic() + self.options.client.default_api_timeout_ms / 1000
        backoff_s = self.options.client.retry_backoff_ms / 1000
        while batches:
            failures = self._produce_once(batches)
            for tp in list(batches):
                if tp not in failures:
                    sent = batches.pop(tp)[1]
                    self.records_sent += sent
                    self._sequences[tp] = (self._sequences.get(tp, 0) + sent) % (1 << 31)
            if not batches:
                return
            if time.monotonic() + backoff_s > deadline:
                raise BrokerError(f"Produce to {sorted(failures)}: gave up; last errors "
                                  f"{ {f'{t}-{p}': e.name for (t, p), e in failures.items()} }",
                                  next(iter(failures.values())))
            logger.info("Produce: retrying %s after %s", sorted(failures), set(e.name for e in failures.values()))
            self.cluster.forget()
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)

    def _produce_once(self, batches: dict) -> dict[TopicPartition, ErrorCode]:
        """Send every batch once; return the partitions that must be sent again."""
        failures: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in batches:
            try:
                by_leader.setdefault(self.cluster.leader(*tp), []).append(tp)
            except (BrokerError, BrokerUnreachable) as e:
                code = getattr(e, "error_code", ErrorCode.LEADER_NOT_AVAILABLE)
                if isinstance(e, BrokerError) and not e.retriable:
                    raise
                failures[tp] = code
        for leader, tps in by_leader.items():
            topics: dict[str, list] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append({"index": partition, "records": batches[(topic, partition)][0]})
            body = {"acks": self.options.acks, "timeout": self.options.client.request_timeout_ms,
                    "transactional_id": None if self.transaction is None else self.transaction.transactional_id,
                    "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
            try:
                connection = self.cluster.connection(leader)
            except (BrokerError, BrokerUnreachable):
                failures.update({tp: ErrorCode.BROKER_NOT_AVAILABLE for tp in tps})
                continue  # nothing was sent
            try:
                if self.options.acks == 0:
                    connection.send(ApiKey.PRODUCE, body, expect_response=False)
                    continue
                response = connection.request(ApiKey.PRODUCE, body)
            except BrokerUnreachable as e:
                self.cluster.forget(leader)
                self._ambiguous(tps, f"connection to broker {leader} failed: {e}")
                failures.update({tp: ErrorCode.NETWORK_EXCEPTION for tp in tps})
                continue
            for topic in response.responses:
                for p in topic.partition_responses:
                    tp = (topic.name, int(p.index))
                    code = error_of(p.error_code)
                    if code == ErrorCode.NONE:
                        continue
                    if code in _AMBIGUOUS:
                        self._ambiguous([tp], code.name)
                    elif code not in _NOT_APPENDED:
                        raise BrokerError(f"Produce to {tp[0]}-{tp[1]} ({p.error_message or ''})", code)
                    failures[tp] = code
        return failures

    def _ambiguous(self, tps, why: str) -> None:
        if self.exactly_once_attempts and self.transaction is None:   # a transaction's retries are deduplicated
            raise AmbiguousWriteError(
                f"tidelog sink: cannot tell whether the write to {sorted(tps)} was appended ({why}); failing the "
                "task so that Spark retries it, and the retry skips records this attempt already wrote")


_M32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2, 32-bit, seed 0x9747b28c, as a signed int (Kafka's ``Utils.murmur2``)."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & _M32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & _M32
        k ^= k >> 24
        k = (k * m) & _M32
        h = ((h * m) & _M32) ^ k
    tail = length % 4
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's default partition for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
