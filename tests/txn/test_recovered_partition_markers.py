"""The coordinator's side of unclean-election recovery (docs/transactions.md,
"Unclean elections"): a partition whose uncleanly elected leader held a
transaction in doubt and aborted it when the producer came back at a newer epoch has
fenced the old epoch there, and answers a marker at that epoch INVALID_PRODUCER_EPOCH. The partition's outcome
is settled; the coordinator counts the marker as delivered and completes the
transaction, instead of retrying it for ever (the transactional id would answer
CONCURRENT_TRANSACTIONS for good)."""

from __future__ import annotations

from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.txn.coordinator import TransactionCoordinator
from tidelog.txn.shard import TxnConfig

TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)


def send(answers: dict) -> list[bool]:
    coordinator = TransactionCoordinator(TxnConfig(), None, ManualClock(0), lambda: 1,
                                         leader_of={TP0: 1, TP1: 2}.__getitem__)
    writes = []

    def write_markers(broker_id, producer_id, producer_epoch, commit, coordinator_epoch, partitions, on_done):
        writes.append((broker_id, tuple(partitions)))
        on_done({tp: answers[tp] for tp in partitions})
    coordinator.write_markers = write_markers
    done = []
    coordinator._send_markers(7, 3, True, frozenset({TP0, TP1}), 5, done.append)
    assert writes == [(1, (TP0,)), (2, (TP1,))]
    return done


def test_a_partition_that_aborted_the_transaction_in_recovery_counts_as_delivered():
    assert send({TP0: ErrorCode.NONE, TP1: ErrorCode.INVALID_PRODUCER_EPOCH}) == [True]


def test_other_marker_errors_are_still_retried():
    assert send({TP0: ErrorCode.NONE, TP1: ErrorCode.NOT_LEADER_OR_FOLLOWER}) == [False]
    assert send({TP0: ErrorCode.TRANSACTION_COORDINATOR_FENCED, TP1: ErrorCode.NONE}) == [False]
