"""ReplicaManager: become leader / follower and the fetchers, delayed
operations on a role change, AlterPartition routing, answers to other fetchers."""

import os

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.fetcher import (
    FetcherConfig,
    FetchState,
    OffsetsForLeaderEpochPartition,
)
from tidelog.replication.partition import Isolation, PartitionState, ReplicationSettings
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.storage.log_manager import LogManager

from .conftest import ALIVE, TP, leader_batch, values

OTHER = TopicPartition("other", 0)


def manager(tmp_path, clock, broker_id=1, min_isr=1, alive=None, config=None) -> ReplicaManager:
    log_manager = LogManager([os.path.join(str(tmp_path), f"broker{broker_id}")], clock)
    alive = dict(ALIVE) if alive is None else alive
    rm = ReplicaManager(broker_id, log_manager, clock, lambda topic: ReplicationSettings(min_isr),
                        alive_broker_epoch=alive.get, fetcher_config=config or FetcherConfig(),
                        is_broker_alive=lambda b: b in alive)
    rm.broker_epoch = ALIVE[broker_id]
    return rm


def state(leader, leader_epoch, isr=(0, 1, 2), replicas=(0, 1, 2), partition_epoch=None):
    return PartitionState(leader, leader_epoch, tuple(isr), tuple(replicas),
                          leader_epoch if partition_epoch is None else partition_epoch)


def test_become_follower_starts_fetcher_at_log_end_when_log_has_epochs(tmp_path, clock):
    rm = manager(tmp_path, clock)
    rm.log_manager.get_or_create_log(TP).append_as_follower(leader_batch(0, 0, "a", "b"))
    rm.apply_partition_states({TP: state(0, 1)})
    fetcher = rm.fetcher_manager.fetcher_of(TP)
    assert (fetcher.source_broker_id, fetcher.replica_id) == (0, 1)
    fetch_state = rm.fetcher_manager.fetch_state(TP)
    assert (fetch_state.fetch_offset, fetch_state.current_leader_epoch, fetch_state.state,
            fetch_state.last_fetched_epoch) == (2, 1, FetchState.FETCHING, 0)
    plan = fetcher.poll(clock.monotonic_ms())
    assert plan.broker_epoch == ALIVE[1]


def test_become_follower_without_epochs_truncates_from_high_watermark(tmp_path, clock):
    rm = manager(tmp_path, clock, config=FetcherConfig(truncate_on_fetch=False))
    log = rm.log_manager.get_or_create_log(TP)
    log.append_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b"))
    log.update_high_watermark(1)
    assert rm.initial_fetch_offset(log) == 1
    rm.apply_partition_states({TP: state(0, 1)})
    fetch_state = rm.fetcher_manager.fetch_state(TP)
    assert (fetch_state.fetch_offset, fetch_state.state) == (1, FetchState.TRUNCATING)


def test_become_leader_removes_partition_from_fetcher_and_shuts_idle_fetcher(tmp_path, clock):
    rm = manager(tmp_path, clock)
    removed = []
    rm.fetcher_manager.on_fetcher_removed = removed.append
    rm.apply_partition_states({TP: state(0, 1)})
    fetcher = rm.fetcher_manager.fetcher_of(TP)
    rm.apply_partition_states({TP: state(1, 2)})
    assert rm.get_partition(TP).is_leader
    assert rm.fetcher_manager.fetch_state(TP) is None and removed == [fetcher]
    assert rm.fetcher_manager.fetchers == {}


def test_same_leader_epoch_keeps_fetch_state(tmp_path, clock):
    rm = manager(tmp_path, clock)
    rm.apply_partition_states({TP: state(0, 1)})
    before = rm.fetcher_manager.fetch_state(TP)
    rm.apply_partition_states({TP: state(0, 1, isr=(0, 1), partition_epoch=2)})   # ISR change only
    assert rm.fetcher_manager.fetch_state(TP) is before


def test_new_leader_moves_partition_to_other_fetcher(tmp_path, clock):
    rm = manager(tmp_path, clock)
    rm.apply_partition_states({TP: state(0, 1), OTHER: state(0, 1)})
    rm.apply_partition_states({TP: state(2, 2)})
    assert rm.fetcher_manager.fetcher_of(TP).source_broker_id == 2
    assert rm.fetcher_manager.fetcher_of(OTHER).source_broker_id == 0


