"""Replication throttles (KIP-73, broker/replication_quota.py): the quota decisions on an
injected clock, the leader leaving throttled partitions out of a follower's Fetch
(broker/requests/fetch.py, ReplicaManager._read) and the follower leaving them out of its
own (replication/fetcher.py)."""

from types import SimpleNamespace

from tidelog.broker.replication_quota import (
    ALL_REPLICAS,
    RATE_UNBOUNDED,
    ReplicationQuotaManager,
    ReplicationQuotas,
    parse_throttled_replicas,
)
from tidelog.broker.requests.fetch import FetchRequest, FetchRequests
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigResourceType
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.replication.fetcher import FetchPartitionResult

from .conftest import ALIVE, TP, leader_batch, values
from .test_replica_manager import manager, state

OTHER = TopicPartition("orders", 1)


# ------------------------------------------------------------ the quota's decisions

def test_unbounded_rate_is_never_exceeded():
    quota = ReplicationQuotaManager("LeaderReplication")
    quota.record(10 ** 12, 0)
    assert quota.rate_bytes_per_second == RATE_UNBOUNDED and not quota.is_quota_exceeded(0)


def test_rate_over_the_bound_is_exceeded_until_the_samples_age_out():
    quota = ReplicationQuotaManager("LeaderReplication", window_num=11, window_size_ms=1000)
    quota.update_quota(1000)
    quota.record(900, 0)
    assert not quota.is_quota_exceeded(0)                # 900 B over one window (SimpleRate) ≤ 1000 B/s
    quota.record(200, 10)
    assert quota.is_quota_exceeded(10)                   # 1100 B/s
    assert quota.is_quota_exceeded(1000)                 # 1100 B over 1 s
    assert not quota.is_quota_exceeded(2000)             # 1100 B over 2 s
    quota.record(5000, 2000)
    assert quota.is_quota_exceeded(2000)
    assert not quota.is_quota_exceeded(2000 + 11 * 1000)  # every sample expired
    quota.update_quota(0)
    quota.record(1, 20_000)
    assert quota.is_quota_exceeded(20_000)               # rate 0: any byte is too many


def test_throttled_partitions_by_list_or_star():
    assert parse_throttled_replicas("0:1,1:2,2:1", broker_id=1) == frozenset({0, 2})
    assert parse_throttled_replicas("0:2", broker_id=1) == frozenset()
    assert parse_throttled_replicas("*", broker_id=1) == ALL_REPLICAS
    quota = ReplicationQuotaManager("FollowerReplication")
    quota.mark_throttled("orders", frozenset({0}))
    assert quota.is_throttled(TP) and not quota.is_throttled(OTHER)
    quota.mark_throttled("orders", ALL_REPLICAS)
    assert quota.is_throttled(OTHER) and not quota.is_throttled(TopicPartition("other", 0))
    quota.remove_throttle("orders")
    assert not quota.is_throttled(TP)


def _broker(name):
    return ConfigResource(int(ConfigResourceType.BROKER), name)


def _topic(name):
    return ConfigResource(int(ConfigResourceType.TOPIC), name)


def test_quotas_follow_the_image_this_broker_then_the_cluster_default_then_static():
    quotas = ReplicationQuotas(1, {"leader.replication.throttled.rate": 7})
    assert (quotas.leader.rate_bytes_per_second, quotas.follower.rate_bytes_per_second) == (7, RATE_UNBOUNDED)
    quotas.on_configs({_broker(""): {"leader.replication.throttled.rate": "100",
                                     "follower.replication.throttled.rate": "200"},
                       _broker("1"): {"follower.replication.throttled.rate": "300"},
                       _broker("2"): {"leader.replication.throttled.rate": "999"},
                       _topic("orders"): {"leader.replication.throttled.replicas": "0:1,1:2",
                                          "follower.replication.throttled.replicas": "*"},
                       _topic("other"): {"leader.replication.throttled.replicas": ""}})
    assert (quotas.leader.rate_bytes_per_second, quotas.follower.rate_bytes_per_second) == (100, 300)
    assert quotas.leader.throttled_partitions == {"orders": frozenset({0})}
    assert quotas.follower.throttled_partitions == {"orders": ALL_REPLICAS}
    quotas.on_configs({})                                # throttles removed: back to server.properties
    assert (quotas.leader.rate_bytes_per_second, quotas.leader.throttled_partitions) == (7, {})


# ------------------------------------------------------------ the leader side

def _leader(tmp_path, clock, isr=(0, 2)):
    """Broker 0 leading orders-0 (offsets 0..2) for replicas [0, 1, 2]; 1 is out of the ISR."""
    rm = manager(tmp_path, clock, broker_id=0)
    rm.apply_partition_states({TP: state(0, 0, isr=isr)})
    rm.append_records(1, 30_000, {TP: values("a", "b", "c")}, lambda r: None)
    quotas = ReplicationQuotas(0, {})
    quotas.leader.update_quota(1000)
    quotas.leader.mark_throttled("orders", frozenset({0}))
    node = SimpleNamespace(config={"replica.selector.class": None}, replica_manager=rm, replication_quotas=quotas)
    return rm, quotas.leader, FetchRequests(node)


def _follower_fetch(requests, replica_id, offset=0, max_wait_ms=0):
    answers = []
    requests.handle_fetch(FetchRequest(replica_id, max_wait_ms, {TP: FetchPartitionRequest(offset, 1 << 20, 0, -1, 0)},
                                       broker_epoch=ALIVE[replica_id]), answers.append)
    return answers


