"""From a metadata delta to what a broker must do (Kafka's ``ReplicaManager.applyDelta``).

The one place where replayed metadata becomes become-leader / become-follower /
delete calls on a ReplicaManager — shared by the broker process, the
in-process replication harness and the simulator, so they cannot drift apart.
"""

from __future__ import annotations

from tidelog.core.ids import TopicPartition
from tidelog.replication.partition import PartitionState


def apply_local_changes(replica_manager, delta, broker_id: int) -> dict[TopicPartition, PartitionState]:
    """Apply ``delta.local_changes(broker_id)``: deletions first (a topic may be
    deleted and re-created in one delta), then every new leader/follower state.
    Returns the states applied."""
    changes = delta.local_changes(broker_id)
    if changes.deletes:
        replica_manager.stop_partitions(changes.deletes, delete=True)
    states = {}
    for tp, local in list(changes.leaders.items()) + list(changes.followers.items()):
        p = local.partition
        states[tp] = PartitionState(p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas), p.partition_epoch)
    if states:
        replica_manager.apply_partition_states(states)
    return states
