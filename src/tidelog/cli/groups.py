"""``tidelog groups list|describe|reset-offsets|delete|delete-offsets`` over the wire protocol.

Theory of operation. Like ``tidelog topics``, this speaks only the Kafka
protocol, so it works against any Kafka broker; its output follows Kafka's
``kafka-consumer-groups.sh``.

* A group's requests go to its coordinator: FindCoordinator at the bootstrap
  broker names it, then the request goes there. While either answer is
  NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS
  (the offsets topic being created, a coordinator moving or loading), or the
  coordinator cannot be reached, the pair is retried every
  ``RETRY_BACKOFF_S`` until ``--timeout`` runs out, then the command fails
  saying so (``Session.at_coordinator``).
* ``list`` asks every broker of the cluster for ListGroups (each knows only the
  groups it coordinates) and merges the answers, as Kafka's AdminClient does.
* ``describe`` reads the group and its committed offsets (OffsetFetch) at the
  coordinator, and each partition's log end offset (the high watermark a
  consumer can reach) with ListOffsets at the partition's leader. A KIP-848
  group is read with ConsumerGroupDescribe, which lists each member's
  partitions; a classic one (ConsumerGroupDescribe answers GROUP_ID_NOT_FOUND,
  or the broker predates it) with DescribeGroups, whose member assignments are
  ConsumerProtocolAssignment bytes: int16 version; an int32-counted array of
  topic string and int32-counted array of int32 partitions; user data bytes.
* ``reset-offsets`` computes the new offsets from ListOffsets (earliest,
  latest, or by timestamp) and the committed offsets, clamped to each
  partition's [log start, log end]; it only prints them unless ``--execute``,
  which commits them with OffsetCommit as an admin does (generation -1, empty
  member id). The broker accepts that only while the group has no members, so
  a group that is not Empty is refused up front.
* ``delete`` sends DeleteGroups and ``delete-offsets`` OffsetDelete, each at
  the group's coordinator.

OffsetFetch and OffsetCommit are capped at v9: v10 names topics by id.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable

from tidelog.protocol.client_config import load_command_config
from tidelog.cli.progress import Progress
from tidelog.cli.topics import CONSUMER_REPLICA_ID, EARLIEST, LATEST, _error, _metadata, _offsets
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import ProtocolError

CLIENT_ID = "tidelog-groups"
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
RETRY_BACKOFF_S = 0.2
OFFSETS_MAX_VERSION = 9                  # OffsetFetch / OffsetCommit v10 name topics by id
LIST_GROUPS_STATES_VERSION = 4
GROUP_KEY = 0
ADMIN_GENERATION = -1
DEAD, EMPTY = "Dead", "Empty"
GROUP_STATES = (EMPTY, "PreparingRebalance", "CompletingRebalance", "Stable", "Assigning", "Reconciling", DEAD)
CONSUMER_PROTOCOL_TYPE = "consumer"


class CommandError(Exception):
    """What went wrong, for stderr; the command exits with status 1."""


async def run(args) -> int:
    return await run_verb(args, globals())


async def run_verb(args, verbs: dict, key_type: int = GROUP_KEY, noun: str = "group") -> int:
    """Connect as ``args`` say and run the verb's ``_<verb>(session, args)`` from ``verbs``
    (also ``tidelog transactions``'); every failure is a message and exit status 1."""
    host, _, port = args.bootstrap_server.split(",")[0].rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        print(f"expected HOST:PORT, got {args.bootstrap_server!r}", file=sys.stderr)
        return 1
    try:
        security = load_command_config(getattr(args, "command_config", None))
    except (OSError, KafkaError) as e:
        print(f"error: cannot use --command-config {args.command_config}: {e}", file=sys.stderr)
        return 1
    session = Session((host or "127.0.0.1", int(port)), args.timeout / 1000, security, key_type, noun)
    try:
        await session.bootstrap()
    except (OSError, KafkaError) as e:
        print(f"cannot connect to {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    try:
        return await verbs[f"_{args.verb.replace('-', '_')}"](session, args)
    except (CommandError, OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ProtocolError as e:
        print(f"error: the broker's answer cannot be read: {e}", file=sys.stderr)
        return 1
    finally:
        session.close()


# ================================================================== the cluster

@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.node_id})"


class Session:
    """One connection per broker (made again if it broke), and coordinator retries.
    ``key_type`` is FindCoordinator's (0: a group; 1: a transactional id), ``noun`` how
    error messages name the key."""

    def __init__(self, bootstrap: tuple[str, int], timeout_s: float, security=None,
                 key_type: int = GROUP_KEY, noun: str = "group"):
        self._bootstrap = bootstrap
        self.key_type = key_type
        self.noun = noun
        self.timeout_s = timeout_s
        self.security = security                  # --command-config (TLS, SASL)
        self._peers: dict[tuple[str, int], KafkaConnection] = {}

    async def bootstrap(self) -> KafkaConnection:
        return await self.connection(*self._bootstrap)

    async def connection(self, host: str, port: int) -> KafkaConnection:
        peer = self._peers.get((host, port))
        if peer is None or peer.closed:
            peer = await KafkaConnection.connect(host, port, client_id=CLIENT_ID, security=self.security)
            self._peers[(host, port)] = peer
        return peer

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()

    async def brokers(self) -> dict[int, tuple[str, int]]:
        response = await _metadata(await self.bootstrap(), [])
        return {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}

    async def at_coordinator(self, group: str, call: Callable[[KafkaConnection], Awaitable[tuple]]
                             ) -> tuple[Coordinator, ErrorCode, object]:
        """``call(connection)`` → (error, value) at ``group``'s coordinator, retried while the
        coordinator is unknown, moving or loading, until the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        attempts = 0
        while True:
            attempts += 1
            try:
                error, coordinator = await self._find_coordinator(group)
                if error == ErrorCode.NONE:
                    error, value = await call(await self.connection(coordinator.host, coordinator.port))
                    if error not in RETRIABLE:
                        return coordinator, error, value
                elif error not in RETRIABLE:
                    raise CommandError(f"cannot find the coordinator of {self.noun} {group!r}: {error.name}")
                problem = error.name
            except OSError as e:
                problem = f"connection failed: {e}"
            if loop.time() + RETRY_BACKOFF_S > deadline:
                raise CommandError(f"the coordinator of {self.noun} {group!r} is not available after {attempts} "
                                   f"attempts in {self.timeout_s:g} s (last error: {problem})")
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _find_coordinator(self, group: str) -> tuple[ErrorCode, Coordinator | None]:
        response = await (await self.bootstrap()).request(ApiKey.FIND_COORDINATOR, {
            "key": group, "key_type": self.key_type, "coordinator_keys": [group]})
        found = response.coordinators[0] if hasattr(response, "coordinators") else response
        error = _error(found.error_code)
        if error != ErrorCode.NONE:
            return error, None
        return error, Coordinator(int(found.node_id), found.host, int(found.port))

    async def log_offsets(self, partitions: Iterable[TopicPartition], timestamp: int
                          ) -> dict[TopicPartition, int | None]:
        """ListOffsets at each partition's leader: EARLIEST, LATEST or the first offset at or
        after a timestamp (-1: none). None where the leader could not answer."""
        partitions = list(partitions)
        response = await _metadata(await self.bootstrap(), sorted({tp.topic for tp in partitions}))
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        leaders = {TopicPartition(t.name, int(p.partition_index)): int(p.leader_id)
                   for t in response.topics for p in t.partitions}
        by_leader: dict[tuple[int, str], list[int]] = {}
        for tp in partitions:
            by_leader.setdefault((leaders.get(tp, -1), tp.topic), []).append(tp.partition)
        found: dict[TopicPartition, int | None] = {tp: None for tp in partitions}
        for (leader, topic), ids in by_leader.items():
            if leader in brokers:
                offsets = await _offsets(await self.connection(*brokers[leader]), topic, ids,
                                         CONSUMER_REPLICA_ID, timestamp)
                found.update((TopicPartition(topic, i), offsets.get(i)) for i in ids)
        return found

    async def resolve(self, specs: list[str]) -> list[TopicPartition]:
        """``TOPIC`` (all its partitions, from Metadata) or ``TOPIC:P,P,...``."""
        named: list[TopicPartition] = []
        whole: list[str] = []
        for spec in specs:
            topic, sep, listed = spec.partition(":")
            if not topic:
                raise CommandError(f"no topic in {spec!r}")
            if not sep:
                whole.append(topic)
                continue
            try:
                named += [TopicPartition(topic, int(p)) for p in listed.split(",")]
            except ValueError:
                raise CommandError(f"expected TOPIC:PARTITION[,PARTITION...], got {spec!r}") from None
        if whole:
            response = await _metadata(await self.bootstrap(), whole)
            for topic in response.topics:
                error = _error(topic.error_code)
                if error != ErrorCode.NONE:
                    raise CommandError(f"topic {topic.name!r}: {error.name} "
                                       f"(name partitions as {topic.name}:P,... if it was deleted)")
                named += [TopicPartition(topic.name, int(p.partition_index)) for p in topic.partitions]
        return sorted(set(named))


# ================================================================== one group

@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: list[TopicPartition]


@dataclass
class Group:
    group_id: str
    coordinator: Coordinator
    state: str                     # "Dead" for a group that does not exist
    protocol_type: str
    assignor: str
    members: list[Member] = field(default_factory=list)
    committed: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.state != DEAD


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of a ConsumerProtocolAssignment (any version; user data ignored)."""
    partitions: list[TopicPartition] = []
    if not data:
        return partitions
    try:
        (topics,) = struct.unpack_from(">i", data, 2)
        pos = 6
        for _ in range(topics):
            (length,) = struct.unpack_from(">h", data, pos)
            if length < 0 or pos + 2 + length > len(data):
                raise ValueError("a topic name runs past the end")
            topic = bytes(data[pos + 2:pos + 2 + length]).decode("utf-8")
            (count,) = struct.unpack_from(">i", data, pos + 2 + length)
            pos += 6 + length
            partitions += [TopicPartition(topic, p) for p in struct.unpack_from(f">{max(count, 0)}i", data, pos)]
            pos += 4 * max(count, 0)
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed consumer assignment: {e}") from None
    return partitions


async def _fetch_offsets(connection: KafkaConnection, group: str
                         ) -> tuple[ErrorCode, dict[TopicPartition, int]]:
    """All of ``group``'s committed offsets (OffsetFetch, any version from v2)."""
    version = min(connection.version_for(ApiKey.OFFSET_FETCH), OFFSETS_MAX_VERSION)
    response = await connection.request(ApiKey.OFFSET_FETCH, {
        "group_id": group, "topics": None, "require_stable": False,
        "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}]}, version)
    answer = response.groups[0] if hasattr(response, "groups") else response
    error = _error(answer.error_code)
    committed = {}
    for topic in answer.topics:
        for p in topic.partitions:
            if _error(p.error_code) == ErrorCode.NONE and int(p.committed_offset) >= 0:
                committed[TopicPartition(topic.name, int(p.partition_index))] = int(p.committed_offset)
    return error, committed


async def describe_group(session: Session, group_id: str) -> Group:
    """The group as its coordinator sees it, with its committed offsets."""
    async def call(connection: KafkaConnection):
        error, described = await _describe_at(connection, group_id)
        if error != ErrorCode.NONE:
            return error, None
        error, committed = await _fetch_offsets(connection, group_id)
        return error, (described, committed)
    coordinator, error, value = await session.at_coordinator(group_id, call)
    if error == ErrorCode.GROUP_ID_NOT_FOUND:
        return Group(group_id, coordinator, DEAD, "", "")
    if error != ErrorCode.NONE:
        raise CommandError(f"cannot describe group {group_id!r}: {error.name}")
    (state, protocol_type, assignor, members), committed = value
    return Group(group_id, coordinator, state, protocol_type, assignor, members, committed)


async def _describe_at(connection: KafkaConnection, group_id: str) -> tuple[ErrorCode, tuple | None]:
    """(state, protocol type, assignor, members) at the coordinator. ConsumerGroupDescribe
    describes a KIP-848 group and answers GROUP_ID_NOT_FOUND for any other; DescribeGroups
    describes a classic one, whose members' assignments are ConsumerProtocolAssignment bytes."""
    if ApiKey.CONSUMER_GROUP_DESCRIBE in connection.api_versions:
        response = await connection.request(ApiKey.CONSUMER_GROUP_DESCRIBE, {
            "group_ids": [group_id], "include_authorized_operations": False})
        described = response.groups[0]
        error = _error(described.error_code)
        if error != ErrorCode.GROUP_ID_NOT_FOUND:
            members = [Member(m.member_id, m.client_id, m.client_host, sorted(
                TopicPartition(t.topic_name, int(p)) for t in m.assignment.topic_partitions for p in t.partitions))
                for m in described.members]
            return error, (described.group_state, CONSUMER_PROTOCOL_TYPE, described.assignor_name, members)
    response = await connection.request(ApiKey.DESCRIBE_GROUPS, {
        "groups": [group_id], "include_authorized_operations": False})
    described = response.groups[0]
    protocol_type = described.protocol_type or ""
    members = []
    for m in described.members:
        partitions = []
        if protocol_type == CONSUMER_PROTOCOL_TYPE:
            try:
                partitions = decode_assignment(bytes(m.member_assignment))
            except ValueError as e:
                raise CommandError(f"group {group_id!r}, member {m.member_id}: {e}") from None
        members.append(Member(m.member_id, m.client_id, m.client_host, sorted(partitions)))
    return _error(described.error_code), (described.group_state, protocol_type, described.protocol_data or "",
                                          members)


def _existing(group: Group) -> Group:
    if not group.exists:
        raise CommandError(f"consumer group {group.group_id!r} does not exist")
    return group


def _table(header: list[str], rows: list[list]) -> None:
    cells = [header] + [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


# ================================================================== the verbs

async def _list(session: Session, args) -> int:
    # Kafka's ListGroups filter compares states as they are spelled.
    spelled = {state.lower(): state for state in GROUP_STATES}
    wanted = set()
    for state in filter(None, (s.strip() for s in (args.state or "").split(","))):
        if state.lower() not in spelled:
            raise CommandError(f"unknown group state {state!r} (one of {', '.join(GROUP_STATES)})")
        wanted.add(spelled[state.lower()])
    loop = asyncio.get_running_loop()
    found: dict[str, tuple[str | None, str]] = {}
    status = 0
    for node_id, (host, port) in sorted((await session.brokers()).items()):
        deadline = loop.time() + session.timeout_s
        try:
            connection = await session.connection(host, port)
            if wanted and connection.version_for(ApiKey.LIST_GROUPS) < LIST_GROUPS_STATES_VERSION:
                raise CommandError(f"broker {node_id} cannot filter groups by state (ListGroups v4, Kafka 2.6)")
            while True:
                response = await connection.request(ApiKey.LIST_GROUPS, {
                    "states_filter": sorted(wanted), "types_filter": []})
                error = _error(response.error_code)
                if error != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or loop.time() + RETRY_BACKOFF_S > deadline:
                    break
                await asyncio.sleep(RETRY_BACKOFF_S)
        except OSError as e:
            print(f"error: cannot list the groups of broker {node_id} at {host}:{port}: {e}", file=sys.stderr)
            status = 1
            continue
        if error != ErrorCode.NONE:
            print(f"error: broker {node_id} could not list its groups: {error.name}", file=sys.stderr)
            status = 1
        for g in response.groups:
            found[g.group_id] = (getattr(g, "group_state", None), g.protocol_type)
    if found:
        _table(["GROUP", "STATE", "PROTOCOL-TYPE"],
               [[group_id, state, protocol_type] for group_id, (state, protocol_type) in sorted(found.items())])
    return status


async def _describe(session: Session, args) -> int:
    for i, group_id in enumerate(args.group):
        if i:
            print()
        group = _existing(await describe_group(session, group_id))
        if args.state:
            _table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                   [[group.group_id, group.coordinator, group.assignor, group.state, len(group.members)]])
        elif args.members:
            if not group.members:
                print(f"Consumer group {group_id!r} has no active members.")
                continue
            _table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
                   [[group_id, m.member_id, m.host, m.client_id, len(m.partitions)] for m in group.members])
        else:
            await _describe_offsets(session, group)
    return 0


async def _describe_offsets(session: Session, group: Group) -> None:
    if group.state in ("PreparingRebalance", "CompletingRebalance"):
        print(f"Warning: consumer group {group.group_id!r} is rebalancing.")
    elif not group.members:
        print(f"Consumer group {group.group_id!r} has no active members.")
    owner = {tp: m for m in group.members for tp in m.partitions}
    partitions = sorted(set(owner) | set(group.committed))
    ends = await session.log_offsets(partitions, LATEST) if partitions else {}
    rows = []
    for tp in partitions:
        committed, end = group.committed.get(tp), ends.get(tp)
        lag = end - committed if committed is not None and end is not None else None
        member = owner.get(tp)
        rows.append([group.group_id, tp.topic, tp.partition, committed, end, lag,
                     *([member.member_id, member.host, member.client_id] if member else [None] * 3)])
    rows += [[group.group_id, None, None, None, None, None, m.member_id, m.host, m.client_id]
             for m in group.members if not m.partitions]
    if rows:
        _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID"], rows)


async def _reset_offsets(session: Session, args) -> int:
    partitions = await session.resolve(args.topic)
    group = await describe_group(session, args.group)
    if args.execute and group.state not in (EMPTY, DEAD):
        raise CommandError(
            f"cannot reset the offsets of group {args.group!r}: it is {group.state} with "
            f"{len(group.members)} active member(s); offsets can only be reset while the group is Empty "
            f"(stop its consumers first)")
    with Progress(f"reading the log offsets of {len(partitions)} partitions"):
        targets = await _new_offsets(session, args, partitions, group.committed)
    _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
           [[args.group, tp.topic, tp.partition, offset] for tp, offset in targets.items()])
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)", file=sys.stderr)
        return 0
    with Progress(f"committing {len(targets)} offsets for group {args.group}"):
        await _commit(session, args.group, targets)
    return 0


