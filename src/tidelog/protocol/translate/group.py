"""The group APIs on the wire ↔ the request layer's group requests (docs/broker.md).

Theory of operation. ``*_request(version, entity, …)`` reads a decoded kio
request of any served version into a domain request of
``tidelog.broker.requests.group``; the fields a version lacks get Kafka's
meaning of their absence (no group instance id before JoinGroup v5, the session
timeout as rebalance timeout before v1, one member leaving before LeaveGroup
v3, every committed offset for a null topic list). ``*_response(version, result)``
writes the layer's version-free result as that version's response dict (the codec
keeps the fields the version has): OffsetFetch v0-7 answer one group at the top
level (v0-1 with its error on every partition), v8+ a list of groups; LeaveGroup
v0-2 carry the one member's error as the group's. ``*_body(domain, version)``
goes the other way for requests, for round-trip tests and tidelog's own clients.

Bytes that do not decode never get here: the codec closes the connection
(ProtocolError), as Kafka's parser does; trailing bytes after the last field a
version has are ignored, as Kafka ignores them.
"""

from __future__ import annotations

from tidelog.broker.requests.group import (
    GROUP_KEY,
    ConsumerHeartbeat,
    DescribeGroups,
    Heartbeat,
    JoinRequest,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    OffsetToCommit,
    SyncGroup,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import millis

# The versions the broker serves, by API (what ApiVersions advertises). TxnOffsetCommit v5
# (transaction.version 2) goes through TxnApis.register_txn_offset_commit first, which adds
# the offsets partition to the transaction and then calls the group handler.
SERVED = {
    ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5), ApiKey.OFFSET_FETCH: (1, 9), ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.LIST_GROUPS: (0, 5), ApiKey.DESCRIBE_GROUPS: (0, 5), ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}


def _by_topic(partitions) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


# ================================================================ FindCoordinator

def find_coordinator_keys(version: int, entity) -> tuple[int, list[str]]:
    """(key type, keys): v4+ batch keys (KIP-699), earlier versions one."""
    key_type = int(getattr(entity, "key_type", GROUP_KEY))
    if version >= 4:
        return key_type, list(entity.coordinator_keys or [])
    return key_type, [entity.key]


def find_coordinator_body(key_type: int, keys: list[str], version: int) -> dict:
    if version >= 4:
        return {"key_type": key_type, "coordinator_keys": keys}
    (key,) = keys
    return {"key": key, "key_type": key_type}


def find_coordinator_response(version: int, found: list[dict]) -> dict:
    """``found``: one {key, node_id, host, port, error_code, error_message} per key."""
    if version >= 4:
        return {"throttle_time": 0, "coordinators": found}
    one = found[0]
    return {"throttle_time": 0, "error_code": one["error_code"], "error_message": one["error_message"],
            "node_id": one["node_id"], "host": one["host"], "port": one["port"]}


# ================================================================ JoinGroup, SyncGroup

def join_group_request(version: int, entity, client_id: str | None, client_host: str) -> JoinRequest:
    session_timeout_ms = millis(entity.session_timeout)
    rebalance = getattr(entity, "rebalance_timeout", None)          # v1+; before, the session timeout
    return JoinRequest(
        group_id=entity.group_id, member_id=entity.member_id or "",
        group_instance_id=getattr(entity, "group_instance_id", None), session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=millis(rebalance) if rebalance is not None else session_timeout_ms,
        protocol_type=entity.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in entity.protocols],
        client_id=client_id or "", client_host=client_host, version=version)


def join_group_body(join: JoinRequest) -> dict:
    return {"group_id": join.group_id, "session_timeout": join.session_timeout_ms,
            "rebalance_timeout": join.rebalance_timeout_ms, "member_id": join.member_id,
            "group_instance_id": join.group_instance_id, "protocol_type": join.protocol_type,
            "protocols": [{"name": name, "metadata": metadata} for name, metadata in join.protocols],
            "reason": None}


def sync_group_request(version: int, entity) -> SyncGroup:
    return SyncGroup(entity.group_id, int(entity.generation_id), entity.member_id,
                     getattr(entity, "group_instance_id", None), getattr(entity, "protocol_type", None),
                     getattr(entity, "protocol_name", None),
                     {a.member_id: bytes(a.assignment) for a in entity.assignments})


