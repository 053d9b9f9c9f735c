"""Which replica a consumer should read from (KIP-392; Kafka's ``ReplicaSelector``).

Theory of operation. A leader asked for records by a consumer (Fetch v11+, which
carries the consumer's ``client.rack``) may point it at another replica instead:
the broker setting ``replica.selector.class`` names the rule, by Kafka's class
names. ``LeaderSelector`` always keeps the leader (no preferred read replica);
``RackAwareReplicaSelector`` picks a replica in the consumer's rack — the leader
if it is there, else the most caught-up one (``most_caught_up``: the highest log
end offset, then the shortest time since it was last caught up, then the highest
broker id, as Kafka's ``ReplicaView.comparator``) — and the leader when no
replica shares the rack or the consumer names none. Unset (Kafka's default):
no selector, consumers read from the leader.

The candidates (``ReplicaView``) are built by the caller (broker/requests/fetch.py)
from the leader's view of its followers: only in-sync replicas holding the fetch
offset are offered, the leader always is. The selectors are pure functions of
their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True)
class ReplicaView:
    """One candidate replica (Kafka's ``ReplicaView``): for the leader itself the time
    since it was last caught up is 0."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


def most_caught_up(view: ReplicaView) -> tuple[int, int, int]:
    """Sort key; the max is the most caught-up replica (Kafka's ``ReplicaView.comparator``)."""
    return view.log_end_offset, -view.time_since_last_caught_up_ms, view.broker_id


class ReplicaSelector(Protocol):
    def select(self, client_rack: str | None, replicas: Sequence[ReplicaView], leader: ReplicaView) -> ReplicaView:
        """The replica the consumer should read from; ``leader`` is one of ``replicas``."""


class LeaderSelector:
    """Kafka's ``LeaderSelector``: always the leader."""

    def select(self, client_rack: str | None, replicas: Sequence[ReplicaView], leader: ReplicaView) -> ReplicaView:
        return leader


class RackAwareReplicaSelector:
    """Kafka's ``RackAwareReplicaSelector``: a replica in the consumer's rack, the
    leader first, else the most caught-up; the leader if none is there."""

    def select(self, client_rack: str | None, replicas: Sequence[ReplicaView], leader: ReplicaView) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [replica for replica in replicas if replica.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=most_caught_up)


REPLICA_SELECTORS: dict[str, type] = {
    LEADER_SELECTOR: LeaderSelector,
    RACK_AWARE_REPLICA_SELECTOR: RackAwareReplicaSelector,
}


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None when unset. The broker config
    refuses any other name at start-up (broker/config.py)."""
    if class_name is None:
        return None
    return REPLICA_SELECTORS[class_name]()
