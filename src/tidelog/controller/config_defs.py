"""Topic configuration keys: Kafka's names, types, defaults and valid ranges.

Each topic-level key but two has a cluster-level synonym (Kafka's broker config
name, e.g. ``retention.ms`` ↔ ``log.retention.ms``) settable on the cluster-wide
broker resource (resource name ``""``) as the default for every topic. Values are
stored as the strings clients send; ``parse`` turns them into typed values and
raises ``InvalidConfigError`` whose message names the key, as Kafka's does.

The two without a synonym, ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` (Kafka's replication throttle lists,
set by its reassignment tool), are accepted, stored and described as Kafka does;
tidelog throttles no replication, so they change nothing else.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Callable

from tidelog.core.errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class ConfigType(enum.Enum):
    BOOLEAN = "BOOLEAN"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    STRING = "STRING"
    LIST = "LIST"


def at_least(minimum: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"Value must be at least {minimum}"


def between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"Value must be between {low} and {high}"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        items = value if isinstance(value, list) else [value]
        bad = [v for v in items if v not in allowed]
        return None if not bad else f"String must be one of: {', '.join(allowed)}"
    return check


_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def throttled_replicas(name: str) -> Callable[[Any], str | None]:
    """Kafka's ThrottledReplicaListValidator: ``*``, or ``partition:broker`` items."""
    def check(items: list) -> str | None:
        if items == ["*"] or all(_REPLICA.fullmatch(item) for item in items):
            return None
        return (f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return check


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str
    synonym: str | None               # the cluster-level (broker) name; None: a topic-only key
    validator: Callable[[Any], str | None] | None = None

    def parse(self, value: str, key: str | None = None) -> Any:
        """The typed value; ``key`` is the name to blame (the synonym, for cluster keys)."""
        key = key or self.name
        try:
            typed = _PARSERS[self.type](value)
        except ValueError:
            numeric = self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE)
            expected = (f"Not a number of type {self.type.value}" if numeric
                        else f"Expected value to be of type {self.type.value}")
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {key}: {expected}") from None
        problem = self.validator(typed) if self.validator else None
        if problem:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: {problem}")
        return typed


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(value)
    return lowered == "true"


def _parse_int(bits: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        number = int(value.strip())
        if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
            raise ValueError(value)
        return number
    return parse


_PARSERS: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.INT: _parse_int(32),
    ConfigType.LONG: _parse_int(64),
    ConfigType.DOUBLE: lambda v: float(v.strip()),
    ConfigType.STRING: lambda v: v.strip(),
    ConfigType.LIST: lambda v: [item.strip() for item in v.split(",") if item.strip()],
}

_T = ConfigType
TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("cleanup.policy", _T.LIST, "delete", "log.cleanup.policy",
              one_of("compact", "delete")),
    ConfigDef("compression.type", _T.STRING, "producer", "compression.type",
              one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigDef("delete.retention.ms", _T.LONG, "86400000", "log.cleaner.delete.retention.ms",
              at_least(0)),
    ConfigDef("file.delete.delay.ms", _T.LONG, "60000", "log.segment.delete.delay.ms",
              at_least(0)),
    ConfigDef("flush.messages", _T.LONG, str(LONG_MAX), "log.flush.interval.messages",
              at_least(1)),
    ConfigDef("flush.ms", _T.LONG, str(LONG_MAX), "log.flush.interval.ms", at_least(0)),
    ConfigDef("follower.replication.throttled.replicas", _T.LIST, "", None,
              throttled_replicas("follower.replication.throttled.replicas")),
    ConfigDef("index.interval.bytes", _T.INT, "4096", "log.index.interval.bytes", at_least(0)),
    ConfigDef("leader.replication.throttled.replicas", _T.LIST, "", None,
              throttled_replicas("leader.replication.throttled.replicas")),
    ConfigDef("max.compaction.lag.ms", _T.LONG, str(LONG_MAX),
              "log.cleaner.max.compaction.lag.ms", at_least(1)),
    ConfigDef("max.message.bytes", _T.INT, "1048588", "message.max.bytes", at_least(0)),
    ConfigDef("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), "log.message.timestamp.before.max.ms",
              at_least(0)),
    ConfigDef("message.timestamp.after.max.ms", _T.LONG, "3600000", "log.message.timestamp.after.max.ms",
              at_least(0)),
    ConfigDef("message.timestamp.type", _T.STRING, "CreateTime", "log.message.timestamp.type",
              one_of("CreateTime", "LogAppendTime")),
    ConfigDef("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio",
              between(0, 1)),
    ConfigDef("min.compaction.lag.ms", _T.LONG, "0", "log.cleaner.min.compaction.lag.ms",
              at_least(0)),
    ConfigDef("min.insync.replicas", _T.INT, "1", "min.insync.replicas", at_least(1)),
    ConfigDef("preallocate", _T.BOOLEAN, "false", "log.preallocate"),
    ConfigDef("retention.bytes", _T.LONG, "-1", "log.retention.bytes"),
    ConfigDef("retention.ms", _T.LONG, "604800000", "log.retention.ms", at_least(-1)),
    ConfigDef("segment.bytes", _T.INT, "1073741824", "log.segment.bytes", at_least(14)),
    ConfigDef("segment.index.bytes", _T.INT, "10485760", "log.index.size.max.bytes",
              at_least(4)),
    ConfigDef("segment.jitter.ms", _T.LONG, "0", "log.roll.jitter.ms", at_least(0)),
    ConfigDef("segment.ms", _T.LONG, "604800000", "log.roll.ms", at_least(1)),
    ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, "false",
              "unclean.leader.election.enable"),
)}

# Cluster-level (default broker resource) keys: the synonyms of the topic keys.
CLUSTER_CONFIGS: dict[str, ConfigDef] = {d.synonym: d for d in TOPIC_CONFIGS.values() if d.synonym}


def validate_topic_config(key: str, value: str | None) -> None:
    """Raise ``InvalidConfigError`` unless ``key`` may be set to ``value`` (None: deleted)."""
    definition = TOPIC_CONFIGS.get(key)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {key}")
    if value is not None:
        definition.parse(value)


def validate_cluster_config(key: str, value: str | None) -> None:
    definition = CLUSTER_CONFIGS.get(key)
    if definition is None:
        raise InvalidConfigError(f"Unknown or non-dynamic cluster config name: {key}")
    if value is not None:
        definition.parse(value, key)
