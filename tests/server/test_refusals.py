"""server/refusals.py: a refused request answered in its own shape, for every version kio encodes.

Each request is built from its kio class with two items in every array (distinct
names, ids and indexes), sent through the codec as a client would, refused, and
the encoded response read back with kio's own reader for that version. The
expected mirroring is written here independently of the module's table: request
path -> response path, compared as flattened key tuples.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import uuid

import pytest
from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey as K
from tidelog.protocol.codec import (
    ProtocolError,
    RequestHeader,
    _request_class,
    _response_class,
    decode_request,
    encode_request,
    encode_response,
    kio_versions,
    parse_request_header,
)
from tidelog.server.authorization import IN_HANDLER, WHOLE_REQUEST
from tidelog.server.refusals import refusal

TOPIC, GROUP, CLUSTER, TXN = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_TOPICS = ("topics[name,topic_id]/partitions[partition_index]",) * 2
_INDEXES = ("topics[name]/partition_indexes[]", "topics[name]/partitions[partition_index]")
_RAFT = ("topics[topic_name]/partitions[partition_index]",) * 2

# API -> (code, the (request path, response path) pairs a version may have). A pair applies to a
# version whose request and response both have its first array.
EXPECTED: dict[int, tuple[ErrorCode, tuple[tuple[str, str], ...]]] = {
    K.JOIN_GROUP: (GROUP, ()),
    K.SYNC_GROUP: (GROUP, ()),
    K.HEARTBEAT: (GROUP, ()),
    K.LEAVE_GROUP: (GROUP, (("members[member_id,group_instance_id]",) * 2,)),
    K.CONSUMER_GROUP_HEARTBEAT: (GROUP, ()),
    K.OFFSET_COMMIT: (GROUP, (_TOPICS,)),
    K.OFFSET_FETCH: (GROUP, (_INDEXES, ("groups[group_id]/topics[name,topic_id]/partition_indexes[]",
                                        "groups[group_id]/topics[name,topic_id]/partitions[partition_index]"))),
    K.OFFSET_DELETE: (GROUP, (_TOPICS,)),
    K.DESCRIBE_GROUPS: (GROUP, (("groups[]", "groups[group_id]"),)),
    K.DELETE_GROUPS: (GROUP, (("groups_names[]", "results[group_id]"),)),
    K.LIST_GROUPS: (CLUSTER, ()),
    K.CONSUMER_GROUP_DESCRIBE: (GROUP, (("group_ids[]", "groups[group_id]"),)),
    K.FIND_COORDINATOR: (GROUP, (("coordinator_keys[]", "coordinators[key]"),)),
    K.INIT_PRODUCER_ID: (TXN, ()),
    K.ADD_PARTITIONS_TO_TXN: (TXN, (
        ("v3_and_below_topics[name]/partitions[]", "results_by_topic_v3_and_below[name]/results_by_partition"
                                                   "[partition_index]"),
        ("transactions[transactional_id]/topics[name]/partitions[]",
         "results_by_transaction[transactional_id]/topic_results[name]/results_by_partition[partition_index]"))),
    K.ADD_OFFSETS_TO_TXN: (TXN, ()),
    K.END_TXN: (TXN, ()),
    K.TXN_OFFSET_COMMIT: (TXN, (_TOPICS,)),
    K.WRITE_TXN_MARKERS: (CLUSTER, (("markers[producer_id]/topics[name]/partition_indexes[]",
                                     "markers[producer_id]/topics[name]/partitions[partition_index]"),)),
    K.DESCRIBE_TRANSACTIONS: (TXN, (("transactional_ids[]", "transaction_states[transactional_id]"),)),
    K.LIST_TRANSACTIONS: (CLUSTER, ()),
    K.DESCRIBE_PRODUCERS: (TOPIC, (_INDEXES,)),
    K.OFFSET_FOR_LEADER_EPOCH: (TOPIC, (("topics[topic]/partitions[partition]",) * 2,)),
    K.DELETE_RECORDS: (TOPIC, (_TOPICS,)),
    K.CREATE_PARTITIONS: (TOPIC, (("topics[name]", "results[name]"),)),
    K.DESCRIBE_CONFIGS: (TOPIC, (("resources[resource_type,resource_name]", "results[resource_type,resource_name]"),)),
    K.ALTER_CONFIGS: (TOPIC, (("resources[resource_type,resource_name]",
                               "responses[resource_type,resource_name]"),)),
    K.INCREMENTAL_ALTER_CONFIGS: (CLUSTER, (("resources[resource_type,resource_name]",
                                             "responses[resource_type,resource_name]"),)),
    K.ELECT_LEADERS: (CLUSTER, (("topic_partitions[topic]/partitions[]",
                                 "replica_election_results[topic]/partition_result[partition_id]"),)),
    K.ALTER_PARTITION_REASSIGNMENTS: (CLUSTER, (("topics[name]/partitions[partition_index]",
                                                 "responses[name]/partitions[partition_index]"),)),
    K.LIST_PARTITION_REASSIGNMENTS: (CLUSTER, ()),     # its partitions carry no error code
    K.UNREGISTER_BROKER: (CLUSTER, ()),
    K.DESCRIBE_CLUSTER: (CLUSTER, ()),
    K.DESCRIBE_LOG_DIRS: (CLUSTER, ()),
    K.DESCRIBE_QUORUM: (CLUSTER, (_RAFT,)),
    K.DESCRIBE_ACLS: (CLUSTER, ()),
    K.DESCRIBE_USER_SCRAM_CREDENTIALS: (CLUSTER, (("users[name]", "results[user]"),)),
    K.ALTER_USER_SCRAM_CREDENTIALS: (CLUSTER, (("deletions[name]+upsertions[name]", "results[user]"),)),
    K.DESCRIBE_CLIENT_QUOTAS: (CLUSTER, ()),
    K.ALTER_CLIENT_QUOTAS: (CLUSTER, (("entries[]", "entries[]"),)),       # one answer per entry, its entity kept
    K.CREATE_TOPICS: (TOPIC, (("topics[name]",) * 2,)),
    K.DELETE_TOPICS: (TOPIC, (("topic_names[]", "responses[name]"),
                              ("topics[name,topic_id]", "responses[name,topic_id]"))),
    K.CREATE_ACLS: (CLUSTER, (("creations[]", "results[]"),)),
    K.DELETE_ACLS: (CLUSTER, (("filters[]", "filter_results[]"),)),
    K.PRODUCE: (TOPIC, (("topic_data[name,topic_id]/partition_data[index]",
                         "responses[name,topic_id]/partition_responses[index]"),)),
    K.FETCH: (TOPIC, (("topics[topic,topic_id]/partitions[partition]",
                       "responses[topic,topic_id]/partitions[partition_index]"),)),
    K.LIST_OFFSETS: (TOPIC, (("topics[name]/partitions[partition_index]",) * 2,)),
    K.METADATA: (TOPIC, (("topics[name,topic_id]",) * 2,)),
    K.BROKER_REGISTRATION: (CLUSTER, ()),
    K.BROKER_HEARTBEAT: (CLUSTER, ()),
    K.ALTER_PARTITION: (CLUSTER, (("topics[topic_id]/partitions[partition_index]",) * 2,)),
    K.ASSIGN_REPLICAS_TO_DIRS: (CLUSTER, (("directories[id_]/topics[topic_id]/partitions[partition_index]",) * 2,)),
    K.ALLOCATE_PRODUCER_IDS: (CLUSTER, ()),
    K.VOTE: (CLUSTER, (_RAFT,)),
    K.BEGIN_QUORUM_EPOCH: (CLUSTER, (_RAFT,)),
    K.END_QUORUM_EPOCH: (CLUSTER, (_RAFT,)),
    K.FETCH_SNAPSHOT: (CLUSTER, (("topics[name]/partitions[partition]", "topics[name]/partitions[index]"),)),
    K.UPDATE_FEATURES: (CLUSTER, (("feature_updates[feature]", "results[feature]"),)),
    K.ALTER_REPLICA_LOG_DIRS: (CLUSTER, ()),      # results flatten dirs[]/topics[]: test_..._per_topic_of_each_dir
}
# Versions whose response has no place for an error: Kafka answers them empty.
NO_PLACE = {(K.DESCRIBE_LOG_DIRS, 1), (K.DESCRIBE_LOG_DIRS, 2)}
# Versions whose request has items but whose response has no array for them (top-level error only).
UNANSWERED_ITEMS = {(K.UPDATE_FEATURES, 2)}

CASES = [pytest.param(api, version, id=f"{api.name}-v{version}")
         for api in EXPECTED for version in range(kio_versions(api)[0], kio_versions(api)[1] + 1)]


# ------------------------------------------------------------------ requests

def _scalar(kafka_type: str, label: str, n: int):
    if kafka_type == "string":
        return label
    if kafka_type in ("bytes", "records"):
        return b"x"
    if kafka_type == "uuid":
        return uuid.UUID(int=n)
    if kafka_type == "bool":
        return False
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=n)
    if kafka_type == "float64":
        return 0.5
    return n % 100 if kafka_type == "int8" else n


def _sample(cls, label: str, counter):
    """A ``cls`` with every field set: two elements per array, every string and number distinct."""
    values = {}
    for field in dataclasses.fields(cls):
        kind, kafka_type, here = classify_field(field), field.metadata.get("kafka_type"), f"{label}.{field.name}"
        if isinstance(kind, EntityTupleField):
            values[field.name] = tuple(_sample(kind.type_, f"{here}#{j}", counter) for j in range(2))
        elif isinstance(kind, EntityField):
            values[field.name] = _sample(kind.type_, here, counter)
        elif kind.is_array:
            values[field.name] = tuple(_scalar(kafka_type, f"{here}#{j}", next(counter)) for j in range(2))
        else:
            values[field.name] = _scalar(kafka_type, here, next(counter))
    return cls(**values)


def _request(api: int, version: int, entity=None):
    """(header, request) as the server decodes them."""
    entity = entity if entity is not None else _sample(_request_class(api, version), "r", itertools.count(1))
    frame = encode_request(api, version, 7, "client", entity)[4:]
    header, offset = parse_request_header(frame)
    return header, decode_request(header, frame, offset)


def _answer(header: RequestHeader, body: dict):
    """``body`` encoded, then read back with kio's reader for the response class."""
    frame = memoryview(encode_response(header, body))
    cls = _response_class(header.api_key, header.api_version)
    offset = 8 + (1 if cls.__flexible__ else 0)            # size, correlation id, tagged fields
    entity, size = entity_reader(cls)(frame, offset)
    assert offset + size == len(frame)
    return entity


