"""Follower fetching (KIP-392): the replica selectors, the leader's preferred read
replica answer and its fallbacks, consumer reads on a follower, and the follower
high watermark promptness (replication/replica_selector.py, broker/requests/fetch.py,
replication/replica_manager.py)."""

from types import SimpleNamespace

import pytest

from tidelog.broker.config import BrokerConfig
from tidelog.broker.requests.fetch import ClientMetadata, FetchRequest, FetchRequests, preferred_read_replica
from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.partition import Isolation
from tidelog.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_REPLICA_SELECTOR,
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaView,
)

from .conftest import ALIVE, TP, fetch, leader_batch, record_values, values
from .test_replica_manager import manager, state

LEADER = ReplicaView(0, "a", 10, 0)
RACK_AWARE = RackAwareReplicaSelector()


# ------------------------------------------------------------------ selectors

def test_rack_aware_selector_picks_the_replica_in_the_clients_rack():
    follower = ReplicaView(1, "b", 10, 0)
    assert RACK_AWARE.select("b", [follower, LEADER], LEADER) == follower


@pytest.mark.parametrize("client_rack", ["", None, "z"])
def test_rack_aware_selector_keeps_the_leader_without_a_rack_or_without_a_replica_there(client_rack):
    assert RACK_AWARE.select(client_rack, [ReplicaView(1, "b", 10, 0), LEADER], LEADER) == LEADER


def test_rack_aware_selector_prefers_the_leader_in_the_same_rack():
    assert RACK_AWARE.select("a", [ReplicaView(1, "a", 10, 0), LEADER], LEADER) == LEADER


def test_rack_aware_selector_takes_the_most_caught_up_of_a_rack():
    """Kafka's ReplicaView.comparator: log end offset, then the shorter time since last
    caught up, then the higher broker id."""
    behind, ahead = ReplicaView(1, "b", 8, 0), ReplicaView(2, "b", 9, 500)
    assert RACK_AWARE.select("b", [behind, ahead, LEADER], LEADER) == ahead
    stale, fresh = ReplicaView(1, "b", 9, 900), ReplicaView(2, "b", 9, 100)
    assert RACK_AWARE.select("b", [fresh, stale, LEADER], LEADER) == fresh
    low, high = ReplicaView(1, "b", 9, 100), ReplicaView(2, "b", 9, 100)
    assert RACK_AWARE.select("b", [high, low, LEADER], LEADER) == high


def test_leader_selector_always_keeps_the_leader():
    assert LeaderSelector().select("b", [ReplicaView(1, "b", 10, 0), LEADER], LEADER) == LEADER


def test_replica_selector_class_takes_kafkas_names_and_refuses_others():
    assert BrokerConfig({})["replica.selector.class"] is None
    for name in (LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR):
        assert BrokerConfig({"replica.selector.class": name})["replica.selector.class"] == name
    with pytest.raises(InvalidConfigError, match="replica.selector.class"):
        BrokerConfig({"replica.selector.class": "com.example.NearestSelector"})
    assert BrokerConfig({"broker.rack": "eu-1a"})["broker.rack"] == "eu-1a"


# ------------------------------------------------ candidates on the leader

def _caught_up_leader(make, clock, isr=(0, 1, 2)):
    """A leader of [0, 1, 2] with offsets 0..2, followers 1 and 2 at its log end."""
    leader = make.leader(isr=isr)
    leader.append_records_to_leader(values("a", "b", "c"), 1)
    for replica_id in (1, 2):
        fetch(leader, replica_id, 3, clock)
    return leader


RACKS = {0: "a", 1: "b", 2: "c"}


def test_preferred_read_replica_is_an_in_sync_follower_in_the_clients_rack(make, clock):
    leader = _caught_up_leader(make, clock)
    assert preferred_read_replica(leader, RACKS, "a", RACK_AWARE, "b", 1, clock.monotonic_ms()) == 1
    assert preferred_read_replica(leader, RACKS, "a", RACK_AWARE, "a", 1, clock.monotonic_ms()) is None
    assert preferred_read_replica(leader, RACKS, "a", RACK_AWARE, "", 1, clock.monotonic_ms()) is None