def test_follower_without_live_leader_creates_log_and_waits(tmp_path, clock):
    rm = manager(tmp_path, clock, alive={1: ALIVE[1]})
    rm.apply_partition_states({TP: state(0, 1), OTHER: state(-1, 1)})
    assert rm.get_partition(TP) is not None and rm.log_manager.get_log(TP) is not None
    assert rm.fetcher_manager.fetchers == {}


def test_become_follower_completes_delayed_produce_with_not_leader_or_follower(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    answers = []
    rm.append_records(-1, 30_000, {TP: values("a")}, answers.append)
    assert answers == []                            # waiting for the followers
    rm.apply_partition_states({TP: state(1, 1)})
    assert answers[0][TP]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_become_follower_completes_delayed_fetch(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    answers = []
    params = FetchParams(-1, 500, 1, 1 << 20, Isolation.HIGH_WATERMARK,
                         {TP: FetchPartitionRequest(0, 1 << 20, 0)})
    rm.fetch_messages(params, answers.append)
    assert answers == []
    rm.apply_partition_states({TP: state(1, 1)})
    assert answers[0][TP].error == ErrorCode.FENCED_LEADER_EPOCH   # its epoch 0 is now old


def test_follower_fetch_proposes_isr_expansion_and_answer_is_routed(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0, isr=(0, 1))})
    answers = []
    rm.append_records(1, 30_000, {TP: values("a")}, answers.append)
    params = FetchParams(2, 0, 1, 1 << 20, Isolation.LOG_END, {TP: FetchPartitionRequest(1, 1 << 20, 0, 0, 0)},
                         broker_epoch=ALIVE[2])
    rm.fetch_messages(params, answers.append)
    proposal = rm.pending_isr_proposals[TP]
    assert proposal.new_isr == (0, 1, 2)
    assert rm.drain_isr_proposals() == {TP: proposal} and rm.pending_isr_proposals == {}
    # A retriable answer queues the same proposal again; success commits it.
    assert rm.on_alter_partition_response(TP, ErrorCode.NETWORK_EXCEPTION, proposal=proposal)
    assert rm.pending_isr_proposals[TP] is proposal
    rm.drain_isr_proposals()
    assert not rm.on_alter_partition_response(TP, ErrorCode.NONE, 0, 1, (0, 1, 2), proposal)
    assert rm.get_partition(TP).isr == (0, 1, 2)


def test_metadata_replacing_the_state_drops_queued_proposal(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0, isr=(0, 1))})
    params = FetchParams(2, 0, 1, 1 << 20, Isolation.LOG_END, {TP: FetchPartitionRequest(0, 1 << 20, 0)},
                         broker_epoch=ALIVE[2])
    rm.fetch_messages(params, lambda r: None)
    assert TP in rm.pending_isr_proposals
    rm.apply_partition_states({TP: state(0, 0, isr=(0, 1, 2), partition_epoch=1)})
    assert rm.pending_isr_proposals == {}


