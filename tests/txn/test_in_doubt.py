"""The verdict an uncleanly elected leader draws from the coordinator's answer about a
transaction it holds in doubt (``tidelog.txn.in_doubt.decide``; docs/transactions.md,
"Unclean elections"), row by row of its table."""

from __future__ import annotations

import pytest

from tidelog.txn.in_doubt import PRODUCER_EPOCH_MAX, CoordinatorView, Verdict, decide
from tidelog.txn.records import TxnState

PID, E = 7, 3


def view(state: TxnState, epoch: int, producer_id: int = PID) -> CoordinatorView:
    return CoordinatorView("tx", 3, state, producer_id, epoch)


@pytest.mark.parametrize("state, epoch, verdict, marker_epoch", [
    (TxnState.ONGOING, E, Verdict.WAIT, -1),                       # undecided: its own marker will come
    (TxnState.PREPARE_COMMIT, E, Verdict.COMMIT, E),               # version 1: the marker at e
    (TxnState.COMPLETE_COMMIT, E, Verdict.COMMIT, E),              # marker lost with the old leader
    (TxnState.PREPARE_COMMIT, E + 1, Verdict.COMMIT, E + 1),       # version 2 bumps on commit
    (TxnState.COMPLETE_COMMIT, E + 1, Verdict.COMMIT, E + 1),
    (TxnState.PREPARE_ABORT, E, Verdict.ABORT, E),
    (TxnState.COMPLETE_ABORT, E, Verdict.ABORT, E),
    (TxnState.COMPLETE_ABORT, E + 1, Verdict.ABORT, E + 1),        # a fencing abort, or version 2
    (TxnState.EMPTY, E, Verdict.ABORT, E),
    (TxnState.ONGOING, E + 1, Verdict.ABORT, E + 1),               # a newer epoch: ours is finished
    (TxnState.EMPTY, E + 1, Verdict.ABORT, E + 1),
    (TxnState.COMPLETE_COMMIT, E + 2, Verdict.ABORT, E + 1),       # a later transaction's commit
    (TxnState.COMPLETE_COMMIT, E - 1, Verdict.ABORT, E + 1),       # the coordinator lost this epoch
])
def test_the_coordinators_state_at_an_epoch_decides(state, epoch, verdict, marker_epoch):
    decision = decide(PID, E, view(state, epoch))
    assert (decision.verdict, decision.marker_epoch) == (verdict, marker_epoch), decision.reason


def test_a_producer_no_coordinator_knows_is_aborted_at_the_next_epoch():
    decision = decide(PID, E, None)
    assert (decision.verdict, decision.marker_epoch) == (Verdict.ABORT, E + 1)
    assert decide(PID, PRODUCER_EPOCH_MAX, None).marker_epoch == PRODUCER_EPOCH_MAX     # an int16


def test_another_producer_id_under_the_transactional_id_is_not_this_transaction():
    """The id moved to a fresh producer id (its epoch exhausted): the doubted one is over."""
    decision = decide(PID, E, view(TxnState.COMPLETE_COMMIT, E, producer_id=PID + 1))
    assert (decision.verdict, decision.marker_epoch) == (Verdict.ABORT, E + 1)
