"""The follower fetcher state machine (Kafka's ``AbstractFetcherThread``): truncation
(``getOffsetTruncationState``), out of range (``fetchOffsetAndTruncate``), errors
(``processFetchRequest``), and the DeleteRecords race."""

import logging

import pytest

from tidelog.core.errors import ErrorCode, StorageError
from tidelog.core.ids import TopicPartition
from tidelog.core.states import IllegalTransition
from tidelog.replication.fetcher import (
    EpochEndOffset,
    FetcherConfig,
    FetcherState,
    FetchPartitionResult,
    FetchRequestPlan,
    FetchState,
    InitialFetchState,
    LeaderOffsets,
    ListOffsetsPlan,
    OffsetsForLeaderEpochPlan,
    ReplicaFetcherManager,
    fetcher_id_for,
)
from tidelog.replication.partition import Isolation, PartitionState

from .conftest import TP, leader_batch, values

BACKOFF_MS = 250
CONFIG = FetcherConfig(replica_fetch_backoff_ms=BACKOFF_MS)
A, B, C = TopicPartition("a", 0), TopicPartition("b", 0), TopicPartition("c", 0)


class Follower:
    """Broker 1's fetcher from broker 0, over real follower partitions."""

    def __init__(self, make, clock, tps=(TP,), config=CONFIG, leader_epoch=0):
        self.make, self.clock = make, clock
        self.partitions = {tp: make.follower(1, leader=0, leader_epoch=leader_epoch, tp=tp) for tp in tps}
        self.moved = []
        self.failed = []
        self.fetcher = FetcherState(0, 0, 1, config, self.partitions.get, lambda: 101,
                                    self.moved.extend, lambda tp, e: self.failed.append(tp))

    def log(self, tp=TP):
        return self.partitions[tp].log

    def add(self, tp=TP, epoch=0, offset=None):
        offset = self.log(tp).log_end_offset if offset is None else offset
        self.fetcher.add_partitions({tp: InitialFetchState(0, epoch, offset)})

    def state(self, tp=TP):
        return self.fetcher.partition_states.get(tp)

    @property
    def now(self):
        return self.clock.monotonic_ms()


def result(*batches: bytes, high_watermark=-1, log_start_offset=0, error=ErrorCode.NONE, diverging=None):
    return FetchPartitionResult(error, high_watermark, log_start_offset, b"".join(batches), diverging)


# ------------------------------------------------------------------ adding partitions


def test_partition_with_leader_epoch_starts_fetching_at_log_end(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 2, "a", "b"))
    f.add(epoch=3)
    assert f.state() == _state(2, 3, FetchState.FETCHING, last_fetched_epoch=2)


def test_partition_without_leader_epoch_truncates_to_high_watermark_first(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, -1, "a", "b", "c"))   # no epoch recorded
    f.log().update_high_watermark(1)
    f.add(epoch=3, offset=f.log().high_watermark)
    assert f.state().state == FetchState.TRUNCATING
    plan = f.fetcher.poll(f.now)            # truncates locally, then fetches
    assert f.log().log_end_offset == 0      # the batch holding offset 1 goes whole
    assert isinstance(plan, FetchRequestPlan) and plan.partitions[TP].fetch_offset == 0


def test_add_partitions_with_same_leader_epoch_keeps_state(make, clock):
    f = Follower(make, clock)
    f.add(epoch=3)
    f.fetcher.on_fetch_response(f.fetcher.poll(f.now), {TP: result(leader_batch(0, 3, "a"),
                                                                           high_watermark=1)}, f.now)
    kept = f.state()
    f.add(epoch=3, offset=0)                # same epoch: no reset, no truncation
    assert f.state() is kept and f.log().log_end_offset == 1
    f.add(epoch=4)
    assert f.state().current_leader_epoch == 4


def test_remove_partitions(make, clock):
    f = Follower(make, clock, tps=(A, B))
    f.add(A)
    f.add(B)
    removed = f.fetcher.remove_partitions([A])
    assert list(removed) == [A] and list(f.fetcher.partition_states) == [B]


# ------------------------------------------------------------------ building a fetch


