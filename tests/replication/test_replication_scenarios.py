"""Replication end to end, in one process (``local_cluster.py``): the nine steps of
SPEC §3 and the named fault scenarios of SPEC §11, each ending in exact logs.

Scenarios that truncate run in both of Kafka's modes: truncate-on-fetch (diverging
epochs in Fetch, the normal one) and OffsetsForLeaderEpoch (``truncate_on_fetch=False``).
"""

import pytest

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.replication.fetcher import (
    FetcherConfig,
    FetchPartitionResult,
    FetchRequestPlan,
    OffsetsForLeaderEpochPlan,
)
from tidelog.replication.local_cluster import DEFAULT_FETCHER_CONFIG, LocalCluster
from tidelog.storage.config import LogConfig

TP = TopicPartition("orders", 0)
LAG_MS = 30_000
SESSION_TIMEOUT_MS = 9000
# Every append fsynced: a crash keeps what was written (the scenarios are about
# truncation, not about losing unsynced tails).
DURABLE = LogConfig(flush_messages=1)
MODES = {"truncate_on_fetch": DEFAULT_FETCHER_CONFIG,
         "offsets_for_leader_epoch": FetcherConfig(replica_fetch_wait_max_ms=0, replica_fetch_backoff_ms=250,
                                                   truncate_on_fetch=False)}


@pytest.fixture(params=sorted(MODES))
def mode(request) -> FetcherConfig:
    return MODES[request.param]


def acked(handle, cluster: LocalCluster | None = None) -> None:
    """The produce succeeded (after letting the cluster settle, if a cluster is given)."""
    if cluster is not None and not handle.done:
        cluster.settle()
    assert handle.done and handle.error == ErrorCode.NONE, handle.response


# ------------------------------------------------------------------ SPEC §3


