"""Metadata records: round trips, every way bad bytes are refused, batch framing."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.core.errors import CorruptRecordError
from tidelog.metadata.records import (
    ClientQuotaEntityData,
    ClientQuotaRecord,
    RECORD_TYPES,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    InvalidMetadataRecordError,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode,
    encode,
    format_record,
    iter_batch_records,
    records_to_batch,
)

int8 = st.integers(-(1 << 7), (1 << 7) - 1)
int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
uuids = st.uuids()
text = st.text(max_size=20)
int32_lists = st.lists(int32, max_size=6).map(tuple)
uuid_lists = st.lists(uuids, max_size=4).map(tuple)

endpoints = st.builds(Endpoint, text, text, st.integers(0, 65535), int16)
features = st.builds(BrokerFeature, text, int16, int16)

RECORDS = st.one_of(
    st.builds(RegisterBrokerRecord, int32, uuids, int64, st.lists(endpoints, max_size=3).map(tuple),
              st.lists(features, max_size=3).map(tuple), st.none() | text, st.booleans(),
              st.booleans(), uuid_lists),
    st.builds(UnregisterBrokerRecord, int32, int64),
    st.builds(TopicRecord, text, uuids),
    st.builds(PartitionRecord, uuids, int32, int32_lists, int32_lists, int32, int32, int32, int8,
              uuid_lists),
    st.builds(ConfigRecord, int8, text, text, st.none() | text),
    st.builds(PartitionChangeRecord, uuids, int32, st.none() | int32_lists, int32,
              st.none() | int32_lists, int8, st.none() | uuid_lists),
    st.builds(FenceBrokerRecord, int32, int64),
    st.builds(UnfenceBrokerRecord, int32, int64),
    st.builds(RemoveTopicRecord, uuids),
    st.builds(FeatureLevelRecord, text, int16),
    st.builds(ProducerIdsRecord, int32, int64, int64),
    st.builds(BrokerRegistrationChangeRecord, int32, int64, st.none() | st.booleans(),
              st.none() | st.just(True), st.none() | uuid_lists),
    st.builds(ClientQuotaRecord, st.lists(st.builds(ClientQuotaEntityData, text, st.none() | text),
                                          max_size=3).map(tuple),
              text, st.floats(allow_nan=False), st.booleans()),
)


@given(RECORDS)
def test_decode_of_encode_is_identity(record):
    assert decode(encode(record)) == record


@given(st.lists(RECORDS, min_size=1, max_size=8), st.integers(0, 1 << 40))
@settings(max_examples=50)
def test_records_round_trip_through_one_crc_checked_batch(records, base_offset):
    batch = records_to_batch(records, base_offset=base_offset)
    decoded = list(iter_batch_records(batch))
    assert decoded == [(base_offset + i, r) for i, r in enumerate(records)]


def test_log_directory_fields_are_version_1_and_version_0_frames_still_read():
    """KIP-858's fields (a registration's log_dirs, a partition's directories) came
    with version 1 of their records: a record that leaves them at their default is
    written at version 0, byte for byte as before, and a version-0 frame reads back
    with the default."""
    directory = uuid.UUID(int=1 << 100)
    plain = PartitionRecord(uuid.UUID(int=1), 0, (1, 2), (1, 2), 1)
    placed = PartitionRecord(uuid.UUID(int=1), 0, (1, 2), (1, 2), 1, directories=(directory, directory))
    assert encode(plain)[:3] == bytes([1, PartitionRecord.API_KEY, 0])
    assert encode(placed)[:3] == bytes([1, PartitionRecord.API_KEY, 1])
    assert encode(placed).startswith(encode(plain)[3:], 3)
    assert decode(encode(plain)) == plain and decode(encode(placed)) == placed
    change = BrokerRegistrationChangeRecord(1, 5, log_dirs=())
    assert encode(change)[2] == 1 and decode(encode(change)) == change
    assert encode(BrokerRegistrationChangeRecord(1, 5, fenced=True))[2] == 0


def test_every_record_type_has_kafkas_api_key():
    assert {cls.__name__: key for key, cls in RECORD_TYPES.items()} == {
        "RegisterBrokerRecord": 0, "UnregisterBrokerRecord": 1, "TopicRecord": 2,
        "PartitionRecord": 3, "ConfigRecord": 4, "PartitionChangeRecord": 5,
        "FenceBrokerRecord": 7, "UnfenceBrokerRecord": 8, "RemoveTopicRecord": 9,
        "FeatureLevelRecord": 12, "ProducerIdsRecord": 15, "BrokerRegistrationChangeRecord": 17,
        "UserScramCredentialRecord": 11, "RemoveUserScramCredentialRecord": 22,
        "AccessControlEntryRecord": 6, "RemoveAccessControlEntryRecord": 20, "ClientQuotaRecord": 14}


SAMPLE = RegisterBrokerRecord(3, uuid.UUID(int=7), 42, (Endpoint("PLAINTEXT", "h", 9092),),
                              (BrokerFeature("metadata.version", 1, 5),), "rack-a")


def test_every_truncation_is_refused():
    frame = encode(SAMPLE)
    for end in range(len(frame)):
        with pytest.raises(InvalidMetadataRecordError):
            decode(frame[:end])


def test_trailing_bytes_are_refused():
    with pytest.raises(InvalidMetadataRecordError, match="after its last field"):
        decode(encode(SAMPLE) + b"\x00")


@pytest.mark.parametrize("frame, message", [
    (b"\x02\x00\x00", "frame version 2"),
    (b"\x01\x63\x00", "api key 99 is unknown"),
    (b"\x01\x07\x05", "version 5 is newer"),
    (b"", "truncated"),
    (b"\x01\x07\x00" + b"\xff" * 11, "longer than 10 bytes"),
])
def test_bad_frames_are_refused_with_a_clear_error(frame, message):
    with pytest.raises(InvalidMetadataRecordError, match=message):
        decode(frame)


def test_bad_field_values_are_refused():
    fence = bytearray(encode(FenceBrokerRecord(1, 1)))
    fence[3] = 0x80 | 0x7F   # broker_id varint now runs into the epoch and beyond int32
    with pytest.raises(InvalidMetadataRecordError):
        decode(bytes(fence) + b"\x7f\x7f")
    register = bytearray(encode(RegisterBrokerRecord(1, uuid.UUID(int=1), 1)))
    register[-2] = 2   # the fenced bool
    with pytest.raises(InvalidMetadataRecordError, match="bool"):
        decode(bytes(register))
    topic = encode(TopicRecord("ab", uuid.UUID(int=1)))
    with pytest.raises(InvalidMetadataRecordError, match="UTF-8"):
        decode(topic[:3] + b"\x03\xff\xfe" + topic[6:])
    change = bytearray(encode(BrokerRegistrationChangeRecord(1, 1, fenced=None,
                                                             in_controlled_shutdown=None)))
    change[-1] = 1   # in_controlled_shutdown = -1 (zig-zag 1) is not allowed
    with pytest.raises(InvalidMetadataRecordError, match="change flag"):
        decode(bytes(change))


def test_a_list_longer_than_the_bytes_left_is_refused_before_allocating():
    frame = encode(PartitionRecord(uuid.UUID(int=1), 0, (1,), (1,), 1))
    bad = frame[:20] + b"\xff\xff\xff\x0f" + frame[21:]
    with pytest.raises(InvalidMetadataRecordError):
        decode(bad)


def test_encoding_a_field_of_the_wrong_type_or_range_is_a_programming_error():
    with pytest.raises(ValueError, match="broker_id"):
        encode(FenceBrokerRecord(1 << 40, 1))
    with pytest.raises(ValueError, match="isr"):
        encode(PartitionChangeRecord(uuid.UUID(int=1), 0, isr=[1, 2]))
    with pytest.raises(ValueError, match="not a metadata record"):
        encode(Endpoint("a", "b", 1))


def test_a_corrupted_batch_fails_its_crc():
    batch = bytearray(records_to_batch([SAMPLE, FenceBrokerRecord(3, 42)], base_offset=5))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_batch_records(bytes(batch)))


def test_a_partial_batch_is_refused():
    batch = records_to_batch([SAMPLE], base_offset=0)
    with pytest.raises(CorruptRecordError):
        list(iter_batch_records(batch + batch[:30]))


def test_format_record_shows_names_and_leaves_out_no_change_fields():
    topic_id = uuid.UUID(int=9)
    assert format_record(PartitionChangeRecord(topic_id, 2, isr=(1, 2)), {topic_id: "foo"}) \
        == "PartitionChange topic=foo partition_id=2 isr=[1,2]"
    assert format_record(ConfigRecord(2, "t", "retention.ms", None)) \
        == "Config resource_type=2 resource_name=t name=retention.ms value=null"
