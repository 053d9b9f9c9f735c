"""Idempotent producers on a Log (Kafka's ProducerStateManager rules): a retried
batch is answered with its original offsets and written once; gaps and stale
epochs are refused; the state survives a reopen, follows a follower's appends and
rolls back with a truncation."""

from __future__ import annotations


from tidelog.core.errors import ErrorCode
from tidelog.records.batch import build_batch
from tidelog.storage.log import Log

from .conftest import T0_MS, code_of, read_all


def idem(sequence: int, *values: str, producer_id: int = 7, epoch: int = 0, base_offset: int = 0) -> bytes:
    return build_batch([v.encode() for v in values], producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, timestamp_ms=T0_MS, base_offset=base_offset)


def test_a_retried_batch_gets_its_original_offsets_and_is_not_written_twice(log):
    first = log.append_as_leader(idem(0, "a", "b", "c"), 0)
    assert (first.first_offset, first.last_offset) == (0, 2)
    log.append_as_leader(idem(3, "d"), 0)
    retry = log.append_as_leader(idem(0, "a", "b", "c"), 0)        # the answer to the first was lost
    assert (retry.first_offset, retry.last_offset, retry.batch_count) == (0, 2, 0)
    assert log.log_end_offset == 4


def test_a_gap_in_the_sequence_is_refused_and_nothing_is_written(log):
    log.append_as_leader(idem(0, "a"), 0)
    assert code_of(lambda: log.append_as_leader(idem(5, "x"), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 1
    assert log.append_as_leader(idem(1, "b"), 0).first_offset == 1


def test_a_stale_epoch_is_fenced_and_a_new_epoch_restarts_at_zero(log):
    log.append_as_leader(idem(0, "a"), 0)
    assert code_of(lambda: log.append_as_leader(idem(4, "x", epoch=1), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(idem(0, "b", epoch=1), 0)
    assert code_of(lambda: log.append_as_leader(idem(1, "zombie", epoch=0), 0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2


def test_an_unknown_producer_is_accepted_at_any_sequence(log):
    """KIP-360: its earlier records may have been deleted; nothing to compare with."""
    assert log.append_as_leader(idem(41, "a", producer_id=9), 0).first_offset == 0


def test_sequences_in_one_request_must_follow_each_other(log):
    log.append_as_leader(idem(0, "a") + idem(1, "b"), 0)
    assert code_of(lambda: log.append_as_leader(idem(2, "c") + idem(9, "d"), 0)) == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 2


def test_the_state_is_rebuilt_from_the_log_when_it_opens(log_dir, small_config, clock, fs, log):
    log.append_as_leader(idem(0, "a", "b"), 0)
    log.close()
    reopened = Log.open(log_dir, small_config, clock, fs)
    assert reopened.append_as_leader(idem(0, "a", "b"), 0).first_offset == 0    # still a duplicate
    assert reopened.log_end_offset == 2
    assert code_of(lambda: reopened.append_as_leader(idem(3, "x"), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_follower_keeps_the_state_so_a_new_leader_deduplicates(log):
    log.append_as_follower(idem(0, "a", "b", base_offset=0) + idem(2, "c", base_offset=2))
    retry = log.append_as_leader(idem(2, "c"), 1)          # the producer retries against the new leader
    assert (retry.first_offset, log.log_end_offset) == (2, 3)


def test_truncation_rolls_the_state_back(log):
    log.append_as_leader(idem(0, "a"), 0)
    log.append_as_leader(idem(1, "b"), 0)
    log.truncate_to(1)                                     # b was never committed
    again = log.append_as_leader(idem(1, "b"), 1)          # not a duplicate any more: written
    assert (again.first_offset, again.batch_count, log.log_end_offset) == (1, 1, 2)
    assert [v for _, v in read_all(log)] == [b"a", b"b"]


def test_a_producer_silent_for_the_expiration_time_is_forgotten(log, clock):
    """producer.id.expiration.ms, from the timestamp of its last batch; afterwards it
    is unknown, and unknown producers are accepted at any sequence (KIP-360)."""
    log.append_as_leader(idem(0, "a"), 0)                     # batch timestamp T0_MS
    clock.advance(T0_MS + 1000 - clock.now_ms())
    assert log.remove_expired_producers(expiration_ms=2000) == 0
    assert code_of(lambda: log.append_as_leader(idem(7, "x"), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    clock.advance(1000)
    assert log.remove_expired_producers(expiration_ms=2000) == 1
    assert log.append_as_leader(idem(7, "b"), 0).first_offset == 1


# -- snapshots (Kafka's <offset>.snapshot files) -----------------------------------

def snapshots(log_dir) -> list[int]:
    import os
    return sorted(int(n.split(".")[0]) for n in os.listdir(log_dir) if n.endswith(".snapshot"))


def fill_segments(log, count: int = 40) -> None:
    """Idempotent batches of 100-byte values from producer 7 across several ~1 KiB segments."""
    for sequence in range(count):
        log.append_as_leader(idem(sequence, "v" * 100), 0)


def test_a_snapshot_is_written_at_each_roll_and_at_close(log_dir, log):
    fill_segments(log)
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) > 3
    assert snapshots(log_dir) == bases[1:]                   # the log end offset at each roll
    log.close()
    assert snapshots(log_dir)[-1] == log.log_end_offset


def test_reopening_loads_the_snapshot_and_scans_only_what_follows(log_dir, small_config, clock, fs, log,
                                                                 monkeypatch):
    from tidelog.storage.segment import LogSegment
    fill_segments(log)
    log.close()
    scanned = []
    original = LogSegment.headers
    monkeypatch.setattr(LogSegment, "headers", lambda self, *a: (scanned.append(self.base_offset),
                                                                 original(self, *a))[1])
    reopened = Log.open(log_dir, small_config, clock, fs)
    assert scanned == [reopened.segments[-1].base_offset]     # the sealed segments were not read
    retry = reopened.append_as_leader(idem(39, "v" * 100), 0)  # the last batch is still a duplicate
    assert retry.batch_count == 0 and retry.first_offset == 39
    assert code_of(lambda: reopened.append_as_leader(idem(45, "x"), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_damaged_snapshot_is_deleted_and_the_log_is_scanned_instead(log_dir, small_config, clock, fs, log):
    import os
    fill_segments(log)
    log.close()
    newest = os.path.join(log_dir, f"{snapshots(log_dir)[-1]:020d}.snapshot")
    with open(newest, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xff")
    reopened = Log.open(log_dir, small_config, clock, fs)
    assert not os.path.exists(newest)
    assert reopened.append_as_leader(idem(39, "v" * 100), 0).batch_count == 0
    assert reopened.append_as_leader(idem(40, "w"), 0).batch_count == 1


def test_a_truncation_below_a_snapshot_deletes_it_and_rolls_the_state_back(log_dir, log):
    fill_segments(log)
    cut = log.segments[2].base_offset + 1
    log.truncate_to(cut)
    assert all(offset <= log.log_end_offset for offset in snapshots(log_dir))
    again = log.append_as_leader(idem(log.log_end_offset, "v" * 100), 1)   # the next sequence is accepted
    assert again.batch_count == 1


def test_producers_whose_records_are_all_below_the_log_start_are_forgotten(log):
    log.append_as_leader(idem(0, "a", producer_id=3), 0)
    fill_segments(log)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(2)                  # DeleteRecords past producer 3's batch
    assert log.append_as_leader(idem(17, "x", producer_id=3), 0).batch_count == 1   # unknown now: any sequence
    assert code_of(lambda: log.append_as_leader(idem(99, "x"), 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_nothing_appended_since_the_last_snapshot_writes_no_snapshot(log_dir, small_config, clock, fs, log):
    """Kafka's takeSnapshot rule: a snapshot only when the log end moved past the newest
    one (or past 0 without one), so closing thousands of empty logs writes no file."""
    import os
    log.close()
    assert snapshots(log_dir) == []                           # an empty log: nothing to save
    reopened = Log.open(log_dir, small_config, clock, fs)
    reopened.append_as_leader(idem(0, "a"), 0)
    reopened.close()
    assert snapshots(log_dir) == [1]
    written = os.stat(os.path.join(log_dir, "00000000000000000001.snapshot"))
    again = Log.open(log_dir, small_config, clock, fs)
    again.close()                                             # nothing appended: not rewritten
    kept = os.stat(os.path.join(log_dir, "00000000000000000001.snapshot"))
    assert (kept.st_ino, kept.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    again = Log.open(log_dir, small_config, clock, fs)
    assert again.append_as_leader(idem(0, "a"), 0).first_offset == 0       # the state came back