def test_build_fetch_carries_every_field_of_the_rules(make, clock):
    config = FetcherConfig(replica_fetch_max_bytes=1000, replica_fetch_response_max_bytes=5000,
                           replica_fetch_wait_max_ms=400, replica_fetch_min_bytes=7)
    f = Follower(make, clock, tps=(A, B, C), config=config)
    f.log(A).append_as_follower(leader_batch(0, 1, "x"))
    for tp in (A, B, C):
        f.add(tp, epoch=2)
    f.fetcher._delay([C], f.now)            # delayed partitions are left out
    plan = f.fetcher.poll(f.now)
    assert (plan.source_broker_id, plan.replica_id, plan.broker_epoch) == (0, 1, 101)
    assert (plan.max_wait_ms, plan.min_bytes, plan.max_bytes) == (400, 7, 5000)
    assert (plan.session_id, plan.session_epoch, plan.isolation_level) == (0, -1, 0)
    assert list(plan.partitions) == [A, B]
    a = plan.partitions[A]
    assert (a.fetch_offset, a.log_start_offset, a.partition_max_bytes, a.current_leader_epoch,
            a.last_fetched_epoch) == (1, 0, 1000, 2, 1)
    assert plan.partitions[B].last_fetched_epoch == -1   # B's log is empty
    assert f.fetcher.poll(f.now) is None                 # one request in flight at a time


def test_nothing_ready_means_no_fetch_and_a_wakeup_time(make, clock):
    f = Follower(make, clock)
    assert f.fetcher.poll(f.now) is None
    f.add()
    f.fetcher._delay([TP], f.now)
    assert f.fetcher.poll(f.now) is None
    assert f.fetcher.next_wakeup_ms(f.now) == f.now + BACKOFF_MS
    clock.advance(BACKOFF_MS)
    assert f.fetcher.poll(f.now) is not None


# ------------------------------------------------------------------ processing data


def test_fetch_response_appends_updates_hw_lag_and_epoch(make, clock):
    f = Follower(make, clock)
    f.add(epoch=1)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(0, 1, "a", "b"), high_watermark=5)}, f.now)
    log = f.log()
    assert (log.log_end_offset, log.high_watermark) == (2, 2)   # HW = min(LEO, leader HW)
    assert f.state() == _state(2, 1, FetchState.FETCHING, lag=3, last_fetched_epoch=1)
    assert f.moved == [TP]


def test_fairness_processed_partitions_move_to_end(make, clock):
    f = Follower(make, clock, tps=(A, B, C))
    for tp in (A, B, C):
        f.add(tp)
    plan = f.fetcher.poll(f.now)
    assert list(plan.partitions) == [A, B, C]
    # The response budget ran out after A: only A got data.
    f.fetcher.on_fetch_response(plan, {A: result(leader_batch(0, 0, "x"), high_watermark=1),
                                       B: result(), C: result()}, f.now)
    plan = f.fetcher.poll(f.now)
    assert list(plan.partitions) == [B, C, A]


def test_response_for_changed_fetch_offset_ignored(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b"))
    f.add(epoch=0)
    plan = f.fetcher.poll(f.now)
    # While the fetch is in flight, the partition is re-added at a new epoch and truncated.
    f.partitions[TP].truncate_to(1)
    f.add(epoch=1)
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(2, 0, "c"), high_watermark=3)}, f.now)
    assert f.log().log_end_offset == 1 and f.log().high_watermark == 0
    assert f.state().fetch_offset == 1


def test_response_for_removed_partition_ignored(make, clock):
    f = Follower(make, clock)
    f.add()
    plan = f.fetcher.poll(f.now)
    f.fetcher.remove_partitions([TP])
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(0, 0, "a"), high_watermark=1)}, f.now)
    assert f.log().log_end_offset == 0 and f.state() is None


def test_response_for_re_added_partition_at_same_offset_ignored(make, clock):
    f = Follower(make, clock)
    f.add(epoch=0)
    plan = f.fetcher.poll(f.now)
    f.fetcher.remove_partitions([TP])
    f.add(epoch=1)                         # same fetch offset 0, newer epoch
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(0, 0, "a"), high_watermark=1)}, f.now)
    assert f.log().log_end_offset == 0


