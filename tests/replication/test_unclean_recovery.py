"""A leader elected RECOVERING (KIP-704: from outside the ISR, or KIP-966's last
known leader) holds the transactions its log left open *in doubt* until their
coordinator settles them (docs/transactions.md, "Unclean elections"). The simulator
failures this covers:

* seed 20091: the new leader lacked the marker of a transaction the old lineage had
  ended; nobody writes it again, so the last stable offset stayed behind it and a
  read_committed consumer waited for ever (now: the producer's next epoch settles it);
* seed 10570: the new leader lacked an ABORT marker; the producer's next transaction
  (same producer, same epoch) joined the one still open here, and its COMMIT made the
  aborted records visible to read_committed (now: refused at that epoch);
* seeds 1375, 1086, 5335, 5434 (issue 28): the last known leader held every record
  and only lacked the COMMIT marker its coordinator was still sending; the leader
  aborted the transaction on its own and the coordinator's COMMIT was refused — a
  transaction the client was told was committed, lost (now: the COMMIT is written).
"""

from __future__ import annotations

import pytest

from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.records.batch import CONTROL_ABORT, build_batch, build_marker, iter_batches, iter_records, read_control
from tidelog.replication.partition import RECOVERED, RECOVERING, Isolation, PartitionState

from .conftest import T0_MS

PID, EPOCH, COORDINATOR_EPOCH = 7, 3, 5


def txn_batch(base_offset: int, leader_epoch: int, sequence: int, *vals: str, epoch: int = EPOCH) -> bytes:
    """A transactional batch as the old leader wrote it (offsets and epoch set)."""
    return build_batch([v.encode() for v in vals], base_offset=base_offset, partition_leader_epoch=leader_epoch,
                       timestamp_ms=T0_MS, producer_id=PID, producer_epoch=epoch, base_sequence=sequence,
                       is_transactional=True)


def client_txn_batch(sequence: int, *vals: str, epoch: int = EPOCH) -> bytes:
    return build_batch([v.encode() for v in vals], timestamp_ms=T0_MS, producer_id=PID, producer_epoch=epoch,
                       base_sequence=sequence, is_transactional=True)


def marker(commit: bool, epoch: int = EPOCH, base_offset: int = 0, leader_epoch: int = -1) -> bytes:
    data = bytearray(build_marker(PID, epoch, commit, COORDINATOR_EPOCH, T0_MS))
    if leader_epoch >= 0:       # as the old leader wrote it
        from tidelog.records.batch import set_base_offset, set_partition_leader_epoch
        set_base_offset(data, 0, base_offset)
        set_partition_leader_epoch(data, 0, leader_epoch)
    return bytes(data)


def read_committed(partition) -> list[bytes]:
    """What a read_committed consumer gets from offset 0, as Kafka's consumer reads:
    up to the last stable offset, dropping the aborted transactions the answer names."""
    result = partition.read_records(0, 1 << 20, Isolation.TXN_COMMITTED, partition.leader_epoch)
    assert result.error == ErrorCode.NONE
    if result.records is None:
        return []
    data = result.records.read_bytes()
    pending = sorted(result.aborted_transactions, key=lambda t: t.first_offset)
    aborting, seen = set(), []
    for position, header in iter_batches(data):
        while pending and pending[0].first_offset <= header.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if header.is_control:
            if read_control(data, position)[0] == CONTROL_ABORT:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        seen += [r.value for r in iter_records(data, position)]
    return seen


def stale_follower(make, *batches: bytes):
    """Broker 1, a follower of broker 0 at leader epoch 0 that copied ``batches`` and
    then fell out of the ISR (the old leader went on without it)."""
    follower = make.follower(1, leader=0, replicas=(0, 1), leader_epoch=0)
    for data in batches:
        follower.append_records_as_follower(data)
    return follower


def elect(partition, recovery_state: int, now_ms: int, leader_epoch: int = 1):
    partition.make_leader(PartitionState(partition.local_broker_id, leader_epoch, (partition.local_broker_id,),
                                         (0, 1), 1, recovery_state), now_ms)


