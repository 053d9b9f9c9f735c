"""A whole request refused, answered in the request's own shape (Kafka's per-item errors).

Theory of operation. When the ACL gate (server/authorization.py) refuses a
request, Kafka does not close the connection: it answers with the refusal's
error code (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) in
every place the response has for one. ``refusal`` builds that body for any
(API, version) kio can encode:

* the top-level ``error_code`` where the version has one, and every field typed
  ``error_code`` (AddPartitionsToTxn's ``partition_error_code`` too) on each
  item of the response arrays that mirror the request's items; ``error_message``
  fields get the message;
* ``_MIRRORS`` says, per API, which request array becomes which response array
  and which key fields carry over, renamed where Kafka names them differently
  (a Fetch request's ``partition`` is the response's ``partition_index``); an
  array of plain values (DescribeGroups' group ids) carries the value itself.
  An entry whose arrays a version lacks is skipped, so one table serves every
  version: OffsetFetch's single group (v1-7) and groups (v8+), FindCoordinator's
  key (v0-3) and coordinators (v4+), AddPartitionsToTxn's topics (v0-3) and
  transactions (v4+). A null request array ("all topics") mirrors to an empty one;
* every other field is Kafka's "nothing": kio's default where the schema has
  one (-1 epochs and offsets, MIN_INT authorized operations), -1 for the offsets,
  ids and epochs in ``_UNKNOWN`` that have none, else the codec's zero (empty
  strings and arrays, null where nullable).

Where a version has no place for an error at all the answer is Kafka's empty
one (DescribeLogDirs v1-2: its results are per log directory, not per request
item). An API missing from ``_MIRRORS`` is answered with its top-level error,
or, if its response has none, ``ProtocolError`` (the connection closes).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import (EntityField, EntityTupleField, ProtocolError, _response_class, classify_field,
                                    is_optional)

# Fields without a schema default whose "nothing" is -1 (Kafka's error paths write it).
_UNKNOWN = frozenset({"base_offset", "committed_offset", "high_watermark", "low_watermark", "end_offset", "epoch",
                      "leader_id", "leader_epoch", "partition_epoch", "node_id", "port", "producer_id",
                      "producer_epoch", "producer_id_start"})
_SIGNED = frozenset({"int16", "int32", "int64"})
_ABSENT = object()


class Mirror(NamedTuple):
    """Request array(s) -> response array; ``keys``: (response field, request field) pairs,
    request field "" for the item itself (an array of plain values)."""
    request: tuple[str, ...]
    response: str
    keys: tuple[tuple[str, str], ...] = ()
    nested: tuple[Mirror, ...] = ()
    unique: bool = False                 # one response item per distinct key (AlterUserScramCredentials)


def _m(request: str, response: str, keys: str = "", *nested: Mirror, unique: bool = False) -> Mirror:
    """``request``: array names joined by "+" (a name "a/b": every b of every a, flattened);
    ``keys``: "name partition_index=partition group_id=" — same name, renamed
    (response=request), or the item itself."""
    return Mirror(tuple(request.split("+")), response, tuple(map(_key, keys.split())), nested, unique)


def _key(spec: str) -> tuple[str, str]:
    response, renamed, request = spec.partition("=")
    return response, request if renamed else response


def _root(*nested: Mirror, keys: str = "") -> Mirror:
    return _m("", "", keys, *nested)


def _topics(request: str = "topics", response: str = "topics", name: str = "name topic_id",
            partitions: Mirror | None = None) -> Mirror:
    """The common topics[].partitions[] shape."""
    return _m(request, response, name, partitions or _m("partitions", "partitions", "partition_index"))


_INDEXES = _m("partition_indexes", "partitions", "partition_index=")      # int32[] -> [{partition_index}]
_RAFT = _root(_topics(name="topic_name"))

_MIRRORS: dict[int, Mirror] = {
    ApiKey.PRODUCE: _root(_topics("topic_data", "responses",
                                  partitions=_m("partition_data", "partition_responses", "index"))),
    ApiKey.FETCH: _root(_topics(name="topic topic_id", response="responses",
                                partitions=_m("partitions", "partitions", "partition_index=partition"))),
    ApiKey.LIST_OFFSETS: _root(_topics()),
    ApiKey.METADATA: _root(_m("topics", "topics", "name topic_id")),
    ApiKey.OFFSET_COMMIT: _root(_topics()),
    ApiKey.OFFSET_FETCH: _root(_topics(partitions=_INDEXES),
                               _m("groups", "groups", "group_id", _topics(partitions=_INDEXES))),
    ApiKey.FIND_COORDINATOR: _root(_m("coordinator_keys", "coordinators", "key=")),
    ApiKey.JOIN_GROUP: _root(),
    ApiKey.HEARTBEAT: _root(),
    ApiKey.LEAVE_GROUP: _root(_m("members", "members", "member_id group_instance_id")),
    ApiKey.SYNC_GROUP: _root(),
    ApiKey.DESCRIBE_GROUPS: _root(_m("groups", "groups", "group_id=")),
    ApiKey.LIST_GROUPS: _root(),
    ApiKey.CREATE_TOPICS: _root(_m("topics", "topics", "name")),
    ApiKey.DELETE_TOPICS: _root(_m("topic_names", "responses", "name="), _m("topics", "responses", "name topic_id")),
    ApiKey.DELETE_RECORDS: _root(_topics()),
    ApiKey.INIT_PRODUCER_ID: _root(),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _root(_topics(name="topic", partitions=_m("partitions", "partitions",
                                                                               "partition"))),
    ApiKey.ADD_PARTITIONS_TO_TXN: _root(
        _m("v3_and_below_topics", "results_by_topic_v3_and_below", "name",
           _m("partitions", "results_by_partition", "partition_index=")),
        _m("transactions", "results_by_transaction", "transactional_id",
           _m("topics", "topic_results", "name", _m("partitions", "results_by_partition", "partition_index=")))),
    ApiKey.ADD_OFFSETS_TO_TXN: _root(),
    ApiKey.END_TXN: _root(),
    ApiKey.WRITE_TXN_MARKERS: _root(_m("markers", "markers", "producer_id", _topics(name="name",
                                                                                   partitions=_INDEXES))),
    ApiKey.TXN_OFFSET_COMMIT: _root(_topics()),
    ApiKey.DESCRIBE_ACLS: _root(),
    ApiKey.CREATE_ACLS: _root(_m("creations", "results")),
    ApiKey.DELETE_ACLS: _root(_m("filters", "filter_results")),
    ApiKey.DESCRIBE_CONFIGS: _root(_m("resources", "results", "resource_type resource_name")),
    ApiKey.ALTER_CONFIGS: _root(_m("resources", "responses", "resource_type resource_name")),
    ApiKey.DESCRIBE_LOG_DIRS: _root(),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _root(_m("dirs/topics", "results", "topic_name=name",
                                            _m("partitions", "partitions", "partition_index="))),
    ApiKey.CREATE_PARTITIONS: _root(_m("topics", "results", "name")),
    ApiKey.DELETE_GROUPS: _root(_m("groups_names", "results", "group_id=")),
    ApiKey.ELECT_LEADERS: _root(_m("topic_partitions", "replica_election_results", "topic",
                                   _m("partitions", "partition_result", "partition_id="))),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _root(_m("resources", "responses", "resource_type resource_name")),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _root(_m("topics", "responses", "name",
                                                   _m("partitions", "partitions", "partition_index"))),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _root(_m("topics", "topics", "name",
                                                  _m("partition_indexes", "partitions", "partition_index="))),
    ApiKey.OFFSET_DELETE: _root(_topics()),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _root(_m("users", "results", "user=name")),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _root(_m("deletions+upsertions", "results", "user=name", unique=True)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _root(),
    ApiKey.ALTER_CLIENT_QUOTAS: _root(_m("entries", "entries", "", _m("entity", "entity", "entity_type entity_name"))),
    ApiKey.VOTE: _RAFT,
    ApiKey.BEGIN_QUORUM_EPOCH: _RAFT,
    ApiKey.END_QUORUM_EPOCH: _RAFT,
    ApiKey.DESCRIBE_QUORUM: _RAFT,
    ApiKey.ALTER_PARTITION: _root(_topics(name="topic_id")),
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: _root(_m("directories", "directories", "id_", _topics(name="topic_id"))),
    ApiKey.UPDATE_FEATURES: _root(_m("feature_updates", "results", "feature")),
    ApiKey.FETCH_SNAPSHOT: _root(_topics(name="name", partitions=_m("partitions", "partitions", "index=partition"))),
    ApiKey.DESCRIBE_CLUSTER: _root(keys="endpoint_type"),
    ApiKey.DESCRIBE_PRODUCERS: _root(_topics(name="name", partitions=_INDEXES)),
    ApiKey.BROKER_REGISTRATION: _root(),
    ApiKey.BROKER_HEARTBEAT: _root(),
    ApiKey.DESCRIBE_TRANSACTIONS: _root(_m("transactional_ids", "transaction_states", "transactional_id=")),
    ApiKey.LIST_TRANSACTIONS: _root(),
    ApiKey.ALLOCATE_PRODUCER_IDS: _root(),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _root(),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _root(_m("group_ids", "groups", "group_id=")),
}


def response_array(api_key: int, request_array: str) -> str:
    """The response array that answers the items of ``request_array``."""
    return next(m.response for m in _MIRRORS[api_key].nested if request_array in m.request)


def refusal(header, request, code: ErrorCode, message: str | None = None) -> dict:
    """The response body (for ``encode_response`` at ``header.api_version``) answering
    all of ``request`` with ``code``: at the top level where the version has an error
    code, and on every response item mirroring a request item."""
    cls = _response_class(header.api_key, header.api_version)
    mirror = _MIRRORS.get(header.api_key)
    if mirror is None:
        if "error_code" not in _arrays_and_names(cls)[1]:
            raise ProtocolError(f"API key {header.api_key} v{header.api_version}: no place for {code.name}")
        mirror = _root()
    return _build(cls, request, mirror, int(code), message)


def _build(cls, source, mirror: Mirror, code: int, message: str | None) -> dict:
    """One response entity: the error, the keys carried over from ``source``, the mirrored arrays."""
    body = _nothing(cls, code, message)
    arrays, names = _arrays_and_names(cls)
    for response_field, request_field in mirror.keys:
        value = source if not request_field else getattr(source, request_field, _ABSENT)
        if response_field in names and value is not _ABSENT:
            body[response_field] = value
    for child in mirror.nested:
        element, items = arrays.get(child.response), _items(source, child)
        if element is not None and items is not None:
            body[child.response] = [_build(element, item, child, code, message) for item in items]
    return body


def _items(source, mirror: Mirror) -> list | None:
    """The request items ``mirror`` answers (a null array: none), or None if ``source`` has none of its arrays."""
    arrays = [_array(source, name) for name in mirror.request]
    if all(array is _ABSENT for array in arrays):
        return None
    items = [item for array in arrays if array is not _ABSENT for item in array or ()]
    if not mirror.unique:
        return items
    distinct: dict[tuple, object] = {}
    for item in items:
        distinct.setdefault(tuple(getattr(item, field, None) for _, field in mirror.keys), item)
    return list(distinct.values())


def _array(source, name: str):
    """``source``'s array ``name``; "a/b": the b items of every a item, in order."""
    outer, _, inner = name.partition("/")
    items = getattr(source, outer, _ABSENT)
    if not inner or items is _ABSENT:
        return items
    return [item for element in items or () for item in _array(element, inner) or ()]


