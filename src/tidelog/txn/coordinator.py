"""The transaction coordinator of one broker: the shards of the ``__transaction_state``
partitions it leads, and the markers they send (docs/transactions.md).

Theory of operation. A transactional id lives on partition
``partition_for(transactional_id, N)`` of ``__transaction_state`` (Java's
``String.hashCode``, as for groups) and its coordinator is that partition's
leader. Loading, replay and writes are the group coordinator's
(``CoordinatorRuntime``); the coordinator epoch a shard stamps on its markers
is the partition's leader epoch, so a deposed coordinator's late markers are
refused by the partitions (TRANSACTION_COORDINATOR_FENCED).

Markers: ``send_markers`` groups a transaction's partitions by their current
leader (``leader_of``) and hands each group to ``write_markers`` (the broker's
own replica manager, or a WriteTxnMarkers request to another broker). The
transaction is complete when every partition answered NONE, or UNKNOWN_TOPIC_OR_PARTITION
for a topic the coordinator's metadata no longer has (deleted) — a broker still
loading its metadata says the same of a live partition, and its marker must be
retried — or INVALID_PRODUCER_EPOCH: the partition has already settled the
transaction at a newer epoch (an uncleanly elected leader that held it in doubt aborts
it once the producer comes back at a newer epoch, which the coordinator allows only
after the transaction is finished, or once the coordinators it asked showed the
transaction not committing; ``_RESOLVED``); otherwise the shard retries after a
backoff. ``transactions_of_producer`` and ``describe_transaction`` answer such a
leader's questions (ListTransactions by producer id, DescribeTransactions).

Time: the shards' timers (marker retries, the periodic timeout and expiration
check) run on the runtime's monotonic ``now_ms()``; the timestamps stored in
the records, and the timeouts judged against them, are wall time.
"""

from __future__ import annotations

import logging
from typing import Callable

from tidelog.controller.messages import CreatableTopic
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.coordinator import CoordinatorRuntime
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.txn.shard import TxnConfig, TxnShard

logger = logging.getLogger("tidelog.txn")

TRANSACTION_STATE_TOPIC = "__transaction_state"

# write_markers(broker_id, producer_id, producer_epoch, commit, coordinator_epoch, partitions,
#               on_done({tp: ErrorCode}))
WriteMarkers = Callable[[int, int, int, bool, int, list, Callable[[dict], None]], None]

# A partition that answers these is done only if the topic is really gone from the
# coordinator's metadata (deleted); a broker still loading may say the same of a live one.
_UNKNOWN = {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID}
# A partition that answers INVALID_PRODUCER_EPOCH has seen a newer epoch of the producer
# than the marker's. Three writers raise it there: this transaction's own coordinator at
# a later step (so this coordinator is deposed and its COMPLETE write will fail); an
# uncleanly elected leader that held the transaction in doubt and aborted it when the
# producer came back at a newer epoch (Partition.abort_in_doubt_transaction), which a
# coordinator still sending this marker does not allow; or such a leader's ABORT at the
# next epoch after asking the coordinators (TxnRequests.resolve_in_doubt), which it
# writes only when no coordinator showed this transaction deciding or decided to commit
# — a coordinator still sending a COMMIT shows PrepareCommit, and the leader commits.
# The one way left to drop a COMMIT here is a ListTransactions answer from a broker whose
# metadata lags (it no longer serves the shard and says so with no error, while the
# asking leader's metadata still names it): logged at WARN below. Either way retrying
# cannot change the partition's outcome: the marker counts as delivered.
_RESOLVED = {ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH}


def transaction_state_topic(settings, alive_brokers: int) -> CreatableTopic:
    """``__transaction_state`` as Kafka creates it on first use: compacted, its replication
    factor capped to the brokers alive, ``min.insync.replicas`` capped to that."""
    wanted = settings["transaction.state.log.replication.factor"]
    replication = max(1, min(wanted, alive_brokers))
    if replication < wanted:
        logger.warning("creating %s with replication factor %d: only %d brokers are alive "
                    "(transaction.state.log.replication.factor=%d)", TRANSACTION_STATE_TOPIC, replication,
                    alive_brokers, wanted)
    return CreatableTopic(TRANSACTION_STATE_TOPIC, settings["transaction.state.log.num.partitions"], replication,
                          configs={"cleanup.policy": "compact", "compression.type": "producer",
                                   "min.insync.replicas": str(min(settings["transaction.state.log.min.isr"],
                                                                  replication)),
                                   "segment.bytes": str(settings["transaction.state.log.segment.bytes"])})