def test_the_coordinators_commit_settles_an_in_doubt_transaction_as_committed(make, clock):
    """Seeds 1375, 1086, 5335, 5434: the RECOVERING leader holds the transaction's
    records, its COMMIT marker is still on its way from the coordinator (which has told
    the client "committed"). The leader waits instead of aborting, and the COMMIT
    exposes the records."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "tx-9-0-0", "tx-9-0-1"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    assert follower.transactions_in_doubt == {PID: EPOCH}
    assert follower.log.last_stable_offset == 0 and read_committed(follower) == []     # waits, shows nothing
    follower.append_records_to_leader(marker(commit=True), 1, from_coordinator=True)
    assert follower.transactions_in_doubt == {}
    assert read_committed(follower) == [b"tx-9-0-0", b"tx-9-0-1"]


def test_an_in_doubt_transaction_whose_marker_was_lost_is_aborted_by_the_producers_next_epoch(make, clock):
    """Seed 20091: the old lineage ended the transaction; its marker never reached broker
    1 and the coordinator will not send it again. Elected uncleanly, broker 1 holds it in
    doubt (the last stable offset waits) and refuses the producer at that epoch; the
    producer initializes again, and its first batch at the newer epoch proves the
    coordinator is done with the old one: the leader aborts it first, and the last
    stable offset moves on."""
    follower = stale_follower(make, build_batch([b"plain"], base_offset=0, partition_leader_epoch=0,
                                                timestamp_ms=T0_MS),
                              txn_batch(1, 0, 0, "tx-a", "tx-b"))
    assert follower.log.ongoing_transactions() == {PID: 1}
    elect(follower, RECOVERING, clock.monotonic_ms())
    log = follower.log
    assert log.ongoing_transactions() == {PID: 1} and log.last_stable_offset == 1
    with pytest.raises(KafkaError) as refused:
        follower.append_records_to_leader(client_txn_batch(2, "tx-c"), 1)
    assert refused.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    follower.append_records_to_leader(client_txn_batch(0, "tx-d", epoch=EPOCH + 1), 1)
    assert follower.transactions_in_doubt == {}
    assert log.log_end_offset == 5                           # the ABORT marker at 3, the new batch at 4
    assert log.ongoing_transactions() == {PID: 4} and log.last_stable_offset == 4
    assert read_committed(follower) == [b"plain"]
    aborted = follower.read_records(0, 1 << 20, Isolation.TXN_COMMITTED, 1).aborted_transactions
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(PID, 1, 3)]
    # The abort fenced the old epoch and kept the coordinator epoch.
    (entry,) = [p for p in log.active_producers() if p[0] == PID]
    assert entry[1] == EPOCH + 1 and entry[4] == -1


def test_a_later_commit_cannot_expose_records_the_old_lineage_aborted(make, clock):
    """Seed 10570: the old leader's ABORT marker was lost with the unclean election. The
    same producer at the same epoch then tries its next transaction here: refused, so it
    cannot join the aborted one; the producer re-initializes (the coordinator aborts at
    epoch + 1, which settles the doubted transaction as aborted, then hands out + 2)."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "tx-34-1-0"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    with pytest.raises(KafkaError) as refused:
        follower.append_records_to_leader(client_txn_batch(1, "tx-35-1-0"), 1)
    assert refused.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert read_committed(follower) == []
    follower.append_records_to_leader(marker(commit=False, epoch=EPOCH + 1), 1, from_coordinator=True)
    assert follower.transactions_in_doubt == {}
    follower.append_records_to_leader(client_txn_batch(0, "tx-36-1-0", epoch=EPOCH + 2), 1)
    follower.append_records_to_leader(marker(commit=True, epoch=EPOCH + 2), 1, from_coordinator=True)
    assert read_committed(follower) == [b"tx-36-1-0"]


def test_an_older_marker_does_not_settle_the_doubt(make, clock):
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    with pytest.raises(KafkaError) as fenced:
        follower.append_records_to_leader(marker(commit=True, epoch=EPOCH - 1), 1, from_coordinator=True)
    assert fenced.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert follower.transactions_in_doubt == {PID: EPOCH}


