"""The data source's options, parsed and checked once (no Spark, no network).

Theory of operation. Spark hands a data source its options as a
case-insensitive map with lower-cased keys. ``source_options`` and
``sink_options`` turn that map into frozen dataclasses, or raise
``OptionError`` naming the option and what is allowed. Option names and
meanings follow Spark's Kafka connector (docs/spark.md has the table); a
``kafka.*`` option configures the client, under the Kafka client config name.

Offsets in JSON use Spark's shape, ``{"topic": {"0": 23, "1": -1}}``, where -2
means earliest and -1 latest; timestamps use the same shape with milliseconds.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Mapping

import ssl

from tidelog.protocol.client_config import client_security
from tidelog.core.errors import InvalidConfigError
from tidelog.protocol.client import ClientSecurity
from tidelog.spark.wire import READ_COMMITTED, READ_UNCOMMITTED, ClientConfig, parse_bootstrap

logger = logging.getLogger("tidelog.spark")

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1
INT32_MAX, INT64_MAX = (1 << 31) - 1, (1 << 63) - 1
# A partition's share of a Fetch answer, at most (also where the executor stops doubling
# it for a batch larger than asked for): a response must stay under the client's 256 MiB.
PARTITION_FETCH_BYTES_MAX = 128 * 1024 * 1024
CONTROL_TOPIC_PREFIX = "_tidelog-spark-sink-"

# kafka.* options this client understands; others are ignored with a warning,
# except those that would silently change meaning (security) or that Spark's
# own connector forbids.
_CLIENT_OPTIONS = {
    "kafka.bootstrap.servers", "kafka.client.id", "kafka.request.timeout.ms",
    "kafka.default.api.timeout.ms", "kafka.retry.backoff.ms", "kafka.isolation.level",
    "kafka.check.crcs", "kafka.max.partition.fetch.bytes", "kafka.fetch.max.wait.ms",
    "kafka.acks", "kafka.compression.type", "kafka.batch.size", "kafka.group.id",
    "kafka.security.protocol", "kafka.transaction.timeout.ms",
    "kafka.sasl.mechanism", "kafka.sasl.jaas.config", "kafka.sasl.username", "kafka.sasl.password",
    "kafka.ssl.truststore.location", "kafka.ssl.truststore.type", "kafka.ssl.ca.location",
    "kafka.ssl.keystore.location", "kafka.ssl.keystore.type", "kafka.ssl.certificate.location",
    "kafka.ssl.key.location", "kafka.ssl.key.password", "kafka.ssl.endpoint.identification.algorithm",
}
_FORBIDDEN = {
    "kafka.auto.offset.reset": "use startingOffsets",
    "kafka.key.deserializer": "keys are always bytes; cast the column in Spark",
    "kafka.value.deserializer": "values are always bytes; cast the column in Spark",
    "kafka.key.serializer": "keys are always bytes or strings",
    "kafka.value.serializer": "values are always bytes or strings",
    "kafka.enable.auto.commit": "offsets live in the Spark checkpoint, never in the broker",
    "kafka.interceptor.classes": "there is no JVM Kafka client here",
    "kafka.transactional.id": "with transactional=true each task's transactional id is derived from the "
                              "query id and the Spark partition, so attempts fence each other",
}


class OptionError(ValueError):
    """An option is missing, malformed or not supported."""


@dataclass(frozen=True)
class Subscription:
    kind: str                                   # "assign" | "subscribe" | "subscribePattern"
    topics: tuple[str, ...] = ()                # subscribe
    pattern: str | None = None                  # subscribePattern (a Python regex, full match)
    partitions: tuple[TopicPartition, ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return (not topic.startswith("__") and not topic.startswith(CONTROL_TOPIC_PREFIX)
                    and re.fullmatch(self.pattern, topic) is not None)
        return any(t == topic for t, _ in self.partitions)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the broker."""

    kind: str                                   # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: tuple[tuple[TopicPartition, int], ...] = ()  # for "offsets" and "timestamps"
    timestamp_ms: int | None = None             # for "timestamp"
    not_found: str = "error"                    # for timestamps: "error" | "latest"

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class ReadOptions:
    """What an executor needs to read one offset range."""

    client: ClientConfig
    include_headers: bool = False
    fail_on_data_loss: bool = True
    isolation_level: int = READ_UNCOMMITTED
    check_crcs: bool = True
    max_partition_fetch_bytes: int = 8 * 1024 * 1024
    fetch_max_wait_ms: int = 500


@dataclass(frozen=True)
class SourceOptions:
    read: ReadOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None