def _nothing(cls, code: int, message: str | None) -> dict:
    """``cls``'s error fields, and the fields whose "nothing" is neither kio's default nor the codec's zero."""
    body: dict = {}
    for field in dataclasses.fields(cls):
        kind, kafka_type = classify_field(field), field.metadata.get("kafka_type")
        if kafka_type == "error_code" and not kind.is_array:
            body[field.name] = code
        elif field.name == "error_message":
            body[field.name] = message
        elif field.default is not dataclasses.MISSING or kind.is_array:
            continue
        elif isinstance(kind, EntityField):
            if not is_optional(field):
                body[field.name] = _nothing(kind.type_, code, message)
        elif field.name in _UNKNOWN and kafka_type in _SIGNED:
            body[field.name] = -1
        elif kafka_type == "datetime_i64" and not is_optional(field):
            body[field.name] = 0        # converted to the epoch (the codec's zero here is an int kio cannot write)
    return body


@functools.cache
def _arrays_and_names(cls) -> tuple[dict[str, type], frozenset[str]]:
    """``cls``'s arrays of entities (name -> element class) and all its field names."""
    fields = dataclasses.fields(cls)
    arrays = {f.name: classify_field(f).type_ for f in fields if isinstance(classify_field(f), EntityTupleField)}
    return arrays, frozenset(f.name for f in fields)
