"""Simulated clients: producers (acks 0/1/all) and consumers, recording what they saw.

Theory of operation. A client is a network node with its own metadata view: it
asks a random live broker which broker leads a partition (the broker answers
from its own, possibly stale, metadata image) and sends there, as a Kafka client
does. Every record value is unique (``p0-t0-1-17``), so the checker can tell
each write apart. On a compacted topic (``--compact``) a record also has a key, one
of the topic's few (``record_key``: from the value's sequence number), so later
records supersede earlier ones and the cleaner has work.

Producer (librdkafka-like, ``max.in.flight=1`` per partition): one batch of 1–3
records at a time per partition; an error or a timeout forgets the leader,
backs off and retries the *same* batch until ``delivery_timeout_ms`` has passed
(then the batch is given up). A retry after a timeout may duplicate records
that did reach the log — the duplicates "the producer's retries explain".
acks=0 sends and forgets. Outcomes go to the checker: acknowledged (with the
offset), failed, or sent (acks=0).

Consumer: reads each partition of its topic from the leader with
``read_uncommitted`` isolation (up to the high watermark), from offset 0,
checking every answer through the checker (invariant ``10.6-consumer-below-hw``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidelog.broker.requests.fetch import MAX_PARTITION_FETCH_BYTES, FetchRequest
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches, iter_records
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.sim.loop import NodeClock
from tidelog.sim.network import NetworkNode

if TYPE_CHECKING:
    from tidelog.sim.world import World

RETRY_BACKOFF_MS = 100
DELIVERY_TIMEOUT_MS = 10_000
CONSUMER_REPLICA_ID = -1
FETCH_MAX_WAIT_MS = 100       # fetch.max.wait.ms (the other fetch settings: Kafka's defaults)
METADATA_MAX_AGE_MS = 2000     # refresh the leader now and then, as metadata.max.age.ms does


# With tombstones that expire (a short delete.retention.ms), keys retire: each generation
# of a topic's keys is written for this many rounds, the last of which deletes them all.
RETIRE_ROUNDS = 4
ID_HEADER = "id"      # a tombstone's unique name (its value is null)


def value_sequence(value: bytes) -> int:
    """The producer's sequence number in a value it wrote (``p0-t0-1-17`` → 17)."""
    return int(value.rsplit(b"-", 1)[1])


