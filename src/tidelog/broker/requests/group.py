"""Group requests: FindCoordinator and the consumer-group APIs, written once for both drivers.

Theory of operation. Each method takes a domain request (``JoinRequest``,
``SyncGroup``, ``OffsetCommit`` …: what the request means, whatever version
carried it) and answers with a version-free result — the response's fields by
Kafka's names, or ``{partition: error}`` — through ``respond`` (at once, or
later: a JoinGroup waits for the rebalance, an OffsetCommit for its record to
commit) or as its return value (Heartbeat, LeaveGroup, OffsetFetch, ListGroups,
DescribeGroups, ConsumerGroupHeartbeat, which a shard answers at once).
``protocol/translate/group.py`` turns kio requests into these and results into
each version's response; ``sim/broker.py`` carries the domain requests as
message bodies. The decisions live here, once:

* routing: the group's shard (``GroupCoordinator.shard_for``), or the
  coordinator error every item answers (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS) — the client looks the coordinator up again;
* OffsetCommit / OffsetDelete: a partition of a topic the metadata image does
  not hold is UNKNOWN_TOPIC_OR_PARTITION, the others go to the shard;
* OffsetFetch with ``require_stable`` (KIP-447): an offset an open transaction
  is committing is UNSTABLE_OFFSET_COMMIT;
* ListGroups: classic and consumer groups, filtered by state and type (KIP-518,
  KIP-848), only those the caller may describe; COORDINATOR_LOAD_IN_PROGRESS
  while a shard loads.

FindCoordinator: the coordinator of a key is the leader of its partition of
``__consumer_offsets`` (groups) or ``__transaction_state`` (transactional ids),
as the metadata image names it, alive and with the client's listener. The first
lookup of a kind creates its topic through the controller (``create_topic``:
``offsets.topic.*`` / ``transaction.state.log.*`` settings, replication capped
to the brokers alive) and answers COORDINATOR_NOT_AVAILABLE; the client asks
again. A broker whose metadata is not loaded yet sees no broker alive: it does
not create an internal topic with replication factor 1.

Nothing here reads a clock but the group coordinator's own (``now_ms``, the
shards' timer clock), and nothing does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tidelog.controller.messages import CreatableTopic
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.classic import GroupState
from tidelog.group.coordinator import offsets_topic
from tidelog.group.shard import ConsumerHeartbeat, JoinRequest, OffsetToCommit, _join_error, _sync_error
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigResourceType
from tidelog.txn.coordinator import transaction_state_topic

GROUP_KEY, TRANSACTION_KEY = 0, 1
CLASSIC, CONSUMER = "classic", "consumer"
NO_AUTHORIZED_OPERATIONS = -2147483648                   # Kafka's INT32_MIN: "not asked for"

Errors = dict[TopicPartition, ErrorCode]

__all__ = ["CLASSIC", "CONSUMER", "ConsumerHeartbeat", "DescribeGroups", "GROUP_KEY", "GroupRequests",
           "Heartbeat", "JoinRequest", "LeaveGroup", "ListGroups", "OffsetCommit", "OffsetDelete", "OffsetFetch",
           "OffsetToCommit", "SyncGroup", "TRANSACTION_KEY"]


# ================================================================ domain requests

@dataclass(frozen=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: dict[str, bytes] = field(default_factory=dict)    # the leader's, by member id


@dataclass(frozen=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroup:
    group_id: str
    members: tuple[tuple[str, str | None], ...]            # (member id, group instance id)


@dataclass(frozen=True)
class OffsetCommit:
    """OffsetCommit, or TxnOffsetCommit when ``producer`` is (producer id, epoch):
    offsets that take effect with the transaction's COMMIT marker."""
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int                                      # or the member epoch (KIP-848)
    offsets: tuple[OffsetToCommit, ...]
    producer: tuple[int, int] | None = None


@dataclass(frozen=True)
class OffsetFetch:
    group_id: str
    partitions: tuple[TopicPartition, ...] | None           # None: every committed offset
    require_stable: bool = False


@dataclass(frozen=True)
class OffsetDelete:
    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ListGroups:
    states: frozenset[str] = frozenset()                    # lower case; empty: any
    types: frozenset[str] = frozenset()


@dataclass(frozen=True)
class DescribeGroups:
    group_ids: tuple[str, ...]


