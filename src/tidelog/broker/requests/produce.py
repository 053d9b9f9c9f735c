"""Produce: which partitions of a request are appended, and what each answers.

Theory of operation. ``handle_produce`` takes a ``ProduceRequest`` (the
translation already refused the partitions of unknown topics) and goes, as
Kafka's ``KafkaApis.handleProduceRequest`` and ``ReplicaManager.appendRecords``:

1. transactional batches without a transactional id refuse the whole request
   (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
2. ACLs (WRITE on the topic; on the transactional id too when the request
   carries transactional records), when the driver has an authorizer;
3. an empty records field is CORRUPT_MESSAGE;
4. KIP-890: a transactional batch whose producer has no open transaction at its
   epoch in a partition this broker leads waits for the coordinator's verdict
   (``TxnRequests.verify``); a refused partition answers the coordinator's error
   (``produce_error``: TRANSACTION_ABORTABLE for a partition outside the open
   transaction, INVALID_TXN_STATE to clients older than Produce v11) and is not appended — a zombie's late batch is refused
   even by a partition whose history no longer holds the marker that fenced it.
   Produce v12+ comes from a transaction.version 2 client, which sends no
   AddPartitionsToTxn (``add_partitions``): the coordinator is asked to add the
   partition rather than only to confirm it (part 2), whatever
   ``transaction.partition.verification.enable`` says;
5. the rest is appended (``ReplicaManager.append_records``), and ``respond``
   gets one answer per partition: the refusals, then the appends.

Order. A partition's produce requests are appended in the order they arrived, also
when one of them waits for a verdict (step 4): a request that touches a partition an
earlier, still waiting request touches waits behind it (``_queued``). Kafka gets this
from reading no further request on a connection until it answered the current one;
tidelog parses the next request at once, so without the queue a producer's next
batch (Kafka Streams sends up to 5 requests at a time to a leader) would overtake the
waiting first batch of its transaction there and be refused with
OUT_OF_ORDER_SEQUENCE_NUMBER. The queue holds at most the requests in flight on the
broker's connections (``CONNECTION_IN_FLIGHT_REQUESTS_MAX`` each).

A batch too short or malformed to read is not verified: the append refuses it
with CORRUPT_MESSAGE (or the error its validation finds).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tidelog.broker.requests.txn import TxnRequests
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.core.ids import TopicPartition
from tidelog.metadata.authorizer import AclOperation, ResourceType
from tidelog.records.batch import BATCH_HEADER_SIZE_BYTES, read_header
from tidelog.txn.shard import produce_error


@dataclass
class ProduceRequest:
    acks: int
    timeout_ms: int
    records: dict[TopicPartition, bytes]                 # per partition, as sent (maybe empty)
    transactional_id: str | None = None
    refused: dict[TopicPartition, ErrorCode] = field(default_factory=dict)   # by the translation
    add_partitions: bool = False          # Produce v12+ (KIP-890 part 2): the leader adds them
    transaction_abortable: bool = False   # Produce v11+: the client knows TRANSACTION_ABORTABLE


def refused_partition(error: ErrorCode) -> dict:
    """A partition that was not appended answers no offsets (Kafka's -1)."""
    return {"error_code": int(error), "base_offset": -1, "log_append_time": -1, "log_start_offset": -1}


def is_transactional(records: bytes) -> bool:
    """Whether the first batch of a partition's records says it is transactional (magic 2,
    attributes bit 4); two byte reads, on every produce request without a transactional id.
    A malformed batch is left to the append, which refuses it with the right error."""
    return len(records) >= BATCH_HEADER_SIZE_BYTES and records[16] == 2 and bool(records[22] & 0x10)


@dataclass(eq=False)
class _Waiting:
    """A produce request not appended yet: its partitions, and its append once its
    verdicts are in."""
    partitions: frozenset
    append: Callable[[], None] | None = None


class ProduceRequests:
    def __init__(self, node, txn: TxnRequests | None):
        self.node = node
        self.txn = txn                           # None: nobody to verify with (KIP-890 off)
        self._queued: deque[_Waiting] = deque()   # requests not appended yet, in arrival order

    @property
    def replica_manager(self):
        return self.node.replica_manager

    def handle_produce(self, request: ProduceRequest, respond: Callable[[dict], None],
                       authorizer=None) -> None:
        """``respond({tp: partition answer})`` once every partition is answered."""
        errors = dict(request.refused)
        entries = self._screen(request, errors, authorizer)

        def append(verdicts: dict[TopicPartition, ErrorCode]) -> None:
            for tp, error in verdicts.items():
                if error != ErrorCode.NONE:
                    entries.pop(tp, None)
                    errors[tp] = produce_error(error, request.transaction_abortable)
            refusals = {tp: refused_partition(error) for tp, error in errors.items()}
            self.replica_manager.append_records(request.acks, request.timeout_ms, entries,
                                                lambda responses: respond({**refusals, **responses}))
        unverified = self.unverified(request.transactional_id, entries, request.add_partitions)
        behind = any(not waiting.partitions.isdisjoint(entries) for waiting in self._queued)
        if not unverified and not behind:
            return append({})
        waiting = _Waiting(frozenset(entries))
        self._queued.append(waiting)

        def verdicts_in(verdicts: dict[TopicPartition, ErrorCode]) -> None:
            waiting.append = lambda: append(verdicts)
            self._append_ready()
        if unverified:
            self.txn.verify(request.transactional_id, unverified, verdicts_in, verify_only=not request.add_partitions)
        else:
            verdicts_in({})

    def _append_ready(self) -> None:
        """Append every queued request whose verdicts are in and which no earlier queued
        request shares a partition with."""
        held: set[TopicPartition] = set()
        for waiting in list(self._queued):
            if waiting.append is not None and waiting.partitions.isdisjoint(held):
                self._queued.remove(waiting)
                waiting.append()
            else:
                held |= waiting.partitions

    def _screen(self, request: ProduceRequest, errors: dict, authorizer) -> dict[TopicPartition, bytes]:
        """Steps 1-3: the partitions that may be appended; ``errors`` gets the others."""
        entries = {tp: records for tp, records in request.records.items() if records and tp not in errors}
        empty = [tp for tp, records in request.records.items() if not records and tp not in errors]
        if not request.transactional_id and any(map(is_transactional, entries.values())):
            errors.update(dict.fromkeys(entries, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            entries.clear()
        if authorizer is not None and (entries or empty):
            # As Kafka: the transactional id is authorized only for a request that carries
            # transactional records; otherwise the id is ignored and only the topics count.
            txn_denied = bool(request.transactional_id) and any(map(is_transactional, entries.values())) \
                and not authorizer.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
            allowed = {topic: not txn_denied and authorizer.topic_allowed(AclOperation.WRITE, topic)
                       for topic in {tp.topic for tp in [*entries, *empty]}}
            for tp in [tp for tp in [*entries, *empty] if not allowed[tp.topic]]:
                entries.pop(tp, None)
                errors[tp] = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied
                              else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for tp in empty:
            errors.setdefault(tp, ErrorCode.CORRUPT_MESSAGE)
        return entries

    def unverified(self, transactional_id: str | None, entries: dict,
                   add_partitions: bool = False) -> dict[TopicPartition, tuple[int, int]]:
        """The transactional batches whose producer has no open transaction at their epoch
        in that partition yet: {tp: (producer id, epoch)} the coordinator must confirm
        (or, ``add_partitions``, add) first."""
        if self.txn is None or not transactional_id or not (
                add_partitions or self.node.config["transaction.partition.verification.enable"]):
            return {}
        out = {}
        for tp, records in entries.items():
            if len(records) < BATCH_HEADER_SIZE_BYTES:
                continue
            try:
                header = read_header(records)
            except KafkaError:
                continue                        # the append refuses it with the right error
            if not header.is_transactional or header.producer_id < 0:
                continue
            partition = self.replica_manager.get_partition(tp)
            log_ = getattr(partition, "log", None)
            if log_ is None or not partition.is_leader:
                continue                        # the append answers NOT_LEADER_OR_FOLLOWER
            if not log_.has_ongoing_transaction(header.producer_id, header.producer_epoch):
                out[tp] = (header.producer_id, header.producer_epoch)
        return out