def test_corrupt_records_back_off_and_retry(make, clock):
    f = Follower(make, clock)
    f.add()
    plan = f.fetcher.poll(f.now)
    corrupt = bytearray(leader_batch(0, 0, "a"))
    corrupt[-1] ^= 0xFF
    f.fetcher.on_fetch_response(plan, {TP: result(bytes(corrupt), high_watermark=1)}, f.now)
    assert f.log().log_end_offset == 0
    assert f.state().is_delayed(f.now) and f.state().fetch_offset == 0


def test_fetch_offset_not_at_log_end_is_a_broken_invariant(make, clock):
    """Kafka's fetcher marks such a partition failed and fetches on; here a broken
    invariant stops the broker (the runtime's fault handler; a failed simulator
    seed) instead of leaving the partition unreplicated for the process's life."""
    f = Follower(make, clock)
    f.add()
    plan = f.fetcher.poll(f.now)
    f.log().append_as_follower(leader_batch(0, 0, "x"))   # someone else wrote the log
    with pytest.raises(AssertionError, match="fetch offset 0 != log end offset 1"):
        f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(0, 0, "a"), high_watermark=1)}, f.now)


# ------------------------------------------------------------------ truncation


def test_diverging_epoch_truncates_only(make, clock):
    """KAFKA-14704: records, HW and log start offset in a diverging answer are not applied."""
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 1, "b", "c"))
    f.log().update_high_watermark(1)
    f.add(epoch=2)
    plan = f.fetcher.poll(f.now)
    assert plan.partitions[TP].last_fetched_epoch == 1
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(1, 2, "z"), high_watermark=9, log_start_offset=1,
                                                  diverging=(0, 1))}, f.now)
    log = f.log()
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 1, 1)
    assert f.state() == _state(1, 2, FetchState.FETCHING, last_fetched_epoch=0)


def test_truncate_on_fetch_multi_round_kip_279(make, clock):
    """The follower holds epochs 1 and 3, which the leader never had; the leader holds
    2 and 4, which the follower never had. Each round the leader names the epoch it
    has below ours; we cut back to the end of our epoch below that and ask again."""
    leader = make.leader(replicas=(0, 1), isr=(0,), leader_epoch=0)
    leader.append_records_to_leader(values("m0"), 1)
    for epoch, vals in ((2, ("l1", "l2", "l3")), (4, ("l4", "l5"))):
        leader.make_leader(PartitionState(0, epoch, (0,), (0, 1), epoch), clock.monotonic_ms())
        leader.append_records_to_leader(values(*vals), 1)
    assert leader.log.leader_epoch_cache.entries == [(0, 0), (2, 1), (4, 4)]
    f = Follower(make, clock, leader_epoch=4)
    f.log().append_as_follower(leader_batch(0, 0, "m0") + leader_batch(1, 1, "f1") + leader_batch(2, 3, "f2"))
    f.add(epoch=4)

    seen = []
    for _ in range(5):
        plan = f.fetcher.poll(f.now)
        p = plan.partitions[TP]
        seen.append((p.fetch_offset, p.last_fetched_epoch))
        read = leader.read_records(p.fetch_offset, p.partition_max_bytes, Isolation.LOG_END,
                                   p.current_leader_epoch, p.last_fetched_epoch, replica_id=1)
        f.fetcher.on_fetch_response(plan, {TP: FetchPartitionResult.from_read_result(read)}, f.now)
        if read.diverging_epoch is None:
            break
    # (3, e3) -> leader: epoch 2 ends at 4 -> we end epoch 1 at 2: cut to 2, not done
    # (2, e1) -> leader: epoch 0 ends at 1 -> we agree on epoch 0: cut to 1, done
    # (1, e0) -> data
    assert seen == [(3, 3), (2, 1), (1, 0)]
    assert f.log().log_end_offset == 6
    assert f.log().leader_epoch_cache.entries == leader.log.leader_epoch_cache.entries
    assert f.log().read(0, 1 << 20).records.read_bytes() == leader.log.read(0, 1 << 20).records.read_bytes()


