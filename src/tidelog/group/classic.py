"""A consumer group of the classic protocol (JoinGroup/SyncGroup): members, generation, state.

Theory of operation. A ``ClassicGroup`` is Kafka's ``ClassicGroup``: the members
that joined, the generation they share, the protocol chosen for it, and one of
five states moved only through ``TRANSITIONS`` (``tidelog.core.states``):

    EMPTY ─join─▶ PREPARING_REBALANCE ─all joined─▶ COMPLETING_REBALANCE
    COMPLETING_REBALANCE ─leader's assignment stored─▶ STABLE
    STABLE / COMPLETING_REBALANCE ─member joins, leaves, changes or expires─▶ PREPARING_REBALANCE
    PREPARING_REBALANCE ─join completes with no member─▶ EMPTY
    EMPTY ─deleted (DeleteGroups, or its last offset expired)─▶ DEAD

Membership lives in the coordinator's memory, as in Kafka; what survives a
failover is the ``GroupMetadataValue`` record written when a generation's
assignment is stored or the group empties (``to_record`` / ``from_record``).
Each member may hold a pending JoinGroup or SyncGroup answer (a callback the
coordinator completes when the rebalance moves on).

Two clocks, as in Kafka: deadlines (sessions, join, sync, pending members) and
``state_timestamp_ms`` are on the coordinator's monotonic timer clock, so a
wall-clock step neither fires nor postpones them; ``empty_since_ms`` and the
timestamps written to records are wall time (offset retention compares them
with commit timestamps, across coordinators).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from tidelog.core.states import mermaid as draw, transition
from tidelog.group.records import GroupMetadataValue, MemberMetadata

Respond = Callable[[dict], None]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(enum.Enum):
    JOIN = "member joins"
    REBALANCE = "member joins, leaves, changes or expires"
    ALL_JOINED = "join completes with members"
    NONE_JOINED = "join completes with no member"
    ASSIGNED = "leader's assignment stored"
    DELETED = "deleted"


S, E = GroupState, GroupEvent

TRANSITIONS: dict[GroupState, dict[GroupEvent, GroupState]] = {
    S.EMPTY: {E.JOIN: S.PREPARING_REBALANCE, E.DELETED: S.DEAD},
    S.PREPARING_REBALANCE: {E.ALL_JOINED: S.COMPLETING_REBALANCE, E.NONE_JOINED: S.EMPTY},
    S.COMPLETING_REBALANCE: {E.REBALANCE: S.PREPARING_REBALANCE, E.ASSIGNED: S.STABLE},
    S.STABLE: {E.REBALANCE: S.PREPARING_REBALANCE},
    S.DEAD: {},
}


def mermaid() -> str:
    return draw(TRANSITIONS, GroupState.EMPTY)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]          # (name, metadata) in the member's preference order
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    awaiting_join: Respond | None = None
    awaiting_sync: Respond | None = None
    join_version: int = 0

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)     # group.instance.id → member id
    pending_members: dict[str, int] = field(default_factory=dict)    # member id → deadline (KIP-394)
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    initial_join: bool = False                                       # group.initial.rebalance.delay.ms applies
    state_timestamp_ms: int = -1                                     # last move, on the timer clock
    # When the group last became Empty (wall time): offsets expire offsets.retention.minutes after (KIP-211).
    empty_since_ms: int | None = None

    # ------------------------------------------------------------- state

    def move(self, event: GroupEvent, now_ms: int, wall_ms: int) -> None:
        """``now_ms`` on the coordinator's timer (monotonic) clock, ``wall_ms`` wall time."""
        self.state = transition(TRANSITIONS, self.state, event, f"group {self.group_id}")
        self.state_timestamp_ms = now_ms
        if self.state == GroupState.EMPTY:
            self.empty_since_ms = wall_ms
        elif self.state != GroupState.DEAD:
            self.empty_since_ms = None

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # ----------------------------------------------------------- members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, old_id: str, new_id: str) -> Member:
        """A static member rejoined with a new member id: same place, same assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --------------------------------------------------------- protocols

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member must share the protocol type and one protocol with everyone."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self.candidates())

    def candidates(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member names its most preferred common protocol; most votes win."""
        candidates = self.candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = [name for name, _ in next(iter(self.members.values())).protocols]
        return max(votes, key=lambda name: (votes[name], -order.index(name) if name in order else 0))

    # ------------------------------------------------------------ record

    def to_record(self, wall_ms: int) -> GroupMetadataValue:
        stored = self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "", generation=self.generation_id,
            protocol=self.protocol_name, leader=self.leader_id, current_state_timestamp_ms=wall_ms,
            members=tuple(MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(self.protocol_name or ""), m.assignment)
                for m in self.members.values()) if stored else ())

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue, now_ms: int, wall_ms: int) -> "ClassicGroup":
        """``now_ms`` on the coordinator's timer (monotonic) clock, ``wall_ms`` wall time."""
        group = cls(group_id, protocol_type=value.protocol_type or None, protocol_name=value.protocol,
                    generation_id=value.generation, state_timestamp_ms=now_ms)
        for m in value.members:
            group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             m.rebalance_timeout_ms, m.session_timeout_ms, value.protocol_type,
                             [(value.protocol or "", m.subscription)], m.assignment,
                             heartbeat_deadline_ms=now_ms + m.session_timeout_ms))
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            group.state = GroupState.STABLE
        else:
            group.empty_since_ms = value.current_state_timestamp_ms if value.current_state_timestamp_ms >= 0 else wall_ms
        return group
