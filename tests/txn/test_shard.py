"""The transaction coordinator's state machine, with a log that commits at once
(records replayed as a loading coordinator would) and markers recorded."""

from __future__ import annotations

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.txn.records import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value
from tidelog.txn.shard import TxnConfig, TxnShard

T0 = 1_000_000
TP0, TP1 = TopicPartition("out", 0), TopicPartition("out", 1)


class Harness:
    def __init__(self):
        self.records: list[tuple[bytes, bytes | None]] = []
        self.markers: list[tuple] = []
        self.marker_ok = True
        self.wall_ms = T0                   # the wall clock; the tests' ``now`` is the timer clock
        self.shard = self.new_shard()
        self.shard.loaded(T0)

    def new_shard(self) -> TxnShard:
        return TxnShard(0, 3, TxnConfig(max_timeout_ms=60_000, abort_timed_out_interval_ms=1_000),
                        self.write, self.send_markers, lambda: self.wall_ms)

    def write(self, records, on_done, producer=None):
        for key, value in records:
            self.records.append((key, value))
            self.shard.replay(key, value, T0)
        on_done(ErrorCode.NONE)

    def send_markers(self, producer_id, epoch, commit, partitions, coordinator_epoch, on_done):
        self.markers.append((producer_id, epoch, commit, frozenset(partitions), coordinator_epoch))
        on_done(self.marker_ok)

    def init(self, txn_id="app", timeout_ms=10_000, fresh=100, now=T0, producer=(-1, -1)):
        answers = []
        self.shard.init_producer_id(txn_id, timeout_ms, producer[0], producer[1], fresh, now,
                                    lambda *a: answers.append(a))
        return answers[0]

    def call(self, method, *args):
        answers = []
        getattr(self.shard, method)(*args, answers.append)
        return answers[0]


def test_records_round_trip_in_kafkas_format():
    value = TxnLogValue(5, 2, 60_000, TxnState.ONGOING, frozenset({TP0, TP1}), T0, T0 - 5)
    assert decode_value(encode_value(value)) == value
    assert decode_key(encode_key("app")) == "app"
    assert encode_key("app") == b"\x00\x00\x00\x03app"


def test_a_commit_prepares_then_writes_markers_then_completes():
    h = Harness()
    assert h.init() == (ErrorCode.NONE, 100, 0)
    assert h.call("add_partitions", "app", 100, 0, {TP0, TP1}, T0) == ErrorCode.NONE
    assert h.shard.transactions["app"].state == TxnState.ONGOING
    assert h.call("end_transaction", "app", 100, 0, True, T0) == ErrorCode.NONE
    assert h.markers == [(100, 0, True, frozenset({TP0, TP1}), 3)]
    states = [decode_value(v).state for _, v in h.records]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert h.call("end_transaction", "app", 100, 0, True, T0) == ErrorCode.NONE          # a retry
    assert h.call("end_transaction", "app", 100, 0, False, T0) == ErrorCode.INVALID_TXN_STATE