def test_offsets_for_leader_epoch_multi_round(make, clock):
    """Without truncate-on-fetch the partition stays TRUNCATING and asks
    OffsetsForLeaderEpoch again with its new latest epoch (KIP-279)."""
    f = Follower(make, clock, config=FetcherConfig(truncate_on_fetch=False, replica_fetch_backoff_ms=BACKOFF_MS))
    f.log().append_as_follower(leader_batch(0, 0, "m0") + leader_batch(1, 1, "f1") + leader_batch(2, 3, "f2"))
    f.log().update_high_watermark(1)
    f.add(epoch=4, offset=f.log().high_watermark)
    assert f.state().state == FetchState.TRUNCATING

    plan = f.fetcher.poll(f.now)
    assert isinstance(plan, OffsetsForLeaderEpochPlan)
    assert (plan.partitions[TP].current_leader_epoch, plan.partitions[TP].leader_epoch) == (4, 3)
    assert f.fetcher.poll(f.now) is None
    f.fetcher.on_offsets_for_leader_epoch_response(plan, {TP: EpochEndOffset(ErrorCode.NONE, 2, 4)}, f.now)
    assert f.log().log_end_offset == 2 and f.state().state == FetchState.TRUNCATING

    plan = f.fetcher.poll(f.now)
    assert plan.partitions[TP].leader_epoch == 1
    f.fetcher.on_offsets_for_leader_epoch_response(plan, {TP: EpochEndOffset(ErrorCode.NONE, 0, 1)}, f.now)
    assert f.log().log_end_offset == 1
    assert f.state() == _state(1, 4, FetchState.FETCHING, last_fetched_epoch=0)
    plan = f.fetcher.poll(f.now)
    assert isinstance(plan, FetchRequestPlan) and plan.partitions[TP].last_fetched_epoch == -1


@pytest.mark.parametrize("answer, offset, done", [
    ((-1, -1), 1, True),      # the leader knows no end offset: truncate to the fetch offset (HW)
    ((-1, 2), 2, True),       # an old protocol: no epoch in the answer, take the leader's end
    ((0, 5), 2, True),        # same epoch: the smaller of both ends (ours ends at 2)
    ((0, 1), 1, True),        # same epoch: the leader's ends first
    ((2, 9), 3, True),        # our latest epoch: it ends at our LEO
    ((1, 9), 2, False),       # epoch 1 is unknown here: cut to the end of our epoch 0, ask again
    ((5, 9), 3, True),        # above every epoch we have: the leader's end, capped by our LEO
    ((5, 1), 1, True),
])
def test_truncation_offset_rules(make, clock, answer, offset, done):
    f = Follower(make, clock, config=FetcherConfig(truncate_on_fetch=False))
    f.log().append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b") + leader_batch(2, 2, "c"))
    f.log().update_high_watermark(1)
    f.add(epoch=3, offset=1)
    assert f.fetcher.truncation_offset(TP, *answer) == (offset, done)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_offsets_for_leader_epoch_response(plan, {TP: EpochEndOffset(ErrorCode.NONE, *answer)}, f.now)
    assert f.log().log_end_offset == offset and f.state().fetch_offset == offset
    assert f.state().state == (FetchState.FETCHING if done else FetchState.TRUNCATING)


def test_offsets_for_leader_epoch_answer_after_epoch_change_ignored(make, clock):
    f = Follower(make, clock, config=FetcherConfig(truncate_on_fetch=False))
    f.log().append_as_follower(leader_batch(0, 0, "a", "b"))
    f.add(epoch=1, offset=0)
    plan = f.fetcher.poll(f.now)
    f.add(epoch=2, offset=0)
    f.fetcher.on_offsets_for_leader_epoch_response(plan, {TP: EpochEndOffset(ErrorCode.NONE, 0, 0)}, f.now)
    assert f.log().log_end_offset == 2 and f.state().state == FetchState.TRUNCATING


def test_offsets_for_leader_epoch_errors(make, clock):
    f = Follower(make, clock, tps=(A, B), config=FetcherConfig(truncate_on_fetch=False,
                                                               replica_fetch_backoff_ms=BACKOFF_MS))
    for tp in (A, B):
        f.log(tp).append_as_follower(leader_batch(0, 0, "a"))
        f.add(tp, epoch=1, offset=0)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_offsets_for_leader_epoch_response(plan, {
        A: EpochEndOffset(ErrorCode.FENCED_LEADER_EPOCH), B: EpochEndOffset(ErrorCode.NOT_LEADER_OR_FOLLOWER)}, f.now)
    assert A in f.fetcher.failed_partitions and f.state(A) is None
    assert f.state(B).is_delayed(f.now) and f.state(B).state == FetchState.TRUNCATING


