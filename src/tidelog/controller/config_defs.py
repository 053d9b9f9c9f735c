"""Topic configuration keys: Kafka's names, types, defaults and valid ranges.

Each topic-level key but two has a cluster-level synonym (Kafka's broker config
name, e.g. ``retention.ms`` ↔ ``log.retention.ms``) settable on the cluster-wide
broker resource (resource name ``""``) as the default for every topic. Values are
stored as the strings clients send; ``parse`` turns them into typed values and
raises ``InvalidConfigError`` whose message names the key, as Kafka's does.

Every topic config Kafka 4.4 describes is here (``message.format.version``-era
ones excepted), each with a ``doc`` of what it does in tidelog. Some are accepted,
stored and described as Kafka does but change nothing in tidelog: the replication
throttle lists (it throttles no replication), the tiered-storage keys (it has no
tiered storage; ``remote.storage.enable=true`` is refused as by a Kafka broker with
tiered storage off), compression levels, ``preallocate``, ``segment.jitter.ms``,
``file.delete.delay.ms``, ``max.decompressed.message.bytes`` and the share groups'
dead-letter flag (``STORED_ONLY_TOPIC_CONFIGS``; docs/configs.md lists them).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

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
    """Kafka's ``Range.between``: the bound that is crossed is named."""
    return lambda v: (f"Value must be at least {low}" if v < low
                      else f"Value must be no more than {high}" if v > high else None)


def in_range(low: int, high: int) -> Callable[[Any], str | None]:
    """Kafka's ``Range.between`` for a level: the bound that is crossed is named."""
    return lambda v: (f"Value must be at least {low}" if v < low
                      else f"Value must be no more than {high}" if v > high else None)


