"""Invariants a controller's metadata image must keep (docs/simulation.md, 10.1 and
10.8), checked by the simulator after every event and by controller tests after
every step. Plain checks on a ``MetadataImage``: no I/O, no clock."""

from __future__ import annotations

from tidelog.metadata.image import MetadataImage


def check_invariants(image: MetadataImage, previous: MetadataImage | None = None) -> None:
    """Invariants 10.1 and 10.8 (docs/simulation.md) on a controller image (AssertionError
    if broken).

    * a leader is an ISR member and an active broker (unfenced, not shutting down),
      and its replica is on a directory its broker has online (KIP-858);
    * a fenced or shutting-down broker is in no ISR, unless it is the last member
      of a partition that has no leader;
    * leader epochs and partition epochs never decrease.
    """
    for tp, partition in image.all_partitions():
        if partition.has_leader:
            leader = image.brokers.get(partition.leader)
            assert leader is not None and leader.is_active, (tp, partition, leader)
            assert leader.has_online_dir(partition.directory(partition.leader)), (tp, partition, leader)
        for broker_id in partition.isr:
            broker = image.brokers.get(broker_id)
            if broker is None or not broker.is_active:
                assert partition.isr == (broker_id,) and not partition.has_leader, \
                    (tp, partition, broker)
        if previous is not None:
            topic = image.topics_by_name[tp.topic]
            before_topic = previous.topics_by_id.get(topic.topic_id)
            before = before_topic.partitions.get(tp.partition) if before_topic else None
            if before is not None:
                assert partition.leader_epoch >= before.leader_epoch, (tp, before, partition)
                assert partition.partition_epoch >= before.partition_epoch, (tp, before, partition)
