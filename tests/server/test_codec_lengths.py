"""protocol.codec._check_lengths: every declared array count and length must fit in
the request, checked before kio's native reader allocates anything."""

import struct

import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ProtocolError, decode_request, encode_request, parse_request_header
from tidelog.records.batch import build_batch


def _frame(api_key, version, body):
    return encode_request(api_key, version, 7, "c", body)[4:]


@pytest.mark.parametrize("version", [4, 12])
def test_valid_requests_pass_and_decode(version):
    body = {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "t", "partitions": [{"partition": i, "fetch_offset": 5, "partition_max_bytes": 100,
                                                      "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                                      "log_start_offset": -1} for i in range(3)]}]}
    frame = _frame(ApiKey.FETCH, version, body)
    header, offset = parse_request_header(frame)
    request = decode_request(header, frame, offset)
    assert [int(p.partition) for p in request.topics[0].partitions] == [0, 1, 2]


def test_huge_counts_and_lengths_are_protocol_errors():
    metadata = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"x" + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8
    header, offset = parse_request_header(metadata)
    with pytest.raises(ProtocolError, match="array declares"):
        decode_request(header, metadata, offset)
    produce = bytearray(_frame(ApiKey.PRODUCE, 3, {"acks": 1, "timeout": 100, "transactional_id": None,
                                                   "topic_data": [{"name": "t", "partition_data": [
                                                       {"index": 0, "records": build_batch([b"v"])}]}]}))
    header, offset = parse_request_header(bytes(produce))
    struct.pack_into(">i", produce, len(produce) - len(build_batch([b"v"])) - 4, 0x7FFFFFF0)   # records length
    with pytest.raises(ProtocolError, match="declares"):
        decode_request(header, bytes(produce), offset)


def test_every_request_schema_has_a_layout():
    from tidelog.protocol.codec import _layout, _request_class, kio_versions
    count = 0
    for key in ApiKey:
        versions = kio_versions(key)
        for version in range(versions[0], versions[1] + 1) if versions else ():
            _layout(_request_class(key, version))
            count += 1
    assert count > 250


def test_every_request_schema_with_default_fields_passes_the_walk():
    """Each (API, version) kio encodes — with its nested structs (Fetch v15's
    ReplicaState, FetchSnapshot's SnapshotId) and tagged fields — decodes again: the
    length walk follows the same layout as the encoder."""
    from tidelog.protocol.codec import kio_versions
    failures = []
    for key in ApiKey:
        versions = kio_versions(key)
        for version in range(versions[0], versions[1] + 1) if versions else ():
            frame = _frame(key, version, {})
            header, offset = parse_request_header(frame)
            try:
                decode_request(header, frame, offset)
            except ProtocolError as e:
                failures.append(f"{key.name} v{version}: {e}")
    assert not failures, failures


def test_a_nested_struct_inside_an_array_passes_the_walk():
    body = {"cluster_id": "c", "replica_id": 3, "max_bytes": 100, "topics": [{"name": "__cluster_metadata",
            "partitions": [{"partition": 0, "current_leader_epoch": -1, "snapshot_id": {"end_offset": 70, "epoch": 1},
                            "position": 0}]}]}
    frame = _frame(ApiKey.FETCH_SNAPSHOT, 0, body)
    header, offset = parse_request_header(frame)
    request = decode_request(header, frame, offset)
    assert int(request.topics[0].partitions[0].snapshot_id.end_offset) == 70


def test_a_nullable_struct_present_passes_the_walk():
    body = {"topics": [{"name": "t"}], "response_partition_limit": 10,
            "cursor": {"topic_name": "t", "partition_index": 3}}
    frame = _frame(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)
    header, offset = parse_request_header(frame)
    assert int(decode_request(header, frame, offset).cursor.partition_index) == 3
