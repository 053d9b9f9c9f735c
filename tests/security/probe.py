"""An attacker's toolkit for the security tests: a request of any API key and version
that names things (one item in every array), sent raw, and the error codes of the
answer collected wherever they sit.

``probe_body(api_key, version, name)`` walks kio's request class for that version:
every array gets one element, every string is ``name`` (a topic, group, transactional
id or config resource of that name), integers are 0 except the fields that would make
a request a no-op or a follower's (``replica_id`` stays -1 unless asked). ``call``
sends it on an open ``KafkaConnection`` and returns the error codes found in the answer,
or ``CLOSED`` when the broker closed the connection instead of answering.
"""

from __future__ import annotations

import asyncio
import dataclasses

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from tidelog.core.errors import ErrorCode
from tidelog.protocol.codec import _request_class

CLOSED = "closed"
TIMED_OUT = "timed out"
AUTHORIZATION_FAILED = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
# Fields whose zero would make the request ask for nothing or mean something else.
_VALUES = {"resource_type": 2, "key_type": 0, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20,
           "max_wait_ms": 0, "acks": -1, "timeout_ms": 1000, "replica_id": -1, "broker_id": 1,
           "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1, "generation_id": -1,
           "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "iterations": 4096,
           "mechanism": 2, "operation": 3, "permission_type": 3, "pattern_type": 3,
           "resource_pattern_type": 3, "resource_pattern_type_filter": 3, "principal": "User:mallory",
           "host": "*", "protocol_type": "consumer", "config_operation": 0, "election_type": 0,
           "timestamp": -1, "leader_epoch": -1, "current_leader_epoch": -1, "isolation_level": 0}


def probe_body(api_key: int, version: int, name: str, **overrides) -> dict:
    return _fill(_request_class(api_key, version), name, overrides)


def _fill(cls, name: str, overrides: dict) -> dict:
    body = {}
    for field in dataclasses.fields(cls):
        kind = classify_field(field)
        kafka_type = field.metadata.get("kafka_type")
        if field.name in overrides:
            body[field.name] = overrides[field.name]
        elif isinstance(kind, EntityTupleField):
            body[field.name] = [_fill(kind.type_, name, overrides)]
        elif isinstance(kind, EntityField):
            body[field.name] = _fill(kind.type_, name, overrides)
        elif isinstance(kind, PrimitiveTupleField):
            body[field.name] = [name] if kafka_type == "string" else [0] if kafka_type in (
                "int32", "int64", "int16", "int8") else []
        elif field.name in _VALUES and not (isinstance(_VALUES[field.name], str) and kafka_type != "string"):
            body[field.name] = _VALUES[field.name]
        elif kafka_type == "string":
            body[field.name] = name
        elif kafka_type in ("bytes", "records"):
            body[field.name] = None if is_optional(field) and kafka_type == "records" else b""
    return body


def error_codes(entity) -> set:
    """Every error code (``error_code``, ``partition_error_code``, ...) in a decoded answer, at any depth."""
    found = set()
    if dataclasses.is_dataclass(entity):
        for field in dataclasses.fields(entity):
            value = getattr(entity, field.name)
            if field.name.endswith("error_code") and value is not None:
                found.add(ErrorCode(int(getattr(value, "value", value))))
            else:
                found |= error_codes(value)
    elif isinstance(entity, (tuple, list)):
        for item in entity:
            found |= error_codes(item)
    return found


async def call(connection, api_key: int, version: int, body: dict, timeout_s: float = 10.0):
    """The error codes of the answer, or CLOSED if the connection was closed instead."""
    try:
        answer = await connection.request(api_key, body, version=version, timeout_s=timeout_s)
    except ConnectionError:
        return CLOSED
    except asyncio.TimeoutError:
        return TIMED_OUT
    return error_codes(answer)