def between_or(low: int, high: int, special: int) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high or v == special else \
        f"Value must be between {low} and {high} or equal to {special}"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"
    check.per_item = True               # a list's items are checked one by one, the bad one named
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
    doc: str = ""                     # DescribeConfigs' documentation (v3+): what it does in tidelog

    def parse(self, value: str, key: str | None = None) -> Any:
        """The typed value; ``key`` is the name to blame (the synonym, for cluster keys)."""
        key = key or self.name
        try:
            typed = _PARSERS[self.type](value)
        except ValueError:
            numeric = self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE)
            expected = (f"Not a number of type {self.type.value}" if numeric
                        else "Expected value to be either true or false" if self.type is ConfigType.BOOLEAN
                        else f"Expected value to be of type {self.type.value}")
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {key}: {expected}") from None
        if self.validator is not None and getattr(self.validator, "per_item", False) and isinstance(typed, list):
            for item in typed:          # Kafka's ValidList: the first bad item is named
                problem = self.validator(item)
                if problem:
                    raise InvalidConfigError(f"Invalid value {item} for configuration {key}: {problem}")
            return typed
        problem = self.validator(typed) if self.validator else None
        if problem:
            # As Kafka shows the parsed value: a double as Java prints it (2.0), a list as [a, b].
            shown = (typed if self.type is ConfigType.DOUBLE
                     else "[" + ", ".join(typed) + "]" if self.type is ConfigType.LIST else value)
            raise InvalidConfigError(f"Invalid value {shown} for configuration {key}: {problem}")
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
_NOT_ACTED_ON = " Stored and described; tidelog does not act on it ({})."
_NO_TIERED = _NOT_ACTED_ON.format("it has no tiered storage")
TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("cleanup.policy", _T.LIST, "delete", "log.cleanup.policy", one_of("compact", "delete"),
              "delete: old segments are removed by retention.ms / retention.bytes; compact: the log cleaner "
              "keeps the latest record of each key; both together do both."),
    ConfigDef("compression.gzip.level", _T.INT, "-1", "compression.gzip.level", between_or(1, 9, -1),
              "Level of gzip compression when the broker recompresses (compression.type=gzip)."
              + _NOT_ACTED_ON.format("it compresses at the codec's default level")),
    ConfigDef("compression.lz4.level", _T.INT, "9", "compression.lz4.level", in_range(1, 17),
              "Level of lz4 compression when the broker recompresses (compression.type=lz4)."
              + _NOT_ACTED_ON.format("it compresses at the codec's default level")),
    ConfigDef("compression.type", _T.STRING, "producer", "compression.type",
              one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
              "The codec of the batches the log keeps: producer keeps what the producer sent; any other "
              "value recompresses appended batches with that codec (uncompressed: none)."),
    ConfigDef("compression.zstd.level", _T.INT, "3", "compression.zstd.level", in_range(-131072, 22),
              "Level of zstd compression when the broker recompresses (compression.type=zstd)."
              + _NOT_ACTED_ON.format("it compresses at the codec's default level")),
    ConfigDef("delete.retention.ms", _T.LONG, "86400000", "log.cleaner.delete.retention.ms", at_least(0),
              "How long the log cleaner keeps a tombstone (and a transaction's markers) after it reached "
              "the cleaned part of a compacted log."),
    ConfigDef("errors.deadletterqueue.group.enable", _T.BOOLEAN, "false", None, None,
              "Whether share groups may use this topic as a dead-letter queue."
              + _NOT_ACTED_ON.format("it has no share groups")),
    ConfigDef("file.delete.delay.ms", _T.LONG, "60000", "log.segment.delete.delay.ms", at_least(0),
              "How long a deleted segment's files wait before they are removed from disk."
              + _NOT_ACTED_ON.format("its segments' files are removed at once")),
    ConfigDef("flush.messages", _T.LONG, str(LONG_MAX), "log.flush.interval.messages", at_least(1),
              "fsync the log after this many appended records (the default leaves durability to "
              "replication)."),
    ConfigDef("flush.ms", _T.LONG, str(LONG_MAX), "log.flush.interval.ms", at_least(0),
              "fsync the log when its oldest unflushed record is this old (the default leaves durability "
              "to replication)."),
    ConfigDef("follower.replication.throttled.replicas", _T.LIST, "", None,
              throttled_replicas("follower.replication.throttled.replicas"),
              "Replicas (partition:broker, or *) whose follower side is held to "
              "follower.replication.throttled.rate (docs/reassignment.md)."),
    ConfigDef("index.interval.bytes", _T.INT, "4096", "log.index.interval.bytes", at_least(0),
              "Bytes of log between two entries of the offset and time indexes."),
    ConfigDef("leader.replication.throttled.replicas", _T.LIST, "", None,
              throttled_replicas("leader.replication.throttled.replicas"),
              "Replicas (partition:broker, or *) whose leader side is held to "
              "leader.replication.throttled.rate (docs/reassignment.md)."),
    ConfigDef("local.retention.bytes", _T.LONG, "-2", "log.local.retention.bytes", at_least(-2),
              "Bytes of a partition kept on local disk when tiered storage holds the rest (-2: "
              "retention.bytes)." + _NO_TIERED),
    ConfigDef("local.retention.ms", _T.LONG, "-2", "log.local.retention.ms", at_least(-2),
              "How long segments stay on local disk when tiered storage holds the rest (-2: "
              "retention.ms)." + _NO_TIERED),
    ConfigDef("max.compaction.lag.ms", _T.LONG, str(LONG_MAX), "log.cleaner.max.compaction.lag.ms", at_least(1),
              "The longest a record may stay uncompacted: a log with an older dirty record is cleaned even "
              "below min.cleanable.dirty.ratio."),
    ConfigDef("max.decompressed.message.bytes", _T.INT, "2147483639", "max.decompressed.message.bytes",
              at_least(1), "The largest a compressed batch may become when decompressed."
              + _NOT_ACTED_ON.format("its bound on a decompressed batch is fixed")),
    ConfigDef("max.message.bytes", _T.INT, "1048588", "message.max.bytes", at_least(0),
              "The largest record batch (after compression) the log accepts; a larger one is refused "
              "with MESSAGE_TOO_LARGE."),
    ConfigDef("message.timestamp.after.max.ms", _T.LONG, "3600000", "log.message.timestamp.after.max.ms",
              at_least(0), "How far in the future a CreateTime timestamp may be; a batch beyond it is refused "
              "with INVALID_TIMESTAMP."),
    ConfigDef("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), "log.message.timestamp.before.max.ms",
              at_least(0), "How far in the past a CreateTime timestamp may be; a batch beyond it is refused "
              "with INVALID_TIMESTAMP."),
    ConfigDef("message.timestamp.type", _T.STRING, "CreateTime", "log.message.timestamp.type",
              one_of("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the "
              "broker's time when it is appended."),
    ConfigDef("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio", between(0, 1),
              "The log cleaner cleans a compacted log once this share of it is uncleaned."),
    ConfigDef("min.compaction.lag.ms", _T.LONG, "0", "log.cleaner.min.compaction.lag.ms", at_least(0),
              "A record stays uncompacted at least this long after it was appended."),
    ConfigDef("min.insync.replicas", _T.INT, "1", "min.insync.replicas", at_least(1),
              "A produce with acks=all is refused (NOT_ENOUGH_REPLICAS) while fewer replicas than this "
              "are in sync."),
    ConfigDef("preallocate", _T.BOOLEAN, "false", "log.preallocate", None,
              "Whether a new segment's file is allocated at its full size."
              + _NOT_ACTED_ON.format("segment files grow as they are written")),
    ConfigDef("remote.copy.lag.bytes", _T.LONG, "-1", "log.remote.copy.lag.bytes", at_least(-1),
              "Bytes of newer data after which a segment may be copied to tiered storage." + _NO_TIERED),
    ConfigDef("remote.copy.lag.ms", _T.LONG, "0", "log.remote.copy.lag.ms", at_least(-1),
              "Age after which a segment may be copied to tiered storage." + _NO_TIERED),
    ConfigDef("remote.log.copy.disable", _T.BOOLEAN, "false", None, None,
              "Stop copying segments to tiered storage." + _NO_TIERED),
    ConfigDef("remote.log.delete.on.disable", _T.BOOLEAN, "false", None, None,
              "Delete the remote copy when tiered storage is turned off for the topic." + _NO_TIERED),
    ConfigDef("remote.storage.enable", _T.BOOLEAN, "false", None, None,
              "Tiered storage for the topic; tidelog has none, so only false is accepted."),
    ConfigDef("retention.bytes", _T.LONG, "-1", "log.retention.bytes", None,
              "The largest a partition may grow before its oldest segments are deleted (delete policy); "
              "-1: no limit."),
    ConfigDef("retention.ms", _T.LONG, "604800000", "log.retention.ms", at_least(-1),
              "How long a segment is kept after its newest record (delete policy); -1: forever."),
    ConfigDef("segment.bytes", _T.INT, "1073741824", "log.segment.bytes", at_least(14),
              "A segment is rolled when it would grow beyond this size."),
    ConfigDef("segment.index.bytes", _T.INT, "10485760", "log.index.size.max.bytes", at_least(4),
              "The size of a segment's offset and time indexes; a full index rolls the segment."),
    ConfigDef("segment.jitter.ms", _T.LONG, "0", "log.roll.jitter.ms", at_least(0),
              "A random amount up to this subtracted from segment.ms, so that segments do not all roll at once."
              + _NOT_ACTED_ON.format("its segments roll at segment.ms exactly")),
    ConfigDef("segment.ms", _T.LONG, "604800000", "log.roll.ms", at_least(1),
              "A segment is rolled when its first record is this old, so retention can delete it."),
    ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, "false", "unclean.leader.election.enable", None,
              "Whether a replica outside the ISR may be elected leader when no in-sync replica is left "
              "(possible loss of acknowledged records)."),
)}