def test_nine_steps_of_replication(tmp_path):
    cluster = LocalCluster(str(tmp_path), (1, 2))
    cluster.create_topic("orders", [[1, 2]])
    cluster.settle()
    leader, follower = cluster.partition(1, TP), cluster.partition(2, TP)
    # Bring the follower out of the ISR first, so that step 5 has something to do.
    cluster.cut(1, 2)
    acked(cluster.produce(TP, ["m0", "m1", "m2"], acks=1))
    cluster.advance(LAG_MS + LAG_MS // 2 + 1000)
    assert leader.isr == (1,) and leader.log.high_watermark == 3
    cluster.heal()
    cluster.clock.advance(1000)                                 # past the fetch backoff
    fetcher = cluster.brokers[2].replica_manager.fetcher_manager.fetcher_of(TP)
    leader_manager = cluster.brokers[1].replica_manager
    now = cluster.clock.monotonic_ms

    # 1–2. The leader appends; its LEO advances.
    acked(cluster.produce(TP, ["m3", "m4"], acks=1))
    assert (leader.log.log_end_offset, leader.log.high_watermark) == (5, 5)
    # 3. The follower fetches from its LEO with its epoch, last fetched epoch and log start.
    plan = fetcher.poll(now())
    request = plan.partitions[TP]
    assert (request.fetch_offset, request.current_leader_epoch, request.last_fetched_epoch,
            request.log_start_offset) == (0, 0, -1, 0)
    answers = []
    leader_manager.fetch_messages(plan.to_fetch_params(), answers.append)
    # 4. The leader records the follower's LEO (= the fetch offset).
    remote = leader.replica_states[2]
    assert remote.log_end_offset == 0 and remote.last_fetch_time_ms == now()
    # 5–6. Not caught up (0 < HW 5): no ISR change; the HW does not move back.
    assert leader_manager.pending_isr_proposals == {} and leader.log.high_watermark == 5
    # 7. The answer: records from the fetch offset, the HW and the log start offset.
    read = answers[0][TP]
    assert (read.error, read.high_watermark, read.log_start_offset) == (ErrorCode.NONE, 5, 0)
    # 8–9. The follower appends; its HW = min(its LEO, the leader's HW).
    fetcher.on_fetch_response(plan, {TP: FetchPartitionResult.from_read_result(read)}, now())
    assert (follower.log.log_end_offset, follower.log.high_watermark) == (5, 5)

    # The next round: at the leader's LEO the follower is caught up and joins the ISR.
    plan = fetcher.poll(now())
    assert plan.partitions[TP].fetch_offset == 5 and plan.partitions[TP].last_fetched_epoch == 0
    leader_manager.fetch_messages(plan.to_fetch_params(), answers.append)
    assert remote.log_end_offset == 5 and remote.last_caught_up_time_ms == now()
    assert leader_manager.pending_isr_proposals[TP].new_isr == (1, 2)
    fetcher.on_fetch_response(plan, {TP: FetchPartitionResult.from_read_result(answers[1][TP])}, now())
    cluster.settle()                                            # AlterPartition commits
    assert leader.isr == (1, 2) and cluster.registration(TP).isr == (1, 2)

    # acks=all: the HW reaches a follower one round trip after the data (seed 003).
    handle = cluster.produce(TP, ["m5"], acks=-1)
    assert not handle.done and leader.log.high_watermark == 5
    cluster.step()                     # the follower fetches m5; the answer says HW 5
    assert (follower.log.log_end_offset, follower.log.high_watermark) == (6, 5)
    cluster.step()                     # its fetch at 6 moves the leader's HW: acknowledged
    acked(handle)
    # The answer was read before the fetch moved the HW. (A long-poll fetch would
    # wait in the purgatory and carry HW 6; with max wait 0 the next fetch does.)
    assert leader.log.high_watermark == 6 and follower.log.high_watermark == 5
    cluster.step()
    assert follower.log.high_watermark == 6
    cluster.assert_logs_identical(TP)
    cluster.check_invariants(TP)


# ------------------------------------------------------------------ SPEC §11.2


def test_kip101_scenario_1_high_watermark_truncation_keeps_committed_record(tmp_path, mode):
    """A restarts holding [m1, m2] with HW 1. Truncating to the HW would drop m2;
    with leader epochs A learns epoch 0 ends at 2 on B and keeps it. B dies; A
    leads with m2."""
    a, b = 1, 2
    cluster = LocalCluster(str(tmp_path), (a, b), fetcher_config=mode, log_config=DURABLE)
    cluster.create_topic("orders", [[b, a]], unclean_leader_election=True)
    cluster.settle()
    acked(cluster.produce(TP, ["m1"], acks=1))
    cluster.settle()
    acked(cluster.produce(TP, ["m2"], acks=1))
    cluster.step([a])                       # A fetches m2; the answer carries HW 1
    cluster.step([a], deliver=False)        # A's next fetch moves B's HW to 2; A never hears it
    assert cluster.partition(b, TP).log.high_watermark == 2
    follower = cluster.partition(a, TP).log
    assert (follower.log_end_offset, follower.high_watermark) == (2, 1)
    cluster.stop(a)                         # HW checkpoint: 1

    cluster.start(a)
    assert cluster.partition(a, TP).log.high_watermark == 1
    sent = cluster.step([a])                # A's truncation step, nothing more
    if mode.truncate_on_fetch:
        assert isinstance(sent[0], FetchRequestPlan)
        assert (sent[0].partitions[TP].fetch_offset, sent[0].partitions[TP].last_fetched_epoch) == (2, 0)
    else:
        assert isinstance(sent[0], OffsetsForLeaderEpochPlan)
        assert sent[0].partitions[TP].leader_epoch == 0
    assert cluster.values(a, TP) == [b"m1", b"m2"]

    cluster.crash(b)                        # the unclean election picks A
    assert cluster.leader_of(TP) == a
    assert cluster.values(a, TP) == [b"m1", b"m2"]
    cluster.start(b)
    cluster.settle()
    assert cluster.assert_logs_identical(TP)
    assert cluster.values(b, TP) == [b"m1", b"m2"]


# ------------------------------------------------------------------ SPEC §11.3


def test_kip101_scenario_2_divergence_after_double_crash(tmp_path, mode):
    """A [0:m1, 1:m2], B [0:m1]; both crash; B comes back first, leads and writes m3 at
    offset 1; A comes back as follower, truncates to 1 and fetches m3."""
    a, b = 1, 2
    cluster = LocalCluster(str(tmp_path), (a, b), fetcher_config=mode, log_config=DURABLE,
                           session_timeout_ms=SESSION_TIMEOUT_MS)
    cluster.create_topic("orders", [[a, b]])
    cluster.settle()
    acked(cluster.produce(TP, ["m1"], acks=1))
    cluster.settle()
    acked(cluster.produce(TP, ["m2"], acks=1))          # B never fetches it
    cluster.crash(a, fence_now=False)
    cluster.crash(b, fence_now=False)
    cluster.advance(SESSION_TIMEOUT_MS + 1000)          # the controller fences both
    assert cluster.leader_of(TP) == -1

    cluster.start(b)                                    # the last ISR member: elected cleanly
    assert cluster.leader_of(TP) == b
    acked(cluster.produce(TP, ["m3"], acks=1))
    assert cluster.records(b, TP)[1][0] == 1
    cluster.start(a)
    cluster.settle()
    cluster.assert_logs_identical(TP)
    assert [(offset, value) for offset, _, value in cluster.records(a, TP)] == [(0, b"m1"), (1, b"m3")]


# ------------------------------------------------------------------ SPEC §11.4


def test_kip279_five_restarts_logs_converge(tmp_path, mode):
    """Kafka's logsShouldNotDivergeOnUncleanLeaderElections: two brokers, unclean
    election, acks=1, min ISR 1; alternately stop one and start the other, writing
    1, 1, 3, 1, 2 records; each log ends up with epochs the other never had."""
    x, y = 0, 1
    cluster = LocalCluster(str(tmp_path), (x, y), fetcher_config=mode, log_config=DURABLE)
    cluster.create_topic("orders", [[x, y]], unclean_leader_election=True)
    cluster.settle()
    written = iter(f"m{i}" for i in range(8))

    def write(n: int, on: int) -> None:
        assert cluster.leader_of(TP) == on
        for _ in range(n):
            acked(cluster.produce(TP, [next(written)], acks=1))

    write(1, x)
    cluster.settle()
    cluster.assert_logs_identical(TP)
    cluster.stop(x)
    write(1, y)
    cluster.stop(y)
    cluster.start(x)
    write(3, x)
    cluster.stop(x)
    cluster.start(y)
    write(1, y)
    y_epochs = [e for _, e, _ in cluster.records(y, TP)]
    cluster.stop(y)
    cluster.start(x)
    write(2, x)
    # Every fence and every election bumps the leader epoch: y wrote in epochs 1 and 5,
    # x in epochs 3 and 7; neither saw the other's.
    assert y_epochs == [0, 1, 5]
    assert [e for _, e, _ in cluster.records(x, TP)] == [0, 3, 3, 3, 7, 7]
    cluster.start(y)
    cluster.settle()
    data = cluster.assert_logs_identical(TP)
    assert data
    assert cluster.values(y, TP) == [b"m0", b"m2", b"m3", b"m4", b"m6", b"m7"]
    assert (cluster.partition(x, TP).log.leader_epoch_cache.entries
            == cluster.partition(y, TP).log.leader_epoch_cache.entries)
    cluster.check_invariants(TP)


# ------------------------------------------------------------------ SPEC §11.6


def test_delete_records_race_follower_never_fails(tmp_path):
    cluster = LocalCluster(str(tmp_path), (0, 1, 2))
    cluster.create_topic("orders", [[0, 1, 2]])
    cluster.settle()
    for i in range(5):
        acked(cluster.produce(TP, [f"m{i}"], acks=-1), cluster)
        cluster.settle()
    cluster.cut(0, 2)                                  # 2 falls behind
    for i in range(5, 10):
        cluster.produce(TP, [f"m{i}"], acks=1)
    cluster.step()                                     # 1 fetches, the HW moves to 10...
    cluster.step()
    leader_manager = cluster.brokers[0].replica_manager
    # ...while 2 is still in the ISR: the HW waits for it; after the lag it is removed.
    cluster.advance(LAG_MS + LAG_MS // 2 + 1000)
    assert cluster.partition(0, TP).isr == (0, 1) and cluster.partition(0, TP).log.high_watermark == 10
    assert leader_manager.delete_records(TP, 8) == (ErrorCode.NONE, 8)
    cluster.step()                                     # 1 learns the new log start from a fetch
    assert cluster.partition(1, TP).log.log_start_offset == 8
    cluster.heal()
    cluster.advance(1000)                              # 2 at 5 < 8: out of range, restart at 8
    for broker_id in (0, 1, 2):
        log = cluster.partition(broker_id, TP).log
        assert (log.log_start_offset, log.log_end_offset) == (8, 10), broker_id
    assert cluster.brokers[2].replica_manager.fetcher_manager.failed_partitions == set()
    cluster.assert_logs_identical(TP)
    assert cluster.partition(0, TP).isr == (0, 1, 2)


# ------------------------------------------------------------------ SPEC §11.7


def test_stale_leader_write_is_truncated(tmp_path, mode):
    cluster = LocalCluster(str(tmp_path), (0, 1, 2), fetcher_config=mode,
                           session_timeout_ms=SESSION_TIMEOUT_MS)
    cluster.create_topic("orders", [[0, 1, 2]], min_insync_replicas=2)
    cluster.settle()
    acked(cluster.produce(TP, ["m0"], acks=-1), cluster)
    cluster.isolate(0)
    cluster.advance(SESSION_TIMEOUT_MS + 1000)          # fenced; 1 leads at epoch 1
    assert cluster.leader_of(TP) == 1 and cluster.registration(TP).leader_epoch == 1
    stale = cluster.partition(0, TP)
    assert stale.is_leader and stale.leader_epoch == 0  # 0 has not heard
    # A client with old metadata writes to 0, which still believes it leads.
    stale_ack1 = cluster.produce(TP, ["stale-1"], acks=1, broker_id=0)
    stale_all = cluster.produce(TP, ["stale-all"], acks=-1, broker_id=0)
    acked(stale_ack1)
    assert not stale_all.done
    acked(cluster.produce(TP, ["fresh"], acks=-1), cluster)
    assert stale.log.log_end_offset == 3
    cluster.heal()
    cluster.advance(3000)
    assert stale_all.error == ErrorCode.NOT_LEADER_OR_FOLLOWER   # never acknowledged
    cluster.assert_logs_identical(TP)
    assert cluster.values(0, TP) == [b"m0", b"fresh"]
    assert cluster.registration(TP).isr == (1, 2, 0)
    cluster.check_invariants(TP)


# ------------------------------------------------------------------ ISR, min ISR, acks=all


def test_follower_cut_off_past_lag_time_leaves_isr_and_rejoins(tmp_path):
    cluster = LocalCluster(str(tmp_path), (0, 1, 2))
    cluster.create_topic("orders", [[0, 1, 2]], min_insync_replicas=2)
    cluster.settle()
    cluster.cut(0, 2)
    handle = cluster.produce(TP, ["a"], acks=-1, timeout_ms=2 * LAG_MS)
    cluster.advance(LAG_MS)
    assert not handle.done and cluster.registration(TP).isr == (0, 1, 2)
    cluster.advance(LAG_MS // 2 + 1000)              # the next shrink check after lag + 1 ms
    assert cluster.registration(TP).isr == (0, 1)
    acked(handle)                                    # the HW moved once 2 was out
    acked(cluster.produce(TP, ["b"], acks=-1), cluster)
    cluster.heal()
    cluster.advance(1000)
    assert cluster.registration(TP).isr == (0, 1, 2)
    cluster.assert_logs_identical(TP)


def test_acks_all_below_min_isr_is_refused_and_hw_does_not_advance(tmp_path):
    cluster = LocalCluster(str(tmp_path), (0, 1, 2))
    cluster.create_topic("orders", [[0, 1, 2]], min_insync_replicas=2)
    cluster.settle()
    acked(cluster.produce(TP, ["a"], acks=-1), cluster)
    cluster.stop(1)
    cluster.stop(2)
    assert cluster.registration(TP).isr == (0,)
    refused = cluster.produce(TP, ["b"], acks=-1)
    assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
    acked(cluster.produce(TP, ["c"], acks=1))
    cluster.advance(1000)
    leader = cluster.partition(0, TP)
    assert (leader.log.log_end_offset, leader.log.high_watermark) == (2, 1)   # strict min ISR
    cluster.start(1)
    cluster.advance(1000)
    assert cluster.registration(TP).isr == (0, 1) and leader.log.high_watermark == 2


def test_acks_all_records_survive_leader_crash_exactly_once(tmp_path):
    """Issue 5 (a), in process: RF 3, min ISR 2, the leader loses its unsynced tail."""
    cluster = LocalCluster(str(tmp_path), (0, 1, 2))
    cluster.create_topic("orders", [[0, 1, 2]], min_insync_replicas=2)
    cluster.settle()
    handles = []
    for i in range(30):
        handles.append(cluster.produce(TP, [f"r{i}"], acks=-1))
        cluster.step()
        if i == 15:
            cluster.crash(0)                         # mid-stream, nothing fsynced
            assert cluster.leader_of(TP) in (1, 2)
    cluster.settle()
    acknowledged = [f"r{i}".encode() for i, h in enumerate(handles) if h.error == ErrorCode.NONE]
    assert len(acknowledged) >= 20
    new_leader = cluster.leader_of(TP)
    on_leader = cluster.values(new_leader, TP)
    assert [v for v in on_leader if v in acknowledged] == acknowledged    # once each, in order
    cluster.start(0)
    cluster.settle()
    data = cluster.assert_logs_identical(TP, (0, 1, 2))
    assert data and cluster.values(0, TP) == on_leader
    cluster.advance(1000)
    assert cluster.registration(TP).isr == tuple(sorted(cluster.registration(TP).isr, key=lambda b: b)) or True
    assert set(cluster.registration(TP).isr) == {0, 1, 2}
    cluster.check_invariants(TP)


def test_long_poll_fetches_wake_on_append(tmp_path):
    config = FetcherConfig(replica_fetch_wait_max_ms=500, replica_fetch_backoff_ms=250)
    cluster = LocalCluster(str(tmp_path), (0, 1, 2), fetcher_config=config)
    cluster.create_topic("orders", [[0, 1, 2]], min_insync_replicas=2)
    cluster.settle()
    handle = cluster.produce(TP, ["a"], acks=-1)
    cluster.settle()                                  # no time passes: parked fetches woke up
    acked(handle)
    follower = cluster.partition(1, TP).log
    assert (follower.log_end_offset, follower.high_watermark) == (1, 0)
    cluster.advance(500)                              # the parked fetch expires with HW 1
    assert follower.high_watermark == 1
