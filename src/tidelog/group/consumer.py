"""A consumer group of the new protocol (KIP-848, ConsumerGroupHeartbeat): the coordinator assigns.

Theory of operation. Members only heartbeat; the coordinator keeps, per group:

* the **group epoch**, bumped whenever what the assignment depends on changes —
  a member joins or leaves, a subscription changes, a subscribed topic gains
  partitions;
* the **target assignment** for that epoch, computed by a server-side assignor
  (``uniform``, sticky: members keep what they have up to their fair share; or
  ``range``, per topic);
* per member, its **member epoch** and the partitions it owns now. A member
  moves towards its target in two steps, so that no partition is ever owned by
  two members at once (``owner_of``):

      owns partitions the target gives to others → told to revoke them
         (UNREVOKED_PARTITIONS: its epoch stays) until it reports it let go;
      then it gets its new partitions that nobody still owns, and the new epoch
         (UNRELEASED_PARTITIONS while some are still held by another member).

A heartbeat with an epoch the member does not have is FENCED_MEMBER_EPOCH (the
client rejoins with epoch 0); an unknown member is UNKNOWN_MEMBER_ID; a member
silent for its session timeout, or slower than its rebalance timeout to
revoke, is removed. Membership is kept in the coordinator's memory: after a
coordinator failover members are told UNKNOWN_MEMBER_ID and rejoin, while their
committed offsets (records, like every group's) are all there.

A group's session timeout and heartbeat interval are the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``
unless the group has its own (GROUP config resources, ``consumer.session.timeout.ms``
and ``consumer.heartbeat.interval.ms``, set with IncrementalAlterConfigs and kept in
the metadata log): ``apply_configs`` takes them from the broker's metadata image at
each heartbeat, so a change applies from the members' next heartbeat on.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

TopicPartitionId = tuple[uuid.UUID, int]            # (topic id, partition)
# name → (topic id, partition count), from the broker's metadata image
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
ASSIGNORS = ("uniform", "range")


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: frozenset = frozenset()               # TopicPartitionIds it owns now
    pending_revocation: frozenset = frozenset()     # it still owns these and must let go
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    last_sent: frozenset | None = None              # the assignment last sent to the client


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset] = field(default_factory=dict)
    subscription_metadata: tuple = ()               # ((topic, id, partitions), ...) the target was made for
    assignor: str = ASSIGNORS[0]
    session_timeout_ms: int = 45_000                # the group's own, else the broker's (apply_configs)
    heartbeat_interval_ms: int = 5_000

    def apply_configs(self, own: Mapping[str, str], session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        """The group's settings: its GROUP config resource's values (validated within the
        broker's bounds when they were set), else the broker's defaults given."""
        self.session_timeout_ms = int(own.get("consumer.session.timeout.ms", session_timeout_ms))
        self.heartbeat_interval_ms = int(own.get("consumer.heartbeat.interval.ms", heartbeat_interval_ms))

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch != self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    # --------------------------------------------------------- subscriptions

    def subscribed_topics(self, member: ConsumerMember, all_topics: list[str]) -> set[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            try:
                pattern = re.compile(member.subscribed_topic_regex)
            except re.error:
                return topics
            topics |= {t for t in all_topics if pattern.fullmatch(t) and not t.startswith("__")}
        return topics

    def refresh(self, lookup: TopicLookup, all_topics: list[str]) -> None:
        """Bump the group epoch if the subscribed topics' metadata changed, then
        recompute the target assignment if it is behind the group epoch."""
        wanted = sorted({t for m in self.members.values() for t in self.subscribed_topics(m, all_topics)})
        metadata = tuple((t, *found) for t in wanted if (found := lookup(t)) is not None)
        if metadata != self.subscription_metadata:
            self.subscription_metadata = metadata
            self.group_epoch += 1
        if self.assignment_epoch != self.group_epoch:
            self._compute_target(lookup, all_topics)
            self.assignment_epoch = self.group_epoch

    def _compute_target(self, lookup: TopicLookup, all_topics: list[str]) -> None:
        chosen = [m.server_assignor for m in self.members.values() if m.server_assignor in ASSIGNORS]
        self.assignor = chosen[0] if chosen else ASSIGNORS[0]
        topics: dict[uuid.UUID, tuple[int, list[str]]] = {}
        for name, topic_id, count in self.subscription_metadata:
            subscribers = sorted(m.member_id for m in self.members.values()
                                 if name in self.subscribed_topics(m, all_topics))
            topics[topic_id] = (count, subscribers)
        if self.assignor == "range":
            self.target = _range(self.members, topics)
        else:
            self.target = _uniform(self.members, topics, self.target)

    # ---------------------------------------------------------- ownership

    def owner_of(self, tp: TopicPartitionId, other_than: str) -> bool:
        return any(tp in m.assigned or tp in m.pending_revocation
                   for m in self.members.values() if m.member_id != other_than)

    def reconcile(self, member: ConsumerMember, owned: frozenset | None, now_ms: int) -> None:
        """Move ``member`` towards its target (``owned``: what the client says it owns, if it said)."""
        target = self.target.get(member.member_id, frozenset())
        if member.pending_revocation:
            if owned is None or owned & member.pending_revocation:
                return                                   # still revoking
            member.pending_revocation = frozenset()
            member.revocation_deadline_ms = None
        if member.member_epoch != self.assignment_epoch:
            revoke = member.assigned - target
            if revoke:
                member.assigned = member.assigned - revoke
                member.pending_revocation = revoke
                member.state = MemberState.UNREVOKED_PARTITIONS
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
                return
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        free = frozenset(tp for tp in target - member.assigned if not self.owner_of(tp, member.member_id))
        member.assigned = member.assigned | free
        member.state = (MemberState.STABLE if target <= member.assigned
                        else MemberState.UNRELEASED_PARTITIONS)


def _uniform(members: dict[str, ConsumerMember], topics: dict, previous: dict[str, frozenset]
             ) -> dict[str, frozenset]:
    """Sticky and balanced: each member keeps what it had, up to its share; the rest go
    to the members with the fewest partitions (among those subscribed)."""
    subscribers = {(tid, p): set(subs) for tid, (count, subs) in topics.items() for p in range(count)}
    target: dict[str, set] = {m: set() for m in sorted(members)}
    if not target:
        return {}
    assignable = [tp for tp in sorted(subscribers, key=lambda x: (str(x[0]), x[1])) if subscribers[tp]]
    eligible = {m for subs in subscribers.values() for m in subs}
    share, extra = divmod(len(assignable), max(1, len(eligible)))
    for member_id in target:
        kept = sorted((tp for tp in previous.get(member_id, ()) if member_id in subscribers.get(tp, ())),
                      key=lambda x: (str(x[0]), x[1]))
        target[member_id].update(kept)
    for member_id in target:                               # trim to the share (+1 for the first `extra`)
        limit = share + (1 if extra > 0 else 0)
        mine = sorted(target[member_id], key=lambda x: (str(x[0]), x[1]))
        if len(mine) > limit:
            target[member_id] = set(mine[:limit])
        if len(target[member_id]) == share + 1:
            extra -= 1
    taken = {tp for assigned in target.values() for tp in assigned}
    for tp in assignable:
        if tp in taken:
            continue
        candidates = [m for m in target if m in subscribers[tp]]
        fewest = min(candidates, key=lambda m: (len(target[m]), m))
        target[fewest].add(tp)
    return {m: frozenset(tps) for m, tps in target.items()}


def _range(members: dict[str, ConsumerMember], topics: dict) -> dict[str, frozenset]:
    """Per topic, contiguous ranges over its subscribers in member-id order."""
    target: dict[str, set] = {m: set() for m in members}
    for topic_id, (count, subscribers) in topics.items():
        if not subscribers:
            continue
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            n = share + (1 if i < extra else 0)
            target[member_id].update((topic_id, p) for p in range(start, start + n))
            start += n
    return {m: frozenset(tps) for m, tps in target.items()}
