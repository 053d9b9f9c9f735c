"""Metadata records: the only way cluster metadata ever changes (KRaft, KIP-631).

Theory of operation. The controller decides; what it decides is written as a
sequence of these records into the metadata log (``__cluster_metadata``); every
controller and broker *replays* the same records in the same order and so reaches
the same state. A record is a frozen dataclass named and numbered as in Kafka
(``API_KEY`` is Kafka's metadata record api key) with a schema ``VERSION``.

Serialization. ``encode(record)`` gives a compact frame::

    frame_version uvarint (= 1) | api_key uvarint | version uvarint | fields...

Fields are written in declaration order: integers as zig-zag varints (range
checked on both sides), booleans as one byte 0/1, strings and lists prefixed by an
unsigned varint ``length + 1`` (0 means null), UUIDs as 16 raw bytes. A field added
in a later version of a record names that version as the third item of its
``SCHEMA`` entry; a record is written at the lowest version that holds every field
it sets (so records that leave the new fields at their defaults are written, byte
for byte, as before), and an older version is read with those fields at their
defaults. ``decode``
accepts exactly one frame and raises ``InvalidMetadataRecordError`` (a
``CorruptRecordError``) naming the problem for anything else — unknown api key or
version, truncation, trailing bytes, bad UTF-8, out-of-range integers.

In the log, each metadata record is the *value* of one Kafka record, and the
records of one controller write form one record batch (``build_batch``), so the
metadata log is an ordinary, CRC-checked tidelog log: ``records_to_batch`` /
``iter_batch_records``.

Field conventions (Kafka's): ``PartitionChangeRecord`` carries only what changed
(``isr``/``replicas`` ``None`` = unchanged; ``leader`` ``-2`` = unchanged, ``-1`` =
no leader; ``leader_recovery_state`` ``-1`` = unchanged; ``eligible_leader_replicas`` /
``last_known_elr`` ``None`` = unchanged, KIP-966; ``adding_replicas`` /
``removing_replicas`` ``None`` = unchanged, KIP-455);
``BrokerRegistrationChangeRecord.fenced`` is ``True``/``False``/``None`` (= no
change) and is written as Kafka's int8 (1 fenced, -1 unfenced, 0 no change).
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from tidelog.core.errors import CorruptRecordError
from tidelog.records.batch import build_batch, iter_batches, iter_records, validate_batch

FRAME_VERSION = 1
NO_LEADER = -1           # PartitionRecord/PartitionChangeRecord: nobody leads
NO_LEADER_CHANGE = -2    # PartitionChangeRecord: the leader did not change


class InvalidMetadataRecordError(CorruptRecordError):
    """Bytes that are not exactly one valid metadata record frame."""


class ConfigResourceType(enum.IntEnum):
    """Kafka's ``ConfigResource.Type`` codes, as stored in ``ConfigRecord``."""

    TOPIC = 2
    BROKER = 4  # resource name "" = the cluster-wide default
    GROUP = 32  # a consumer group's own settings (KIP-848)


class LeaderRecoveryState(enum.IntEnum):
    RECOVERED = 0
    RECOVERING = 1   # set by an unclean election until the new leader says it recovered


class SecurityProtocol(enum.IntEnum):
    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


# ---------------------------------------------------------------- field codecs