# ------------------------------------------------------------------ out of range


def _out_of_range(f):
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_fetch_response(plan, {TP: result(error=ErrorCode.OFFSET_OUT_OF_RANGE)}, f.now)
    assert f.state().state == FetchState.OUT_OF_RANGE
    plan = f.fetcher.poll(f.now)
    assert isinstance(plan, ListOffsetsPlan) and plan.partitions == {TP: f.state().current_leader_epoch}
    return plan


def test_out_of_range_leader_behind_truncates(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, *"abcdefghij"))
    f.log().append_as_follower(leader_batch(10, 1, "k"))
    f.add(epoch=2)
    plan = _out_of_range(f)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NONE, 0, 10)}, f.now)
    assert f.log().log_end_offset == 10
    assert f.state() == _state(10, 2, FetchState.FETCHING, lag=0, last_fetched_epoch=0)


def test_out_of_range_leader_start_ahead_restarts(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, *"abcde"))
    f.add(epoch=2)
    plan = _out_of_range(f)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NONE, 20, 30)}, f.now)
    log = f.log()
    assert (log.log_start_offset, log.log_end_offset) == (20, 20)
    assert f.state() == _state(20, 2, FetchState.FETCHING, lag=10, last_fetched_epoch=None)


def test_out_of_range_within_leader_log_fetches_from_own_log_end(make, clock):
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, *"abcde"))
    f.add(epoch=2)
    plan = _out_of_range(f)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NONE, 2, 30)}, f.now)
    assert f.log().log_end_offset == 5 and f.state().fetch_offset == 5 and f.state().lag == 25


def test_out_of_range_lookup_errors(make, clock):
    f = Follower(make, clock)
    f.add(epoch=2)
    plan = _out_of_range(f)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NOT_LEADER_OR_FOLLOWER)}, f.now)
    assert f.state().is_delayed(f.now) and f.state().state == FetchState.OUT_OF_RANGE
    clock.advance(BACKOFF_MS)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.FENCED_LEADER_EPOCH)}, f.now)
    assert f.state() is None and TP in f.fetcher.failed_partitions


# ------------------------------------------------------------------ errors


def test_fenced_leader_epoch_removes_partition(make, clock):
    f = Follower(make, clock, tps=(A, B))
    f.add(A, epoch=3)
    f.add(B, epoch=3)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_fetch_response(plan, {A: result(error=ErrorCode.FENCED_LEADER_EPOCH),
                                       B: result(leader_batch(0, 3, "b"), high_watermark=1)}, f.now)
    assert f.state(A) is None and A in f.fetcher.failed_partitions
    assert f.log(B).log_end_offset == 1       # other partitions continue
    f.add(A, epoch=4)                          # new metadata brings it back
    assert A not in f.fetcher.failed_partitions and f.state(A).current_leader_epoch == 4


def test_a_response_fencing_many_partitions_is_logged_as_one_line(make, clock, caplog):
    """A leader change at scale fences every partition of a fetch response alike: one
    WARNING line counts and names them (the first few), not a line per partition; the
    partitions backing off for another error get one INFO line."""
    tps = tuple(TopicPartition("t", i) for i in range(12))
    f = Follower(make, clock, tps=tps)
    for tp in tps:
        f.add(tp, epoch=3)
    plan = f.fetcher.poll(f.now)
    answers = {tp: result(error=ErrorCode.FENCED_LEADER_EPOCH) for tp in tps[:9]}
    answers.update({tp: result(error=ErrorCode.NOT_LEADER_OR_FOLLOWER) for tp in tps[9:]})
    with caplog.at_level(logging.INFO, logger="tidelog.fetcher"):
        f.fetcher.on_fetch_response(plan, answers, f.now)
    lines = [r for r in caplog.records if r.name == "tidelog.fetcher"]
    warnings = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "fenced leader epoch" in warnings[0] and "9 partitions" in warnings[0] and "and 4 more" in warnings[0]
    assert "t-0 (epoch 3)" in warnings[0]
    infos = [r.getMessage() for r in lines if r.levelno == logging.INFO]
    assert len(infos) == 1 and "NOT_LEADER_OR_FOLLOWER" in infos[0] and "3 partitions" in infos[0], infos
    assert set(tps[:9]) <= f.fetcher.failed_partitions and set(f.failed) == set(tps[:9])


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                   ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR])
def test_other_fetch_errors_back_off_the_partition(make, clock, error):
    f = Follower(make, clock, tps=(A, B))
    f.add(A)
    f.add(B)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_fetch_response(plan, {A: result(error=error), B: result()}, f.now)
    assert f.state(A).delay_until_ms == f.now + BACKOFF_MS
    assert list(f.fetcher.partition_states) == [B, A]
    assert list(f.fetcher.poll(f.now).partitions) == [B]


