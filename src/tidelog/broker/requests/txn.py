"""Transaction requests between brokers: KIP-890 verification and transaction markers.

Theory of operation. A partition leader asked to append a transactional batch
whose producer has no open transaction in that partition first asks the
transaction coordinator (``verify``): at once when this broker coordinates the
transactional id, else through a ``SendAddPartitionsToTxn`` effect
(AddPartitionsToTxn v5). ``verify_only=True`` is KIP-890 part 1 (the
coordinator only checks); ``verify_only=False`` has the coordinator add the
partitions on the producer's behalf (part 2: a Produce v12+ or TxnOffsetCommit
v5 from a transaction.version 2 client, which sends no AddPartitionsToTxn) — the
same path, one parameter. Coordinator trouble (not the coordinator, loading,
unreachable) is NOT_ENOUGH_REPLICAS for the producer, which retries it, as Kafka
maps it; so is CONCURRENT_TRANSACTIONS when adding (the coordinator is still
writing the markers of the producer's previous transaction, which a TV2 client
did not wait for).

The coordinator's ``write_markers`` hook lands here: markers for partitions
this broker leads are appended directly (``append_markers``, also what a
WriteTxnMarkers request does), the others leave as a ``SendMarkers`` effect.
One setting governs both, as in Kafka: the broker's ``request.timeout.ms`` is
the leader's acks=all wait for the marker append and the coordinator's wait
for the WriteTxnMarkers answer — plus ``ANSWER_MARGIN_MS`` on the coordinator's
side, so that a leader's REQUEST_TIMED_OUT (or a success just before it) is
heard rather than lost to a timeout that expires at the same moment (Kafka's
equal timeouts lose it; the simulator showed the retries that costs). Markers
that failed are retried by the shard after its backoff.

A leader elected uncleanly asks about each transaction it holds in doubt, and any
leader about a transaction open longer than ``transaction.max.timeout.ms``
(``resolve_in_doubt``, for the node's ``ResolveInDoubt``): ListTransactions
filtered by the producer id at every broker leading a ``__transaction_state``
partition, DescribeTransactions of the id found at its coordinator (each at once
when that is this broker, else a ``SendListTransactions`` /
``SendDescribeTransactions`` effect), and writes the verdict's marker
(``tidelog.txn.in_doubt``) through ``append_markers``, as a WriteTxnMarkers from
the coordinator would be. "No coordinator lists the producer id" aborts only when
the listing could see every transactional id (``missing_describe_acl``, set by the
driver) and every broker asked agrees it leads the ``__transaction_state``
partitions it was asked for, at the leader epochs this broker knows
(``SendTopicLeaders``, a Metadata request after its answer): a broker that already
gave a partition up lists nothing of it, and this broker's metadata may lag behind
that. Any answer that may be partial means asking again.
"""

from __future__ import annotations

import logging
from typing import Callable

from tidelog.broker.requests.effects import (
    AddPartitionsToTxn,
    Answer,
    SendAddPartitionsToTxn,
    SendDescribeTransactions,
    SendListTransactions,
    SendMarkers,
    SendTopicLeaders,
    WriteTxnMarkers,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import build_marker
from tidelog.txn.in_doubt import STATES_BY_NAME, CoordinatorView, Decision, Verdict, decide
from tidelog.txn.shard import TRANSACTION_VERSION_EPOCH_BUMP

logger = logging.getLogger("tidelog.txn")

# Time for a leader's answer to travel back after its own request.timeout.ms ran out.
ANSWER_MARGIN_MS = 500
# How often the ERROR about a ListTransactions answer that may hide ids is repeated.
BLIND_LOG_INTERVAL_MS = 300_000
# The coordinator's answers that mean "ask again later, maybe elsewhere".
_COORDINATOR_TROUBLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}

Errors = dict[TopicPartition, ErrorCode]


def _leaders_of(topic) -> dict[int, tuple[int, int]]:
    """``{partition index: (leader, leader epoch)}`` of a topic's image ({} if it has none)."""
    return {} if topic is None else {index: (registration.leader, registration.leader_epoch)
                                     for index, registration in topic.partitions.items()}


