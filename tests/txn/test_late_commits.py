"""Writes to ``__transaction_state`` whose acks=all wait timed out: the record is in
the leader's log and may commit later (docs/transactions.md, "Writes that time out").

The harness's log holds records until the test commits them (replayed as the
runtime's catch-up does), times a write out (the record stays in the log), or
refuses it before the append (nothing written)."""

from __future__ import annotations

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.txn.records import TxnState, decode_value
from tidelog.txn.shard import MARKER_RETRY_BACKOFF_MS, TxnConfig, TxnShard

T0 = 1_000_000
TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)


class HeldLog:
    def __init__(self):
        self.log: list[tuple[bytes, bytes | None]] = []     # appended, in order
        self.replayed = 0                                  # the high watermark, as replayed
        self.waiting: list = []                            # (end offset, on_done) of unanswered writes
        self.markers: list[tuple] = []
        self.wall_ms = T0                                  # the wall clock; ``now`` is the timer clock
        self.shard = TxnShard(0, 3, TxnConfig(max_timeout_ms=60_000, abort_timed_out_interval_ms=1_000),
                              self.write, self.send_markers, lambda: self.wall_ms)
        self.shard.loaded(T0)

    # the writer: append now, answer when the test says
    def write(self, records, on_done, producer=None):
        self.log.extend(records)
        self.waiting.append((len(self.log), on_done))

    def commit_all(self, now=T0) -> None:
        """The high watermark reaches the log end: replay, then answer the waiting writes."""
        self.replay_all(now)
        waiting, self.waiting = self.waiting, []
        for _, on_done in waiting:
            on_done(ErrorCode.NONE)

    def replay_all(self, now=T0) -> None:
        """Only the replay (a tick's catch-up): the writes were answered already."""
        while self.replayed < len(self.log):
            key, value = self.log[self.replayed]
            self.replayed += 1
            self.shard.replay(key, value, now)

    def answer_last(self, error: ErrorCode, *, appended: bool = True) -> None:
        end, on_done = self.waiting.pop()
        if not appended:
            del self.log[end - 1]
        on_done(error)

    def send_markers(self, producer_id, epoch, commit, partitions, coordinator_epoch, on_done):
        self.markers.append((producer_id, epoch, commit, frozenset(partitions)))
        on_done(True)

    def call(self, method, *args):
        answers = []
        getattr(self.shard, method)(*args, answers.append)
        return answers[0] if answers else None

    def states(self) -> list[tuple[TxnState, int]]:
        return [(decode_value(v).state, decode_value(v).producer_epoch) for _, v in self.log if v is not None]


def ongoing(h: HeldLog) -> None:
    answers = []
    h.shard.init_producer_id("app", 10_000, -1, -1, 100, T0, lambda *a: answers.append(a))
    h.commit_all()
    assert answers == [(ErrorCode.NONE, 100, 0)]
    assert h.call("add_partitions", "app", 100, 0, {TP0, TP1}, T0) is None
    h.commit_all()
    assert h.shard.transactions["app"].state == TxnState.ONGOING


def test_a_prepare_commit_that_timed_out_and_committed_later_gets_its_markers():
    h = HeldLog()
    ongoing(h)
    answers = []
    h.shard.end_transaction("app", 100, 0, True, T0, answers.append)
    h.answer_last(ErrorCode.REQUEST_TIMED_OUT)            # the record stays in the log
    assert answers == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert h.markers == []

    h.replay_all(T0 + 50)                                 # the PREPARE_COMMIT commits later
    assert h.shard.transactions["app"].state == TxnState.PREPARE_COMMIT
    h.shard.on_tick(T0 + 100)
    assert h.markers == [(100, 0, True, frozenset({TP0, TP1}))]
    h.commit_all(T0 + 100)                                # the COMPLETE record
    assert h.shard.transactions["app"].state == TxnState.COMPLETE_COMMIT
    assert h.call("end_transaction", "app", 100, 0, True, T0 + 200) == ErrorCode.NONE   # the client's retry