def test_leader_sends_and_records_while_under_its_rate(tmp_path, clock):
    rm, quota, requests = _leader(tmp_path, clock)
    result = _follower_fetch(requests, 1)[0][TP]
    assert result.error == ErrorCode.NONE and result.records.length > 0
    assert quota.byte_rate(clock.monotonic_ms()) * 1 == result.records.length   # recorded, over one window


def test_leader_leaves_a_throttled_partition_out_for_a_follower_outside_the_isr(tmp_path, clock):
    rm, quota, requests = _leader(tmp_path, clock)
    quota.record(5000, clock.monotonic_ms())                       # over 1000 B/s
    result = _follower_fetch(requests, 1)[0][TP]
    assert (result.error, result.records, result.high_watermark, result.log_end_offset) == (ErrorCode.NONE, None, 0, 3)
    assert quota.throttled_total == 1
    # The follower's fetch offset is still recorded (it is the leader's view of the follower).
    assert rm.get_partition(TP).replica_states[1].log_end_offset == 0
    # An in-sync follower is never held back (Kafka's shouldLeaderThrottle: isReplicaInSync).
    assert _follower_fetch(requests, 2)[0][TP].records.length > 0
    # Nor an unthrottled partition, nor anything once the rate fell below the bound.
    quota.mark_throttled("orders", frozenset({1}))
    assert _follower_fetch(requests, 1)[0][TP].records.length > 0
    quota.mark_throttled("orders", ALL_REPLICAS)
    clock.advance(11_000)
    assert _follower_fetch(requests, 1)[0][TP].records.length > 0


def test_throttled_bytes_do_not_complete_a_waiting_follower_fetch(tmp_path, clock):
    rm, quota, requests = _leader(tmp_path, clock)
    quota.record(5000, clock.monotonic_ms())
    answers = _follower_fetch(requests, 1, max_wait_ms=500)
    assert answers == []                           # waits: the readable bytes are held back
    rm.append_records(1, 30_000, {TP: values("d")}, lambda r: None)
    assert answers == []                           # new bytes of a throttled partition: still waiting
    clock.advance(500)
    rm.on_tick(clock.monotonic_ms())
    assert (answers[0][TP].error, answers[0][TP].records) == (ErrorCode.NONE, None)


# ------------------------------------------------------------ the follower side

def _follower(tmp_path, clock):
    """Broker 1 following broker 0 for orders-0 and orders-1, both at offset 0."""
    rm = manager(tmp_path, clock, broker_id=1)
    quotas = ReplicationQuotas(1, {})
    rm.fetcher_manager.quota = quotas.follower
    rm.apply_partition_states({TP: state(0, 0), OTHER: state(0, 0)})
    quota = quotas.follower
    quota.update_quota(1000)
    quota.mark_throttled("orders", frozenset({0}))
    return rm, quota, rm.fetcher_manager.fetcher_of(TP)


def test_follower_fetches_and_records_throttled_partitions_under_its_rate(tmp_path, clock):
    rm, quota, fetcher = _follower(tmp_path, clock)
    plan = fetcher.poll(clock.monotonic_ms())
    assert set(plan.partitions) == {TP, OTHER}
    data = leader_batch(0, 0, "a", "b")
    fetcher.on_response(plan, {TP: FetchPartitionResult(high_watermark=5, log_start_offset=0, records=data),
                               OTHER: FetchPartitionResult(high_watermark=5, log_start_offset=0, records=data)},
                        clock.monotonic_ms())
    assert quota.byte_rate(clock.monotonic_ms()) == len(data)       # only the throttled partition's bytes


def test_follower_leaves_a_lagging_throttled_partition_out_while_over_its_rate(tmp_path, clock):
    rm, quota, fetcher = _follower(tmp_path, clock)
    quota.record(5000, clock.monotonic_ms())
    plan = fetcher.poll(clock.monotonic_ms())
    assert set(plan.partitions) == {OTHER} and quota.throttled_total == 1
    fetcher.on_response(plan, {OTHER: FetchPartitionResult(high_watermark=5, log_start_offset=0)},   # lag 5
                        clock.monotonic_ms())
    # Only throttled partitions left: no fetch at all, the fetcher wakes up to ask again.
    quota.mark_throttled("orders", ALL_REPLICAS)
    now_ms = clock.monotonic_ms()
    assert fetcher.poll(now_ms) is None
    assert fetcher.next_wakeup_ms(now_ms) == now_ms + fetcher.config.replica_fetch_backoff_ms   # at most
    # It wakes when the rate is back to the bound: 5000 B at 1000 B/s, 5 s after they were recorded.
    clock.advance(4600)
    now_ms = clock.monotonic_ms()
    assert fetcher.poll(now_ms) is None and fetcher.next_wakeup_ms(now_ms) == now_ms + 400
    clock.advance(400)                                              # the rate is back to the bound
    assert set(fetcher.poll(clock.monotonic_ms()).partitions) == {TP, OTHER}


def test_follower_does_not_throttle_a_caught_up_partition(tmp_path, clock):
    rm, quota, fetcher = _follower(tmp_path, clock)
    plan = fetcher.poll(clock.monotonic_ms())
    fetcher.on_response(plan, {tp: FetchPartitionResult(high_watermark=0, log_start_offset=0)
                               for tp in plan.partitions}, clock.monotonic_ms())   # lag 0: in sync
    quota.record(5000, clock.monotonic_ms())
    assert set(fetcher.poll(clock.monotonic_ms()).partitions) == {TP, OTHER}