def test_without_recovery_the_commit_would_expose_them(make, clock):
    """The failure itself, with a clean election (RECOVERED: no recovery runs): the next
    transaction joins the open one and its COMMIT exposes the aborted record. A leader
    elected from the ISR holds every marker that was committed, so this cannot happen
    there; it shows what the recovery prevents."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "tx-34-1-0"))
    elect(follower, RECOVERED, clock.monotonic_ms())
    follower.append_records_to_leader(client_txn_batch(1, "tx-35-1-0"), 1)
    follower.append_records_to_leader(marker(commit=True), 1, from_coordinator=True)
    assert read_committed(follower) == [b"tx-34-1-0", b"tx-35-1-0"]


def test_a_clean_election_leaves_open_transactions_open(make, clock):
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERED, clock.monotonic_ms())
    assert follower.log.ongoing_transactions() == {PID: 0} and follower.transactions_in_doubt == {}
    follower.append_records_to_leader(client_txn_batch(1, "b"), 1)       # not refused
    assert follower.log.last_stable_offset == 0


def test_a_clean_leader_aborts_an_open_transaction_when_its_producer_writes_at_a_newer_epoch(make, clock):
    """Simulator seeds 7647, 8130: the transaction is open here at EPOCH and its
    coordinator's log lost the decision, so no marker will come; the producer's next
    transaction, at EPOCH + 1, writes here. Kafka's producer state would let it join the
    open one (its COMMIT then exposes the old records); the leader aborts the old one
    first, with a marker at EPOCH + 1, and the new COMMIT exposes only its own. A batch
    at the open transaction's epoch joins it."""
    leader = make.leader(replicas=(0,))
    leader.append_records_to_leader(client_txn_batch(0, "old"), 1)
    leader.append_records_to_leader(client_txn_batch(1, "old-2"), 1)            # same epoch: joins
    assert leader.log.ongoing_transactions() == {PID: 0} and leader.log.log_end_offset == 2
    leader.append_records_to_leader(client_txn_batch(0, "new", epoch=EPOCH + 1), 1)
    assert leader.log.log_end_offset == 4                      # the ABORT marker at 2, the new batch at 3
    assert leader.log.ongoing_transactions() == {PID: 3}
    aborted = leader.read_records(0, 1 << 20, Isolation.TXN_COMMITTED, 0).aborted_transactions
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(PID, 0, 2)]
    leader.append_records_to_leader(marker(commit=True, epoch=EPOCH + 1), 1, from_coordinator=True)
    assert read_committed(leader) == [b"new"]


def test_a_newer_epoch_batch_the_append_refuses_aborts_nothing(make, clock):
    """Simulator seed 7515: a deposed leader, not yet told, took the producer's newer
    epoch at sequence 9 (the epoch had started elsewhere); the append refused it, but
    the older transaction had already been aborted. Only a batch the append will take
    (intact, at sequence 0) aborts it; a damaged one cannot end a transaction either."""
    leader = make.leader(replicas=(0,))
    leader.append_records_to_leader(client_txn_batch(0, "old"), 1)
    with pytest.raises(KafkaError) as refused:
        leader.append_records_to_leader(client_txn_batch(9, "mid-epoch", epoch=EPOCH + 1), 1)
    assert refused.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    damaged = bytearray(client_txn_batch(0, "new", epoch=EPOCH + 1))
    damaged[-1] ^= 0xFF
    with pytest.raises(KafkaError) as corrupt:
        leader.append_records_to_leader(bytes(damaged), 1)
    assert corrupt.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert leader.log.log_end_offset == 1 and leader.log.ongoing_transactions() == {PID: 0}


def test_a_coordinators_marker_at_a_newer_epoch_settles_the_open_transaction_as_it_says(make, clock):
    """Transaction version 2 writes a transaction's COMMIT at its epoch plus one: the
    coordinator's marker is not a newer transaction, and commits the open one."""
    leader = make.leader(replicas=(0,))
    leader.append_records_to_leader(client_txn_batch(0, "a"), 1)
    leader.append_records_to_leader(marker(commit=True, epoch=EPOCH + 1), 1, from_coordinator=True)
    assert leader.log.log_end_offset == 2 and read_committed(leader) == [b"a"]