def test_diverging_fetch_does_not_update_follower_state(tmp_path, clock):
    """KAFKA-13141: a fetch answered with a diverging epoch records nothing."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    rm.append_records(1, 30_000, {TP: values("a", "b")}, lambda r: None)
    answers = []
    rm.fetch_messages(FetchParams(1, 0, 1, 1 << 20, Isolation.LOG_END, {TP: FetchPartitionRequest(2, 1 << 20, 0, 0)},
                                  broker_epoch=ALIVE[1]), answers.append)
    rm.apply_partition_states({TP: state(0, 2)})
    replica = rm.get_partition(TP).replica_states[1]
    assert replica.log_end_offset == 2
    params = FetchParams(1, 0, 1, 1 << 20, Isolation.LOG_END,
                         {TP: FetchPartitionRequest(3, 1 << 20, 2, 1, 0)}, broker_epoch=ALIVE[1])
    rm.fetch_messages(params, answers.append)
    assert answers[1][TP].diverging_epoch == (0, 2)
    assert replica.log_end_offset == 2


def test_answers_for_other_fetchers(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 3)})
    rm.append_records(1, 30_000, {TP: values("a", "b")}, lambda r: None)
    epochs = rm.last_offset_for_leader_epoch({TP: OffsetsForLeaderEpochPartition(3, 3),
                                              OTHER: OffsetsForLeaderEpochPartition(3, 3)})
    assert (epochs[TP].error, epochs[TP].leader_epoch, epochs[TP].end_offset) == (ErrorCode.NONE, 3, 2)
    assert epochs[OTHER].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    offsets = rm.fetch_leader_offsets({TP: 3})
    assert (offsets[TP].log_start_offset, offsets[TP].log_end_offset) == (0, 2)
    assert rm.fetch_leader_offsets({TP: 2})[TP].error == ErrorCode.FENCED_LEADER_EPOCH


def test_stop_partitions_removes_fetchers(tmp_path, clock):
    rm = manager(tmp_path, clock)
    rm.apply_partition_states({TP: state(0, 1)})
    rm.stop_partitions([TP], delete=True)
    assert rm.fetcher_manager.fetchers == {} and rm.get_partition(TP) is None


def test_follower_fetch_waits_in_purgatory_until_data(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    answers = []
    params = FetchParams(1, 500, 1, 1 << 20, Isolation.LOG_END, {TP: FetchPartitionRequest(0, 1 << 20, 0)},
                         broker_epoch=ALIVE[1])
    rm.fetch_messages(params, answers.append)
    assert answers == []
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)
    assert len(answers) == 1 and answers[0][TP].records.length > 0
    rm.fetch_messages(FetchParams(1, 500, 1, 1 << 20, Isolation.LOG_END,
                                  {TP: FetchPartitionRequest(1, 1 << 20, 0)}, broker_epoch=ALIVE[1]),
                      answers.append)
    clock.advance(500)
    rm.on_tick(clock.monotonic_ms())
    assert len(answers) == 2 and answers[1][TP].records is None     # expired: nothing to send


def _waiting_follower_fetch(rm, replica_id, offset, answers):
    rm.fetch_messages(FetchParams(replica_id, 500, 1, 1 << 20, Isolation.LOG_END,
                                  {TP: FetchPartitionRequest(offset, 1 << 20, 0)}, broker_epoch=ALIVE[replica_id]),
                      answers.append)


def test_a_fetch_that_expires_unwoken_is_answered_with_its_arrival_read(tmp_path, clock):
    """Nothing happened to its partitions while it waited: what it read on arrival is
    the answer (reading every partition again at expiry doubled an idle cluster's
    follower fetch work); its empty slice is not kept."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)
    reads = []
    read = rm._read
    rm._read = lambda params: reads.append(params.replica_id) or read(params)
    answers = []
    _waiting_follower_fetch(rm, 1, 1, answers)
    assert answers == [] and reads == [1]
    clock.advance(500)
    rm.on_tick(clock.monotonic_ms())
    assert reads == [1] and len(answers) == 1
    assert answers[0][TP].error == ErrorCode.NONE and answers[0][TP].records is None
    assert answers[0][TP].log_end_offset == 1


def test_a_fetch_that_moved_the_high_watermark_reads_again_when_it_expires(tmp_path, clock):
    """The last follower to catch up moves the high watermark after its own read: its
    arrival read carries the old one, so at expiry it is read again (else that follower
    learns the new high watermark a whole max wait later; simulator scenario
    long-poll-fetch)."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0, isr=(0, 1), replicas=(0, 1))})
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)
    answers = []
    _waiting_follower_fetch(rm, 1, 1, answers)
    assert answers == [] and rm.get_partition(TP).log.high_watermark == 1
    clock.advance(500)
    rm.on_tick(clock.monotonic_ms())
    assert len(answers) == 1 and answers[0][TP].high_watermark == 1


def test_a_fetch_woken_while_it_waits_reads_again_when_it_expires(tmp_path, clock):
    """Broker 2's fetch moves the high watermark while broker 1's waits: that wakes
    broker 1's (no bytes for it, so it keeps waiting), and its answer at expiry is read
    then, with the new high watermark — not the arrival read's."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)
    waiting = []
    _waiting_follower_fetch(rm, 1, 1, waiting)          # broker 1 has the record: it waits
    assert waiting == [] and rm.get_partition(TP).log.high_watermark == 0
    _waiting_follower_fetch(rm, 2, 1, [])               # broker 2 too: the high watermark moves
    assert rm.get_partition(TP).log.high_watermark == 1 and waiting == []
    clock.advance(500)
    rm.on_tick(clock.monotonic_ms())
    assert len(waiting) == 1 and waiting[0][TP].high_watermark == 1


