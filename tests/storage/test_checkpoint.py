"""Kafka's checkpoint text format: exact bytes, strict parsing, atomic files."""

from __future__ import annotations

import os

import pytest

from tidelog.core.ids import TopicPartition
from tidelog.storage import checkpoint
from tidelog.storage.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    format_epochs,
    format_offsets,
    parse_epochs,
    parse_offsets,
)
from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.errors import CheckpointFormatError

EXAMPLE = b"0\n3\norders 0 7143\norders 1 5594\nclicks 0 55\n"


def test_example_round_trips_byte_for_byte():
    entries = parse_offsets(EXAMPLE, "replication-offset-checkpoint")
    assert entries == {TopicPartition("orders", 0): 7143, TopicPartition("orders", 1): 5594,
                       TopicPartition("clicks", 0): 55}
    assert list(entries) == [("orders", 0), ("orders", 1), ("clicks", 0)]  # order kept
    assert format_offsets(entries) == EXAMPLE


def test_empty_checkpoints():
    assert format_offsets({}) == b"0\n0\n"
    assert parse_offsets(b"0\n0\n", "f") == {}
    assert format_epochs([]) == b"0\n0\n"


def test_topics_with_dashes_dots_and_underscores():
    entries = {TopicPartition("my-topic.v2_x", 12): 0, TopicPartition("__consumer_offsets", 49): 3}
    assert parse_offsets(format_offsets(entries), "f") == entries


def test_leader_epoch_checkpoint_format():
    data = b"0\n2\n0 0\n3 120\n"
    assert parse_epochs(data, "leader-epoch-checkpoint") == [EpochEntry(0, 0), EpochEntry(3, 120)]
    assert format_epochs([(0, 0), (3, 120)]) == data


def test_a_missing_final_newline_is_accepted():
    assert parse_offsets(b"0\n1\nt 0 5", "f") == {TopicPartition("t", 0): 5}


@pytest.mark.parametrize("data, message", [
    (b"", "needs a version line and a count line"),
    (b"0\n", "needs a version line and a count line"),
    (b"1\n0\n", "line 1: unsupported version 1"),
    (b"x\n0\n", "line 1: version 'x' is not an integer"),
    (b"0\nthree\n", "line 2: entry count 'three' is not an integer"),
    (b"0\n2\nt 0 1\n", "line 2 declares 2 entries, the file has 1"),
    (b"0\n1\nt 0 1\nt 1 2\n", "line 2 declares 1 entries, the file has 2"),
    (b"0\n1\nt 0\n", "line 3 't 0': expected '<topic> <partition> <offset>'"),
    (b"0\n1\nt 0 1 2\n", "line 3 't 0 1 2': expected"),
    (b"0\n1\nt  0 1\n", "line 3"),
    (b"0\n1\nt x 1\n", "line 3 't x 1': partition 'x' is not an integer"),
    (b"0\n1\nt -1 1\n", "partition -1 is outside"),
    (b"0\n1\nt 0 +1\n", "offset '+1' is not an integer"),
    (b"0\n1\nt/x 0 1\n", "'t/x' is not a legal topic name"),
    (b"0\n2\nt 0 1\nt 0 2\n", "line 4 't 0 2': t-0 appears twice"),
    (b"0\n1\nt 0 1\n\n", "declares 1 entries, the file has 2"),
    (b"0\n1\nt\xff 0 1\n", "is not ASCII"),
    (b"0\n99999999\n", "entry count 99999999 is outside"),
    (b"0\r\n0\r\n", "not an integer"),
])
def test_malformed_offset_checkpoints_name_the_file_and_line(data, message):
    with pytest.raises(CheckpointFormatError) as info:
        parse_offsets(data, "/data/replication-offset-checkpoint")
    assert "/data/replication-offset-checkpoint" in str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize("data, message", [
    (b"0\n1\n0\n", "line 3 '0': expected '<epoch> <start_offset>'"),
    (b"0\n1\n-1 0\n", "epoch -1 is outside"),
    (b"0\n1\n1 -5\n", "start offset -5 is outside"),
])
def test_malformed_epoch_checkpoints(data, message):
    with pytest.raises(CheckpointFormatError, match=message):
        parse_epochs(data, "leader-epoch-checkpoint")


def test_files_are_written_atomically_and_survive_a_crash(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    file = OffsetCheckpointFile.in_dir(fs, str(tmp_path), checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT)
    assert file.read() == {}  # a missing file reads empty
    file.write({TopicPartition("orders", 0): 10})
    fs.crash()
    assert file.read() == {TopicPartition("orders", 0): 10}
    assert (tmp_path / "recovery-point-offset-checkpoint").read_bytes() == b"0\n1\norders 0 10\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_reading_a_file_bigger_than_the_limit_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINT_FILE_SIZE_MAX_BYTES", 8)
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(EXAMPLE)
    fs = CrashableFileSystem(str(tmp_path))
    with pytest.raises(CheckpointFormatError, match="more than the limit"):
        OffsetCheckpointFile(fs, str(path)).read()


def test_leader_epoch_checkpoint_file(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    file = LeaderEpochCheckpointFile(fs, os.path.join(str(tmp_path), "leader-epoch-checkpoint"))
    assert file.read() == []
    file.write([(1, 0), (4, 17)])
    assert file.read() == [(1, 0), (4, 17)]
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == b"0\n2\n1 0\n4 17\n"


@pytest.mark.parametrize("name", [checkpoint.REPLICATION_OFFSET_CHECKPOINT, checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT,
                                  checkpoint.LOG_START_OFFSET_CHECKPOINT, checkpoint.LEADER_EPOCH_CHECKPOINT])
def test_an_empty_checkpoint_file_reads_as_empty(tmp_path, name, caplog):
    """Kafka reads a 0-byte checkpoint as no entries: the write is a rename, but after a
    crash some file systems leave the renamed file with no data. It is a warning, not
    a malformed file (which takes the log directory offline)."""
    fs = CrashableFileSystem(str(tmp_path))
    path = tmp_path / name
    path.write_bytes(b"")
    if name == checkpoint.LEADER_EPOCH_CHECKPOINT:
        file = LeaderEpochCheckpointFile(fs, str(path))
        with caplog.at_level("WARNING", logger="tidelog.checkpoint"):
            assert file.read() == []
        file.write([(2, 7)])
        assert file.read() == [(2, 7)]
    else:
        file = OffsetCheckpointFile.in_dir(fs, str(tmp_path), name)
        with caplog.at_level("WARNING", logger="tidelog.checkpoint"):
            assert file.read() == {}
        file.write({TopicPartition("orders", 0): 3})
        assert file.read() == {TopicPartition("orders", 0): 3}
    assert any(name in r.getMessage() and "empty" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("data", [b"\n", b" ", b"0"])
def test_a_checkpoint_with_any_content_is_still_parsed_strictly(tmp_path, data):
    path = tmp_path / checkpoint.REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(data)
    with pytest.raises(CheckpointFormatError):
        OffsetCheckpointFile(CrashableFileSystem(str(tmp_path)), str(path)).read()