# ------------------------------------------------------------------ reading answers

def _path(spec: str) -> list[tuple[str, tuple[str, ...]]]:
    """"topics[name,topic_id]/partitions[partition_index]" -> [(array, key fields)]; "[]": the item itself."""
    steps = []
    for step in spec.split("/"):
        array, _, keys = step.partition("[")
        steps.append((array, tuple(k for k in keys.rstrip("]").split(",") if k)))
    return steps


def _leaves(entity, spec: str, code: int = 0) -> list[tuple[tuple, bool]]:
    """Per innermost item along ``spec`` ("a[...]+b[...]": a's, then b's): its key tuple (the keys
    of the items enclosing it, then its own), and whether it or an enclosing item carries ``code``."""
    if "+" in spec:
        return [leaf for part in spec.split("+") for leaf in _leaves(entity, part, code)]
    steps, out = _path(spec), []

    def walk(node, depth, keys, carried):
        if depth == len(steps):
            out.append((keys, carried))
            return
        array, fields = steps[depth]
        for item in getattr(node, array) or ():
            key = tuple(getattr(item, f, None) for f in fields) if fields else (item,)
            walk(item, depth + 1, keys + key, carried or _carries(item, code))

    walk(entity, 0, (), False)
    return out


def _carries(item, code) -> bool:
    return dataclasses.is_dataclass(item) and any(
        f.metadata.get("kafka_type") == "error_code" and getattr(item, f.name) == code
        for f in dataclasses.fields(item))


