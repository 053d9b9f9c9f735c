"""The metadata log on disk: ``__cluster_metadata-0`` as an ordinary tidelog log.

Theory of operation. Implements the ``MetadataLog`` seam (``log.py``) over a
``tidelog.storage.Log`` in ``<log dir>/__cluster_metadata-0``. With a single-node
quorum a write is committed once it is fsynced: ``append`` writes one batch,
flushes it, and moves the high watermark to the log end; ``committed_offset`` is
``high_watermark - 1``. Recovery on open keeps every whole batch that reached the
disk; since each was fsynced before its write was acknowledged, all of them are
committed. Snapshots are files ``<end offset:020d>-<epoch:010d>.checkpoint`` in
the same directory holding the image's records as batches, written atomically.
"""

from __future__ import annotations

import os
from typing import Iterator, Sequence

from tidelog.core.clock import Clock
from tidelog.metadata.log import METADATA_TOPIC, MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import MetadataRecord, iter_batch_records, records_to_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.files import FileSystem, RealFileSystem
from tidelog.storage.log import Log

SNAPSHOT_SUFFIX = ".checkpoint"
_READ_CHUNK_BYTES = 8 * 1024 * 1024
_SNAPSHOT_BATCH_RECORDS = 1000


class FileMetadataLog:
    def __init__(self, log_dir: str, clock: Clock, fs: FileSystem | None = None,
                 follower: bool = False):
        self.fs = fs or RealFileSystem()
        self.clock = clock
        self.directory = os.path.join(os.path.abspath(log_dir), f"{METADATA_TOPIC}-0")
        self.fs.mkdir(self.directory)
        self.log = Log.open(self.directory, LogConfig(segment_bytes=64 * 1024 * 1024,
                                                      retention_ms=-1, retention_bytes=-1),
                            clock, self.fs, high_watermark=0)
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
        self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
        return self.log.log_end_offset

    def read(self, start_offset: int) -> Iterator[tuple[int, MetadataRecord]]:
        if start_offset < self.log.log_start_offset:
            raise MetadataLogError(f"offset {start_offset} is below the metadata log start "
                                   f"{self.log.log_start_offset}")
        offset = start_offset
        end = self.log.high_watermark
        while offset < end:
            data = self.log.read(offset, _READ_CHUNK_BYTES, max_offset=end).records.read_bytes()
            if not data:
                return
            for record_offset, record in iter_batch_records(data):
                if record_offset >= offset:
                    yield record_offset, record
                    next_offset = record_offset + 1
            offset = next_offset

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        if snapshot.last_offset > self.committed_offset:
            raise MetadataLogError(f"snapshot at {snapshot.last_offset} is past the committed "
                                   f"offset {self.committed_offset}")
        data = bytearray()
        records = list(snapshot.records)
        for start in range(0, len(records), _SNAPSHOT_BATCH_RECORDS):
            chunk = records[start:start + _SNAPSHOT_BATCH_RECORDS]
            data += records_to_batch(chunk, base_offset=start)
        name = f"{snapshot.last_offset + 1:020d}-{0:010d}{SNAPSHOT_SUFFIX}"
        path = os.path.join(self.directory, name)
        temp = path + ".tmp"
        if self.fs.exists(temp):
            self.fs.remove(temp)
        handle = self.fs.open(temp)
        try:
            handle.append(bytes(data))
            handle.fsync()
        finally:
            handle.close()
        self.fs.rename(temp, path)
        self.fs.fsync_dir(self.directory)

    def latest_snapshot(self) -> MetadataSnapshot | None:
        names = sorted(n for n in self.fs.listdir(self.directory) if n.endswith(SNAPSHOT_SUFFIX))
        if not names:
            return None
        name = names[-1]
        end_offset = int(name.split("-", 1)[0])
        handle = self.fs.open(os.path.join(self.directory, name), create=False)
        try:
            data = handle.pread(handle.size(), 0)
        finally:
            handle.close()
        return MetadataSnapshot(end_offset - 1, tuple(r for _, r in iter_batch_records(data)))

    def close(self) -> None:
        self.log.flush()
        self.log.close()
