"""``tidelog users add|delete|list`` — SCRAM users (KIP-554), on any Kafka-compatible broker.

``add`` salts and hashes the password here (RFC 5802: PBKDF2 with the mechanism's
hash) and sends only the salt, the iteration count and the salted password in
AlterUserScramCredentials, as Kafka's ``kafka-configs --alter --add-config
'SCRAM-SHA-512=[password=…]'`` does; ``list`` shows mechanisms and iterations
(DescribeUserScramCredentials), never keys.
"""

from __future__ import annotations

import getpass
import os
import sys

from tidelog.cli.options import connect
from tidelog.controller.scram_control import MECHANISM_NAMES, salted_password
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.metadata.records import ScramMechanism
from tidelog.protocol.api_keys import ApiKey

SALT_BYTES = 32


async def run(args) -> int:
    connection = await connect(args, "tidelog-users")
    if connection is None:
        return 1
    try:
        if args.verb == "list":
            answer = await connection.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
            for result in sorted(answer.results, key=lambda r: r.user):
                infos = ", ".join(f"{ScramMechanism(int(i.mechanism)).name.replace('_', '-')} "
                                  f"(iterations {int(i.iterations)})" for i in result.credential_infos)
                print(f"{result.user}: {infos}")
            return 0
        mechanism = int(MECHANISM_NAMES[args.mechanism])
        if args.verb == "add":
            password = args.password or os.environ.get("TIDELOG_PASSWORD") or getpass.getpass(f"password for {args.user}: ")
            salt = os.urandom(SALT_BYTES)
            body = {"deletions": [], "upsertions": [{
                "name": args.user, "mechanism": mechanism, "iterations": args.iterations, "salt": salt,
                "salted_password": salted_password(mechanism, password, salt, args.iterations)}]}
        else:
            body = {"deletions": [{"name": args.user, "mechanism": mechanism}], "upsertions": []}
        answer = await connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, body)
        result = answer.results[0]
        code = ErrorCode(int(result.error_code.value))
        if code != ErrorCode.NONE:
            print(f"error: {code.name}: {result.error_message or ''}", file=sys.stderr)
            return 1
        print(f"user {args.user}: {args.mechanism} {'set' if args.verb == 'add' else 'removed'}")
        return 0
    except (OSError, KafkaError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        connection.close()
