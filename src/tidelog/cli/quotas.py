"""``tidelog quotas describe|alter`` — client quotas (KIP-13, KIP-124), on any Kafka-compatible broker.

What ``kafka-configs --entity-type users/clients`` does with quotas, through
DescribeClientQuotas and AlterClientQuotas: an entity is a user and/or a client
id, either of them possibly the default (``--user-default``, ``--client-default``).
``describe`` without options lists every entity that has a quota; with options,
the entities that have those parts (and, with ``--strict``, no other). ``alter``
sets (``--add-config k=v,...``) and removes (``--delete-config k,...``) quotas
of one entity; the broker's refusal (Kafka's INVALID_REQUEST and its message) is
printed as is, with exit status 1.
"""

from __future__ import annotations

import sys

from tidelog.cli.options import connect
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol.api_keys import ApiKey

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def entity_parts(args) -> list[tuple[str, str | None]]:
    """The (type, name) parts the options name; a None name is the default entity."""
    parts: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        parts.append(("user", args.user))
    if args.client_id is not None or args.client_default:
        parts.append(("client-id", args.client_id))
    return parts


def parse_add_config(text: str) -> list[tuple[str, float]]:
    """``k=v,k=v`` → [(k, float(v))]; ValueError naming the item that is not one."""
    out = []
    for item in filter(None, (piece.strip() for piece in text.split(","))):
        key, sep, value = item.partition("=")
        try:
            if not sep or not key:
                raise ValueError
            out.append((key.strip(), float(value)))
        except ValueError:
            raise ValueError(f"--add-config: {item!r} is not KEY=NUMBER") from None
    return out


def format_entity(parts) -> str:
    return " ".join(f"{t}={'<default>' if n is None else n}" for t, n in parts)


async def run(args) -> int:
    parts = entity_parts(args)
    if args.verb == "alter":
        try:
            ops = [{"key": k, "value": v, "remove": False} for k, v in parse_add_config(args.add_config or "")]
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        ops += [{"key": k.strip(), "value": 0.0, "remove": True} for k in (args.delete_config or "").split(",") if k.strip()]
        if not parts or not ops:
            print("error: alter needs an entity (--user/--user-default, --client-id/--client-default) and "
                  "--add-config or --delete-config", file=sys.stderr)
            return 2
    connection = await connect(args, "tidelog-quotas")
    if connection is None:
        return 1
    try:
        if args.verb == "describe":
            return await _describe(connection, parts, args.strict)
        answer = await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, {
            "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in parts], "ops": ops}],
            "validate_only": args.validate_only})
        entry = answer.entries[0]
        code = ErrorCode(int(entry.error_code.value))
        if code != ErrorCode.NONE:
            print(f"error: {code.name}: {entry.error_message or ''}", file=sys.stderr)
            return 1
        print(f"{format_entity(parts)}: {'valid' if args.validate_only else 'updated'}")
        return 0
    except (OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()


async def _describe(connection, parts, strict: bool) -> int:
    components = [{"entity_type": t, "match_type": DEFAULT if n is None else EXACT, "match": n} for t, n in parts]
    answer = await connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": strict})
    code = ErrorCode(int(answer.error_code.value))
    if code != ErrorCode.NONE:
        print(f"error: {code.name}: {answer.error_message or ''}", file=sys.stderr)
        return 1
    lines = []
    for entry in answer.entries or ():
        entity = sorted((e.entity_type, e.entity_name) for e in entry.entity)
        values = ", ".join(f"{v.key}={_number(v.value)}" for v in sorted(entry.values, key=lambda v: v.key))
        lines.append(f"{format_entity(entity)}: {values}")
    for line in sorted(lines):
        print(line)
    return 0


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
