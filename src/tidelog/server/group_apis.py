"""The consumer-group APIs, written once for every version (docs/groups.md).

Theory of operation. Each handler turns a decoded kio request into a call on the
broker's ``GroupCoordinator`` (``tidelog.group``), whose shards answer through
callbacks, possibly much later (a JoinGroup waits for the rebalance, an
OffsetCommit for its record to commit); the handler returns the response dict
at once when the answer came synchronously, else an awaitable of it.

FindCoordinator names the leader of the group's ``__consumer_offsets``
partition, creating the topic on first use (``offsets.topic.num.partitions``,
``offsets.topic.replication.factor`` capped to the brokers alive, compacted).
Requests for a group this broker does not coordinate get NOT_COORDINATOR (the
client looks the coordinator up again), or COORDINATOR_LOAD_IN_PROGRESS while
the shard replays its partition.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from tidelog.broker.requests.group import GROUP_KEY, GroupRequests
from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import GroupState
from tidelog.group.coordinator import GroupCoordinator
from tidelog.group.shard import ConsumerHeartbeat, JoinRequest, OffsetToCommit
from tidelog.metadata.authorizer import ResourceType
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigResourceType
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import millis
from tidelog.server.authorized_operations import authorized_operations
from tidelog.server.dispatch import client_host

log = logging.getLogger("tidelog.groups")

CLASSIC, CONSUMER = "classic", "consumer"


class GroupApis:
    def __init__(self, node, listener_name: str, clock,
                 create_topic: Callable[[CreatableTopic], ErrorCode]):
        self.node = node                              # a BrokerNode: its image and coordinator
        self.listener_name = listener_name
        self.clock = clock
        self.requests = GroupRequests(node, listener_name, create_topic)
        # With ACLs, ListGroups lists only the groups the caller may DESCRIBE (all of them
        # with DESCRIBE on the cluster), as Kafka's handleListGroupsRequest.
        self.may_describe: Callable[[str], bool] = lambda group_id: True
        self.authorizer = None                          # a RequestAuthorizer with ACLs (authorized operations)

    def register(self, dispatcher) -> None:
        dispatcher.register(ApiKey.FIND_COORDINATOR, self.handle_find_coordinator, 0, 6)
        dispatcher.register(ApiKey.JOIN_GROUP, self.handle_join_group, 0, 9)
        dispatcher.register(ApiKey.SYNC_GROUP, self.handle_sync_group, 0, 5)
        dispatcher.register(ApiKey.HEARTBEAT, self.handle_heartbeat, 0, 4)
        dispatcher.register(ApiKey.LEAVE_GROUP, self.handle_leave_group, 0, 5)
        dispatcher.register(ApiKey.OFFSET_COMMIT, self.handle_offset_commit, 2, 9)
        dispatcher.register(ApiKey.TXN_OFFSET_COMMIT, self.handle_txn_offset_commit, 0, 4)
        dispatcher.register(ApiKey.OFFSET_FETCH, self.handle_offset_fetch, 1, 9)
        dispatcher.register(ApiKey.OFFSET_DELETE, self.handle_offset_delete, 0, 0)
        dispatcher.register(ApiKey.LIST_GROUPS, self.handle_list_groups, 0, 5)
        dispatcher.register(ApiKey.DESCRIBE_GROUPS, self.handle_describe_groups, 0, 5)
        dispatcher.register(ApiKey.DELETE_GROUPS, self.handle_delete_groups, 0, 2)
        dispatcher.register(ApiKey.CONSUMER_GROUP_HEARTBEAT, self.handle_consumer_group_heartbeat, 0, 1)
        dispatcher.register(ApiKey.CONSUMER_GROUP_DESCRIBE, self.handle_consumer_group_describe, 0, 1)

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.node.group_coordinator

    def _now(self) -> int:
        """The group coordinator's timer clock (monotonic; shards read wall time themselves)."""
        return self.coordinator.now_ms()

    # ======================================================== FindCoordinator

    def handle_find_coordinator(self, header, request):
        key_type = int(getattr(request, "key_type", GROUP_KEY))
        keys = list(getattr(request, "coordinator_keys", None) or []) if header.api_version >= 4 else [request.key]
        found = [dict(key=key, **self.requests.find_coordinator(key, key_type)) for key in keys]
        if header.api_version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        one = found[0]
        return {"throttle_time": 0, "error_code": one["error_code"], "error_message": one["error_message"],
                "node_id": one["node_id"], "host": one["host"], "port": one["port"]}

    # ============================================================== JoinGroup

    def handle_join_group(self, header, request):
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        session_timeout_ms = millis(request.session_timeout)
        rebalance = getattr(request, "rebalance_timeout", None)
        join = JoinRequest(
            group_id=request.group_id, member_id=request.member_id or "",
            group_instance_id=getattr(request, "group_instance_id", None),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=millis(rebalance) if rebalance is not None else session_timeout_ms,
            protocol_type=request.protocol_type, protocols=protocols, client_id=header.client_id or "",
            client_host=client_host.get(), version=header.api_version)
        future, respond = _future()
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            respond({"error_code": int(shard), "generation_id": -1, "protocol_type": None, "protocol_name": None,
                     "leader": "", "skip_assignment": False, "member_id": join.member_id, "members": []})
        else:
            shard.join_group(join, self._now(), respond)
        return _answer(future)

    # ============================================================== SyncGroup

    def handle_sync_group(self, header, request):
        future, respond = _future()
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            respond({"error_code": int(shard), "protocol_type": None, "protocol_name": None, "assignment": b""})
        else:
            shard.sync_group(
                request.group_id, int(request.generation_id), request.member_id,
                getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
                getattr(request, "protocol_name", None),
                {a.member_id: bytes(a.assignment) for a in request.assignments}, self._now(), respond)
        return _answer(future)

    # ============================================================== Heartbeat

    def handle_heartbeat(self, header, request):
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return {"throttle_time": 0, "error_code": int(shard)}
        error = shard.heartbeat(request.group_id, int(request.generation_id), request.member_id,
                                getattr(request, "group_instance_id", None), self._now())
        return {"throttle_time": 0, "error_code": int(error)}

    # ============================================================= LeaveGroup

    def handle_leave_group(self, header, request):
        if header.api_version >= 3:
            leaving = [(m.member_id or "", getattr(m, "group_instance_id", None)) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return {"throttle_time": 0, "error_code": int(shard), "members": []}
        error, results = shard.leave_group(request.group_id, leaving, self._now())
        if header.api_version < 3 and error == ErrorCode.NONE and results:
            error = results[0][2]
        return {"throttle_time": 0, "error_code": int(error), "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": int(code)}
            for member_id, instance_id, code in results]}

    # =========================================================== OffsetCommit

    def handle_txn_offset_commit(self, header, request):
        """Offsets committed as part of a producer's transaction: they take effect when
        the transaction's COMMIT marker reaches the group's partition."""
        return self.handle_offset_commit(header, request,
                                         producer=(int(request.producer_id), int(request.producer_epoch)))

    def handle_offset_commit(self, header, request, producer: tuple[int, int] | None = None):
        generation = int(getattr(request, "generation_id_or_member_epoch",
                                 getattr(request, "generation_id", -1)))
        image = self.node.image
        unknown: dict[TopicPartition, ErrorCode] = {}
        offsets: list[OffsetToCommit] = []
        for topic in request.topics:
            registered = image.topic(topic.name)
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                if registered is None or tp.partition not in registered.partitions:
                    unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets.append(OffsetToCommit(tp, int(p.committed_offset),
                                              int(getattr(p, "committed_leader_epoch", -1)),
                                              p.committed_metadata))
        future, respond = _future()

        def build(errors: dict[TopicPartition, ErrorCode]) -> None:
            by_topic: dict[str, list] = {}
            for topic in request.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    code = unknown.get(tp, errors.get(tp, ErrorCode.NONE))
                    by_topic.setdefault(topic.name, []).append(
                        {"partition_index": tp.partition, "error_code": int(code)})
            respond({"throttle_time": 0, "topics": [{"name": name, "partitions": parts}
                                                     for name, parts in by_topic.items()]})
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            build({o.topic_partition: shard for o in offsets})
        elif not offsets:
            build({})
        else:
            shard.commit_offsets(request.group_id, getattr(request, "member_id", "") or "",
                                 getattr(request, "group_instance_id", None), generation, offsets,
                                 self._now(), build, producer)
        return _answer(future)

    # ============================================================ OffsetFetch

    def handle_offset_fetch(self, header, request):
        if header.api_version >= 8:
            stable = bool(getattr(request, "require_stable", False))
            groups = [self._fetch_group(g.group_id, g.topics, stable) for g in request.groups]
            return {"throttle_time": 0, "groups": groups}
        group = self._fetch_group(request.group_id, request.topics, bool(getattr(request, "require_stable", False)))
        error = group["error_code"]
        if header.api_version < 2 and error != 0:
            # v0–1 have no group-level error: every partition carries it.
            for topic in group["topics"]:
                for p in topic["partitions"]:
                    p["error_code"] = error
        return {"throttle_time": 0, "topics": group["topics"], "error_code": error}

    def _fetch_group(self, group_id: str, topics, require_stable: bool = False) -> dict:
        asked = None if topics is None else [TopicPartition(t.name, int(i))
                                             for t in topics for i in t.partition_indexes]
        shard = self.coordinator.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return {"group_id": group_id, "error_code": int(shard), "topics": _offset_topics(
                {tp: None for tp in asked or []}, ErrorCode.NONE)}
        topics = _offset_topics(shard.fetch_offsets(group_id, asked), ErrorCode.NONE)
        if require_stable and shard.pending_txn_offsets:
            # KIP-447: an offset an open transaction is committing is not answered yet.
            for topic in topics:
                for p in topic["partitions"]:
                    if shard.has_pending_offsets(group_id, TopicPartition(topic["name"], p["partition_index"])):
                        p["error_code"] = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
        return {"group_id": group_id, "error_code": 0, "topics": topics}

    # =========================================================== OffsetDelete

    def handle_offset_delete(self, header, request):
        partitions = [TopicPartition(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
        image = self.node.image
        unknown = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in partitions
                   if image.topic(tp.topic) is None or tp.partition not in image.topic(tp.topic).partitions}
        future, respond = _future()

        def build(error: ErrorCode, errors: dict[TopicPartition, ErrorCode]) -> None:
            errors = {**errors, **unknown}
            by_topic: dict[str, list] = {}
            for tp in partitions if error == ErrorCode.NONE else []:
                by_topic.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "error_code": int(errors.get(tp, ErrorCode.NONE))})
            respond({"throttle_time": 0, "error_code": int(error),
                     "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            build(shard, {})
        else:
            shard.delete_offsets(request.group_id, [tp for tp in partitions if tp not in unknown],
                                 self._now(), build)
        return _answer(future)

    # ============================================================= ListGroups

    def handle_list_groups(self, header, request):
        states = {s.lower() for s in getattr(request, "states_filter", None) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", None) or ()}
        shards, loading = self.coordinator.shards()
        found = []
        for shard in shards:
            found += [(g.group_id, g.protocol_type or "", g.state.value, CLASSIC) for g in shard.list_groups()]
            found += [(g.group_id, CONSUMER, g.state, CONSUMER) for g in shard.list_consumer_groups()]
        groups = [{"group_id": group_id, "protocol_type": protocol_type, "group_state": state, "group_type": kind}
                  for group_id, protocol_type, state, kind in found
                  if (not states or state.lower() in states) and (not types or kind in types)
                  and self.may_describe(group_id)]
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        return {"throttle_time": 0, "error_code": int(error), "groups": groups}

    # ========================================================= DescribeGroups

    def handle_describe_groups(self, header, request):
        groups = [self._describe(group_id) for group_id in request.groups]
        if getattr(request, "include_authorized_operations", False):
            self._add_authorized_operations(groups)
        return {"throttle_time": 0, "groups": groups}

    def _add_authorized_operations(self, groups: list[dict]) -> None:
        """KIP-430: what the caller may do with each group described (not with one in error)."""
        for entry in groups:
            if entry["error_code"] == 0:
                entry["authorized_operations"] = authorized_operations(self.authorizer, ResourceType.GROUP,
                                                                       entry["group_id"])

    def _describe(self, group_id: str) -> dict:
        entry = {"error_code": 0, "group_id": group_id, "group_state": GroupState.DEAD.value,
                 "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648}
        shard = self.coordinator.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            entry["error_code"] = int(shard)
            return entry
        consumer_group = shard.consumer_groups.get(group_id)
        if consumer_group is not None:
            entry.update(group_state=consumer_group.state, protocol_type=CONSUMER, members=[
                {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "member_metadata": b"", "member_assignment": b""}
                for m in consumer_group.members.values()])
            return entry
        group = shard.groups.get(group_id)
        if group is None:
            return entry
        stable = group.is_in(GroupState.STABLE)
        entry.update(group_state=group.state.value, protocol_type=group.protocol_type or "",
                     protocol_data=(group.protocol_name or "") if stable else "")
        entry["members"] = [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host,
             "member_metadata": m.metadata(group.protocol_name or "") if stable else b"",
             # As Kafka's describeNoMetadata: the assignment a member holds, in every state.
             "member_assignment": m.assignment}
            for m in group.members.values()]
        return entry

    # ================================================ ConsumerGroupHeartbeat

    def handle_consumer_group_heartbeat(self, header, request):
        """KIP-848's protocol: the member heartbeats, the coordinator assigns."""
        owned = None
        if request.topic_partitions is not None:
            owned = frozenset((tp.topic_id, int(p)) for tp in request.topic_partitions for p in tp.partitions)
        names = request.subscribed_topic_names
        heartbeat = ConsumerHeartbeat(
            group_id=request.group_id, member_id=request.member_id or "", member_epoch=int(request.member_epoch),
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=tuple(names) if names is not None else None,
            subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor, owned=owned, client_id=header.client_id or "",
            client_host=client_host.get())
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            response = {"error_code": int(shard), "error_message": None, "member_id": request.member_id or None,
                        "member_epoch": -1, "heartbeat_interval": 0, "assignment": None}
        else:
            image = self.node.image

            def lookup(name):
                topic = image.topic(name)
                return None if topic is None else (topic.topic_id, len(topic.partitions))
            own = image.configs.get(ConfigResource(int(ConfigResourceType.GROUP), request.group_id), {})
            response = shard.consumer_group_heartbeat(heartbeat, lookup, list(image.topic_names()), self._now(),
                                                      group_configs=own)          # GROUP configs (KIP-848)
        return {"throttle_time": 0, **response}

    def handle_consumer_group_describe(self, header, request):
        groups = []
        for group_id in request.group_ids:
            entry = {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": "Dead",
                     "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
                     "authorized_operations": -2147483648}
            shard = self.coordinator.shard_for(group_id)
            group = None if isinstance(shard, ErrorCode) else shard.consumer_groups.get(group_id)
            if isinstance(shard, ErrorCode):
                entry["error_code"] = int(shard)
            elif group is None:       # Kafka's GroupMetadataManager.consumerGroup messages
                entry.update(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                             error_message=f"Group {group_id} is not a consumer group." if group_id in shard.groups
                             else f"Group {group_id} not found.")
            else:
                entry.update(group_state=group.state, group_epoch=group.group_epoch,
                             assignment_epoch=group.assignment_epoch, assignor_name=group.assignor)
                entry["members"] = [
                    {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                     "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                     "subscribed_topic_names": list(m.subscribed_topic_names),
                     "subscribed_topic_regex": m.subscribed_topic_regex,
                     "assignment": _assignment(m.assigned, self.node.image),
                     "target_assignment": _assignment(group.target.get(m.member_id, ()), self.node.image),
                     "member_type": 1}
                    for m in group.members.values()]
            groups.append(entry)
        if request.include_authorized_operations:
            self._add_authorized_operations(groups)
        return {"throttle_time": 0, "groups": groups}

    # =========================================================== DeleteGroups

    def handle_delete_groups(self, header, request):
        names = list(request.groups_names)
        results: dict[str, ErrorCode] = {}
        future, respond = _future()

        def done(group_id: str, error: ErrorCode) -> None:
            results[group_id] = error
            if len(results) == len(names):
                respond({"throttle_time": 0, "results": [
                    {"group_id": n, "error_code": int(results[n])} for n in names]})
        if not names:
            respond({"throttle_time": 0, "results": []})
        for group_id in names:
            shard = self.coordinator.shard_for(group_id)
            if isinstance(shard, ErrorCode):
                done(group_id, shard)
            else:
                shard.delete_group(group_id, self._now(), lambda error, g=group_id: done(g, error))
        return _answer(future)


def _assignment(partitions, image) -> dict:
    """ConsumerGroupDescribe's Assignment: (topic id, partition) pairs by topic, named as Kafka names them."""
    by_topic: dict = {}
    for topic_id, partition in sorted(partitions, key=lambda x: (str(x[0]), x[1])):
        by_topic.setdefault(topic_id, []).append(partition)
    return {"topic_partitions": [{"topic_id": t, "topic_name": image.topic_name(t) or "", "partitions": ps}
                                 for t, ps in by_topic.items()]}


def _offset_topics(offsets: dict, error: ErrorCode) -> list[dict]:
    by_topic: dict[str, list] = {}
    for tp, value in offsets.items():
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition,
            "committed_offset": value.offset if value is not None else -1,
            "committed_leader_epoch": value.leader_epoch if value is not None else -1,
            "metadata": value.metadata if value is not None else "",
            "error_code": int(error)})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


def _future():
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def resolve(value) -> None:
        if not future.done():
            future.set_result(value)
    return future, resolve


def _answer(future):
    if future.done():
        return future.result()

    async def later():
        return await future
    return later()
