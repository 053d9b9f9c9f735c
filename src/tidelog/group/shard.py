"""The groups of one ``__consumer_offsets`` partition: Kafka's group coordinator shard.

Theory of operation. A ``GroupShard`` holds the groups whose id hashes to one
partition of ``__consumer_offsets`` while this broker leads it. Two kinds of
state, as in Kafka's classic protocol:

* **Committed offsets and the groups' stored generations change only by
  replaying committed records** (``replay``): the coordinator feeds every
  record of the partition, in offset order, once the high watermark has passed
  it — at load, and as its own writes commit. An OffsetCommit is answered
  after its record was replayed, so a committed offset a client was told about
  is in the state of every later leader, and an OffsetFetch reads only
  committed offsets.
* **Membership** (who joined, pending JoinGroup/SyncGroup answers, heartbeat
  deadlines) lives in memory and moves by the classic protocol's rules
  (``classic.py``); the ``GroupMetadataValue`` record written when a
  generation's assignment is stored (or the group empties) is what a new
  coordinator loads. A KIP-848 group (``consumer.py``) writes all of its state
  (epochs, subscriptions, target and current assignments) after each change and
  answers the heartbeat once that is committed; a new coordinator loads it
  whole, so its members go on with the epochs and partitions they have.

Every operation takes ``now_ms`` and a ``respond`` callback and returns
nothing; records to write go to ``write(records, on_done)``, which the
coordinator appends with acks=all and calls back once they are committed
(``ErrorCode.NONE``) or failed. Time moves only through ``on_tick(now_ms)``,
which expires sessions, join and sync deadlines, pending members and old
offsets; ``next_deadline_ms()`` says when it is next needed.

``now_ms`` is the coordinator's *timer clock*, a monotonic one: Kafka's
coordinator timers (the purgatory's DelayedJoin and DelayedHeartbeat, the new
coordinator's timer) count delays on a monotonic clock, so a wall-clock step
neither fires a deadline early nor postpones it (an hour back would hold a
rebalance for an hour). Wall time, read from the injected ``wall_ms()``, goes
only where Kafka uses it: the timestamps written to records (commits, group
metadata), when a group became empty, and offset retention.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import ClassicGroup, GroupEvent, GroupState, Member, Respond
from tidelog.group.consumer import ASSIGNORS, ConsumerGroup, ConsumerMember, TopicLookup
from tidelog.group.records import (
    CONSUMER_GROUP_METADATA,
    ConsumerKey,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_consumer_value,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_value,
)

logger = logging.getLogger("tidelog.group")

Record = tuple[bytes, bytes | None]          # (key, value); value None is a tombstone
Writer = Callable[[list[Record], Callable[[ErrorCode], None]], None]
CONSUMER_PROTOCOL_TYPE = "consumer"
LEAVE_STATIC_EPOCH = -2


@dataclass(frozen=True)
class GroupConfig:
    """The broker's group settings (Kafka's names)."""

    session_timeout_min_ms: int = 6_000              # group.min.session.timeout.ms
    session_timeout_max_ms: int = 1_800_000          # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000          # group.initial.rebalance.delay.ms
    group_size_max: int = 0x7FFFFFFF                 # group.max.size
    offset_metadata_max_bytes: int = 4096            # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offsets_commit_timeout_ms: int = 5_000           # offsets.commit.timeout.ms
    consumer_session_timeout_ms: int = 45_000        # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000      # group.consumer.heartbeat.interval.ms

    @classmethod
    def from_settings(cls, settings) -> "GroupConfig":
        """From a broker's settings (anything indexed by Kafka's config names)."""
        return cls(settings["group.min.session.timeout.ms"], settings["group.max.session.timeout.ms"],
                   settings["group.initial.rebalance.delay.ms"], settings["group.max.size"],
                   settings["offset.metadata.max.bytes"], settings["offsets.retention.minutes"] * 60_000,
                   settings["offsets.retention.check.interval.ms"], settings["offsets.commit.timeout.ms"],
                   settings["group.consumer.session.timeout.ms"], settings["group.consumer.heartbeat.interval.ms"])


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    client_id: str
    client_host: str
    version: int


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat (KIP-848); None fields are "unchanged since the last one"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: frozenset | None                      # (topic id, partition)s the client owns
    client_id: str
    client_host: str


@dataclass(frozen=True)
class OffsetToCommit:
    topic_partition: TopicPartition
    offset: int
    leader_epoch: int
    metadata: str | None


# Append errors → what a group client understands (Kafka's GroupCoordinator mapping).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def append_error(code: ErrorCode) -> ErrorCode:
    return code if code == ErrorCode.NONE else _APPEND_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)


def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics named by a ``consumer`` protocol subscription (ConsumerProtocolSubscription)."""
    try:
        (count,) = struct.unpack_from(">i", subscription, 2)
        pos, topics = 6, set()
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", subscription, pos)
            topics.add(subscription[pos + 2:pos + 2 + n].decode("utf-8"))
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()