def test_a_new_instance_bumps_the_epoch_and_fences_the_old_one():
    h = Harness()
    h.init()
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    # The second instance finds an open transaction: it is aborted with the epoch bumped.
    assert h.init(fresh=101)[0] == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.markers == [(100, 1, False, frozenset({TP0}), 3)]
    assert h.init(fresh=102) == (ErrorCode.NONE, 100, 2)
    assert h.call("add_partitions", "app", 100, 0, {TP1}, T0) == ErrorCode.PRODUCER_FENCED
    assert h.call("end_transaction", "app", 100, 1, True, T0) == ErrorCode.PRODUCER_FENCED
    assert h.call("add_partitions", "app", 999, 2, {TP1}, T0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_an_expired_transaction_is_aborted_on_a_tick():
    h = Harness()
    h.init(timeout_ms=5_000)
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    h.wall_ms = T0 + 4_000
    h.shard.on_tick(T0 + 4_000)
    assert h.markers == []
    h.wall_ms = T0 + 6_000
    h.shard.on_tick(T0 + 6_000)
    assert h.markers == [(100, 1, False, frozenset({TP0}), 3)]
    assert h.shard.transactions["app"].state == TxnState.COMPLETE_ABORT


def test_a_timeout_is_judged_by_the_wall_time_in_the_record_on_any_coordinator():
    """Two clocks, as Kafka's: ``now`` (the timer clock, monotonic: each broker's own,
    unrelated to the others') only says when to check; the records carry wall time
    and the timeout compares wall time with it — so a coordinator that loads the
    partition after a failover aborts the transaction when the client's timeout
    passed, not a full timeout after it took over."""
    h = Harness()
    h.init(timeout_ms=5_000, now=20)
    h.call("add_partitions", "app", 100, 0, {TP0}, 30)
    stored = decode_value(h.records[-1][1])
    assert (stored.start_ms, stored.last_update_ms) == (T0, T0)   # wall time, not the timer clock
    loader = h.new_shard()                            # another broker: its timer clock starts near 0
    for key, value in h.records:
        loader.replay(key, value, 7)
    h.shard = loader
    h.wall_ms = T0 + 3_000
    loader.loaded(7)
    assert h.markers == [] and loader.transactions["app"].state == TxnState.ONGOING
    h.wall_ms = T0 + 5_500                            # 5.5 s after the start, 1.5 s after the failover
    loader.on_tick(1_010)
    assert h.markers == [(100, 1, False, frozenset({TP0}), 3)]
    assert loader.transactions["app"].state == TxnState.COMPLETE_ABORT


def test_a_wall_clock_step_neither_postpones_nor_hastens_the_timers():
    """Marker retries and the periodic timeout check run on the timer clock: a wall
    clock an hour behind does not hold a failed marker's retry, one an hour ahead
    does not make it due early (the check then aborts by wall time, as Kafka's)."""
    h = Harness()
    h.init()
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    h.marker_ok = False
    h.wall_ms = T0 + 3_600_000                        # an hour ahead when the markers fail
    assert h.call("end_transaction", "app", 100, 0, True, T0 + 10) == ErrorCode.NONE
    assert len(h.markers) == 1 and h.shard.next_deadline_ms() <= T0 + 1_000
    h.shard.on_tick(T0 + 100)                         # not due yet, whatever the wall clock says
    assert len(h.markers) == 1
    h.wall_ms = T0 + 300                              # ... and back
    h.marker_ok = True
    h.shard.on_tick(T0 + 10 + 200)
    assert len(h.markers) == 2 and h.shard.transactions["app"].state == TxnState.COMPLETE_COMMIT


def test_failed_markers_are_retried_and_a_loading_coordinator_finishes_prepared_transactions():
    h = Harness()
    h.init()
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    h.marker_ok = False
    assert h.call("end_transaction", "app", 100, 0, True, T0) == ErrorCode.NONE   # decided
    assert h.shard.transactions["app"].state == TxnState.PREPARE_COMMIT
    # Another coordinator loads the partition's records: it completes the commit.
    h.marker_ok = True
    loader = h.new_shard()
    for key, value in h.records:
        loader.replay(key, value, T0)
    h.shard = loader
    loader.loaded(T0 + 10)
    assert h.markers[-1] == (100, 0, True, frozenset({TP0}), 3)
    assert loader.transactions["app"].state == TxnState.COMPLETE_COMMIT


def test_bad_timeouts_and_concurrent_operations_are_refused():
    h = Harness()
    assert h.init(timeout_ms=61_000)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=0)[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    h.init()
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    h.marker_ok = False
    h.call("end_transaction", "app", 100, 0, False, T0)
    assert h.call("add_partitions", "app", 100, 0, {TP1}, T0) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.call("end_transaction", "app", 100, 0, False, T0) == ErrorCode.CONCURRENT_TRANSACTIONS


def test_a_silent_transactional_id_expires_but_not_one_with_an_open_transaction():
    h = Harness()
    h.shard.config.id_expiration_ms = 10_000
    h.init("idle", fresh=100)
    h.init("busy", fresh=200)
    h.call("add_partitions", "busy", 200, 0, {TP0}, T0)
    h.shard.config.max_timeout_ms = 10 ** 9
    h.shard.transactions["busy"].timeout_ms = 10 ** 8          # it stays open past the expiration
    h.wall_ms = T0 + 20_000
    h.shard.on_tick(T0 + 20_000)
    assert "idle" not in h.shard.transactions and h.records[-1] == (b"\x00\x00\x00\x04idle", None)
    assert h.shard.transactions["busy"].state == TxnState.ONGOING
    assert h.init("idle", fresh=300) == (ErrorCode.NONE, 300, 0)   # a new producer id, as for a new id


def test_a_marker_a_live_partition_refuses_as_unknown_is_retried():
    """A broker still loading its metadata answers UNKNOWN_TOPIC_OR_PARTITION for a live
    partition: the transaction must not complete without that marker (found by the
    simulator, seed 1033: an abort 'completed' with no marker, and the next commit
    made the aborted records visible). Only a topic gone from the metadata is done."""
    from tidelog.txn.coordinator import TransactionCoordinator
    answers = []

    coordinator = TransactionCoordinator.__new__(TransactionCoordinator)
    coordinator._leader_of = lambda tp: 1
    coordinator._partition_exists = lambda tp: tp != TP1           # TP1's topic was deleted
    coordinator.write_markers = lambda broker, pid, epoch, commit, cepoch, tps, done: done(
        {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in tps})
    coordinator._send_markers(100, 0, False, frozenset({TP0}), 3, answers.append)
    coordinator._send_markers(100, 0, False, frozenset({TP1}), 3, answers.append)
    assert answers == [False, True]


def test_the_complete_record_carries_the_time_the_markers_were_done():
    """As Kafka's prepareComplete: transactional.id.expiration.ms counts from then."""
    h = Harness()
    answers = []
    h.send_markers = lambda pid, epoch, commit, partitions, coordinator_epoch, on_done: answers.append(on_done)
    h.shard = h.new_shard()
    h.shard.loaded(T0)
    h.init()
    h.call("add_partitions", "app", 100, 0, {TP0}, T0)
    assert h.call("end_transaction", "app", 100, 0, True, T0) == ErrorCode.NONE
    h.wall_ms = T0 + 5_000                      # the markers take five seconds
    answers[0](True)
    complete = decode_value(h.records[-1][1])
    assert complete.state == TxnState.COMPLETE_COMMIT and complete.last_update_ms == T0 + 5_000
