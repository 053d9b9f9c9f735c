"""The request layer's group requests (tidelog.broker.requests.group) on a stand-in
node: the decisions it makes before a shard sees a request — routing, the coordinator
error for every item, unknown partitions, KIP-447's unstable offsets, ListGroups'
filters — which both drivers (server/group_apis.py, sim/broker.py) now share."""

from types import SimpleNamespace

from tidelog.broker.requests.group import (
    GroupRequests,
    Heartbeat,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetFetch,
    OffsetToCommit,
    SyncGroup,
)
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.shard import JoinRequest

KNOWN, UNKNOWN_PARTITION, UNKNOWN_TOPIC = TopicPartition("t", 0), TopicPartition("t", 5), TopicPartition("x", 0)


class Shard:
    def __init__(self):
        self.calls = []
        self.pending_txn_offsets = {"g": True}
        self.groups, self.consumer_groups = {}, {}

    def commit_offsets(self, group_id, member_id, instance_id, generation, offsets, now_ms, respond, producer):
        self.calls.append(("commit", [o.topic_partition for o in offsets], producer))
        respond({o.topic_partition: ErrorCode.NONE for o in offsets})

    def fetch_offsets(self, group_id, partitions):
        committed = {KNOWN: SimpleNamespace(offset=10, leader_epoch=1, metadata="m")}
        return {tp: committed.get(tp) for tp in (partitions if partitions is not None else committed)}

    def has_pending_offsets(self, group_id, tp):
        return tp == KNOWN

    def heartbeat(self, group_id, generation, member_id, instance_id, now_ms):
        self.calls.append(("heartbeat", generation, member_id))
        return ErrorCode.REBALANCE_IN_PROGRESS

    def leave_group(self, group_id, leaving, now_ms):
        return ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in leaving]

    def list_groups(self):
        return [SimpleNamespace(group_id="a", protocol_type="consumer", state=SimpleNamespace(value="Stable")),
                SimpleNamespace(group_id="b", protocol_type="", state=SimpleNamespace(value="Empty"))]

    def list_consumer_groups(self):
        return [SimpleNamespace(group_id="c", state="Stable")]


class Coordinator:
    def __init__(self, shard, loading=False):
        self.shard, self.loading = shard, loading

    def shard_for(self, group_id):
        return self.shard

    def shards(self):
        return ([] if isinstance(self.shard, ErrorCode) else [self.shard]), self.loading

    def now_ms(self):
        return 0


def layer(shard, loading=False):
    topic = SimpleNamespace(partitions={0: object(), 1: object()})
    image = SimpleNamespace(topic=lambda name: topic if name == "t" else None)
    return GroupRequests(SimpleNamespace(group_coordinator=Coordinator(shard, loading), image=image), "PLAINTEXT",
                         lambda topic: ErrorCode.NONE)


def commit(*tps):
    return OffsetCommit("g", "m", None, 3, tuple(OffsetToCommit(tp, 1, -1, None) for tp in tps))


def test_offsets_of_partitions_the_image_does_not_hold_are_refused_and_the_rest_committed():
    shard = Shard()
    answers = []
    layer(shard).offset_commit(commit(KNOWN, UNKNOWN_PARTITION, UNKNOWN_TOPIC), answers.append)
    assert shard.calls == [("commit", [KNOWN], None)]
    assert answers == [{KNOWN: ErrorCode.NONE, UNKNOWN_PARTITION: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}]
    answers.clear()
    layer(shard).offset_commit(commit(UNKNOWN_TOPIC), answers.append)        # nothing left for the shard
    assert answers == [{UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}] and len(shard.calls) == 1


def test_a_group_this_broker_does_not_coordinate_answers_the_coordinator_error_for_every_item():
    requests = layer(ErrorCode.NOT_COORDINATOR)
    answers = []
    requests.offset_commit(commit(KNOWN, UNKNOWN_TOPIC), answers.append)
    requests.join_group(JoinRequest("g", "", None, 10_000, 30_000, "consumer", [], "c", "h", 5), answers.append)
    requests.sync_group(SyncGroup("g", 1, "m"), answers.append)
    assert answers[0] == {KNOWN: ErrorCode.NOT_COORDINATOR, UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert [a["error_code"] for a in answers[1:]] == [int(ErrorCode.NOT_COORDINATOR)] * 2
    assert requests.heartbeat(Heartbeat("g", 1, "m")) == {"error_code": int(ErrorCode.NOT_COORDINATOR)}
    assert requests.leave_group(LeaveGroup("g", (("m", None),))) == {
        "error_code": int(ErrorCode.NOT_COORDINATOR), "members": []}
    fetched = requests.offset_fetch(OffsetFetch("g", (KNOWN,)))
    assert fetched["error_code"] == int(ErrorCode.NOT_COORDINATOR)
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1


def test_offset_fetch_with_require_stable_answers_unstable_offset_commit_for_a_pending_offset():
    requests = layer(Shard())
    stable = requests.offset_fetch(OffsetFetch("g", (KNOWN, UNKNOWN_PARTITION), require_stable=True))
    plain = requests.offset_fetch(OffsetFetch("g", (KNOWN, UNKNOWN_PARTITION)))
    errors = [[p["error_code"] for t in answer["topics"] for p in t["partitions"]] for answer in (stable, plain)]
    assert errors == [[int(ErrorCode.UNSTABLE_OFFSET_COMMIT), 0], [0, 0]]
    assert [p["committed_offset"] for p in plain["topics"][0]["partitions"]] == [10, -1]


def test_heartbeat_and_leave_group_are_the_shards_answers():
    shard = Shard()
    requests = layer(shard)
    assert requests.heartbeat(Heartbeat("g", 4, "m")) == {"error_code": int(ErrorCode.REBALANCE_IN_PROGRESS)}
    assert shard.calls == [("heartbeat", 4, "m")]
    assert requests.leave_group(LeaveGroup("g", (("m", "i"),))) == {"error_code": 0, "members": [
        {"member_id": "m", "group_instance_id": "i", "error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}]}


def test_list_groups_filters_by_state_type_and_what_the_caller_may_describe():
    requests = layer(Shard())

    def ids(request, may_describe=lambda group_id: True):
        return [g["group_id"] for g in requests.list_groups(request, may_describe)["groups"]]
    assert ids(ListGroups()) == ["a", "b", "c"]
    assert ids(ListGroups(states=frozenset({"stable"}))) == ["a", "c"]
    assert ids(ListGroups(types=frozenset({"consumer"}))) == ["c"]
    assert ids(ListGroups(), may_describe=lambda group_id: group_id != "a") == ["b", "c"]
    assert layer(Shard(), loading=True).list_groups(ListGroups())["error_code"] == int(
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