def test_recovery_runs_once_per_leader_epoch(make, clock):
    """Metadata applied again at the same leader epoch (an ISR change) does not put the
    transactions the recovered leader has taken since in doubt; following drops the doubt."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "old"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    follower.append_records_to_leader(marker(commit=False, epoch=EPOCH + 1), 1, from_coordinator=True)
    follower.append_records_to_leader(client_txn_batch(0, "new", epoch=EPOCH + 2), 1)
    elect(follower, RECOVERING, clock.monotonic_ms())          # same epoch 1
    assert follower.log.ongoing_transactions() == {PID: 2} and follower.transactions_in_doubt == {}
    follower.make_follower(PartitionState(0, 3, (0,), (0, 1), 3, RECOVERING))
    assert follower.transactions_in_doubt == {}


def test_the_old_leader_keeps_the_abort_after_truncating_to_the_new_leaders_log(make, clock):
    """The old leader had the transaction's COMMIT; the unclean leader aborted it (the
    producer came back at a newer epoch before the COMMIT reached it). Back
    as a follower, the old leader truncates to the new leader's log and copies its ABORT
    marker: its producer state and aborted-transaction index follow the new lineage, and
    still do after a restart (rebuilt from the snapshot and the log)."""
    old = make.follower(0, leader=1, replicas=(0, 1), leader_epoch=1)
    old.append_records_as_follower(txn_batch(0, 0, 0, "x"))
    old.append_records_as_follower(marker(commit=True, base_offset=1, leader_epoch=0))
    assert old.log.ongoing_transactions() == {} and old.log.collect_aborted_transactions(0, 10) == []
    old.truncate_to(1)                                    # the new leader's epoch 1 starts at 1
    assert old.log.ongoing_transactions() == {PID: 0}
    old.append_records_as_follower(marker(commit=False, epoch=EPOCH + 1, base_offset=1, leader_epoch=1))
    old.update_follower_high_watermark(2)
    assert old.log.ongoing_transactions() == {}
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in old.log.collect_aborted_transactions(0, 2)] \
        == [(PID, 0, 1)]
    directory, config = old.log.directory, old.log.config
    old.log.close()
    from tidelog.storage.log import Log
    reopened = Log.open(directory, config, clock)
    try:
        assert reopened.ongoing_transactions() == {}
        assert [(t.producer_id, t.first_offset, t.last_offset)
                for t in reopened.collect_aborted_transactions(0, 2)] == [(PID, 0, 1)]
    finally:
        reopened.close()


def test_the_recovered_leader_says_so_with_its_first_isr_change(make, clock):
    """KIP-704: the recovery is done when the leader takes the epoch, so every proposal
    it makes says RECOVERED; the first (a follower caught up) clears RECOVERING in the
    metadata."""
    from .conftest import fetch
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    assert follower.pending_proposal is None and follower.leader_recovery_state == RECOVERING
    fetch(follower, 0, follower.log.log_end_offset, clock)
    proposal = follower.maybe_expand_isr(0)
    assert (proposal.new_isr, proposal.leader_recovery_state) == ((1, 0), RECOVERED)
    # The metadata brings RECOVERED at the same epoch: the doubt stays until the coordinator speaks.
    follower.make_leader(PartitionState(1, 1, (1, 0), (0, 1), 2, RECOVERED), clock.monotonic_ms())
    assert follower.leader_recovery_state == RECOVERED and follower.log.log_end_offset == 1
    assert follower.transactions_in_doubt == {PID: EPOCH}


def test_the_replica_manager_recovers_on_a_recovering_state(tmp_path):
    """The path the broker takes: metadata that makes this broker leader with
    leader_recovery_state RECOVERING; the open transaction is in doubt before any
    request is served."""
    import os

    from tidelog.core.clock import ManualClock
    from tidelog.core.ids import TopicPartition
    from tidelog.replication.fetcher import FetcherConfig
    from tidelog.replication.partition import ReplicationSettings
    from tidelog.replication.replica_manager import ReplicaManager
    from tidelog.testing.crashable import CrashableFileSystem
    from tidelog.storage.log_manager import LogManager

    tp, alive = TopicPartition("tx", 0), {1: 101, 2: 102}
    clock = ManualClock(T0_MS)
    manager = ReplicaManager(1, LogManager([os.path.join(str(tmp_path), "logs")], clock,
                                           CrashableFileSystem(str(tmp_path))),
                             clock, lambda topic: ReplicationSettings(2), alive_broker_epoch=alive.get,
                             fetcher_config=FetcherConfig(), is_broker_alive=lambda b: b in alive)
    manager.broker_epoch = 101
    manager.apply_partition_states({tp: PartitionState(2, 0, (1, 2), (1, 2), 0)})      # a follower
    manager.get_partition(tp).append_records_as_follower(txn_batch(0, 0, 0, "tx-1-0-0"))
    manager.apply_partition_states({tp: PartitionState(1, 1, (1,), (1, 2), 1, RECOVERING)})
    partition = manager.get_partition(tp)
    assert partition.transactions_in_doubt == {PID: EPOCH}
    with pytest.raises(KafkaError) as refused:
        partition.append_records_to_leader(client_txn_batch(1, "tx-2-0-0"), 1)
    assert refused.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_transaction_in_doubt_is_asked_about_at_once_then_after_a_doubling_backoff(make, clock):
    """The question the leader asks its coordinators (``in_doubt_questions_due``): due as
    the leader takes the epoch, one out at a time, asked again after 100, 200, 400 … ms
    (at most 10 s) while the answer leaves it in doubt; a marker settling it, or another
    leader epoch, ends the questions."""
    from tidelog.replication.partition import IN_DOUBT_QUESTION_BACKOFF_MS_MAX
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    now = clock.monotonic_ms()
    assert follower.in_doubt_questions_due(now) == [(PID, EPOCH)]
    assert follower.in_doubt_questions_due(now + 60_000) == []             # one question out at a time
    assert follower.next_in_doubt_question_ms() is None
    waits = []
    for _ in range(9):
        follower.on_in_doubt_answer(PID, EPOCH, 1, False, "no answer", now)
        waits.append(follower.next_in_doubt_question_ms() - now)
        assert follower.in_doubt_questions_due(now + waits[-1] - 1) == []
        assert follower.in_doubt_questions_due(now + waits[-1]) == [(PID, EPOCH)]
    assert waits == [100, 200, 400, 800, 1600, 3200, 6400, IN_DOUBT_QUESTION_BACKOFF_MS_MAX,
                     IN_DOUBT_QUESTION_BACKOFF_MS_MAX]
    follower.on_in_doubt_answer(PID, EPOCH, 0, True, "an answer for an older leader epoch", now)
    assert follower.next_in_doubt_question_ms() is None                     # ignored: still out
    follower.append_records_to_leader(marker(commit=True), 1, from_coordinator=True)
    follower.on_in_doubt_answer(PID, EPOCH, 1, True, "settled", now)
    assert follower.transactions_in_doubt == {} and follower.in_doubt_questions_due(now + 60_000) == []
    assert follower.next_in_doubt_question_ms() is None


def test_a_clean_election_asks_nothing(make, clock):
    follower = stale_follower(make, txn_batch(0, 0, 0, "a"))
    elect(follower, RECOVERED, clock.monotonic_ms())
    assert follower.in_doubt_questions_due(clock.monotonic_ms() + 60_000) == []


@pytest.mark.parametrize("recovery_state", [RECOVERING, RECOVERED])
def test_a_coordinators_marker_of_a_later_transaction_aborts_the_one_left_open_first(make, clock, recovery_state):
    """Seed 48815: broker 1, elected uncleanly, lacks the ABORT marker of the producer's
    transaction at epoch 3 (transaction.version 2: each end bumps the epoch). The
    coordinator went on with the producer's later transactions; the first marker that
    reaches broker 1 is the COMMIT of one at epoch 10, written at epoch 11. A marker ends
    the transaction at its epoch or the one before, so this one is not the open
    transaction's: the leader aborts that one first (in doubt or, elected RECOVERED, only
    open), then appends the COMMIT, which ends nothing here. Appended alone, it
    committed the aborted records."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "tx-2-1-0", "tx-2-1-1"))
    elect(follower, recovery_state, clock.monotonic_ms())
    log = follower.log
    assert log.ongoing_transactions() == {PID: 0}
    follower.append_records_to_leader(marker(commit=True, epoch=EPOCH + 8), 1, from_coordinator=True)
    assert follower.transactions_in_doubt == {} and log.ongoing_transactions() == {}
    assert log.log_end_offset == 4                           # the ABORT marker at 2, the COMMIT at 3
    assert read_committed(follower) == []
    aborted = follower.read_records(0, 1 << 20, Isolation.TXN_COMMITTED, 1).aborted_transactions
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(PID, 0, 2)]


@pytest.mark.parametrize("marker_epoch", [EPOCH, EPOCH + 1])
def test_a_coordinators_marker_at_the_open_transactions_epoch_or_the_next_ends_it(make, clock, marker_epoch):
    """The marker of the open transaction itself — at its epoch (transaction.version 1)
    or the next (version 2, or a fencing abort) — ends it as the coordinator decided:
    a COMMIT there commits, nothing is aborted first."""
    follower = stale_follower(make, txn_batch(0, 0, 0, "tx-a", "tx-b"))
    elect(follower, RECOVERING, clock.monotonic_ms())
    follower.append_records_to_leader(marker(commit=True, epoch=marker_epoch), 1, from_coordinator=True)
    assert follower.transactions_in_doubt == {} and follower.log.log_end_offset == 3
    assert read_committed(follower) == [b"tx-a", b"tx-b"]