class TransactionCoordinator(CoordinatorRuntime):
    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, config: TxnConfig, replica_manager: ReplicaManager, clock: Clock,
                 partition_count: Callable[[], int], leader_of: Callable[[TopicPartition], int],
                 partition_exists: Callable[[TopicPartition], bool] = lambda tp: True):
        super().__init__(replica_manager, clock, partition_count, config.commit_timeout_ms)
        self.config = config
        self._leader_of = leader_of
        self._partition_exists = partition_exists
        self.write_markers: WriteMarkers | None = None     # set by the server layer
        # A fresh producer id at hand, or -1 (set by the driver): a timeout abort at the
        # last epoch moves the transactional id to it (TxnShard._abort_fenced).
        self.take_producer_id: Callable[[], int] = lambda: -1

    def _new_shard(self, index: int, leader_epoch: int) -> TxnShard:
        return TxnShard(index, leader_epoch, self.config, self._writer(index), self._send_markers,
                        self.clock.now_ms, lambda: self.take_producer_id())

    def transactions_of_producer(self, producer_id: int) -> list[tuple[str, int, str]] | None:
        """ListTransactions filtered by one producer id, answered here: ``(transactional id,
        producer id, state name)`` of each id this broker coordinates with it, or None
        while a shard is still loading (COORDINATOR_LOAD_IN_PROGRESS)."""
        shards, loading = self.shards()
        if loading:
            return None
        return [(meta.transactional_id, meta.producer_id, meta.state.display) for shard in shards
                for meta in shard.transactions.values() if meta.producer_id == producer_id]

    def describe_transaction(self, transactional_id: str) -> tuple | str | None:
        """DescribeTransactions of one id, answered here: ``(state name, producer id, producer
        epoch)``, "unknown" if no id of that name, None if this broker cannot tell (not its
        coordinator, or loading)."""
        shard = self.shard_for(transactional_id)
        if isinstance(shard, ErrorCode):
            return None
        meta = shard.describe(transactional_id)
        return "unknown" if meta is None else (meta.state.display, meta.producer_id, meta.producer_epoch)

    def _send_markers(self, producer_id: int, producer_epoch: int, commit: bool, partitions: frozenset,
                      coordinator_epoch: int, on_done: Callable[[bool], None]) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in sorted(partitions):                # a set's order varies with string hashing
            by_leader.setdefault(self._leader_of(tp), []).append(tp)
        if -1 in by_leader or self.write_markers is None:
            on_done(False)                      # a partition without a leader: retry later
            return
        waiting = set(by_leader)
        failed: list = []

        def answered(broker_id: int, errors: dict) -> None:
            if broker_id not in waiting:
                return
            waiting.discard(broker_id)
            for tp, e in errors.items():
                if ErrorCode(e) == ErrorCode.INVALID_PRODUCER_EPOCH:
                    logger.warning("%s has moved past epoch %d of producer %d: its uncleanly elected leader "
                                   "aborted the transaction there (or a newer coordinator wrote the markers); "
                                   "no %s marker is written there%s", tp, producer_epoch, producer_id,
                                   "COMMIT" if commit else "ABORT",
                                   ": a committed transaction aborted on that partition" if commit else "")
            failed.extend((tp, e) for tp, e in errors.items() if ErrorCode(e) not in _RESOLVED
                          and not (ErrorCode(e) in _UNKNOWN and not self._partition_exists(tp)))
            if not waiting:
                if failed:
                    logger.info("markers for producer %d not written yet: %s", producer_id,
                             ", ".join(f"{tp}: {ErrorCode(e).name}" for tp, e in failed[:5]))
                on_done(not failed)
        for broker_id, tps in by_leader.items():
            self.write_markers(broker_id, producer_id, producer_epoch, commit, coordinator_epoch, tps,
                               lambda errors, b=broker_id: answered(b, errors))
