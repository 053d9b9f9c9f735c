"""Simulated transactions: a transactional producer, a read_committed consumer, and
what the checker verifies about them (docs/simulation.md, "Transactions").

Theory of operation. ``SimTxnProducer`` runs one transaction at a time on the
topic ``tx``, as a Kafka client does: it finds the coordinator of its
transactional id, InitProducerId, then per transaction AddPartitionsToTxn (one or
two partitions), one idempotent transactional batch of 1–3 records per partition
(retried with the same sequence until acknowledged), and EndTxn — commit three
times in four, else abort. With ``transaction_version`` 2 (KIP-890 part 2) it sends
no AddPartitionsToTxn: its Produce asks the leader to add the partition, and each
EndTxn answers the epoch (or producer id) its next transaction runs at, its
sequences starting again at 0. Coordinator errors and timeouts are retried (finding
the coordinator again); a fencing or sequence error, or a batch that cannot be
delivered, abandons the transaction: the producer initializes again (a new
epoch), which makes the coordinator abort what was open.

``SimTxnConsumer`` reads every partition of ``tx`` with ``read_committed``
isolation, dropping the records of the aborted transactions each answer names
(up to their ABORT markers), as Kafka's consumer does.

``TxnBook`` (the checker's part) knows every transaction's values and what its
producer asked and was told. Checked on every read_committed answer:

* ``txn-visible-only-if-committed``: a record is visible only if its producer
  asked to commit its transaction, and never if an abort was acknowledged —
  excused (counted as ``visible after its coordinator's log lost records``) for a
  transaction written before a ``__transaction_state`` partition lost acknowledged
  records (itself an excused loss): its coordinator may have forgotten the
  decision, and a later transaction's COMMIT at a newer epoch then closes the one
  left open on a partition (seeds 7647, 8130; Kafka's producer state does the same);
* ``txn-exactly-once``: no value is read twice.

And on every acknowledged EndTxn of a ``transaction_version`` 2 producer
(KIP-890 part 2), ``txn-epoch-bump``: the answer is the transaction's producer
id at its epoch + 1, or — the epoch exhausted (32766) — a fresh producer id at
epoch 0. A retry answered from the log after a coordinator move gives the same.

And at the end (skipped for a partition that lost acknowledged data, as the
other invariants do): every record of a transaction whose commit was
acknowledged has been read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog.broker.requests.fetch import MAX_PARTITION_FETCH_BYTES, READ_COMMITTED, FetchRequest
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import CONTROL_ABORT, build_batch, iter_batches, iter_records, read_control
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.sim.checker import InvariantViolation
from tidelog.txn.shard import PRODUCER_EPOCH_MAX
from tidelog.sim.clients import (
    CONSUMER_REPLICA_ID,
    DELIVERY_TIMEOUT_MS,
    FETCH_MAX_WAIT_MS,
    RETRY_BACKOFF_MS,
    SEQUENCE_MODULUS,
    SimConsumer,
    _Client,
)

if TYPE_CHECKING:
    from tidelog.sim.world import World

TXN_TOPIC = "tx"
TRANSACTIONAL_ID = "tx-app"
TRANSACTION_TIMEOUT_MS = 5000
_FIND_AGAIN = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_RETRY = _FIND_AGAIN | {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT,
                        ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        ErrorCode.UNKNOWN_SERVER_ERROR}
_PRODUCE_RETRY = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
                  ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.FENCED_LEADER_EPOCH,
                  ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NETWORK_EXCEPTION}


@dataclass
class Txn:
    number: int
    values: dict[bytes, TopicPartition] = field(default_factory=dict)
    acked: set[bytes] = field(default_factory=set)
    commit_requested: bool = False
    abort_requested: bool = False
    outcome: str | None = None          # "commit" / "abort" once EndTxn was acknowledged
    producer_id: int = -1               # what its batches were written with
    producer_epoch: int = -1


class TxnBook:
    def __init__(self, sim: "World"):
        self.sim = sim
        self.txns: dict[int, Txn] = {}
        self.owner: dict[bytes, Txn] = {}
        self.read: dict[bytes, tuple[TopicPartition, int]] = {}
        self.forgettable: set[int] = set()    # written before a coordinator's log lost records

    def on_coordinator_log_lost(self) -> None:
        """A ``__transaction_state`` partition lost acknowledged records (module docstring)."""
        self.forgettable |= set(self.txns)

    def on_written(self, txn: Txn, tp: TopicPartition, values: list[bytes]) -> None:
        self.txns[txn.number] = txn
        for value in values:
            txn.values[value] = tp
            self.owner[value] = txn

    def on_read(self, tp: TopicPartition, records: list[tuple[int, bytes]]) -> None:
        for offset, value in records:
            txn = self.owner.get(value)
            if txn is None:
                raise InvariantViolation("txn-visible-only-if-committed",
                                         f"{tp} offset {offset}: {value!r} was never written by the producer")
            if not txn.commit_requested or txn.outcome == "abort":
                if txn.number in self.forgettable:
                    stats = self.sim.stats.transactions
                    key = "visible after its coordinator's log lost records"
                    stats[key] = stats.get(key, 0) + 1
                    continue
                state = "abort acknowledged" if txn.outcome == "abort" else (
                    "abort requested" if txn.abort_requested else "no commit requested")
                raise InvariantViolation("txn-visible-only-if-committed",
                                         f"{tp} offset {offset}: {value!r} of transaction {txn.number} ({state}) "
                                         f"was read with read_committed")
            earlier = self.read.get(value)
            if earlier is not None and earlier != (tp, offset):
                raise InvariantViolation("txn-exactly-once", f"{value!r} read at {earlier} and at {tp} {offset}")
            self.read[value] = (tp, offset)

    def on_ended_v2(self, txn: Txn, producer_id: int, producer_epoch: int) -> None:
        """A TV2 EndTxn was acknowledged: it must answer the next epoch (module docstring)."""
        if txn.producer_epoch >= PRODUCER_EPOCH_MAX:
            ok = producer_id not in (-1, txn.producer_id) and producer_epoch == 0
            expected = "a fresh producer id at epoch 0"
        else:
            ok = (producer_id, producer_epoch) == (txn.producer_id, txn.producer_epoch + 1)
            expected = f"producer {txn.producer_id} epoch {txn.producer_epoch + 1}"
        if not ok:
            raise InvariantViolation("txn-epoch-bump", f"transaction {txn.number} (producer {txn.producer_id} epoch "
                                     f"{txn.producer_epoch}) ended with producer {producer_id} epoch "
                                     f"{producer_epoch}, expected {expected}")

    def final_check(self) -> None:
        histories = self.sim.checker.histories
        for txn in self.txns.values():
            if txn.outcome != "commit":
                continue
            for value in txn.acked:
                tp = txn.values[value]
                if value in self.read or (tp in histories and histories[tp].resets):
                    continue            # read, or the partition lost acknowledged data (excused)
                raise InvariantViolation("txn-committed-visible",
                                         f"{value!r} of committed transaction {txn.number} at {tp} was never "
                                         f"read with read_committed")


class SimTxnProducer(_Client):
    def __init__(self, sim: "World", name: str):
        super().__init__(sim, name, TXN_TOPIC)
        self.coordinator: int | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[TopicPartition, int] = {}
        self.txn: Txn | None = None
        self.number = 0
        self.busy = False                  # a transaction or an init in progress
        self.committed_since_heal = 0
        self.transaction_version = sim.config.transaction_version

    @property
    def in_flight(self) -> bool:
        return self.busy

    def start(self) -> None:
        super().start()
        self.after(self.sim.rng.randrange(1, 50), self._init)

    # -------------------------------------------------------------- coordinator

    def _call(self, kind: str, body: dict, on_answer, step) -> None:
        """Ask the coordinator; coordinator errors and timeouts retry ``step``."""
        if self.coordinator is None:
            self._find(step)
            return

        def on_reply(answer) -> None:
            error = ErrorCode(answer["error_code"])
            if error in _RETRY:
                if error in _FIND_AGAIN:
                    self.coordinator = None
                self.after(RETRY_BACKOFF_MS, step)
            else:
                on_answer(error, answer)

        def on_error(error: str) -> None:
            self.coordinator = None
            self.after(RETRY_BACKOFF_MS, step)
        self.rpc.request(f"b{self.coordinator}", kind, body, self.sim.config.request_timeout_ms + 500,
                         on_reply, on_error)

    def _find(self, then) -> None:
        broker = self.sim.rng.choice(self.sim.broker_ids)

        def on_reply(answer) -> None:
            if answer["error_code"] == ErrorCode.NONE:
                self.coordinator = answer["node_id"]
                then()
            else:
                self.after(RETRY_BACKOFF_MS, lambda: self._find(then))
        self.rpc.request(f"b{broker}", "FindTxnCoordinator", {"transactional_id": TRANSACTIONAL_ID},
                         self.sim.config.request_timeout_ms, on_reply,
                         lambda error: self.after(RETRY_BACKOFF_MS, lambda: self._find(then)))

    # -------------------------------------------------------------- lifecycle

    def _init(self) -> None:
        if not self.active:
            self.busy = False
            return
        self.busy = True

        def answered(error: ErrorCode, answer) -> None:
            if error != ErrorCode.NONE:
                self.after(RETRY_BACKOFF_MS, self._init)
                return
            self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
            self.sequences = {}
            self._begin()
        self._call("InitTxnProducer", {"transactional_id": TRANSACTIONAL_ID,
                                       "timeout_ms": TRANSACTION_TIMEOUT_MS}, answered, self._init)

    def _count(self, what: str, n: int = 1) -> None:
        stats = self.sim.stats.transactions
        stats[what] = stats.get(what, 0) + n

    def _abandon(self, why: str) -> None:
        self._count("abandoned")
        self.loop.trace.add(self.loop.now_ms, self.name, f"abandons transaction {self.txn.number}: {why}")
        self.txn = None
        self.after(RETRY_BACKOFF_MS, self._init)

    def _begin(self) -> None:
        if not self.active:
            self.busy = False
            return
        self.number += 1
        self.txn = Txn(self.number, producer_id=self.producer_id, producer_epoch=self.producer_epoch)
        rng = self.sim.rng
        chosen = sorted(rng.sample(self.partitions, min(len(self.partitions), rng.randint(1, 2))))
        self._add(chosen)

    def _add(self, chosen: list[TopicPartition]) -> None:
        if self.transaction_version >= 2:
            self._produce(chosen, 0, None)          # the leaders add the partitions
            return

        def answered(error: ErrorCode, answer) -> None:
            if error != ErrorCode.NONE:
                self._abandon(f"AddPartitionsToTxn: {error.name}")
                return
            self._produce(chosen, 0, None)
        self._call("AddPartitionsToTxn", {"transactional_id": TRANSACTIONAL_ID, "producer_id": self.producer_id,
                                          "producer_epoch": self.producer_epoch, "partitions": set(chosen)},
                   answered, lambda: self._add(chosen))

    def _produce(self, chosen: list[TopicPartition], index: int, pending) -> None:
        if index == len(chosen):
            self._end(self.sim.rng.random() < 0.75)
            return
        tp = chosen[index]
        txn = self.txn
        if pending is None:
            values = [f"tx-{txn.number}-{tp.partition}-{i}".encode() for i in range(self.sim.rng.randint(1, 3))]
            sequence = self.sequences.get(tp, 0)
            pending = (values, sequence, self.loop.now_ms)
            self.sim.txn_book.on_written(txn, tp, values)
        values, sequence, first_sent_ms = pending
        if self.loop.now_ms - first_sent_ms > DELIVERY_TIMEOUT_MS:
            self._abandon("a batch could not be delivered")
            return

        def send(leader: int) -> None:
            batch = build_batch(values, timestamp_ms=self.clock.now_ms(), producer_id=self.producer_id,
                                producer_epoch=self.producer_epoch, base_sequence=sequence, is_transactional=True)
            body = {"tp": tp, "acks": -1, "timeout_ms": self.sim.config.request_timeout_ms, "values": values,
                    "batch": batch, "transactional_id": TRANSACTIONAL_ID,
                    "add_partitions": self.transaction_version >= 2}

            def on_reply(response) -> None:
                if self.txn is not txn:
                    return
                error = ErrorCode(response["error_code"])
                if error == ErrorCode.NONE:
                    txn.acked.update(values)
                    self.sequences[tp] = (sequence + len(values)) % SEQUENCE_MODULUS
                    self._produce(chosen, index + 1, None)
                elif error in _PRODUCE_RETRY:
                    self.leaders.pop(tp, None)
                    self.after(RETRY_BACKOFF_MS, lambda: self._produce(chosen, index, pending))
                else:
                    self._abandon(f"Produce to {tp}: {error.name}")

            def on_error(error: str) -> None:
                if self.txn is txn:
                    self.leaders.pop(tp, None)
                    self.after(RETRY_BACKOFF_MS, lambda: self._produce(chosen, index, pending))
            self.rpc.request(f"b{leader}", "Produce", body, self.sim.config.request_timeout_ms + 500,
                             on_reply, on_error)
        self._with_leader(tp, send)

    def _end(self, commit: bool) -> None:
        txn = self.txn
        if commit:
            txn.commit_requested = True
        else:
            txn.abort_requested = True

        def answered(error: ErrorCode, answer) -> None:
            if self.txn is not txn:
                return
            if error != ErrorCode.NONE:
                self._abandon(f"EndTxn: {error.name}")
                return
            txn.outcome = "commit" if commit else "abort"
            self._count("committed" if commit else "aborted")
            if self.transaction_version >= 2:
                self.sim.txn_book.on_ended_v2(txn, answer["producer_id"], answer["producer_epoch"])
                if answer["producer_id"] != self.producer_id:
                    self._count("producer id rotations")
                elif answer["producer_epoch"] != self.producer_epoch:
                    self._count("epoch bumps")
                self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
                self.sequences = {}
            if commit and self.sim.healed:
                self.committed_since_heal += 1
            self.txn = None
            self.after(self.sim.rng.randint(1, 2 * self.sim.config.produce_interval_ms), self._begin)
        self._call("EndTxn", {"transactional_id": TRANSACTIONAL_ID, "producer_id": self.producer_id,
                              "producer_epoch": self.producer_epoch, "commit": commit,
                              "transaction_version": self.transaction_version},
                   answered, lambda: self._end(commit))


class SimTxnConsumer(SimConsumer):
    """read_committed over ``tx``, from offset 0, dropping aborted transactions."""

    def __init__(self, sim: "World", name: str):
        super().__init__(sim, name, TXN_TOPIC)

    def _fetch(self, tp: TopicPartition, leader: int) -> None:
        position = self.positions[tp]

        def on_reply(answer) -> None:
            if answer["error_code"] == ErrorCode.NONE and self.positions[tp] == position:
                self._consume(tp, position, answer)
                self.after(self.sim.rng.randint(1, 50), lambda: self._poll(tp))
                return
            self.leaders.pop(tp, None)
            if answer["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:
                self.positions[tp] = max(0, answer["log_start_offset"])
            self.after(RETRY_BACKOFF_MS, lambda: self._poll(tp))

        def on_error(error: str) -> None:
            self.leaders.pop(tp, None)
            self.after(RETRY_BACKOFF_MS, lambda: self._poll(tp))
        self.rpc.request(f"b{leader}", "ClientFetch",
                         FetchRequest(CONSUMER_REPLICA_ID, FETCH_MAX_WAIT_MS,
                                      {tp: FetchPartitionRequest(position, MAX_PARTITION_FETCH_BYTES)},
                                      isolation_level=READ_COMMITTED),
                         self.sim.config.request_timeout_ms + 100, on_reply, on_error)

    def _consume(self, tp: TopicPartition, position: int, answer) -> None:
        data = answer["records"]
        pending = sorted(answer["aborted"], key=lambda a: a[1])
        aborting: set[int] = set()
        records = []
        after = position
        for offset_in, header in iter_batches(data):
            while pending and pending[0][1] <= header.last_offset:
                aborting.add(pending.pop(0)[0])
            after = max(after, header.next_offset)
            if header.is_control:
                if read_control(data, offset_in)[0] == CONTROL_ABORT:
                    aborting.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborting:
                continue
            records += [(r.offset, r.value) for r in iter_records(data, offset_in) if r.offset >= position]
        if answer["last_stable_offset"] < after and data:
            raise InvariantViolation("txn-lso-bound", f"{tp}: a read_committed fetch at {position} returned "
                                     f"batches up to {after}, past the last stable offset "
                                     f"{answer['last_stable_offset']}")
        self.sim.txn_book.on_read(tp, records)
        stats = self.sim.stats.transactions
        stats["records read"] = stats.get("records read", 0) + len(records)
        self.positions[tp] = after