class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes):
        self.buf, self.pos, self.end = buf, 0, len(buf)

    def byte(self) -> int:
        if self.pos >= self.end:
            raise InvalidMetadataRecordError("metadata record is truncated")
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def take(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise InvalidMetadataRecordError(
                f"metadata record field of {n} bytes runs past the end")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data

    def uvarint(self) -> int:
        result, shift = 0, 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise InvalidMetadataRecordError("metadata record varint is longer than 10 bytes")


def _write_uvarint(out: bytearray, value: int) -> None:
    assert value >= 0
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


class _Int:
    def __init__(self, bits: int, signed: bool = True):
        self.low = -(1 << (bits - 1)) if signed else 0
        self.high = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
        self.name = f"{'int' if signed else 'uint'}{bits}"

    def check(self, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) \
                or not self.low <= value <= self.high:
            raise ValueError(f"{value!r} is not a valid {self.name}")

    def write(self, out: bytearray, value: int) -> None:
        self.check(value)
        _write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def read(self, reader: _Reader) -> int:
        raw = reader.uvarint()
        value = (raw >> 1) ^ -(raw & 1)
        if not self.low <= value <= self.high:
            raise InvalidMetadataRecordError(f"metadata record {self.name} {value} is out of range")
        return value


INT8, INT16, INT32, INT64, UINT16 = _Int(8), _Int(16), _Int(32), _Int(64), _Int(16, signed=False)


class _Float64:
    """An IEEE 754 double, 8 bytes big-endian (Kafka's float64)."""

    def write(self, out: bytearray, value: float) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{value!r} is not a float64")
        out += struct.pack(">d", float(value))

    def read(self, reader: _Reader) -> float:
        return struct.unpack(">d", reader.take(8))[0]


FLOAT64 = _Float64()


class _Bool:
    def write(self, out: bytearray, value: bool) -> None:
        if type(value) is not bool:
            raise ValueError(f"{value!r} is not a bool")
        out.append(1 if value else 0)

    def read(self, reader: _Reader) -> bool:
        byte = reader.byte()
        if byte > 1:
            raise InvalidMetadataRecordError(f"metadata record bool byte is {byte}")
        return byte == 1


class _Nullable:
    """Length-prefixed values: uvarint ``length + 1``, 0 for null."""

    def __init__(self, nullable: bool):
        self.nullable = nullable

    def write_length(self, out: bytearray, value: Any) -> bool:
        if value is None:
            if not self.nullable:
                raise ValueError("a non-nullable field is None")
            out.append(0)
            return False
        _write_uvarint(out, len(value) + 1)
        return True

    def read_length(self, reader: _Reader) -> int | None:
        raw = reader.uvarint()
        if raw == 0:
            if not self.nullable:
                raise InvalidMetadataRecordError("metadata record has null in a non-nullable field")
            return None
        if raw - 1 > reader.end - reader.pos:
            raise InvalidMetadataRecordError(
                f"metadata record declares {raw - 1} elements, more than the bytes left")
        return raw - 1


class _String(_Nullable):
    def write(self, out: bytearray, value: str | None) -> None:
        if value is not None and type(value) is not str:
            raise ValueError(f"{value!r} is not a str")
        encoded = None if value is None else value.encode("utf-8")
        if self.write_length(out, encoded):
            out += encoded

    def read(self, reader: _Reader) -> str | None:
        length = self.read_length(reader)
        if length is None:
            return None
        try:
            return reader.take(length).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidMetadataRecordError("metadata record string is not UTF-8") from None


class _Bytes(_Nullable):
    def write(self, out: bytearray, value: bytes | None) -> None:
        if value is not None and type(value) is not bytes:
            raise ValueError(f"{type(value).__name__} is not bytes")
        if self.write_length(out, value):
            out += value

    def read(self, reader: _Reader) -> bytes | None:
        length = self.read_length(reader)
        return None if length is None else bytes(reader.take(length))


class _Uuid:
    def write(self, out: bytearray, value: uuid.UUID) -> None:
        if not isinstance(value, uuid.UUID):
            raise ValueError(f"{value!r} is not a UUID")
        out += value.bytes

    def read(self, reader: _Reader) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(reader.take(16)))


class _List(_Nullable):
    def __init__(self, item: Any, nullable: bool = False):
        super().__init__(nullable)
        self.item = item

    def write(self, out: bytearray, value: Sequence | None) -> None:
        if value is not None and not isinstance(value, tuple):
            raise ValueError(f"list fields are tuples, got {type(value).__name__}")
        if self.write_length(out, value):
            for item in value:
                self.item.write(out, item)

    def read(self, reader: _Reader) -> tuple | None:
        length = self.read_length(reader)
        if length is None:
            return None
        return tuple(self.item.read(reader) for _ in range(length))


