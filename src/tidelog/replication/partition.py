"""One partition's replication state on one broker (Kafka's ``Partition``; docs/replication.md).

Theory of operation. A ``Partition`` wraps the local ``Log`` and knows the
partition's assignment, leader, leader epoch, partition epoch and ISR as the
metadata log last said (``make_leader`` / ``make_follower``, as Kafka's
``Partition.makeLeader`` / ``makeFollower``).

Leader side. It keeps a ``ReplicaState`` per follower, fed by follower fetches
(Kafka's ``Replica.updateFetchStateOrThrow``), from which it decides the high
watermark (``Partition.maybeIncrementLeaderHW``) and ISR changes
(``maybeExpandIsr`` / ``maybeShrinkIsr``). ISR changes are *proposed*
(``pending_isr`` / ``pending_proposal``, one in flight at a time) and only
committed when the controller accepts them (KIP-497's AlterPartition); until
then the leader uses the *maximal* ISR (committed ∪ proposed) for the high
watermark, but the committed ISR for the min-ISR checks. Reads are validated in
the order of Kafka's ``Partition.fetchRecords`` (``read_records``, and the same
epoch/role checks for ``fetch_offset_snapshot`` and ``last_offset_for_leader_epoch``,
which serve a follower's ListOffsets and OffsetsForLeaderEpoch).

Follower side (driven by ``fetcher.py``): ``append_records_as_follower`` (step 8
of the nine steps in docs/replication.md), ``update_follower_high_watermark`` =
clamp(leader HW, log start, LEO) (it may move back),
``update_follower_log_start_offset`` (step 9, with the DeleteRecords race: a
leader log start offset above our high watermark is not an error), and the
truncation helpers.

Sans-IO: every input carries ``now_ms``; outputs are return values (e.g. the
AlterPartition proposal to send). Invariants: ``log_start_offset <=
high_watermark <= log_end_offset`` (asserted by the Log); a leader's high
watermark never decreases; only the leader has replica states; at most one ISR
proposal is in flight.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from tidelog.core.errors import ErrorCode, KafkaError, UnexpectedAppendOffsetError
from tidelog.core.states import transition
from tidelog.records.batch import build_marker, iter_batches, validate_batch
from tidelog.storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

logger = logging.getLogger("tidelog.partition")

UNDEFINED_EPOCH = -1
RECOVERED, RECOVERING = 0, 1       # KIP-704's LeaderRecoveryState
PRODUCER_EPOCH_MAX = 0x7FFF        # a producer epoch is an int16
UNDEFINED_OFFSET = -1
NO_TIMESTAMP = -1
LATEST_TIERED_TIMESTAMP = -5       # ListOffsets: the last tiered offset (no tiered storage: none, -1)
# A transaction in question (in doubt after an unclean election, or open longer than
# transaction.max.timeout.ms): its coordinators are asked at once, then again after a
# backoff doubling from MIN to MAX while they have not settled it.
IN_DOUBT_QUESTION_BACKOFF_MS_MIN = 100
IN_DOUBT_QUESTION_BACKOFF_MS_MAX = 10_000


class Isolation(enum.IntEnum):
    LOG_END = 0          # followers
    HIGH_WATERMARK = 1   # consumers, read_uncommitted
    TXN_COMMITTED = 2    # consumers, read_committed


@dataclass
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    broker_id: int
    log_end_offset: int = UNDEFINED_OFFSET
    log_start_offset: int = UNDEFINED_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNDEFINED_OFFSET
    last_fetch_time_ms: int = 0
    broker_epoch: int | None = None
    # The high watermark the last answer to its fetch carried: while the leader's is
    # higher, a waiting fetch of this follower is answered at once (KIP-392 promptness,
    # only with a replica selector: ReplicaManager.high_watermark_unsent).
    last_sent_high_watermark: int = UNDEFINED_OFFSET

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int,
                           leader_log_end_offset: int, broker_epoch: int) -> None:
        """Kafka's ``Replica.updateFetchStateOrThrow``."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.last_fetch_leader_log_end_offset = max(leader_log_end_offset,
                                                    self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = fetch_time_ms
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.broker_epoch = broker_epoch

    def reset(self, in_isr: bool, now_ms: int, was_leader: bool) -> None:
        """On a leader-epoch bump (Kafka's ``Replica.resetReplicaState``)."""
        self.last_caught_up_time_ms = now_ms if in_isr else 0
        if not was_leader:
            self.log_end_offset = UNDEFINED_OFFSET
            self.log_start_offset = UNDEFINED_OFFSET
            self.last_fetch_leader_log_end_offset = UNDEFINED_OFFSET
            self.last_fetch_time_ms = 0
            self.broker_epoch = None
            self.last_sent_high_watermark = UNDEFINED_OFFSET


