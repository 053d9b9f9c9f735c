"""protocol.codec._check_lengths: every declared array count and length must fit in
the request, checked before kio's native reader allocates anything."""

import struct
import uuid

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


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _heartbeat(version: int, **extra) -> bytes:
    return _frame(ApiKey.BROKER_HEARTBEAT, version, {"broker_id": 1, "broker_epoch": 3, "current_metadata_offset": 9,
                                                     "want_fence": False, "want_shut_down": False, **extra})


def test_unknown_tagged_fields_are_skipped_as_kafka_skips_them():
    """KIP-482: a reader ignores tags it does not know (kio's refuses them): here at the
    top level of a heartbeat, and inside a Metadata request's topic."""
    frame = _heartbeat(2)
    assert frame.endswith(b"\x00")                    # the body's empty tagged-field section
    frame = frame[:-1] + bytes([2, 77, 2, 0xAB, 0xCD, 78, 0])
    header, offset = parse_request_header(frame)
    request = decode_request(header, frame, offset)
    assert (request.broker_id, request.current_metadata_offset, request.replica_log_ends) == (1, 9, None)
    metadata = _frame(ApiKey.METADATA, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": "abc"}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
    at = metadata.index(b"abc") + 3                   # the topic's own tagged-field section
    metadata = metadata[:at] + bytes([1, 9, 1, 0x55]) + metadata[at + 1:]
    header, offset = parse_request_header(metadata)
    assert [t.name for t in decode_request(header, metadata, offset).topics] == ["abc"]


def test_the_replica_log_ends_tag_round_trips_and_is_walked_before_kio_reads_it():
    topic_id = uuid.uuid4()
    frame = _heartbeat(2, replica_log_ends=[{"topic_id": topic_id, "partition_index": 4, "last_epoch": 7,
                                             "log_end_offset": 1234}])
    header, offset = parse_request_header(frame)
    (end,) = decode_request(header, frame, offset).replica_log_ends
    assert (end.topic_id, end.partition_index, end.last_epoch, end.log_end_offset) == (topic_id, 4, 7, 1234)
    content = _uvarint(1 << 28) + b"\x00" * 30        # 2^28 - 1 structs declared in 31 bytes
    frame = _heartbeat(1)[:-1] + bytes([1]) + _uvarint(10_000) + _uvarint(len(content)) + content
    header, offset = parse_request_header(frame)
    with pytest.raises(ProtocolError, match="array declares"):
        decode_request(header, frame, offset)


def test_a_response_with_a_tag_its_version_does_not_declare_is_read_as_kafkas_client_reads_it():
    """A newer Kafka may add tagged fields to a version tidelog's own clients speak."""
    from tidelog.protocol.codec import RequestHeader, decode_response, encode_response
    header = RequestHeader(ApiKey.FIND_COORDINATOR, 4, 9, "c")
    frame = encode_response(header, {"throttle_time": 0, "coordinators": [
        {"key": "g", "node_id": 2, "host": "h", "port": 9092, "error_code": 0, "error_message": None}]})[4:]
    assert frame.endswith(b"\x00")
    frame = frame[:-1] + bytes([1, 42, 3, 1, 2, 3])   # one unknown tag in the body
    correlation_id, response = decode_response(ApiKey.FIND_COORDINATOR, 4, frame)
    assert correlation_id == 9 and [(c.key, int(c.node_id)) for c in response.coordinators] == [("g", 2)]


def test_a_heartbeat_tells_no_log_end_reports_from_none_yet():
    """tidelog's tagged ``replica_log_ends``: absent from a broker that does not report
    (None), an empty list from one that reports and has nothing to say yet (the
    controller then waits for its reports, ``partition_change.py``)."""
    for sent, received in ((None, None), ([], ())):
        frame = _heartbeat(2, **({} if sent is None else {"replica_log_ends": sent}))
        header, offset = parse_request_header(frame)
        assert decode_request(header, frame, offset).replica_log_ends == received
