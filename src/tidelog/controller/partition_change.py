"""PartitionChangeBuilder: the pure function behind every leader and ISR change.

Theory of operation (Kafka's ``PartitionChangeBuilder``; docs/controller.md).
Given a partition's current registration, a *target* ISR (and optionally target replicas, replica
directories and leader recovery state), a predicate saying which brokers are acceptable leaders (unfenced, not in
controlled shutdown, not the broker being removed, its replica on a directory the
broker still has online — Kafka's ``LeaderAcceptor``) and an election type,
``build()`` returns the ``PartitionChangeRecord`` carrying only what changes, or
``None`` when nothing would change (no-op detection: no record, no epoch bump).

Election, when needed (the current leader is not in the target ISR, is not
acceptable, or a PREFERRED election finds it is not the first replica)::

    valid(r) = r in target ISR and acceptable(r)
    PREFERRED: replicas[0] if valid → current leader if valid → first valid
               replica in replica order → -1
    ONLINE:    current leader if valid → first valid replica in replica order → -1
    UNCLEAN:   as ONLINE, then the first *acceptable* replica in replica order,
               ISR := [it], leader_recovery_state := RECOVERING   (may lose data)

Rules on the result: the ISR never becomes empty (without ELR, an empty target
ISR keeps the current ISR; the partition just has no leader, -1); any leader
change (including to -1) is written as ``leader`` and so bumps the leader epoch
at replay; a new replica set that drops an old replica forces a leader epoch bump
(``leader`` = the same leader); an ISR change alone bumps only the partition
epoch (metadata version >= 3.6, KAFKA-15021).
"""

from __future__ import annotations

import enum
import logging
import uuid
from typing import Callable

from tidelog.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionChangeRecord,
)
from tidelog.metadata.registrations import PartitionRegistration

log = logging.getLogger(__name__)


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


class PartitionChangeBuilder:
    def __init__(self, partition: PartitionRegistration, topic_id: uuid.UUID, partition_id: int,
                 is_acceptable_leader: Callable[[int], bool], election: Election = Election.ONLINE):
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = election
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_directories: tuple = partition.directories
        self.target_leader_recovery_state: int = partition.leader_recovery_state

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_replicas = tuple(replicas)
        return self

    def set_target_directories(self, directories: tuple) -> PartitionChangeBuilder:
        """Every replica's log directory, in replica order (AssignReplicasToDirs)."""
        self.target_directories = tuple(directories)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    # ------------------------------------------------------------ election

    def _is_valid_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self.is_acceptable_leader(replica)

    def _should_try_election(self) -> bool:
        leader = self.partition.leader
        if leader == NO_LEADER or not self._is_valid_leader(leader):
            return True
        return self.election == Election.PREFERRED and leader != self.target_replicas[0]

    def _best_leader(self) -> tuple[int, bool]:
        """``(leader, unclean)`` by the election order in the module docstring."""
        if self.election == Election.PREFERRED and self._is_valid_leader(self.target_replicas[0]):
            return self.target_replicas[0], False
        if self.partition.leader != NO_LEADER and self._is_valid_leader(self.partition.leader):
            return self.partition.leader, False
        for replica in self.target_replicas:
            if self._is_valid_leader(replica):
                return replica, False
        if self.election == Election.UNCLEAN:
            for replica in self.target_replicas:
                if self.is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    # ------------------------------------------------------------ build

    def build(self) -> PartitionChangeRecord | None:
        current = self.partition
        # Without ELR the ISR never becomes empty: keep the last member(s).
        isr = self.target_isr if self.target_isr else current.isr
        leader = NO_LEADER_CHANGE
        leader_recovery_state = self.target_leader_recovery_state
        if self._should_try_election():
            new_leader, unclean = self._best_leader()
            if new_leader != current.leader:
                leader = new_leader
                if unclean:
                    log.warning("UNCLEAN leader election for partition %s-%d: broker %d leads "
                                "from outside the ISR %s; committed records may be lost",
                                self.topic_id, self.partition_id, new_leader, list(current.isr))
                    isr = (new_leader,)
                    leader_recovery_state = LeaderRecoveryState.RECOVERING
        if leader == NO_LEADER_CHANGE and not set(current.replicas) <= set(self.target_replicas):
            leader = current.leader   # replicas were removed: fence them with a new epoch
        record = PartitionChangeRecord(
            self.topic_id, self.partition_id,
            isr=isr if isr != current.isr else None,
            leader=leader,
            replicas=self.target_replicas if self.target_replicas != current.replicas else None,
            leader_recovery_state=(int(leader_recovery_state)
                                   if leader_recovery_state != current.leader_recovery_state
                                   else -1),
            directories=(self.target_directories if self.target_directories != current.directories
                         else None),
        )
        if record == PartitionChangeRecord(self.topic_id, self.partition_id):
            return None
        return record