def _error_codes(entity) -> list[int]:
    """Every error_code-typed value anywhere in ``entity``."""
    out = []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.metadata.get("kafka_type") == "error_code":
            out.append(int(value))
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    out.extend(_error_codes(item))
        elif dataclasses.is_dataclass(value):
            out.extend(_error_codes(value))
    return out


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("api,version", CASES)
def test_refusal_answers_every_item_in_the_requests_shape(api, version):
    code, pairs = EXPECTED[api]
    header, request = _request(api, version)
    response = _answer(header, refusal(header, request, code))
    codes = _error_codes(response)
    assert all(c == code for c in codes), codes
    if (api, version) in NO_PLACE:
        assert codes == [] and not any(getattr(response, f.name) for f in dataclasses.fields(response)
                                       if f.name != "throttle_time")
        return
    assert codes, "the refusal must carry its code somewhere"
    if hasattr(response, "error_code"):
        assert response.error_code == code
    for request_spec, response_spec in pairs:
        if not hasattr(request, _path(request_spec)[0][0]):
            continue                                    # an array of other versions
        if not hasattr(response, _path(response_spec)[0][0]):
            assert (api, version) in UNANSWERED_ITEMS, f"{response_spec} missing"
            continue
        wanted = [keys for keys, _ in _leaves(request, request_spec)]
        got = _leaves(response, response_spec, code)
        assert len(wanted) >= 2 and all(carried for _, carried in got), got
        if _path(response_spec)[-1][1]:
            assert [keys for keys, _ in got] == wanted
        else:                                           # no keys (CreateAcls): one answer per item
            assert len(got) == len(wanted)


def test_every_gated_and_in_handler_api_is_covered():
    assert set(WHOLE_REQUEST) | set(IN_HANDLER) <= set(EXPECTED)