def record_key(value: bytes, spec) -> bytes:
    """The key of a record a producer writes to compacted topic ``spec`` (``--compact``):
    one of its ``keys`` keys, or of the current generation's when keys retire."""
    seq = value_sequence(value)
    if spec.delete_retention_ms is None:
        return b"k%d" % (seq % spec.keys)
    return b"g%d-k%d" % (seq // spec.keys // RETIRE_ROUNDS, seq % spec.keys)


def record_is_tombstone(value: bytes, spec) -> bool:
    """Whether the record a producer writes as ``value`` to compacted topic ``spec`` is a tombstone."""
    seq = value_sequence(value)
    if spec.delete_retention_ms is None:
        return seq * 2654435761 % 100 < spec.tombstone_percent
    return spec.tombstone_percent > 0 and seq // spec.keys % RETIRE_ROUNDS == RETIRE_ROUNDS - 1


def _keyed(value: bytes, spec) -> SimpleRecord:
    """A compacted topic's record: keyed; a tombstone (null value) for about
    ``tombstone_percent`` of the sequence numbers — or, where tombstones expire, for the
    last round of each generation of keys, so that deleted keys are never written again
    and the cleaner removes their tombstones — its unique value in an ``id`` header."""
    key = record_key(value, spec)
    if record_is_tombstone(value, spec):
        return SimpleRecord(None, key, ((ID_HEADER, value),))
    return SimpleRecord(value, key)


def record_value(record) -> bytes | None:
    """What identifies a record the simulator's producers wrote: its value, or a
    tombstone's ``id`` header."""
    if record.value is not None or not record.headers:
        return record.value
    return next((v for k, v in record.headers if k == ID_HEADER), None)


class _Client(NetworkNode):
    def __init__(self, sim: "World", name: str, topic: str):
        super().__init__(name, sim.loop, sim.network)
        self.sim = sim
        self.clock = NodeClock(sim.loop)
        self.topic = topic
        self.spec = spec = sim.config.topic(topic)
        self.partitions = [TopicPartition(topic, p) for p in range(spec.partitions)]
        self.leaders: dict[TopicPartition, tuple[int, int]] = {}   # tp -> (leader, when learned)
        self.active = False

    def start(self) -> None:
        self.process_started()
        self.active = True

    def _with_leader(self, tp: TopicPartition, then) -> None:
        """Call ``then(leader)`` once some broker names a leader (retrying meanwhile)."""
        cached = self.leaders.get(tp)
        if cached is not None and self.loop.now_ms - cached[1] <= METADATA_MAX_AGE_MS:
            then(cached[0])
            return
        brokers = [b for b in self.sim.broker_ids]
        broker = self.sim.rng.choice(brokers)

        def on_reply(answer) -> None:
            leader = answer.get(tp)
            if leader is None or leader < 0:
                self.after(RETRY_BACKOFF_MS, lambda: self._with_leader(tp, then))
            else:
                self.leaders[tp] = (leader, self.loop.now_ms)
                then(leader)

        self.rpc.request(f"b{broker}", "Metadata", {"topic_partitions": [tp]}, self.sim.config.request_timeout_ms,
                         on_reply, lambda error: self.after(RETRY_BACKOFF_MS, lambda: self._with_leader(tp, then)))

    def on_request(self, message) -> None:
        raise AssertionError(f"{self.name} serves no requests")


@dataclass
class _Batch:
    values: list[bytes]
    first_sent_ms: int
    attempts: int = 0
    producer_epoch: int = -1        # idempotent producers: the batch keeps its epoch and
    base_sequence: int = -1         # sequence across retries, as Kafka clients do


SEQUENCE_MODULUS = 1 << 31
# Errors an idempotent producer cannot retry past: it gives the batch up and bumps
# its epoch, restarting the partition's sequence at 0 (KIP-360).
FATAL_FOR_BATCH = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH,
                   ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.DUPLICATE_SEQUENCE_NUMBER)