class _Struct:
    def __init__(self, cls: type):
        self.cls = cls

    def write(self, out: bytearray, value: Any) -> None:
        if type(value) is not self.cls:
            raise ValueError(f"{value!r} is not a {self.cls.__name__}")
        for name, codec in self.cls.SCHEMA:
            codec.write(out, getattr(value, name))

    def read(self, reader: _Reader) -> Any:
        return self.cls(**{name: codec.read(reader) for name, codec in self.cls.SCHEMA})


def _fields(cls: type, version: int) -> Iterator[tuple[str, Any]]:
    """``(name, codec)`` of the fields ``cls`` has at ``version`` (a third item in a
    ``SCHEMA`` entry is the version that added the field)."""
    for entry in cls.SCHEMA:
        if len(entry) == 2 or entry[2] <= version:
            yield entry[0], entry[1]


def _version_for(record: Any) -> int:
    """The lowest version of ``record``'s type that holds every field it sets."""
    version = 0
    defaults = {f.name: f.default for f in dataclasses.fields(record)}
    for entry in type(record).SCHEMA:
        if len(entry) == 3 and getattr(record, entry[0]) != defaults[entry[0]]:
            version = max(version, entry[2])
    return version


BOOL, STRING, NULLABLE_STRING, UUID, BYTES = _Bool(), _String(False), _String(True), _Uuid(), _Bytes(False)
INT32_LIST, NULLABLE_INT32_LIST = _List(INT32), _List(INT32, nullable=True)
UUID_LIST, NULLABLE_UUID_LIST = _List(UUID), _List(UUID, nullable=True)


# ---------------------------------------------------------------- records

@dataclass(frozen=True)
class Endpoint:
    """A broker listener: clients of listener ``name`` connect to ``host:port``."""

    name: str
    host: str
    port: int
    security_protocol: int = int(SecurityProtocol.PLAINTEXT)
    SCHEMA: ClassVar = (("name", STRING), ("host", STRING), ("port", UINT16),
                        ("security_protocol", INT16))


@dataclass(frozen=True)
class BrokerFeature:
    """A feature a broker supports, with the range of levels it can run."""

    name: str
    min_supported_version: int
    max_supported_version: int
    SCHEMA: ClassVar = (("name", STRING), ("min_supported_version", INT16),
                        ("max_supported_version", INT16))


@dataclass(frozen=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[BrokerFeature, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()      # the broker's log directory ids (KIP-858), sorted
    API_KEY: ClassVar = 0
    VERSION: ClassVar = 1
    SCHEMA: ClassVar = (("broker_id", INT32), ("incarnation_id", UUID), ("broker_epoch", INT64),
                        ("endpoints", _List(_Struct(Endpoint))),
                        ("features", _List(_Struct(BrokerFeature))),
                        ("rack", NULLABLE_STRING), ("fenced", BOOL),
                        ("in_controlled_shutdown", BOOL), ("log_dirs", UUID_LIST, 1))


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int
    API_KEY: ClassVar = 1
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("broker_id", INT32), ("broker_epoch", INT64))


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    API_KEY: ClassVar = 2
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("name", STRING), ("topic_id", UUID))


@dataclass(frozen=True)
class PartitionRecord:
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: int = int(LeaderRecoveryState.RECOVERED)
    # The log directory of each replica, in replica order (KIP-858); () = all unassigned.
    directories: tuple[uuid.UUID, ...] = ()
    # KIP-966: replicas out of the ISR that still hold every committed record (Kafka's
    # EligibleLeaderReplicas), and those that once did (LastKnownElr).
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-455: an ongoing reassignment's replicas being added and removed (both
    # also in ``replicas``, which is target ∪ current while it runs).
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    API_KEY: ClassVar = 3
    VERSION: ClassVar = 3
    SCHEMA: ClassVar = (("topic_id", UUID), ("partition_id", INT32), ("replicas", INT32_LIST),
                        ("isr", INT32_LIST), ("leader", INT32), ("leader_epoch", INT32),
                        ("partition_epoch", INT32), ("leader_recovery_state", INT8),
                        ("directories", UUID_LIST, 1),
                        ("eligible_leader_replicas", INT32_LIST, 2), ("last_known_elr", INT32_LIST, 2),
                        ("adding_replicas", INT32_LIST, 3), ("removing_replicas", INT32_LIST, 3))


