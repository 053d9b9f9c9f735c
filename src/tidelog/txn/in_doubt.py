"""What an uncleanly elected leader does with a transaction it holds in doubt, once the
coordinators have answered (docs/transactions.md, "Unclean elections").

Theory of operation. A leader elected RECOVERING holds the transactions its producer
state shows open *in doubt* (``Partition.transactions_in_doubt``): it may lack the
marker that closed one. It asks: ListTransactions filtered by the producer id at every
broker that leads a ``__transaction_state`` partition (KIP-664), then
DescribeTransactions of the transactional id found, at its coordinator
(``TxnRequests.resolve_in_doubt``). ``decide`` turns the answer into a verdict; the
verdict's marker is written as the coordinator's (the WriteTxnMarkers path), so the
existing rule — a coordinator's marker settles a doubted transaction: its own (at the
doubted epoch or the next) as it says, a later transaction's by aborting the doubted one
first (``Partition._settle_older_transactions``) — is the only way a doubt ends besides
the producer's return at a newer epoch.

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
    no coordinator lists the producer id, but BLIND     (asked again; an ERROR names the
    the asker may not DESCRIBE every id                  missing ACL)
    no answer from a broker that must answer  NO_ANSWER (asked again after a backoff)

"No coordinator knows the producer id" is read from ListTransactions, which lists only
the ids the asking principal may DESCRIBE (Kafka filters silently). It is trusted only
when ``missing_describe_acl`` finds nothing missing: ACLs off, the inter-broker principal
a super user, or an ALLOW DESCRIBE for it on every transactional id (LITERAL ``*`` or
PREFIXED ``""``) that no DENY narrows; otherwise an empty listing may hide a committed
transaction, and aborting it would lose acknowledged records. An answer that may be
partial for any other reason (a broker that did not answer, an error code such as
COORDINATOR_LOAD_IN_PROGRESS) is NO_ANSWER, never "unknown".

A transaction is asked about when an unclean election leaves it in doubt, and by any
leader once it has been open longer than ``transaction.max.timeout.ms`` (the age rule,
``Partition.maybe_question_old_transactions``): the same question, verdicts and marker.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidelog.metadata.authorizer import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
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
    BLIND = "blind"               # nobody listed the producer id, but the listing may hide it: ask again


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


# An ALLOW for one of these operations allows DESCRIBE too (Kafka's implied operations).
_IMPLY_DESCRIBE = (AclOperation.DESCRIBE, AclOperation.ALL, AclOperation.READ, AclOperation.WRITE,
                   AclOperation.DELETE, AclOperation.ALTER)


def missing_describe_acl(authorizer, acls, principal: str | None) -> str:
    """Why ``principal`` (the asking broker's inter-broker principal; None: unknown) might
    not see every transactional id in a ListTransactions answer — a sentence naming the
    missing ACL — or "" when it sees them all. ``authorizer`` None: ACLs are off."""
    if authorizer is None:
        return ""
    if principal is None:
        return ("the inter-broker principal is unknown, so it cannot be checked to DESCRIBE every transactional "
                "id: make it a super user (super.users)")
    if principal in authorizer.super_users:
        return ""
    typed = [acl for acl in acls if acl.resource_type == ResourceType.TRANSACTIONAL_ID]
    if not typed and authorizer.allow_everyone_if_no_acl_found:
        return ""
    mine = [acl for acl in typed if acl.principal in (principal, WILDCARD_PRINCIPAL)]
    for acl in mine:
        if acl.permission_type == AclPermissionType.DENY and acl.operation in (AclOperation.DESCRIBE,
                                                                                AclOperation.ALL):
            return (f"a DENY {AclOperation(acl.operation).name} ACL for {acl.principal} on TRANSACTIONAL_ID "
                    f"{PatternType(acl.pattern_type).name} {acl.resource_name!r} hides transactional ids from "
                    f"the inter-broker principal {principal}")
    for acl in mine:
        everything = ((acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD)
                      or (acl.pattern_type == PatternType.PREFIXED and acl.resource_name == ""))
        if (acl.permission_type == AclPermissionType.ALLOW and acl.host == WILDCARD and everything
                and acl.operation in _IMPLY_DESCRIBE):
            return ""
    return (f"the inter-broker principal {principal} is not a super user and has no ALLOW DESCRIBE ACL on "
            f"TRANSACTIONAL_ID '*' (kafka-acls --add --allow-principal {principal} --operation Describe "
            f"--transactional-id '*')")


def decide(producer_id: int, epoch: int, view: CoordinatorView | None, missing_acl: str = "") -> Decision:
    """The verdict on producer ``producer_id``'s transaction in doubt at ``epoch``, from
    its coordinator's ``view`` — None when every coordinator answered and none knows the
    producer id (its transactional id expired, or its state is gone). ``missing_acl``
    (``missing_describe_acl``) non-empty: the answers may hide the id, so None proves
    nothing (BLIND)."""
    bumped = min(epoch + 1, PRODUCER_EPOCH_MAX)
    if view is None:
        if missing_acl:
            return Decision(Verdict.BLIND, -1, f"no coordinator listed the producer id, but the listing may hide "
                                               f"it: {missing_acl}")
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
