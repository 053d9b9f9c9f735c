"""The state of one broker and of one partition, as replayed from records.

Theory of operation. ``BrokerRegistration`` and ``PartitionRegistration`` are the
immutable values that both the controller's managers and the ``MetadataImage``
hold. Each knows how to build itself from its creating record and how to *merge*
a change record into a new value; those merge rules are Kafka's replay semantics
(``PartitionRegistration.merge``, ``ClusterControlManager.replay``), written once:

* every ``PartitionChangeRecord`` bumps ``partition_epoch`` by one;
* ``leader_epoch`` is bumped iff the record's ``leader`` is not ``-2`` (no
  change) — even when it names the same leader (a forced epoch bump);
* ``FenceBrokerRecord`` / ``UnfenceBrokerRecord`` / ``BrokerRegistrationChangeRecord``
  apply only to the registration whose ``broker_epoch`` they name.

Invariant (checked where a partition is built or merged): the leader, when there
is one, is a replica and a member of the ISR; the ISR is a non-empty subset of the
replicas without duplicates.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from tidelog.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(record.broker_id, record.incarnation_id, record.broker_epoch, record.endpoints,
                   record.features, record.rack, record.fenced, record.in_controlled_shutdown)

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(self.broker_id, self.incarnation_id, self.broker_epoch,
                                    self.endpoints, self.features, self.rack, self.fenced,
                                    self.in_controlled_shutdown)

    @property
    def is_active(self) -> bool:
        """Unfenced and not in controlled shutdown: may lead and join ISRs."""
        return not self.fenced and not self.in_controlled_shutdown

    def endpoint(self, listener_name: str) -> Endpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == listener_name:
                return endpoint
        return None

    def with_fenced(self, fenced: bool) -> BrokerRegistration:
        return replace(self, fenced=fenced)

    def merge(self, record: BrokerRegistrationChangeRecord) -> BrokerRegistration:
        assert record.broker_epoch == self.broker_epoch, (record, self)
        result = self
        if record.fenced is not None:
            result = replace(result, fenced=record.fenced)
        if record.in_controlled_shutdown is not None:
            result = replace(result, in_controlled_shutdown=record.in_controlled_shutdown)
        return result


@dataclass(frozen=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int = 0

    def __post_init__(self) -> None:
        assert self.replicas and len(set(self.replicas)) == len(self.replicas), self
        assert self.isr and len(set(self.isr)) == len(self.isr), self
        assert set(self.isr) <= set(self.replicas), self
        assert self.leader == NO_LEADER or self.leader in self.isr, self
        assert self.leader_epoch >= 0 and self.partition_epoch >= 0, self

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(record.replicas, record.isr, record.leader, record.leader_epoch,
                   record.partition_epoch, record.leader_recovery_state)

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(topic_id, partition_id, self.replicas, self.isr, self.leader,
                               self.leader_epoch, self.partition_epoch, self.leader_recovery_state)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """The registration after ``record`` (Kafka's ``PartitionRegistration.merge``)."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if record.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = record.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if record.replicas is None else record.replicas,
            isr=self.isr if record.isr is None else record.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            leader_recovery_state=(self.leader_recovery_state if record.leader_recovery_state == -1
                                   else record.leader_recovery_state),
        )

    def describe(self) -> str:
        """``leader=1 leader_epoch=0 partition_epoch=0 isr=[1,2] replicas=[1,2,3]``."""
        text = (f"leader={self.leader} leader_epoch={self.leader_epoch} "
                f"partition_epoch={self.partition_epoch} isr={_ids(self.isr)} "
                f"replicas={_ids(self.replicas)}")
        if self.leader_recovery_state:
            text += " RECOVERING"
        return text


def _ids(ids: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"
