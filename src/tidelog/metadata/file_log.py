"""The metadata log on disk: ``__cluster_metadata-0`` as an ordinary tidelog log.

Theory of operation. Implements the ``MetadataLog`` seam (``log.py``) over a
``tidelog.storage.Log`` in ``<log dir>/__cluster_metadata-0``. With a single-node
quorum a write is committed once it is fsynced: ``append`` writes one batch,
flushes it, and moves the high watermark to the log end; ``committed_offset`` is
``high_watermark - 1``. Recovery on open keeps every whole batch that reached the
disk; since each was fsynced before its write was acknowledged, all of them are
committed. Snapshots are files ``<end offset:020d>-<epoch:010d>.checkpoint`` in
the same directory holding the image's records as batches, written atomically.

The same file is the controller quorum's Raft log (``tidelog.raft``): each entry is
one record batch whose ``partitionLeaderEpoch`` is the Raft epoch that wrote it, so
the storage log's leader-epoch cache answers the Raft epoch questions; a new leader's
first entry is a LeaderChange control batch (Kafka's ``LeaderChangeMessage``), which
metadata readers skip, and so are a dynamic quorum's VotersRecord batches (KIP-853,
``raft/control_records.py``), indexed at open and on every append. With a quorum, the high watermark is the quorum's (the Raft
driver sets it); batches past it may still be truncated away. ``quorum-state`` beside
the segments is the Raft vote and epoch (``QuorumStateFile``).
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Sequence

from tidelog.core.clock import Clock
from tidelog.metadata.log import METADATA_TOPIC, MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import MetadataRecord, iter_batch_records, records_to_batch
from tidelog.raft.control_records import VotersIndex, build_voters_batch
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches
from tidelog.storage.config import LogConfig
from tidelog.storage.files import FileSystem, RealFileSystem
from tidelog.storage.log import Log

SNAPSHOT_SUFFIX = ".checkpoint"
SEGMENT_BYTES_DEFAULT = 64 * 1024 * 1024      # metadata.log.segment.bytes
_READ_CHUNK_BYTES = 8 * 1024 * 1024
_SNAPSHOT_BATCH_RECORDS = 1000


class FileMetadataLog:
    def __init__(self, log_dir: str, clock: Clock, fs: FileSystem | None = None,
                 follower: bool = False, segment_bytes: int = SEGMENT_BYTES_DEFAULT):
        self.fs = fs or RealFileSystem()
        self.clock = clock
        self.directory = os.path.join(os.path.abspath(log_dir), f"{METADATA_TOPIC}-0")
        self.fs.mkdir(self.directory)
        self.log = Log.open(self.directory, LogConfig(segment_bytes=segment_bytes,
                                                      retention_ms=-1, retention_bytes=-1),
                            clock, self.fs, high_watermark=0)
        self._snapshot_id = self._find_snapshot_id()
        self._voters = self._index_voters()        # the quorum's voter sets (KIP-853)
        # metadata.log.max.record.bytes.between.snapshots counts from here.
        self.bytes_since_snapshot = self.log.size_bytes
        # A controller wrote (and fsynced) every record it still has, so all are
        # committed. A broker's copy commits only what the controller says is.
        if not follower:
            self.log.update_high_watermark(self.log.log_end_offset)

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def committed_offset(self) -> int:
        return self.log.high_watermark - 1

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, records: Sequence[MetadataRecord]) -> list[int]:
        base_offset = self.log.log_end_offset
        batch = records_to_batch(records, base_offset=base_offset, timestamp_ms=self.clock.now_ms())
        self.log.append_as_follower(batch)
        self.log.flush()
        self.log.update_high_watermark(self.log.log_end_offset)
        return list(range(base_offset, base_offset + len(records)))

    def append_fetched(self, records: bytes, leader_high_watermark: int) -> int:
        """A broker following the controller's log: append fetched batches (offsets
        already assigned) and commit up to the leader's high watermark. Returns the
        new log end offset."""
        if records:
            self.log.append_as_follower(records)
            self.log.flush()
            self._voters.note(records)
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
        return self.log.log_end_offset

    def read(self, start_offset: int, end_offset: int | None = None) -> Iterator[tuple[int, MetadataRecord]]:
        """Committed records from ``start_offset``, up to the high watermark (or
        ``end_offset``, exclusive, when given)."""
        if start_offset < self.log.log_start_offset:
            raise MetadataLogError(f"offset {start_offset} is below the metadata log start "
                                   f"{self.log.log_start_offset}")
        offset = start_offset
        end = self.log.high_watermark if end_offset is None else min(end_offset, self.log.log_end_offset)
        while offset < end:
            data = self.log.read(offset, _READ_CHUNK_BYTES, max_offset=end).records.read_bytes()
            if not data:
                return
            next_offset = offset
            for _, header in iter_batches(data):      # control batches hold no metadata records
                next_offset = header.last_offset + 1
            for record_offset, record in iter_batch_records(data):
                if record_offset >= offset:
                    yield record_offset, record
            offset = next_offset

    # ------------------------------------------------------------ snapshots (KIP-630)

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """``<end offset>-<epoch>.checkpoint``: the image's records as batches, written
        atomically; the epoch is that of the last offset it covers."""
        end_offset, epoch, data = snapshot_to_store(self, snapshot)
        # The voter set in force, as Kafka's checkpoints carry it.
        self._write_snapshot_file(end_offset, epoch, data + self._voters.snapshot_suffix(
            end_offset, epoch, len(snapshot.records)))
        self.bytes_since_snapshot = 0

    def _write_snapshot_file(self, end_offset: int, epoch: int, data: bytes) -> None:
        path = os.path.join(self.directory, f"{end_offset:020d}-{epoch:010d}{SNAPSHOT_SUFFIX}")
        write_atomically(self.fs, self.directory, path, data)
        if self._snapshot_id is None or end_offset >= self._snapshot_id[0]:
            self._snapshot_id = (end_offset, epoch)

    def _snapshot_names(self) -> list[str]:
        return sorted(n for n in self.fs.listdir(self.directory) if n.endswith(SNAPSHOT_SUFFIX))

    def _find_snapshot_id(self) -> tuple[int, int] | None:
        names = self._snapshot_names()
        if not names:
            return None
        end, _, epoch = names[-1][:-len(SNAPSHOT_SUFFIX)].partition("-")
        return int(end), int(epoch)

    def snapshot_id(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the latest snapshot, if any."""
        return self._snapshot_id

    def read_snapshot(self, snapshot_id: tuple[int, int]) -> bytes | None:
        """The bytes of the snapshot ``snapshot_id`` (None when it is not here)."""
        end, epoch = snapshot_id
        path = os.path.join(self.directory, f"{end:020d}-{epoch:010d}{SNAPSHOT_SUFFIX}")
        if not self.fs.exists(path):
            return None
        handle = self.fs.open(path, create=False)
        try:
            return handle.pread(handle.size(), 0)
        finally:
            handle.close()

    def latest_snapshot(self) -> MetadataSnapshot | None:
        if self._snapshot_id is None:
            return None
        data = self.read_snapshot(self._snapshot_id)
        return MetadataSnapshot(self._snapshot_id[0] - 1, tuple(r for _, r in iter_batch_records(data)))

    def install_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """A follower (or a broker) too far behind the leader's log start takes the
        leader's snapshot: stored, then the log restarts empty at its end offset."""
        for _ in iter_batch_records(data):          # checks every batch's CRC and record
            pass
        self._write_snapshot_file(end_offset, epoch, data)
        self.log.truncate_fully_and_start_at(end_offset)
        self._voters.restart_at_snapshot(end_offset, data)
        self.log.update_high_watermark(end_offset)
        self._drop_older_snapshots()
        self.bytes_since_snapshot = 0

    def delete_before_snapshot(self) -> int:
        """Let the log start at the latest snapshot's end and drop the segments wholly
        below it, and older snapshots (Kafka's KafkaMetadataLog cleaning)."""
        if self._snapshot_id is None:
            return 0
        end = min(self._snapshot_id[0], self.log.high_watermark)
        if end > self.log.log_start_offset:
            self.log.maybe_increment_log_start_offset(end)
        self._drop_older_snapshots()
        return self.log.delete_old_segments()

    def _drop_older_snapshots(self) -> None:
        for name in self._snapshot_names()[:-1]:
            self.fs.remove(os.path.join(self.directory, name))

    # ------------------------------------------------------------ the Raft log

    @property
    def last_epoch(self) -> int:
        epoch = self.log.latest_epoch
        if epoch is None and self._snapshot_id is not None and self._snapshot_id[0] == self.log.log_end_offset:
            return self._snapshot_id[1]          # an empty log after a snapshot
        return epoch or 0

    def epoch_at(self, offset: int) -> int:
        if self._snapshot_id is not None and offset < self.log.log_start_offset <= self._snapshot_id[0]:
            return self._snapshot_id[1]
        epoch = self.log.leader_epoch_cache.epoch_for_offset(offset)
        return 0 if epoch is None else epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch`` in the log, where it ends); (0, start of the
        first epoch) when there is none. Batches written before the quorum existed
        carry no epoch and count as epoch 0."""
        entries = self.log.leader_epoch_cache.entries
        end_of_log = self.log.log_end_offset
        best, end = 0, entries[0].start_offset if entries else end_of_log
        if self._snapshot_id is not None and self._snapshot_id[1] <= epoch and \
                (not entries or entries[0].epoch > self._snapshot_id[1]):
            best, end = self._snapshot_id[1], entries[0].start_offset if entries else end_of_log
        for i, entry in enumerate(entries):
            if entry.epoch > epoch:
                break
            best = entry.epoch
            end = entries[i + 1].start_offset if i + 1 < len(entries) else end_of_log
        return best, end

    def append_as_leader(self, epoch: int, payloads: list[Sequence[MetadataRecord]]) -> None:
        """Each payload (one controller write's records) becomes one batch of ``epoch``,
        fsynced before the leader counts it towards the high watermark."""
        for records in payloads:
            batch = records_to_batch(records, base_offset=self.log.log_end_offset, leader_epoch=epoch,
                                     timestamp_ms=self.clock.now_ms())
            self.log.append_as_follower(batch)
            self.bytes_since_snapshot += len(batch)
        self.log.flush()

    def append_voters(self, epoch: int, voters: tuple) -> None:
        """A leader's VotersRecord control batch (KIP-853), fsynced."""
        data = build_voters_batch(self.log.log_end_offset, epoch, voters, self.clock.now_ms())
        self.log.append_as_follower(data)
        self.log.flush()
        self._voters.note(data)

    def last_voters(self):
        """(offset, voters) of the latest VotersRecord, committed or not; None: none."""
        return self._voters.last()

    def voters_before(self, offset: int):
        return self._voters.before(offset)

    def _index_voters(self) -> VotersIndex:
        """Read once at open: the latest snapshot's set, then every VotersRecord batch."""
        index = VotersIndex()
        if self._snapshot_id is not None:
            index.restart_at_snapshot(self._snapshot_id[0], self.read_snapshot(self._snapshot_id) or b"")
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, _READ_CHUNK_BYTES).records.read_bytes()
            next_offset = offset
            for position, header in iter_batches(data):
                if position + header.size_bytes <= len(data):
                    next_offset = header.last_offset + 1
                    if header.is_control:
                        index.note(data[position:position + header.size_bytes])
            if next_offset == offset:
                break
            offset = next_offset
        index.entries.sort(key=lambda entry: entry[0])      # the snapshot's set may sit past older ones
        return index

    def append_leader_change(self, epoch: int, leader_id: int) -> None:
        """A new leader's first entry: a LeaderChange control batch."""
        self.log.append_as_follower(build_leader_change(self.log.log_end_offset, epoch, leader_id,
                                                        self.clock.now_ms()))
        self.log.flush()

    def read_entries(self, start_offset: int, max_entries: int) -> list[tuple[int, bytes]]:
        """Whole batches from ``start_offset`` (a batch boundary) to the log end: (epoch, bytes)."""
        if start_offset >= self.log.log_end_offset or start_offset < self.log.log_start_offset:
            return []
        data = self.log.read(start_offset, _READ_CHUNK_BYTES).records.read_bytes()
        out = []
        for position, header in iter_batches(data):
            if position + header.size_bytes > len(data) or len(out) >= max_entries:
                break
            out.append((max(header.partition_leader_epoch, 0), data[position:position + header.size_bytes]))
        return out

    def append_entries(self, start_offset: int, entries: list[tuple[int, bytes]]) -> None:
        """A follower appends the leader's batches, which continue its log."""
        if start_offset != self.log.log_end_offset:
            raise MetadataLogError(f"entries at {start_offset} do not continue the log "
                                   f"(end {self.log.log_end_offset})")
        if entries:
            data = b"".join(batch for _, batch in entries)
            self.log.append_as_follower(data)
            self.bytes_since_snapshot += len(data)
            self.log.flush()
            self._voters.note(data)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self._voters.truncate(self.log.log_end_offset)

    def close(self) -> None:
        self.log.flush()
        self.log.close()


