"""__consumer_offsets records in Kafka's formats, and a group's partition."""

import struct

import pytest

from tidelog.group.records import (
    CorruptGroupRecord,
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
    assert decode_key(struct.pack(">h", 3) + b"whatever") is None     # a KIP-848 record: skipped


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
