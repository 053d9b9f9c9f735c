"""The transactions of one ``__transaction_state`` partition: a replayed state machine.

Theory of operation. Each transactional id has a ``TxnMetadata``: its producer
id and epoch, timeout, state and the partitions its open transaction wrote to.
An operation (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, a
timeout) validates against memory, writes the *new* metadata as one record and
changes nothing until that record commits: ``replay`` is the only writer of
state, on the leader after its write and on a coordinator loading the partition
alike. While a write is in flight the id is ``pending`` and other requests for
it get CONCURRENT_TRANSACTIONS (Kafka's ``pendingState``). A write that timed
out waiting for acks=all (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
is still in the leader's log and may commit later: the id stays ``pending``
until its replay (or until the shard is unloaded), so no conflicting decision
is validated against a memory the log is about to change.

    Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                        │  └──EndTxn(abort) / timeout──▶ PrepareAbort ──markers──▶ CompleteAbort
      └──InitProducerId (epoch + 1)◀───────────────────────────────────────────────────┘

Ending a transaction is two-phase, as in Kafka: the PREPARE record is the
decision (the client is answered once it commits); then the coordinator writes
a COMMIT or ABORT marker to every partition of the transaction
(``send_markers``, WriteTxnMarkers) and, when all succeeded, the COMPLETE
record. Whatever replays a PREPARE decision — the write's own commit, a
write that timed out and committed later, or a coordinator loading the
partition — schedules its markers (``markers_due_ms``), so every decision in
the log gets its markers; markers that failed are retried after a backoff.
An ongoing transaction older than its timeout is aborted with the producer's
epoch bumped, which fences the producer (its next request gets PRODUCER_FENCED);
at the last epoch the abort moves the id to a fresh producer id (``_abort_fenced``,
the id from the injected ``producer_ids``).

Transaction versions (KIP-890 part 2). A client on ``transaction.version`` 2
(Kafka 4's Java producer: EndTxn v5, Produce v12+, TxnOffsetCommit v5) never
sends AddPartitionsToTxn itself: the partition leader adds each partition on its
behalf (``add_partitions`` with ``client_transaction_version=2``). Every commit or
abort bumps its epoch (``end_transaction_v2``): the PREPARE record carries epoch
e+1, the markers too, and the client is answered the new (producer id, epoch)
to run its next transaction with — so a zombie's late write at epoch e is fenced
by the partition (the marker moved it past e) as well as by the coordinator.
When e+1 would exhaust the epochs, the PREPARE record names a fresh producer id
(``next_producer_id``) that the COMPLETE record rotates to at epoch 0. A retry
of an EndTxn already decided comes with the old epoch (e = current - 1, or the
previous producer id at the last epoch after a rotation) and is answered its
outcome; any other epoch is PRODUCER_FENCED. Kafka's table for the settled states::

                    abort, retry   abort, current   commit, retry   commit, current
    Empty           FENCED         bump             FENCED          INVALID_TXN_STATE
    CompleteAbort   NONE           bump             INVALID_TXN_STATE  INVALID_TXN_STATE
    CompleteCommit  INVALID_TXN_STATE  bump         NONE            INVALID_TXN_STATE

A leader's add for a TV2 client that finds the id busy — a record being written,
or the previous transaction's markers still going out (the client did not wait
for them) — is parked rather than answered CONCURRENT_TRANSACTIONS, and tried
again when the id's write completes (``_parked``, at most
``ADD_PARTITIONS_PARKED_MAX`` per id, each for ``ADD_PARTITIONS_PARKED_MS_MAX``
on the timer clock). Kafka's leaders retry that answer for 100 ms instead
(``add.partitions.to.txn.retry.backoff.max.ms``) and read no further request of
the connection meanwhile; a leader that answered its producer
NOT_ENOUGH_REPLICAS at once would let the producer's next, pipelined batches
through the add first, out of order (Kafka Streams' five requests in flight).

Clients on versions 0 and 1 (librdkafka, kafka-python, franz-go …: EndTxn v4 and
below) keep the old rules (``end_transaction``): one epoch for many transactions,
bumped only by InitProducerId or a timeout.

Two clocks, as in Kafka. ``now_ms``, from the caller, is the coordinator's
timer clock, a monotonic one: when markers are (re)sent and when the next
timeout and expiration check runs (Kafka's marker channel and scheduler), so a
wall-clock step neither fires nor postpones them. Wall time, read from the
injected ``wall_ms()``, goes where Kafka keeps it: the start and last-update
timestamps written to the records, and the timeout and expiration decisions
that compare with them — so a coordinator that loads the partition judges a
transaction by the same timestamps.

Pure Python: time comes from the caller and ``wall_ms``; writes and markers go
through injected functions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.shard import append_error
from tidelog.txn.records import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value

logger = logging.getLogger("tidelog.txn")

PRODUCER_EPOCH_MAX = 0x7FFF - 1        # Kafka's Short.MaxValue - 1: then a new producer id
TRANSACTION_VERSION_EPOCH_BUMP = 2     # the transaction.version from which EndTxn bumps the epoch
ADD_PARTITIONS_PARKED_MS_MAX = 5_000    # a busy id's TV2 add waits this long (timer clock), then
ADD_PARTITIONS_PARKED_MAX = 100         # CONCURRENT_TRANSACTIONS; and at most this many per id
MARKER_RETRY_BACKOFF_MS = 200

_PREPARE_STATES = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def produce_error(verification_error: ErrorCode, transaction_abortable: bool = False) -> ErrorCode:
    """What a Produce answers for a partition the KIP-890 verification (``verify``) refused:
    the coordinator's verdict, except that a fenced producer (PRODUCER_FENCED) is told
    INVALID_PRODUCER_EPOCH, as Kafka's partition leaders answer — the partition's own epoch
    check gives the same, and clients (librdkafka) take 47 on a transactional Produce for
    "fenced by a newer instance", a fatal error, where PRODUCER_FENCED is only abortable.
    A partition outside the open transaction is TRANSACTION_ABORTABLE (KIP-890) for a
    client that knows that error (``transaction_abortable``: Produce v11+), which aborts
    the transaction and goes on; older ones hear INVALID_TXN_STATE, as Kafka's
    AddPartitionsToTxnManager maps it for them."""
    if verification_error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if verification_error == ErrorCode.TRANSACTION_ABORTABLE and not transaction_abortable:
        return ErrorCode.INVALID_TXN_STATE
    return verification_error
# Append errors after which the record is in the leader's log and may still commit:
# the delayed produce expired, or the ISR shrank below min.insync.replicas after the append.
_OUTCOME_UNKNOWN = {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}

Respond = Callable[[ErrorCode], None]
# send_markers(producer_id, producer_epoch, commit, partitions, coordinator_epoch, on_done(ok))
SendMarkers = Callable[[int, int, bool, frozenset, int, Callable[[bool], None]], None]


@dataclass
class TxnConfig:
    max_timeout_ms: int = 900_000                 # transaction.max.timeout.ms
    abort_timed_out_interval_ms: int = 10_000      # transaction.abort.timed.out.transaction.cleanup.interval.ms
    commit_timeout_ms: int = 5_000                 # the internal writes' timeout
    id_expiration_ms: int = 604_800_000            # transactional.id.expiration.ms (7 days)

    @classmethod
    def from_settings(cls, settings) -> "TxnConfig":
        return cls(settings["transaction.max.timeout.ms"],
                   settings["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                   id_expiration_ms=settings["transactional.id.expiration.ms"])


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset = field(default_factory=frozenset)
    last_update_ms: int = -1            # wall time, as stored
    start_ms: int = -1                  # wall time, as stored
    pending: bool = False               # a record for this id is being written
    markers_due_ms: int | None = None   # PREPARE_*: when to (re)send the markers (timer clock)
    # KIP-890 part 2, stored as tagged fields. previous_producer_id is the producer id
    # before the last transition (so a retry after a rotation is recognised);
    # next_producer_id is set only on a TV2 PREPARE record whose epoch is exhausted.
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0

    def value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           self.partitions, self.last_update_ms, self.start_ms, self.previous_producer_id,
                           self.next_producer_id, self.client_transaction_version)

    @property
    def epoch_bumps(self) -> bool:
        """The client runs transaction.version 2: every EndTxn bumps the epoch."""
        return self.client_transaction_version >= TRANSACTION_VERSION_EPOCH_BUMP


class TxnShard:
    def __init__(self, partition: int, coordinator_epoch: int, config: TxnConfig, write, send_markers: SendMarkers,
                 wall_ms: Callable[[], int], producer_ids: Callable[[], int] = lambda: -1):
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch     # the leader epoch of the partition
        self.config = config
        self._write = write
        self._send_markers = send_markers
        self._wall_ms = wall_ms                        # wall time, for the records; timers use now_ms
        # A fresh producer id at hand, or -1 (the driver's block of ids is being refilled):
        # what a timeout abort at the last epoch moves the id to.
        self._producer_ids = producer_ids
        self.transactions: dict[str, TxnMetadata] = {}
        self.loading = True
        self._next_timeout_check_ms = 0                # on the timer clock
        # TV2 adds that found their id busy: id -> [(deadline on the timer clock, retry(error))]
        self._parked: dict[str, list[tuple[int, Callable[[], None], Respond]]] = {}

    # ================================================================ replay

    def replay(self, key_bytes: bytes, value_bytes: bytes | None, now_ms: int) -> None:
        transactional_id = decode_key(key_bytes)
        if value_bytes is None:
            self.transactions.pop(transactional_id, None)
            return
        value = decode_value(value_bytes)
        old = self.transactions.get(transactional_id)
        meta = TxnMetadata(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms,
                           value.state, value.partitions, value.last_update_ms, value.start_ms,
                           previous_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id,
                           client_transaction_version=value.client_transaction_version)
        # ``pending`` stays False: an id has at most one record not yet replayed (its
        # pending write, kept pending even when the write timed out), and this is it.
        if meta.state in _PREPARE_STATES and not self.loading:
            if old is not None and (old.producer_id, old.producer_epoch, old.state) == \
                    (meta.producer_id, meta.producer_epoch, meta.state):
                meta.markers_due_ms = old.markers_due_ms     # the same decision: keep its schedule
            else:
                # A new decision: its markers are due now, whoever wrote it and whether
                # or not its writer was told it committed (a timed-out write that
                # committed later has nobody else to send them).
                meta.markers_due_ms = now_ms
        self.transactions[transactional_id] = meta

    def loaded(self, now_ms: int) -> None:
        """Replay reached the log end at election: serve, and finish what was decided."""
        self.loading = False
        for meta in self.transactions.values():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                meta.markers_due_ms = now_ms
        logger.log(logging.INFO if self.transactions else logging.DEBUG,
                "loaded %d transactional ids from __transaction_state-%d (coordinator epoch %d)",
                len(self.transactions), self.partition, self.coordinator_epoch)
        self.on_tick(now_ms)

    def unload(self) -> None:
        self.transactions.clear()
        parked, self._parked = self._parked, {}
        for waiting in parked.values():
            for _, _, respond in waiting:
                respond(ErrorCode.NOT_COORDINATOR)

    # ============================================================ writes

    def _store(self, meta: TxnMetadata, new: TxnMetadata, done: Callable[[ErrorCode], None]) -> None:
        """Write ``new`` as ``meta``'s next state; ``done`` gets the (client-facing) error."""
        meta.pending = True
        if meta.producer_id >= 0:
            new = replace(new, previous_producer_id=meta.producer_id)    # Kafka's prevProducerId

        def written(error: ErrorCode) -> None:
            current = self.transactions.get(meta.transactional_id)
            if current is not None and error not in _OUTCOME_UNKNOWN:
                current.pending = False
            # else the record may still commit: the id stays pending until it is replayed
            # (or the shard is unloaded, when a new leader replays whatever committed).
            done(append_error(error))
            self._unpark(meta.transactional_id)
        self._write([(encode_key(new.transactional_id), encode_value(new.value()))], written)

    def _check_producer(self, meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode:
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.pending or meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                                          TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    # ==================================================== InitProducerId

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                         fresh_producer_id: int, now_ms: int,
                         respond: Callable[[ErrorCode, int, int], None]) -> None:
        """A transactional producer starts (or restarts): the id's epoch goes up by one,
        fencing any older instance; an open transaction is aborted first."""
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return respond(ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            new = TxnMetadata(transactional_id, fresh_producer_id, 0, timeout_ms, TxnState.EMPTY,
                              frozenset(), self._wall_ms(), -1)
            placeholder = self.transactions[transactional_id] = replace(new, producer_id=-1, producer_epoch=-1)

            def created(error: ErrorCode) -> None:
                if (error != ErrorCode.NONE and self.transactions.get(transactional_id) is placeholder
                        and not placeholder.pending):
                    del self.transactions[transactional_id]      # nothing was written
                respond(error, *((fresh_producer_id, 0) if error == ErrorCode.NONE else (-1, -1)))
            return self._store(placeholder, new, created)
        if meta.pending:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
        if producer_id >= 0:                                # KIP-360: a producer asks to bump its own epoch
            if producer_id != meta.producer_id:
                return respond(ErrorCode.PRODUCER_FENCED, -1, -1)
            if producer_epoch != meta.producer_epoch:
                return respond(ErrorCode.PRODUCER_FENCED, -1, -1)
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE):
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
        if meta.state == TxnState.ONGOING:
            # The previous instance left a transaction open: abort it with the epoch bumped
            # (fencing that instance); the new one retries and gets its epoch after.
            self._abort_fenced(meta, now_ms, fresh_producer_id)
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
        if meta.producer_epoch >= PRODUCER_EPOCH_MAX:
            new_id, new_epoch = fresh_producer_id, 0
        else:
            new_id, new_epoch = meta.producer_id, meta.producer_epoch + 1
        new = replace(meta, producer_id=new_id, producer_epoch=new_epoch, timeout_ms=timeout_ms,
                      state=TxnState.EMPTY, partitions=frozenset(), last_update_ms=self._wall_ms(), start_ms=-1,
                      pending=False, markers_due_ms=None)
        self._store(meta, new, lambda error: respond(error, *((new_id, new_epoch) if error == ErrorCode.NONE
                                                               else (-1, -1))))

    # ============================================== AddPartitionsToTxn

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: set[TopicPartition], now_ms: int, respond: Respond,
                       client_transaction_version: int = 0) -> None:
        """AddPartitionsToTxn / AddOffsetsToTxn from a client (versions 0-1), or a partition
        leader adding a partition for a TV2 client (``client_transaction_version`` 2)."""
        meta = self.transactions.get(transactional_id)
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error == ErrorCode.CONCURRENT_TRANSACTIONS and client_transaction_version >= TRANSACTION_VERSION_EPOCH_BUMP:
            parked = self._parked.setdefault(transactional_id, [])
            if len(parked) < ADD_PARTITIONS_PARKED_MAX:
                parked.append((now_ms + ADD_PARTITIONS_PARKED_MS_MAX, lambda: self.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions, now_ms, respond,
                    client_transaction_version), respond))
                return None
        if error != ErrorCode.NONE:
            return respond(error)
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return respond(ErrorCode.NONE)
        ongoing = meta.state == TxnState.ONGOING
        wall_ms = self._wall_ms()
        new = replace(meta, state=TxnState.ONGOING, partitions=(meta.partitions if ongoing else frozenset()) | partitions,
                      last_update_ms=wall_ms, start_ms=meta.start_ms if ongoing else wall_ms, pending=False,
                      client_transaction_version=client_transaction_version)
        self._store(meta, new, respond)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn with verify_only, asked by a partition
        leader before it appends a transactional batch): NONE for each partition the
        producer's open transaction has, TRANSACTION_ABORTABLE for the others (a late
        or zombie write that would otherwise open a transaction nobody ends), as Kafka's
        coordinator answers; the leader tells older clients INVALID_TXN_STATE
        (``produce_error``)."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return {tp: ErrorCode.INVALID_PRODUCER_ID_MAPPING for tp in partitions}
        if producer_epoch != meta.producer_epoch:
            return {tp: ErrorCode.PRODUCER_FENCED for tp in partitions}
        ongoing = meta.state == TxnState.ONGOING
        return {tp: ErrorCode.NONE if ongoing and tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}

    # ========================================================== EndTxn

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        now_ms: int, respond: Respond) -> None:
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return respond(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != meta.producer_epoch:
            return respond(ErrorCode.PRODUCER_FENCED)
        if meta.pending:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS)
        done_state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepare_state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if meta.state == done_state:
            return respond(ErrorCode.NONE)                 # a retry of an EndTxn that completed
        if meta.state == prepare_state:
            return respond(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state != TxnState.ONGOING:
            return respond(ErrorCode.INVALID_TXN_STATE)
        self._prepare(meta, replace(meta, state=prepare_state, client_transaction_version=min(
            meta.client_transaction_version, TRANSACTION_VERSION_EPOCH_BUMP - 1)), now_ms, respond)

    def epoch_exhausted(self, transactional_id: str) -> bool:
        """Whether a TV2 EndTxn for this id now would need a fresh producer id (the caller
        allocates one before ``end_transaction_v2``, which is synchronous)."""
        meta = self.transactions.get(transactional_id)
        return meta is not None and meta.producer_epoch >= PRODUCER_EPOCH_MAX

    def end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                           fresh_producer_id: int, now_ms: int,
                           respond: Callable[[ErrorCode, int, int], None]) -> None:
        """EndTxn v5+ (transaction.version 2): the epoch goes up with every commit or abort,
        and ``respond(error, producer_id, producer_epoch)`` tells the client what to use
        next (module docstring). ``fresh_producer_id`` (or -1) is used if the epoch is
        exhausted."""
        def refuse(error: ErrorCode) -> None:
            respond(error, -1, -1)
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return refuse(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        # A retry of an EndTxn this coordinator already decided: the epoch it bumped, or
        # the producer id it rotated away from at the last epoch.
        retry_on_bump = meta.producer_id == producer_id and meta.producer_epoch == producer_epoch + 1
        retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == PRODUCER_EPOCH_MAX
                             and meta.producer_epoch == 0 and meta.producer_id != producer_id)
        if meta.producer_id != producer_id and not retry_on_overflow:
            return refuse(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        retry = retry_on_bump or retry_on_overflow
        current = meta.producer_epoch == producer_epoch
        state = meta.state
        if state in _PREPARE_STATES:
            valid = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or current
        else:
            valid = current
        if not valid:
            return refuse(ErrorCode.PRODUCER_FENCED)
        if meta.pending:
            return refuse(ErrorCode.CONCURRENT_TRANSACTIONS)
        prepare_state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done_state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state in _PREPARE_STATES:
            return refuse(ErrorCode.CONCURRENT_TRANSACTIONS if state == prepare_state else ErrorCode.INVALID_TXN_STATE)
        if state == done_state and retry:
            return respond(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)   # decided and written
        # An abort with nothing open (Empty, or after a completed transaction) still bumps
        # the epoch: the client may have produced to partitions never added (a refused write).
        if not (state == TxnState.ONGOING or (not commit and not retry)):
            return refuse(ErrorCode.INVALID_TXN_STATE)
        if state not in (TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return refuse(ErrorCode.INVALID_TXN_STATE)
        next_producer_id = -1
        if meta.producer_epoch >= PRODUCER_EPOCH_MAX:
            if fresh_producer_id < 0:
                return refuse(ErrorCode.COORDINATOR_NOT_AVAILABLE)      # the caller had none to give
            next_producer_id = fresh_producer_id
        wall_ms = self._wall_ms()
        new = replace(meta, state=prepare_state, producer_epoch=meta.producer_epoch + 1,
                      next_producer_id=next_producer_id, client_transaction_version=TRANSACTION_VERSION_EPOCH_BUMP,
                      partitions=meta.partitions if state == TxnState.ONGOING else frozenset(),
                      start_ms=meta.start_ms if state == TxnState.ONGOING else wall_ms)
        answer = (next_producer_id, 0) if next_producer_id >= 0 else (meta.producer_id, meta.producer_epoch + 1)
        self._prepare(meta, new, now_ms, lambda error: respond(error, *(answer if error == ErrorCode.NONE
                                                                        else (-1, -1))))

    def _prepare(self, meta: TxnMetadata, new: TxnMetadata, now_ms: int, respond: Respond) -> None:
        """Write the PREPARE record ``new`` (the decision); its markers follow once it committed."""
        state = new.state
        new = replace(new, last_update_ms=self._wall_ms(), pending=False)

        def prepared(error: ErrorCode) -> None:
            respond(error)
            current = self.transactions.get(meta.transactional_id)
            if error == ErrorCode.NONE and current is not None and current.state == state:
                current.markers_due_ms = now_ms
                self._send(current, now_ms)
        self._store(meta, new, prepared)

    def _abort_fenced(self, meta: TxnMetadata, now_ms: int, fresh_producer_id: int) -> bool:
        """Abort an open transaction with the producer's epoch bumped (a timeout, or a
        new instance of the producer): the old instance is fenced. At the last epoch
        (``PRODUCER_EPOCH_MAX``) the PREPARE_ABORT record and its markers take the int16's
        last value, and name ``fresh_producer_id``, which the COMPLETE record moves the id
        to at epoch 0 (Kafka's KAFKA-20090): a zombie at the last epoch is fenced, and a
        TV2 client's retried EndTxn learns the new id. Without a fresh id at hand it waits
        (False): the next check tries again, as Kafka's timeout abort does when its
        producer id manager has none."""
        next_producer_id = -1
        if meta.producer_epoch >= PRODUCER_EPOCH_MAX:
            if fresh_producer_id < 0:
                logger.info("the transaction of %r (producer %d) waits for a fresh producer id to be aborted "
                         "at the last epoch", meta.transactional_id, meta.producer_id)
                return False
            next_producer_id = fresh_producer_id
        logger.info("aborting the transaction of %r (producer %d) and fencing epoch %d",
                 meta.transactional_id, meta.producer_id, meta.producer_epoch)
        epoch = min(meta.producer_epoch + 1, 0x7FFF)      # an int16: never past its last value
        self._prepare(meta, replace(meta, state=TxnState.PREPARE_ABORT, producer_epoch=epoch,
                                    next_producer_id=next_producer_id), now_ms, lambda error: None)
        return True

    # ========================================================= markers

    def _send(self, meta: TxnMetadata, now_ms: int) -> None:
        """Write the markers of a PREPARE_* transaction, then its COMPLETE record."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        meta.markers_due_ms = None                         # in flight
        snapshot = (meta.producer_id, meta.producer_epoch, meta.state)

        def complete(ok: bool) -> None:
            current = self.transactions.get(meta.transactional_id)
            if current is None or (current.producer_id, current.producer_epoch, current.state) != snapshot:
                return
            if not ok:
                current.markers_due_ms = now_ms + MARKER_RETRY_BACKOFF_MS
                return
            done = replace(current, state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                           partitions=frozenset(), pending=False, last_update_ms=self._wall_ms())
            if current.next_producer_id >= 0:
                # A TV2 EndTxn exhausted the epoch: the markers went out at the last epoch
                # of the old id, the client was told the new id at epoch 0.
                done = replace(done, producer_id=current.next_producer_id, producer_epoch=0, next_producer_id=-1)

            def completed(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    again = self.transactions.get(meta.transactional_id)
                    if again is not None and again.state == snapshot[2]:
                        again.markers_due_ms = now_ms + MARKER_RETRY_BACKOFF_MS
            self._store(current, done, completed)
        if not meta.partitions:
            complete(True)
            return
        self._send_markers(meta.producer_id, meta.producer_epoch, commit, meta.partitions,
                           self.coordinator_epoch, complete)

    def _unpark(self, transactional_id: str) -> None:
        """The id's write completed: its parked adds try again. One that finds the id
        busy still (a PREPARE, whose markers are due next) parks once more with the same
        deadline: the retry repeats the call with its first ``now_ms``."""
        for _, retry, _ in self._parked.pop(transactional_id, ()):
            retry()

    # ============================================================ time

    def on_tick(self, now_ms: int) -> None:
        """``now_ms`` on the timer clock: markers due, and whether the periodic timeout and
        expiration check is due; the check itself compares wall time with the stored
        timestamps, as Kafka's ``abortTimedOutTransactions`` and id expiration do."""
        for transactional_id, parked in list(self._parked.items()):
            expired = [entry for entry in parked if entry[0] <= now_ms]
            if expired:
                self._parked[transactional_id] = [entry for entry in parked if entry[0] > now_ms]
                for _, _, respond in expired:
                    respond(ErrorCode.CONCURRENT_TRANSACTIONS)
        check = now_ms >= self._next_timeout_check_ms
        wall_ms = self._wall_ms() if check else 0
        for meta in list(self.transactions.values()):
            if meta.pending:
                continue
            if meta.markers_due_ms is not None and meta.markers_due_ms <= now_ms:
                self._send(meta, now_ms)
            elif (check and meta.state == TxnState.ONGOING
                  and meta.start_ms >= 0 and wall_ms - meta.start_ms > meta.timeout_ms):
                self._abort_fenced(meta, now_ms, self._producer_ids()
                                   if meta.producer_epoch >= PRODUCER_EPOCH_MAX else -1)
        if check:
            self._next_timeout_check_ms = now_ms + self.config.abort_timed_out_interval_ms
            self._expire_ids(wall_ms)

    def _expire_ids(self, wall_ms: int) -> None:
        """``transactional.id.expiration.ms``: an id with no transaction open, silent that
        long (wall time, against its stored last update), is forgotten (a tombstone), as
        Kafka's ``TransactionStateManager`` does."""
        for meta in list(self.transactions.values()):
            if (not meta.pending and meta.producer_id >= 0
                    and meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                    and wall_ms - meta.last_update_ms > self.config.id_expiration_ms):
                meta.pending = True

                def written(error: ErrorCode, meta=meta) -> None:
                    if self.transactions.get(meta.transactional_id) is meta and error not in _OUTCOME_UNKNOWN:
                        meta.pending = False
                logger.info("transactional id %r expired (silent for %d ms)", meta.transactional_id,
                         wall_ms - meta.last_update_ms)
                self._write([(encode_key(meta.transactional_id), None)], written)

    def next_deadline_ms(self) -> int | None:
        due = [meta.markers_due_ms for meta in self.transactions.values()
               if meta.markers_due_ms is not None and not meta.pending]    # on_tick skips pending ids
        due.append(self._next_timeout_check_ms)
        due.extend(deadline_ms for parked in self._parked.values() for deadline_ms, _, _ in parked)
        return min(due)

    # ======================================================= describe

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        meta = self.transactions.get(transactional_id)
        return None if meta is None or meta.producer_id < 0 else meta
