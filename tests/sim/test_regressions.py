"""Bugs the simulator found in the replication core, each pinned by a unit test
(docs/reliability.md lists them with the seed that found them)."""

import os

import pytest

from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import CONTROL_COMMIT, build_batch, read_control
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.fetcher import FetcherConfig
from tidelog.replication.partition import Isolation, PartitionState, ReplicationSettings
from tidelog.replication.replica_manager import OFFLINE, ReplicaManager
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.log import Log
from tidelog.storage.log_manager import LogManager

TP = TopicPartition("t0", 0)
ALIVE = {1: 101, 2: 102, 3: 103}


def _manager(tmp_path, clock, broker_id=1):
    fs = CrashableFileSystem(str(tmp_path))
    log_dir = os.path.join(str(tmp_path), "logs")
    rm = ReplicaManager(broker_id, LogManager([log_dir], clock, fs), clock, lambda topic: ReplicationSettings(1),
                        alive_broker_epoch=ALIVE.get, fetcher_config=FetcherConfig(),
                        is_broker_alive=lambda b: b in ALIVE)
    rm.broker_epoch = ALIVE[broker_id]
    return rm, fs, log_dir


def _leader_batch(base_offset, epoch, *values):
    return build_batch([v.encode() for v in values], base_offset=base_offset, partition_leader_epoch=epoch,
                       timestamp_ms=0)


def test_a_trailing_epoch_entry_no_record_backs_is_dropped_by_truncation_at_the_log_end(tmp_path):
    """Seed 46: a broker became leader at epoch 3 (entry (3, LEO)), appended nothing, and
    followed the next leader; truncate_to(LEO) kept (3, LEO), the follower fetched
    with last_fetched_epoch 3 forever and the leader answered the same diverging
    epoch forever. Kafka's UnifiedLog.truncateTo truncates the cache regardless."""
    clock = ManualClock(0)
    log = Log.open(os.path.join(str(tmp_path), "t0-0"), LogConfig(), clock)
    log.append_as_follower(_leader_batch(0, 0, "a", "b"))
    log.assign_leader_epoch(3, 2)
    assert log.latest_epoch == 3
    assert log.truncate_to(2) is False        # nothing to cut …
    assert log.latest_epoch == 0              # … but the unbacked epoch is gone
    assert log.leader_epoch_cache.entries == [(0, 0)]


def test_becoming_leader_on_a_failed_log_directory_takes_the_partition_offline(tmp_path):
    """Seed 24: make_leader writes the leader-epoch checkpoint; on a failed directory
    the OSError escaped apply_partition_states (and broke the metadata publish)."""
    clock = ManualClock(0)
    rm, fs, log_dir = _manager(tmp_path, clock)
    rm.apply_partition_states({TP: PartitionState(2, 0, (1, 2), (1, 2), 0)})    # follower first
    fs.fail(log_dir)
    rm.apply_partition_states({TP: PartitionState(1, 1, (1, 2), (1, 2), 1)})    # must not raise
    assert rm.partitions[TP] == OFFLINE
    assert rm.log_manager.offline_dirs == {log_dir}
    assert rm.partition_error(TP) == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_delayed_fetch_on_a_failed_log_directory_completes_instead_of_raising(tmp_path):
    """Seed 41: DelayedFetch.try_complete read the log to count bytes; on a failed
    directory the StorageError escaped the purgatory. Kafka's case D: answer now."""
    clock = ManualClock(0)
    rm, fs, log_dir = _manager(tmp_path, clock)
    rm.apply_partition_states({TP: PartitionState(1, 0, (1,), (1, 2), 0)})
    answers = []
    rm.append_records(1, 1000, {TP: build_batch([b"x"] * 3, timestamp_ms=0)}, answers.append)
    params = FetchParams(replica_id=2, max_wait_ms=500, min_bytes=1 << 20, max_bytes=1 << 20,
                         isolation=Isolation.LOG_END, broker_epoch=ALIVE[2],
                         partitions={TP: FetchPartitionRequest(0, 1 << 20, 0, -1, 0)})
    fetched = []
    rm.fetch_messages(params, fetched.append)
    assert fetched == []                      # parked: fewer bytes than min_bytes
    fs.fail(log_dir)
    rm.wake(TP)                               # must not raise
    assert len(fetched) == 1
    assert fetched[0][TP].error == ErrorCode.KAFKA_STORAGE_ERROR