@dataclass(frozen=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None   # None deletes the key
    API_KEY: ClassVar = 4
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("resource_type", INT8), ("resource_name", STRING), ("name", STRING),
                        ("value", NULLABLE_STRING))


@dataclass(frozen=True)
class PartitionChangeRecord:
    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    leader_recovery_state: int = -1
    directories: tuple[uuid.UUID, ...] | None = None   # every replica's directory, or None = unchanged
    eligible_leader_replicas: tuple[int, ...] | None = None   # KIP-966; None = unchanged
    last_known_elr: tuple[int, ...] | None = None              # KIP-966; None = unchanged
    adding_replicas: tuple[int, ...] | None = None             # KIP-455; None = unchanged
    removing_replicas: tuple[int, ...] | None = None           # KIP-455; None = unchanged
    API_KEY: ClassVar = 5
    VERSION: ClassVar = 3
    SCHEMA: ClassVar = (("topic_id", UUID), ("partition_id", INT32), ("isr", NULLABLE_INT32_LIST),
                        ("leader", INT32), ("replicas", NULLABLE_INT32_LIST),
                        ("leader_recovery_state", INT8), ("directories", NULLABLE_UUID_LIST, 1),
                        ("eligible_leader_replicas", NULLABLE_INT32_LIST, 2),
                        ("last_known_elr", NULLABLE_INT32_LIST, 2),
                        ("adding_replicas", NULLABLE_INT32_LIST, 3),
                        ("removing_replicas", NULLABLE_INT32_LIST, 3))


@dataclass(frozen=True)
class FenceBrokerRecord:
    broker_id: int
    broker_epoch: int
    API_KEY: ClassVar = 7
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("broker_id", INT32), ("broker_epoch", INT64))


@dataclass(frozen=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int
    API_KEY: ClassVar = 8
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("broker_id", INT32), ("broker_epoch", INT64))


@dataclass(frozen=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID
    API_KEY: ClassVar = 9
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("topic_id", UUID),)


@dataclass(frozen=True)
class FeatureLevelRecord:
    name: str
    feature_level: int   # 0 removes the feature
    API_KEY: ClassVar = 12
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("name", STRING), ("feature_level", INT16))


@dataclass(frozen=True)
class ProducerIdsRecord:
    broker_id: int
    broker_epoch: int
    next_producer_id: int   # Kafka's ProducerIdsEnd: the first id not yet handed out
    API_KEY: ClassVar = 15
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("broker_id", INT32), ("broker_epoch", INT64), ("next_producer_id", INT64))


class ScramMechanism(enum.IntEnum):
    """Kafka's ``ScramMechanism`` codes (AlterUserScramCredentials, the records)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


@dataclass(frozen=True, repr=False)
class UserScramCredentialRecord:
    """A user's SCRAM credential (KIP-554): what the server keeps, never the password."""

    name: str
    mechanism: int            # ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
    API_KEY: ClassVar = 11
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("name", STRING), ("mechanism", INT8), ("salt", BYTES), ("stored_key", BYTES),
                        ("server_key", BYTES), ("iterations", INT32))

    def __repr__(self) -> str:          # keys stay out of logs and traces
        return f"UserScramCredentialRecord(name={self.name!r}, mechanism={self.mechanism}, " \
               f"iterations={self.iterations})"


@dataclass(frozen=True)
class AccessControlEntryRecord:
    """One ACL (Kafka's StandardAuthorizer model); codes are Kafka's ResourceType,
    PatternType, AclOperation and AclPermissionType (metadata/authorizer.py)."""

    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    API_KEY: ClassVar = 6
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("id", UUID), ("resource_type", INT8), ("resource_name", STRING), ("pattern_type", INT8),
                        ("principal", STRING), ("host", STRING), ("operation", INT8), ("permission_type", INT8))


@dataclass(frozen=True)
class RemoveAccessControlEntryRecord:
    id: uuid.UUID
    API_KEY: ClassVar = 20
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("id", UUID),)