def test_an_id_whose_write_timed_out_takes_no_other_decision_until_the_record_is_replayed():
    h = HeldLog()
    ongoing(h)
    h.call("end_transaction", "app", 100, 0, True, T0)
    h.answer_last(ErrorCode.REQUEST_TIMED_OUT)
    # The client retries EndTxn, and the transaction's timeout passes: neither may write
    # a second decision while the first may still commit.
    assert h.call("end_transaction", "app", 100, 0, True, T0 + 10) == ErrorCode.CONCURRENT_TRANSACTIONS
    h.shard.on_tick(T0 + 60_000)
    assert h.states()[-1] == (TxnState.PREPARE_COMMIT, 0) and not h.waiting
    assert h.shard.next_deadline_ms() > T0 + 60_000        # no wake-up for an id that waits

    h.replay_all(T0 + 60_001)
    h.shard.on_tick(T0 + 60_001)
    h.commit_all(T0 + 60_001)
    assert h.states()[-2:] == [(TxnState.PREPARE_COMMIT, 0), (TxnState.COMPLETE_COMMIT, 0)]
    assert [m[2] for m in h.markers] == [True]


def test_a_write_refused_before_the_append_frees_the_id_at_once():
    h = HeldLog()
    ongoing(h)
    h.call("end_transaction", "app", 100, 0, True, T0)
    h.answer_last(ErrorCode.NOT_ENOUGH_REPLICAS, appended=False)
    assert not h.shard.transactions["app"].pending
    assert h.call("end_transaction", "app", 100, 0, True, T0 + 10) is None    # written again
    h.commit_all(T0 + 10)
    h.commit_all(T0 + 10)                                 # the COMPLETE record
    assert h.shard.transactions["app"].state == TxnState.COMPLETE_COMMIT
    assert len(h.markers) == 1


def test_a_timed_out_abort_decision_that_commits_later_is_finished():
    h = HeldLog()
    ongoing(h)
    h.wall_ms = T0 + 20_000
    h.shard.on_tick(T0 + 20_000)                           # the transaction timed out: abort, epoch + 1
    h.answer_last(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert h.markers == []
    h.shard.on_tick(T0 + 40_000)                           # no second abort while the first is unknown
    assert h.states()[-1] == (TxnState.PREPARE_ABORT, 1) and not h.waiting
    h.replay_all(T0 + 40_100)
    h.shard.on_tick(T0 + 40_100)
    assert h.markers == [(100, 1, False, frozenset({TP0, TP1}))]
    h.commit_all(T0 + 40_100)
    assert h.shard.transactions["app"].state == TxnState.COMPLETE_ABORT


def test_a_complete_record_that_timed_out_is_not_written_twice():
    h = HeldLog()
    ongoing(h)
    h.call("end_transaction", "app", 100, 0, False, T0)
    h.commit_all(T0)                                       # PREPARE_ABORT commits; markers; COMPLETE written
    assert len(h.markers) == 1
    h.answer_last(ErrorCode.REQUEST_TIMED_OUT)             # the COMPLETE record's wait timed out
    h.shard.on_tick(T0 + MARKER_RETRY_BACKOFF_MS + 1)
    assert len(h.markers) == 1 and not h.waiting
    h.replay_all(T0 + MARKER_RETRY_BACKOFF_MS + 2)
    assert h.shard.transactions["app"].state == TxnState.COMPLETE_ABORT
    assert h.states().count((TxnState.COMPLETE_ABORT, 0)) == 1


def test_a_new_id_whose_first_write_timed_out_is_kept_until_replayed():
    h = HeldLog()
    answers = []
    h.shard.init_producer_id("app", 10_000, -1, -1, 100, T0, lambda *a: answers.append(a))
    h.answer_last(ErrorCode.REQUEST_TIMED_OUT)
    assert answers == [(ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)]
    again = []
    h.shard.init_producer_id("app", 10_000, -1, -1, 101, T0 + 10, lambda *a: again.append(a))
    assert again == [(ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)]    # not a second producer id
    h.replay_all(T0 + 20)
    assert h.shard.describe("app").producer_id == 100
