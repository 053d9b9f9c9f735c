"""Partition reassignment (KIP-455): AlterPartitionReassignments and ListPartitionReassignments.

Theory of operation (Kafka's ``ReplicationControlManager.alterPartitionReassignments``,
``PartitionReassignmentReplicas``, ``PartitionReassignmentRevert``; docs/reassignment.md).
A reassignment lives only in the partition's registration, hence in the metadata
log: it survives a controller failover because the next controller replays the
same records. It goes through three stages, each a ``PartitionChangeRecord``
written by the one ``PartitionChangeBuilder``:

1. start: ``replicas := target + (current − target)``, ``adding := target −
   current``, ``removing := current − target``. The leader and ISR stay; brokers
   replaying the record create logs for the adding replicas and fetch;
2. catch-up: the leader adds each adding replica to the ISR (AlterPartition) as
   it reaches the high watermark, as for any follower;
3. completion: the first change whose target ISR, without the removing replicas,
   holds all of the target replicas drops the removing replicas from the replica
   list and the ISR and clears adding/removing (the builder does it, so an
   AlterPartition, a fencing, any change can complete a reassignment). A removed
   leader loses the leadership in that record; removed brokers delete their logs.

A reassignment that needs no new replica (reordering, or only removing) completes
in stage 1's record when the ISR already allows it.

Cancelling (``replicas`` null) reverts: ``replicas := current − adding``, ``ISR :=
ISR − adding``; if nothing would be left in the ISR the first remaining replica
is put there, which is an unclean election and refused unless the topic allows
unclean elections. A new reassignment of a partition already reassigning starts
from its current replica list (target ∪ old), as Kafka does.

Refusals, per partition and with nothing written for it: unknown topic or
partition → ``UNKNOWN_TOPIC_OR_PARTITION``; an empty replica list, a broker given
twice, an unregistered broker → ``INVALID_REPLICA_ASSIGNMENT``; a changed
replication factor when the request disallows it (v1's
``allow_replication_factor_change`` false) → ``INVALID_REPLICATION_FACTOR``;
cancelling where nothing runs → ``NO_REASSIGNMENT_IN_PROGRESS``.

The operations take the ``ReplicationControlManager`` (``replication``) whose
``_builder``/``_acceptor``/``_current`` every partition change goes through; it
calls them, so this module does not import it back. A request of more
than ``REASSIGNMENTS_PER_REQUEST_MAX`` partitions is refused whole
(``INVALID_REQUEST``): one request's records are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import MetadataRecord
from tidelog.metadata.registrations import PartitionRegistration
from tidelog.controller.partition_change import Election
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult

REASSIGNMENTS_PER_REQUEST_MAX = 10_000   # partitions in one AlterPartitionReassignments


@dataclass(frozen=True)
class ReassignmentTarget:
    """One partition of an AlterPartitionReassignments request; ``replicas`` None cancels."""

    topic: str
    partition_id: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True)
class ReassignmentResult:
    topic: str
    partition_id: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True)
class OngoingReassignment:
    topic: str
    partition_id: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


# ---------------------------------------------------------------- pure rules

def reassignment_replicas(current: Sequence[int], target: Sequence[int]
                          ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(replicas, adding, removing)`` of a reassignment from ``current`` to ``target``:
    the replica list is the target followed by the replicas it drops (in id order)."""
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    return tuple(target) + removing, adding, removing


def revert(partition: PartitionRegistration) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """``(replicas, isr, unclean)`` after cancelling ``partition``'s reassignment."""
    adding = set(partition.adding_replicas)
    replicas = tuple(r for r in partition.replicas if r not in adding)
    isr = tuple(r for r in partition.isr if r not in adding)
    assert replicas, partition          # the original replica list was never empty
    if isr:
        return replicas, isr, False
    return replicas, (replicas[0],), True


