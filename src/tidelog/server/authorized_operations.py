"""Authorized operations (KIP-430): what the caller may do with a topic, a group or the cluster.

Metadata (``include_topic_authorized_operations``, and up to v10
``include_cluster_authorized_operations``), DescribeCluster and DescribeGroups
(``include_authorized_operations``) answer a bit set: bit *i* is set when the caller
may perform the ACL operation of code *i* (``AclOperation``) on the resource. Only the
operations Kafka supports for the resource type are considered:

    topic    READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    group    READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    cluster  CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE

Without an authorizer every supported operation is allowed (Kafka's answer too); with
one, each is asked of it (server/authorization.py), with its implications (READ implies
DESCRIBE, ...), and a denial is not logged: nothing was refused. A client that did not
ask gets ``NOT_PROVIDED`` (INT32_MIN).
"""

from __future__ import annotations

from tidelog.metadata.authorizer import CLUSTER_NAME, AclOperation, ResourceType

NOT_PROVIDED = -(1 << 31)

_OP = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DELETE, _OP.ALTER, _OP.DESCRIBE,
                         _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS),
    ResourceType.GROUP: (_OP.READ, _OP.DELETE, _OP.DESCRIBE, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_OP.CREATE, _OP.ALTER, _OP.DESCRIBE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS,
                           _OP.ALTER_CONFIGS, _OP.IDEMPOTENT_WRITE),
}


def authorized_operations(authorizer, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The bit set of the supported operations on ``resource_type`` ``name`` that the
    caller of the current request may perform; ``authorizer``: a RequestAuthorizer, or
    None (no ACLs: all of them)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.allowed(operation, resource_type, name, log_denied=False):
            bits |= 1 << int(operation)
    return bits


def requested(asked: bool, authorizer, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """``authorized_operations`` if the client asked for them, else NOT_PROVIDED. The
    cluster's are told only to a caller who may DESCRIBE it, 0 to anyone else (Kafka's
    Metadata and DescribeCluster: DESCRIBE_CONFIGS alone does not reveal them)."""
    if not asked:
        return NOT_PROVIDED
    if resource_type == ResourceType.CLUSTER and authorizer is not None and not authorizer.allowed(
            AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False):
        return 0
    return authorized_operations(authorizer, resource_type, name)