@dataclass(frozen=True)
class PartitionState:
    """A partition's state as the metadata log says (the input of become-leader/follower)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int
    # KIP-704: RECOVERING (1) after an unclean election, until the leader reports RECOVERED (0).
    leader_recovery_state: int = 0



class IsrState(enum.Enum):
    """A leader partition's ISR, as Kafka's ``Partition`` tracks it
    (CommittedPartitionState / PendingExpandIsr / PendingShrinkIsr)."""

    COMMITTED = "committed"              # the ISR the controller accepted
    PENDING_EXPAND = "pending expand"    # an AlterPartition adding a follower is in flight
    PENDING_SHRINK = "pending shrink"    # an AlterPartition removing followers is in flight


class IsrEvent(enum.Enum):
    PROPOSE_EXPAND = "propose expand"            # a caught-up follower may join
    PROPOSE_SHRINK = "propose shrink"            # followers fell behind
    ACCEPTED = "accepted"                        # the controller's answer applied
    REJECTED = "rejected"                        # INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED
    NEW_METADATA = "new metadata"                # become leader / follower replaced the state


ISR_TRANSITIONS = {
    IsrState.COMMITTED: {IsrEvent.PROPOSE_EXPAND: IsrState.PENDING_EXPAND,
                         IsrEvent.PROPOSE_SHRINK: IsrState.PENDING_SHRINK,
                         IsrEvent.NEW_METADATA: IsrState.COMMITTED},
    IsrState.PENDING_EXPAND: {IsrEvent.ACCEPTED: IsrState.COMMITTED, IsrEvent.REJECTED: IsrState.COMMITTED,
                              IsrEvent.NEW_METADATA: IsrState.COMMITTED},
    IsrState.PENDING_SHRINK: {IsrEvent.ACCEPTED: IsrState.COMMITTED, IsrEvent.REJECTED: IsrState.COMMITTED,
                              IsrEvent.NEW_METADATA: IsrState.COMMITTED},
}


@dataclass(frozen=True, eq=False)
class IsrProposal:
    """An AlterPartition proposal this leader wants sent.

    Compared by identity: a response is applied only to the very proposal it
    answers (a newer proposal for the same partition is a different object).
    ``new_isr_broker_epochs`` pairs each ISR member with the broker epoch it last
    fetched with (-1 when unknown, and for the leader itself), for AlterPartition v3+.
    ``leader_recovery_state`` is what the leader reports (KIP-704): RECOVERED, always —
    its recovery is done when it takes the epoch, before it proposes anything, so its
    first ISR change (a follower caught up) tells the controller it recovered.
    """

    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    new_isr_broker_epochs: tuple[int, ...] | None = None
    leader_recovery_state: int = RECOVERED


@dataclass
class ReadResult:
    error: ErrorCode = ErrorCode.NONE
    records: object = None            # storage FileSlice of whole batches, or None
    fetch_offset_metadata: object = None
    high_watermark: int = UNDEFINED_OFFSET
    last_stable_offset: int = UNDEFINED_OFFSET
    log_start_offset: int = UNDEFINED_OFFSET
    log_end_offset: int = UNDEFINED_OFFSET
    diverging_epoch: tuple[int, int] | None = None
    aborted_transactions: list | None = None   # AbortedTxn, for read_committed reads
    preferred_read_replica: int = -1           # KIP-392: read there instead (no records); -1 none


@dataclass
class ReplicationSettings:
    """The settings a partition's decisions depend on (per topic, resolved)."""

    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    strict_min_isr: bool = True   # KIP-966 part 1: HW moves only with |ISR| >= min ISR


