"""Kafka's checkpoint text files (docs/storage.md, "File formats").

Theory of operation. Two shapes of one format, both byte-for-byte Kafka's::

    0                     version
    <n>                   number of entries
    <entry>\\n * n         "topic partition value" | "epoch start_offset"

* offset checkpoints at the root of a log directory map ``TopicPartition`` to an
  offset: ``replication-offset-checkpoint`` (high watermarks),
  ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``;
* the per-partition ``leader-epoch-checkpoint`` lists ``(epoch, start_offset)``.

Writes are atomic (temp file, fsync, rename, fsync directory) through the file
layer, so a crash leaves the old file or the new one. Reads are strict: anything
that is not exactly the format raises ``CheckpointFormatError`` naming the file
and line; sizes are bounded by ``limits.CHECKPOINT_*`` before anything is
allocated. A missing file reads as empty (a new log directory has none), and so
does an empty (0-byte) one, as in Kafka: the rename is atomic, but after a crash
some file systems leave the renamed file with no data (its blocks were never
written back). Nothing in an empty file can be wrong, so it must not take the log
directory offline; every other malformed file still does.

A write that fails because the process (EMFILE) or the system (ENFILE) is out of
file descriptors is retried after each of ``CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS``:
a burst of connections can take the last descriptors for a moment, and that
alone must not take a log directory offline. Any other ``OSError`` propagates at
once, and so does the last retry's: the directory goes offline as before. The
core does not wait on a real clock: the runtime hands in its wait
(``set_retry_wait(time.sleep)``, a short blocking sleep); without one, as in
the simulator, the retries follow each other at once.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from typing import Callable, Iterable, Mapping, NamedTuple, TypeVar

from tidelog.core.ids import TopicPartition
from tidelog.core.limits import (
    CHECKPOINT_ENTRY_COUNT_MAX,
    CHECKPOINT_FILE_SIZE_MAX_BYTES,
    CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS,
)
from tidelog.storage.errors import CheckpointFormatError
from tidelog.storage.files import FileSystem, read_whole_file, write_file_atomically

CHECKPOINT_VERSION = 0
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

_INT = re.compile(r"-?[0-9]+")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1

T = TypeVar("T")

logger = logging.getLogger("tidelog.checkpoint")

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_retry_wait: Callable[[float], None] = lambda seconds: None


def set_retry_wait(wait: Callable[[float], None]) -> None:
    """How a write out of descriptors waits (seconds) before its next try."""
    global _retry_wait
    _retry_wait = wait


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


# -- text format --------------------------------------------------------------


def format_offsets(entries: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    for (topic, partition), value in entries.items():
        assert _TOPIC.fullmatch(topic), f"illegal topic name {topic!r}"
        lines.append(f"{topic} {partition} {value}")
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_offsets(data: bytes, path: str) -> dict[TopicPartition, int]:
    result: dict[TopicPartition, int] = {}

    def parse_line(fields: list[str], where: str) -> None:
        if len(fields) != 3:
            raise CheckpointFormatError(f"{where}: expected '<topic> <partition> <offset>'")
        topic = fields[0]
        if not _TOPIC.fullmatch(topic):
            raise CheckpointFormatError(f"{where}: {topic!r} is not a legal topic name")
        key = TopicPartition(topic, _int(fields[1], where, "partition", 0, _INT32_MAX))
        if key in result:
            raise CheckpointFormatError(f"{where}: {key} appears twice")
        result[key] = _int(fields[2], where, "offset", -1, _INT64_MAX)

    _parse(data, path, parse_line)
    return result


def format_epochs(entries: Iterable[tuple[int, int]]) -> bytes:
    entries = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {start_offset}" for epoch, start_offset in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_epochs(data: bytes, path: str) -> list[EpochEntry]:
    result: list[EpochEntry] = []

    def parse_line(fields: list[str], where: str) -> None:
        if len(fields) != 2:
            raise CheckpointFormatError(f"{where}: expected '<epoch> <start_offset>'")
        result.append(EpochEntry(_int(fields[0], where, "epoch", 0, _INT32_MAX),
                                 _int(fields[1], where, "start offset", 0, _INT64_MAX)))

    _parse(data, path, parse_line)
    return result


def _parse(data: bytes, path: str, parse_line: Callable[[list[str], str], None]) -> None:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise CheckpointFormatError(f"{path}: byte {e.start} is not ASCII") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if len(lines) < 2:
        raise CheckpointFormatError(
            f"{path}: needs a version line and a count line, has {len(lines)} lines")
    version = _int(lines[0], f"{path}: line 1", "version", 0, _INT32_MAX)
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(
            f"{path}: line 1: unsupported version {version}, expected {CHECKPOINT_VERSION}")
    count = _int(lines[1], f"{path}: line 2", "entry count", 0, CHECKPOINT_ENTRY_COUNT_MAX)
    if len(lines) - 2 != count:
        raise CheckpointFormatError(
            f"{path}: line 2 declares {count} entries, the file has {len(lines) - 2}")
    for number, line in enumerate(lines[2:], start=3):
        parse_line(line.split(" "), f"{path}: line {number} {line!r}")


def _int(text: str, where: str, what: str, low: int, high: int) -> int:
    if not _INT.fullmatch(text):
        raise CheckpointFormatError(f"{where}: {what} {text!r} is not an integer")
    value = int(text)
    if not low <= value <= high:
        raise CheckpointFormatError(f"{where}: {what} {value} is outside [{low}, {high}]")
    return value


# -- files ----------------------------------------------------------------------


class _CheckpointFile:
    def __init__(self, fs: FileSystem, path: str):
        self.fs = fs
        self.path = path

    def _read_bytes(self) -> bytes | None:
        if not self.fs.exists(self.path):
            return None
        try:
            data = read_whole_file(self.fs, self.path, CHECKPOINT_FILE_SIZE_MAX_BYTES)
        except ValueError as e:
            raise CheckpointFormatError(str(e)) from None
        if not data:
            logger.warning("%s is empty (0 bytes, as a crash can leave a renamed file); reading it as "
                           "no entries", self.path)
            return None
        return data

    def _write_bytes(self, data: bytes, durable: bool = True) -> None:
        for backoff_ms in (*CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS, None):
            try:
                write_file_atomically(self.fs, self.path, data, durable=durable)
                return
            except OSError as e:
                if e.errno not in _OUT_OF_DESCRIPTORS or backoff_ms is None:
                    raise
                logger.warning("writing %s: %s; retrying in %d ms", self.path, e, backoff_ms)
                _retry_wait(backoff_ms / 1000)


class OffsetCheckpointFile(_CheckpointFile):
    """One of the three ``{TopicPartition: offset}`` files at a log directory's root."""

    @classmethod
    def in_dir(cls, fs: FileSystem, log_dir: str, name: str) -> "OffsetCheckpointFile":
        return cls(fs, os.path.join(log_dir, name))

    def read(self) -> dict[TopicPartition, int]:
        data = self._read_bytes()
        return {} if data is None else parse_offsets(data, self.path)

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        self._write_bytes(format_offsets(entries))


class LeaderEpochCheckpointFile(_CheckpointFile):
    """A partition's ``leader-epoch-checkpoint``. ``defer(path)``, when set, says whether a
    write may skip its fsyncs (a new log: its first flush syncs the file, and a
    recovery rebuilds what a crash lost from the batches, ``LoadedLog.recovered_epochs``)."""

    defer: Callable[[str], bool] | None = None

    def read(self) -> list[EpochEntry]:
        data = self._read_bytes()
        return [] if data is None else parse_epochs(data, self.path)

    def write(self, entries: Iterable[tuple[int, int]]) -> None:
        durable = self.defer is None or not self.defer(self.path)
        self._write_bytes(format_epochs(entries), durable)
