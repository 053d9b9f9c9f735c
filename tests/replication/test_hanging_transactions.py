"""The age rule (docs/transactions.md, "Hanging transactions"): any leader asks the
coordinators about a transaction its producer state shows open for longer than
``transaction.max.timeout.ms`` — with no memory of an unclean election — through the same
question schedule as a transaction in doubt (``Partition.maybe_question_old_transactions``)."""

from __future__ import annotations

from tidelog.replication.partition import RECOVERED

from .conftest import T0_MS
from .test_unclean_recovery import EPOCH, PID, elect, marker, stale_follower, txn_batch

MAX_AGE_MS = 900_000


def test_a_clean_leader_asks_about_a_transaction_open_longer_than_the_max_timeout(make, clock):
    """Elected cleanly (no doubt): nothing asked while the transaction's first batch
    (stamped T0) is at most transaction.max.timeout.ms old; once older, a question is due
    at once, and it ends when a marker closes the transaction."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERED, clock.monotonic_ms())
    now = clock.monotonic_ms()
    assert follower.transactions_in_doubt == {} and not follower.has_questions
    assert follower.maybe_question_old_transactions(T0_MS + MAX_AGE_MS, MAX_AGE_MS, now) == []
    assert follower.in_doubt_questions_due(now + 60_000) == []
    assert follower.maybe_question_old_transactions(T0_MS + MAX_AGE_MS + 1, MAX_AGE_MS, now) == [PID]
    assert follower.has_questions and follower.in_question(PID, EPOCH)
    assert follower.in_doubt_questions_due(now) == [(PID, EPOCH)]
    assert follower.maybe_question_old_transactions(T0_MS + 2 * MAX_AGE_MS, MAX_AGE_MS, now) == []   # once
    follower.on_in_doubt_answer(PID, EPOCH, 1, False, "no answer", now)
    assert follower.next_in_doubt_question_ms() == now + 100                 # the same backoff
    follower.append_records_to_leader(marker(commit=True), 1, from_coordinator=True)
    assert not follower.in_question(PID, EPOCH)
    assert follower.in_doubt_questions_due(now + 60_000) == [] and not follower.has_questions
    assert follower.log.last_stable_offset == follower.log.log_end_offset


def test_only_a_leader_asks(make, clock):
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    assert follower.maybe_question_old_transactions(T0_MS + 2 * MAX_AGE_MS, MAX_AGE_MS,
                                                    clock.monotonic_ms()) == []


def test_a_closed_transaction_is_not_asked_about(make, clock):
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"), marker(False, base_offset=1, leader_epoch=0))
    elect(follower, RECOVERED, clock.monotonic_ms())
    assert follower.maybe_question_old_transactions(T0_MS + 2 * MAX_AGE_MS, MAX_AGE_MS,
                                                    clock.monotonic_ms()) == []
