"""Per-log configuration: the topic-level storage configs of Kafka's ``LogConfig``.

Theory of operation. ``LogConfig`` is an immutable value with one field per
Kafka config, named in snake case with the unit last (``segment.bytes`` →
``segment_bytes``). ``LogConfig.from_properties`` reads Kafka's dotted names
(strings or ints), on top of ``defaults``; every value is checked against
Kafka's range and our hard limits (``tidelog.core.limits``), and a bad one
raises ``InvalidConfigError`` naming the key. Topic configs that other layers
own (``min.insync.replicas``, ``cleanup.policy``…) are accepted and ignored;
unknown keys are rejected, so a typo never passes silently.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Mapping

from tidelog.core.errors import InvalidConfigError
from tidelog.core.limits import INDEX_SIZE_MAX_BYTES, SEGMENT_SIZE_MAX_BYTES

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_DAY_MS = 24 * 60 * 60 * 1000

# Kafka topic configs that are valid but not the storage engine's business.
TOPIC_CONFIGS_OWNED_ELSEWHERE = frozenset({
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
    "message.downconversion.enable", "message.format.version",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms", "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable",
    "segment.jitter.ms", "unclean.leader.election.enable",
})

# key -> (field, low, high); the string-valued message.timestamp.type is apart.
_INT_CONFIGS = {
    "segment.bytes": ("segment_bytes", 14, SEGMENT_SIZE_MAX_BYTES),
    "segment.ms": ("segment_ms", 1, INT64_MAX),
    "segment.index.bytes": ("segment_index_bytes", 4, INDEX_SIZE_MAX_BYTES),
    "index.interval.bytes": ("index_interval_bytes", 0, INT32_MAX),
    "retention.ms": ("retention_ms", -1, INT64_MAX),
    "retention.bytes": ("retention_bytes", -1, INT64_MAX),
    "max.message.bytes": ("max_message_bytes", 0, INT32_MAX),
    "flush.messages": ("flush_messages", 1, INT64_MAX),
    "flush.ms": ("flush_ms", 0, INT64_MAX),
}
_TIMESTAMP_TYPE_KEY = "message.timestamp.type"
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30                 # segment.bytes
    segment_ms: int = 7 * _DAY_MS                # segment.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096             # index.interval.bytes
    retention_ms: int = 7 * _DAY_MS              # retention.ms (-1: forever)
    retention_bytes: int = -1                    # retention.bytes (-1: no limit)
    max_message_bytes: int = 1048588             # max.message.bytes (a whole batch)
    message_timestamp_type: str = CREATE_TIME    # message.timestamp.type
    flush_messages: int = INT64_MAX              # flush.messages (default: never)
    flush_ms: int = INT64_MAX                    # flush.ms (default: never)

    def __post_init__(self):
        for key, (name, low, high) in _INT_CONFIGS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidConfigError(f"{key}={value!r}: must be an integer in [{low}, {high}]")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"{_TIMESTAMP_TYPE_KEY}={self.message_timestamp_type!r}: "
                f"must be {CREATE_TIME} or {LOG_APPEND_TIME}")

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, properties: Mapping[str, str | int],
                        defaults: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka's dotted names, e.g. ``{"segment.bytes": "1048576"}``."""
        changes: dict[str, object] = {}
        for key, raw in properties.items():
            if key in _INT_CONFIGS:
                name, low, high = _INT_CONFIGS[key]
                changes[name] = _parse_int(key, raw, low, high)
            elif key == _TIMESTAMP_TYPE_KEY:
                changes["message_timestamp_type"] = str(raw).strip()
            elif key not in TOPIC_CONFIGS_OWNED_ELSEWHERE:
                raise InvalidConfigError(f"{key}: unknown topic config")
        return dataclasses.replace(defaults or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        properties = {key: str(getattr(self, name)) for key, (name, _, _) in _INT_CONFIGS.items()}
        properties[_TIMESTAMP_TYPE_KEY] = self.message_timestamp_type
        return properties


def _parse_int(key: str, raw: str | int, low: int, high: int) -> int:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key}={raw!r}: not an integer")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        if not _INTEGER.fullmatch(text):
            raise InvalidConfigError(f"{key}={raw!r}: not an integer")
        value = int(text)
    if not low <= value <= high:
        raise InvalidConfigError(f"{key}={value}: must be in [{low}, {high}]")
    return value
