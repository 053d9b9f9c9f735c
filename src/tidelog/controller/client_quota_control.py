"""Client quotas on the controller (Kafka's ClientQuotaControlManager; KIP-546).

Theory of operation. AlterClientQuotas carries, per entity (``user``/``client-id``
parts, or an ``ip``; a null name is the default entity), a list of ops: set a
quota key to a value, or remove it. Each entity is checked as Kafka checks it —
known entity types, no empty names, no ``ip`` mixed with user or client-id, a
known key for that kind of entity, a value > 0, whole numbers for the LONG/INT
keys — and an accepted entity becomes one ClientQuotaRecord per key whose value
actually changes (a removal of a key that is not set writes nothing). A refused
entity writes nothing at all; the others of the same request still do. The
result is per entity, with Kafka's error codes and messages (INVALID_REQUEST).

Replay keeps ``quotas`` (entity → {key: value}), the same map the metadata image
holds, so the next decision sees the last one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult
from tidelog.core.errors import ErrorCode
from tidelog.metadata.client_quotas import (
    CLIENT_ID,
    IP,
    IP_QUOTA_KEYS,
    USER,
    USER_AND_CLIENT_QUOTA_KEYS,
    QuotaEntity,
    entity_data,
    entity_string,
    quota_entity,
    record_entity,
)
from tidelog.metadata.records import ClientQuotaRecord

_LIMITS = {"LONG": (2 ** 63 - 1, "a LONG"), "INT": (2 ** 31 - 1, "an INT"), "SHORT": (2 ** 15 - 1, "a SHORT")}


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """One entry of AlterClientQuotas: the entity's ``(type, name)`` parts as the request
    gave them, and ``(key, value)`` ops where a value of None removes the key."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


class ClientQuotaControlManager:
    def __init__(self) -> None:
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}

    def alter(self, alterations: list[ClientQuotaAlteration]
              ) -> ControllerResult[list[tuple[QuotaEntity, ApiError]]]:
        records: list[ClientQuotaRecord] = []
        results: dict[QuotaEntity, ApiError] = {}
        for alteration in alterations:
            entity = quota_entity(alteration.entity)
            ops: dict[str, float | None] = {}
            duplicate = None
            for key, value in alteration.ops:
                if key in ops:
                    duplicate = key
                ops[key] = value
            if duplicate is not None or entity in results:
                # Kafka answers both a key given twice and an entity given twice this way
                # (the first entity's records, if any, are still written).
                results[entity] = ApiError(ErrorCode.INVALID_REQUEST,
                                           f"Ignoring duplicate entity {entity_string(entity)}")
                continue
            error, entity_records = self._alter_entity(alteration.entity, entity, ops)
            results[entity] = error
            records += entity_records
        return ControllerResult(records, list(results.items()))

    def _alter_entity(self, parts, entity: QuotaEntity, ops: dict[str, float | None]
                      ) -> tuple[ApiError, list[ClientQuotaRecord]]:
        error = _entity_error(parts)
        if error is not None:
            return error, []
        types = dict(entity)
        if IP in types:
            if USER in types or CLIENT_ID in types:
                # Kafka's message, its missing space included.
                return ApiError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                                "not be combined with User or ClientId"), []
            if types[IP] is not None and not _is_ip(types[IP]):
                return ApiError(ErrorCode.INVALID_REQUEST, f"{types[IP]} is not a valid IP or resolvable host."), []
            valid_keys = IP_QUOTA_KEYS
        else:
            valid_keys = USER_AND_CLIENT_QUOTA_KEYS
        current = self.quotas.get(entity, {})
        out = []
        for key, value in ops.items():
            if value is None:
                if key in current:
                    out.append(ClientQuotaRecord(entity_data(entity), key, remove=True))
                continue
            error = _value_error(valid_keys, key, value)
            if error is not None:
                return error, []
            if current.get(key) != value:
                out.append(ClientQuotaRecord(entity_data(entity), key, float(value)))
        return NO_ERROR, out

    def replay(self, record: ClientQuotaRecord) -> None:
        entity = record_entity(record)
        quotas = self.quotas.setdefault(entity, {})
        if record.remove:
            quotas.pop(record.key, None)
            if not quotas:
                del self.quotas[entity]
        else:
            quotas[record.key] = record.value


def _entity_error(parts) -> ApiError | None:
    if not parts:
        return ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    seen = set()
    for entity_type, name in parts:
        if entity_type in seen:
            return ApiError(ErrorCode.INVALID_REQUEST,
                            f"Invalid client quota entity, duplicate entity entry {entity_type}")
        seen.add(entity_type)
        if entity_type not in (USER, CLIENT_ID, IP):
            return ApiError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            return ApiError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
    return None


def _value_error(valid_keys: dict[str, str], key: str, value: float) -> ApiError | None:
    """Kafka's ``validateQuotaKeyValue``."""
    config_type = valid_keys.get(key)
    if config_type is None:
        return ApiError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if not value > 0.0:                      # NaN is not greater than 0 either
        return ApiError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if config_type == "DOUBLE":
        return None
    limit, name = _LIMITS[config_type]
    if value > limit:
        return ApiError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {name}.")
    if abs(value % 1.0) > 1e-6:
        return ApiError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")
    return None


def _is_ip(name: str) -> bool:
    """An IP literal (Kafka also accepts a host name it can resolve; the controller does
    no I/O, so tidelog takes literals only)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False