# Topic keys tidelog stores and describes but does not act on (docs/configs.md says so).
STORED_ONLY_TOPIC_CONFIGS = frozenset(name for name, d in TOPIC_CONFIGS.items() if "does not act on it" in d.doc)


def check_topic_config_supported(key: str, value: str) -> None:
    """What a valid value may still not ask of tidelog (Kafka's own refusal when tiered storage
    is off on the broker)."""
    if key == "remote.storage.enable" and value.strip().lower() == "true":
        raise InvalidConfigError("Tiered Storage functionality is disabled in the broker. "
                                 "Topic cannot be configured with remote log storage.")


# Cluster-level (default broker resource) keys: the synonyms of the topic keys.
CLUSTER_CONFIGS: dict[str, ConfigDef] = {d.synonym: d for d in TOPIC_CONFIGS.values() if d.synonym}


def validate_topic_config(key: str, value: str | None) -> None:
    """Raise ``InvalidConfigError`` unless ``key`` may be set to ``value`` (None: deleted)."""
    definition = TOPIC_CONFIGS.get(key)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {key}")
    if value is not None:
        definition.parse(value)
        check_topic_config_supported(key, value)


def validate_cluster_config(key: str, value: str | None) -> None:
    definition = CLUSTER_CONFIGS.get(key)
    if definition is None:
        raise InvalidConfigError(f"Unknown or non-dynamic cluster config name: {key}")
    if value is not None:
        definition.parse(value, key)


# GROUP config resources (KIP-848): a consumer group's own session timeout and heartbeat
# interval, each within the broker's bounds (Kafka's GroupConfig). ``synonym``: the broker
# setting that is the default; ``bounds``: the broker settings of its minimum and maximum.
@dataclass(frozen=True)
class GroupConfigDef:
    name: str
    synonym: str
    default: int
    bounds: tuple[str, str]
    bound_defaults: tuple[int, int]
    doc: str


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", 45_000,
                   ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
                   (45_000, 60_000),
                   "How long the coordinator waits for a heartbeat of a member of this consumer group "
                   "before removing it."),
    GroupConfigDef("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", 5_000,
                   ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
                   (5_000, 15_000),
                   "The heartbeat interval the coordinator gives the members of this consumer group."),
)}


def validate_group_config(key: str, value: str | None, broker: Mapping[str, str]) -> None:
    """Raise ``InvalidConfigError`` (Kafka's messages) unless group config ``key`` may be
    ``value``; ``broker``: the settings holding the bounds (Kafka's defaults otherwise)."""
    definition = GROUP_CONFIGS.get(key)
    if definition is None:
        raise InvalidConfigError(f"Unknown group config name: {key}")
    if value is None:
        return
    typed = ConfigDef(key, ConfigType.INT, str(definition.default), None).parse(value)
    low, high = (int(broker.get(name, default)) for name, default in zip(definition.bounds,
                                                                         definition.bound_defaults))
    if not low <= typed <= high:
        raise InvalidConfigError(f"{key} must be in the range {low} to {high} inclusive.")