class Partition:
    def __init__(self, topic_partition, local_broker_id: int, log, settings: ReplicationSettings | None = None,
                 alive_broker_epoch=lambda broker_id: None):
        self.topic_partition = topic_partition
        self.local_broker_id = local_broker_id
        self.log = log
        self.settings = settings or ReplicationSettings()
        # Returns the broker epoch the metadata image holds for an alive broker,
        # None if the broker is fenced, unknown or in controlled shutdown.
        self._alive_broker_epoch = alive_broker_epoch
        self.leader: int = -1
        self.leader_epoch: int = UNDEFINED_EPOCH
        self.partition_epoch: int = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()          # committed: the controller accepted it
        self.isr_state = IsrState.COMMITTED               # moves only through ISR_TRANSITIONS
        self.pending_isr: tuple[int, ...] | None = None  # in flight to the controller
        self.pending_proposal: IsrProposal | None = None  # the proposal carrying pending_isr
        self.leader_epoch_start_offset: int | None = None
        self.replica_states: dict[int, ReplicaState] = {}
        self.leader_recovery_state: int = RECOVERED      # as the metadata last said
        # Leader only: producer id -> epoch of each transaction a RECOVERING election found
        # open, until its coordinator's marker (or a newer epoch of the producer) settles it
        # (``transactions_in_doubt_after_recovery``). Memory only, per leader epoch.
        self.transactions_in_doubt: dict[int, int] = {}
        # Leader only: producer id -> [when to ask its coordinators next (None: a question is
        # out), questions asked, the epoch asked about], for each transaction in question: in
        # doubt, or open too long (``maybe_question_old_transactions``). Ends when the
        # transaction is no longer open here at that epoch (``in_doubt_questions_due``).
        self._in_doubt_asks: dict[int, list] = {}
        # Leader only: (producer id, first offset) -> the largest timestamp of the open
        # transaction's first batch, read from the log once (``_transaction_start_ms``).
        self._transaction_start_ms: dict[tuple[int, int], int] = {}

    def __repr__(self) -> str:
        return (f"Partition({self.topic_partition}, broker={self.local_broker_id}, leader={self.leader}, "
                f"leader_epoch={self.leader_epoch}, isr={list(self.isr)}, log={self.log!r})")

    # ------------------------------------------------------------------ roles

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_broker_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR ∪ proposed ISR, committed members first (Kafka's ``maximalIsr``)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    @property
    def effective_min_isr(self) -> int:
        return min(self.settings.min_insync_replicas, max(1, len(self.replicas)))

    def make_leader(self, state: PartitionState, now_ms: int) -> bool:
        """Kafka's ``Partition.makeLeader``. Returns True iff this broker was not leader before."""
        if state.partition_epoch < self.partition_epoch:
            logger.info("%s: ignoring leader state %s older than partition epoch %d",
                        self.topic_partition, state, self.partition_epoch)
            return False
        was_leader = self.is_leader
        if (was_leader and (state.leader_epoch, state.partition_epoch, tuple(state.isr), tuple(state.replicas),
                            state.leader_recovery_state) == (self.leader_epoch, self.partition_epoch, self.isr,
                                                             self.replicas, self.leader_recovery_state)):
            # The registration this leader already acts on, applied again (a metadata
            # snapshot's load re-applies every partition): an ISR change in flight stays
            # in flight. Forgetting a proposed expansion the controller then committed let
            # the HW pass that follower's log end while the committed ISR held it (seed 2755).
            return False
        followers = [r for r in state.replicas if r != self.local_broker_id]
        if state.leader_epoch > self.leader_epoch:
            # The new epoch starts at our log end offset: followers holding epochs we
            # never saw can find their truncation point from it (KIP-279).
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.assign_leader_epoch(state.leader_epoch, self.log.log_end_offset)
            self.replica_states = {
                r: self.replica_states[r] if was_leader and r in self.replica_states else ReplicaState(r)
                for r in followers}
            for r in followers:
                self.replica_states[r].reset(r in state.isr, now_ms, was_leader)
            self.leader_epoch = state.leader_epoch
            self.transactions_in_doubt = (self.transactions_in_doubt_after_recovery()
                                          if state.leader_recovery_state == RECOVERING else {})
            self._in_doubt_asks = {producer_id: [0, 0, epoch] for producer_id, epoch in self.transactions_in_doubt.items()}
            self._transaction_start_ms = {}
        else:
            # Same leader epoch: only the assignment or ISR changed; states are kept.
            self.replica_states = {r: self.replica_states.get(r) or ReplicaState(r) for r in followers}
        self.leader = state.leader
        self.replicas = tuple(state.replicas)
        self.isr = tuple(state.isr)
        assert set(self.isr) <= set(self.replicas) and self.local_broker_id in self.isr, (self.topic_partition, state)
        self._isr_step(IsrEvent.NEW_METADATA)
        self.partition_epoch = state.partition_epoch
        self.leader_recovery_state = state.leader_recovery_state
        self.maybe_increment_leader_high_watermark(now_ms)
        return not was_leader

    def make_follower(self, state: PartitionState) -> bool:
        """Kafka's ``Partition.makeFollower``. Returns True iff the leader epoch moved
        (restart fetching)."""
        if state.partition_epoch < self.partition_epoch:
            logger.info("%s: ignoring follower state %s older than partition epoch %d",
                        self.topic_partition, state, self.partition_epoch)
            return False
        bumped = state.leader_epoch > self.leader_epoch
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = tuple(state.replicas)
        self.isr = ()
        self._isr_step(IsrEvent.NEW_METADATA)
        self.replica_states = {}
        self.leader_epoch_start_offset = None
        self.transactions_in_doubt = {}
        self._in_doubt_asks = {}
        self._transaction_start_ms = {}
        self.partition_epoch = state.partition_epoch
        self.leader_recovery_state = state.leader_recovery_state
        return bumped

    # --------------------------------------------- unclean-election recovery

    def transactions_in_doubt_after_recovery(self) -> dict[int, int]:
        """KIP-704's RECOVERING leader, doing more than Kafka's: the transactions its
        producer state shows open are *in doubt* (docs/transactions.md, "Unclean
        elections"), ``{producer id: epoch}``.

        Such a leader may lack markers the old lineage wrote, or may hold everything and
        only lack a marker its coordinator is still sending (a last known leader, seeds
        1375, 1086, 5335, 5434: aborting there lost transactions the coordinator had
        committed). It cannot tell which, so it decides nothing alone; it refuses the
        producer's records at that epoch (INVALID_PRODUCER_EPOCH: a record joining the
        open transaction might join one whose marker was lost) and settles each as the
        coordinator says: its marker (``append_records_to_leader``), or its answer to the
        question this leader asks it (``in_doubt_questions_due``: the verdict's marker is
        written as the coordinator's, ``tidelog.txn.in_doubt``). A batch of the producer
        at a newer epoch proves the coordinator has finished with the old one (a
        producer's epoch moves only once its transaction is completed, or aborted at the
        new epoch), so the leader aborts it then (``abort_in_doubt_transaction``)."""
        in_doubt = {producer_id: epoch for producer_id, epoch, _, _, _, first_offset in self.log.active_producers()
                    if first_offset >= 0}
        if in_doubt:
            logger.warning("%s: elected RECOVERING at leader epoch %d; transactions left open (producer: epoch) "
                           "wait for their coordinator: %s", self.topic_partition, self.leader_epoch, in_doubt)
        return in_doubt

    def in_doubt_coordinator_epoch(self, producer_id: int) -> int | None:
        """The coordinator epoch a marker settling ``producer_id``'s doubted transaction
        carries: the last this partition saw, so the real coordinator's later markers are
        not fenced. None if the transaction is no longer open here."""
        for pid, _, _, _, coordinator_epoch, first_offset in self.log.active_producers():
            if pid == producer_id and first_offset >= 0:
                return coordinator_epoch
        return None

    def abort_in_doubt_transaction(self, producer_id: int) -> tuple[int, int, int] | None:
        """Abort the in-doubt transaction of ``producer_id``: an ABORT marker at its epoch
        plus one (Kafka's fencing bump), the coordinator epoch the partition last saw (so
        the real coordinator's later markers are not fenced). Returns ``(producer id,
        fenced epoch, first offset)``, or None if it is no longer open."""
        epoch = self.transactions_in_doubt.pop(producer_id)
        return self._abort_open_transaction(producer_id, epoch, "in doubt")

    def _abort_open_transaction(self, producer_id: int, epoch: int, what: str) -> tuple[int, int, int] | None:
        log = self.log
        coordinator_epoch = self.in_doubt_coordinator_epoch(producer_id)
        if coordinator_epoch is None:
            return None
        first_offset = log.ongoing_transactions()[producer_id]
        marker = build_marker(producer_id, min(epoch + 1, PRODUCER_EPOCH_MAX), False, coordinator_epoch,
                              log.clock.now_ms())
        log.append_as_leader(marker, self.leader_epoch, from_coordinator=True)
        logger.warning("%s: aborted the %s transaction of producer %d (epoch %d, first offset %d): "
                       "the producer came back at a newer epoch", self.topic_partition, what, producer_id,
                       epoch, first_offset)
        return producer_id, epoch, first_offset

    @property
    def has_questions(self) -> bool:
        """Whether a transaction here is in question (in doubt, or open too long)."""
        return bool(self._in_doubt_asks)

    def in_question(self, producer_id: int, epoch: int) -> bool:
        """Whether producer ``producer_id``'s transaction at ``epoch`` is still in question:
        asked about, and still open here at that epoch (no marker settled it)."""
        ask = self._in_doubt_asks.get(producer_id)
        return ask is not None and ask[2] == epoch and self.log.has_ongoing_transaction(producer_id, epoch)

    def maybe_question_old_transactions(self, wall_now_ms: int, max_age_ms: int, now_ms: int) -> list[int]:
        """The age rule (docs/transactions.md, "Hanging transactions"): any leader asks the
        coordinators about a transaction its producer state shows open for longer than
        ``max_age_ms`` (``transaction.max.timeout.ms``: the coordinator would have ended it
        by then, so its marker is lost), by the largest timestamp of the transaction's
        first batch against ``wall_now_ms``. Needs no memory of an unclean election: a
        doubt a later clean election forgot is found this way. Returns the producer ids
        newly in question (asked at once: due at ``now_ms``)."""
        if not self.is_leader:
            return []
        ongoing = self.log.ongoing_transactions()
        if not ongoing:
            self._transaction_start_ms = {}
            return []
        self._transaction_start_ms = {key: ts for key, ts in self._transaction_start_ms.items()
                                      if ongoing.get(key[0]) == key[1]}
        added, epochs = [], None
        for producer_id, first_offset in sorted(ongoing.items()):
            if producer_id in self._in_doubt_asks:
                continue
            started_ms = self._transaction_start_ms.get((producer_id, first_offset))
            if started_ms is None:
                started_ms = self._transaction_start_ms[(producer_id, first_offset)] = self._batch_timestamp(
                    first_offset)
            if started_ms is None or wall_now_ms - started_ms <= max_age_ms:
                continue
            if epochs is None:
                epochs = {pid: epoch for pid, epoch, *_ in self.log.active_producers()}
            epoch = epochs.get(producer_id)
            if epoch is None:
                continue
            self._in_doubt_asks[producer_id] = [now_ms, 0, epoch]
            added.append(producer_id)
            logger.warning("%s: the transaction of producer %d at epoch %d (first offset %d) has been open for "
                           "%d ms, longer than transaction.max.timeout.ms (%d): asking its coordinators",
                           self.topic_partition, producer_id, epoch, first_offset, wall_now_ms - started_ms,
                           max_age_ms)
        return added

    def _batch_timestamp(self, offset: int) -> int | None:
        """The largest timestamp of the batch holding ``offset``; None if not in the local log."""
        try:
            records = self.log.read(offset, 1, min_one_batch=True).records.read_bytes()
        except (KafkaError, OSError):
            return None
        for _, header in iter_batches(records):
            return header.max_timestamp
        return None

    def in_doubt_questions_due(self, now_ms: int) -> list[tuple[int, int]]:
        """``(producer id, epoch)`` of each transaction in question whose coordinators are
        due to be asked; its question is then out until ``on_in_doubt_answer``. A
        transaction no longer open at the epoch asked about is settled: forgotten."""
        due = []
        for producer_id, ask in list(self._in_doubt_asks.items()):
            if not self.log.has_ongoing_transaction(producer_id, ask[2]):
                del self._in_doubt_asks[producer_id]            # settled meanwhile
                self.transactions_in_doubt.pop(producer_id, None)
            elif ask[0] is not None and ask[0] <= now_ms:
                ask[0], ask[1] = None, ask[1] + 1
                due.append((producer_id, ask[2]))
        return due

    def next_in_doubt_question_ms(self) -> int | None:
        due = [ask[0] for ask in self._in_doubt_asks.values() if ask[0] is not None]
        return min(due) if due else None

    def on_in_doubt_answer(self, producer_id: int, epoch: int, leader_epoch: int, answered: bool, reason: str,
                           now_ms: int) -> None:
        """The answer to a question ``in_doubt_questions_due`` gave out. A transaction still
        in question (the coordinator has not decided, no answer came, or the verdict's
        marker was not written) is asked about again after a backoff that doubles up to
        ``IN_DOUBT_QUESTION_BACKOFF_MS_MAX``."""
        ask = self._in_doubt_asks.get(producer_id)
        if ask is None or leader_epoch != self.leader_epoch or not self.in_question(producer_id, epoch):
            return                                             # settled, or another leader epoch
        backoff_ms = min(IN_DOUBT_QUESTION_BACKOFF_MS_MIN << min(ask[1] - 1, 16), IN_DOUBT_QUESTION_BACKOFF_MS_MAX)
        ask[0] = now_ms + backoff_ms
        logger.log(logging.INFO if answered else logging.WARNING,
                   "%s: the transaction of producer %d at epoch %d is still in question after %d questions to its "
                   "coordinators (%s); asking again in %d ms", self.topic_partition, producer_id, epoch, ask[1],
                   reason, backoff_ms)

    def _settle_older_transactions(self, records: bytes, from_coordinator: bool = False) -> None:
        """Before an append on a leader with transactions open. A coordinator's marker
        (``from_coordinator``) ends the producer's transaction at the marker's epoch or
        the one before (transaction.version 2 bumps the epoch as it ends one); a marker
        at a later epoch ends a later transaction, so the one open here at an older
        epoch lost its own marker (an unclean election): it is aborted first, as the
        in-doubt verdict for a coordinator at a newer epoch decides
        (``tidelog.txn.in_doubt``), and the marker then ends nothing here. Appended as it
        was, the COMMIT of a later transaction made the records of an aborted one
        visible (simulator seed 48815). For a client's batch: a batch at the
        epoch of a transaction in doubt (or older) is refused; a transactional batch at a
        newer epoch than the producer's open transaction, in doubt or not, aborts that
        transaction first — if the append will take it: intact (CRC) and at sequence 0,
        where a newer epoch starts. The coordinator gives a producer a newer epoch only once its
        transaction is finished, every marker written (CONCURRENT_TRANSACTIONS until then;
        KIP-890 verification holds the batch until the coordinator confirms the new
        epoch's transaction), so the old one is still open here only if its marker was
        lost: an unclean election, or a coordinator whose log lost the decision. Kafka's
        producer state lets the new transaction's records join the old one, and its
        marker then settles both (a COMMIT made records a forgotten ABORT had aborted
        visible: simulator seed 7647). Coordinators' markers are appended as they come
        (their outcome is the coordinator's) and clear a doubt once appended (the
        caller)."""
        for position, header in iter_batches(records):
            producer_id = header.producer_id
            doubted = self.transactions_in_doubt.get(producer_id)
            if from_coordinator:
                open_epoch = doubted if doubted is not None else self.log.open_transaction_epoch(producer_id)
                if open_epoch is not None and header.producer_epoch > open_epoch + 1:
                    if doubted is not None:
                        self.abort_in_doubt_transaction(producer_id)
                    else:
                        self._abort_open_transaction(producer_id, open_epoch, "older")
                continue
            if doubted is not None:
                if header.producer_epoch <= doubted:
                    raise KafkaError(f"{self.topic_partition}: producer {producer_id}'s transaction at epoch "
                                     f"{doubted} is in doubt after an unclean election; waiting for its "
                                     f"coordinator", ErrorCode.INVALID_PRODUCER_EPOCH)
                self.abort_in_doubt_transaction(producer_id)
            elif header.is_transactional:
                open_epoch = self.log.open_transaction_epoch(producer_id)
                # Only a batch the append will take: its header intact (CRC), and at the
                # sequence a newer epoch starts at (0); else nothing is aborted.
                if open_epoch is not None and header.producer_epoch > open_epoch and header.base_sequence == 0:
                    validate_batch(records, position, strict=True)
                    self._abort_open_transaction(producer_id, open_epoch, "older")

    # ------------------------------------------------------ high watermark

    def maybe_increment_leader_high_watermark(self, now_ms: int) -> bool:
        """Kafka's ``Partition.maybeIncrementLeaderHW``. Returns whether the high watermark moved."""
        if not self.is_leader:
            return False
        if self.settings.strict_min_isr and len(self.isr) < self.effective_min_isr:
            return False
        leader_log_end_offset = self.log.log_end_offset
        new_high_watermark = leader_log_end_offset
        maximal = self.maximal_isr
        for replica_id, state in self.replica_states.items():
            caught_up = (state.log_end_offset == leader_log_end_offset
                         or now_ms - state.last_caught_up_time_ms <= self.settings.replica_lag_time_max_ms)
            if replica_id in maximal or (caught_up and self._is_isr_eligible(replica_id, state)):
                new_high_watermark = min(new_high_watermark, state.log_end_offset)
        if new_high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(new_high_watermark)
            return True
        return False

    def _is_isr_eligible(self, replica_id: int, state: ReplicaState) -> bool:
        """KRaft eligibility (Kafka's ``Partition.isReplicaIsrEligible``): alive (not
        fenced, not shutting down) and the broker epoch it fetched with is known: -1
        (an old fetch version) or the one the metadata image holds. A replica that has not fetched since this
        leader epoch began has no stored epoch and is not eligible."""
        alive_epoch = self._alive_broker_epoch(replica_id)
        if alive_epoch is None or state.broker_epoch is None:
            return False
        return state.broker_epoch == -1 or state.broker_epoch == alive_epoch

    # --------------------------------------------------------------- produce

    def append_records_to_leader(self, records: bytes, required_acks: int, now_ms: int | None = None,
                                 from_coordinator: bool = False):
        """Append a client's batches (or the transaction coordinator's markers,
        ``from_coordinator``). Raises ``KafkaError`` with Kafka's code."""
        if not self.is_leader:
            raise KafkaError(f"broker {self.local_broker_id} is not the leader of "
                             f"{self.topic_partition}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1 and len(self.isr) < self.effective_min_isr:
            raise KafkaError(f"{self.topic_partition} has ISR {list(self.isr)}, below "
                             f"min.insync.replicas {self.effective_min_isr}",
                             ErrorCode.NOT_ENOUGH_REPLICAS)
        if self.transactions_in_doubt or self.log.has_open_transactions:
            self._settle_older_transactions(records, from_coordinator)
        info = self.log.append_as_leader(records, self.leader_epoch, from_coordinator)
        if from_coordinator and self.transactions_in_doubt:
            for _, header in iter_batches(records):      # the coordinator settled these
                if self.transactions_in_doubt.get(header.producer_id, PRODUCER_EPOCH_MAX + 1) <= header.producer_epoch:
                    del self.transactions_in_doubt[header.producer_id]
        # The LEO moved: with an ISR of one the HW follows at once.
        self.maybe_increment_leader_high_watermark(self.log.clock.monotonic_ms() if now_ms is None else now_ms)
        return info

    def check_enough_replicas_reached(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """The delayed-produce condition (Kafka's ``Partition.checkEnoughReplicasReachOffset``)."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if self.effective_min_isr <= len(self.maximal_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    # ----------------------------------------------------------------- fetch

    def _check_epoch_and_role(self, current_leader_epoch: int | None,
                              fetch_only_from_leader: bool) -> ErrorCode:
        """Steps 1–2 of the fetch validation (docs/replication.md), shared by every read a
        follower makes."""
        if current_leader_epoch is not None and current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if fetch_only_from_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def read_records(self, fetch_offset: int, max_bytes: int, isolation: Isolation,
                     current_leader_epoch: int | None = None, last_fetched_epoch: int | None = None,
                     fetch_only_from_leader: bool = True, min_one_batch: bool = True,
                     replica_id: int = -1) -> ReadResult:
        """Validate and read, in the order of Kafka's ``Partition.fetchRecords``."""
        error = self._check_epoch_and_role(current_leader_epoch, fetch_only_from_leader)
        if error != ErrorCode.NONE:
            return ReadResult(error)
        if replica_id >= 0 and replica_id not in self.replica_states:
            return ReadResult(ErrorCode.UNKNOWN_LEADER_EPOCH if current_leader_epoch not in (None, -1)
                              else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        log = self.log
        result = ReadResult(high_watermark=log.high_watermark, last_stable_offset=log.last_stable_offset,
                            log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset)
        if last_fetched_epoch is not None and last_fetched_epoch >= 0:
            epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED_EPOCH and end_offset == UNDEFINED_OFFSET:
                result.error = ErrorCode.OFFSET_OUT_OF_RANGE
                return result
            if fetch_offset < log.log_start_offset:
                result.error = ErrorCode.OFFSET_OUT_OF_RANGE
                return result
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                result.diverging_epoch = (epoch, end_offset)
                return result
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            result.error = ErrorCode.OFFSET_OUT_OF_RANGE
            return result
        max_offset = (None if isolation == Isolation.LOG_END else
                      result.last_stable_offset if isolation == Isolation.TXN_COMMITTED else log.high_watermark)
        if isolation == Isolation.TXN_COMMITTED:
            result.aborted_transactions = []
        if max_offset is not None and fetch_offset >= max_offset:
            return result  # empty, NONE: the consumer is at or past the HW (or the LSO)
        info = log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        result.records = info.records
        result.fetch_offset_metadata = info.fetch_offset_metadata
        if isolation == Isolation.TXN_COMMITTED:
            result.aborted_transactions = log.collect_aborted_transactions(fetch_offset, max_offset)
        return result

    def fetch_offset_snapshot(self, current_leader_epoch: int | None = None,
                              fetch_only_from_leader: bool = True) -> tuple[ErrorCode, int, int, int]:
        """``(error, log_start_offset, high_watermark, log_end_offset)`` after the epoch and
        role checks of ``read_records``: what a follower's ListOffsets (earliest / latest)
        reads when it is out of range."""
        error = self._check_epoch_and_role(current_leader_epoch, fetch_only_from_leader)
        if error != ErrorCode.NONE:
            return error, UNDEFINED_OFFSET, UNDEFINED_OFFSET, UNDEFINED_OFFSET
        log = self.log
        return ErrorCode.NONE, log.log_start_offset, log.high_watermark, log.log_end_offset

    def fetch_offset_for_timestamp(self, timestamp: int, isolation: Isolation | None,
                                   current_leader_epoch: int | None = None,
                                   fetch_only_from_leader: bool = True) -> tuple[ErrorCode, int, int, int]:
        """ListOffsets, as Kafka's ``Partition.fetchOffsetForTimestamp``: ``(error,
        timestamp, offset, leader epoch)``. ``isolation`` is None for a replica or a
        debugging request (bound: the log end offset), else the client's isolation
        (bound: the high watermark). A client asking for the latest offset of a new
        leader whose high watermark is still below the start of its epoch gets
        OFFSET_NOT_AVAILABLE and retries (KIP-207), rather than an offset that could
        go backwards."""
        error = self._check_epoch_and_role(current_leader_epoch, fetch_only_from_leader)
        if error != ErrorCode.NONE:
            return error, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH
        log = self.log
        bound = (log.log_end_offset if isolation in (None, Isolation.LOG_END) else
                 log.last_stable_offset if isolation == Isolation.TXN_COMMITTED else log.high_watermark)
        not_available = (isolation is not None and self.leader_epoch_start_offset is not None
                         and self.leader_epoch_start_offset > log.high_watermark)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            # Nothing is in tiered storage: no offset (-1) and no epoch, as Kafka answers
            # when remote storage is off.
            return ErrorCode.NONE, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH
        if timestamp == LATEST_TIMESTAMP:
            if not_available:
                return ErrorCode.OFFSET_NOT_AVAILABLE, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH
            return ErrorCode.NONE, NO_TIMESTAMP, bound, self.leader_epoch
        if timestamp < 0 and timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, MAX_TIMESTAMP):
            return ErrorCode.INVALID_REQUEST, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH
        found = log.fetch_offset_by_timestamp(timestamp)
        if found is not None and (found.offset < bound or timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)):
            epoch = UNDEFINED_EPOCH if found.leader_epoch is None else found.leader_epoch
            return ErrorCode.NONE, found.timestamp_ms, found.offset, epoch
        if not_available:
            return ErrorCode.OFFSET_NOT_AVAILABLE, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH
        return ErrorCode.NONE, NO_TIMESTAMP, UNDEFINED_OFFSET, UNDEFINED_EPOCH

    def last_offset_for_leader_epoch(self, current_leader_epoch: int | None, leader_epoch: int,
                                     fetch_only_from_leader: bool = True) -> tuple[ErrorCode, int, int]:
        """OffsetsForLeaderEpoch on the leader: ``(error, epoch, end offset)`` where the
        pair is ``end_offset_for_epoch(leader_epoch)``, (-1, -1) if unknown."""
        error = self._check_epoch_and_role(current_leader_epoch, fetch_only_from_leader)
        if error != ErrorCode.NONE:
            return error, UNDEFINED_EPOCH, UNDEFINED_OFFSET
        epoch, end_offset = self.log.end_offset_for_epoch(leader_epoch)
        return ErrorCode.NONE, epoch, end_offset

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    now_ms: int, leader_log_end_offset: int, broker_epoch: int) -> bool:
        """Steps 4–6 of the nine steps (docs/replication.md). Returns whether the high
        watermark moved."""
        state = self.replica_states.get(replica_id)
        if state is None:
            return False
        if broker_epoch not in (None, -1):
            alive_epoch = self._alive_broker_epoch(replica_id)
            if alive_epoch is not None and broker_epoch < alive_epoch:
                raise KafkaError(f"fetch from broker {replica_id} with stale broker epoch "
                                 f"{broker_epoch}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        state.update_fetch_state(fetch_offset, log_start_offset, now_ms, leader_log_end_offset,
                                 broker_epoch)
        return self.maybe_increment_leader_high_watermark(now_ms)

    def note_high_watermark_sent(self, replica_id: int, high_watermark: int) -> None:
        """The answer to a follower's fetch carries ``high_watermark`` (KIP-392 promptness)."""
        state = self.replica_states.get(replica_id)
        if state is not None:
            state.last_sent_high_watermark = high_watermark

    # ------------------------------------------------------------- ISR change

    def _isr_step(self, event: IsrEvent, new_isr: tuple[int, ...] | None = None,
                  proposal: IsrProposal | None = None) -> None:
        """The one place the ISR-change state moves; a proposal is in flight exactly
        while the state is pending."""
        self.isr_state = transition(ISR_TRANSITIONS, self.isr_state, event, f"{self.topic_partition} ISR")
        self.pending_isr, self.pending_proposal = new_isr, proposal
        assert (self.isr_state == IsrState.COMMITTED) == (self.pending_proposal is None)

    def _propose(self, new_isr: tuple[int, ...], event: IsrEvent) -> IsrProposal:
        epochs = tuple(-1 if r == self.local_broker_id or r not in self.replica_states
                       else _epoch_or_unknown(self.replica_states[r].broker_epoch) for r in new_isr)
        self._isr_step(event, new_isr, IsrProposal(self.leader_epoch, self.partition_epoch, new_isr, epochs))
        return self.pending_proposal

    def maybe_expand_isr(self, replica_id: int) -> IsrProposal | None:
        """Kafka's ``Partition.maybeExpandIsr``: propose adding a caught-up follower."""
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        state = self.replica_states.get(replica_id)
        if state is None or not self._is_isr_eligible(replica_id, state):
            return None
        if (state.log_end_offset >= self.log.high_watermark
                and self.leader_epoch_start_offset is not None
                and state.log_end_offset >= self.leader_epoch_start_offset):
            logger.info("%s: proposing to add broker %d to ISR %s (its LEO %d, HW %d)", self.topic_partition,
                        replica_id, list(self.isr), state.log_end_offset, self.log.high_watermark)
            return self._propose(self.isr + (replica_id,), IsrEvent.PROPOSE_EXPAND)
        return None

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        leader_log_end_offset = self.log.log_end_offset
        out = []
        for replica_id in self.isr:
            if replica_id == self.local_broker_id:
                continue
            state = self.replica_states.get(replica_id)
            if state is None or (state.log_end_offset != leader_log_end_offset and
                                 now_ms - state.last_caught_up_time_ms > self.settings.replica_lag_time_max_ms):
                out.append(replica_id)
        return out

    def maybe_shrink_isr(self, now_ms: int) -> IsrProposal | None:
        """Kafka's ``Partition.maybeShrinkIsr``: propose removing followers that fell behind."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        logger.info("%s: proposing to remove out-of-sync brokers %s from ISR %s", self.topic_partition,
                    out, list(self.isr))
        return self._propose(tuple(r for r in self.isr if r not in out), IsrEvent.PROPOSE_SHRINK)

    def on_alter_partition_response(self, error: ErrorCode, leader_epoch: int = -1,
                                    partition_epoch: int = -1, isr: tuple[int, ...] = (),
                                    now_ms: int = 0, proposal: IsrProposal | None = None) -> bool:
        """Kafka's ``Partition.handleAlterPartitionError`` / ``handleAlterPartitionUpdate``.
        Returns whether the request should be retried.

        With ``proposal`` given, a response to any other proposal than the one in
        flight (the state was replaced by metadata meanwhile) is ignored.
        """
        if self.pending_isr is None:
            return False
        if proposal is not None and proposal is not self.pending_proposal:
            return False
        if error == ErrorCode.NONE:
            if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
                return False  # stays pending until new metadata arrives
            self.isr = tuple(isr)
            self._isr_step(IsrEvent.ACCEPTED)
            self.partition_epoch = partition_epoch
            self.maybe_increment_leader_high_watermark(now_ms)
            return False
        if error in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            self._isr_step(IsrEvent.REJECTED)
            return False
        if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                     ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                     ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED):
            return False  # stay pending until new metadata arrives
        return True

    # -------------------------------------------------------------- follower

    def append_records_as_follower(self, records):
        """Step 8 of the nine steps: write batches the leader already numbered
        (``Log.append_as_follower``)."""
        if self.is_leader:
            raise KafkaError(f"broker {self.local_broker_id} leads {self.topic_partition}; it does not "
                             f"append as a follower", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            return self.log.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            # DeleteRecords moved the leader's log start into the middle of a batch, and
            # this follower's log is empty at that start: the first batch it is sent
            # begins below it. Restart the log at the batch's base offset and append,
            # as Kafka's Partition.appendRecordsToFollowerOrFutureReplica does; else
            # the follower would refetch the same batch forever.
            log = self.log
            end = log.log_end_offset
            if not (end == log.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            logger.info("%s: first batch at %d is below the empty log's start %d; restarting the log at %d",
                        self.topic_partition, e.first_offset, end, e.first_offset)
            self.truncate_fully_and_start_at(e.first_offset)
            return self.log.append_as_follower(records)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """HW = clamp(leader HW, log start, LEO), as Kafka's ``UnifiedLog.updateHighWatermark``;
        it may move back. Returns whether it changed."""
        if self.is_leader or leader_high_watermark < 0:
            return False
        before = self.log.high_watermark
        return self.log.update_high_watermark(leader_high_watermark) != before

    def update_follower_log_start_offset(self, leader_log_start_offset: int) -> bool:
        """Step 9 of the nine steps, safe in the DeleteRecords race. Returns whether it moved.

        The leader's log start offset may be above our high watermark (DeleteRecords
        ran on the leader between the read of our records and the read of its log
        start). That is not an error: above our LEO, nothing we hold is still
        wanted, so the log restarts there; otherwise the log start goes as far as
        our HW allows now and the rest follows once the HW catches up.
        """
        log = self.log
        if self.is_leader or leader_log_start_offset <= log.log_start_offset:
            return False
        if leader_log_start_offset > log.log_end_offset:
            logger.info("%s: leader log start offset %d is above our log end offset %d; restarting the log there",
                        self.topic_partition, leader_log_start_offset, log.log_end_offset)
            log.truncate_fully_and_start_at(leader_log_start_offset)
            return True
        return log.maybe_increment_log_start_offset(min(leader_log_start_offset, log.high_watermark))

    def truncate_to(self, offset: int) -> bool:
        """Drop everything at and after ``offset`` (Kafka's ``Partition.truncateTo``). Returns
        whether anything went."""
        if offset < self.log.high_watermark:
            logger.warning("%s: truncating to offset %d, below the high watermark %d",
                           self.topic_partition, offset, self.log.high_watermark)
        return self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower out of range, Kafka's
        ``Partition.truncateFullyAndStartAt``)."""
        logger.info("%s: truncating fully and restarting at offset %d", self.topic_partition, offset)
        self.log.truncate_fully_and_start_at(offset)


def _epoch_or_unknown(broker_epoch: int | None) -> int:
    return -1 if broker_epoch is None else broker_epoch
