"""The records of ``__consumer_offsets``, in Kafka's on-disk formats.

Theory of operation. Every record in a ``__consumer_offsets`` partition is a
key and a value, each starting with an int16 version (Kafka's
``CoordinatorRecord`` serde), so that Kafka's own tools
(``kafka-dump-log --offsets-decoder``, the console consumer's formatters) read
what tidelog writes:

    key  version 0 or 1  OffsetCommitKey    group, topic, partition
    key  version 2       GroupMetadataKey   group
    value                OffsetCommitValue  v3 written (v0–v4 read)
                         GroupMetadataValue v3 written (v0–v4 read)
    value absent (null)  a tombstone: the offset, or the group, is deleted

Strings are int16-length UTF-8 (compact varint-length in flexible versions,
v4+, which also carry tagged fields that are skipped), bytes int32-length.
Decoding a malformed record raises ``CorruptGroupRecord`` naming the problem.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class CorruptGroupRecord(ValueError):
    pass


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


# ------------------------------------------------------------------ encoding

class _Writer:
    def __init__(self):
        self.out = bytearray()

    def int16(self, value: int) -> None:
        self.out += _I16.pack(value)

    def int32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def int64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        self.int16(len(data))
        self.out += data

    def bytes_(self, value: bytes) -> None:
        self.int32(len(value))
        self.out += value


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    w = _Writer()
    if isinstance(key, OffsetCommitKey):
        w.int16(1)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
    else:
        w.int16(GROUP_METADATA_KEY_VERSION)
        w.string(key.group)
    return bytes(w.out)


def encode_value(value: OffsetCommitValue | GroupMetadataValue) -> bytes:
    w = _Writer()
    if isinstance(value, OffsetCommitValue):
        w.int16(OFFSET_COMMIT_VALUE_VERSION)
        w.int64(value.offset)
        w.int32(value.leader_epoch)
        w.string(value.metadata)
        w.int64(value.commit_timestamp_ms)
        return bytes(w.out)
    w.int16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return bytes(w.out)


# ------------------------------------------------------------------ decoding

class _Reader:
    def __init__(self, data: bytes, what: str, flexible: bool = False):
        self.data = memoryview(data)
        self.pos = 0
        self.what = what
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptGroupRecord(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def _uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptGroupRecord(f"{self.what}: varint longer than 5 bytes at byte {self.pos}")

    def string(self, nullable: bool = False) -> str | None:
        n = self._uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            if not nullable:
                raise CorruptGroupRecord(f"{self.what}: null where a string is required")
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptGroupRecord(f"{self.what}: string is not UTF-8") from None

    def bytes_(self) -> bytes:
        n = self._uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise CorruptGroupRecord(f"{self.what}: null bytes")
        return bytes(self._take(n))

    def array_length(self) -> int:
        n = self._uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise CorruptGroupRecord(f"{self.what}: null array")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self._uvarint()):
                self._uvarint()
                self._take(self._uvarint())

    def value_version(self) -> int:
        """A value's version: 0–4, flexible (compact strings, tagged fields) from 4."""
        version = self.int16()
        if not 0 <= version <= 4:
            raise CorruptGroupRecord(f"{self.what}: unknown version {version}")
        self.flexible = version >= 4
        return version

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CorruptGroupRecord(f"{self.what}: {len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key, or None for a record type this coordinator does not keep
    (KIP-848 and share-group records are skipped, as an older Kafka would)."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    else:
        return None
    r.done()
    return key


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = _Reader(data, "OffsetCommitValue")
    version = r.value_version()
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.tagged_fields()
    r.done()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data, "GroupMetadataValue")
    version = r.value_version()
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription, assignment = r.bytes_(), r.bytes_()
        r.tagged_fields()
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                      rebalance_timeout if version >= 1 else session_timeout,
                                      session_timeout, subscription, assignment))
    r.tagged_fields()
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partition_count: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partition_count