@dataclass(frozen=True)
class RemoveUserScramCredentialRecord:
    name: str
    mechanism: int
    API_KEY: ClassVar = 22
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("name", STRING), ("mechanism", INT8))


@dataclass(frozen=True)
class ClientQuotaEntityData:
    """One part of a client quota entity: ``user``, ``client-id`` or ``ip``; a null
    name is that type's default entity."""

    entity_type: str
    entity_name: str | None
    SCHEMA: ClassVar = (("entity_type", STRING), ("entity_name", NULLABLE_STRING))


@dataclass(frozen=True)
class ClientQuotaRecord:
    """Set (or, with ``remove``, remove) one quota of one entity (KIP-13, KIP-546)."""

    entity: tuple[ClientQuotaEntityData, ...]
    key: str                  # producer_byte_rate, consumer_byte_rate, request_percentage, ...
    value: float = 0.0        # ignored when removing
    remove: bool = False
    API_KEY: ClassVar = 14
    VERSION: ClassVar = 0
    SCHEMA: ClassVar = (("entity", _List(_Struct(ClientQuotaEntityData))), ("key", STRING),
                        ("value", FLOAT64), ("remove", BOOL))


class _FencedChange(_Int):
    """Kafka's int8 encoding of an optional bool: 1 = True, -1 = False, 0 = None."""

    def __init__(self, allow_false: bool):
        super().__init__(8)
        self.allow_false = allow_false

    def write(self, out: bytearray, value: bool | None) -> None:
        if value is False and not self.allow_false:
            raise ValueError("this change field cannot be False")
        super().write(out, 0 if value is None else (1 if value else -1))

    def read(self, reader: _Reader) -> bool | None:
        raw = super().read(reader)
        if raw not in ((-1, 0, 1) if self.allow_false else (0, 1)):
            raise InvalidMetadataRecordError(f"metadata record change flag is {raw}")
        return None if raw == 0 else raw == 1


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None                   # None = no change
    in_controlled_shutdown: bool | None = None   # only True (enter) or None
    log_dirs: tuple[uuid.UUID, ...] | None = None   # the directories still online; None = no change
    API_KEY: ClassVar = 17
    VERSION: ClassVar = 1
    SCHEMA: ClassVar = (("broker_id", INT32), ("broker_epoch", INT64),
                        ("fenced", _FencedChange(allow_false=True)),
                        ("in_controlled_shutdown", _FencedChange(allow_false=False)),
                        ("log_dirs", NULLABLE_UUID_LIST, 1))


MetadataRecord = (RegisterBrokerRecord | UnregisterBrokerRecord | TopicRecord | PartitionRecord
                  | ConfigRecord | PartitionChangeRecord | FenceBrokerRecord | UnfenceBrokerRecord
                  | RemoveTopicRecord | FeatureLevelRecord | ProducerIdsRecord
                  | BrokerRegistrationChangeRecord | UserScramCredentialRecord
                  | RemoveUserScramCredentialRecord | AccessControlEntryRecord | RemoveAccessControlEntryRecord
                  | ClientQuotaRecord)

RECORD_TYPES: Mapping[int, type] = {
    cls.API_KEY: cls for cls in (
        RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
        PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
        FeatureLevelRecord, ProducerIdsRecord, BrokerRegistrationChangeRecord, UserScramCredentialRecord,
        RemoveUserScramCredentialRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord,
        ClientQuotaRecord)
}


# ---------------------------------------------------------------- encode / decode

def encode(record: MetadataRecord) -> bytes:
    """The frame of ``record``. A field of the wrong type or range is a bug: ValueError."""
    cls = type(record)
    if RECORD_TYPES.get(getattr(cls, "API_KEY", None)) is not cls:
        raise ValueError(f"{cls.__name__} is not a metadata record type")
    out = bytearray()
    version = _version_for(record)
    _write_uvarint(out, FRAME_VERSION)
    _write_uvarint(out, cls.API_KEY)
    _write_uvarint(out, version)
    for name, codec in _fields(cls, version):
        try:
            codec.write(out, getattr(record, name))
        except ValueError as e:
            raise ValueError(f"{cls.__name__}.{name}: {e}") from None
    return bytes(out)


