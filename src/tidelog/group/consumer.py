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
revoke, is removed.

All of it is also written to ``__consumer_offsets`` in Kafka's records (the group
epoch and its subscribed topics' hash, each member's subscription, the target
assignment and its epoch, each member's epochs and partitions: ``records()``),
so that a new coordinator loads the group as it was: after a coordinator moves,
members go on heartbeating with the epochs they have and keep their partitions,
as on Kafka 4 — nothing is reassigned, nothing read again. The shard writes
what changed after each heartbeat, expiry or leave, and answers the heartbeat
once it is committed (``shard.py``).

A group's session timeout and heartbeat interval are the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``
unless the group has its own (GROUP config resources, ``consumer.session.timeout.ms``
and ``consumer.heartbeat.interval.ms``, set with IncrementalAlterConfigs and kept in
the metadata log): ``apply_configs`` takes them from the broker's metadata image at
each heartbeat, so a change applies from the members' next heartbeat on.
"""

from __future__ import annotations

import enum
import hashlib
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from tidelog.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupMetadataValue,
    ConsumerKey,
    ConsumerMemberMetadataValue,
    ConsumerValue,
    CurrentMemberAssignmentValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    encode_consumer_value,
    encode_key,
)

TopicPartitionId = tuple[uuid.UUID, int]            # (topic id, partition)
# name → (topic id, partition count), from the broker's metadata image
TopicLookup = Callable[[str], "tuple[uuid.UUID, int] | None"]
ASSIGNORS = ("uniform", "range")


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


# Kafka's MemberState values in ConsumerGroupCurrentMemberAssignmentValue.State
STATE_VALUES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
STATES_BY_VALUE = {value: state for state, value in STATE_VALUES.items()}


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
    metadata_hash: int = 0                          # of subscription_metadata; 0 for none (written, loaded)
    assignor: str = ASSIGNORS[0]
    session_timeout_ms: int = 45_000                # the group's own, else the broker's (apply_configs)
    heartbeat_interval_ms: int = 5_000
    # What __consumer_offsets holds for the group, as this shard wrote or loaded it:
    # encoded key → encoded value, or None where a failed write left it unknown. What
    # ``records()`` gives that differs is written next (a key it no longer has: a tombstone).
    persisted: dict[bytes, bytes | None] = field(default_factory=dict)
    _written: tuple | None = None                   # (member ids, assignment epoch) as last written whole

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
        self.subscription_metadata = metadata
        digest = metadata_hash(metadata)
        if digest != self.metadata_hash:        # compared by hash: a loaded group has only the hash
            self.metadata_hash = digest
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


    # ------------------------------------------------------------- records

    def records(self, members: Iterable[str] | None = None) -> dict[bytes, bytes]:
        """The group as ``__consumer_offsets`` records (encoded key → value), in the order
        a load can replay them: the group, then each member's (all, or ``members``), then
        the target's epoch."""
        out: dict[bytes, bytes] = {}

        def put(record_type: int, value: ConsumerValue, member_id: str | None = None) -> None:
            out[encode_key(ConsumerKey(record_type, self.group_id, member_id))] = encode_consumer_value(value)
        put(CONSUMER_GROUP_METADATA, ConsumerGroupMetadataValue(self.group_epoch, self.metadata_hash))
        chosen = sorted(self.members.items()) if members is None else [
            (member_id, self.members[member_id]) for member_id in members if member_id in self.members]
        for member_id, m in chosen:
            put(CONSUMER_GROUP_MEMBER_METADATA, ConsumerMemberMetadataValue(
                m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
                m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor), member_id)
            if member_id in self.target:
                put(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, TargetAssignmentMemberValue(self.target[member_id]),
                    member_id)
            put(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CurrentMemberAssignmentValue(
                m.member_epoch, m.previous_member_epoch, STATE_VALUES[m.state], m.assigned, m.pending_revocation),
                member_id)
        put(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, TargetAssignmentMetadataValue(self.assignment_epoch))
        return out

    def changed_records(self, touched: str | None = None) -> list[tuple[bytes, bytes | None]]:
        """What to write so that ``__consumer_offsets`` holds ``records()``: tombstones for
        keys no longer there first, then the values that differ; ``persisted`` moves on.
        ``touched``: the one member a heartbeat may have changed. While the members and
        the target's epoch are as last written, only its records and the group's are
        compared, so a heartbeat costs the same in a group of 1,000 as of 2."""
        if touched is not None and self._written == (frozenset(self.members), self.assignment_epoch):
            now = self.records([touched])
            changed = [(key, value) for key, value in now.items() if self.persisted.get(key) != value]
            self.persisted.update(now)
            return changed
        now = self.records()
        gone = _in_deletion_order([key for key in self.persisted if key not in now])
        changed = [(key, value) for key, value in now.items() if self.persisted.get(key) != value]
        self.persisted = now
        self._written = (frozenset(self.members), self.assignment_epoch)
        return gone + changed

    def tombstones(self) -> list[tuple[bytes, None]]:
        """Every record of the group deleted (the group itself is being deleted)."""
        gone = _in_deletion_order(list(self.persisted))
        self.forget_written()
        return gone

    def forget_written(self) -> None:
        """Nothing is known to be written: the next change writes it all."""
        self.persisted = {}
        self._written = None

    def forget_records(self, keys: Iterable[bytes]) -> None:
        """A write of these keys failed: the log may hold their old values or the new ones.
        The next change writes them again (or their tombstones), with what else changed —
        not the whole group, which may not fit in one batch."""
        for key in keys:
            self.persisted[key] = None
        self._written = None

    def apply_record(self, key: ConsumerKey, value: ConsumerValue | None, key_bytes: bytes,
                     value_bytes: bytes | None) -> None:
        """Loading: one committed record of this group replayed (the newest one per key wins)."""
        if value_bytes is None:
            self.persisted.pop(key_bytes, None)
        else:
            self.persisted[key_bytes] = value_bytes
        if key.member_id is None:
            if isinstance(value, ConsumerGroupMetadataValue):
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
            elif isinstance(value, TargetAssignmentMetadataValue):
                self.assignment_epoch = value.assignment_epoch
            return
        if value is None:
            if key.record_type == CONSUMER_GROUP_MEMBER_METADATA:
                self.members.pop(key.member_id, None)
            elif key.record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
                self.target.pop(key.member_id, None)
            return
        member = self.members.get(key.member_id)
        if member is None:
            member = self.members[key.member_id] = ConsumerMember(key.member_id, None, None, "", "", -1)
        if isinstance(value, ConsumerMemberMetadataValue):
            member.instance_id, member.rack_id = value.instance_id, value.rack_id
            member.client_id, member.client_host = value.client_id, value.client_host
            member.subscribed_topic_names = tuple(value.subscribed_topic_names)
            member.subscribed_topic_regex = value.subscribed_topic_regex
            member.rebalance_timeout_ms, member.server_assignor = value.rebalance_timeout_ms, value.server_assignor
        elif isinstance(value, TargetAssignmentMemberValue):
            self.target[key.member_id] = value.partitions
        elif isinstance(value, CurrentMemberAssignmentValue):
            member.member_epoch, member.previous_member_epoch = value.member_epoch, value.previous_member_epoch
            member.state = STATES_BY_VALUE.get(value.state, MemberState.STABLE)
            member.assigned, member.pending_revocation = value.assigned, value.pending_revocation

    def loaded(self, now_ms: int, session_timeout_ms: int) -> None:
        """Loading done: each member's session (and revocation) starts now, as Kafka's
        coordinator schedules them when it loads a group; its assignment is sent again."""
        for member in self.members.values():
            member.session_deadline_ms = now_ms + session_timeout_ms
            if member.pending_revocation:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            member.last_sent = None
        self._written = (frozenset(self.members), self.assignment_epoch)


# Tombstones in the order Kafka writes them: a member's current assignment, its target,
# then the member; the target's epoch, then the group.
_DELETION_ORDER = (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                   CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_METADATA)


def _in_deletion_order(keys: list[bytes]) -> list[tuple[bytes, None]]:
    def rank(key: bytes) -> int:
        record_type = int.from_bytes(key[:2], "big")
        return _DELETION_ORDER.index(record_type) if record_type in _DELETION_ORDER else len(_DELETION_ORDER)
    return [(key, None) for key in sorted(keys, key=rank)]      # stable: members keep their order


def metadata_hash(metadata: tuple) -> int:
    """A stable 64-bit hash of the subscribed topics' (name, id, partition count); 0 for none."""
    if not metadata:
        return 0
    text = ";".join(f"{name},{topic_id},{count}" for name, topic_id, count in metadata)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True) or 1


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