def test_no_preferred_read_replica_out_of_the_isr_dead_or_without_the_offset(make, clock):
    out_of_isr = _caught_up_leader(make, clock, isr=(0, 2))
    assert preferred_read_replica(out_of_isr, RACKS, "a", RACK_AWARE, "b", 1, clock.monotonic_ms()) is None
    leader = _caught_up_leader(make, clock)
    dead = {0: "a", 2: "c"}                    # broker 1 fenced, or no endpoint on the listener
    assert preferred_read_replica(leader, dead, "a", RACK_AWARE, "b", 1, clock.monotonic_ms()) is None
    leader.append_records_to_leader(values("d", "e"), 1)
    # Follower 1's log ends at 3 (Kafka: its log end offset >= the fetch offset).
    assert preferred_read_replica(leader, RACKS, "a", RACK_AWARE, "b", 4, clock.monotonic_ms()) is None
    assert preferred_read_replica(leader, RACKS, "a", RACK_AWARE, "b", 3, clock.monotonic_ms()) == 1


# ----------------------------------------- the request layer on the leader

def _node(rm, rack="a", selector=RACK_AWARE_REPLICA_SELECTOR, racks=RACKS):
    brokers = {b: SimpleNamespace(rack=r) for b, r in racks.items()}
    image = SimpleNamespace(brokers=brokers, replica_endpoints=lambda tp, listener: {b: object() for b in brokers})
    config = {"replica.selector.class": selector}
    return SimpleNamespace(config=config, replica_manager=rm, image=image, rack=rack)


def _consumer_fetch(offset, rack="b", version_11=True, max_wait_ms=500, epoch=0):
    return FetchRequest(-1, max_wait_ms, {TP: FetchPartitionRequest(offset, 1 << 20, epoch)},
                        client_metadata=ClientMetadata(rack, "PLAINTEXT") if version_11 else None)


def _leader_manager(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0)})
    rm.append_records(1, 30_000, {TP: values("a", "b", "c")}, lambda r: None)
    for replica_id in (1, 2):
        rm.fetch_messages(FetchParams(replica_id, 0, 1, 1 << 20, Isolation.LOG_END,
                                      {TP: FetchPartitionRequest(3, 1 << 20, 0, 0)}, broker_epoch=ALIVE[replica_id]),
                          lambda r: None)
    return rm


def test_leader_answers_with_the_preferred_read_replica_and_no_records_at_once(tmp_path, clock):
    rm = _leader_manager(tmp_path, clock)
    requests = FetchRequests(_node(rm))
    answers = []
    requests.handle_fetch(_consumer_fetch(3), answers.append)     # at the end: would wait 500 ms
    result = answers[0][TP]
    assert (result.error, result.preferred_read_replica, result.records) == (ErrorCode.NONE, 1, None)
    assert (result.high_watermark, result.log_end_offset) == (3, 3)
    entry = requests.partition_response(TP, result)
    assert (entry["preferred_read_replica"], entry["records"], entry["high_watermark"]) == (1, b"", 3)


def test_leader_serves_without_a_selector_an_old_version_or_a_fenced_epoch(tmp_path, clock):
    rm = _leader_manager(tmp_path, clock)
    for node, request in ((_node(rm, selector=None), _consumer_fetch(0)),
                          (_node(rm), _consumer_fetch(0, version_11=False)),
                          (_node(rm), _consumer_fetch(0, rack="a"))):
        answers = []
        FetchRequests(node).handle_fetch(request, answers.append)
        assert answers[0][TP].preferred_read_replica == -1 and answers[0][TP].records.length > 0
    answers = []
    rm.apply_partition_states({TP: state(0, 1)})
    FetchRequests(_node(rm)).handle_fetch(_consumer_fetch(0, epoch=0), answers.append)
    assert (answers[0][TP].error, answers[0][TP].preferred_read_replica) == (ErrorCode.FENCED_LEADER_EPOCH, -1)


# ------------------------------------------------- a consumer on a follower

def _follower_manager(tmp_path, clock, high_watermark=2):
    """Broker 1 following broker 0: offsets 0..2 in its log, high watermark 2."""
    rm = manager(tmp_path, clock, broker_id=1)
    rm.apply_partition_states({TP: state(0, 0)})
    partition = rm.get_partition(TP)
    partition.append_records_as_follower(leader_batch(0, 0, "a") + leader_batch(1, 0, "b") + leader_batch(2, 0, "c"))
    partition.update_follower_high_watermark(high_watermark)
    return rm


