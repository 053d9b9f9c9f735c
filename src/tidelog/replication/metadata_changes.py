"""From a metadata delta to what a broker must do (Kafka's ``ReplicaManager.applyDelta``).

The one place where replayed metadata becomes become-leader / become-follower /
delete calls on a ReplicaManager — shared by the broker process, the
in-process replication harness and the simulator, so they cannot drift apart.

Stray logs (Kafka's stray replicas, KIP-516 topic ids): a broker that was away
while a topic was deleted replays the topic's whole life in one delta, which
then holds no deletion for it. So ``apply_local_changes`` deletes a log whose
``partition.metadata`` names another topic id than the metadata's topic of that
name before hosting the new topic's partition (the old topic was deleted and
re-created meanwhile), and ``delete_stray_logs`` — run by the broker on its first
publish after start — deletes every log the image does not place on this broker
(topic gone, partition gone, or the broker no longer a replica).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidelog.core.errors import StorageError
from tidelog.core.ids import TopicPartition
from tidelog.replication.partition import PartitionState

logger = logging.getLogger(__name__)


def apply_local_changes(replica_manager, delta, broker_id: int, waiting: dict | None = None,
                        new_max: int | None = None) -> dict[TopicPartition, PartitionState]:
    """Apply ``delta.local_changes(broker_id)``: deletions first (a topic may be
    deleted and re-created in one delta, or before this broker came back), then every
    new leader/follower state. Returns the states applied.

    ``waiting`` and ``new_max`` (the broker's slices): of the partitions not hosted
    yet — each a log to open or create, its first leader epoch to write — at most
    ``new_max`` are hosted now; the rest wait in ``waiting`` (in order, with their
    states and topic ids) for ``apply_waiting``. A later delta's state for a waiting
    partition replaces the one waiting, and a deletion removes it. Partitions already
    hosted are never made to wait, and with fewer than ``new_max`` new ones (and none
    waiting) everything is applied now, in the delta's order."""
    changes = delta.local_changes(broker_id)
    logs = replica_manager.log_manager
    assigned = list(changes.leaders.items()) + list(changes.followers.items())
    stale = {tp for tp, local in assigned if logs.topic_id_of(tp) not in (None, local.topic_id)}
    for tp in sorted(stale):
        logger.warning("%s: the log here belongs to a deleted topic of that name (topic id %s, now %s); deleting it",
                    tp, logs.topic_id_of(tp), dict(assigned)[tp].topic_id)
    if changes.deletes or stale:
        replica_manager.stop_partitions(changes.deletes | stale, delete=True)
        _delete_logs(logs, stale)                  # not hosted yet: stop_partitions left them
    states, topic_ids = {}, {}
    for tp, local in assigned:
        p = local.partition
        states[tp] = PartitionState(p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas), p.partition_epoch,
                                    p.leader_recovery_state)
        topic_ids[tp] = local.topic_id
    if waiting is not None and new_max is not None:
        for tp in changes.deletes | stale:
            waiting.pop(tp, None)
        new = [tp for tp in states if tp not in replica_manager.partitions]
        if waiting or len(new) > new_max:
            for tp in new:
                waiting[tp] = (states.pop(tp), topic_ids[tp])
            states.update(_take(waiting, new_max, topic_ids))
    _apply(replica_manager, states, topic_ids)
    return states


def apply_waiting(replica_manager, waiting: dict, new_max: int,
                  placed: Callable[[TopicPartition], bool] = lambda tp: True) -> dict[TopicPartition, PartitionState]:
    """Host the next ``new_max`` partitions that ``apply_local_changes`` left waiting;
    one the metadata no longer ``placed`` here is dropped instead."""
    topic_ids: dict = {}
    states = {tp: state for tp, state in _take(waiting, new_max, topic_ids).items() if placed(tp)}
    _apply(replica_manager, states, topic_ids)
    return states


def _take(waiting: dict, count: int, topic_ids: dict) -> dict[TopicPartition, PartitionState]:
    states = {}
    for tp in list(waiting)[:count]:
        states[tp], topic_ids[tp] = waiting.pop(tp)
    return states


def _apply(replica_manager, states: dict, topic_ids: dict) -> None:
    if states:
        replica_manager.apply_partition_states(states)
        for tp in states:
            replica_manager.log_manager.record_topic_id(tp, topic_ids[tp])


def delete_stray_logs(replica_manager, image, broker_id: int) -> list[TopicPartition]:
    """Delete every log ``image`` does not place on ``broker_id``; returns them."""
    logs = replica_manager.log_manager
    strays = []
    for tp in sorted(log_.topic_partition for log_ in logs.all_logs()):
        partition = image.partition(tp)
        if partition is None or broker_id not in partition.replicas:
            strays.append(tp)
    for tp in strays:
        logger.warning("%s: stray log (%s); deleting it", tp,
                    "no such partition in the metadata" if image.partition(tp) is None
                    else "this broker is not one of its replicas")
    if strays:
        replica_manager.stop_partitions(strays, delete=True)
        _delete_logs(logs, strays)
    return strays


def _delete_logs(logs, topic_partitions) -> None:
    """A directory failing meanwhile is offline now (its partitions go Offline); go on."""
    for tp in topic_partitions:
        try:
            logs.delete_log(tp)
        except StorageError as e:
            logger.error("%s", e)
