"""KIP-890 part 2 (transaction.version 2) in the coordinator's state machine: an epoch
bump with every EndTxn v5, the answer's producer id and epoch, retries, the producer id
rotation when the epoch is exhausted, and the fencing it brings. The log commits at
once and markers are recorded (the harness of test_shard.py)."""

from __future__ import annotations

import struct

from tidelog.core.errors import ErrorCode
from tidelog.txn.records import TxnLogValue, TxnState, decode_value, encode_key, encode_value
from tidelog.txn.shard import MARKER_RETRY_BACKOFF_MS, PRODUCER_EPOCH_MAX, TxnShard

from tests.txn.test_shard import T0, TP0, TP1, Harness

TV2 = 2


def end(h: Harness, epoch: int, commit: bool, producer_id: int = 100, fresh: int = -1, txn_id: str = "app"):
    answers = []
    h.shard.end_transaction_v2(txn_id, producer_id, epoch, commit, fresh, T0, lambda *a: answers.append(a))
    return answers[0]


def add(h: Harness, epoch: int, partitions=frozenset({TP0}), producer_id: int = 100):
    """What a partition leader asks for a Produce v12+ (add, not only verify)."""
    answers = []
    h.shard.add_partitions("app", producer_id, epoch, set(partitions), T0, answers.append, TV2)
    return answers[0]


def last_value(h: Harness) -> TxnLogValue:
    return decode_value(h.records[-1][1])


def test_every_commit_and_abort_bumps_the_epoch_and_answers_it():
    h = Harness()
    assert h.init() == (ErrorCode.NONE, 100, 0)
    assert add(h, 0, {TP0, TP1}) == ErrorCode.NONE
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)
    # The PREPARE record carries the bumped epoch, and so do the markers.
    prepare = decode_value(h.records[-2][1])
    assert (prepare.state, prepare.producer_epoch, prepare.client_transaction_version) == \
        (TxnState.PREPARE_COMMIT, 1, TV2)
    assert h.markers == [(100, 1, True, frozenset({TP0, TP1}), 3)]
    assert (last_value(h).state, last_value(h).producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    # The next transaction runs at the answered epoch; an abort bumps it again.
    assert add(h, 1) == ErrorCode.NONE
    assert end(h, 1, False) == (ErrorCode.NONE, 100, 2)
    assert h.markers[-1] == (100, 2, False, frozenset({TP0}), 3)
    assert h.shard.describe("app").state == TxnState.COMPLETE_ABORT


def test_a_retry_of_a_decided_end_txn_gets_its_outcome_and_other_epochs_are_fenced():
    h = Harness()
    h.init()
    add(h, 0)
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)
    written = len(h.records)
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)                  # the retry: same answer
    assert len(h.records) == written                                    # and nothing written
    assert end(h, 0, False) == (ErrorCode.INVALID_TXN_STATE, -1, -1)    # the other outcome
    assert end(h, 1, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)     # commit with nothing open
    assert end(h, 5, True) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    assert end(h, 0, True, producer_id=7) == (ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1)


def test_a_retry_while_the_markers_are_being_written_is_told_to_wait():
    h = Harness()
    h.init()
    add(h, 0)
    h.marker_ok = False
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)
    assert h.shard.describe("app").state == TxnState.PREPARE_COMMIT
    assert end(h, 0, True) == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    assert end(h, 0, False) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    # The next transaction's first write waits for the markers: its add is parked, and
    # done once the COMPLETE record is written.
    answers = []
    h.shard.add_partitions("app", 100, 1, {TP1}, T0, answers.append, TV2)
    assert answers == [] and h.shard.next_deadline_ms() <= T0 + 5_000
    h.marker_ok = True
    h.shard.on_tick(T0 + MARKER_RETRY_BACKOFF_MS)
    assert answers == [ErrorCode.NONE]
    assert (h.shard.describe("app").state, h.shard.describe("app").partitions) == (TxnState.ONGOING, frozenset({TP1}))


def test_a_parked_add_answers_concurrent_transactions_when_the_markers_take_too_long():
    h = Harness()
    h.init()
    add(h, 0)
    h.marker_ok = False
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)
    answers = []
    h.shard.add_partitions("app", 100, 1, {TP1}, T0, answers.append, TV2)
    h.shard.on_tick(T0 + 4_999)
    assert answers == []
    h.shard.on_tick(T0 + 5_000)
    assert answers == [ErrorCode.CONCURRENT_TRANSACTIONS]
    # A client's own AddPartitionsToTxn (version 0-1 protocol) is answered at once.
    assert h.call("add_partitions", "app", 100, 1, {TP1}, T0) == ErrorCode.CONCURRENT_TRANSACTIONS
    # A coordinator that loses the partition answers what it parked.
    h.shard.add_partitions("app", 100, 1, {TP1}, T0, answers.append, TV2)
    h.shard.unload()
    assert answers[-1] == ErrorCode.NOT_COORDINATOR