def validate_target(replicas: Sequence[int], is_registered: Callable[[int], bool]) -> ApiError:
    """Kafka's ``validateManualPartitionAssignment`` (brokers checked in id order)."""
    if not replicas:
        return _bad_assignment("The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if not is_registered(broker_id):
            return _bad_assignment(f"The manual partition assignment includes broker {broker_id}, "
                                   "but no such broker is registered.")
        if broker_id == previous:
            return _bad_assignment(f"The manual partition assignment includes the broker "
                                   f"{broker_id} more than once.")
        previous = broker_id
    return NO_ERROR


def replication_factor(partition: PartitionRegistration) -> int:
    """The replication factor the partition has, or will have once its reassignment ends."""
    return len(partition.replicas) - len(partition.removing_replicas)


def _bad_assignment(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


# ---------------------------------------------------------------- operations

def alter_partition_reassignments(replication,
                                  targets: Sequence[ReassignmentTarget],
                                  allow_replication_factor_change: bool = True
                                  ) -> ControllerResult[list[ReassignmentResult]]:
    """Start, change or cancel the reassignment of each target; one result per target."""
    if len(targets) > REASSIGNMENTS_PER_REQUEST_MAX:
        message = (f"{len(targets)} partitions in one request; at most "
                   f"{REASSIGNMENTS_PER_REQUEST_MAX} may be reassigned at once.")
        return ControllerResult([], [ReassignmentResult(t.topic, t.partition_id, ErrorCode.INVALID_REQUEST,
                                                        message) for t in targets])
    records: list[MetadataRecord] = []
    results = []
    overlay: dict = {}
    for target in targets:
        error, record = _alter_one(replication, target, allow_replication_factor_change, overlay)
        if record is not None:
            records.append(record)
        results.append(ReassignmentResult(target.topic, target.partition_id, error.error_code,
                                          error.message))
    return ControllerResult(records, results)


def _alter_one(replication, target: ReassignmentTarget,
               allow_replication_factor_change: bool, overlay: dict):
    topic_id = replication.topic_ids.get(target.topic)
    if topic_id is None:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Unable to find a topic named {target.topic}."), None
    key = (topic_id, target.partition_id)
    if target.partition_id not in replication.topics[topic_id].partitions:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition "
                        f"{target.topic}:{target.partition_id}."), None
    partition = replication._current(key, overlay)
    if target.replicas is None:
        error, builder = _cancel(replication, key, target, partition)
    else:
        error, builder = _change(replication, key, target, partition, allow_replication_factor_change)
    if not error.is_success:
        return error, None
    record = builder.build()
    if record is not None:
        overlay[key] = partition.merge(record)
    return NO_ERROR, record


def _change(replication, key, target, partition, allow_replication_factor_change):
    error = validate_target(target.replicas, lambda b: replication.cluster.registration(b) is not None)
    if not error.is_success:
        return error, None
    if not allow_replication_factor_change and len(target.replicas) != replication_factor(partition):
        return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed "
                        f"from {replication_factor(partition)} to {len(target.replicas)}"), None
    replicas, adding, removing = reassignment_replicas(partition.replicas, target.replicas)
    builder = replication._builder(key, partition, replication._acceptor(partition))
    builder.set_target_replicas(replicas).set_target_adding(adding).set_target_removing(removing)
    return NO_ERROR, builder


def _cancel(replication, key, target, partition):
    if not partition.is_reassigning:
        return ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        "No partition reassignment is in progress."), None
    replicas, isr, unclean = revert(partition)
    unclean_allowed = replication.configs.unclean_leader_election_enabled(target.topic)
    if unclean and not unclean_allowed:
        return _bad_assignment(f"Unable to revert partition assignment for {target.topic}:"
                               f"{target.partition_id} because it would require an unclean "
                               "leader election."), None
    builder = replication._builder(key, partition, replication._acceptor(partition),
                                   Election.UNCLEAN if unclean_allowed else Election.ONLINE)
    builder.set_target_isr(isr).set_target_replicas(replicas)
    builder.set_target_adding(()).set_target_removing(())
    return NO_ERROR, builder


def list_partition_reassignments(replication,
                                 topics: Mapping[str, Sequence[int]] | None = None
                                 ) -> list[OngoingReassignment]:
    """The ongoing reassignments: of every partition (``topics`` None), or of the given
    partitions (unknown topics and partitions, and idle ones, are left out)."""
    if topics is None:
        keys = replication.reassigning_partitions()
    else:
        keys = [(replication.topic_ids[name], p) for name, ids in topics.items()
                if name in replication.topic_ids for p in ids]
    out = []
    for key in replication._sorted({k for k in keys if replication.partition(*k) is not None}):
        partition = replication.partition(*key)
        if partition.is_reassigning:
            out.append(OngoingReassignment(replication.topics[key[0]].name, key[1], partition.replicas,
                                           partition.adding_replicas, partition.removing_replicas))
    return out
