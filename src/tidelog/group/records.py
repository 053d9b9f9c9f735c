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

and a KIP-848 consumer group's state, one record per key, each value at
version 0 and flexible (``ConsumerKey`` names the type by Kafka's record type):

    3  ConsumerGroupMetadata               group          group epoch (+ tag 0 MetadataHash)
    5  ConsumerGroupMemberMetadata         group, member  who it is and what it subscribes to
    6  ConsumerGroupTargetAssignmentMetadata group        assignment epoch
    7  ConsumerGroupTargetAssignmentMember group, member  its target partitions
    8  ConsumerGroupCurrentMemberAssignment group, member its epochs, state, owned and
                                                          pending-revocation partitions

(type 4, the partition metadata Kafka 4.1 stopped writing, and types 9+ of
share and streams groups are skipped, as an older Kafka would.)

Strings are int16-length UTF-8 (compact varint-length in flexible versions,
v4+, which also carry tagged fields that are skipped), bytes int32-length.
Decoding a malformed record raises ``CorruptGroupRecord`` naming the problem.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
_GROUP_ONLY_KEYS = (CONSUMER_GROUP_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
_MEMBER_KEYS = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)


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
class ConsumerKey:
    """A KIP-848 record's key: its type (3, 5–8) and group, and the member for 5–8."""
    record_type: int
    group: str
    member_id: str | None = None


# (topic id, partition) pairs, the form a consumer group keeps its partitions in
Partitions = frozenset


@dataclass(frozen=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True)
class ConsumerMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class TargetAssignmentMemberValue:
    partitions: Partitions


@dataclass(frozen=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int                  # Kafka's MemberState: 0 stable, 1 unrevoked, 2 unreleased partitions
    assigned: Partitions
    pending_revocation: Partitions


ConsumerValue = (ConsumerGroupMetadataValue | ConsumerMemberMetadataValue | TargetAssignmentMetadataValue
                 | TargetAssignmentMemberValue | CurrentMemberAssignmentValue)


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

    # Flexible versions: compact (unsigned varint, length + 1) strings and arrays.
    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def compact_string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is longer than Kafka's 32767")
        self.uvarint(len(data) + 1)
        self.out += data

    def partitions(self, value: Partitions) -> None:
        """A ``[]TopicPartitions`` array: per topic id (sorted), its partitions (sorted)."""
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition in value:
            by_topic.setdefault(topic_id, []).append(partition)
        self.uvarint(len(by_topic) + 1)
        for topic_id in sorted(by_topic, key=str):
            self.out += topic_id.bytes
            self.uvarint(len(by_topic[topic_id]) + 1)
            for partition in sorted(by_topic[topic_id]):
                self.int32(partition)
            self.uvarint(0)                                  # no tagged fields

    def tagged(self, fields: list[tuple[int, bytes]]) -> None:
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data


def encode_key(key: OffsetCommitKey | GroupMetadataKey | ConsumerKey) -> bytes:
    w = _Writer()
    if isinstance(key, ConsumerKey):
        w.int16(key.record_type)
        w.string(key.group)
        if key.record_type in _MEMBER_KEYS:
            w.string(key.member_id)
        return bytes(w.out)
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


def encode_consumer_value(value: ConsumerValue) -> bytes:
    """A KIP-848 record's value: version 0, flexible, as Kafka writes it."""
    w = _Writer()
    w.int16(0)
    if isinstance(value, ConsumerGroupMetadataValue):
        w.int32(value.epoch)
        w.tagged([(0, _I64.pack(value.metadata_hash))] if value.metadata_hash else [])
    elif isinstance(value, ConsumerMemberMetadataValue):
        w.compact_string(value.instance_id)
        w.compact_string(value.rack_id)
        w.compact_string(value.client_id)
        w.compact_string(value.client_host)
        w.uvarint(len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            w.compact_string(name)
        w.compact_string(value.subscribed_topic_regex)
        w.int32(value.rebalance_timeout_ms)
        w.compact_string(value.server_assignor)
        w.tagged([])
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
        w.tagged([])
    elif isinstance(value, TargetAssignmentMemberValue):
        w.partitions(value.partitions)
        w.tagged([])
    else:
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.out += struct.pack(">b", value.state)
        w.partitions(value.assigned)
        w.partitions(value.pending_revocation)
        w.tagged([])
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

    def tagged_fields(self) -> dict[int, memoryview]:
        """A flexible struct's tagged fields, by tag (the caller keeps those it knows)."""
        fields = {}
        if self.flexible:
            for _ in range(self._uvarint()):
                tag = self._uvarint()
                fields[tag] = self._take(self._uvarint())
        return fields

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def partitions(self) -> Partitions:
        result = set()
        for _ in range(self.array_length()):
            topic_id = self.uuid()
            result.update((topic_id, self.int32()) for _ in range(self.array_length()))
            self.tagged_fields()
        return frozenset(result)

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


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | ConsumerKey | None:
    """The key, or None for a record type this coordinator does not keep
    (share and streams groups', the retired partition metadata: skipped, as an
    older Kafka would)."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    elif version in _GROUP_ONLY_KEYS:
        key = ConsumerKey(version, r.string())
    elif version in _MEMBER_KEYS:
        key = ConsumerKey(version, r.string(), r.string())
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


def decode_consumer_value(record_type: int, data: bytes) -> ConsumerValue:
    """The value of a KIP-848 record of ``record_type`` (version 0; unknown tags skipped,
    MetadataHash read)."""
    r = _Reader(data, f"consumer group record type {record_type}", flexible=True)
    if r.int16() != 0:
        raise CorruptGroupRecord(f"{r.what}: unknown version")
    if record_type == CONSUMER_GROUP_METADATA:
        epoch = r.int32()
        metadata_hash = r.tagged_fields().get(0)
        value: ConsumerValue = ConsumerGroupMetadataValue(
            epoch, _I64.unpack(metadata_hash)[0] if metadata_hash is not None and len(metadata_hash) == 8 else 0)
    elif record_type == CONSUMER_GROUP_MEMBER_METADATA:
        instance_id, rack_id = r.string(nullable=True), r.string(nullable=True)
        client_id, client_host = r.string(), r.string()
        topics = tuple(r.string() for _ in range(r.array_length()))
        value = ConsumerMemberMetadataValue(instance_id, rack_id, client_id, client_host, topics,
                                            r.string(nullable=True), r.int32(), r.string(nullable=True))
        r.tagged_fields()
    elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        value = TargetAssignmentMetadataValue(r.int32())
        r.tagged_fields()
    elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(r.partitions())
        r.tagged_fields()
    elif record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        value = CurrentMemberAssignmentValue(r.int32(), r.int32(), r.int8(), r.partitions(), r.partitions())
        r.tagged_fields()
    else:
        raise CorruptGroupRecord(f"record type {record_type} is not a consumer group's")
    r.done()
    return value


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
