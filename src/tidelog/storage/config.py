"""Per-log configuration: the topic-level storage configs of Kafka's ``LogConfig``.

Theory of operation. ``LogConfig`` is an immutable value with one field per
Kafka config, named in snake case with the unit last (``segment.bytes`` →
``segment_bytes``). ``LogConfig.from_properties`` reads Kafka's dotted names
(strings or ints), on top of ``defaults``; every value is checked against
Kafka's range and our hard limits (``tidelog.core.limits``), and a bad one
raises ``InvalidConfigError`` naming the key. Topic configs that other layers
own (``min.insync.replicas``, ``compression.type``…) are accepted and ignored;
unknown keys are rejected, so a typo never passes silently. ``cleanup.policy``
and the compaction configs are read here: ``delete`` lets retention remove old
segments, ``compact`` lets the log cleaner (``cleaner.py``) deduplicate by key.
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
COMPACT = "compact"
DELETE = "delete"
_DAY_MS = 24 * 60 * 60 * 1000

# Kafka topic configs that are valid but not the storage engine's business.
TOPIC_CONFIGS_OWNED_ELSEWHERE = frozenset({
    "compression.gzip.level", "compression.lz4.level",
    "compression.zstd.level", "file.delete.delay.ms",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms",
    "message.downconversion.enable", "message.format.version",
    "message.timestamp.difference.max.ms", "min.insync.replicas", "preallocate",
    "remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable",
    "segment.jitter.ms", "unclean.leader.election.enable",
})

# key -> (field, low, high); message.timestamp.type, cleanup.policy and
# min.cleanable.dirty.ratio (not integers) are apart.
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
    "delete.retention.ms": ("delete_retention_ms", 0, INT64_MAX),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0, INT64_MAX),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", 1, INT64_MAX),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 0, INT64_MAX),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 0, INT64_MAX),
}
_TIMESTAMP_TYPE_KEY = "message.timestamp.type"
_CLEANUP_POLICY_KEY = "cleanup.policy"
_DIRTY_RATIO_KEY = "min.cleanable.dirty.ratio"
_COMPRESSION_TYPE_KEY = "compression.type"
PRODUCER = "producer"         # compression.type: keep the producer's codec
COMPRESSION_TYPES = (PRODUCER, "uncompressed", "gzip", "snappy", "lz4", "zstd")
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
    cleanup_policy: tuple[str, ...] = (DELETE,)  # cleanup.policy: delete, compact, both or neither
    delete_retention_ms: int = _DAY_MS           # delete.retention.ms (tombstones, once cleaned)
    min_cleanable_dirty_ratio: float = 0.5       # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0               # min.compaction.lag.ms
    max_compaction_lag_ms: int = INT64_MAX       # max.compaction.lag.ms
    compression_type: str = PRODUCER             # compression.type: producer, or the codec batches are stored in
    message_timestamp_before_max_ms: int = INT64_MAX   # message.timestamp.before.max.ms (KIP-937)
    message_timestamp_after_max_ms: int = 3_600_000    # message.timestamp.after.max.ms (Kafka 4: one hour)

    def __post_init__(self):
        for key, (name, low, high) in _INT_CONFIGS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InvalidConfigError(f"{key}={value!r}: must be an integer in [{low}, {high}]")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise InvalidConfigError(
                f"{_TIMESTAMP_TYPE_KEY}={self.message_timestamp_type!r}: "
                f"must be {CREATE_TIME} or {LOG_APPEND_TIME}")
        policy = self.cleanup_policy
        if not isinstance(policy, tuple) or not set(policy) <= {COMPACT, DELETE} or len(set(policy)) != len(policy):
            raise InvalidConfigError(f"{_CLEANUP_POLICY_KEY}={policy!r}: must list {COMPACT} and/or {DELETE}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigError(f"{_COMPRESSION_TYPE_KEY}={self.compression_type!r}: must be one of "
                                     f"{', '.join(COMPRESSION_TYPES)}")
        ratio = self.min_cleanable_dirty_ratio
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 <= ratio <= 1:
            raise InvalidConfigError(f"{_DIRTY_RATIO_KEY}={ratio!r}: must be a number in [0, 1]")

    @property
    def uses_log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` includes ``compact``: the log cleaner keeps the last record per key."""
        return COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` includes ``delete``: retention removes old segments."""
        return DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may grow: ``segment.ms``, or less on a compacted log
        so that ``max.compaction.lag.ms`` holds (the active segment is never cleaned)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    @classmethod
    def from_properties(cls, properties: Mapping[str, str | int | float],
                        defaults: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka's dotted names, e.g. ``{"segment.bytes": "1048576"}``."""
        changes: dict[str, object] = {}
        for key, raw in properties.items():
            if key in _INT_CONFIGS:
                name, low, high = _INT_CONFIGS[key]
                changes[name] = _parse_int(key, raw, low, high)
            elif key == _TIMESTAMP_TYPE_KEY:
                changes["message_timestamp_type"] = str(raw).strip()
            elif key == _CLEANUP_POLICY_KEY:
                changes["cleanup_policy"] = tuple(item.strip() for item in str(raw).split(",") if item.strip())
            elif key == _DIRTY_RATIO_KEY:
                changes["min_cleanable_dirty_ratio"] = _parse_ratio(key, raw)
            elif key == _COMPRESSION_TYPE_KEY:
                changes["compression_type"] = str(raw).strip().lower()
            elif key not in TOPIC_CONFIGS_OWNED_ELSEWHERE:
                raise InvalidConfigError(f"{key}: unknown topic config")
        return dataclasses.replace(defaults or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        properties = {key: str(getattr(self, name)) for key, (name, _, _) in _INT_CONFIGS.items()}
        properties[_TIMESTAMP_TYPE_KEY] = self.message_timestamp_type
        properties[_CLEANUP_POLICY_KEY] = ",".join(self.cleanup_policy)
        properties[_DIRTY_RATIO_KEY] = str(self.min_cleanable_dirty_ratio)
        properties[_COMPRESSION_TYPE_KEY] = self.compression_type
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


def _parse_ratio(key: str, raw: str | float) -> float:
    if isinstance(raw, bool):
        raise InvalidConfigError(f"{key}={raw!r}: not a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={raw!r}: not a number") from None
    if not 0 <= value <= 1:
        raise InvalidConfigError(f"{key}={value}: must be in [0, 1]")
    return value
