"""Requests to and replies from the controller, as plain frozen dataclasses.

These mirror the Kafka API bodies the controller serves (BrokerRegistration,
BrokerHeartbeat, CreateTopics, DeleteTopics, CreatePartitions, AlterPartition,
AssignReplicasToDirs, ElectLeaders, IncrementalAlterConfigs, AllocateProducerIds,
UnregisterBroker) with
only the fields the decision logic reads. The wire codec (``protocol/``) converts.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Mapping

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import BrokerFeature, Endpoint

NONE = ErrorCode.NONE


# ---------------------------------------------------------------- broker lifecycle

@dataclass(frozen=True)
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: uuid.UUID
    cluster_id: str
    listeners: tuple[Endpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    log_dirs: tuple[uuid.UUID, ...] = ()       # the ids of the broker's log directories (KIP-858)
    previous_broker_epoch: int = -1            # the epoch of its last clean shutdown, -1 = none (KIP-966)


@dataclass(frozen=True)
class BrokerRegistrationReply:
    error_code: ErrorCode = NONE
    error_message: str | None = None
    broker_epoch: int = -1


@dataclass(frozen=True)
class ReplicaLogEnd:
    """Where one replica's log ends: the epoch of its last batch (-1 for an empty
    log) and its log end offset (tidelog's stand-in for KIP-966's GetReplicaLogInfo)."""
    topic_id: uuid.UUID
    partition_id: int
    last_epoch: int
    log_end_offset: int


@dataclass(frozen=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool = False
    offline_log_dirs: tuple[uuid.UUID, ...] = ()   # the ids of the log directories that failed
    # Where the broker's replicas of partitions with no leader end: what the controller
    # needs to elect the longest log (KIP-966 unclean recovery); None from a broker
    # that does not report them (``tidelog.unclean.recovery.log.ends.enable`` false).
    replica_log_ends: tuple[ReplicaLogEnd, ...] | None = None


@dataclass(frozen=True)
class BrokerHeartbeatReply:
    error_code: ErrorCode = NONE
    error_message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    in_controlled_shutdown: bool = False
    should_shut_down: bool = False


# ---------------------------------------------------------------- topics

@dataclass(frozen=True)
class CreatableTopic:
    """``num_partitions``/``replication_factor`` of -1 take the cluster defaults.

    ``assignments`` (partition i → replicas) replaces automatic placement; then
    both counts must be -1 or agree with it.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, ...], ...] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    # The partition index of each assignment as a client gave them (sorted); None: 0, 1, ...
    assignment_partitions: tuple[int, ...] | None = None


@dataclass(frozen=True)
class CreatableTopicResult:
    name: str
    error_code: ErrorCode = NONE
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error_code: ErrorCode = NONE
    error_message: str | None = None


@dataclass(frozen=True)
class CreatePartitionsTopic:
    name: str
    count: int                                   # the new total number of partitions
    assignments: tuple[tuple[int, ...], ...] | None = None   # for the new partitions only


@dataclass(frozen=True)
class CreatePartitionsResult:
    name: str
    error_code: ErrorCode = NONE
    error_message: str | None = None


# ---------------------------------------------------------------- partitions

@dataclass(frozen=True)
class AlterPartitionItem:
    """One partition of an AlterPartition request (a leader proposing a new ISR).

    ``new_isr_broker_epochs`` (v3+) pairs each ISR member with the broker epoch
    the leader saw it fetch with, -1 when unknown.
    """

    topic_id: uuid.UUID
    partition_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    leader_recovery_state: int = 0
    new_isr_broker_epochs: tuple[int, ...] | None = None


@dataclass(frozen=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True)
class AlterPartitionResult:
    topic_id: uuid.UUID
    partition_id: int
    error_code: ErrorCode = NONE
    error_message: str | None = None
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    leader_recovery_state: int = 0


@dataclass(frozen=True)
class AlterPartitionResponse:
    error_code: ErrorCode = NONE
    error_message: str | None = None
    partitions: tuple[AlterPartitionResult, ...] = ()


@dataclass(frozen=True)
class ReplicaDirectory:
    """One replica a broker placed in one of its log directories (AssignReplicasToDirs)."""

    topic_id: uuid.UUID
    partition_id: int
    directory_id: uuid.UUID


@dataclass(frozen=True)
class AssignReplicasToDirsRequest:
    broker_id: int
    broker_epoch: int
    assignments: tuple[ReplicaDirectory, ...]


@dataclass(frozen=True)
class AssignReplicasToDirsResponse:
    error_code: ErrorCode = NONE
    error_message: str | None = None
    # (the assignment, its error): UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
    # NOT_LEADER_OR_FOLLOWER (the broker is not a replica) or NONE
    results: tuple[tuple[ReplicaDirectory, ErrorCode], ...] = ()


class ElectionType(enum.IntEnum):
    """Kafka's ElectLeaders election types."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class ElectLeadersResult:
    partition: TopicPartition
    error_code: ErrorCode = NONE
    error_message: str | None = None


# ---------------------------------------------------------------- configs, producer ids

@dataclass(frozen=True)
class AlterConfigsResource:
    """Incremental changes to one resource: key → new value, or None to delete; and
    ``list_changes``, key → ("APPEND" or "SUBTRACT", comma-separated items), applied to a
    list-valued key's value when the controller decides (IncrementalAlterConfigs)."""

    resource_type: int
    resource_name: str
    changes: Mapping[str, str | None]
    list_changes: Mapping[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = NONE
    error_message: str | None = None


@dataclass(frozen=True)
class AllocateProducerIdsReply:
    error_code: ErrorCode = NONE
    error_message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0