async def _new_offsets(session: Session, args, partitions: list[TopicPartition],
                       committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    earliest = await session.log_offsets(partitions, EARLIEST)
    latest = await session.log_offsets(partitions, LATEST)
    unknown = [str(tp) for tp in partitions if earliest[tp] is None or latest[tp] is None]
    if unknown:
        raise CommandError(f"cannot read the log offsets of {', '.join(unknown)} (no leader?)")
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in partitions}
    elif args.shift_by is not None:
        missing = [str(tp) for tp in partitions if tp not in committed]
        if missing:
            raise CommandError(f"cannot shift the offsets of {', '.join(missing)}: "
                               f"group {args.group!r} has no committed offset there")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    else:
        at = await session.log_offsets(partitions, _timestamp_ms(args.to_datetime))
        missing = [str(tp) for tp in partitions if at[tp] is None]
        if missing:
            raise CommandError(f"cannot look up offsets by time in {', '.join(missing)}")
        # No record at or after that time: the end of the log.
        wanted = {tp: at[tp] if at[tp] >= 0 else latest[tp] for tp in partitions}
    targets = {}
    for tp in partitions:
        offset = min(max(wanted[tp], earliest[tp]), latest[tp])
        if offset != wanted[tp]:
            where = "log start" if offset == earliest[tp] else "log end"
            print(f"warning: {tp}: offset {wanted[tp]} is outside [{earliest[tp]}, {latest[tp]}]; "
                  f"using the {where} offset {offset}", file=sys.stderr)
        targets[tp] = offset
    return targets


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"expected an ISO-8601 date and time such as 2024-05-01T12:00:00+00:00, "
                           f"got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


