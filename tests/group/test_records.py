"""__consumer_offsets records in Kafka's formats, and a group's partition."""

import struct
import uuid

import pytest

from tidelog.group.records import (
    ConsumerGroupMetadataValue,
    ConsumerKey,
    ConsumerMemberMetadataValue,
    CorruptGroupRecord,
    CurrentMemberAssignmentValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
    decode_consumer_value,
    encode_consumer_value,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)


def test_keys_and_values_round_trip():
    key = OffsetCommitKey("grp", "topic", 7)
    assert encode_key(key)[:2] == b"\x00\x01" and decode_key(encode_key(key)) == key
    assert decode_key(encode_key(GroupMetadataKey("grp"))) == GroupMetadataKey("grp")
    value = OffsetCommitValue(42, 3, "meta", 1_700_000_000_000)
    assert encode_value(value)[:2] == b"\x00\x03" and decode_offset_commit_value(encode_value(value)) == value
    group = GroupMetadataValue("consumer", 5, "range", "m1", 123, (
        MemberMetadata("m1", "static-1", "client", "/10.0.0.1", 30_000, 10_000, b"sub", b"assign"),
        MemberMetadata("m2", None, "client", "/10.0.0.2", 30_000, 10_000, b"", b"")))
    assert decode_group_metadata_value(encode_value(group)) == group


def test_older_and_flexible_versions_decode():
    v1 = struct.pack(">hqh", 1, 10, 2) + b"md" + struct.pack(">qq", 5, 99)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(10, -1, "md", 5, 99)
    # v4: flexible — compact string (length + 1) and an empty tagged-field section.
    v4 = struct.pack(">hqi", 4, 10, 7) + bytes([3]) + b"md" + struct.pack(">q", 5) + b"\x00"
    assert decode_offset_commit_value(v4) == OffsetCommitValue(10, 7, "md", 5)
    # the retired ConsumerGroupPartitionMetadata (4) and share groups' records (9+): skipped
    assert decode_key(struct.pack(">h", 4) + b"whatever") is None
    assert decode_key(struct.pack(">h", 10) + b"whatever") is None


@pytest.mark.parametrize("data", [b"", b"\x00\x03\x00", struct.pack(">hqh", 3, 1, 50) + b"short",
                                  struct.pack(">h", 9) + b"\x00" * 20])
def test_malformed_values_are_refused_with_a_reason(data):
    with pytest.raises(CorruptGroupRecord):
        decode_offset_commit_value(data)


def test_java_string_hash_and_the_groups_partition():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("é€") == 233 * 31 + 0x20AC                 # UTF-16 code units
    assert java_string_hash("polygenelubricants") == -(1 << 31)        # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0                # Kafka's Utils.abs(MIN_VALUE) = 0
    assert partition_for("hello", 50) == 99162322 % 50
    negative = next(g for g in (f"consumer-group-{i}" for i in range(1000)) if java_string_hash(g) < 0)
    assert partition_for(negative, 50) == abs(java_string_hash(negative)) % 50


T1, T2 = uuid.UUID(int=1), uuid.UUID("a1b2c3d4-0000-4000-8000-000000000002")


@pytest.mark.parametrize("record_type,value", [
    (3, ConsumerGroupMetadataValue(7)),
    (3, ConsumerGroupMetadataValue(7, -123456789)),
    (5, ConsumerMemberMetadataValue("i-1", None, "client", "/10.0.0.1", ("a", "b"), None, 300_000, "uniform")),
    (5, ConsumerMemberMetadataValue(None, "rack", "c", "/h", (), "t.*", -1, None)),
    (6, TargetAssignmentMetadataValue(12)),
    (7, TargetAssignmentMemberValue(frozenset({(T1, 0), (T1, 3), (T2, 1)}))),
    (7, TargetAssignmentMemberValue(frozenset())),
    (8, CurrentMemberAssignmentValue(5, 4, 1, frozenset({(T2, 0)}), frozenset({(T1, 2), (T1, 9)}))),
])
def test_consumer_group_records_round_trip(record_type, value):
    data = encode_consumer_value(value)
    assert data[:2] == b"\x00\x00"                                  # version 0
    assert decode_consumer_value(record_type, data) == value
    member = "m-1" if record_type in (5, 7, 8) else None
    key = ConsumerKey(record_type, "grp", member)
    assert encode_key(key)[:2] == struct.pack(">h", record_type) and decode_key(encode_key(key)) == key


def test_consumer_group_records_in_kafkas_layout():
    """Byte for byte as Kafka's generated serde writes them (flexible version 0)."""
    assert encode_key(ConsumerKey(5, "g", "m")) == b"\x00\x05\x00\x01g\x00\x01m"
    assert encode_consumer_value(ConsumerGroupMetadataValue(2, 1)) == (
        b"\x00\x00" + struct.pack(">i", 2) + b"\x01\x00\x08" + struct.pack(">q", 1))   # tag 0, 8 bytes
    assert encode_consumer_value(CurrentMemberAssignmentValue(3, 2, 0, frozenset({(T1, 4)}), frozenset())) == (
        b"\x00\x00" + struct.pack(">ii", 3, 2) + b"\x00"                      # epochs, state
        + b"\x02" + T1.bytes + b"\x02" + struct.pack(">i", 4) + b"\x00"        # one topic, one partition
        + b"\x01" + b"\x00")                                                    # none pending; no tags
    member = encode_consumer_value(ConsumerMemberMetadataValue(None, None, "c", "h", ("t",), None, 5, None))
    assert member == b"\x00\x00" + b"\x00\x00\x02c\x02h\x02\x02t\x00" + struct.pack(">i", 5) + b"\x00\x00"


@pytest.mark.parametrize("record_type,data", [
    (3, b"\x00\x01" + b"\x00" * 5),                                        # unknown version
    (8, b"\x00\x00\x00\x00\x00\x01"),                                     # truncated
    (7, b"\x00\x00\xff\xff\xff\xff\x0f"),                                  # an absurd array length
    (6, b"\x00\x00\x00\x00\x00\x01\x00\x00"),                             # trailing bytes
])
def test_malformed_consumer_group_records_are_refused(record_type, data):
    with pytest.raises(CorruptGroupRecord):
        decode_consumer_value(record_type, data)