class SimProducer(_Client):
    def __init__(self, sim: "World", name: str, topic: str, acks: int, producer_id: int = -1):
        super().__init__(sim, name, topic)
        self.acks = acks
        self.producer_id = producer_id                      # >= 0: an idempotent producer
        self.producer_epochs = {tp: 0 for tp in self.partitions}
        self.next_sequences = {tp: 0 for tp in self.partitions}
        self.sequence = 0
        self.in_flight: dict[TopicPartition, _Batch] = {}
        self.acked_since_heal = 0

    def start(self) -> None:
        super().start()
        for tp in self.partitions:
            self.after(self.sim.rng.randrange(1, 50), lambda tp=tp: self._next(tp))

    def _next(self, tp: TopicPartition) -> None:
        if not self.active:
            return
        count = self.sim.rng.randint(1, 3)
        values = []
        for _ in range(count):
            self.sequence += 1
            values.append(f"{self.name}-{tp}-{self.sequence}".encode())
        self.in_flight[tp] = _Batch(values, self.loop.now_ms, 0, self.producer_epochs[tp], self.next_sequences[tp])
        self.sim.checker.on_produce_started(self, tp, values)
        self._send(tp)

    def _send(self, tp: TopicPartition) -> None:
        batch = self.in_flight.get(tp)
        if batch is None:
            return
        self._with_leader(tp, lambda leader: self._send_to(tp, batch, leader))

    def _send_to(self, tp: TopicPartition, batch: _Batch, leader: int) -> None:
        batch.attempts += 1
        self.sim.stats.produce_requests += 1
        idempotence = {} if self.producer_id < 0 else {
            "producer_id": self.producer_id, "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence}
        spec = self.spec
        records = [_keyed(value, spec) for value in batch.values] if spec.keys else batch.values
        body = {"tp": tp, "acks": self.acks, "timeout_ms": self.sim.config.request_timeout_ms,
                "values": batch.values,
                "batch": build_batch(records, timestamp_ms=self.clock.now_ms(), **idempotence)}
        if self.acks == 0:
            self.rpc.send_one_way(f"b{leader}", "Produce", body)
            self.sim.checker.on_produce_done(self, tp, batch.values, ErrorCode.NONE, -1)
            self._done(tp)
            return

        def on_reply(response) -> None:
            error = ErrorCode(response["error_code"])
            if error == ErrorCode.NONE:
                self.sim.checker.on_produce_done(self, tp, batch.values, error, response["base_offset"])
                if self.sim.healed:
                    self.acked_since_heal += 1
                self.next_sequences[tp] = (batch.base_sequence + len(batch.values)) % SEQUENCE_MODULUS
                self._done(tp)
            elif self.producer_id >= 0 and error in FATAL_FOR_BATCH:
                self._give_up(tp, batch, error)
            else:
                self._retry(tp, batch, error.name)

        self.rpc.request(f"b{leader}", "Produce", body, self.sim.config.request_timeout_ms + 500, on_reply,
                         lambda error: self._retry(tp, batch, error))

    def _retry(self, tp: TopicPartition, batch: _Batch, why: str) -> None:
        self.leaders.pop(tp, None)
        if self.loop.now_ms - batch.first_sent_ms > DELIVERY_TIMEOUT_MS:
            self._give_up(tp, batch, ErrorCode.REQUEST_TIMED_OUT)
            return
        self.after(RETRY_BACKOFF_MS, lambda: self._send(tp))

    def _give_up(self, tp: TopicPartition, batch: _Batch, error: ErrorCode) -> None:
        """Report the batch failed. An idempotent producer cannot know whether it was
        written, so it moves to a new epoch whose sequences restart at 0."""
        self.sim.checker.on_produce_done(self, tp, batch.values, error, -1)
        if self.producer_id >= 0:
            self.producer_epochs[tp] = batch.producer_epoch + 1
            self.next_sequences[tp] = 0
        self._done(tp)

    def _done(self, tp: TopicPartition) -> None:
        self.in_flight.pop(tp, None)
        self.after(self.sim.rng.randint(1, 2 * self.sim.config.produce_interval_ms), lambda: self._next(tp))


class SimConsumer(_Client):
    def __init__(self, sim: "World", name: str, topic: str):
        super().__init__(sim, name, topic)
        self.positions: dict[TopicPartition, int] = {tp: 0 for tp in self.partitions}

    def start(self) -> None:
        super().start()
        for tp in self.partitions:
            self.after(self.sim.rng.randrange(1, 50), lambda tp=tp: self._poll(tp))

    def _poll(self, tp: TopicPartition) -> None:
        if not self.active:
            return
        self._with_leader(tp, lambda leader: self._fetch(tp, leader))

    def _fetch(self, tp: TopicPartition, leader: int) -> None:
        position = self.positions[tp]
        body = FetchRequest(CONSUMER_REPLICA_ID, FETCH_MAX_WAIT_MS,
                            {tp: FetchPartitionRequest(position, MAX_PARTITION_FETCH_BYTES)})

        def on_reply(result) -> None:
            if result.error == ErrorCode.NONE:
                self._consume(tp, position, result, leader)
                self.after(self.sim.rng.randint(1, 50), lambda: self._poll(tp))
                return
            self.leaders.pop(tp, None)
            if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.sim.checker.on_consumer_reset(self, tp, position, result)
                self.positions[tp] = max(0, result.log_start_offset)
            self.after(RETRY_BACKOFF_MS, lambda: self._poll(tp))

        def on_error(error: str) -> None:
            self.leaders.pop(tp, None)
            self.after(RETRY_BACKOFF_MS, lambda: self._poll(tp))

        self.rpc.request(f"b{leader}", "ClientFetch", body, self.sim.config.request_timeout_ms + 100,
                         on_reply, on_error)

    def _consume(self, tp: TopicPartition, position: int, result, leader: int) -> None:
        if self.positions[tp] != position:
            return   # a reset raced with this answer
        data = result.records
        records = []
        after = position      # as Kafka's consumer: past the last batch, records or not (compaction)
        for offset_in, header in iter_batches(data):
            for record in iter_records(data, offset_in):
                if record.offset >= position:
                    records.append((record.offset, record_value(record)))
            after = max(after, header.next_offset)
        self.sim.checker.on_consumed(self, tp, position, records, result.high_watermark, leader)
        self.positions[tp] = after
        self.sim.stats.consumed += len(records)