def test_the_nothing_values_are_kafkas():
    header, request = _request(K.PRODUCE, 10)
    partition = _answer(header, refusal(header, request, TOPIC)).responses[0].partition_responses[0]
    assert (partition.base_offset, partition.log_start_offset, partition.log_append_time) == (-1, -1, None)
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (-1, -1)
    header, request = _request(K.FIND_COORDINATOR, 3)
    found = _answer(header, refusal(header, request, GROUP))
    assert (found.node_id, found.host, found.port) == (-1, "", -1)
    header, request = _request(K.OFFSET_FETCH, 7)
    partition = _answer(header, refusal(header, request, GROUP)).topics[1].partitions[1]
    assert (partition.committed_offset, partition.committed_leader_epoch, partition.metadata) == (-1, -1, None)
    header, request = _request(K.INIT_PRODUCER_ID, 4)
    answer = _answer(header, refusal(header, request, TXN))
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
    header, request = _request(K.DESCRIBE_GROUPS, 5)
    assert _answer(header, refusal(header, request, GROUP)).groups[0].authorized_operations == -2**31
    header, request = _request(K.FETCH, 12)
    partition = _answer(header, refusal(header, request, TOPIC)).responses[0].partitions[0]
    assert (partition.high_watermark, partition.last_stable_offset, partition.records) == (-1, -1, None)


def test_top_level_keys_and_messages_carry_over():
    sample = _sample(_request_class(K.DESCRIBE_CLUSTER, 1), "r", itertools.count(1))
    header, request = _request(K.DESCRIBE_CLUSTER, 1, dataclasses.replace(sample, endpoint_type=2))
    body = refusal(header, request, CLUSTER, "Cluster authorization failed.")
    answer = _answer(header, body)
    assert answer.endpoint_type == 2                     # controllers (the default is brokers)
    assert answer.error_message == "Cluster authorization failed."
    header, request = _request(K.DESCRIBE_CONFIGS, 4)
    answer = _answer(header, refusal(header, request, TOPIC, "denied"))
    assert [r.error_message for r in answer.results] == ["denied", "denied"]


def test_null_request_arrays_answer_empty_ones():
    everything = _request_class(K.METADATA, 12)(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False)
    header, request = _request(K.METADATA, 12, everything)
    assert _answer(header, refusal(header, request, TOPIC)).topics == ()
    sample = _sample(_request_class(K.OFFSET_FETCH, 9), "r", itertools.count(1))
    all_offsets = dataclasses.replace(sample, groups=tuple(dataclasses.replace(g, topics=None) for g in sample.groups))
    header, request = _request(K.OFFSET_FETCH, 9, all_offsets)
    groups = _answer(header, refusal(header, request, GROUP)).groups
    assert [(g.group_id, g.error_code, g.topics) for g in groups] == [(g.group_id, GROUP, ()) for g in sample.groups]


def test_one_answer_per_scram_user():
    cls = _request_class(K.ALTER_USER_SCRAM_CREDENTIALS, 0)
    sample = _sample(cls, "r", itertools.count(1))
    same = dataclasses.replace(sample, upsertions=tuple(dataclasses.replace(u, name=d.name)
                                                        for u, d in zip(sample.upsertions, sample.deletions)))
    header, request = _request(K.ALTER_USER_SCRAM_CREDENTIALS, 0, same)
    answer = _answer(header, refusal(header, request, CLUSTER))
    assert [r.user for r in answer.results] == [d.name for d in sample.deletions]


def test_an_unmapped_api_gets_its_top_level_error_or_closes():
    header = RequestHeader(K.SASL_HANDSHAKE, 1, 7, "c")
    assert _answer(header, refusal(header, None, CLUSTER)).error_code == CLUSTER
    header = RequestHeader(K.DESCRIBE_TOPIC_PARTITIONS, 0, 7, "c")
    with pytest.raises(ProtocolError):
        refusal(header, None, CLUSTER)


def test_alter_replica_log_dirs_is_refused_per_topic_of_each_dir():
    """Kafka's AlterReplicaLogDirsRequest.getErrorResponse: one result per topic of each
    directory, every partition of it with the error."""
    sample = _sample(_request_class(K.ALTER_REPLICA_LOG_DIRS, 2), "r", itertools.count(1))
    header, request = _request(K.ALTER_REPLICA_LOG_DIRS, 2, sample)
    answer = _answer(header, refusal(header, request, CLUSTER))
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.results] == [
        (t.name, [(p, CLUSTER) for p in t.partitions]) for d in sample.dirs for t in d.topics]
    assert len(answer.results) >= 2