async def _commit(session: Session, group_id: str, offsets: dict[TopicPartition, int]) -> None:
    by_topic: dict[str, list] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": ""})
    body = {"group_id": group_id, "generation_id_or_member_epoch": ADMIN_GENERATION, "member_id": "",
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}

    async def call(connection: KafkaConnection):
        version = min(connection.version_for(ApiKey.OFFSET_COMMIT), OFFSETS_MAX_VERSION)
        response = await connection.request(ApiKey.OFFSET_COMMIT, body, version)
        errors = {TopicPartition(t.name, int(p.partition_index)): _error(p.error_code)
                  for t in response.topics for p in t.partitions}
        retry = next((e for e in errors.values() if e in RETRIABLE), ErrorCode.NONE)
        return retry, errors
    _, _, errors = await session.at_coordinator(group_id, call)
    failed = {tp: e for tp, e in errors.items() if e != ErrorCode.NONE}
    if any(e in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION) for e in failed.values()):
        raise CommandError(f"the coordinator refused the offsets of group {group_id!r}: "
                           f"the group has active members again (stop its consumers first)")
    if failed:
        raise CommandError(f"committing the offsets of group {group_id!r} failed: "
                           + ", ".join(f"{tp}: {e.name}" for tp, e in sorted(failed.items())))