def test_seed_4906_a_directory_failing_while_a_fetch_reads_answers_storage_error(tmp_path):
    """Seed 4906: broker 2's only directory filled up while a follower's Fetch of t0-1
    and __transaction_state read it. t0-1's records were read as a slice of its
    segment; the fetch then moved the other partition's high watermark, which
    completed a waiting produce whose caller (the transaction coordinator) wrote
    again, failed, and took the directory offline, closing every log in it. The
    fetch answered with the slice of a closed file (ValueError). It now answers
    KAFKA_STORAGE_ERROR for the partitions whose logs closed under it."""
    clock = ManualClock(0)
    rm, fs, log_dir = _manager(tmp_path, clock)
    other = TopicPartition("t0", 1)
    rm.apply_partition_states({tp: PartitionState(1, 0, (1, 2), (1, 2), 0) for tp in (TP, other)})
    rm.append_records(1, 1000, {TP: build_batch([b"x"] * 3, timestamp_ms=0)}, lambda answer: None)

    def write_again(answer):                  # the coordinator's next write, on a full disk
        fs.fail(log_dir)
        rm.append_records(-1, 1000, {other: build_batch([b"z"], timestamp_ms=0)}, lambda answer: None)
    rm.append_records(-1, 1000, {other: build_batch([b"y"], timestamp_ms=0)}, write_again)
    params = FetchParams(replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                         isolation=Isolation.LOG_END, broker_epoch=ALIVE[2],
                         partitions={TP: FetchPartitionRequest(0, 1 << 20, 0, -1, 0),
                                     other: FetchPartitionRequest(1, 1 << 20, 0, -1, 0)})
    fetched = []
    rm.fetch_messages(params, fetched.append)
    assert rm.log_manager.offline_dirs == {log_dir}       # the write failed the directory …
    [results] = fetched
    assert results[TP].error == ErrorCode.KAFKA_STORAGE_ERROR and results[TP].records is None
    for result in results.values():                       # … and nothing answers with a closed file
        if result.records is not None:
            result.records.read_bytes()


def test_completing_a_delayed_operation_may_wake_the_same_key_again():
    """Seed 37: a produce woke a follower's delayed fetch; completing it re-read the
    log, moved the HW, and woke the same key while the purgatory was walking it
    (KeyError; or watchers overwritten)."""
    from tidelog.replication.purgatory import DelayedOperation, Purgatory

    purgatory = Purgatory("test")

    class Operation(DelayedOperation):
        def __init__(self, ready: bool, reenter: bool):
            super().__init__(deadline_ms=10_000)
            self.ready, self.reenter, self.done = ready, reenter, False

        def try_complete(self) -> bool:
            return self.force_complete() if self.ready else False

        def on_complete(self) -> None:
            self.done = True
            if self.reenter:             # what this completion changed lets others complete
                for other in others:
                    other.ready = True
                purgatory.check_and_complete(TP)

    waker, waiter, late = Operation(False, True), Operation(False, False), Operation(False, False)
    others = [waiter]
    for operation in (waker, waiter):
        purgatory.try_complete_else_watch(operation, [TP])
    waker.ready = True
    purgatory.check_and_complete(TP)                       # must not raise (KeyError before)
    assert waker.done and waiter.done
    purgatory.try_complete_else_watch(late, [TP])
    late.ready = True
    assert purgatory.check_and_complete(TP) == 1           # the purgatory is still consistent


