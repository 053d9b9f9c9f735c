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

Log directories (KIP-858). A broker registers the ids of its log directories
(``directory.id`` in each directory's ``meta.properties``); a
``BrokerRegistrationChangeRecord`` carrying ``log_dirs`` replaces them with the ones
still online after the broker reported failures. A partition names the directory
of each replica (``directories``, in replica order; empty = every replica
unassigned). A replica is on an online directory (``BrokerRegistration.has_online_dir``,
Kafka's ``DirectoryId.isOnline``) when its directory is unassigned or migrating,
when the broker registered no directories at all, or when the directory is among
the broker's online ones; a directory that is ``LOST`` or that the broker no longer
lists is offline, and the replica may then neither lead nor be elected.

Eligible leader replicas (KIP-966): ``elr`` are replicas out of the ISR that still
hold every committed record (they left it while it was below min ISR, when the
high watermark could not move), ``last_known_elr`` those that once did
(controller/partition_change.py has the rules).

Reassignment (KIP-455): while one runs, ``replicas`` is the target followed by
the replicas being removed; ``adding_replicas`` (target − original) and
``removing_replicas`` (original − target) say which are which
(controller/reassignment.py has the rules).

Invariant (checked where a partition is built or merged): the leader, when there
is one, is a replica and a member of the ISR; the ISR is a subset of the replicas
without duplicates, empty only with ELR on (and then nobody leads); the ELR is a
subset of the replicas disjoint from the ISR; the adding and removing replicas
are disjoint subsets of the replicas.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Iterable

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


# Kafka's reserved directory ids (``DirectoryId``): never a real directory's.
UNASSIGNED_DIR = uuid.UUID(int=0)   # not known yet: the broker will say (AssignReplicasToDirs)
LOST_DIR = uuid.UUID(int=1)         # the directory is gone
MIGRATING_DIR = uuid.UUID(int=2)    # written by a broker that predates directory ids


def is_reserved_dir(directory: uuid.UUID) -> bool:
    """Ids 0-99 are Kafka's reserved ones; a directory never gets one."""
    return directory.int < 100


def is_dir_online(directory: uuid.UUID, online_dirs: tuple[uuid.UUID, ...]) -> bool:
    """Kafka's ``DirectoryId.isOnline``: see the module docstring."""
    if directory in (UNASSIGNED_DIR, MIGRATING_DIR):
        return True
    if directory == LOST_DIR:
        return False
    return not online_dirs or directory in online_dirs


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
    log_dirs: tuple[uuid.UUID, ...] = ()     # the online log directories, sorted

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(record.broker_id, record.incarnation_id, record.broker_epoch, record.endpoints,
                   record.features, record.rack, record.fenced, record.in_controlled_shutdown,
                   tuple(sorted(record.log_dirs)))

    def to_record(self) -> RegisterBrokerRecord:
        return RegisterBrokerRecord(self.broker_id, self.incarnation_id, self.broker_epoch,
                                    self.endpoints, self.features, self.rack, self.fenced,
                                    self.in_controlled_shutdown, self.log_dirs)

    def has_online_dir(self, directory: uuid.UUID) -> bool:
        return is_dir_online(directory, self.log_dirs)

    def directory_intersection(self, directories: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
        """Those of our online directories that are in ``directories``."""
        others = set(directories)
        return tuple(d for d in self.log_dirs if d in others)

    def directory_difference(self, directories: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
        """Our online directories that are not in ``directories``."""
        others = set(directories)
        return tuple(d for d in self.log_dirs if d not in others)

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
        if record.log_dirs is not None:
            result = replace(result, log_dirs=tuple(sorted(record.log_dirs)))
        return result


@dataclass(frozen=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()   # per replica, in replica order; () = all unassigned
    elr: tuple[int, ...] = ()                 # KIP-966 eligible leader replicas (not in the ISR)
    last_known_elr: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()     # KIP-455: an ongoing reassignment's new replicas
    removing_replicas: tuple[int, ...] = ()   # and the ones it will drop (both in ``replicas``)

    def __post_init__(self) -> None:
        assert self.replicas and len(set(self.replicas)) == len(self.replicas), self
        assert len(set(self.isr)) == len(self.isr), self
        assert set(self.isr) <= set(self.replicas), self
        assert self.leader == NO_LEADER or self.leader in self.isr, self
        assert set(self.elr) <= set(self.replicas) and not set(self.elr) & set(self.isr), self
        assert self.leader_epoch >= 0 and self.partition_epoch >= 0, self
        assert not self.directories or len(self.directories) == len(self.replicas), self
        assert set(self.adding_replicas) <= set(self.replicas), self
        assert set(self.removing_replicas) <= set(self.replicas), self
        assert not set(self.adding_replicas) & set(self.removing_replicas), self

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return cls(record.replicas, record.isr, record.leader, record.leader_epoch,
                   record.partition_epoch, record.leader_recovery_state, record.directories,
                   record.eligible_leader_replicas, record.last_known_elr,
                   record.adding_replicas, record.removing_replicas)

    def to_record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(topic_id, partition_id, self.replicas, self.isr, self.leader,
                               self.leader_epoch, self.partition_epoch, self.leader_recovery_state,
                               self.directories, eligible_leader_replicas=self.elr,
                               last_known_elr=self.last_known_elr,
                               adding_replicas=self.adding_replicas,
                               removing_replicas=self.removing_replicas)

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    def directory(self, broker_id: int) -> uuid.UUID:
        """The log directory of ``broker_id``'s replica (``UNASSIGNED_DIR`` if not known)."""
        if not self.directories or broker_id not in self.replicas:
            return UNASSIGNED_DIR
        return self.directories[self.replicas.index(broker_id)]

    def with_directory(self, broker_id: int, directory: uuid.UUID) -> tuple[uuid.UUID, ...]:
        """``directories`` with ``broker_id``'s replica moved to ``directory`` (``()``
        when every replica is then unassigned)."""
        current = self.directories or (UNASSIGNED_DIR,) * len(self.replicas)
        i = self.replicas.index(broker_id)
        result = current[:i] + (directory,) + current[i + 1:]
        return () if all(d == UNASSIGNED_DIR for d in result) else result

    @property
    def is_reassigning(self) -> bool:
        """A KIP-455 reassignment is under way (Kafka's ``isReassignmentInProgress``)."""
        return bool(self.adding_replicas or self.removing_replicas)

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
            directories=self.directories if record.directories is None else record.directories,
            elr=self.elr if record.eligible_leader_replicas is None else record.eligible_leader_replicas,
            last_known_elr=self.last_known_elr if record.last_known_elr is None else record.last_known_elr,
            adding_replicas=(self.adding_replicas if record.adding_replicas is None
                             else record.adding_replicas),
            removing_replicas=(self.removing_replicas if record.removing_replicas is None
                               else record.removing_replicas),
        )

    def describe(self) -> str:
        """``leader=1 leader_epoch=0 partition_epoch=0 isr=[1,2] replicas=[1,2,3]``."""
        text = (f"leader={self.leader} leader_epoch={self.leader_epoch} "
                f"partition_epoch={self.partition_epoch} isr={_ids(self.isr)} "
                f"replicas={_ids(self.replicas)}")
        if self.elr:
            text += f" elr={_ids(self.elr)}"
        if self.last_known_elr:
            text += f" last_known_elr={_ids(self.last_known_elr)}"
        if self.adding_replicas:
            text += f" adding={_ids(self.adding_replicas)}"
        if self.removing_replicas:
            text += f" removing={_ids(self.removing_replicas)}"
        if self.leader_recovery_state:
            text += " RECOVERING"
        return text


def _ids(ids: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"
