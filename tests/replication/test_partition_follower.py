"""Follower-side Partition rules: steps 8–9 of replication (docs/replication.md), the
follower HW clamp, and the DeleteRecords race."""

import pytest

from tidelog.core.errors import ErrorCode, KafkaError

from .conftest import leader_batch


def test_append_as_follower_keeps_leader_offsets_and_epochs(make):
    follower = make.follower(1)
    info = follower.append_records_as_follower(leader_batch(0, 0, "a", "b") + leader_batch(2, 3, "c"))
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert follower.log.log_end_offset == 3
    assert follower.log.leader_epoch_cache.entries == [(0, 0), (3, 2)]


def test_leader_does_not_append_as_follower(make):
    leader = make.leader()
    with pytest.raises(KafkaError) as e:
        leader.append_records_as_follower(leader_batch(0, 0, "a"))
    assert e.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_follower_hw_is_leader_hw_clamped_to_log_end_offset(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a", "b", "c"))
    assert follower.update_follower_high_watermark(10)
    assert follower.log.high_watermark == 3            # min(LEO, leader HW)
    assert follower.update_follower_high_watermark(2)  # a follower's HW may go back
    assert follower.log.high_watermark == 2
    assert not follower.update_follower_high_watermark(2)


def test_follower_log_start_offset_follows_leader(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b") + leader_batch(2, 0, "c"))
    follower.update_follower_high_watermark(3)
    assert follower.update_follower_log_start_offset(2)
    assert follower.log.log_start_offset == 2
    assert not follower.update_follower_log_start_offset(1)   # never lowered


def test_delete_records_race_log_start_above_follower_hw_is_not_an_error(make):
    """The DeleteRecords race: Kafka's "Cannot increment the log start offset to X since
    it is larger than the high watermark Y" must not happen."""
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b") + leader_batch(2, 0, "c"))
    follower.update_follower_high_watermark(1)
    # The leader's log start offset (2) is above our HW (1) but within our log.
    follower.update_follower_log_start_offset(2)
    assert (follower.log.log_start_offset, follower.log.high_watermark, follower.log.log_end_offset) == (1, 1, 3)
    # Once the HW catches up, the rest follows.
    follower.update_follower_high_watermark(3)
    assert follower.update_follower_log_start_offset(2)
    assert follower.log.log_start_offset == 2


def test_delete_records_race_log_start_above_follower_leo_restarts_log(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a", "b"))
    follower.update_follower_high_watermark(1)
    assert follower.update_follower_log_start_offset(7)
    log = follower.log
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (7, 7, 7)
    assert log.latest_epoch is None


def test_truncate_to_drops_records_and_epochs(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a", "b") + leader_batch(2, 1, "c"))
    follower.update_follower_high_watermark(3)
    assert follower.truncate_to(2)          # below the HW: allowed, logged as a warning
    log = follower.log
    assert (log.log_end_offset, log.high_watermark) == (2, 2)
    assert log.leader_epoch_cache.entries == [(0, 0)]
    assert not follower.truncate_to(5)


def test_truncate_fully_and_start_at(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a", "b"))
    follower.truncate_fully_and_start_at(10)
    log = follower.log
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (10, 10, 10)


def test_a_first_batch_straddling_the_empty_logs_start_restarts_the_log_at_its_base(make):
    """DeleteRecords moved the leader's log start to 3, inside the batch [2..4]; a new
    follower starts empty at 3 and is sent that whole batch (Kafka's
    Partition.appendRecordsToFollowerOrFutureReplica, UnexpectedAppendOffsetException)."""
    follower = make.follower(1)
    follower.truncate_fully_and_start_at(3)
    info = follower.append_records_as_follower(leader_batch(2, 0, "c", "d", "e"))
    log = follower.log
    assert (info.first_offset, log.log_start_offset, log.log_end_offset) == (2, 2, 5)
    follower.update_follower_high_watermark(5)
    assert follower.update_follower_log_start_offset(3)        # the leader's log start follows
    assert log.log_start_offset == 3


def test_a_batch_below_a_non_empty_logs_end_is_still_refused(make):
    follower = make.follower(1)
    follower.append_records_as_follower(leader_batch(0, 0, "a", "b"))
    with pytest.raises(KafkaError):
        follower.append_records_as_follower(leader_batch(1, 0, "b", "c"))
    assert follower.log.log_end_offset == 2