def test_seed_2070_a_failed_directory_is_reported_before_it_can_lead_again(run):
    """Seed 2070: broker 2's only directory failed; nothing told the controller, so it
    stayed in t0-0's ISR, was elected when the leader (paused) was fenced, then
    restarted on a replaced, empty disk and led without the record a late answer of
    the paused leader had acknowledged (10.4). Its heartbeat now reports the
    directory at once: it leaves the ISR (and is fenced, having no directory left)
    before it could be elected."""
    from tests.sim.conftest import failure_report

    result = run(2070)
    assert result.passed, failure_report(result)
    assert result.stats.acked_all_lost == 0


def test_seed_5009_the_last_known_leader_is_the_one_the_partition_loses(run):
    """Seed 5009: __consumer_offsets-1 (replicas 1, 2, 3, min ISR 1) lost its leader 2
    (its directory went offline) while broker 3, whose directory was offline too,
    was still in the ISR: leader -1, ISR [3]. The controller recorded the last known
    leader only in the write that emptied the ISR, and by then there was no leader
    to record; broker 3 was fenced (ELR [3]), came back on a replaced disk (out of
    the ELR), and the partition had no ISR, ELR or last known leader: no coordinator
    for group g0, ever (10.5). Kafka 4.4 records the leader as it goes (broker 2),
    and elects it (RECOVERING) once it is back; broker 2 held every committed
    record, so no commit is lost."""
    from tests.sim.conftest import failure_report

    result = run(5009)
    assert result.passed, failure_report(result)
    assert result.stats.acked_all_lost == 0 and result.stats.group_commits_excused == 0
    assert not any(reason.startswith("__consumer_offsets") for reason in result.excused), result.excused


@pytest.mark.parametrize("seed", [1375, 5400, 5434])
def test_seed_1375_a_last_known_leader_waits_for_the_coordinators_commit(run, monkeypatch, seed):
    """Seeds 1375, 5400, 5434 (issue 28, transaction version 1; 1086 too until 47bc351
    changed the order waiting operations complete in, and 5335 until the elections
    without ISR and ELR waited for every last known eligible replica, after which
    neither elects a RECOVERING leader with a transaction open; both seeds still
    pass; 5400 was found by a search for the path): a ``tx`` partition
    was leaderless while its coordinator still had to write a transaction's COMMIT
    marker (the client already told "committed"); KIP-966 elected the last known
    leader (RECOVERING), which held every record but aborted the open transaction on
    its own and fenced its epoch, so the COMMIT was refused and the committed records
    were never read (``txn-committed-visible``). The leader now holds the transaction
    in doubt and the coordinator's COMMIT settles it. The test also checks that each
    seed still takes that path (a RECOVERING leader finds a transaction open and a
    COMMIT marker settles it), so the seed keeps proving something."""
    from tidelog.replication.partition import Partition
    from tests.sim.conftest import failure_report

    settled = []
    original = Partition.append_records_to_leader

    def watching(self, records, required_acks, now_ms=None, from_coordinator=False):
        doubted = dict(self.transactions_in_doubt)
        info = original(self, records, required_acks, now_ms, from_coordinator)
        if from_coordinator and doubted and len(self.transactions_in_doubt) < len(doubted):
            settled.append((str(self.topic_partition), read_control(records, 0)[0]))
        return info
    monkeypatch.setattr(Partition, "append_records_to_leader", watching)
    result = run(seed)
    assert result.passed, failure_report(result)
    assert (CONTROL_COMMIT in {control for _, control in settled}), settled


@pytest.mark.parametrize("seed", [7647])
def test_seed_7647_an_older_transaction_left_open_is_aborted_when_its_producer_writes_at_a_newer_epoch(
        run, seed, monkeypatch):
    """Seeds 7647 and 8130 (unseen, failed before; 8130 no longer takes this path since
    new logs defer their fsyncs, which moved its timing): every eligible replica of a
    ``__transaction_state`` partition lost unflushed records in power cuts (an excused
    loss, counted), and with them the coordinator's ABORT decision (7647) or the
    transaction's end (8130); the transaction stayed open on a ``tx`` partition. A later
    transaction of the same producer, at a newer epoch, wrote there: Kafka's producer
    state lets its records join the open one, and its COMMIT made the aborted records
    visible to read_committed. The partition leader now aborts the older transaction
    first (``Partition._settle_older_transactions``): nothing aborted is read, and the
    checker's excuse for transactions its coordinator forgot is not used."""
    from tests.sim.conftest import failure_report

    from tidelog.replication.partition import Partition

    aborted, abort = [], Partition._abort_open_transaction

    def counted(partition, producer_id, epoch, what):
        settled = abort(partition, producer_id, epoch, what)
        if settled is not None and what == "older":
            aborted.append((str(partition.topic_partition), producer_id, epoch))
        return settled
    monkeypatch.setattr(Partition, "_abort_open_transaction", counted)
    result = run(seed)
    assert result.passed, failure_report(result)
    assert any(reason.startswith("__transaction_state") for reason in result.excused), result.excused
    assert "visible after its coordinator's log lost records" not in result.stats.transactions
    assert aborted, "no leader aborted an older transaction"