def snapshot_to_store(log, snapshot: MetadataSnapshot) -> tuple[int, int, bytes]:
    """(end offset, epoch of its last offset, bytes) of a snapshot a Raft log (file or
    memory) is asked to keep; refused past the log's committed offset."""
    if snapshot.last_offset > log.committed_offset:
        raise MetadataLogError(f"snapshot at {snapshot.last_offset} is past the committed "
                               f"offset {log.committed_offset}")
    end_offset = snapshot.last_offset + 1
    return end_offset, log.epoch_at(snapshot.last_offset) if end_offset > 0 else 0, snapshot_bytes(snapshot)


def snapshot_bytes(snapshot: MetadataSnapshot) -> bytes:
    """A snapshot's records as record batches (a ``.checkpoint`` file's content)."""
    records, data = list(snapshot.records), bytearray()
    for start in range(0, len(records), _SNAPSHOT_BATCH_RECORDS):
        data += records_to_batch(records[start:start + _SNAPSHOT_BATCH_RECORDS], base_offset=start)
    return bytes(data)


def write_atomically(fs: FileSystem, directory: str, path: str, data: bytes) -> None:
    """``data`` at ``path`` whole or not at all: a synced temporary file, renamed."""
    temp = path + ".tmp"
    if fs.exists(temp):
        fs.remove(temp)
    handle = fs.open(temp)
    try:
        handle.append(data)
        handle.fsync()
    finally:
        handle.close()
    fs.rename(temp, path)
    fs.fsync_dir(directory)


