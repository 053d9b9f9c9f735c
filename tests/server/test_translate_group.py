"""protocol/translate/group.py, h11-style: each group request it translates (all but
TxnOffsetCommit, DeleteGroups and ConsumerGroupDescribe, whose handlers read one list
field) goes to bytes and back to the same domain request at every served version (the fields a
version lacks read as Kafka reads their absence); every shorter frame is a protocol
error (the connection closes, as Kafka's parser throws); bytes after the last field
are ignored, as Kafka ignores them; and the version-dependent shapes of the responses
(LeaveGroup v0-2, OffsetFetch v0-1 and v8+) survive encoding."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from tidelog.broker.requests.group import (
    GROUP_KEY,
    TRANSACTION_KEY,
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
from tidelog.protocol.codec import (
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)
from tidelog.protocol.translate import group as translate

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
TOPIC_ID = uuid.UUID(int=42)


def versions(api_key):
    low, high = translate.SERVED[api_key]
    return range(low, high + 1)


def _join(v):
    join = JoinRequest("g", "m-1", "i-1", 10_000, 30_000, "consumer", [("range", b"\x00\x01"), ("roundrobin", b"")],
                       "client-1", "10.0.0.1", v)
    expected = join
    if v < 5:
        expected = dataclasses.replace(expected, group_instance_id=None)
    if v < 1:
        expected = dataclasses.replace(expected, rebalance_timeout_ms=10_000)   # v0: the session timeout
    return translate.join_group_body(join), expected, \
        lambda entity: translate.join_group_request(v, entity, "client-1", "10.0.0.1")


def _sync(v):
    sync = SyncGroup("g", 3, "m-1", "i-1", "consumer", "range", {"m-1": b"a", "m-2": b""})
    expected = sync
    if v < 5:
        expected = dataclasses.replace(expected, protocol_type=None, protocol_name=None)
    if v < 3:
        expected = dataclasses.replace(expected, group_instance_id=None)
    return translate.sync_group_body(sync), expected, lambda entity: translate.sync_group_request(v, entity)


def _heartbeat(v):
    heartbeat = Heartbeat("g", 3, "m-1", "i-1")
    expected = heartbeat if v >= 3 else dataclasses.replace(heartbeat, group_instance_id=None)
    return translate.heartbeat_body(heartbeat), expected, lambda entity: translate.heartbeat_request(v, entity)


def _leave(v):
    leave = LeaveGroup("g", (("m-1", "i-1"), ("", "i-2"))) if v >= 3 else LeaveGroup("g", (("m-1", None),))
    return translate.leave_group_body(leave, v), leave, lambda entity: translate.leave_group_request(v, entity)


def _commit(v):
    commit = OffsetCommit("g", "m-1", "i-1", 4, (OffsetToCommit(T0, 10, 2, "meta"), OffsetToCommit(T1, 11, 2, None),
                                                 OffsetToCommit(U0, 0, 2, "")))
    expected = commit
    if v < 7:
        expected = dataclasses.replace(expected, group_instance_id=None)
    if v < 6:
        expected = dataclasses.replace(expected, offsets=tuple(dataclasses.replace(o, leader_epoch=-1)
                                                               for o in commit.offsets))
    return translate.offset_commit_body(commit), expected, lambda entity: translate.offset_commit_request(v, entity)


def _fetch(v):
    fetches = [OffsetFetch("g", (T0, T1, U0), require_stable=v >= 7)]
    if v >= 2:
        fetches.append(OffsetFetch("h", None, require_stable=v >= 7))    # a null list: every offset (v2+)
    if v < 8:
        fetches = fetches[:1]
    return translate.offset_fetch_body(fetches, v), fetches, lambda entity: translate.offset_fetch_requests(v, entity)


def _list(v):
    request = ListGroups(frozenset({"stable", "empty"}), frozenset({"classic"}))
    expected = ListGroups(request.states if v >= 4 else frozenset(), request.types if v >= 5 else frozenset())
    return translate.list_groups_body(request), expected, lambda entity: translate.list_groups_request(v, entity)


def _consumer_heartbeat(v):
    heartbeat = ConsumerHeartbeat("g", "m-1", 5, "i-1", "rack-a", 45_000, ("t", "u"), "t.*", "uniform",
                                  frozenset({(TOPIC_ID, 0), (TOPIC_ID, 2)}), "client-1", "10.0.0.1")
    expected = heartbeat if v >= 1 else dataclasses.replace(heartbeat, subscribed_topic_regex=None)
    return translate.consumer_group_heartbeat_body(heartbeat), expected, \
        lambda entity: translate.consumer_group_heartbeat_request(v, entity, "client-1", "10.0.0.1")


def _find(v):
    key_type, keys = (TRANSACTION_KEY if v >= 1 else GROUP_KEY), (["g", "h"] if v >= 4 else ["g"])
    return translate.find_coordinator_body(key_type, keys, v), (key_type, keys), \
        lambda entity: translate.find_coordinator_keys(v, entity)


def _offset_delete(v):
    delete = OffsetDelete("g", (T0, T1, U0))
    return translate.offset_delete_body(delete), delete, lambda entity: translate.offset_delete_request(v, entity)


def _describe(v):
    describe = DescribeGroups(("g", "h"))
    return translate.describe_groups_body(describe, True), (describe, v >= 3), \
        lambda entity: translate.describe_groups_request(v, entity)


CASES = [(ApiKey.FIND_COORDINATOR, _find), (ApiKey.OFFSET_DELETE, _offset_delete),
         (ApiKey.DESCRIBE_GROUPS, _describe), (ApiKey.JOIN_GROUP, _join), (ApiKey.SYNC_GROUP, _sync), (ApiKey.HEARTBEAT, _heartbeat),
         (ApiKey.LEAVE_GROUP, _leave), (ApiKey.OFFSET_COMMIT, _commit), (ApiKey.OFFSET_FETCH, _fetch),
         (ApiKey.LIST_GROUPS, _list), (ApiKey.CONSUMER_GROUP_HEARTBEAT, _consumer_heartbeat)]
EVERY_VERSION = [pytest.param(api_key, v, case, id=f"{api_key.name}-v{v}")
                 for api_key, case in CASES for v in versions(api_key)]


def _frame(api_key, v, body) -> bytes:
    return encode_request(api_key, v, 7, "client-1", body)[4:]        # without the size prefix


def _decode(frame: bytes):
    header, offset = parse_request_header(frame)
    return decode_request(header, frame, offset)


@pytest.mark.parametrize("api_key,v,case", EVERY_VERSION)
def test_a_request_goes_to_bytes_and_back_to_the_same_domain_request(api_key, v, case):
    body, expected, read = case(v)
    assert read(_decode(_frame(api_key, v, body))) == expected


@pytest.mark.parametrize("api_key,v,case", EVERY_VERSION)
def test_every_truncation_of_a_request_is_a_protocol_error(api_key, v, case):
    body, _, _ = case(v)
    frame = _frame(api_key, v, body)
    _, offset = parse_request_header(frame)
    for end in range(offset, len(frame)):
        with pytest.raises(ProtocolError):
            _decode(frame[:end])


@pytest.mark.parametrize("api_key,v,case", EVERY_VERSION)
def test_bytes_after_the_last_field_are_ignored_as_kafka_ignores_them(api_key, v, case):
    body, expected, read = case(v)
    assert read(_decode(_frame(api_key, v, body) + b"\x00\x07trailing")) == expected


def _response(api_key, v, body):
    header = RequestHeader(api_key, v, 9, "client-1")
    correlation_id, entity = decode_response(api_key, v, encode_response(header, body)[4:])
    assert correlation_id == 9
    return entity


@pytest.mark.parametrize("v", versions(ApiKey.LEAVE_GROUP))
def test_leave_group_v0_to_v2_answer_the_one_members_error_as_the_groups(v):
    result = {"error_code": 0, "members": [{"member_id": "m-1", "group_instance_id": None,
                                            "error_code": int(ErrorCode.UNKNOWN_MEMBER_ID)}]}
    entity = _response(ApiKey.LEAVE_GROUP, v, translate.leave_group_response(v, result))
    assert int(entity.error_code) == (int(ErrorCode.UNKNOWN_MEMBER_ID) if v < 3 else 0)
    if v >= 3:
        assert [(m.member_id, int(m.error_code)) for m in entity.members] == [
            ("m-1", int(ErrorCode.UNKNOWN_MEMBER_ID))]


@pytest.mark.parametrize("v", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch_answers_one_group_before_v8_and_a_list_from_v8(v):
    group = {"group_id": "g", "error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": -1, "committed_leader_epoch": -1,
                                      "metadata": "", "error_code": 0}]}]}
    entity = _response(ApiKey.OFFSET_FETCH, v, translate.offset_fetch_response(v, [group]))
    if v >= 8:
        (answered,) = entity.groups
        assert (answered.group_id, int(answered.error_code)) == ("g", int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
        return
    partition = entity.topics[0].partitions[0]
    if v >= 2:
        assert int(entity.error_code) == int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    # v0-1 have no group error: every partition carries it.
    assert int(partition.error_code) == (int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) if v < 2 else 0)


@pytest.mark.parametrize("v", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit_answers_every_partition_by_topic_in_the_requests_order(v):
    _, commit, _ = _commit(v)
    errors = {T1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, U0: ErrorCode.ILLEGAL_GENERATION}
    entity = _response(ApiKey.OFFSET_COMMIT, v, translate.offset_commit_response(commit, errors))
    assert [(t.name, int(p.partition_index), int(p.error_code)) for t in entity.topics for p in t.partitions] == [
        ("t", 0, 0), ("t", 1, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)), ("u", 0, int(ErrorCode.ILLEGAL_GENERATION))]


@pytest.mark.parametrize("v", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator_answers_one_key_before_v4_and_a_list_from_v4(v):
    found = [{"key": "g", "node_id": 2, "host": "h", "port": 9092, "error_code": 0, "error_message": ""}]
    entity = _response(ApiKey.FIND_COORDINATOR, v, translate.find_coordinator_response(v, found))
    one = entity.coordinators[0] if v >= 4 else entity
    assert (int(one.node_id), one.host, int(one.port), int(one.error_code)) == (2, "h", 9092, 0)