class GroupShard:
    def __init__(self, partition: int, config: GroupConfig, write: Writer,
                 new_member_id: Callable[[str], str], wall_ms: Callable[[], int]):
        self.partition = partition
        self.config = config
        self._write = write
        # A member id is written in the group's records (int16 lengths): its client-id or
        # instance-id prefix is cut so that prefix, "-" and a UUID fit (Kafka would fail the
        # write of a group whose client id is 32767 bytes long).
        self._new_member_id = lambda prefix: new_member_id(_fit_member_id_prefix(prefix))
        self._wall_ms = wall_ms                  # wall time, for timestamps; deadlines use now_ms
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetCommitValue]] = {}
        # Offsets committed in a transaction (TxnOffsetCommit), by producer id, until
        # its COMMIT marker applies them or its ABORT marker drops them.
        self.pending_txn_offsets: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.loading = True
        self._next_offset_expiry_ms = 0

    # ================================================================ replay

    def replay(self, key_bytes: bytes, value_bytes: bytes | None, now_ms: int) -> None:
        """One committed record of the partition, in offset order."""
        key = decode_key(key_bytes)
        if isinstance(key, ConsumerKey):
            if self.loading:             # active: memory is the truth, the record was written from it
                self._replay_consumer_group(key, key_bytes, value_bytes)
            return
        if isinstance(key, OffsetCommitKey):
            tp = TopicPartition(key.topic, key.partition)
            if value_bytes is None:
                offsets = self.offsets.get(key.group)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del self.offsets[key.group]
                return
            self.offsets.setdefault(key.group, {})[tp] = decode_offset_commit_value(value_bytes)
            if key.group not in self.groups and key.group not in self.consumer_groups:
                self.groups[key.group] = ClassicGroup(key.group, empty_since_ms=self._wall_ms())
        elif isinstance(key, GroupMetadataKey):
            group = self.groups.get(key.group)
            if value_bytes is None:
                if group is not None and group.is_in(GroupState.EMPTY, GroupState.DEAD):
                    del self.groups[key.group]
                return
            if self.loading or group is None:
                # Loading: the newest record wins. Active: memory is the truth,
                # the record was written from it.
                self.groups[key.group] = ClassicGroup.from_record(
                    key.group, decode_group_metadata_value(value_bytes), now_ms, self._wall_ms())

    def _replay_consumer_group(self, key: ConsumerKey, key_bytes: bytes, value_bytes: bytes | None) -> None:
        group = self.consumer_groups.get(key.group)
        if value_bytes is None and key.record_type == CONSUMER_GROUP_METADATA:
            self.consumer_groups.pop(key.group, None)              # the group was deleted
            return
        if group is None:
            if value_bytes is None:
                return
            placeholder = self.groups.get(key.group)           # made by an offset commit replayed first
            if placeholder is not None and placeholder.is_in(GroupState.EMPTY):
                del self.groups[key.group]
            group = self.consumer_groups[key.group] = ConsumerGroup(key.group)
        value = None if value_bytes is None else decode_consumer_value(key.record_type, value_bytes)
        group.apply_record(key, value, key_bytes, value_bytes)

    def replay_transactional(self, producer_id: int, key_bytes: bytes, value_bytes: bytes | None,
                             now_ms: int) -> None:
        """A record a transaction wrote: held until the transaction's marker."""
        self.pending_txn_offsets.setdefault(producer_id, []).append((key_bytes, value_bytes))

    def replay_marker(self, producer_id: int, commit: bool, now_ms: int) -> None:
        """A transaction ended: its offsets take effect (COMMIT) or vanish (ABORT)."""
        for key_bytes, value_bytes in self.pending_txn_offsets.pop(producer_id, []):
            if commit:
                self.replay(key_bytes, value_bytes, now_ms)

    def has_pending_offsets(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of ``group_id`` for ``tp`` (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        wanted = encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition))
        return any(key == wanted for records in self.pending_txn_offsets.values() for key, _ in records)

    def loaded(self, now_ms: int) -> None:
        """Every record up to the partition's end at election is replayed: serve."""
        self.loading = False
        for group in self.groups.values():
            for member in group.members.values():
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        for consumer_group in self.consumer_groups.values():
            consumer_group.loaded(now_ms, self.config.consumer_session_timeout_ms)
        loaded = len(self.groups) + len(self.consumer_groups)
        logger.log(logging.INFO if loaded else logging.DEBUG,
                "loaded %d groups and their offsets from __consumer_offsets-%d", loaded, self.partition)

    def unload(self) -> None:
        """Leadership moved: every waiting client learns NOT_COORDINATOR."""
        for group in self.groups.values():
            for member in group.members.values():
                _answer(member.awaiting_join, _join_error(ErrorCode.NOT_COORDINATOR, member.member_id))
                _answer(member.awaiting_sync, _sync_error(ErrorCode.NOT_COORDINATOR))
                member.awaiting_join = member.awaiting_sync = None
        self.groups.clear()
        self.consumer_groups.clear()
        self.offsets.clear()

    # ============================================================= JoinGroup

    def join_group(self, request: JoinRequest, now_ms: int, respond: Respond) -> None:
        if not request.group_id:
            return respond(_join_error(ErrorCode.INVALID_GROUP_ID, request.member_id))
        if not (self.config.session_timeout_min_ms <= request.session_timeout_ms
                <= self.config.session_timeout_max_ms):
            return respond(_join_error(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id))
        consumer_group = self.consumer_groups.get(request.group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id))
            del self.consumer_groups[request.group_id]       # an empty group changes protocol
            self._write_consumer_records(consumer_group, consumer_group.tombstones())
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
            group = self.groups[request.group_id] = ClassicGroup(request.group_id,
                                                                 empty_since_ms=self._wall_ms())
        if group.is_in(GroupState.DEAD):
            return respond(_join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id))
        if not group.supports(request.protocol_type, request.protocols):
            return respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id))
        if not request.member_id:
            self._join_unknown_member(group, request, now_ms, respond)
        else:
            self._join_known_member(group, request, now_ms, respond)

    def _join_unknown_member(self, group: ClassicGroup, request: JoinRequest, now_ms: int,
                             respond: Respond) -> None:
        instance_id = request.group_instance_id
        new_id = self._new_member_id(instance_id or request.client_id)
        if instance_id is not None and instance_id in group.static_members:
            return self._rejoin_static_member(group, request, new_id, now_ms, respond)
        if instance_id is None and request.version >= 4:
            # KIP-394: the member must come back with the id it is given.
            group.pending_members[new_id] = now_ms + request.session_timeout_ms
            return respond(_join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        self._add_member_and_rebalance(group, request, new_id, now_ms, respond)

    def _join_known_member(self, group: ClassicGroup, request: JoinRequest, now_ms: int,
                           respond: Respond) -> None:
        member_id = request.member_id
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, request, member_id, now_ms, respond)
        error = _check_member(group, member_id, request.group_instance_id)
        if error != ErrorCode.NONE:
            return respond(_join_error(error, member_id))
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        changed = not member.same_protocols(request.protocols)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, request, respond)
            self._maybe_complete_join(group, now_ms)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if changed:
                self._update_member(group, member, request, respond)
                self._prepare_rebalance(group, now_ms, f"member {member_id} changed its protocols")
            else:
                respond(self._join_response(group, member))      # a resent JoinGroup
        elif group.is_in(GroupState.STABLE):
            if changed or member_id == group.leader_id:
                self._update_member(group, member, request, respond)
                self._prepare_rebalance(group, now_ms, f"member {member_id} rejoined")
            else:
                respond(self._join_response(group, member))
        else:
            respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(self, group: ClassicGroup, request: JoinRequest, member_id: str,
                                  now_ms: int, respond: Respond) -> None:
        if len(group.members) >= self.config.group_size_max:
            group.pending_members.pop(member_id, None)
            return respond(_join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))
        group.pending_members.pop(member_id, None)
        member = Member(member_id, request.group_instance_id, request.client_id, request.client_host,
                        request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                        list(request.protocols), heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
                        awaiting_join=respond, join_version=request.version)
        group.add(member)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            if group.initial_join:
                # group.initial.rebalance.delay.ms: wait a little longer for more members,
                # never past the rebalance timeout.
                group.join_deadline_ms = min(now_ms + self.config.initial_rebalance_delay_ms,
                                             group.state_timestamp_ms + group.rebalance_timeout_ms())
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms, f"member {member_id} joined")

    def _rejoin_static_member(self, group: ClassicGroup, request: JoinRequest, new_id: str, now_ms: int,
                              respond: Respond) -> None:
        """KIP-345: a static member back with a new member id takes its old place; when
        nothing changed, the group stays Stable and keeps its assignment."""
        old_id = group.static_members[request.group_instance_id]
        old = group.members[old_id]
        _answer(old.awaiting_join, _join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _answer(old.awaiting_sync, _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        old.awaiting_join = old.awaiting_sync = None
        changed = not old.same_protocols(request.protocols)
        member = group.replace_static(old_id, new_id)
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = request.session_timeout_ms, request.rebalance_timeout_ms
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if group.is_in(GroupState.STABLE) and not changed:
            def stored(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    if new_id in group.members:
                        group.replace_static(new_id, old_id)
                    return respond(_join_error(append_error(error), new_id))
                respond(self._join_response(group, member, skip_assignment=True))
            self._write([self._group_record(group)], stored)
            return
        self._update_member(group, member, request, respond)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms, f"static member {request.group_instance_id} rejoined")

    def _update_member(self, group: ClassicGroup, member: Member, request: JoinRequest, respond: Respond) -> None:
        if member.awaiting_join is not None and member.awaiting_join is not respond:
            _answer(member.awaiting_join, _join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.awaiting_join = respond
        member.join_version = request.version

    # ------------------------------------------------------------ rebalance

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                _answer(member.awaiting_sync, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
                member.awaiting_sync = None
        was_empty = group.is_in(GroupState.EMPTY)
        old_state = group.state
        group.move(GroupEvent.JOIN if was_empty else GroupEvent.REBALANCE, now_ms, self._wall_ms())
        group.sync_deadline_ms = None
        group.initial_join = was_empty
        if was_empty:
            group.join_deadline_ms = now_ms + min(self.config.initial_rebalance_delay_ms,
                                                  group.rebalance_timeout_ms())
        else:
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        logger.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 group.group_id, old_state.value, group.generation_id, reason)
        self._maybe_complete_join(group, now_ms)

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE) and not group.initial_join and group.all_joined():
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            logger.info("member %s of group %s did not rejoin in time: removed", member.member_id, group.group_id)
            group.remove(member.member_id)
        # Members told MEMBER_ID_REQUIRED keep their place until their session deadline:
        # they join the next generation.
        group.join_deadline_ms = None
        group.initial_join = False
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.move(GroupEvent.NONE_JOINED, now_ms, self._wall_ms())
            logger.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self._write([self._group_record(group)], lambda error: None)
            return
        group.protocol_name = group.select_protocol()
        group.move(GroupEvent.ALL_JOINED, now_ms, self._wall_ms())
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        logger.info("group %s generation %d (protocol %s) with %d members", group.group_id,
                 group.generation_id, group.protocol_name, len(group.members))
        for member in group.members.values():
            respond, member.awaiting_join = member.awaiting_join, None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            respond(self._join_response(group, member))

    def _join_response(self, group: ClassicGroup, member: Member, skip_assignment: bool = False) -> dict:
        is_leader = member.member_id == group.leader_id
        members = []
        if is_leader:
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata(group.protocol_name or "")} for m in group.members.values()]
        return {"error_code": int(ErrorCode.NONE), "generation_id": group.generation_id,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id or "", "skip_assignment": skip_assignment and is_leader,
                "member_id": member.member_id, "members": members}

    # ============================================================= SyncGroup

    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes], now_ms: int, respond: Respond) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return respond(_sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        error = _check_generation(group, member_id, instance_id, generation_id)
        if error == ErrorCode.NONE and (
                (protocol_type is not None and protocol_type != group.protocol_type)
                or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error != ErrorCode.NONE:
            return respond(_sync_error(error))
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return respond(_sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        if group.is_in(GroupState.STABLE):
            return respond(self._sync_response(group, member))
        if group.is_in(GroupState.EMPTY):
            return respond(_sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        _answer(member.awaiting_sync, _sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = respond
        if member_id != group.leader_id:
            return
        generation = group.generation_id
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        record = self._group_record(group)

        def stored(error: ErrorCode) -> None:
            if group.generation_id != generation or not group.is_in(GroupState.COMPLETING_REBALANCE):
                return                                   # a newer rebalance answered everyone
            if error != ErrorCode.NONE:
                for m in group.members.values():
                    _answer(m.awaiting_sync, _sync_error(append_error(error)))
                    m.awaiting_sync = None
                self._prepare_rebalance(group, now_ms, "storing the assignment failed")
                return
            group.move(GroupEvent.ASSIGNED, now_ms, self._wall_ms())
            group.sync_deadline_ms = None
            for m in group.members.values():
                respond_m, m.awaiting_sync = m.awaiting_sync, None
                _answer(respond_m, self._sync_response(group, m))
        self._write([record], stored)

    def _sync_response(self, group: ClassicGroup, member: Member) -> dict:
        return {"error_code": int(ErrorCode.NONE), "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "assignment": member.assignment}

    # ============================================================= Heartbeat

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                  now_ms: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = _check_generation(group, member_id, instance_id, generation_id)
        if error != ErrorCode.NONE:
            return error
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ============================================================ LeaveGroup

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]], now_ms: int
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving``: (member id, group instance id) pairs; per-member errors back."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results, removed = [], False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if member_id and member_id != known:
                    results.append((member_id, instance_id, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = known
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                results.append((member_id, instance_id, ErrorCode.NONE))
                continue
            if member_id not in group.members:
                results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            self._remove_member(group, member_id)
            removed = True
            results.append((member_id, instance_id, ErrorCode.NONE))
        if removed:
            self._after_removal(group, now_ms, "members left the group")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)
        return ErrorCode.NONE, results

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.remove(member_id)
        if member is not None:
            _answer(member.awaiting_join, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            _answer(member.awaiting_sync, _sync_error(ErrorCode.UNKNOWN_MEMBER_ID))

    def _after_removal(self, group: ClassicGroup, now_ms: int, reason: str) -> None:
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)

    # ================================================ ConsumerGroupHeartbeat

    def consumer_group_heartbeat(self, request: ConsumerHeartbeat, lookup: TopicLookup, all_topics: list[str],
                                 now_ms: int, respond: Callable[[dict], None],
                                 group_configs: Mapping[str, str] | None = None) -> None:
        """KIP-848: join (epoch 0), heartbeat, or leave (epoch -1; -2 for a static member that
        will be back) — answered with the member's epoch and, when it changed, its
        assignment, once the records of what changed are committed (at once if nothing did).
        A failed write is answered with the error (the client retries; the group's records
        are all written again at its next change)."""
        classic_before = self.groups.get(request.group_id)
        answer = self._consumer_heartbeat(request, lookup, all_topics, now_ms, group_configs)
        records: list[Record] = []
        if classic_before is not None and request.group_id not in self.groups:
            records.append((encode_key(GroupMetadataKey(request.group_id)), None))    # it changed protocol
        group = self.consumer_groups.get(request.group_id)
        own = group.changed_records(touched=answer["member_id"] or request.member_id) if group is not None else []
        records += own
        if not records:
            return respond(answer)

        def written(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                return respond(answer)
            if group is not None:
                group.forget_records(key for key, _ in own)
            respond({**answer, "error_code": int(append_error(error)), "error_message": None, "member_epoch": -1,
                     "heartbeat_interval": 0, "assignment": None})
        self._write(records, written)

    def _write_consumer_records(self, group: ConsumerGroup, records: list[Record]) -> None:
        """Records of a change no client waits on (an expiry, a protocol change)."""
        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                group.forget_records(key for key, _ in records)      # written again at its next change
        if records:
            self._write(records, written)

    def _consumer_heartbeat(self, request: ConsumerHeartbeat, lookup: TopicLookup, all_topics: list[str],
                            now_ms: int, group_configs: Mapping[str, str] | None) -> dict:
        def error(code: ErrorCode, message: str | None = None) -> dict:
            return {"error_code": int(code), "error_message": message, "member_id": request.member_id or None,
                    "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}
        if not request.group_id:
            return error(ErrorCode.INVALID_REQUEST, "the group id is empty")
        too_long = _too_long_for_a_record(request)
        if too_long:
            return error(ErrorCode.INVALID_REQUEST, f"{too_long} is longer than 32767 bytes")
        subscription_bytes = _subscription_bytes(request)
        if subscription_bytes > SUBSCRIPTION_MAX_BYTES:
            # Kafka's coordinator fails the write (MESSAGE_TOO_LARGE, answered as
            # UNKNOWN_SERVER_ERROR) and rolls the member back; refused before it joins.
            return error(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"the subscribed topic names take {subscription_bytes} bytes, more than the "
                         f"{SUBSCRIPTION_MAX_BYTES} a member's record in __consumer_offsets may take")
        if request.member_epoch == 0 and request.subscribed_topic_names is None \
                and request.subscribed_topic_regex is None:
            return error(ErrorCode.INVALID_REQUEST, "a joining member must name its subscription")
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return error(ErrorCode.UNSUPPORTED_ASSIGNOR, f"assignor {request.server_assignor!r} is not one of "
                                                         f"{', '.join(ASSIGNORS)}")
        classic = self.groups.get(request.group_id)
        if classic is not None:
            if not classic.is_in(GroupState.EMPTY):
                return error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"group {request.group_id} is a classic group with members")
            del self.groups[request.group_id]                  # an empty group changes protocol
        group = self.consumer_groups.get(request.group_id)
        if request.member_epoch < 0:
            return self._consumer_leave(group, request, now_ms)
        if request.member_epoch == 0:
            group = group or self.consumer_groups.setdefault(request.group_id, ConsumerGroup(request.group_id))
            member = self._consumer_join(group, request, error)
            if isinstance(member, dict):
                return member
        else:
            member = group.members.get(request.member_id) if group is not None else None
            if member is None:
                return error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {request.member_id} is not in the group")
            if request.member_epoch != member.member_epoch and not (
                    request.member_epoch == member.previous_member_epoch and request.owned is not None
                    and request.owned <= member.assigned):
                return error(ErrorCode.FENCED_MEMBER_EPOCH, f"member epoch {request.member_epoch} is not "
                                                            f"the member's epoch {member.member_epoch}")
        self._update_consumer_member(group, member, request)
        group.apply_configs(group_configs or {}, self.config.consumer_session_timeout_ms,
                            self.config.consumer_heartbeat_interval_ms)       # GROUP config resource
        member.session_deadline_ms = now_ms + group.session_timeout_ms
        group.refresh(lookup, all_topics)
        group.reconcile(member, request.owned, now_ms)
        assignment = None
        if member.last_sent != member.assigned or request.member_epoch == 0:
            member.last_sent = member.assigned
            by_topic: dict = {}
            for topic_id, partition in sorted(member.assigned, key=lambda x: (str(x[0]), x[1])):
                by_topic.setdefault(topic_id, []).append(partition)
            assignment = {"topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]}
        return {"error_code": 0, "error_message": None, "member_id": member.member_id,
                "member_epoch": member.member_epoch,
                "heartbeat_interval": group.heartbeat_interval_ms, "assignment": assignment}

    def _consumer_join(self, group: ConsumerGroup, request: ConsumerHeartbeat, error):
        member_id = request.member_id or self._new_member_id(request.client_id)
        if request.instance_id is not None:
            for other in list(group.members.values()):
                if other.instance_id != request.instance_id or other.member_id == member_id:
                    continue
                if other.member_epoch != LEAVE_STATIC_EPOCH:
                    return error(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"static member {request.instance_id} is still in the group")
                # KIP-345 for the new protocol: take over the departed static member's place.
                del group.members[other.member_id]
                if other.member_id in group.target:
                    group.target[member_id] = group.target.pop(other.member_id)
                other.member_id, other.member_epoch = member_id, other.previous_member_epoch
                other.last_sent = None
                group.members[member_id] = other
                return other
        old = group.members.pop(member_id, None)               # a fenced member rejoining starts afresh
        if old is not None:
            group.target.pop(member_id, None)
        # Its subscription (required on joining) bumps the group epoch.
        group.members[member_id] = ConsumerMember(member_id, request.instance_id, request.rack_id,
                                                  request.client_id, request.client_host,
                                                  request.rebalance_timeout_ms)
        return group.members[member_id]

    def _update_consumer_member(self, group: ConsumerGroup, member: ConsumerMember,
                                request: ConsumerHeartbeat) -> None:
        changed = False
        if request.subscribed_topic_names is not None and \
                tuple(sorted(request.subscribed_topic_names)) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(request.subscribed_topic_names))
            changed = True
        if request.subscribed_topic_regex is not None and request.subscribed_topic_regex != member.subscribed_topic_regex:
            member.subscribed_topic_regex = request.subscribed_topic_regex or None
            changed = True
        if request.server_assignor is not None and request.server_assignor != member.server_assignor:
            member.server_assignor = request.server_assignor
            changed = True
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if changed:
            group.group_epoch += 1

    def _consumer_leave(self, group: ConsumerGroup | None, request: ConsumerHeartbeat, now_ms: int) -> dict:
        member = group.members.get(request.member_id) if group is not None else None
        if member is None:
            return {"error_code": int(ErrorCode.UNKNOWN_MEMBER_ID), "error_message": None,
                    "member_id": request.member_id, "member_epoch": -1, "heartbeat_interval": 0,
                    "assignment": None}
        if request.member_epoch == LEAVE_STATIC_EPOCH and member.instance_id is not None:
            # A static member leaving for a restart keeps its place for its session timeout.
            member.previous_member_epoch, member.member_epoch = member.member_epoch, LEAVE_STATIC_EPOCH
            member.session_deadline_ms = now_ms + group.session_timeout_ms
        else:
            self._remove_consumer_member(group, member.member_id, "left the group")
        return {"error_code": 0, "error_message": None, "member_id": request.member_id,
                "member_epoch": request.member_epoch, "heartbeat_interval": 0, "assignment": None}

    def _remove_consumer_member(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        logger.info("member %s of consumer group %s %s", member_id, group.group_id, reason)
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1

    def _expire_consumer_members(self, group: ConsumerGroup, now_ms: int) -> bool:
        """Remove the members past their session or revocation deadline; whether any was."""
        removed = False
        for member in list(group.members.values()):
            if now_ms >= member.session_deadline_ms:
                self._remove_consumer_member(group, member.member_id, "timed out (session)")
                removed = True
            elif member.revocation_deadline_ms is not None and now_ms >= member.revocation_deadline_ms:
                self._remove_consumer_member(group, member.member_id,
                                             "did not revoke its partitions within its rebalance timeout")
                removed = True
        return removed

    # =========================================================== OffsetCommit

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: list[OffsetToCommit], now_ms: int,
                       respond: Callable[[dict[TopicPartition, ErrorCode]], None],
                       producer: tuple[int, int] | None = None) -> None:
        """OffsetCommit, or TxnOffsetCommit when ``producer`` (id, epoch) is given: the
        records are then part of that producer's transaction."""
        def all_(error: ErrorCode) -> None:
            respond({o.topic_partition: error for o in offsets})
        if not group_id:
            return all_(ErrorCode.INVALID_GROUP_ID)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = _validate_member_epoch(consumer_group, member_id, generation_id)
        else:
            group = self.groups.get(group_id)
            if group is None:
                if generation_id >= 0 and producer is None:
                    return all_(ErrorCode.ILLEGAL_GENERATION)
                group = self.groups[group_id] = ClassicGroup(group_id, empty_since_ms=self._wall_ms())
            error = self._validate_commit(group, member_id, instance_id, generation_id, now_ms)
        if error != ErrorCode.NONE:
            return all_(error)
        errors: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        commit_timestamp_ms = self._wall_ms()
        for o in offsets:
            metadata = o.metadata or ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors[o.topic_partition] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            records.append((encode_key(OffsetCommitKey(group_id, o.topic_partition.topic, o.topic_partition.partition)),
                            encode_value(OffsetCommitValue(o.offset, o.leader_epoch, metadata, commit_timestamp_ms))))
            errors[o.topic_partition] = ErrorCode.NONE
        if not records:
            return respond(errors)

        def committed(error: ErrorCode) -> None:
            code = append_error(error)
            respond({tp: (code if e == ErrorCode.NONE else e) for tp, e in errors.items()})
        if producer is None:
            self._write(records, committed)
        else:
            self._write(records, committed, producer)

    def _validate_commit(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                         generation_id: int, now_ms: int) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return ErrorCode.NONE                       # a simple consumer's or an admin's commit
        error = _check_generation(group, member_id, instance_id, generation_id)
        if error != ErrorCode.NONE:
            return error
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.NONE

    # ============================================================ OffsetFetch

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                      ) -> dict[TopicPartition, OffsetCommitValue | None]:
        """Committed offsets (None for a partition without one); all of them if ``partitions`` is None."""
        offsets = self.offsets.get(group_id, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    # ===================================================== list / describe

    def list_groups(self) -> list[ClassicGroup]:
        return [g for g in self.groups.values() if not g.is_in(GroupState.DEAD)]

    def list_consumer_groups(self) -> list[ConsumerGroup]:
        return list(self.consumer_groups.values())

    # ================================================ DeleteGroups, OffsetDelete

    def delete_group(self, group_id: str, now_ms: int, respond: Callable[[ErrorCode], None]) -> None:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return respond(ErrorCode.NON_EMPTY_GROUP)
            del self.consumer_groups[group_id]
            self.groups[group_id] = ClassicGroup(group_id, empty_since_ms=self._wall_ms())
            self._write_consumer_records(consumer_group, consumer_group.tombstones())
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return respond(ErrorCode.GROUP_ID_NOT_FOUND)
        if not group.is_in(GroupState.EMPTY):
            return respond(ErrorCode.NON_EMPTY_GROUP)
        records = [(encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)), None)
                   for tp in sorted(self.offsets.get(group_id, {}))]
        records.append((encode_key(GroupMetadataKey(group_id)), None))
        wall_ms = self._wall_ms()
        group.move(GroupEvent.DELETED, now_ms, wall_ms)

        def deleted(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                self._revive(group, wall_ms)
            respond(append_error(error))
        self._write(records, deleted)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition], now_ms: int,
                       respond: Callable[[ErrorCode, dict[TopicPartition, ErrorCode]], None]) -> None:
        consumer_group = self.consumer_groups.get(group_id)
        group = self.groups.get(group_id)
        subscribed: set[str] = set()
        if consumer_group is not None:
            subscribed = {name for name, _, _ in consumer_group.subscription_metadata}
        elif group is None or group.is_in(GroupState.DEAD):
            return respond(ErrorCode.GROUP_ID_NOT_FOUND, {})
        elif not group.is_in(GroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return respond(ErrorCode.NON_EMPTY_GROUP, {})
            for member in group.members.values():
                subscribed |= subscribed_topics(member.metadata(group.protocol_name or ""))
        errors: dict[TopicPartition, ErrorCode] = {}
        records: list[Record] = []
        for tp in partitions:
            if tp.topic in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[tp] = ErrorCode.NONE
            if tp in self.offsets.get(group_id, {}):
                records.append((encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)), None))
        if not records:
            return respond(ErrorCode.NONE, errors)

        def deleted(error: ErrorCode) -> None:
            code = append_error(error)
            respond(code, errors if code == ErrorCode.NONE else {})
        self._write(records, deleted)

    # ================================================================ timers

    def on_tick(self, now_ms: int) -> None:
        for group in list(self.groups.values()):
            self._expire(group, now_ms)
        for consumer_group in self.consumer_groups.values():
            if self._expire_consumer_members(consumer_group, now_ms):
                self._write_consumer_records(consumer_group, consumer_group.changed_records())
        if now_ms >= self._next_offset_expiry_ms:
            self._next_offset_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
            self._expire_offsets(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [self._next_offset_expiry_ms]
        for group in self.groups.values():
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
            deadlines.extend(group.pending_members.values())
            deadlines.extend(m.heartbeat_deadline_ms for m in group.members.values()
                             if m.awaiting_join is None)
        for consumer_group in self.consumer_groups.values():
            for member in consumer_group.members.values():
                deadlines.append(member.session_deadline_ms)
                if member.revocation_deadline_ms is not None:
                    deadlines.append(member.revocation_deadline_ms)
        return min(deadlines)

    def _expire(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_in(GroupState.DEAD):
            return
        for member_id, deadline in list(group.pending_members.items()):
            if now_ms >= deadline:
                del group.pending_members[member_id]
        expired = [m.member_id for m in group.members.values()
                   if m.awaiting_join is None and now_ms >= m.heartbeat_deadline_ms]
        for member_id in expired:
            logger.info("member %s of group %s: session timed out", member_id, group.group_id)
            self._remove_member(group, member_id)
        if expired:
            self._after_removal(group, now_ms, f"session of {', '.join(expired)} timed out")
        if (group.is_in(GroupState.PREPARING_REBALANCE) and group.join_deadline_ms is not None
                and now_ms >= group.join_deadline_ms):
            self._complete_join(group, now_ms)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)
        if (group.is_in(GroupState.COMPLETING_REBALANCE) and group.sync_deadline_ms is not None
                and now_ms >= group.sync_deadline_ms):
            late = [m.member_id for m in group.members.values() if m.awaiting_sync is None]
            for member_id in late:
                self._remove_member(group, member_id)
            self._prepare_rebalance(group, now_ms, f"{', '.join(late)} did not send SyncGroup in time")

    def _expire_offsets(self, now_ms: int) -> None:
        """offsets.retention.minutes, counted from when the group became empty (KIP-211),
        or from the commit for a group that never had members (wall time, as the commit
        timestamps). An empty group left with no offsets is deleted, as Kafka's cleanup does."""
        wall_ms = self._wall_ms()
        records: list[Record] = []
        expired, deleted = 0, []
        for group_id, group in list(self.groups.items()):
            if not group.is_in(GroupState.EMPTY):
                continue
            offsets = self.offsets.get(group_id, {})
            kept = 0
            for tp, value in offsets.items():
                since = group.empty_since_ms if group.protocol_type else value.commit_timestamp_ms
                if since is not None and since + self.config.offsets_retention_ms <= wall_ms:
                    records.append((encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)), None))
                    expired += 1
                else:
                    kept += 1
            if kept == 0:
                records.append((encode_key(GroupMetadataKey(group_id)), None))
                group.move(GroupEvent.DELETED, now_ms, wall_ms)
                deleted.append(group)
        for group_id, consumer_group in list(self.consumer_groups.items()):
            if consumer_group.members:
                continue
            # An empty KIP-848 group: its offsets expire counted from their commits (as
            # Kafka's modern groups'), and with the last one the group is deleted.
            offsets = self.offsets.get(group_id, {})
            old = [tp for tp, value in offsets.items()
                   if value.commit_timestamp_ms + self.config.offsets_retention_ms <= wall_ms]
            records += [(encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)), None) for tp in old]
            expired += len(old)
            if len(old) == len(offsets):
                records += consumer_group.tombstones()
                del self.consumer_groups[group_id]
        if records:
            logger.info("expiring %d committed offsets past offsets.retention.minutes; deleting %d empty groups",
                     expired, len(deleted))

            def written(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    for group in deleted:
                        self._revive(group, wall_ms)
            self._write(records, written)

    # =============================================================== helpers

    def _revive(self, group: ClassicGroup, wall_ms: int) -> None:
        """A deletion whose tombstones were not written: the group is Empty again (since ``wall_ms``)."""
        if self.groups.get(group.group_id) is group:
            self.groups[group.group_id] = ClassicGroup(group.group_id, protocol_type=group.protocol_type,
                                                       generation_id=group.generation_id, empty_since_ms=wall_ms)

    def _group_record(self, group: ClassicGroup) -> Record:
        return encode_key(GroupMetadataKey(group.group_id)), encode_value(group.to_record(self._wall_ms()))


MEMBER_ID_PREFIX_MAX_BYTES = 0x7FFF - 64
# The subscribed topic names one member's record may hold: a quarter of a batch at
# Kafka's default max.message.bytes (1048588), about 7,900 names of 30 characters; the
# change that writes the record must fit in one batch with the group's other changes.
SUBSCRIPTION_MAX_BYTES = 1048588 // 4


def _fit_member_id_prefix(prefix: str) -> str:
    data = prefix.encode("utf-8")
    if len(data) <= MEMBER_ID_PREFIX_MAX_BYTES:
        return prefix
    return data[:MEMBER_ID_PREFIX_MAX_BYTES].decode("utf-8", errors="ignore")


def _subscription_bytes(request: ConsumerHeartbeat) -> int:
    """What the subscribed topic names take in the member's record (each a compact string)."""
    return sum(len(name.encode("utf-8")) + 3 for name in request.subscribed_topic_names or ())


def _too_long_for_a_record(request: ConsumerHeartbeat) -> str | None:
    """The field of a heartbeat that Kafka's records could not hold (a string of more than
    32767 UTF-8 bytes; Kafka's own request parser refuses those), or None."""
    fields = [("the group id", request.group_id), ("the member id", request.member_id),
              ("the instance id", request.instance_id), ("the rack id", request.rack_id),
              ("the subscribed topic regex", request.subscribed_topic_regex),
              ("the server assignor", request.server_assignor), ("the client id", request.client_id),
              ("the client host", request.client_host),
              *(("a subscribed topic name", name) for name in request.subscribed_topic_names or ())]
    for what, value in fields:
        if value is not None and len(value) > 0x7FFF // 4 and len(value.encode("utf-8")) > 0x7FFF:
            return what
    return None


def _validate_member_epoch(group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode:
    """An OffsetCommit in a KIP-848 group carries the member's epoch."""
    if not member_id and member_epoch < 0:
        return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE


def _check_generation(group: ClassicGroup, member_id: str, instance_id: str | None,
                      generation_id: int) -> ErrorCode:
    """A member of this generation of a live group (Heartbeat, SyncGroup, OffsetCommit)."""
    if group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    error = _check_member(group, member_id, instance_id)
    if error == ErrorCode.NONE and generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return error


def _check_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
    if instance_id is not None:
        known = group.static_members.get(instance_id)
        if known is not None and known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE


def _answer(respond: Respond | None, response: dict) -> None:
    if respond is not None:
        respond(response)


def _join_error(error: ErrorCode, member_id: str = "") -> dict:
    return {"error_code": int(error), "generation_id": -1, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def _sync_error(error: ErrorCode) -> dict:
    return {"error_code": int(error), "protocol_type": None, "protocol_name": None, "assignment": b""}