def test_in_controlled_shutdown_a_follower_that_left_the_isr_stops_fetching_and_is_not_restarted(tmp_path, clock):
    """Kafka's applyLocalFollowersDelta: once the broker is in controlled shutdown, a
    follower partition whose ISR it has left (or that has no leader) loses its fetcher,
    and a later leader epoch does not bring it back."""
    rm = manager(tmp_path, clock)
    removed = []
    rm.fetcher_manager.on_fetcher_removed = removed.append
    rm.apply_partition_states({TP: state(0, 1), OTHER: state(0, 1)})
    fetcher = rm.fetcher_manager.fetcher_of(TP)
    assert fetcher is rm.fetcher_manager.fetcher_of(OTHER)
    rm.begin_controlled_shutdown()
    # The controller removes broker 1 from TP's ISR: same leader epoch, new partition epoch.
    rm.apply_partition_states({TP: state(0, 1, isr=(0, 2), partition_epoch=2)})
    assert rm.fetcher_manager.fetch_state(TP) is None
    assert rm.get_partition(TP) is not None and rm.get_partition(TP).partition_epoch == 2   # still hosted
    assert rm.fetcher_manager.fetch_state(OTHER) is not None and removed == []
    # A new leader epoch while still out of the ISR: not restarted.
    rm.apply_partition_states({TP: state(2, 2, isr=(0, 2))})
    assert rm.fetcher_manager.fetch_state(TP) is None and rm.get_partition(TP).leader == 2
    # No leader at all: stopped too, and the fetcher left empty shuts down.
    rm.apply_partition_states({OTHER: state(-1, 2, isr=(1,))})
    assert rm.fetcher_manager.fetch_state(OTHER) is None
    assert rm.fetcher_manager.fetchers == {} and removed == [fetcher]


def test_in_controlled_shutdown_a_follower_still_in_the_isr_keeps_fetching(tmp_path, clock):
    rm = manager(tmp_path, clock)
    rm.apply_partition_states({TP: state(0, 1)})
    before = rm.fetcher_manager.fetch_state(TP)
    rm.begin_controlled_shutdown()
    rm.apply_partition_states({TP: state(0, 1, isr=(0, 1), partition_epoch=2)})
    assert rm.fetcher_manager.fetch_state(TP) is before
    rm.apply_partition_states({TP: state(2, 2, isr=(1, 2))})
    assert rm.fetcher_manager.fetcher_of(TP).source_broker_id == 2


def test_out_of_controlled_shutdown_a_follower_that_left_the_isr_keeps_fetching(tmp_path, clock):
    """It must fetch to catch up and rejoin the ISR."""
    rm = manager(tmp_path, clock)
    rm.apply_partition_states({TP: state(0, 1)})
    rm.apply_partition_states({TP: state(0, 1, isr=(0, 2), partition_epoch=2)})
    assert rm.fetcher_manager.fetch_state(TP) is not None
    rm.apply_partition_states({TP: state(2, 2, isr=(0, 2))})
    assert rm.fetcher_manager.fetcher_of(TP).source_broker_id == 2