def test_seed_33053_an_unclean_election_restarts_the_history_when_it_is_made(run):
    """Seed 33053 (unseen, failed before): ``t0-1`` (RF 2, min ISR 1, unclean elections
    on). Leader 2, cut off from the controller, was fenced with ISR () and ELR (2); the
    controller elected broker 3 uncleanly, as Kafka's ``electAnyLeader`` does when no ISR
    or ELR member can lead. Broker 2 did not know and, alone in its ISR at min ISR 1,
    went on committing (Kafka's zombie leader: what unclean elections give up). The
    checker read the election as a last known leader's and restarted the history only
    when it first saw broker 3 lead, so broker 2's later commits stood in the history
    and broker 3's own records at those offsets failed 10.4. An election outside the
    ISR and ELR of an unclean topic now restarts the history when it is made."""
    from tests.sim.conftest import failure_report

    result = run(33053)
    assert result.passed, failure_report(result)
    assert "t0-1: unclean election of broker 3" in result.excused, result.excused


def test_seed_37920_a_power_cut_that_takes_a_new_logs_directory_counts_its_bytes_lost(run):
    """Seed 37920 (unseen, failed once new logs deferred their directory entries to the
    first flush): broker 2's ``t0-1`` had its segment synced by a roll's background
    flush, but the power cut came before the flush's end listed the directory, which
    vanished with the synced bytes. The simulator counted a power cut's loss as the
    unsynced bytes of the files, none here, so broker 2 was not known to have lost
    anything, and its election as last known leader with an empty log failed 10.4. The
    loss is now measured before and after the crash, per partition. Run without the
    brokers' log-end reports: with them the controller now waits for broker 3, which
    held every committed record, and elects it instead."""
    from tests.sim.conftest import failure_report

    result = run(37920, log_ends=False)
    assert result.passed, failure_report(result)
    assert any(reason.startswith("t0-1: last known leader") and "a power cut" in reason
               for reason in result.excused), result.excused


def test_seed_20116_a_truncation_rewrites_the_recovery_point_checkpoint(run):
    """Long seed 20116 with Kafka 4.4's election (no log-end reports; unseen, failed
    before): broker 2 truncated ``t0-1`` below the recovery point its directory's
    checkpoint held (1,288), fetched again and lost power; at restart the loader
    trusted, unscanned, segments that had lost their tails below the stale value,
    and broker 2 sat in the ISR without offset 533 (10.3). A truncation now writes the
    checkpoint when it lowers a recovery point the file holds
    (``tests/storage/test_log_manager.py`` pins the rule)."""
    from tidelog.sim.config import SimConfig
    from tests.sim.conftest import failure_report

    result = run(20116, config=SimConfig.from_seed(20116, long=True).with_options(replica_log_ends=False))
    assert result.passed, failure_report(result)


@pytest.mark.parametrize("seed, long", [(40123, False), (40234, False), (40236, False), (42098, False),
                                        (43459, False), (7, True)])
