"""The metadata log seam (``metadata/log.py``) over the controller quorum.

Theory of operation. The ``QuorumController`` writes through a ``MetadataLog``
and publishes only what the log calls committed. ``RaftMetadataLog`` is that seam
over a ``RaftReplica`` whose entries live in the on-disk ``FileMetadataLog``:

* ``append(records)`` is the Raft leader's append of one batch (one controller
  write); on a replica that does not lead it raises ``NotLeaderError`` — the
  controller must not write then (it is not the active controller);
* ``committed_offset`` is the quorum's high watermark - 1; ``read`` stops there,
  so nothing a later leader could truncate is ever replayed into an image;
* ``after_append`` is the driver's hook (it moves the on-disk high watermark and
  wakes waiting fetches).

With a single voter the replica leads from its start and every append is
committed at once, as the single-node log was before the quorum existed.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.log import MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import MetadataRecord
from tidelog.raft.replica import RaftReplica


class NotLeaderError(MetadataLogError):
    """A write on a controller that is not the quorum's leader."""


class RaftMetadataLog:
    quorum = True       # takes writes only while its replica leads (QuorumController bootstrap)

    def __init__(self, replica: RaftReplica, file_log: FileMetadataLog,
                 after_append: Callable[[], None] = lambda: None):
        self.replica = replica
        self.file_log = file_log
        self.after_append = after_append

    @property
    def end_offset(self) -> int:
        return self.file_log.end_offset

    @property
    def committed_offset(self) -> int:
        return min(self.replica.high_watermark, self.file_log.end_offset) - 1

    @property
    def log_start_offset(self) -> int:
        return self.file_log.log_start_offset

    def append(self, records: Sequence[MetadataRecord]) -> list[int]:
        if not records:
            raise MetadataLogError("an append needs at least one record")
        first = self.replica.append([list(records)])
        if first is None:
            raise NotLeaderError(f"node {self.replica.node_id} is not the quorum leader "
                                 f"({self.replica.state}, epoch {self.replica.epoch})")
        self.after_append()
        return list(range(first, first + len(records)))

    def read(self, start_offset: int) -> Iterator[tuple[int, MetadataRecord]]:
        return self.file_log.read(start_offset, end_offset=self.committed_offset + 1)

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        if snapshot.last_offset > self.committed_offset:
            raise MetadataLogError(f"snapshot at {snapshot.last_offset} is past the committed "
                                   f"offset {self.committed_offset}")
        self.file_log.write_snapshot(snapshot)

    def latest_snapshot(self) -> MetadataSnapshot | None:
        return self.file_log.latest_snapshot()