def test_failed_request_backs_off_every_partition(make, clock):
    f = Follower(make, clock, tps=(A, B))
    f.add(A)
    plan = f.fetcher.poll(f.now)
    f.add(B)                                     # added while the fetch was in flight
    f.fetcher.on_request_failed(plan, f.now)
    assert f.fetcher.in_flight is None
    assert all(s.is_delayed(f.now) for s in f.fetcher.partition_states.values())
    assert f.fetcher.poll(f.now) is None
    clock.advance(BACKOFF_MS)
    assert list(f.fetcher.poll(f.now).partitions) == [A, B]


# ------------------------------------------------------------------ local failures, per partition


def _raise(error):
    def fail(*args, **kwargs):
        raise error
    return fail


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("bad offset"), KeyError("x"),
                                   StorageError("disk gone")], ids=lambda e: type(e).__name__)
def test_a_failure_appending_one_partition_marks_only_that_partition_failed(make, clock, monkeypatch, error):
    """Kafka's AbstractFetcherThread: any exception from one partition's append moves
    it to the failed partitions; the other partitions of the same answer go on."""
    f = Follower(make, clock, tps=(A, B, C))
    for tp in (A, B, C):
        f.add(tp, epoch=1)
    plan = f.fetcher.poll(f.now)
    monkeypatch.setattr(f.partitions[B], "append_records_as_follower", _raise(error))
    f.fetcher.on_fetch_response(plan, {tp: result(leader_batch(0, 1, "v"), high_watermark=1) for tp in (A, B, C)},
                                f.now)
    assert f.state(B) is None and f.fetcher.failed_partitions == {B} and f.failed == [B]
    assert f.log(A).log_end_offset == f.log(C).log_end_offset == 1
    assert list(f.fetcher.poll(f.now).partitions) == [A, C]
    f.add(B, epoch=2)                          # new metadata brings it back
    assert not f.fetcher.failed_partitions and f.state(B).current_leader_epoch == 2


def test_a_failure_updating_the_high_watermark_marks_only_that_partition_failed(make, clock, monkeypatch):
    f = Follower(make, clock, tps=(A, B))
    for tp in (A, B):
        f.add(tp, epoch=1)
    plan = f.fetcher.poll(f.now)
    monkeypatch.setattr(f.partitions[A], "update_follower_high_watermark", _raise(OverflowError("hw")))
    f.fetcher.on_fetch_response(plan, {tp: result(leader_batch(0, 1, "v"), high_watermark=1) for tp in (A, B)},
                                f.now)
    assert f.fetcher.failed_partitions == {A} and f.log(B).high_watermark == 1


def test_a_failure_truncating_one_partition_on_a_diverging_epoch_marks_only_that_partition_failed(
        make, clock, monkeypatch):
    f = Follower(make, clock, tps=(A, B))
    for tp in (A, B):
        f.log(tp).append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 1, "b"))
        f.add(tp, epoch=2)
    plan = f.fetcher.poll(f.now)
    monkeypatch.setattr(f.partitions[A], "truncate_to", _raise(RuntimeError("cannot cut")))
    f.fetcher.on_fetch_response(plan, {A: result(diverging=(0, 1)), B: result(diverging=(0, 1))}, f.now)
    assert f.fetcher.failed_partitions == {A} and f.state(A) is None
    assert f.log(B).log_end_offset == 1 and f.state(B).fetch_offset == 1
    assert f.log(A).log_end_offset == 2                     # untouched


