"""AlterPartition validation in Kafka's order, one check per line.

A partition leader asks the controller to commit a new ISR. The request carries
the leader epoch and partition epoch the leader believes current; the partition
epoch is a compare-and-set version, so a leader that missed a change is refused
and must wait for new metadata. The checks run in Kafka's order — the first that
fails decides the error — because the leader reacts differently to each
(Kafka's ``Partition.handleAlterPartitionError``): an epoch *ahead* of the
controller's means this controller is stale (``NOT_CONTROLLER``); an old leader
epoch means the sender was deposed (``FENCED_LEADER_EPOCH``); an old partition
epoch means a concurrent change won (``INVALID_UPDATE_VERSION``); ineligible
members are reverted (``INELIGIBLE_REPLICA``).

The sender's own broker epoch is checked before any of this, for the whole request
(``STALE_BROKER_EPOCH``).
"""

from __future__ import annotations

from typing import Callable

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import LeaderRecoveryState
from tidelog.metadata.registrations import BrokerRegistration, PartitionRegistration
from tidelog.controller.messages import AlterPartitionItem
from tidelog.controller.result import NO_ERROR, ApiError


def validate_alter_partition(item: AlterPartitionItem, sender_id: int,
                             partition: PartitionRegistration | None, topic_name: str | None,
                             registration: Callable[[int], BrokerRegistration | None]
                             ) -> ApiError:
    """The first failed check as an ``ApiError``; ``topic_name`` None = unknown topic id."""
    where = f"partition {topic_name}-{item.partition_id}"
    if topic_name is None:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {item.topic_id} is unknown")
    if partition is None:
        return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} is unknown")
    if item.leader_epoch > partition.leader_epoch:
        return ApiError(ErrorCode.NOT_CONTROLLER, f"{where}: leader epoch {item.leader_epoch} is "
                        f"ahead of this controller's {partition.leader_epoch}")
    if item.partition_epoch > partition.partition_epoch:
        return ApiError(ErrorCode.NOT_CONTROLLER, f"{where}: partition epoch "
                        f"{item.partition_epoch} is ahead of this controller's "
                        f"{partition.partition_epoch}")
    if item.leader_epoch < partition.leader_epoch:
        return ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"{where}: leader epoch "
                        f"{item.leader_epoch} is older than {partition.leader_epoch}")
    if sender_id != partition.leader:
        return ApiError(ErrorCode.INVALID_REQUEST, f"{where}: broker {sender_id} is not the "
                        f"leader (the leader is {partition.leader})")
    if item.partition_epoch < partition.partition_epoch:
        return ApiError(ErrorCode.INVALID_UPDATE_VERSION, f"{where}: partition epoch "
                        f"{item.partition_epoch} is older than {partition.partition_epoch}")
    strangers = [b for b in item.new_isr if b not in partition.replicas]
    if strangers or len(set(item.new_isr)) != len(item.new_isr):
        return ApiError(ErrorCode.INVALID_REQUEST, f"{where}: the proposed ISR "
                        f"{list(item.new_isr)} has duplicates or non-replicas {strangers}")
    if partition.leader not in item.new_isr:
        return ApiError(ErrorCode.INVALID_REQUEST, f"{where}: the proposed ISR "
                        f"{list(item.new_isr)} lacks the leader {partition.leader}")
    recovering = item.leader_recovery_state == LeaderRecoveryState.RECOVERING
    if recovering and len(item.new_isr) > 1:
        return ApiError(ErrorCode.INVALID_REQUEST, f"{where}: a RECOVERING leader cannot have "
                        f"an ISR of {len(item.new_isr)}")
    if recovering and partition.leader_recovery_state == LeaderRecoveryState.RECOVERED:
        return ApiError(ErrorCode.INVALID_REQUEST,
                        f"{where}: cannot go from RECOVERED back to RECOVERING")
    return _check_eligible(item, where, registration)


def _check_eligible(item: AlterPartitionItem, where: str,
                    registration: Callable[[int], BrokerRegistration | None]) -> ApiError:
    epochs = item.new_isr_broker_epochs or (-1,) * len(item.new_isr)
    if len(epochs) != len(item.new_isr):
        return ApiError(ErrorCode.INVALID_REQUEST, f"{where}: ISR broker epochs do not match "
                        "the ISR")
    ineligible = []
    for broker_id, broker_epoch in zip(item.new_isr, epochs):
        broker = registration(broker_id)
        if broker is None:
            ineligible.append(f"{broker_id} (not registered)")
        elif broker.fenced:
            ineligible.append(f"{broker_id} (fenced)")
        elif broker.in_controlled_shutdown:
            ineligible.append(f"{broker_id} (in controlled shutdown)")
        elif broker_epoch != -1 and broker_epoch != broker.broker_epoch:
            ineligible.append(f"{broker_id} (broker epoch {broker_epoch} is not "
                              f"{broker.broker_epoch})")
    if ineligible:
        return ApiError(ErrorCode.INELIGIBLE_REPLICA,
                        f"{where}: ineligible ISR members: {', '.join(ineligible)}")
    return NO_ERROR