def decode(data: bytes) -> MetadataRecord:
    """The one record framed in ``data``; ``InvalidMetadataRecordError`` otherwise."""
    reader = _Reader(bytes(data))
    frame_version = reader.uvarint()
    if frame_version != FRAME_VERSION:
        raise InvalidMetadataRecordError(f"metadata record frame version {frame_version} is unknown")
    api_key = reader.uvarint()
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise InvalidMetadataRecordError(f"metadata record api key {api_key} is unknown")
    version = reader.uvarint()
    if version > cls.VERSION:
        raise InvalidMetadataRecordError(
            f"{cls.__name__} version {version} is newer than supported {cls.VERSION}")
    fields = {name: codec.read(reader) for name, codec in _fields(cls, version)}
    if reader.pos != reader.end:
        raise InvalidMetadataRecordError(
            f"{cls.__name__} has {reader.end - reader.pos} bytes after its last field")
    return cls(**fields)


def records_to_batch(records: Sequence[MetadataRecord], *, base_offset: int,
                     leader_epoch: int = -1, timestamp_ms: int = -1) -> bytes:
    """One record batch holding ``records`` at ``base_offset, base_offset + 1, ...``.

    ``leader_epoch`` becomes the batch's ``partitionLeaderEpoch`` (the Raft epoch,
    once the quorum exists).
    """
    return build_batch([encode(r) for r in records], base_offset=base_offset,
                       partition_leader_epoch=leader_epoch, timestamp_ms=timestamp_ms)


def iter_batch_records(buf: bytes) -> Iterator[tuple[int, MetadataRecord]]:
    """``(offset, record)`` for every record of every batch in ``buf``.

    Each batch is CRC-checked first; a partial batch at the end is an error (the
    metadata log is read whole, never from a truncated fetch).
    """
    pos = 0
    for pos, header in iter_batches(buf):
        validate_batch(buf, pos)
        if header.is_control:              # the quorum's LeaderChange entries
            pos += header.size_bytes
            continue
        for record in iter_records(buf, pos):
            if record.value is None:
                raise InvalidMetadataRecordError(f"metadata record at offset {record.offset} is null")
            yield record.offset, decode(record.value)
        pos += header.size_bytes
    if pos != len(buf):
        raise InvalidMetadataRecordError(f"{len(buf) - pos} bytes after the last metadata batch")


def format_record(record: MetadataRecord, topic_names: Mapping[uuid.UUID, str] | None = None) -> str:
    """A one-line, human-oriented rendering (state-change logs, scenario traces).

    Topic ids are shown as ``topic=<name>`` when ``topic_names`` knows them. Fields
    left at their default ("no change" in change records) are left out, except the
    epochs, leader, fenced flag and config value, which always matter.
    """
    parts = [type(record).__name__.removesuffix("Record")]
    names = topic_names or {}
    is_change = isinstance(record, (PartitionChangeRecord, BrokerRegistrationChangeRecord))
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if value == field.default and (is_change or field.name not in _ALWAYS_SHOWN):
            continue
        if field.name == "topic_id" and value in names:
            if not isinstance(record, TopicRecord):
                parts.append(f"topic={names[value]}")
            continue
        parts.append(f"{field.name}={_format_value(value)}")
    return " ".join(parts)


_ALWAYS_SHOWN = frozenset({"fenced", "leader", "leader_epoch", "partition_epoch", "value"})


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, tuple):
        return "[" + ",".join(_format_value(v) for v in value) + "]"
    if isinstance(value, Endpoint):
        return f"{value.name}://{value.host}:{value.port}"
    if isinstance(value, ClientQuotaEntityData):
        return f"{value.entity_type}={'<default>' if value.entity_name is None else value.entity_name}"
    if isinstance(value, BrokerFeature):
        return f"{value.name}:{value.min_supported_version}-{value.max_supported_version}"
    if isinstance(value, enum.IntEnum):
        return value.name
    if value == "":
        return '""'
    return str(value)