@dataclass(frozen=True)
class SinkOptions:
    client: ClientConfig
    topic: str | None = None
    acks: int = -1
    compression: str = "none"
    batch_size_bytes: int = 256 * 1024
    idempotent: bool = True
    transactional: bool = False            # transactional=true (streaming): docs/spark.md
    transaction_timeout_ms: int = 60_000   # kafka.transaction.timeout.ms


# ---------------------------------------------------------------- parsing


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(options: dict, name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def _int(options: dict, name: str, default: int | None, minimum: int | None = None,
         maximum: int = INT32_MAX) -> int | None:
    """An integer option between ``minimum`` and ``maximum`` (by default Kafka's INT
    type, as its client config parser has it: a timeout or size past it is refused by
    name, not met later as an encoding error or a wait of years)."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {value}")
    if value > maximum:
        raise OptionError(f"option {name} must be at most {maximum}, got {value}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, name: str = "duration") -> int:
    """'15m', '30s', '500ms', '2h', '1d' or plain milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise OptionError(f"option {name} must be a duration such as 30s, 15m or 500ms, got {text!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def _check_kafka_options(options: dict) -> None:
    for name in options:
        if not name.startswith("kafka."):
            continue
        if name in _FORBIDDEN:
            raise OptionError(f"option {name} is not supported: {_FORBIDDEN[name]}")
        if name not in _CLIENT_OPTIONS:
            logger.warning("tidelog source/sink: ignoring unknown client option %s", name)
    for name in ("kafka.ssl.truststore.type", "kafka.ssl.keystore.type"):
        if options.get(name, "PEM").upper() != "PEM":
            raise OptionError(f"option {name}={options[name]}: only PEM stores are read (convert JKS/PKCS12 to PEM)")
    try:
        _security(options)
    except (InvalidConfigError, OSError, ssl.SSLError) as e:
        raise OptionError(f"security options: {e}") from None


def _security(options: dict) -> ClientSecurity | None:
    """``kafka.security.protocol``, ``kafka.ssl.*`` and ``kafka.sasl.*``, as Spark's
    Kafka connector passes them to the client (protocol/client_config.py reads them)."""
    return client_security({name[len("kafka."):]: value for name, value in options.items()
                            if name.startswith("kafka.")})


def client_config(options: dict) -> ClientConfig:
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
    try:
        parse_bootstrap(servers)
    except ValueError as e:
        raise OptionError(f"option kafka.bootstrap.servers: {e}") from None
    return ClientConfig(
        bootstrap_servers=servers,
        client_id=options.get("kafka.client.id", "tidelog-spark"),
        request_timeout_ms=_int(options, "kafka.request.timeout.ms", 30_000, 1),
        default_api_timeout_ms=_int(options, "kafka.default.api.timeout.ms", 60_000, 0),
        retry_backoff_ms=_int(options, "kafka.retry.backoff.ms", 100, 0),
        security_settings=tuple(sorted((name[len("kafka."):], value) for name, value in options.items()
                                       if name.startswith(("kafka.security.", "kafka.ssl.", "kafka.sasl.")))),
    )


def _subscription(options: dict) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribepattern") if options.get(name)]
    if len(given) != 1:
        raise OptionError("exactly one of the options assign, subscribe, subscribePattern must be set"
                          f" (got {len(given)})")
    kind = given[0]
    raw = options[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe must list at least one topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option subscribePattern is not a valid regular expression: {e}") from None
        return Subscription("subscribePattern", pattern=raw)
    try:
        parsed = json.loads(raw)
        partitions = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f'option assign must be JSON like {{"topicA":[0,1]}}, got {raw!r}') from None
    if not partitions:
        raise OptionError("option assign names no partitions")
    for topic, partition in partitions:
        _check_partition("assign", topic, partition)
    return Subscription("assign", partitions=partitions)


def _check_partition(option: str, topic: str, partition: int) -> None:
    if not 0 <= partition <= INT32_MAX:
        raise OptionError(f"option {option}: {partition} is not a partition of {topic}")


def parse_partition_json(raw: str, name: str, special: tuple[int, ...] = (EARLIEST, LATEST)
                         ) -> tuple[tuple[TopicPartition, int], ...]:
    """Spark's per-partition JSON, ``{"t": {"0": 5}}``, as sorted pairs. A value is an
    offset (or a timestamp) from 0 to 2^63 - 1, or one of ``special`` (-2 earliest, -1
    latest); a partition from 0 to 2^31 - 1."""
    try:
        parsed = json.loads(raw)
        pairs = tuple(sorted(((str(t), int(p)), int(v)) for t, ps in parsed.items() for p, v in ps.items()))
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f'option {name} must be "earliest", "latest" or JSON like '
                          f'{{"topic":{{"0":23,"1":-2}}}}, got {raw!r}') from None
    for (topic, partition), value in pairs:
        _check_partition(name, topic, partition)
        if not (0 <= value <= INT64_MAX or value in special):
            allowed = " or ".join(f"{v} ({'earliest' if v == EARLIEST else 'latest'})" for v in special)
            raise OptionError(f"option {name}: {value} for {topic}-{partition} is neither at least 0"
                              + (f" nor {allowed}" if allowed else ""))
    return pairs


def _offset_spec(options: dict, prefix: str, default: str, streaming: bool) -> OffsetSpec:
    """startingOffsets / endingOffsets and their timestamp variants (timestamp wins)."""
    not_found = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if not_found not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest")
    timestamp = options.get(f"{prefix}timestamp")
    if timestamp is not None:
        value = _int(options, f"{prefix}Timestamp", None, 0, INT64_MAX)
        return OffsetSpec("timestamp", timestamp_ms=value, not_found=not_found)
    by_timestamp = options.get(f"{prefix}offsetsbytimestamp")
    if by_timestamp is not None:
        return OffsetSpec("timestamps", offsets=parse_partition_json(by_timestamp, f"{prefix}OffsetsByTimestamp", ()),
                          not_found=not_found)
    raw = options.get(f"{prefix}offsets", default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())
    return OffsetSpec("offsets", offsets=parse_partition_json(raw, f"{prefix}Offsets"))


def source_options(raw_options: Mapping[str, str], streaming: bool) -> SourceOptions:
    options = _lower(raw_options)
    _check_kafka_options(options)
    isolation = options.get("kafka.isolation.level", "read_uncommitted").lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError("option kafka.isolation.level must be read_uncommitted or read_committed")
    read = ReadOptions(
        client=client_config(options),
        include_headers=_bool(options, "includeHeaders", False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        isolation_level=READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED,
        check_crcs=_bool(options, "kafka.check.crcs", True),
        max_partition_fetch_bytes=_int(options, "kafka.max.partition.fetch.bytes", 8 * 1024 * 1024, 1024,
                                       PARTITION_FETCH_BYTES_MAX),
        fetch_max_wait_ms=_int(options, "kafka.fetch.max.wait.ms", 500, 0),
    )
    starting = _offset_spec(options, "starting", "latest" if streaming else "earliest", streaming)
    ending = _offset_spec(options, "ending", "latest", streaming)
    if streaming:
        for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if name in options:
                raise OptionError(f"option {name} is for batch queries only; a stream has no end")
    else:
        if starting.kind == "latest" or (starting.kind == "offsets" and any(v == LATEST for v in starting.as_dict().values())):
            raise OptionError("startingOffsets may not be latest (-1) in a batch query")
        if ending.kind == "earliest" or (ending.kind == "offsets" and any(v == EARLIEST for v in ending.as_dict().values())):
            raise OptionError("endingOffsets may not be earliest (-2) in a batch query")
        for name in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if name in options:
                logger.warning("tidelog source: option %s applies to streaming queries only", name)
    delay = options.get("maxtriggerdelay")
    return SourceOptions(
        read=read,
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1, INT64_MAX),
        min_offsets_per_trigger=_int(options, "minOffsetsPerTrigger", None, 1, INT64_MAX),
        max_trigger_delay_ms=parse_duration_ms(delay, "maxTriggerDelay") if delay else 15 * 60 * 1000,
        min_partitions=_int(options, "minPartitions", None, 1),
    )


_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}