def _read(rm, request):
    answers = []
    FetchRequests(_node(rm, rack="b")).handle_fetch(request, answers.append)
    return answers


def test_a_follower_serves_a_v11_consumer_up_to_its_high_watermark(tmp_path, clock):
    rm = _follower_manager(tmp_path, clock)
    result = _read(rm, _consumer_fetch(0, max_wait_ms=0))[0][TP]
    assert (result.error, result.high_watermark) == (ErrorCode.NONE, 2)
    assert [offset for offset, _ in record_values(result.records.read_bytes())] == [0, 1]
    # Between its high watermark and its log end: empty, the consumer asks again.
    beyond_high_watermark = _read(rm, _consumer_fetch(2, max_wait_ms=0))[0][TP]
    assert (beyond_high_watermark.error, beyond_high_watermark.records) == (ErrorCode.NONE, None)
    # Beyond its log end: out of range (Kafka's consumer then goes back to the leader).
    assert _read(rm, _consumer_fetch(4, max_wait_ms=0))[0][TP].error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_follower_refuses_an_old_consumer_fetch(tmp_path, clock):
    rm = _follower_manager(tmp_path, clock)
    assert _read(rm, _consumer_fetch(0, version_11=False))[0][TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_consumer_waiting_on_a_follower_is_answered_when_its_high_watermark_moves(tmp_path, clock):
    rm = _follower_manager(tmp_path, clock)
    answers = _read(rm, _consumer_fetch(2))
    assert answers == []                                   # waits, as on a leader
    rm.get_partition(TP).update_follower_high_watermark(3)
    rm._on_follower_high_watermark_moved([TP])
    assert answers[0][TP].records.length > 0 and answers[0][TP].high_watermark == 3


# ------------------------------------------ the follower's high watermark

def test_with_a_selector_a_followers_waiting_fetch_is_answered_when_the_high_watermark_moves(tmp_path, clock):
    rm = manager(tmp_path, clock, broker_id=0)
    rm.prompt_follower_high_watermark = True
    rm.apply_partition_states({TP: state(0, 0, isr=(0, 1), replicas=(0, 1))})
    rm.append_records(1, 30_000, {TP: values("a")}, lambda r: None)

    def follower_fetch(offset):
        answers = []
        rm.fetch_messages(FetchParams(1, 500, 1, 1 << 20, Isolation.LOG_END,
                                      {TP: FetchPartitionRequest(offset, 1 << 20, 0, 0)}, broker_epoch=ALIVE[1]),
                          answers.append)
        return answers
    assert follower_fetch(1)[0][TP].high_watermark == 1   # moved by this fetch: answered at once
    assert follower_fetch(1) == []                         # nothing new: waits
    rm.prompt_follower_high_watermark = False
    rm.append_records(1, 30_000, {TP: values("b")}, lambda r: None)
    assert follower_fetch(2) == []                         # Kafka's rule: waits for records



def test_a_follower_serves_read_committed_up_to_its_last_stable_offset(tmp_path, clock):
    """An open transaction on the follower bounds a read_committed consumer there, as on
    the leader (its producer state is replayed from the leader's batches)."""
    from tidelog.records import build_batch
    rm = manager(tmp_path, clock, broker_id=1)
    rm.apply_partition_states({TP: state(0, 0)})
    partition = rm.get_partition(TP)
    open_transaction = build_batch([b"t"], base_offset=1, partition_leader_epoch=0, producer_id=7,
                                   producer_epoch=0, base_sequence=0, is_transactional=True)
    partition.append_records_as_follower(leader_batch(0, 0, "a") + open_transaction + leader_batch(2, 0, "c"))
    partition.update_follower_high_watermark(3)
    request = _consumer_fetch(0, max_wait_ms=0)
    request.isolation_level = 1
    result = _read(rm, request)[0][TP]
    assert (result.error, result.last_stable_offset) == (ErrorCode.NONE, 1)
    assert [offset for offset, _ in record_values(result.records.read_bytes())] == [0]
