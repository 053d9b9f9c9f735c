"""ACL authorization with the semantics of Kafka's StandardAuthorizer (sans-I/O).

Theory of operation. ACLs are metadata (AccessControlEntryRecord), so every node
decides from its own metadata image. ``Authorizer.authorize(acls, principal, host,
operation, resource_type, name)``:

1. a principal in ``super.users`` may do anything;
2. the ACLs that *match the resource* are those of the same resource type whose
   pattern is LITERAL and equal to the name, LITERAL ``*``, or PREFIXED and a
   prefix of the name;
3. among them, one that matches the principal (equal, or ``User:*``) and the host
   (equal, or ``*``): a DENY for the operation (or ALL) refuses — deny wins;
4. otherwise an ALLOW for the operation, for ALL, or for an operation that implies
   it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS) permits;
5. when no ACL matches the resource at all, ``allow.everyone.if.no.acl.found``
   (default false) decides; otherwise it is refused.

``matches_filter`` is the filter logic of DescribeAcls and DeleteAcls (ANY
matches everything of its kind; a MATCH pattern matches every ACL that would
apply to the named resource).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"     # the one CLUSTER resource's name
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# An ALLOW for the key also allows each operation of its value (Kafka's implied operations).
_IMPLIES = {AclOperation.READ: {AclOperation.DESCRIBE}, AclOperation.WRITE: {AclOperation.DESCRIBE},
            AclOperation.DELETE: {AclOperation.DESCRIBE}, AclOperation.ALTER: {AclOperation.DESCRIBE},
            AclOperation.ALTER_CONFIGS: {AclOperation.DESCRIBE_CONFIGS}}


@dataclass(frozen=True)
class Authorizer:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def from_config(cls, super_users: Iterable[str] | str | None, allow_if_no_acl: bool) -> "Authorizer":
        if isinstance(super_users, str):
            super_users = [u for u in super_users.split(";")]
        return cls(frozenset(u.strip() for u in super_users or () if u.strip()), allow_if_no_acl)

    def authorize(self, acls: Iterable, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        resource_acls = [acl for acl in acls if acl.resource_type == resource_type
                         and _pattern_matches(acl.pattern_type, acl.resource_name, name)]
        if not resource_acls:
            return self.allow_everyone_if_no_acl_found
        mine = [acl for acl in resource_acls
                if acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)]
        for acl in mine:
            if acl.permission_type == AclPermissionType.DENY and acl.operation in (operation, AclOperation.ALL):
                return False
        for acl in mine:
            if acl.permission_type == AclPermissionType.ALLOW and (
                    acl.operation in (operation, AclOperation.ALL)
                    or operation in _IMPLIES.get(AclOperation(acl.operation), ())):
                return True
        return False

    def authorize_any(self, acls: Iterable, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType`` (KIP-679): may the principal do
        ``operation`` on *some* resource of the type — an ALLOW for it on any name or
        prefix that no DENY of the same or a wider pattern cancels. It asks about
        resources that may not exist yet (an idempotent producer before its topic)."""
        if principal in self.super_users:
            return True
        typed = [acl for acl in acls if acl.resource_type == resource_type]
        if not typed:
            return self.allow_everyone_if_no_acl_found
        mine = [acl for acl in typed if acl.principal in (principal, WILDCARD_PRINCIPAL)
                and acl.host in (host, WILDCARD) and acl.operation in (operation, AclOperation.ALL)]
        denied = [acl for acl in mine if acl.permission_type == AclPermissionType.DENY]
        if any(acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD for acl in denied):
            return False
        for acl in mine:
            if acl.permission_type != AclPermissionType.ALLOW:
                continue
            name = acl.resource_name
            if not any(_pattern_matches(d.pattern_type, d.resource_name, name)
                       and (acl.pattern_type == PatternType.LITERAL or d.pattern_type == PatternType.PREFIXED)
                       for d in denied):
                return True
        return False


def _pattern_matches(pattern_type: int, pattern: str, name: str) -> bool:
    if pattern_type == PatternType.LITERAL:
        return pattern == name or pattern == WILDCARD
    if pattern_type == PatternType.PREFIXED:
        return name.startswith(pattern)
    return False


def matches_filter(acl, resource_type: int, resource_name: str | None, pattern_type: int,
                   principal: str | None, host: str | None, operation: int, permission_type: int) -> bool:
    """Whether ``acl`` is selected by a DescribeAcls / DeleteAcls filter."""
    if resource_type not in (ResourceType.ANY, acl.resource_type):
        return False
    if pattern_type == PatternType.MATCH:
        if resource_name is not None and not (
                (acl.pattern_type == PatternType.LITERAL and acl.resource_name in (resource_name, WILDCARD))
                or (acl.pattern_type == PatternType.PREFIXED and resource_name.startswith(acl.resource_name))):
            return False
    else:
        if pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        if resource_name is not None and resource_name != acl.resource_name:
            return False
    if principal is not None and principal != acl.principal:
        return False
    if host is not None and host != acl.host:
        return False
    if operation not in (AclOperation.ANY, acl.operation):
        return False
    return permission_type in (AclPermissionType.ANY, acl.permission_type)
