"""metadata/authorizer.py and controller/acl_control.py: Kafka's StandardAuthorizer rules."""

import random

import pytest

from tidelog.controller.acl_control import AclBinding, AclControlManager, AclFilter
from tidelog.core.errors import ErrorCode
from tidelog.metadata.authorizer import (
    AclOperation as Op,
    AclPermissionType as Perm,
    Authorizer,
    PatternType as Pat,
    ResourceType as Res,
)
from tidelog.metadata.delta import replay_all
from tidelog.metadata.records import decode, encode

ALLOW, DENY = Perm.ALLOW, Perm.DENY


def acls(*bindings):
    manager = AclControlManager(random.Random(0))
    result = manager.create([AclBinding(*b) for b in bindings])
    assert all(r.error_code == ErrorCode.NONE for r in result.response), result.response
    return result.records


def allowed(records, principal, operation, resource_type, name, host="10.0.0.1", **settings):
    return Authorizer(**settings).authorize(records, principal, host, operation, resource_type, name)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found():
    assert not allowed([], "User:alice", Op.READ, Res.TOPIC, "t")
    assert allowed([], "User:alice", Op.READ, Res.TOPIC, "t", allow_everyone_if_no_acl_found=True)
    other = acls((Res.TOPIC, "t", Pat.LITERAL, "User:bob", "*", Op.READ, ALLOW))
    assert not allowed(other, "User:alice", Op.READ, Res.TOPIC, "t", allow_everyone_if_no_acl_found=True)


def test_literal_wildcard_and_prefixed_patterns():
    records = acls((Res.TOPIC, "orders", Pat.LITERAL, "User:alice", "*", Op.READ, ALLOW),
                   (Res.TOPIC, "logs-", Pat.PREFIXED, "User:alice", "*", Op.WRITE, ALLOW),
                   (Res.GROUP, "*", Pat.LITERAL, "User:*", "*", Op.READ, ALLOW))
    assert allowed(records, "User:alice", Op.READ, Res.TOPIC, "orders")
    assert not allowed(records, "User:alice", Op.READ, Res.TOPIC, "orders-2")
    assert allowed(records, "User:alice", Op.WRITE, Res.TOPIC, "logs-app")
    assert not allowed(records, "User:alice", Op.WRITE, Res.TOPIC, "log")
    assert allowed(records, "User:anyone", Op.READ, Res.GROUP, "g1")


def test_deny_wins_and_hosts_match():
    records = acls((Res.TOPIC, "t", Pat.LITERAL, "User:alice", "*", Op.ALL, ALLOW),
                   (Res.TOPIC, "t", Pat.LITERAL, "User:alice", "10.0.0.9", Op.WRITE, DENY))
    assert allowed(records, "User:alice", Op.WRITE, Res.TOPIC, "t")
    assert not allowed(records, "User:alice", Op.WRITE, Res.TOPIC, "t", host="10.0.0.9")
    assert allowed(records, "User:alice", Op.READ, Res.TOPIC, "t", host="10.0.0.9")


def test_implied_operations_and_super_users():
    records = acls((Res.TOPIC, "t", Pat.LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
                   (Res.TOPIC, "t", Pat.LITERAL, "User:alice", "*", Op.ALTER_CONFIGS, ALLOW))
    assert allowed(records, "User:alice", Op.DESCRIBE, Res.TOPIC, "t")            # WRITE implies DESCRIBE
    assert allowed(records, "User:alice", Op.DESCRIBE_CONFIGS, Res.TOPIC, "t")
    assert not allowed(records, "User:alice", Op.READ, Res.TOPIC, "t")
    assert allowed(records, "User:root", Op.DELETE, Res.TOPIC, "t", super_users=frozenset({"User:root"}))


@pytest.mark.parametrize("binding", [
    (Res.ANY, "t", Pat.LITERAL, "User:a", "*", Op.READ, ALLOW),
    (Res.TOPIC, "t", Pat.MATCH, "User:a", "*", Op.READ, ALLOW),
    (Res.TOPIC, "t", Pat.LITERAL, "alice", "*", Op.READ, ALLOW),
    (Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.ANY, ALLOW),
    (Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.READ, Perm.ANY),
    (Res.CLUSTER, "other", Pat.LITERAL, "User:a", "*", Op.ALTER, ALLOW),
])
def test_invalid_creations_are_refused(binding):
    result = AclControlManager(random.Random(0)).create([AclBinding(*binding)])
    assert not result.records and result.response[0].error_code == ErrorCode.INVALID_REQUEST


def test_delete_filters_remove_matching_acls_and_replay_into_the_image():
    manager = AclControlManager(random.Random(0))
    created = manager.create([AclBinding(Res.TOPIC, "t", Pat.LITERAL, "User:a", "*", Op.READ, ALLOW),
                              AclBinding(Res.TOPIC, "t", Pat.LITERAL, "User:b", "*", Op.READ, ALLOW),
                              AclBinding(Res.GROUP, "g", Pat.PREFIXED, "User:a", "*", Op.READ, ALLOW)]).records
    for record in created:
        manager.replay(record)
        assert decode(encode(record)) == record
    deleted = manager.delete([AclFilter(Res.ANY, None, Pat.ANY, "User:a", None, Op.ANY, Perm.ANY)])
    assert len(deleted.response[0].matching) == 2 and len(deleted.records) == 2
    image = replay_all([(i, r) for i, r in enumerate(created + deleted.records)])
    assert [a.principal for a in image.acls.values()] == ["User:b"]
    assert replay_all([(0, r) for r in image.to_records()]).acls == image.acls         # snapshots keep ACLs