def test_an_abort_with_nothing_open_bumps_the_epoch_a_commit_is_refused():
    h = Harness()
    h.init()
    assert end(h, 0, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)     # Empty: nothing to commit
    assert end(h, 0, False) == (ErrorCode.NONE, 100, 1)                 # Empty: abort bumps
    assert h.markers == []                                              # no partition, no marker
    assert h.shard.describe("app").state == TxnState.COMPLETE_ABORT
    assert end(h, 0, False) == (ErrorCode.NONE, 100, 1)                 # its retry
    assert end(h, 1, False) == (ErrorCode.NONE, 100, 2)                 # CompleteAbort: abort bumps


def test_an_exhausted_epoch_rotates_to_a_new_producer_id():
    h = Harness()
    h.shard.replay(encode_key("app"), encode_value(TxnLogValue(
        100, PRODUCER_EPOCH_MAX, 10_000, TxnState.ONGOING, frozenset({TP0}), T0, T0, client_transaction_version=TV2)),
        T0)
    assert h.shard.epoch_exhausted("app")
    assert end(h, PRODUCER_EPOCH_MAX, True) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)   # no id given
    assert end(h, PRODUCER_EPOCH_MAX, True, fresh=200) == (ErrorCode.NONE, 200, 0)
    prepare, complete = decode_value(h.records[-2][1]), last_value(h)
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (100, PRODUCER_EPOCH_MAX + 1, 200)
    # The markers close the transaction the old id wrote, at its last epoch.
    assert h.markers == [(100, PRODUCER_EPOCH_MAX + 1, True, frozenset({TP0}), 3)]
    assert (complete.producer_id, complete.producer_epoch, complete.previous_producer_id,
            complete.next_producer_id) == (200, 0, 100, -1)
    # A retry with the old id and epoch gets the new ones; the new id carries on.
    assert end(h, PRODUCER_EPOCH_MAX, True) == (ErrorCode.NONE, 200, 0)
    assert add(h, 0, producer_id=200) == ErrorCode.NONE
    assert end(h, 0, True, producer_id=200) == (ErrorCode.NONE, 200, 1)


def test_a_new_instance_fences_the_old_one():
    h = Harness()
    h.init()
    add(h, 0)
    assert end(h, 0, True) == (ErrorCode.NONE, 100, 1)
    assert h.init(producer=(-1, -1)) == (ErrorCode.NONE, 100, 2)        # the new instance
    assert add(h, 1) == ErrorCode.PRODUCER_FENCED                       # the zombie's next write
    assert end(h, 1, False) == (ErrorCode.PRODUCER_FENCED, -1, -1)      # and its EndTxn
    assert add(h, 2) == ErrorCode.NONE


