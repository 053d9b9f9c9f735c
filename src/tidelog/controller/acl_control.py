"""ACLs on the controller (Kafka's AclControlManager): CreateAcls and DeleteAcls.

Each creation is checked as Kafka checks it — a concrete resource type, LITERAL
or PREFIXED pattern, a concrete operation and permission, a principal of the form
``Type:name``, a host, the cluster resource named ``kafka-cluster`` — and becomes
an AccessControlEntryRecord with a fresh id (an identical ACL is not added twice);
a deletion filter removes every matching ACL (RemoveAccessControlEntryRecord).
The ``rng`` gives the ids, so tests and the simulator are deterministic.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from tidelog.controller.result import ControllerResult
from tidelog.core.errors import ErrorCode
from tidelog.metadata.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    matches_filter,
)
from tidelog.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclFilter:
    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclResult:
    error_code: ErrorCode
    error_message: str | None = None
    matching: tuple[AccessControlEntryRecord, ...] = ()


class AclControlManager:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.acls: dict[uuid.UUID, AccessControlEntryRecord] = {}

    def create(self, bindings: list[AclBinding]) -> ControllerResult[list[AclResult]]:
        records, results = [], []
        existing = {self._key(a) for a in self.acls.values()}
        for binding in bindings:
            problem = _invalid(binding)
            if problem is not None:
                results.append(AclResult(ErrorCode.INVALID_REQUEST, problem))
                continue
            key = (binding.resource_type, binding.resource_name, binding.pattern_type, binding.principal,
                   binding.host, binding.operation, binding.permission_type)
            if key not in existing:
                existing.add(key)
                records.append(AccessControlEntryRecord(uuid.UUID(int=self.rng.getrandbits(128)), *key))
            results.append(AclResult(ErrorCode.NONE))
        return ControllerResult(records, results)

    def delete(self, filters: list[AclFilter]) -> ControllerResult[list[AclResult]]:
        records, results, removed = [], [], set()
        for f in filters:
            matching = tuple(a for a in self.acls.values() if matches_filter(
                a, f.resource_type, f.resource_name, f.pattern_type, f.principal, f.host, f.operation,
                f.permission_type))
            for acl in matching:
                if acl.id not in removed:
                    removed.add(acl.id)
                    records.append(RemoveAccessControlEntryRecord(acl.id))
            results.append(AclResult(ErrorCode.NONE, None, matching))
        return ControllerResult(records, results)

    def replay(self, record) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self.acls[record.id] = record
        else:
            self.acls.pop(record.id, None)

    @staticmethod
    def _key(acl) -> tuple:
        return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation,
                acl.permission_type)


def _invalid(b: AclBinding) -> str | None:
    concrete = {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                ResourceType.DELEGATION_TOKEN, ResourceType.USER}
    if b.resource_type not in concrete:
        return f"invalid resource type {b.resource_type}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or b.operation not in {int(o) for o in AclOperation}:
        return f"invalid operation {b.operation}"
    if b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"invalid permission type {b.permission_type}"
    if not b.resource_name:
        return "the resource name is empty"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME}"
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        return f"the principal {b.principal!r} is not Type:name"
    if not b.host:
        return "the host is empty (use *)"
    return None
