"""Transactions in one partition's log: open transactions hold back the last stable
offset, markers close them, aborted ones are indexed (.txnindex) and survive a
restart, a crash and a truncation."""

from __future__ import annotations

import os


from tidelog.core.errors import ErrorCode
from tidelog.records.batch import build_batch, build_marker
from tidelog.storage.log import Log
from tidelog.storage.producer_state import AbortedTxn

from .conftest import T0_MS, code_of


def txn(sequence: int, *values: str, producer_id: int = 7, epoch: int = 0) -> bytes:
    return build_batch([v.encode() for v in values], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, timestamp_ms=T0_MS, is_transactional=True)


def marker(commit: bool, producer_id: int = 7, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_marker(producer_id, epoch, commit, coordinator_epoch, T0_MS)


def plain(*values: str) -> bytes:
    return build_batch([v.encode() for v in values], timestamp_ms=T0_MS)


def _settle(log: Log) -> None:
    log.update_high_watermark(log.log_end_offset)


def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset(log):
    log.append_as_leader(plain("p0", "p1"), 0)                         # 0-1
    log.append_as_leader(txn(0, "t0", "t1"), 0)                        # 2-3, opens producer 7's transaction
    log.append_as_leader(plain("p4"), 0)                               # 4
    _settle(log)
    assert log.high_watermark == 5
    assert log.last_stable_offset == 2
    log.append_as_leader(marker(True), 0, from_coordinator=True)       # 5: COMMIT
    _settle(log)
    assert log.last_stable_offset == log.high_watermark == 6
    assert log.collect_aborted_transactions(0, 6) == []


def test_the_lso_never_passes_the_high_watermark(log):
    log.append_as_leader(plain("a"), 0)
    log.append_as_leader(txn(0, "t"), 0)
    log.append_as_leader(marker(True), 0, from_coordinator=True)
    log.update_high_watermark(1)
    assert log.last_stable_offset == 1


def test_a_completed_transaction_stays_unstable_until_its_marker_is_replicated(log):
    """Kafka's unreplicated transactions: a COMMIT marker written but not yet below the
    high watermark keeps the LSO at the transaction's first offset, so read_committed
    never sees records that a leader change could still make uncommitted."""
    log.append_as_leader(plain("a"), 0)                                 # 0
    log.append_as_leader(txn(0, "t0", "t1"), 0)                         # 1-2
    log.append_as_leader(marker(True), 0, from_coordinator=True)        # 3: COMMIT
    log.append_as_leader(plain("b"), 0)                                 # 4
    log.update_high_watermark(3)                                        # the marker not yet replicated
    assert log.last_stable_offset == 1
    log.update_high_watermark(4)                                        # now it is
    assert log.last_stable_offset == 4
    # The same for an ABORT, with the high watermark moved by the leader's rule.
    log.append_as_leader(txn(2, "u"), 0)                                # 5
    log.append_as_leader(marker(False), 0, from_coordinator=True)       # 6: ABORT
    log.maybe_increment_high_watermark(6)
    assert log.last_stable_offset == 5
    log.maybe_increment_high_watermark(7)
    assert log.last_stable_offset == 7


def test_an_aborted_transaction_is_indexed_with_its_range(log):
    log.append_as_leader(txn(0, "a0", "a1"), 0)                              # 0-1 producer 7
    log.append_as_leader(txn(0, "b0", producer_id=8), 0)                     # 2   producer 8
    log.append_as_leader(marker(False), 0, from_coordinator=True)            # 3   ABORT 7
    _settle(log)
    assert log.last_stable_offset == 2                                        # producer 8 still open
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(7, 0, 3, 2)]
    assert log.collect_aborted_transactions(4, 10) == []                      # ends before the fetch
    log.append_as_leader(marker(True, producer_id=8), 0, from_coordinator=True)   # 4 COMMIT 8
    _settle(log)
    assert log.last_stable_offset == 5


def test_clients_cannot_write_markers_and_stale_markers_are_fenced(log):
    assert code_of(lambda: log.append_as_leader(marker(True), 0)) == ErrorCode.INVALID_RECORD
    log.append_as_leader(txn(0, "a", epoch=2), 0)
    assert code_of(lambda: log.append_as_leader(marker(False, epoch=1), 0, from_coordinator=True)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    log.append_as_leader(marker(False, epoch=3, coordinator_epoch=5), 0, from_coordinator=True)
    log.append_as_leader(txn(0, "b", epoch=3), 0)
    assert code_of(lambda: log.append_as_leader(marker(True, epoch=3, coordinator_epoch=4), 0,
                                                from_coordinator=True)) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == 3


def test_the_index_and_open_transactions_survive_a_clean_restart(log_dir, small_config, clock, fs, log):
    log.append_as_leader(txn(0, "a"), 0)
    log.append_as_leader(marker(False), 0, from_coordinator=True)
    log.append_as_leader(txn(0, "b", producer_id=9), 0)                      # still open at shutdown
    _settle(log)
    log.close()
    assert any(name.endswith(".txnindex") for name in os.listdir(log_dir))
    reopened = Log.open(log_dir, small_config, clock, fs, high_watermark=3)
    assert reopened.collect_aborted_transactions(0, 3) == [AbortedTxn(7, 0, 1, 2)]
    assert reopened.last_stable_offset == 2
    assert reopened.ongoing_transactions() == {9: 2}


def test_the_index_is_rebuilt_from_the_log_after_a_crash(log_dir, small_config, clock, fs, log):
    log.append_as_leader(txn(0, "a"), 0)
    log.append_as_leader(marker(False), 0, from_coordinator=True)
    log.flush()
    fs.crash()                                                               # no snapshot, no .txnindex
    reopened = Log.open(log_dir, small_config, clock, fs, high_watermark=2)
    assert reopened.collect_aborted_transactions(0, 2) == [AbortedTxn(7, 0, 1, 2)]


def test_truncation_forgets_the_aborts_and_reopens_transactions_it_removes(log):
    log.append_as_leader(txn(0, "a"), 0)                                     # 0
    log.append_as_leader(marker(False), 0, from_coordinator=True)            # 1
    log.truncate_to(1)
    assert log.collect_aborted_transactions(0, 10) == []
    assert log.ongoing_transactions() == {7: 0}                              # the marker is gone
    log.append_as_leader(marker(True), 0, from_coordinator=True)
    assert log.ongoing_transactions() == {}
