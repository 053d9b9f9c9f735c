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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.partition import Isolation

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# A consumer's defaults (Kafka's consumer configs), for callers that name none.
FETCH_MIN_BYTES = 1
FETCH_MAX_BYTES = 52_428_800
MAX_PARTITION_FETCH_BYTES = 1_048_576


@dataclass
class FetchRequest:
    replica_id: int                                       # -1: a consumer
    max_wait_ms: int
    partitions: dict[TopicPartition, FetchPartitionRequest]
    min_bytes: int = FETCH_MIN_BYTES
    max_bytes: int = FETCH_MAX_BYTES
    isolation_level: int = READ_UNCOMMITTED
    broker_epoch: int = -1                                # a replica's (KIP-903), else -1

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


def fetch_params(request: FetchRequest) -> FetchParams:
    return FetchParams(replica_id=request.replica_id, max_wait_ms=request.max_wait_ms,
                       min_bytes=request.min_bytes, max_bytes=request.max_bytes, isolation=isolation(request),
                       partitions=dict(request.partitions), broker_epoch=request.broker_epoch)


class FetchRequests:
    def __init__(self, node):
        self.node = node                                  # a BrokerNode: replica manager, image

    def handle_fetch(self, request: FetchRequest, respond: Callable[[dict], None]) -> None:
        """``respond({tp: ReadResult})`` once the fetch completes (at once or later)."""
        self.node.replica_manager.fetch_messages(fetch_params(request), respond)

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
            "log_start_offset": -1 if failed else result.log_start_offset, "preferred_read_replica": -1,
            "aborted_transactions": aborted,
            "records": b"" if result.records is None else result.records.read_bytes(),
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