def sink_options(raw_options: Mapping[str, str], streaming: bool) -> SinkOptions:
    options = _lower(raw_options)
    _check_kafka_options(options)
    acks = options.get("kafka.acks", "all").strip().lower()
    if acks not in _ACKS:
        raise OptionError(f"option kafka.acks must be all, -1, 1 or 0, got {acks!r}")
    compression = options.get("kafka.compression.type", "none").strip().lower()
    if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise OptionError(f"option kafka.compression.type must be none, gzip, snappy, lz4 or zstd, got {compression!r}")
    return SinkOptions(
        client=client_config(options),
        topic=options.get("topic") or None,
        acks=_ACKS[acks],
        compression=compression,
        batch_size_bytes=_int(options, "kafka.batch.size", 256 * 1024, 1),
        idempotent=_bool(options, "idempotentWrites", True) if streaming else False,
        transactional=_transactional(options, streaming, _ACKS[acks]),
        transaction_timeout_ms=_int(options, "kafka.transaction.timeout.ms", 60_000, 1),
    )


def _transactional(options: dict, streaming: bool, acks: int) -> bool:
    if not _bool(options, "transactional", False):
        return False
    if not streaming:
        raise OptionError("option transactional=true is for streaming writes (writeStream); a batch write "
                          "is at least once")
    if acks != -1:
        raise OptionError("option transactional=true needs kafka.acks=all")
    return True
