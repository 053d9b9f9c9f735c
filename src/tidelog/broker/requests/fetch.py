"""Fetch: the read parameters of a client's or a follower's Fetch, decided in one place.

Theory of operation. ``fetch_params`` turns a ``FetchRequest`` into the replica
manager's ``FetchParams`` as Kafka's ``FetchParams`` does: a replica
(``replica_id >= 0``) reads up to the log end, a read_committed consumer
(isolation level 1) up to the last stable offset, any other consumer up to the
high watermark; ``min_bytes``, ``max_bytes`` and ``max_wait_ms`` are the
request's own (``fetch.min.bytes``, ``fetch.max.bytes``, ``fetch.max.wait.ms``).
``handle_fetch`` reads (or parks the fetch in the purgatory until enough bytes
or the wait ends) and answers ``{tp: ReadResult}``; ``partition_response``
says what one partition of a Fetch response holds.

Follower fetching (KIP-392). A consumer's Fetch v11+ carries ``ClientMetadata``
(its ``client.rack``, the listener it came in on). Such a fetch may read from a
follower, up to the follower's high watermark (Kafka's ``fetchOnlyLeader`` is
false); an older one, or a replica's, still needs the leader. On the leader, the
broker's ``replica.selector.class`` (replication/replica_selector.py) picks a
replica per partition (``preferred_read_replica``) among the in-sync followers
whose log holds the fetch offset, and the leader: when it names a follower, that
partition is answered with ``preferred_read_replica`` and no records, and the
whole fetch is answered at once (Kafka's ``ReplicaManager.findPreferredReadReplica``
and ``fetchMessages``).

Replication throttles (KIP-73, broker/replication_quota.py). A follower's fetch reads
throttled partitions (``leader.replication.throttled.replicas`` naming this broker) of
followers outside the ISR without records while ``leader.replication.throttled.rate``
is exceeded (``apply_leader_throttle``); what is sent for throttled partitions is
recorded against that rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.protocol.file_region import FileRegion
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.partition import Isolation, ReadResult
from tidelog.replication.replica_manager import CONSUMER_REPLICA_ID
from tidelog.replication.replica_selector import ReplicaView, replica_selector

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# A consumer's defaults (Kafka's consumer configs), for callers that name none.
FETCH_MIN_BYTES = 1
FETCH_MAX_BYTES = 52_428_800
MAX_PARTITION_FETCH_BYTES = 1_048_576


@dataclass(frozen=True)
class ClientMetadata:
    """What a consumer's Fetch v11+ says of it (Kafka's ``ClientMetadata``): its
    ``client.rack`` ("" when it names none) and the listener the request came in on."""

    rack_id: str
    listener_name: str


@dataclass
class FetchRequest:
    replica_id: int                                       # -1: a consumer
    max_wait_ms: int
    partitions: dict[TopicPartition, FetchPartitionRequest]
    min_bytes: int = FETCH_MIN_BYTES
    max_bytes: int = FETCH_MAX_BYTES
    isolation_level: int = READ_UNCOMMITTED
    broker_epoch: int = -1                                # a replica's (KIP-903), else -1
    client_metadata: ClientMetadata | None = None         # Fetch v11+ (KIP-392), else None

    @classmethod
    def of_plan(cls, plan) -> "FetchRequest":
        """A follower's ``FetchRequestPlan``, as its leader receives it."""
        return cls(plan.replica_id, plan.max_wait_ms, {
            tp: FetchPartitionRequest(p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                      p.last_fetched_epoch, p.log_start_offset)
            for tp, p in plan.partitions.items()}, plan.min_bytes, plan.max_bytes, plan.isolation_level,
            plan.broker_epoch)


def isolation(request: FetchRequest) -> Isolation:
    if request.replica_id >= 0:
        return Isolation.LOG_END
    return Isolation.TXN_COMMITTED if request.isolation_level == READ_COMMITTED else Isolation.HIGH_WATERMARK


def fetch_only_leader(request: FetchRequest) -> bool:
    """Kafka's ``FetchParams.fetchOnlyLeader``: a replica's fetch, and a consumer's before
    v11 (no client metadata); a consumer's v11+ fetch may read from a follower."""
    return request.replica_id >= 0 or (request.replica_id == CONSUMER_REPLICA_ID and request.client_metadata is None)


def fetch_params(request: FetchRequest) -> FetchParams:
    return FetchParams(replica_id=request.replica_id, max_wait_ms=request.max_wait_ms,
                       min_bytes=request.min_bytes, max_bytes=request.max_bytes, isolation=isolation(request),
                       partitions=dict(request.partitions), broker_epoch=request.broker_epoch,
                       fetch_only_leader=fetch_only_leader(request))


def preferred_read_replica(partition, rack_of: dict[int, str | None], local_rack: str | None, selector,
                           client_rack: str, fetch_offset: int, now_ms: int) -> int | None:
    """The replica a consumer should read ``partition`` from, if not this leader (Kafka's
    ``ReplicaManager.findPreferredReadReplica``). Candidates: the followers in the ISR whose
    log holds ``fetch_offset`` (a lagging one would keep the consumer behind) and that are
    alive with an endpoint on the consumer's listener (``rack_of``), and the leader."""
    views = [ReplicaView(replica_id, rack_of[replica_id], state.log_end_offset,
                         now_ms - state.last_caught_up_time_ms)
             for replica_id, state in sorted(partition.replica_states.items())
             if replica_id in partition.isr and replica_id in rack_of
             and state.log_start_offset <= fetch_offset <= state.log_end_offset]
    leader = ReplicaView(partition.local_broker_id, local_rack, partition.log.log_end_offset, 0)
    chosen = selector.select(client_rack, [*views, leader], leader)
    return None if chosen == leader else chosen.broker_id