def sync_group_body(sync: SyncGroup) -> dict:
    return {"group_id": sync.group_id, "generation_id": sync.generation_id, "member_id": sync.member_id,
            "group_instance_id": sync.group_instance_id, "protocol_type": sync.protocol_type,
            "protocol_name": sync.protocol_name,
            "assignments": [{"member_id": m, "assignment": a} for m, a in sync.assignments.items()]}


# ================================================================ Heartbeat, LeaveGroup

def heartbeat_request(version: int, entity) -> Heartbeat:
    return Heartbeat(entity.group_id, int(entity.generation_id), entity.member_id,
                     getattr(entity, "group_instance_id", None))


def heartbeat_body(heartbeat: Heartbeat) -> dict:
    return {"group_id": heartbeat.group_id, "generation_id": heartbeat.generation_id,
            "member_id": heartbeat.member_id, "group_instance_id": heartbeat.group_instance_id}


def leave_group_request(version: int, entity) -> LeaveGroup:
    if version >= 3:                                   # KIP-345: a batch of members
        return LeaveGroup(entity.group_id, tuple((m.member_id or "", getattr(m, "group_instance_id", None))
                                                 for m in entity.members))
    return LeaveGroup(entity.group_id, ((entity.member_id, None),))


def leave_group_body(leave: LeaveGroup, version: int) -> dict:
    if version >= 3:
        return {"group_id": leave.group_id, "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "reason": None}
            for member_id, instance_id in leave.members]}
    return {"group_id": leave.group_id, "member_id": leave.members[0][0]}


def leave_group_response(version: int, result: dict) -> dict:
    error = result["error_code"]
    if version < 3 and error == 0 and result["members"]:
        error = result["members"][0]["error_code"]    # v0-2: the one member's error is the group's
    return {"throttle_time": 0, "error_code": error, "members": result["members"]}


# ================================================================ OffsetCommit, OffsetFetch