class GroupRequests:
    def __init__(self, node, listener_name: str, create_topic: Callable[[CreatableTopic], ErrorCode]):
        self.node = node                              # a BrokerNode: its image and coordinators
        self.listener_name = listener_name
        self._create_topic = create_topic

    @property
    def coordinator(self):
        return self.node.group_coordinator

    def _now(self) -> int:
        return self.coordinator.now_ms()

    def _known(self, tp: TopicPartition) -> bool:
        topic = self.node.image.topic(tp.topic)
        return topic is not None and tp.partition in topic.partitions

    # ======================================================== FindCoordinator

    def find_coordinator(self, key: str, key_type: int) -> dict:
        """One key's coordinator: node_id, host, port, error_code, error_message."""
        def error(code: ErrorCode, message: str | None = None) -> dict:
            return {"node_id": -1, "host": "", "port": -1, "error_code": int(code), "error_message": message}
        if key_type == TRANSACTION_KEY:
            coordinator, internal_topic, what = self.node.txn_coordinator, transaction_state_topic, "transactional id"
        elif key_type == GROUP_KEY:
            coordinator, internal_topic, what = self.node.group_coordinator, offsets_topic, "group id"
        else:
            return error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
        if not key:
            return error(ErrorCode.INVALID_REQUEST, f"the {what} is empty")
        image = self.node.image
        topic = image.topic(coordinator.topic)
        if topic is None:
            alive = sum(1 for b in image.brokers.values() if not b.fenced)
            if alive:
                self._create_topic(internal_topic(self.node.config, alive))
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{coordinator.topic} is being created")
        registration = topic.partitions.get(coordinator.partition_for(key))
        leader = registration.leader if registration is not None else -1
        broker = image.brokers.get(leader)
        if leader < 0 or broker is None or not image.is_alive(leader):
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the {what}'s partition has no leader")
        for endpoint in broker.endpoints:
            if endpoint.name == self.listener_name:
                return {"node_id": leader, "host": endpoint.host, "port": endpoint.port,
                        "error_code": 0, "error_message": ""}       # Kafka's: empty, not null
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {leader} has no {self.listener_name} listener")

    # ======================================================= the classic protocol

    def join_group(self, request: JoinRequest, respond: Callable[[dict], None]) -> None:
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return respond(_join_error(shard, request.member_id))
        shard.join_group(request, self._now(), respond)

    def sync_group(self, request: SyncGroup, respond: Callable[[dict], None]) -> None:
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return respond(_sync_error(shard))
        shard.sync_group(request.group_id, request.generation_id, request.member_id, request.group_instance_id,
                         request.protocol_type, request.protocol_name, dict(request.assignments), self._now(),
                         respond)

    def heartbeat(self, request: Heartbeat) -> dict:
        shard = self.coordinator.shard_for(request.group_id)
        error = shard if isinstance(shard, ErrorCode) else shard.heartbeat(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id, self._now())
        return {"error_code": int(error)}

    def leave_group(self, request: LeaveGroup) -> dict:
        """The group's error and one result per member leaving."""
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return {"error_code": int(shard), "members": []}
        error, results = shard.leave_group(request.group_id, list(request.members), self._now())
        return {"error_code": int(error), "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": int(code)}
            for member_id, instance_id, code in results]}

    # ================================================================ offsets

    def offset_commit(self, request: OffsetCommit, respond: Callable[[Errors], None]) -> None:
        """``respond({tp: error})`` for every partition of the request."""
        unknown = {o.topic_partition: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                   for o in request.offsets if not self._known(o.topic_partition)}
        offsets = [o for o in request.offsets if o.topic_partition not in unknown]
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return respond({**{o.topic_partition: shard for o in offsets}, **unknown})
        if not offsets:
            return respond(unknown)
        shard.commit_offsets(request.group_id, request.member_id, request.group_instance_id, request.generation_id,
                             offsets, self._now(), lambda errors: respond({**errors, **unknown}),
                             request.producer)

    def offset_fetch(self, request: OffsetFetch) -> dict:
        """One group of an OffsetFetch response: group_id, error_code, topics."""
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return {"group_id": request.group_id, "error_code": int(shard),
                    "topics": _offset_topics({tp: None for tp in request.partitions or ()}, set())}
        committed = shard.fetch_offsets(request.group_id, request.partitions)
        unstable = set()
        if request.require_stable and shard.pending_txn_offsets:
            # KIP-447: an offset an open transaction is committing is not answered yet.
            unstable = {tp for tp in committed if shard.has_pending_offsets(request.group_id, tp)}
        return {"group_id": request.group_id, "error_code": 0, "topics": _offset_topics(committed, unstable)}

    def offset_delete(self, request: OffsetDelete, respond: Callable[[ErrorCode, Errors], None]) -> None:
        """``respond(group error, {tp: error})``; no partitions when the group errs."""
        unknown = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in request.partitions if not self._known(tp)}
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return respond(shard, {})

        def deleted(error: ErrorCode, errors: Errors) -> None:
            respond(error, {} if error != ErrorCode.NONE else
                    {tp: unknown.get(tp, errors.get(tp, ErrorCode.NONE)) for tp in request.partitions})
        shard.delete_offsets(request.group_id, [tp for tp in request.partitions if tp not in unknown],
                             self._now(), deleted)

    # ======================================================= looking at groups

    def list_groups(self, request: ListGroups, may_describe: Callable[[str], bool] = lambda group_id: True) -> dict:
        shards, loading = self.coordinator.shards()
        found = []
        for shard in shards:
            found += [(g.group_id, g.protocol_type or "", g.state.value, CLASSIC) for g in shard.list_groups()]
            found += [(g.group_id, CONSUMER, g.state, CONSUMER) for g in shard.list_consumer_groups()]
        groups = [{"group_id": group_id, "protocol_type": protocol_type, "group_state": state, "group_type": kind}
                  for group_id, protocol_type, state, kind in found
                  if (not request.states or state.lower() in request.states)
                  and (not request.types or kind in request.types) and may_describe(group_id)]
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        return {"error_code": int(error), "groups": groups}

    def describe_groups(self, request: DescribeGroups) -> list[dict]:
        return [self._describe(group_id) for group_id in request.group_ids]

    def _describe(self, group_id: str) -> dict:
        entry = {"error_code": 0, "group_id": group_id, "group_state": GroupState.DEAD.value,
                 "protocol_type": "", "protocol_data": "", "members": [],
                 "authorized_operations": NO_AUTHORIZED_OPERATIONS}
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

    # ========================================================== KIP-848

    def consumer_group_heartbeat(self, request: ConsumerHeartbeat, respond: Callable[[dict], None]) -> None:
        """The member heartbeats, the coordinator assigns (KIP-848); answered once what
        changed is committed to ``__consumer_offsets``."""
        shard = self.coordinator.shard_for(request.group_id)
        if isinstance(shard, ErrorCode):
            return respond({"error_code": int(shard), "error_message": None, "member_id": request.member_id or None,
                            "member_epoch": -1, "heartbeat_interval": 0, "assignment": None})
        image = self.node.image

        def lookup(name):
            topic = image.topic(name)
            return None if topic is None else (topic.topic_id, len(topic.partitions))
        own = image.configs.get(ConfigResource(int(ConfigResourceType.GROUP), request.group_id), {})
        shard.consumer_group_heartbeat(request, lookup, list(image.topic_names()), self._now(), respond,
                                       group_configs=own)                 # GROUP configs (KIP-848)

    def consumer_group_describe(self, group_id: str) -> dict:
        entry = {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": "Dead",
                 "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
                 "authorized_operations": NO_AUTHORIZED_OPERATIONS}
        shard = self.coordinator.shard_for(group_id)
        group = None if isinstance(shard, ErrorCode) else shard.consumer_groups.get(group_id)
        if isinstance(shard, ErrorCode):
            entry["error_code"] = int(shard)
        elif group is None:       # Kafka's GroupMetadataManager.consumerGroup messages
            entry.update(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                         error_message=f"Group {group_id} is not a consumer group." if group_id in shard.groups
                         else f"Group {group_id} not found.")
        else:
            image = self.node.image
            entry.update(group_state=group.state, group_epoch=group.group_epoch,
                         assignment_epoch=group.assignment_epoch, assignor_name=group.assignor)
            entry["members"] = [
                {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                 "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                 "subscribed_topic_names": list(m.subscribed_topic_names),
                 "subscribed_topic_regex": m.subscribed_topic_regex,
                 "assignment": _assignment(m.assigned, image),
                 "target_assignment": _assignment(group.target.get(m.member_id, ()), image),
                 "member_type": 1}
                for m in group.members.values()]
        return entry

    # ========================================================== DeleteGroups

    def delete_groups(self, group_ids: tuple[str, ...], respond: Callable[[dict[str, ErrorCode]], None]) -> None:
        """``respond({group id: error})`` once every group is answered."""
        results: dict[str, ErrorCode] = {}

        def done(group_id: str, error: ErrorCode) -> None:
            results[group_id] = error
            if len(results) == len(set(group_ids)):
                respond(results)
        if not group_ids:
            return respond(results)
        for group_id in group_ids:
            shard = self.coordinator.shard_for(group_id)
            if isinstance(shard, ErrorCode):
                done(group_id, shard)
            else:
                shard.delete_group(group_id, self._now(), lambda error, g=group_id: done(g, error))


def _assignment(partitions, image) -> dict:
    """ConsumerGroupDescribe's Assignment: (topic id, partition) pairs by topic, named as Kafka names them."""
    by_topic: dict = {}
    for topic_id, partition in sorted(partitions, key=lambda x: (str(x[0]), x[1])):
        by_topic.setdefault(topic_id, []).append(partition)
    return {"topic_partitions": [{"topic_id": t, "topic_name": image.topic_name(t) or "", "partitions": ps}
                                 for t, ps in by_topic.items()]}


def _offset_topics(offsets: dict, unstable: set) -> list[dict]:
    by_topic: dict[str, list] = {}
    for tp, value in offsets.items():
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition,
            "committed_offset": value.offset if value is not None else -1,
            "committed_leader_epoch": value.leader_epoch if value is not None else -1,
            "metadata": value.metadata if value is not None else "",
            "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT if tp in unstable else ErrorCode.NONE)})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