def test_no_acknowledged_record_another_replica_held_is_lost_to_an_empty_last_known_leader(run, seed, long):
    """Seeds 40123, 40234, 40236 (unseen): every eligible replica of a clean topic's
    partition restarted uncleanly, and the last known leader came back empty (a replaced
    disk, a power cut before any flush) while a replica outside the ELR still held every
    committed record. The controller elected the empty log — at once because no replica
    had reported for the partition yet (40234), or after a session timeout without
    waiting for the cut-off replica (40236, 40123) — and the acknowledged records were
    lost, excused. Now it waits for the reports of every broker that sends them, and for
    a registered replica that may hold more, up to the recovery wait when every log that
    may lead is empty — also while that replica is starting (42098: the session timeout's
    wait for a starting replica had run out and was asked first). Seed 43459 (unseen): the
    report of a replica outside the ELR holding the longest log was lost with a controller
    failover, and the new controller waited only a session timeout for it. Seed 7
    (``--long``): a controller that had just become active elected the last known
    leader, back on a new disk, before any report could reach it, while a killed broker
    holding 131 records stayed registered (failovers renewed its session). With Kafka
    4.4's election (no reports) the same seeds still lose them, which shows the checker
    sees such losses."""
    from tests.sim.conftest import failure_report

    result = run(seed, long=long)
    assert result.passed, failure_report(result)
    assert result.stats.excused_losses_clean_held == 0, result.excused
    assert not any("another replica complete" in reason for reason in result.excused), result.excused
    kafka = run(seed, long=long, log_ends=False)
    assert kafka.passed, failure_report(kafka)
    assert kafka.stats.excused_losses_clean_held > 0, kafka.excused


def test_seed_48815_a_coordinators_marker_of_a_later_transaction_does_not_commit_an_aborted_one(run):
    """Seed 48815 (unseen, failed before): broker 2, elected uncleanly for ``tx-1``, lacked
    the ABORT marker of the producer's transaction 2 (epoch 1; transaction.version 2).
    The first marker to reach it was the coordinator's COMMIT of transaction 11, written
    at epoch 11: appended as it came, it ended the transaction still open there and
    read_committed read the aborted ``tx-2-1-0``. A coordinator's marker past the open
    transaction's epoch + 1 now aborts that transaction first
    (``Partition._settle_older_transactions``)."""
    from tests.sim.conftest import failure_report

    result = run(48815)
    assert result.passed, failure_report(result)


def test_losses_held_by_a_last_known_eligible_replica_are_counted_apart(run):
    """The excused losses a reset dropped while another replica held them are split by
    who held them: a last known eligible replica, which the election waits for (a loss
    there means the wait ran out: 0 expected), or only a replica outside the ELR, which
    held every committed record by chance and is not waited for, in tidelog as in
    KIP-966. Seed 6813 with Kafka 4.4's election (no log-end reports, no waits) loses
    records the last ELR member held — counted as eligible — and none with tidelog's;
    seed 121 ``--long`` loses 14 held only by a replica outside the ELR whose log
    directory its broker had taken offline (a full disk) — counted as held, not as
    eligible."""
    from tests.sim.conftest import failure_report

    kafka = run(6813, log_ends=False)
    assert kafka.passed, failure_report(kafka)
    assert kafka.stats.excused_losses_clean_held_eligible > 0, kafka.excused
    ours = run(6813)
    assert ours.passed, failure_report(ours)
    assert ours.stats.excused_losses_clean_held_eligible == ours.stats.excused_losses_clean_held == 0
    by_design = run(121, long=True)
    assert by_design.passed, failure_report(by_design)
    assert by_design.stats.excused_losses_clean_held == 14, by_design.excused
    assert by_design.stats.excused_losses_clean_held_eligible == 0, by_design.excused


def test_seed_138_a_replica_that_registers_late_is_waited_for_from_its_registration(run):
    """Seed 138 (``--long``, ``make sim-long``): broker 1, outside the ELR of ``t0-0`` and
    holding every committed record, was refused as a duplicate of its old incarnation
    until that one's session expired; it registered 57 ms before the election's
    session-timeout wait ran out, counted from the wait's start, and a replica missing 18
    records was elected before its first report (8 acknowledged records held by broker 1
    lost, excused). The wait for a replica still starting now counts from its
    registration."""
    from tests.sim.conftest import failure_report

    result = run(138, long=True)
    assert result.passed, failure_report(result)
    assert result.stats.excused_losses_clean_held == 0, result.excused


