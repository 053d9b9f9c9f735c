"""Delayed produce and delayed fetch (Kafka's ``DelayedProduce`` and ``DelayedFetch``).

Both are purgatory operations; their completion rules are pure functions of
the partitions they watch. ``on_complete`` hands the final per-partition results
to a callback given by the caller (the asyncio shell resolves a future there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.replication.partition import Isolation
from tidelog.replication.purgatory import DelayedOperation


@dataclass
class ProducePartitionStatus:
    required_offset: int          # last appended offset + 1
    response: dict                # the per-partition response, error filled at completion
    acks_pending: bool = True


class DelayedProduce(DelayedOperation):
    def __init__(self, deadline_ms: int, statuses: dict, get_partition: Callable,
                 on_done: Callable[[dict], None]):
        super().__init__(deadline_ms)
        self.statuses = statuses
        self._get_partition = get_partition
        self._on_done = on_done

    def try_complete(self) -> bool:
        for topic_partition, status in self.statuses.items():
            if not status.acks_pending:
                continue
            partition = self._get_partition(topic_partition)
            if partition is None:
                done, error = True, ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                done, error = partition.check_enough_replicas_reached(status.required_offset)
            if done:
                status.acks_pending = False
                status.response["error_code"] = int(error)
        if all(not s.acks_pending for s in self.statuses.values()):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for status in self.statuses.values():
            if status.acks_pending:
                status.acks_pending = False
                status.response["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
        self._on_done({tp: s.response for tp, s in self.statuses.items()})


@dataclass
class FetchPartitionRequest:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None = None
    last_fetched_epoch: int | None = None
    log_start_offset: int = -1


@dataclass
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: Isolation
    partitions: dict = field(default_factory=dict)   # TopicPartition -> FetchPartitionRequest
    broker_epoch: int = -1
    # Kafka's FetchParams.fetchOnlyLeader: False for a consumer's Fetch v11+ (KIP-392: a
    # follower serves it up to its high watermark) and for the debugging replica id.
    fetch_only_leader: bool = True
    # A follower's fetch under a replication throttle (broker/replication_quota.py): whether
    # the leader holds partition ``tp`` back now (Kafka's shouldLeaderThrottle); None: never.
    leader_throttle: Callable | None = None


class DelayedFetch(DelayedOperation):
    """Completes when enough bytes are readable or something changed (Kafka's
    ``DelayedFetch.tryComplete``): ``bytes_available`` returns None for a partition
    that must be answered at once — an error, a role or leader-epoch change, an offset
    out of range, or a diverging epoch (``ReplicaManager._bytes_available``)."""

    def __init__(self, deadline_ms: int, params: FetchParams, bytes_available: Callable,
                 on_done: Callable[[], None]):
        super().__init__(deadline_ms)
        self.params = params
        self._bytes_available = bytes_available
        self._on_done = on_done

    def try_complete(self) -> bool:
        accumulated = 0
        for topic_partition, request in self.params.partitions.items():
            available = self._bytes_available(topic_partition, request, self.params)
            if available is None:  # an error or a change: answer now
                return self.force_complete()
            accumulated += available
        if accumulated >= self.params.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._on_done()