def test_a_timed_out_transaction_is_aborted_at_a_bumped_epoch_which_a_tv2_client_learns_by_aborting():
    h = Harness()
    h.init()
    add(h, 0)
    h.wall_ms = T0 + 20_000                           # past the 10 s timeout
    h.shard.on_tick(T0 + 20_000)
    assert h.shard.describe("app").state == TxnState.COMPLETE_ABORT
    assert h.markers == [(100, 1, False, frozenset({TP0}), 3)]
    assert end(h, 0, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert end(h, 0, False) == (ErrorCode.NONE, 100, 1)


def test_clients_on_older_versions_keep_one_epoch_for_many_transactions():
    h = Harness()
    h.init()
    assert h.call("add_partitions", "app", 100, 0, {TP0}, T0) == ErrorCode.NONE
    assert h.call("end_transaction", "app", 100, 0, True, T0) == ErrorCode.NONE
    assert h.markers == [(100, 0, True, frozenset({TP0}), 3)]
    assert last_value(h).client_transaction_version == 0
    assert h.call("add_partitions", "app", 100, 0, {TP0}, T0) == ErrorCode.NONE
    assert h.call("end_transaction", "app", 100, 0, False, T0) == ErrorCode.NONE
    assert h.shard.describe("app").producer_epoch == 0


def test_the_tagged_fields_in_kafkas_version_1_layout_and_version_0_still_read():
    value = TxnLogValue(200, 0, 60_000, TxnState.COMPLETE_COMMIT, frozenset(), T0, T0 - 5,
                        previous_producer_id=100, next_producer_id=-1, client_transaction_version=2)
    data = encode_value(value)
    assert decode_value(data) == value
    assert data[:2] == b"\x00\x01"                                      # version 1 (flexible)
    # Tagged fields at the end, in tag order, defaults left out: tag 0 (8 bytes) and tag 2 (2 bytes).
    assert data[-15:] == b"\x02" + b"\x00\x08" + struct.pack(">q", 100) + b"\x02\x02" + struct.pack(">h", 2)
    empty = encode_value(TxnLogValue(5, 1, 60_000, TxnState.EMPTY, frozenset(), T0, -1))
    assert empty[2 + 8 + 2 + 4 + 1] == 0                                # an Empty transaction's null partitions
    assert empty[-1] == 0                                               # no tagged field at all
    v0 = struct.pack(">hqhib", 0, 5, 1, 60_000, 1) + struct.pack(">i", 1) + struct.pack(">h", 3) + b"out" \
        + struct.pack(">ii", 1, 0) + struct.pack(">qq", T0, T0)
    assert decode_value(v0) == TxnLogValue(5, 1, 60_000, TxnState.ONGOING, frozenset({TP0}), T0, T0)


def test_verification_of_a_partition_outside_the_transaction_is_transaction_abortable():
    """KIP-890's verify_only (a partition leader before appending a transactional batch):
    Kafka's coordinator answers TRANSACTION_ABORTABLE for a partition the open transaction
    lacks; the leader tells older clients INVALID_TXN_STATE (produce_error)."""
    h = Harness()
    h.init()
    assert h.call("add_partitions", "app", 100, 0, {TP0}, T0) == ErrorCode.NONE
    assert h.shard.verify("app", 100, 0, [TP0, TP1]) == {TP0: ErrorCode.NONE, TP1: ErrorCode.TRANSACTION_ABORTABLE}
    assert h.shard.verify("app", 100, 1, [TP1]) == {TP1: ErrorCode.PRODUCER_FENCED}


def test_a_transaction_timed_out_at_the_last_epoch_moves_to_a_fresh_producer_id():
    """Kafka's timeout abort at the last epoch (KAFKA-20090): PREPARE_ABORT and its markers
    at the int16's last value, naming a fresh producer id that the COMPLETE record moves
    the id to. The zombie at the last epoch is fenced; a TV2 client's abort learns the id.
    With no fresh id at hand (the driver's block being refilled) the abort waits for the
    next check."""
    fresh: list[int] = []
    h = Harness()
    h.shard = TxnShard(0, 3, h.shard.config, h.write, h.send_markers, lambda: h.wall_ms,
                       lambda: fresh.pop(0) if fresh else -1)
    h.shard.loaded(T0)
    h.shard.replay(encode_key("app"), encode_value(TxnLogValue(
        100, PRODUCER_EPOCH_MAX, 10_000, TxnState.ONGOING, frozenset({TP0}), T0, T0, client_transaction_version=TV2)),
        T0)
    h.wall_ms = T0 + 20_000                           # past the 10 s timeout
    h.shard.on_tick(T0 + 20_000)
    assert h.shard.describe("app").state == TxnState.ONGOING and h.markers == []
    fresh.append(200)
    h.wall_ms += 1_000                                # the next check (1 s interval)
    h.shard.on_tick(T0 + 21_000)
    prepare, complete = decode_value(h.records[-2][1]), last_value(h)
    assert (prepare.state, prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == \
        (TxnState.PREPARE_ABORT, 100, 0x7FFF, 200)
    assert h.markers == [(100, 0x7FFF, False, frozenset({TP0}), 3)]
    assert (complete.state, complete.producer_id, complete.producer_epoch, complete.previous_producer_id) == \
        (TxnState.COMPLETE_ABORT, 200, 0, 100)
    assert add(h, PRODUCER_EPOCH_MAX) == ErrorCode.INVALID_PRODUCER_ID_MAPPING    # the zombie
    assert end(h, PRODUCER_EPOCH_MAX, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
    assert end(h, PRODUCER_EPOCH_MAX, False) == (ErrorCode.NONE, 200, 0)
    assert add(h, 0, producer_id=200) == ErrorCode.NONE


def test_a_new_instance_at_the_last_epoch_aborts_the_open_transaction_onto_its_fresh_producer_id():
    h = Harness()
    h.shard.replay(encode_key("app"), encode_value(TxnLogValue(
        100, PRODUCER_EPOCH_MAX, 10_000, TxnState.ONGOING, frozenset({TP0}), T0, T0, client_transaction_version=TV2)),
        T0)
    assert h.init(fresh=300) == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)   # aborting the open one first
    assert h.markers == [(100, 0x7FFF, False, frozenset({TP0}), 3)]
    assert (last_value(h).producer_id, last_value(h).producer_epoch) == (300, 0)
    assert h.init(fresh=301) == (ErrorCode.NONE, 300, 1)