def test_seed_1921_a_replica_on_a_failed_disk_does_not_report_an_empty_log(run):
    """Seed 1921 (``make sim-long``): broker 1 came back while its only log directory
    was failing, so the directory was offline before any of its logs was listed; its
    heartbeat then reported each replica there as empty, and the controller elected the
    last known leader, back on a new disk, over the 97 records broker 1's replica of
    ``t1-0`` held (counted as held by another replica). A replica without a log now
    says nothing unless the metadata places it in a directory that is online."""
    from tests.sim.conftest import failure_report

    result = run(1921)
    assert result.passed, failure_report(result)
    assert result.stats.excused_losses_clean_held == 0, result.excused
    assert not any("another eligible replica complete" in reason for reason in result.excused), result.excused


def test_seed_41654_a_voter_alone_at_a_newer_epoch_moves_the_leader_to_it(run):
    """Seed 41654 (unseen, failed 10.5 before): controller 1002 reached epoch 4 alone
    behind a partition; afterwards it refused the epoch-3 leader's BeginQuorumEpoch and
    its own pre-votes at 4 moved nobody, so it never followed again. The answer to a
    BeginQuorumEpoch now carries the voter's epoch, and the leader moves to it
    (``tests/raft/test_replica.py`` pins the rule)."""
    from tests.sim.conftest import failure_report

    result = run(41654)
    assert result.passed, failure_report(result)


def test_seed_41907_a_commit_made_as_its_leader_went_offline_is_learned_from_the_answer(run):
    """Seed 41907 (unseen, failed 10.4 before; a checker gap): broker 1's high watermark
    passed offset 5 and its acks=all answer went out in the very tick that found its log
    directory failed and took ``t0-0`` offline, so the checker never read that high
    watermark and called the acknowledged record uncommitted. The checker now takes the
    answer as the commit it claims, when the leader last seen holds the record and has
    gone offline; every later leader must then hold it."""
    from tests.sim.conftest import failure_report

    result = run(41907)
    assert result.passed, failure_report(result)


def test_seed_42622_a_new_logs_first_flush_lists_no_segment_before_the_data_before_it(run):
    """Seed 42622 (unseen; failed 10.3 since new logs deferred their directory entries to
    the first flush): broker 4's ``t0-1``, new after its disk was replaced, rolled twice
    more before its first background flush ran, and that flush's fsync of the log's
    directory listed segments 12 and 26 while segment 12's data was not synced; a power
    cut left 12 empty and 26 listed, and broker 4 rejoined the ISR without offsets
    12..25. ``tests/storage/test_log_manager.py`` pins the rule."""
    from tests.sim.conftest import failure_report

    result = run(42622)
    assert result.passed, failure_report(result)


def test_seed_43860_a_durable_write_lists_no_segment_before_the_data_before_it(run):
    """Seed 43860 (unseen; failed 10.3 once this session's election waits moved its
    timing): broker 4 wrote ``t0-1``'s leader-epoch checkpoint durably while a roll's
    flush was in flight; the write's directory fsync listed segments 541 and 553 with
    541's data unsynced, and a power cut left a hole below the high watermark.
    ``tests/storage/test_log_manager.py`` pins the rule."""
    from tests.sim.conftest import failure_report

    result = run(43860)
    assert result.passed, failure_report(result)


def test_seed_44352_a_segment_that_came_back_short_ends_the_log(run):
    """Seed 44352 (unseen; failed 10.3 before this round too): a power cut tore a write
    of segment 2064 while segment 2054 lost all its unsynced data; recovery cut the torn
    batch and kept 2054 empty, and the log ended at 2064 without 2054..2063 — broker 1
    rejoined the ISR with a hole. In a log that does not compact, a segment ending short
    of the next one's base now ends the log (``tests/storage/test_log_recovery.py``)."""
    from tests.sim.conftest import failure_report

    result = run(44352)
    assert result.passed, failure_report(result)