# Kafka's ControlRecordType.LEADER_CHANGE and LeaderChangeMessage (version 0, flexible):
# Version int16, LeaderId int32, Voters and GrantingVoters as compact arrays, tagged fields.
CONTROL_LEADER_CHANGE = 2


def build_leader_change(base_offset: int, epoch: int, leader_id: int, timestamp_ms: int) -> bytes:
    key = (0).to_bytes(2, "big") + CONTROL_LEADER_CHANGE.to_bytes(2, "big")
    value = (0).to_bytes(2, "big") + leader_id.to_bytes(4, "big", signed=True) + bytes([1, 1, 0])
    return build_batch([SimpleRecord(value, key)], base_offset=base_offset, partition_leader_epoch=epoch,
                       timestamp_ms=timestamp_ms, is_control=True)


class QuorumStateFile:
    """``quorum-state``: the Raft epoch, vote and leader as JSON (Kafka's file and
    field names), written atomically before any message that depends on it is sent."""

    def __init__(self, directory: str, fs: FileSystem):
        self.fs, self.directory = fs, directory
        self.path = os.path.join(directory, "quorum-state")

    def read(self) -> dict | None:
        if not self.fs.exists(self.path):
            return None
        handle = self.fs.open(self.path, create=False)
        try:
            data = handle.pread(handle.size(), 0)
        finally:
            handle.close()
        try:
            return json.loads(data)
        except ValueError as e:
            raise MetadataLogError(f"{self.path} is not valid JSON: {e}") from None

    def write(self, epoch: int, voted_for: int, leader_id: int, voters: Sequence[int]) -> None:
        data = json.dumps({"clusterId": "", "leaderId": leader_id, "leaderEpoch": epoch, "votedId": voted_for,
                           "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in voters],
                           "data_version": 0}).encode()
        write_atomically(self.fs, self.directory, self.path, data)