def test_a_delayed_follower_fetch_completes_as_soon_as_a_diverging_epoch_is_found(tmp_path, clock):
    """Kafka's DelayedFetch.tryComplete (case H): a follower's fetch waiting in the
    purgatory is answered at once when the leader's log no longer agrees with the
    follower's last fetched epoch, so that it learns the diverging epoch and truncates
    now rather than after replica.fetch.wait.max.ms."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)
    rm.append_records(1, 30_000, {TP: values("b", "c")}, lambda r: None)
    answers = []
    params = FetchParams(1, 500, 1, 1 << 20, Isolation.LOG_END,
                         {TP: FetchPartitionRequest(3, 1 << 20, 0, 0, 0)}, broker_epoch=ALIVE[1])
    rm.fetch_messages(params, answers.append)
    rm.wake(TP)
    assert answers == []                      # caught up, epoch 0 agrees: it waits
    # While it waits, the leader's log changes under it: epoch 0 now ends at 1, and
    # epoch 1 holds offsets 1 and 2 — the log end (the fetch offset) is where it was.
    log = rm.get_partition(TP).log
    log.truncate_to(1)
    log.assign_leader_epoch(1, 1)
    log.append_as_leader(values("x", "y"), 1)
    assert log.log_end_offset == 3
    rm.wake(TP)
    assert len(answers) == 1, "answered at once, not after the max wait"
    assert answers[0][TP].error == ErrorCode.NONE and answers[0][TP].diverging_epoch == (0, 1)
    assert answers[0][TP].records is None


def _a_fetch_waiting_on_200_partitions(tmp_path, clock, replica_id: int):
    """A manager leading 200 partitions; a fetch of ``replica_id`` waiting on all of them
    (its answers list); and the list of partitions each later try of it looks at."""
    rm = manager(tmp_path, clock, broker_id=0)
    wide = [TopicPartition("wide", i) for i in range(200)]
    rm.apply_partition_states({tp: state(0, 0) for tp in wide})
    looked = []
    bytes_available = rm._bytes_available
    rm._bytes_available = lambda tp, request, params: looked.append(tp) or bytes_available(tp, request, params)
    answers = []
    rm.fetch_messages(FetchParams(replica_id, 500, 1, 1 << 20, Isolation.LOG_END,
                                  {tp: FetchPartitionRequest(0, 1 << 20, 0) for tp in wide},
                                  broker_epoch=ALIVE[replica_id]), answers.append)
    looked.clear()
    return rm, wide, looked, answers


def test_a_metadata_change_tries_a_follower_fetch_waiting_on_many_partitions_once(tmp_path, clock):
    """Each partition of the change used to wake the fetch, and each try walked all its
    partitions: quadratic (36 s of a 10,000-partition broker's become-follower step)."""
    rm, wide, looked, answers = _a_fetch_waiting_on_200_partitions(tmp_path, clock, replica_id=1)
    assert answers == []
    # Same leader epoch, a new partition epoch (ISR shrunk): nothing for the fetch to answer.
    rm.apply_partition_states({tp: state(0, 0, isr=(0, 1), partition_epoch=1) for tp in wide})
    assert answers == [] and len(looked) == len(wide)


def test_a_follower_fetch_moving_many_high_watermarks_tries_another_waiting_fetch_once(tmp_path, clock):
    """A follower back in sync moves the high watermark of every partition its fetch
    names; waking them one at a time tried the other follower's waiting fetch once per
    partition, each try walking all of its partitions (a 74 s stall rejoining at 3k)."""
    rm = manager(tmp_path, clock, broker_id=0)
    wide = [TopicPartition("wide", i) for i in range(200)]
    rm.apply_partition_states({tp: state(0, 0) for tp in wide})
    rm.append_records(1, 30_000, {tp: values("a") for tp in wide}, lambda r: None)

    def fetch(replica_id, offset, answers):
        rm.fetch_messages(FetchParams(replica_id, 500, 1, 1 << 20, Isolation.LOG_END,
                                      {tp: FetchPartitionRequest(offset, 1 << 20, 0) for tp in wide},
                                      broker_epoch=ALIVE[replica_id]), answers.append)

    looked = []
    bytes_available = rm._bytes_available
    rm._bytes_available = lambda tp, request, params: looked.append(params.replica_id) or bytes_available(
        tp, request, params)
    waiting = []
    fetch(2, 1, waiting)              # broker 2 has everything: it waits for more
    assert waiting == [] and all(rm.get_partition(tp).log.high_watermark == 0 for tp in wide)
    looked.clear()
    answered = []
    fetch(1, 1, answered)             # broker 1 catches up: every high watermark moves to 1
    assert all(rm.get_partition(tp).log.high_watermark == 1 for tp in wide)
    assert waiting == [] and looked.count(2) == len(wide)


def test_alter_partition_answers_for_many_partitions_can_wake_a_waiting_fetch_once(tmp_path, clock):
    """BrokerNode.on_alter_partition_reply routes every partition's answer with one
    ``woken`` list and wakes them together: a rejoining follower's ~1,500 ISR expansions
    answered in one reply tried the other follower's waiting fetch once per partition
    (2.3 million looks, an 18.8 s stall at 3k partitions)."""
    rm, wide, looked, waiting = _a_fetch_waiting_on_200_partitions(tmp_path, clock, replica_id=2)
    woken = []
    for tp in wide:
        rm.on_alter_partition_response(tp, ErrorCode.NONE, 0, 1, (0, 1, 2), woken=woken)
    assert looked == [] and woken == wide
    rm.wake_all(woken)
    assert waiting == [] and len(looked) == len(wide)
