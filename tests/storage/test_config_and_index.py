"""LogConfig from Kafka properties; the offset and time index formats and lookups."""

from __future__ import annotations

import os
import struct

import pytest

from tidelog.core.errors import InvalidConfigError
from tidelog.storage.config import LogConfig
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex

# -- LogConfig ---------------------------------------------------------------------------


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 604_800_000
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604_800_000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_type == "CreateTime"
    assert config.flush_messages == config.flush_ms == (1 << 63) - 1


def test_from_properties_reads_kafka_names_and_keeps_other_defaults():
    base = LogConfig(retention_bytes=5000)
    config = LogConfig.from_properties({"segment.bytes": "1048576", "retention.ms": -1,
                                        "message.timestamp.type": "LogAppendTime",
                                        "min.insync.replicas": "2"}, defaults=base)
    assert config.segment_bytes == 1048576
    assert config.retention_ms == -1
    assert config.uses_log_append_time
    assert config.retention_bytes == 5000
    assert LogConfig.from_properties(config.to_properties()) == config


@pytest.mark.parametrize("properties, key", [
    ({"segment.bytes": "10"}, "segment.bytes"),
    ({"segment.bytes": str(1 << 31)}, "segment.bytes"),
    ({"segment.ms": "0"}, "segment.ms"),
    ({"retention.ms": "-2"}, "retention.ms"),
    ({"index.interval.bytes": "lots"}, "index.interval.bytes"),
    ({"max.message.bytes": "1.5"}, "max.message.bytes"),
    ({"flush.messages": "0"}, "flush.messages"),
    ({"segment.index.bytes": str(64 << 20)}, "segment.index.bytes"),
    ({"message.timestamp.type": "WallTime"}, "message.timestamp.type"),
    ({"segment.byte": "100"}, "segment.byte"),
])
def test_bad_properties_raise_invalid_config_naming_the_key(properties, key):
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_properties(properties)
    assert str(info.value).startswith(key)


def test_direct_construction_is_validated_too():
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        LogConfig(segment_bytes=0)


# -- indexes -----------------------------------------------------------------------------


def offset_index(tmp_path, fs=None, max_bytes=1024, load=False) -> OffsetIndex:
    fs = fs or CrashableFileSystem(str(tmp_path))
    return OffsetIndex(fs, os.path.join(str(tmp_path), "00000000000000000100.index"), 100, max_bytes, load)


def test_offset_index_lookup_finds_the_largest_entry_at_or_below():
    index = offset_index_in_memory()
    for offset, position in [(110, 200), (120, 400), (130, 600)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 200)
    assert index.lookup(125) == (120, 400)
    assert index.lookup(10_000) == (130, 600)
    assert index.lookup_by_position(399) == (110, 200)
    assert index.lookup_by_position(199) is None


def offset_index_in_memory() -> OffsetIndex:
    return OffsetIndex(None, "unused", 100, 1024, load_from_file=False)


def test_offset_index_truncation():
    index = offset_index_in_memory()
    for offset, position in [(110, 200), (120, 400), (130, 600)]:
        index.append(offset, position)
    index.truncate_to(120)
    assert index.items() == [(110, 200)]
    index.append(115, 300)
    index.truncate_to_position(300)
    assert index.items() == [(110, 200)]


def test_offset_index_full_at_segment_index_bytes():
    index = OffsetIndex(None, "unused", 0, 20, load_from_file=False)  # room for 2 entries
    index.append(1, 10)
    assert not index.is_full
    index.append(2, 20)
    assert index.is_full


def test_offset_index_file_is_kafkas_format_and_loads_back(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    index = offset_index(tmp_path, fs)
    index.append(110, 200)
    index.append(120, 400)
    index.flush()
    data = (tmp_path / "00000000000000000100.index").read_bytes()
    assert data == struct.pack(">iiii", 10, 200, 20, 400)
    index.append(130, 600)
    index.flush()  # appends only the new entry
    loaded = offset_index(tmp_path, fs, load=True)
    loaded.ensure_loaded(log_size_bytes=1000)
    assert loaded.items() == [(110, 200), (120, 400), (130, 600)]
    loaded.truncate_to(120)
    loaded.flush_truncation()
    assert (tmp_path / "00000000000000000100.index").read_bytes() == struct.pack(">ii", 10, 200)


@pytest.mark.parametrize("data", [
    b"\x00" * 7,                                  # not whole entries
    struct.pack(">iiii", 20, 200, 10, 400),       # offsets go back
    struct.pack(">iiii", 10, 400, 20, 200),       # positions go back
    struct.pack(">ii", 10, 5000),                 # points past the log
])
def test_an_index_file_that_does_not_check_out_is_rejected(tmp_path, data):
    (tmp_path / "00000000000000000100.index").write_bytes(data)
    index = offset_index(tmp_path, load=True)
    with pytest.raises(IndexCorruptError):
        index.ensure_loaded(log_size_bytes=1000)
    assert index.entries == 0  # reset, ready for a rebuild


def test_time_index_keeps_increasing_timestamps_and_a_slot_for_the_roll(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    index = TimeIndex(fs, os.path.join(str(tmp_path), "00000000000000000100.timeindex"), 100, 36, False)
    assert index.last_entry == (-1, 100)
    index.maybe_append(1000, 105)
    index.maybe_append(1000, 107)   # same timestamp: ignored
    index.maybe_append(900, 108)    # older: ignored
    index.maybe_append(1100, 110)
    assert index.items() == [(1000, 105), (1100, 110)]
    assert index.is_full            # 3 slots, the last kept for the roll
    index.maybe_append(1200, 115)
    assert index.entries == 2
    index.maybe_append(1200, 115, skip_full_check=True)
    assert index.items()[-1] == (1200, 115)
    assert index.lookup(999) == (-1, 100)
    assert index.lookup(1150) == (1100, 110)
    index.flush()
    assert (tmp_path / "00000000000000000100.timeindex").read_bytes() == struct.pack(
        ">qiqiqi", 1000, 5, 1100, 10, 1200, 15)
    index.truncate_to(110)
    assert index.items() == [(1000, 105)]
