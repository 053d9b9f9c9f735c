"""Helpers for replication tests: real logs in tmp dirs, batches, partitions in a role."""

from __future__ import annotations

import os

import pytest

from tidelog.core.clock import ManualClock
from tidelog.core.ids import TopicPartition
from tidelog.records.batch import build_batch, iter_batches, iter_records
from tidelog.replication.partition import Partition, PartitionState, ReplicationSettings
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

T0_MS = 1_700_000_000_000
TP = TopicPartition("orders", 0)
LAG_MS = 30_000
# Every broker is alive with broker epoch 100 + id, unless a test says otherwise.
ALIVE = {b: 100 + b for b in range(10)}


def values(*vals: str) -> bytes:
    """One client batch (offsets and epoch are assigned by the leader)."""
    return build_batch([v.encode() for v in vals], timestamp_ms=T0_MS)


def leader_batch(base_offset: int, epoch: int, *vals: str) -> bytes:
    """A batch as a leader wrote it: offsets and epoch already set."""
    return build_batch([v.encode() for v in vals], base_offset=base_offset, partition_leader_epoch=epoch,
                       timestamp_ms=T0_MS)


def record_values(data: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for position, _ in iter_batches(data) for r in iter_records(data, position)]


class Factory:
    """Builds logs and partitions under one tmp dir on one clock."""

    def __init__(self, tmp_path, clock: ManualClock):
        self.tmp_path = tmp_path
        self.clock = clock
        self.alive = dict(ALIVE)
        self._count = 0

    def log(self, tp: TopicPartition = TP, config: LogConfig | None = None) -> Log:
        self._count += 1
        directory = os.path.join(str(self.tmp_path), f"broker{self._count}", str(tp))
        os.makedirs(directory)
        return Log.open(directory, config or LogConfig(), self.clock)

    def partition(self, broker_id: int, tp: TopicPartition = TP, min_isr: int = 1,
                  strict_min_isr: bool = True) -> Partition:
        return Partition(tp, broker_id, self.log(tp),
                         ReplicationSettings(min_isr, LAG_MS, strict_min_isr), self.alive.get)

    def leader(self, replicas=(0, 1, 2), isr=None, leader_epoch: int = 0, partition_epoch: int = 0,
               min_isr: int = 1, strict_min_isr: bool = True, tp: TopicPartition = TP) -> Partition:
        partition = self.partition(replicas[0], tp, min_isr, strict_min_isr)
        state = PartitionState(replicas[0], leader_epoch, tuple(isr if isr is not None else replicas),
                               tuple(replicas), partition_epoch)
        assert partition.make_leader(state, self.clock.monotonic_ms())
        return partition

    def follower(self, broker_id: int, leader: int = 0, replicas=(0, 1, 2), leader_epoch: int = 0,
                 partition_epoch: int = 0, tp: TopicPartition = TP) -> Partition:
        partition = self.partition(broker_id, tp)
        partition.make_follower(PartitionState(leader, leader_epoch, tuple(replicas), tuple(replicas),
                                               partition_epoch))
        return partition


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0_MS)


@pytest.fixture
def make(tmp_path, clock) -> Factory:
    return Factory(tmp_path, clock)


def fetch(leader: Partition, replica_id: int, fetch_offset: int, clock: ManualClock, *,
          current_leader_epoch: int | None = None, last_fetched_epoch: int | None = None,
          log_start_offset: int = 0, broker_epoch: int | None = None, max_bytes: int = 1 << 20):
    """A follower fetch as ReplicaManager does it: read, then record the follower's state."""
    from tidelog.replication.partition import Isolation
    leader_log_end_offset = leader.log.log_end_offset
    result = leader.read_records(fetch_offset, max_bytes, Isolation.LOG_END,
                                 leader.leader_epoch if current_leader_epoch is None else current_leader_epoch,
                                 last_fetched_epoch, replica_id=replica_id)
    if result.error == 0 and result.diverging_epoch is None:
        leader.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset, clock.monotonic_ms(),
                                           leader_log_end_offset,
                                           ALIVE[replica_id] if broker_epoch is None else broker_epoch)
    return result