def test_a_failure_truncating_on_an_offsets_for_leader_epoch_answer_marks_only_that_partition_failed(
        make, clock, monkeypatch):
    f = Follower(make, clock, tps=(A, B), config=FetcherConfig(truncate_on_fetch=False))
    for tp in (A, B):
        f.log(tp).append_as_follower(leader_batch(0, 0, "a", "b"))
        f.add(tp, epoch=1, offset=0)
    plan = f.fetcher.poll(f.now)
    assert isinstance(plan, OffsetsForLeaderEpochPlan)
    monkeypatch.setattr(f.partitions[B], "truncate_to", _raise(ValueError("bad")))
    f.fetcher.on_offsets_for_leader_epoch_response(
        plan, {A: EpochEndOffset(ErrorCode.NONE, 0, 1), B: EpochEndOffset(ErrorCode.NONE, 0, 1)}, f.now)
    assert f.fetcher.failed_partitions == {B}
    assert f.state(A).state == FetchState.FETCHING and f.log(A).log_end_offset == 0   # the batch goes whole


def test_a_failure_truncating_to_the_high_watermark_marks_only_that_partition_failed(make, clock, monkeypatch):
    f = Follower(make, clock, tps=(A, B), config=FetcherConfig(truncate_on_fetch=False))
    for tp in (A, B):
        f.log(tp).append_as_follower(leader_batch(0, -1, "a", "b"))     # no epoch: truncate to the HW
        f.add(tp, epoch=1, offset=0)
    monkeypatch.setattr(f.partitions[A], "truncate_to", _raise(RuntimeError("boom")))
    plan = f.fetcher.poll(f.now)
    assert f.fetcher.failed_partitions == {A} and list(plan.partitions) == [B]


def test_an_assertion_error_while_truncating_still_stops_the_broker(make, clock, monkeypatch):
    """A broken invariant is a bug, not a partition failure: it escapes to the driver."""
    f = Follower(make, clock, tps=(A, B))
    for tp in (A, B):
        f.log(tp).append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 1, "b"))
        f.add(tp, epoch=2)
    plan = f.fetcher.poll(f.now)
    monkeypatch.setattr(f.partitions[A], "truncate_to", _raise(IllegalTransition("no such move")))
    with pytest.raises(IllegalTransition):
        f.fetcher.on_fetch_response(plan, {A: result(diverging=(0, 1)), B: result(diverging=(0, 1))}, f.now)


def test_an_unexpected_failure_resetting_an_out_of_range_partition_backs_off_and_asks_again(
        make, clock, monkeypatch):
    """Kafka's handleOutOfRangeError: an unexpected error there is retried after the backoff."""
    f = Follower(make, clock)
    for offset, value in enumerate("abcde"):
        f.log().append_as_follower(leader_batch(offset, 0, value))
    f.add(epoch=2)
    plan = _out_of_range(f)
    monkeypatch.setattr(f.partitions[TP], "truncate_to", _raise(RuntimeError("boom")))
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NONE, 0, 3)}, f.now)
    assert f.state().state == FetchState.OUT_OF_RANGE and f.state().is_delayed(f.now)
    assert not f.fetcher.failed_partitions
    monkeypatch.undo()
    clock.advance(BACKOFF_MS)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_list_offsets_response(plan, {TP: LeaderOffsets(ErrorCode.NONE, 0, 3)}, f.now)
    assert f.log().log_end_offset == 3 and f.state().state == FetchState.FETCHING