def offset_commit_request(version: int, entity, producer: tuple[int, int] | None = None) -> OffsetCommit:
    """OffsetCommit (``producer`` None) or TxnOffsetCommit; ``retention_time`` (v2-4) is
    not honoured, as Kafka since 2.1 (KIP-211)."""
    generation = int(getattr(entity, "generation_id_or_member_epoch", getattr(entity, "generation_id", -1)))
    offsets = tuple(OffsetToCommit(TopicPartition(t.name, int(p.partition_index)), int(p.committed_offset),
                                   int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
                    for t in entity.topics for p in t.partitions)
    return OffsetCommit(entity.group_id, getattr(entity, "member_id", "") or "",
                        getattr(entity, "group_instance_id", None), generation, offsets, producer)


def offset_commit_body(commit: OffsetCommit) -> dict:
    topics: dict[str, list] = {}
    for o in commit.offsets:
        topics.setdefault(o.topic_partition.topic, []).append({
            "partition_index": o.topic_partition.partition, "committed_offset": o.offset,
            "committed_leader_epoch": o.leader_epoch, "committed_metadata": o.metadata})
    return {"group_id": commit.group_id, "generation_id_or_member_epoch": commit.generation_id,
            "member_id": commit.member_id, "group_instance_id": commit.group_instance_id, "retention_time": -1,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def offset_commit_response(commit: OffsetCommit, errors: dict[TopicPartition, ErrorCode]) -> dict:
    """One answer per partition, by topic, in the request's order."""
    topics: dict[str, list] = {}
    for o in commit.offsets:
        tp = o.topic_partition
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition,
                                                "error_code": int(errors.get(tp, ErrorCode.NONE))})
    return {"throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


def offset_fetch_requests(version: int, entity) -> list[OffsetFetch]:
    """v8+ ask for several groups (KIP-709); earlier versions for one. A null topic list
    (v2+) asks for every committed offset of the group."""
    stable = bool(getattr(entity, "require_stable", False))           # v7+ (KIP-447)

    def asked(topics):
        return None if topics is None else tuple(TopicPartition(t.name, int(i))
                                                 for t in topics for i in t.partition_indexes)
    if version >= 8:
        return [OffsetFetch(g.group_id, asked(g.topics), stable) for g in entity.groups]
    return [OffsetFetch(entity.group_id, asked(entity.topics), stable)]


def offset_fetch_body(fetches: list[OffsetFetch], version: int) -> dict:
    def topics(partitions):
        return None if partitions is None else [{"name": name, "partition_indexes": indexes}
                                                for name, indexes in _by_topic(partitions).items()]
    if version >= 8:
        return {"groups": [{"group_id": f.group_id, "member_id": None, "member_epoch": -1,
                            "topics": topics(f.partitions)} for f in fetches],
                "require_stable": fetches[0].require_stable}
    (fetch,) = fetches
    return {"group_id": fetch.group_id, "topics": topics(fetch.partitions), "require_stable": fetch.require_stable}


def offset_fetch_response(version: int, groups: list[dict]) -> dict:
    if version >= 8:
        return {"throttle_time": 0, "groups": groups}
    (group,) = groups
    error = group["error_code"]
    if version < 2 and error != 0:
        for topic in group["topics"]:              # v0-1 have no group-level error: every partition has it
            for p in topic["partitions"]:
                p["error_code"] = error
    return {"throttle_time": 0, "topics": group["topics"], "error_code": error}


def offset_delete_request(version: int, entity) -> OffsetDelete:
    return OffsetDelete(entity.group_id, tuple(TopicPartition(t.name, int(p.partition_index))
                                               for t in entity.topics for p in t.partitions))


def offset_delete_body(delete: OffsetDelete) -> dict:
    return {"group_id": delete.group_id, "topics": [
        {"name": name, "partitions": [{"partition_index": p} for p in indexes]}
        for name, indexes in _by_topic(delete.partitions).items()]}


def offset_delete_response(request: OffsetDelete, error: ErrorCode, errors: dict) -> dict:
    topics: dict[str, list] = {}
    for tp, code in errors.items():
        topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": int(code)})
    return {"throttle_time": 0, "error_code": int(error),
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


# ================================================================ ListGroups, DescribeGroups, DeleteGroups

def list_groups_request(version: int, entity) -> ListGroups:
    return ListGroups(frozenset(s.lower() for s in getattr(entity, "states_filter", None) or ()),   # v4+
                      frozenset(t.lower() for t in getattr(entity, "types_filter", None) or ()))    # v5+


def list_groups_body(request: ListGroups) -> dict:
    return {"states_filter": sorted(request.states), "types_filter": sorted(request.types)}


def describe_groups_request(version: int, entity) -> tuple[DescribeGroups, bool]:
    """The groups, and whether their authorized operations are asked for (v3+, KIP-430)."""
    return DescribeGroups(tuple(entity.groups)), bool(getattr(entity, "include_authorized_operations", False))


def describe_groups_body(describe: DescribeGroups, include_authorized_operations: bool) -> dict:
    return {"groups": list(describe.group_ids), "include_authorized_operations": include_authorized_operations}


def delete_groups_response(group_ids, results: dict[str, ErrorCode]) -> dict:
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": int(results[g])} for g in group_ids]}


# ================================================================ KIP-848

def consumer_group_heartbeat_request(version: int, entity, client_id: str | None,
                                     client_host: str) -> ConsumerHeartbeat:
    owned = None
    if entity.topic_partitions is not None:
        owned = frozenset((tp.topic_id, int(p)) for tp in entity.topic_partitions for p in tp.partitions)
    names = entity.subscribed_topic_names
    return ConsumerHeartbeat(
        group_id=entity.group_id, member_id=entity.member_id or "", member_epoch=int(entity.member_epoch),
        instance_id=entity.instance_id, rack_id=entity.rack_id, rebalance_timeout_ms=millis(entity.rebalance_timeout),
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=getattr(entity, "subscribed_topic_regex", None),             # v1+
        server_assignor=entity.server_assignor, owned=owned, client_id=client_id or "", client_host=client_host)


def consumer_group_heartbeat_body(heartbeat: ConsumerHeartbeat) -> dict:
    owned = None
    if heartbeat.owned is not None:
        by_topic: dict = {}
        for topic_id, partition in sorted(heartbeat.owned, key=lambda x: (str(x[0]), x[1])):
            by_topic.setdefault(topic_id, []).append(partition)
        owned = [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]
    return {"group_id": heartbeat.group_id, "member_id": heartbeat.member_id,
            "member_epoch": heartbeat.member_epoch, "instance_id": heartbeat.instance_id,
            "rack_id": heartbeat.rack_id, "rebalance_timeout": heartbeat.rebalance_timeout_ms,
            "subscribed_topic_names": None if heartbeat.subscribed_topic_names is None
            else list(heartbeat.subscribed_topic_names),
            "subscribed_topic_regex": heartbeat.subscribed_topic_regex,
            "server_assignor": heartbeat.server_assignor, "topic_partitions": owned}