class TxnRequests:
    def __init__(self, node, clock, send: Callable[[object], None]):
        self.node = node                        # a BrokerNode: image, replica manager, coordinator
        self.clock = clock                      # wall time for the markers' timestamps
        self.send = send                        # the driver's outbox for effects
        self.request_timeout_ms = node.config["request.timeout.ms"]
        node.txn_coordinator.write_markers = self.write_markers
        # The ACL this broker's inter-broker principal lacks to see every transactional id
        # in a ListTransactions answer ("" none: ACLs off, or a driver without them), from
        # ``tidelog.txn.in_doubt.missing_describe_acl``; set by the driver.
        self.missing_describe_acl: Callable[[], str] = lambda: ""
        self._blind_logged_ms: int | None = None      # the last ERROR about it (rate-limited)

    @property
    def coordinator(self):
        return self.node.txn_coordinator

    # ============================================== the coordinator's side

    def add_partitions_to_txn(self, request: AddPartitionsToTxn, on_done: Callable[[Errors], None]) -> None:
        """AddPartitionsToTxn v4+ for one transaction, as its coordinator answers it."""
        tps = list(request.partitions)
        shard = self.coordinator.shard_for(request.transactional_id)
        if isinstance(shard, ErrorCode):
            return on_done({tp: shard for tp in tps})
        if request.verify_only:
            return on_done(shard.verify(request.transactional_id, request.producer_id, request.producer_epoch,
                                        tps))
        shard.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch, set(tps),
                             self.coordinator.now_ms(), lambda error: on_done({tp: error for tp in tps}),
                             request.client_transaction_version)

    # ================================================ the leader's side

    def verify(self, transactional_id: str, items: dict[TopicPartition, tuple[int, int]],
               on_done: Callable[[Errors], None], verify_only: bool = True) -> None:
        """KIP-890 for a produce request: ``items`` maps partitions to the (producer id,
        epoch) of their first transactional batch; ``on_done({tp: error})`` once the
        coordinator answered for all of them (at once when it is this broker)."""
        groups: dict[tuple[int, int], list[TopicPartition]] = {}
        for tp, producer in items.items():
            groups.setdefault(producer, []).append(tp)
        requests = [AddPartitionsToTxn(transactional_id, producer_id, epoch, tuple(tps), verify_only,
                                       0 if verify_only else TRANSACTION_VERSION_EPOCH_BUMP)
                    for (producer_id, epoch), tps in groups.items()]
        retriable = _COORDINATOR_TROUBLE if verify_only else _COORDINATOR_TROUBLE | {ErrorCode.CONCURRENT_TRANSACTIONS}
        out: Errors = {}
        waiting = [len(requests)]
        if not requests:
            return on_done(out)

        def answered(errors: Answer, request: AddPartitionsToTxn) -> None:
            for tp in request.partitions:
                error = ErrorCode.NOT_ENOUGH_REPLICAS if errors is None else errors.get(tp, ErrorCode.NONE)
                out[tp] = ErrorCode.NOT_ENOUGH_REPLICAS if error in retriable else error
            waiting[0] -= 1
            if waiting[0] == 0:
                on_done(out)
        for request in requests:
            self._ask_coordinator(request, lambda errors, request=request: answered(errors, request))

    def add_offsets_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              offsets_partition: TopicPartition, on_done: Callable[[ErrorCode], None]) -> None:
        """TxnOffsetCommit v5 (KIP-890 part 2): a transaction.version 2 client sends no
        AddOffsetsToTxn, so the group coordinator adds the group's ``__consumer_offsets``
        partition to the transaction before it writes the offsets — the produce path's
        add, for one partition. ``on_done`` gets the error to answer every offset with:
        a fenced producer is INVALID_PRODUCER_EPOCH (the client's fatal "fenced"), a busy
        or unreachable coordinator COORDINATOR_NOT_AVAILABLE, which the client retries
        (Kafka's group coordinator maps the add's NOT_ENOUGH_REPLICAS so)."""
        def answered(errors: Errors) -> None:
            error = errors.get(offsets_partition, ErrorCode.NONE)
            if error == ErrorCode.NOT_ENOUGH_REPLICAS:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            on_done(ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error)
        self.verify(transactional_id, {offsets_partition: (producer_id, producer_epoch)}, answered,
                    verify_only=False)

    def _ask_coordinator(self, request: AddPartitionsToTxn, on_done: Callable[[Answer], None]) -> None:
        shard = self.coordinator.shard_for(request.transactional_id)
        if not isinstance(shard, ErrorCode):
            return self.add_partitions_to_txn(request, on_done)
        index = self.coordinator.partition_for(request.transactional_id)
        registration = self.node.image.partition(TopicPartition(self.coordinator.topic, index))
        leader = -1 if registration is None else registration.leader
        if shard == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or leader < 0 or leader == self.node.node_id:
            return on_done(None)
        self.send(SendAddPartitionsToTxn(leader, request, self.request_timeout_ms, on_done))

    # ============================================================ markers

    def write_markers(self, broker_id: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, partitions: list, on_done: Callable[[Errors], None]) -> None:
        """The coordinator's markers for ``partitions``, all led by ``broker_id``."""
        request = WriteTxnMarkers(producer_id, producer_epoch, commit, coordinator_epoch, tuple(partitions))
        if broker_id == self.node.node_id:
            return self.append_markers(request, on_done)

        def answered(errors: Answer) -> None:
            on_done({tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions} if errors is None else errors)
        self.send(SendMarkers(broker_id, request, self.request_timeout_ms + ANSWER_MARGIN_MS, answered))

    def append_markers(self, request: WriteTxnMarkers, on_done: Callable[[Errors], None]) -> None:
        """A leader appends one marker to each of its partitions, acks=all (WriteTxnMarkers)."""
        now_ms = self.clock.now_ms()                      # the markers' timestamp: wall time
        entries = {tp: build_marker(request.producer_id, request.producer_epoch, request.commit,
                                    request.coordinator_epoch, now_ms) for tp in request.partitions}

        def appended(responses: dict) -> None:
            on_done({tp: ErrorCode(response["error_code"]) for tp, response in responses.items()})
        self.node.replica_manager.append_records(-1, self.request_timeout_ms, entries, appended,
                                                 internal=True, from_coordinator=True)

    # ============================================== transactions in doubt

    def resolve_in_doubt(self, asked, on_done: Callable[[bool, str], None]) -> None:
        """A ``ResolveInDoubt`` (module docstring): ``on_done(answered, reason)`` once the
        verdict's marker is written (the doubt is over), the coordinator said to wait, or
        no answer came (``answered`` False)."""
        image, topic_name = self.node.image, self.coordinator.topic
        topic = image.topic(topic_name)
        asked_of = _leaders_of(topic)
        leaders = {leader for leader, _ in asked_of.values()}
        answers: dict[int, list | None] = {}

        def listed(broker_id: int, rows: list | None) -> None:
            answers[broker_id] = rows
            if len(answers) == len(leaders):
                self._on_listed(asked, answers, asked_of, on_done)
        if -1 in leaders:
            return on_done(False, f"a partition of {topic_name} has no leader")
        if not leaders:
            return self._settle(asked, decide(asked.producer_id, asked.producer_epoch, None), on_done)
        for broker_id in sorted(leaders):
            if broker_id == self.node.node_id:
                listed(broker_id, self.coordinator.transactions_of_producer(asked.producer_id))
            else:
                self.send(SendListTransactions(broker_id, asked.producer_id, self.request_timeout_ms,
                                               lambda rows, b=broker_id: listed(b, rows)))

    def _on_listed(self, asked, answers: dict[int, list | None], asked_of: dict[int, tuple[int, int]],
                   on_done: Callable[[bool, str], None]) -> None:
        found = [(broker_id, row[0]) for broker_id, rows in sorted(answers.items()) for row in rows or ()
                 if row[1] == asked.producer_id]
        silent = sorted(broker_id for broker_id, rows in answers.items() if rows is None)
        if not found and silent:
            return on_done(False, f"no ListTransactions answer from brokers {silent}")
        if not found:
            missing_acl = self.missing_describe_acl()
            if missing_acl:     # blind whatever the leaders say: no Metadata round
                return self._settle(asked, decide(asked.producer_id, asked.producer_epoch, None, missing_acl),
                                    on_done)
            return self._confirm_leaders(asked, asked_of, on_done)
        coordinator, transactional_id = found[0]

        def described(answer) -> None:
            if not isinstance(answer, tuple) or answer[0] not in STATES_BY_NAME:
                return on_done(False, f"no DescribeTransactions answer for {transactional_id!r} from broker "
                                      f"{coordinator} ({answer})")
            view = CoordinatorView(transactional_id, coordinator, STATES_BY_NAME[answer[0]], answer[1], answer[2])
            self._settle(asked, decide(asked.producer_id, asked.producer_epoch, view), on_done)
        if coordinator == self.node.node_id:
            return described(self.coordinator.describe_transaction(transactional_id))
        self.send(SendDescribeTransactions(coordinator, transactional_id, self.request_timeout_ms, described))

    def _confirm_leaders(self, asked, asked_of: dict[int, tuple[int, int]],
                         on_done: Callable[[bool, str], None]) -> None:
        """Every coordinator answered that it lists nothing of the producer: trusted (the
        verdict of ``decide`` without a view) only if each broker asked still names itself
        leader of the partitions it was asked for, at the epochs asked with, and so does
        this broker's metadata now. A broker that gave a partition up unloaded its
        transactions and lists nothing of them, while this broker may not know yet."""
        others = sorted({leader for leader, _ in asked_of.values()} - {self.node.node_id})
        seen: dict[int, dict | None] = {}

        def named(broker_id: int | None, leaders: dict | None) -> None:
            if broker_id is not None:
                seen[broker_id] = leaders
            if len(seen) < len(others):
                return
            disagreement = self._leaders_disagree(asked_of, seen)
            if disagreement:
                return on_done(False, disagreement)
            self._settle(asked, decide(asked.producer_id, asked.producer_epoch, None,
                                       self.missing_describe_acl()), on_done)
        if not others:
            return named(None, None)
        for broker_id in others:
            self.send(SendTopicLeaders(broker_id, self.coordinator.topic, self.request_timeout_ms,
                                       lambda leaders, b=broker_id: named(b, leaders)))

    def _leaders_disagree(self, asked_of: dict[int, tuple[int, int]], seen: dict[int, dict | None]) -> str:
        """Why the leaders the question was asked of are not confirmed ("" if they are)."""
        topic_name = self.coordinator.topic
        if _leaders_of(self.node.image.topic(topic_name)) != asked_of:
            return f"the leaders of {topic_name} changed while asking"
        for index, (leader, epoch) in sorted(asked_of.items()):
            if leader == self.node.node_id:
                continue
            if seen[leader] is None:
                return f"no Metadata answer from broker {leader}"
            if seen[leader].get(index) != (leader, epoch):
                return (f"broker {leader} names (leader, epoch) {seen[leader].get(index)} for "
                        f"{topic_name}-{index}, this broker ({leader}, {epoch})")
        return ""

    def _settle(self, asked, decision: Decision, on_done: Callable[[bool, str], None]) -> None:
        """Write the verdict's marker, as the coordinator's, if the doubt is still there."""
        tp = asked.topic_partition
        if decision.verdict == Verdict.BLIND:
            now_ms = self.clock.monotonic_ms()
            if self._blind_logged_ms is None or now_ms - self._blind_logged_ms >= BLIND_LOG_INTERVAL_MS:
                self._blind_logged_ms = now_ms
                logger.error("%s: the transaction of producer %d at epoch %d stays open (read_committed waits): "
                             "%s", tp, asked.producer_id, asked.producer_epoch, decision.reason)
            return on_done(False, decision.reason)
        if decision.verdict in (Verdict.WAIT, Verdict.NO_ANSWER):
            return on_done(decision.verdict == Verdict.WAIT, decision.reason)
        partition = self.node.replica_manager.get_partition(tp)
        if (partition is None or not partition.is_leader or partition.leader_epoch != asked.leader_epoch
                or not partition.in_question(asked.producer_id, asked.producer_epoch)):
            return on_done(True, "settled meanwhile")
        coordinator_epoch = partition.in_doubt_coordinator_epoch(asked.producer_id)
        if coordinator_epoch is None:
            return on_done(True, "no longer open")
        commit = decision.verdict == Verdict.COMMIT
        logger.warning("%s: settling the transaction of producer %d at epoch %d (in doubt since an unclean "
                       "election, or open longer than transaction.max.timeout.ms) with %s at epoch %d: %s", tp, asked.producer_id, asked.producer_epoch,
                       "COMMIT" if commit else "ABORT", decision.marker_epoch, decision.reason)
        request = WriteTxnMarkers(asked.producer_id, decision.marker_epoch, commit, coordinator_epoch, (tp,))

        def written(errors: Errors) -> None:
            error = errors.get(tp, ErrorCode.NONE)
            on_done(error == ErrorCode.NONE, decision.reason if error == ErrorCode.NONE
                    else f"its {'COMMIT' if commit else 'ABORT'} marker was not written: {error.name}")
        self.append_markers(request, written)
