"""``tidelog acls add|list|remove`` — ACLs (CreateAcls, DescribeAcls, DeleteAcls) on any
Kafka-compatible broker, with ``kafka-acls``' vocabulary::

    tidelog acls add --allow-principal User:alice --operation Write --topic orders --resource-pattern-type prefixed
    tidelog acls list [--topic orders]
    tidelog acls remove --allow-principal User:alice --operation Write --topic orders
"""

from __future__ import annotations

import sys

from tidelog.cli.options import connect
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.metadata.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tidelog.protocol.api_keys import ApiKey


def _resource(args) -> tuple[int, str | None]:
    if args.topic:
        return ResourceType.TOPIC, args.topic
    if args.group:
        return ResourceType.GROUP, args.group
    if args.transactional_id:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return ResourceType.ANY, None


def _operation(name: str) -> int:
    key = "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()
    try:
        return int(AclOperation[key])
    except KeyError:
        raise SystemExit(f"error: unknown operation {name!r}") from None


def _entries(args) -> list[tuple[str, int, int]]:
    operations = [_operation(o) for o in args.operation] or [int(AclOperation.ALL)]
    return [(p, permission, op) for principals, permission in ((args.allow_principal, AclPermissionType.ALLOW),
                                                               (args.deny_principal, AclPermissionType.DENY))
            for p in principals for op in operations]


async def run(args) -> int:
    connection = await connect(args, "tidelog-acls")
    if connection is None:
        return 1
    try:
        resource_type, resource_name = _resource(args)
        pattern = int(PatternType[args.resource_pattern_type.upper()])
        if args.verb == "list":
            answer = await connection.request(ApiKey.DESCRIBE_ACLS, {
                "resource_type_filter": resource_type, "resource_name_filter": resource_name,
                "pattern_type_filter": pattern, "principal_filter": args.principal, "host_filter": None,
                "operation": int(AclOperation.ANY), "permission_type": int(AclPermissionType.ANY)})
            code = ErrorCode(int(answer.error_code.value))
            if code != ErrorCode.NONE:
                print(f"error: {code.name}", file=sys.stderr)
                return 1
            for r in answer.resources:
                print(f"{ResourceType(int(r.resource_type)).name} {r.resource_name} "
                      f"({PatternType(int(r.pattern_type)).name}):")
                for a in r.acls:
                    print(f"  {a.principal} from {a.host}: {AclPermissionType(int(a.permission_type)).name} "
                          f"{AclOperation(int(a.operation)).name}")
            return 0
        entries = _entries(args)
        if not entries:
            print("error: name a principal with --allow-principal or --deny-principal", file=sys.stderr)
            return 1
        if args.verb == "add":
            answer = await connection.request(ApiKey.CREATE_ACLS, {"creations": [
                {"resource_type": resource_type, "resource_name": resource_name, "resource_pattern_type": pattern,
                 "principal": p, "host": args.host, "operation": op, "permission_type": perm}
                for p, perm, op in entries]})
            codes = [(ErrorCode(int(r.error_code.value)), r.error_message) for r in answer.results]
        else:
            answer = await connection.request(ApiKey.DELETE_ACLS, {"filters": [
                {"resource_type_filter": resource_type, "resource_name_filter": resource_name,
                 "pattern_type_filter": pattern, "principal_filter": p, "host_filter": args.host,
                 "operation": op, "permission_type": perm} for p, perm, op in entries]})
            codes = [(ErrorCode(int(r.error_code.value)), r.error_message) for r in answer.filter_results]
        failed = [(c, m) for c, m in codes if c != ErrorCode.NONE]
        for code, message in failed:
            print(f"error: {code.name}: {message or ''}", file=sys.stderr)
        if not failed:
            print(f"{'added' if args.verb == 'add' else 'removed'} {len(entries)} ACL(s)")
        return 1 if failed else 0
    except (OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()
