"""Client quota entities and the DescribeClientQuotas filter (KIP-546, Kafka's ClientQuotasImage).

Theory of operation. A client quota entity names who a quota applies to: a
``user`` and/or a ``client-id`` (KIP-55), or an ``ip`` (KIP-612). A part with a
null name is that type's *default* entity (``--entity-default``). Here an entity
is a ``QuotaEntity``: a tuple of ``(entity_type, entity_name)`` pairs sorted by
type, so the same entity always has the same key in the metadata image's
``client_quotas`` (entity → {quota key: value}), whatever order a request named
its parts in.

``describe`` is Kafka's ``ClientQuotasImage.describe``: each filter component
matches one entity type exactly (a name), its default (null), or any entity that
has the type ("specified"); ``strict`` asks for entities with no other types. A
filter Kafka refuses raises ``QuotaFilterError`` with Kafka's error code and
message, which the request layer turns into the response's top-level error.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tidelog.core.errors import ErrorCode
from tidelog.metadata.records import ClientQuotaEntityData, ClientQuotaRecord

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

# DescribeClientQuotas match types (Kafka's DescribeClientQuotasRequest.MATCH_TYPE_*).
MATCH_TYPE_EXACT, MATCH_TYPE_DEFAULT, MATCH_TYPE_SPECIFIED = 0, 1, 2

# The quota keys and their Kafka config types (QuotaConfig): a LONG/INT key takes whole numbers only.
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
USER_AND_CLIENT_QUOTA_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                              REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: "INT"}

QuotaEntity = tuple[tuple[str, "str | None"], ...]


class QuotaFilterError(Exception):
    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def quota_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The key of an entity given as ``(type, name)`` pairs (a type given twice: the last wins,
    as Kafka's request parsing builds a map)."""
    return tuple(sorted(dict(parts).items()))


def record_entity(record: ClientQuotaRecord) -> QuotaEntity:
    return quota_entity((part.entity_type, part.entity_name) for part in record.entity)


def entity_data(entity: QuotaEntity) -> tuple[ClientQuotaEntityData, ...]:
    return tuple(ClientQuotaEntityData(entity_type, name) for entity_type, name in entity)


def entity_string(entity: QuotaEntity) -> str:
    """Kafka's ``ClientQuotaEntity.toString`` (used in its error messages)."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def describe(quotas: Mapping[QuotaEntity, Mapping[str, float]],
             components: Iterable[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities (with their quotas) matching the filter ``(entity_type, match_type,
    match)`` components; ``QuotaFilterError`` for a filter Kafka refuses."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise QuotaFilterError(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise QuotaFilterError(ErrorCode.INVALID_REQUEST,
                                   f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise QuotaFilterError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_TYPE_EXACT:
            if match is None:
                raise QuotaFilterError(ErrorCode.INVALID_REQUEST,
                                       "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_TYPE_DEFAULT:
            if match is not None:
                raise QuotaFilterError(ErrorCode.INVALID_REQUEST,
                                       "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_TYPE_SPECIFIED:
            if match is not None:
                raise QuotaFilterError(ErrorCode.INVALID_REQUEST,
                                       "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(entity_type)
        else:
            raise QuotaFilterError(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
    named = set(exact) | specified
    if IP in named and named & {USER, CLIENT_ID}:
        raise QuotaFilterError(ErrorCode.INVALID_REQUEST,
                               "Invalid entity filter component combination. IP filter component should not be "
                               "used with user or clientId filter component.")
    out = []
    for entity in sorted(quotas, key=_sort_key):
        parts = dict(entity)
        if strict and len(parts) != len(exact) + len(specified):
            continue
        if all(t in parts and parts[t] == name for t, name in exact.items()) and specified <= set(parts):
            out.append((entity, quotas[entity]))
    return out


def _sort_key(entity: QuotaEntity):
    return tuple((t, name is not None, name or "") for t, name in entity)