def test_an_offsets_for_leader_epoch_answer_for_a_partition_not_asked_is_a_protocol_error(make, clock, caplog):
    f = Follower(make, clock, tps=(A, B), config=FetcherConfig(truncate_on_fetch=False,
                                                               replica_fetch_backoff_ms=BACKOFF_MS))
    f.log(A).append_as_follower(leader_batch(0, 0, "a", "b"))
    f.add(A, epoch=1, offset=0)
    plan = f.fetcher.poll(f.now)
    assert list(plan.partitions) == [A]
    with caplog.at_level(logging.ERROR, logger="tidelog.fetcher"):
        f.fetcher.on_offsets_for_leader_epoch_response(
            plan, {A: EpochEndOffset(ErrorCode.NONE, 0, 0), B: EpochEndOffset(ErrorCode.NONE, 0, 0)}, f.now)
    assert any("not asked" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert f.log(A).log_end_offset == 2                 # nothing in the answer was used
    assert f.state(A).state == FetchState.TRUNCATING and f.state(A).is_delayed(f.now)
    assert f.fetcher.in_flight is None and f.fetcher.failed_requests_in_a_row == 1
    clock.advance(BACKOFF_MS)
    assert isinstance(f.fetcher.poll(f.now), OffsetsForLeaderEpochPlan)   # asked again


# ------------------------------------------------------------------ log start offset race


def test_log_start_offset_above_follower_hw_in_fetch_response_is_not_an_error(make, clock):
    """The DeleteRecords race: the leader read our records, then DeleteRecords moved
    its log start offset, then it read the log start offset for the response."""
    f = Follower(make, clock)
    f.log().append_as_follower(leader_batch(0, 0, "a", "b", "c", "d", "e"))
    f.log().update_high_watermark(5)
    f.add(epoch=0)
    plan = f.fetcher.poll(f.now)
    f.fetcher.on_fetch_response(plan, {TP: result(leader_batch(5, 0, "f", "g"), high_watermark=10,
                                                  log_start_offset=8)}, f.now)
    log = f.log()
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (8, 8, 8)
    assert f.state().fetch_offset == 8 and not f.failed


# ------------------------------------------------------------------ the manager


def test_fetcher_id_uses_kafkas_hash():
    # Java: "hello".hashCode() == 99162322; 31 * that overflows to -1220935314.
    assert fetcher_id_for(TopicPartition("hello", 0), 1000) == 314
    assert fetcher_id_for(TopicPartition("hello", 0), 1) == 0
    assert {fetcher_id_for(TopicPartition("t", p), 3) for p in range(6)} == {0, 1, 2}


def test_manager_groups_partitions_by_source_broker_and_fetcher_id(make, clock):
    partitions = {}
    added, removed = [], []
    manager = ReplicaFetcherManager(1, FetcherConfig(num_replica_fetchers=2), partitions.get,
                                    on_fetcher_added=added.append, on_fetcher_removed=removed.append)
    tps = [TopicPartition("t", p) for p in range(4)]
    for tp in tps:
        partitions[tp] = make.follower(1, tp=tp)
    manager.add_fetcher_for_partitions({tp: InitialFetchState(0 if tp.partition < 2 else 2, 0, 0) for tp in tps})
    assert set(manager.fetchers) == {(0, fetcher_id_for(tps[0], 2)), (0, fetcher_id_for(tps[1], 2)),
                                     (2, fetcher_id_for(tps[2], 2)), (2, fetcher_id_for(tps[3], 2))}
    assert len(added) == len(manager.fetchers)
    assert manager.fetcher_of(tps[2]).source_broker_id == 2
    manager.remove_fetcher_for_partitions(tps[2:])
    stopped = manager.shutdown_idle_fetchers()
    assert {f.source_broker_id for f in stopped} == {2} and removed == stopped
    assert manager.fetch_state(tps[0]).state == FetchState.TRUNCATING


def _state(fetch_offset, epoch, state, lag=None, last_fetched_epoch=None):
    from tidelog.replication.fetcher import PartitionFetchState
    return PartitionFetchState(fetch_offset, epoch, state, lag, None, last_fetched_epoch)


def test_fetcher_config_from_broker_properties():
    config = FetcherConfig.from_properties({"replica.fetch.max.bytes": "2048", "num.replica.fetchers": 3,
                                            "replica.fetch.wait.max.ms": 100, "unrelated": "x"},
                                           truncate_on_fetch=False)
    assert (config.replica_fetch_max_bytes, config.num_replica_fetchers, config.replica_fetch_wait_max_ms,
            config.replica_fetch_backoff_ms, config.truncate_on_fetch) == (2048, 3, 100, 1000, False)