async def _delete(session: Session, args) -> int:
    status = 0
    for group_id in args.group:
        async def delete(connection: KafkaConnection, group_id: str = group_id):
            response = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group_id]})
            return _error(response.results[0].error_code), None
        _, error, _ = await session.at_coordinator(group_id, delete)
        if error == ErrorCode.NONE:
            print(f"Deleted consumer group {group_id!r}.")
            continue
        status = 1
        reason = {ErrorCode.GROUP_ID_NOT_FOUND: "it does not exist",
                  ErrorCode.NON_EMPTY_GROUP: "it has active members (stop its consumers first)"}.get(error, "")
        print(f"error: cannot delete consumer group {group_id!r}: {reason or error.name}"
              f"{f' ({error.name})' if reason else ''}", file=sys.stderr)
    return status


async def _delete_offsets(session: Session, args) -> int:
    partitions = await session.resolve(args.topic)
    by_topic: dict[str, list] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
    body = {"group_id": args.group, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def call(connection: KafkaConnection):
        response = await connection.request(ApiKey.OFFSET_DELETE, body)
        return _error(response.error_code), {
            TopicPartition(t.name, int(p.partition_index)): _error(p.error_code)
            for t in response.topics for p in t.partitions}
    _, error, errors = await session.at_coordinator(args.group, call)
    if error == ErrorCode.GROUP_ID_NOT_FOUND:
        raise CommandError(f"consumer group {args.group!r} does not exist")
    if error == ErrorCode.NON_EMPTY_GROUP:
        raise CommandError(f"cannot delete offsets of group {args.group!r}: it has active members "
                           f"and is not a consumer group (NON_EMPTY_GROUP)")
    if error != ErrorCode.NONE:
        raise CommandError(f"cannot delete offsets of group {args.group!r}: {error.name}")

    def status(e: ErrorCode) -> str:
        if e == ErrorCode.NONE:
            return "Successful"
        if e == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC:
            return "Error: the group's active members are subscribed to this topic (GROUP_SUBSCRIBED_TO_TOPIC)"
        return f"Error: {e.name}"
    _table(["TOPIC", "PARTITION", "STATUS"],
           [[tp.topic, tp.partition, status(errors.get(tp, ErrorCode.NONE))] for tp in partitions])
    return 1 if any(e != ErrorCode.NONE for e in errors.values()) else 0