class FetchRequests:
    def __init__(self, node):
        self.node = node                                  # a BrokerNode: replica manager, image
        self.replica_selector = replica_selector(node.config["replica.selector.class"])

    def handle_fetch(self, request: FetchRequest, respond: Callable[[dict], None]) -> None:
        """``respond({tp: ReadResult})`` once the fetch completes (at once or later)."""
        params = fetch_params(request)
        if request.replica_id >= 0:
            respond = self.apply_leader_throttle(params, respond)
        preferred = self.preferred_read_replicas(request)
        if not preferred:
            self.node.replica_manager.fetch_messages(params, respond)
            return
        # A partition sent elsewhere reads nothing, and the fetch is answered at once.
        params.partitions = {tp: p for tp, p in params.partitions.items() if tp not in preferred}
        params.max_wait_ms = 0
        self.node.replica_manager.fetch_messages(params, lambda results: respond({**results, **preferred}))

    def apply_leader_throttle(self, params: FetchParams, respond: Callable[[dict], None]) -> Callable[[dict], None]:
        """A follower's fetch under the leader replication throttle (broker/replication_quota.py,
        Kafka's ``shouldLeaderThrottle`` and ``KafkaApis`` recording ``sizeOfThrottledPartitions``):
        while the leader quota is exceeded, a throttled partition whose follower is not in the
        ISR is read without records; the bytes answered for throttled partitions are recorded."""
        quotas = getattr(self.node, "replication_quotas", None)      # a test's node may have none
        quota = None if quotas is None else quotas.leader
        if quota is None or not quota.throttled_partitions:
            return respond
        clock, replica_id = self.node.replica_manager.clock, params.replica_id

        def should_leader_throttle(tp: TopicPartition, partition) -> bool:
            return (quota.is_throttled(tp) and replica_id not in partition.isr
                    and quota.is_quota_exceeded(clock.monotonic_ms()))

        def record(results: dict) -> None:
            sent = 0
            for tp, result in results.items():
                if not quota.is_throttled(tp) or result.error != ErrorCode.NONE:
                    continue
                if result.records is not None:
                    sent += result.records.length
                elif params.partitions[tp].fetch_offset < result.log_end_offset:
                    quota.throttled_total += 1          # records were there, and held back
            if sent:
                quota.record(sent, clock.monotonic_ms())
            respond(results)

        params.leader_throttle = should_leader_throttle
        return record

    def preferred_read_replicas(self, request: FetchRequest) -> dict[TopicPartition, ReadResult]:
        """``{tp: ReadResult naming the preferred read replica}`` for the partitions this
        leader sends elsewhere: only for a consumer's Fetch v11+ and a configured selector."""
        metadata = request.client_metadata
        if self.replica_selector is None or metadata is None or request.replica_id != CONSUMER_REPLICA_ID:
            return {}
        replica_manager, image = self.node.replica_manager, self.node.image
        now_ms = replica_manager.clock.monotonic_ms()
        out = {}
        for tp, partition_request in request.partitions.items():
            partition = replica_manager.get_partition(tp)
            if partition is None or not partition.is_leader:
                continue
            rack_of = {broker_id: image.brokers[broker_id].rack
                       for broker_id in image.replica_endpoints(tp, metadata.listener_name)}
            chosen = preferred_read_replica(partition, rack_of, self.node.rack, self.replica_selector,
                                            metadata.rack_id, partition_request.fetch_offset, now_ms)
            if chosen is None:
                continue
            # The leader's offsets, after the epoch check a read would make (a fenced epoch wins).
            error, log_start_offset, high_watermark, log_end_offset = partition.fetch_offset_snapshot(
                partition_request.current_leader_epoch, fetch_only_from_leader=False)
            out[tp] = ReadResult(error) if error != ErrorCode.NONE else ReadResult(
                high_watermark=high_watermark, last_stable_offset=partition.log.last_stable_offset,
                log_start_offset=log_start_offset, log_end_offset=log_end_offset, preferred_read_replica=chosen)
        return out

    def partition_response(self, tp: TopicPartition, result) -> dict:
        """One partition of a Fetch response. A refused partition carries no offsets, as
        Kafka's (-1; an empty list of aborted transactions for a partition that does not
        exist, else null); with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH it names the
        leader a client should go to (KIP-951)."""
        failed = result.error != ErrorCode.NONE
        aborted = None if result.aborted_transactions is None else [
            {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in result.aborted_transactions]
        if failed:
            aborted = [] if result.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
        entry = {
            "partition_index": tp.partition, "error_code": int(result.error),
            "high_watermark": -1 if failed else result.high_watermark,
            "last_stable_offset": -1 if failed else result.last_stable_offset,
            "log_start_offset": -1 if failed else result.log_start_offset,
            "preferred_read_replica": -1 if failed else result.preferred_read_replica,
            "aborted_transactions": aborted,
            # Its own descriptor of the segment (or the bytes of a small slice), taken now:
            # the segment may be closed or deleted before the response is written.
            "records": b"" if result.records is None else FileRegion.pin(result.records),
            "diverging_epoch": {"epoch": -1, "end_offset": -1},
            "current_leader": {"leader_id": -1, "leader_epoch": -1},
            "snapshot_id": {"end_offset": -1, "epoch": -1},
        }
        if result.diverging_epoch is not None:
            entry["diverging_epoch"] = {"epoch": result.diverging_epoch[0], "end_offset": result.diverging_epoch[1]}
        if result.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            registration = self.node.image.partition(tp)
            if registration is not None:
                entry["current_leader"] = {"leader_id": registration.leader,
                                           "leader_epoch": registration.leader_epoch}
        return entry
