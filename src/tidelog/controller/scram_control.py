"""SCRAM credentials (KIP-554): the controller's manager and the RFC 5802 key derivation.

Theory of operation. AlterUserScramCredentials carries, per user and mechanism,
either a deletion or an upsertion (salt, iterations and the *salted* password the
client computed — the password itself never leaves the client). The manager
checks each one the way Kafka's ScramControlManager does and turns the accepted
ones into UserScramCredentialRecord (the stored key and server key derived here)
or RemoveUserScramCredentialRecord. Replay keeps ``credentials`` — the same map
the metadata image holds — so the next decision sees the last one.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from tidelog.controller.result import ControllerResult
from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import (
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    UserScramCredentialRecord,
)

ITERATIONS_MIN, ITERATIONS_MAX = 4096, 16384          # Kafka's bounds for SCRAM-SHA-256/512
HASHES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}
MECHANISM_NAMES = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def salted_password(mechanism: int, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(HASHES[ScramMechanism(mechanism)], password.encode("utf-8"), salt, iterations)


def keys(mechanism: int, salted: bytes) -> tuple[bytes, bytes]:
    """(stored key, server key) from a salted password (RFC 5802)."""
    name = HASHES[ScramMechanism(mechanism)]
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


@dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class ScramResult:
    user: str
    error_code: ErrorCode
    error_message: str | None = None


class ScramControlManager:
    def __init__(self) -> None:
        self.credentials: dict[tuple[str, int], UserScramCredentialRecord] = {}

    def alter(self, deletions: list[tuple[str, int]], upsertions: list[ScramUpsertion]
              ) -> ControllerResult[list[ScramResult]]:
        records: list = []
        results: list[ScramResult] = []
        seen: dict[tuple[str, int], int] = {}
        for name, mechanism in deletions:
            seen[(name, mechanism)] = seen.get((name, mechanism), 0) + 1
        for u in upsertions:
            seen[(u.name, u.mechanism)] = seen.get((u.name, u.mechanism), 0) + 1

        def refuse(name, code, message):
            results.append(ScramResult(name, code, message))
        for name, mechanism in deletions:
            if seen[(name, mechanism)] > 1:
                refuse(name, ErrorCode.DUPLICATE_RESOURCE, "a user and mechanism may be altered once per request")
            elif mechanism not in HASHES:
                refuse(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {mechanism}")
            elif (name, mechanism) not in self.credentials:
                refuse(name, ErrorCode.RESOURCE_NOT_FOUND, "no such credential")
            else:
                records.append(RemoveUserScramCredentialRecord(name, mechanism))
                results.append(ScramResult(name, ErrorCode.NONE))
        for u in upsertions:
            if seen[(u.name, u.mechanism)] > 1:
                refuse(u.name, ErrorCode.DUPLICATE_RESOURCE, "a user and mechanism may be altered once per request")
            elif u.mechanism not in HASHES:
                refuse(u.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"unknown SCRAM mechanism {u.mechanism}")
            elif not u.name:
                refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
            elif not ITERATIONS_MIN <= u.iterations <= ITERATIONS_MAX:
                refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                       f"iterations must be between {ITERATIONS_MIN} and {ITERATIONS_MAX}")
            elif not u.salt or not u.salted_password:
                refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "salt and salted password are required")
            else:
                stored, server = keys(u.mechanism, u.salted_password)
                records.append(UserScramCredentialRecord(u.name, u.mechanism, u.salt, stored, server, u.iterations))
                results.append(ScramResult(u.name, ErrorCode.NONE))
        return ControllerResult(records, results)

    def replay(self, record) -> None:
        key = (record.name, record.mechanism)
        if isinstance(record, UserScramCredentialRecord):
            self.credentials[key] = record
        else:
            self.credentials.pop(key, None)
