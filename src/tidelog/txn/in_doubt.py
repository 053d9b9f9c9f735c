"""What an uncleanly elected leader does with a transaction it holds in doubt, once the
coordinators have answered (docs/transactions.md, "Unclean elections").

Theory of operation. A leader elected RECOVERING holds the transactions its producer
state shows open *in doubt* (``Partition.transactions_in_doubt``): it may lack the
marker that closed one. It asks: ListTransactions filtered by the producer id at every
broker that leads a ``__transaction_state`` partition (KIP-664), then
DescribeTransactions of the transactional id found, at its coordinator
(``TxnRequests.resolve_in_doubt``). ``decide`` turns the answer into a verdict; the
verdict's marker is written as the coordinator's (the WriteTxnMarkers path), so the
existing rule — a coordinator's marker settles a doubted transaction — is the only way
a doubt ends besides the producer's return at a newer epoch.

The coordinator remembers only an id's *current* transaction (state, producer id and
epoch), so the verdict reads the doubted epoch ``e`` against the coordinator's ``E``:

    coordinator says                          verdict   marker epoch
    Ongoing at e                              WAIT      (its own marker will come)
    PrepareCommit / CompleteCommit at e, e+1  COMMIT    E   (e+1: transaction.version 2 bumps)
    PrepareAbort / CompleteAbort at e, e+1    ABORT     E   (e+1: a fencing abort, or version 2)
    Empty at e                                ABORT     e
    any other state at e+1, any state > e+1   ABORT     e+1 (a newer epoch: ours is finished)
    an epoch below e, another producer id,    ABORT     e+1 (nobody will finish it)
    or no coordinator knows the producer id
    no answer from a broker that must answer  NO_ANSWER (asked again after a backoff)

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidelog.txn.records import TxnState

PRODUCER_EPOCH_MAX = 0x7FFF           # an int16: a marker's epoch never passes it

_COMMITTED = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
_ABORTED = (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
STATES_BY_NAME = {state.display: state for state in TxnState}      # DescribeTransactions' state names


class Verdict(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"
    WAIT = "wait"                 # the coordinator has not decided: its marker will come
    NO_ANSWER = "no answer"       # a coordinator that must answer did not: ask again later


@dataclass(frozen=True)
class CoordinatorView:
    """What the transactional id's coordinator said (DescribeTransactions)."""

    transactional_id: str
    coordinator: int
    state: TxnState
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    marker_epoch: int = -1        # COMMIT / ABORT: the producer epoch the marker carries
    reason: str = ""


def decide(producer_id: int, epoch: int, view: CoordinatorView | None) -> Decision:
    """The verdict on producer ``producer_id``'s transaction in doubt at ``epoch``, from
    its coordinator's ``view`` — None when every coordinator answered and none knows the
    producer id (its transactional id expired, or its state is gone)."""
    bumped = min(epoch + 1, PRODUCER_EPOCH_MAX)
    if view is None:
        return Decision(Verdict.ABORT, bumped, "no coordinator knows the producer id")
    where = f"{view.transactional_id!r} at coordinator {view.coordinator}: {view.state.display} at epoch " \
            f"{view.producer_epoch}"
    if view.producer_id != producer_id or view.producer_epoch < epoch:
        return Decision(Verdict.ABORT, bumped, f"{where}, not this producer epoch")
    if view.producer_epoch in (epoch, epoch + 1):
        if view.state in _COMMITTED:
            return Decision(Verdict.COMMIT, view.producer_epoch, where)
        if view.state in _ABORTED:
            return Decision(Verdict.ABORT, view.producer_epoch, where)
    if view.producer_epoch == epoch:
        if view.state == TxnState.ONGOING:
            return Decision(Verdict.WAIT, -1, where)
        return Decision(Verdict.ABORT, epoch, where)
    return Decision(Verdict.ABORT, bumped, f"{where}: a newer epoch")
