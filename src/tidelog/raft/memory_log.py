"""The quorum's metadata log in memory: ``FileMetadataLog``'s Raft interface without files.

Theory of operation. ``MemoryMetadataLog`` holds what ``metadata/file_log.py``
holds — ``__cluster_metadata-0`` as a sequence of real record batches — in a
Python list instead of segments, for the simulator (``tidelog.sim``) and tests.
The bytes are production's: a controller write is one batch built by
``records_to_batch`` with ``partitionLeaderEpoch`` = the Raft epoch, a new
leader's first entry is ``build_leader_change``'s control batch, and followers
(voters and brokers) copy those bytes unchanged. So a ``RaftReplica`` and a
``RaftMetadataLog`` run over it exactly as over the file, and a broker's copy
fetched from it decodes as a fetched file segment would.

The interface is ``FileMetadataLog``'s:

* the Raft log — ``end_offset``, ``last_epoch``, ``epoch_at``,
  ``end_offset_for_epoch`` (Kafka's ``endOffsetForEpoch``, from the epochs of
  the batches, as the leader-epoch cache would have them), ``append_as_leader``
  (one batch per payload), ``append_leader_change``, ``read_entries`` /
  ``append_entries`` (whole batches with their epochs), ``truncate_to`` (every
  batch holding an offset at or past the cut goes whole, as ``Log.truncate_to``);
* metadata readers — ``read(start, end_offset)`` decodes the metadata records,
  skipping LeaderChange control batches, up to ``end_offset`` or the high
  watermark; ``high_watermark`` / ``committed_offset`` are what the driver (or,
  for a broker's copy, ``append_fetched``) sets;
* voter sets (KIP-853) — ``append_voters``, ``last_voters``, ``voters_before``
  over a ``VotersIndex`` of the VotersRecord control batches (``control_records``);
* snapshots (KIP-630) — ``write_snapshot``, ``latest_snapshot``,
  ``snapshot_id``, ``read_snapshot``, ``install_snapshot`` and
  ``delete_before_snapshot``, the snapshot being the image's records as
  batches, named by (end offset, epoch of its last offset).

"Durable" here means: the object outlives the process that wrote it. The
simulator keeps one per controller (and per broker, for its copy) across
restarts, so everything appended survives a kill, as fsynced files do.
``truncations`` lists every offset the log was cut to, so a checker can tell
which part of the log it has already compared is still the same.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from tidelog.metadata.file_log import build_leader_change, snapshot_to_store
from tidelog.metadata.log import MetadataLogError, MetadataSnapshot
from tidelog.metadata.records import MetadataRecord, iter_batch_records, records_to_batch
from tidelog.raft.control_records import VotersIndex, build_voters_batch
from tidelog.raft.replica import Voter
from tidelog.records.batch import iter_batches, validate_batch



@dataclass(frozen=True)
class Batch:
    """One entry of the log: a whole record batch and where it sits."""

    base_offset: int
    next_offset: int
    epoch: int                 # partitionLeaderEpoch (the Raft epoch; 0 when it carries none)
    data: bytes
    is_control: bool


def _batches_of(data: bytes) -> list[Batch]:
    out = []
    for position, header in iter_batches(data):
        if position + header.size_bytes > len(data):
            raise MetadataLogError(f"a partial batch at offset {header.base_offset}")
        validate_batch(data, position)
        out.append(Batch(header.base_offset, header.next_offset, max(header.partition_leader_epoch, 0),
                         bytes(data[position:position + header.size_bytes]), header.is_control))
    return out


class MemoryMetadataLog:
    def __init__(self, clock_ms: Callable[[], int] = lambda: 0):
        self.clock_ms = clock_ms               # batch timestamps (wall clock of the writer)
        self._batches: list[Batch] = []
        self._bases: list[int] = []            # base offsets, for bisection
        self._start = 0                        # log start offset
        self.high_watermark = 0
        self._snapshots: dict[tuple[int, int], bytes] = {}
        self._snapshot_id: tuple[int, int] | None = None
        self.truncations: list[int] = []
        self._voters = VotersIndex()           # where each VotersRecord (KIP-853) sits

    # ------------------------------------------------------------ offsets

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def committed_offset(self) -> int:
        return min(self.high_watermark, self.end_offset) - 1

    def batches(self, start_offset: int = 0) -> list[Batch]:
        """The batches holding offsets from ``start_offset`` on (the first may start before it)."""
        index = max(0, bisect_right(self._bases, start_offset) - 1)
        while index < len(self._batches) and self._batches[index].next_offset <= start_offset:
            index += 1
        return self._batches[index:]

    def batch_at(self, offset: int) -> Batch | None:
        """The batch holding ``offset``, if the log has it."""
        index = bisect_right(self._bases, offset) - 1
        if index < 0 or self._batches[index].next_offset <= offset:
            return None
        return self._batches[index]

    # ------------------------------------------------------------ the Raft log

    @property
    def last_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        if self._snapshot_id is not None and self._snapshot_id[0] == self._start:
            return self._snapshot_id[1]          # an empty log after a snapshot
        return 0

    def epoch_at(self, offset: int) -> int:
        if self._snapshot_id is not None and offset < self._start <= self._snapshot_id[0]:
            return self._snapshot_id[1]
        batch = self.batch_at(offset)
        return 0 if batch is None else batch.epoch

    def _epoch_starts(self) -> list[tuple[int, int]]:
        """(epoch, start offset) where each epoch begins — the leader-epoch cache."""
        starts: list[tuple[int, int]] = []
        for batch in self._batches:
            if not starts or batch.epoch > starts[-1][0]:
                starts.append((batch.epoch, batch.base_offset))
        return starts

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch`` in the log, where it ends); (0, start of the
        first epoch) when there is none."""
        starts = self._epoch_starts()
        end_of_log = self.end_offset
        best, end = 0, starts[0][1] if starts else end_of_log
        if self._snapshot_id is not None and self._snapshot_id[1] <= epoch and \
                (not starts or starts[0][0] > self._snapshot_id[1]):
            best = self._snapshot_id[1]
        for i, (entry_epoch, _) in enumerate(starts):
            if entry_epoch > epoch:
                break
            best = entry_epoch
            end = starts[i + 1][1] if i + 1 < len(starts) else end_of_log
        return best, end

    def _append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise MetadataLogError(f"a batch at {batch.base_offset} does not continue the log "
                                   f"(end {self.end_offset})")
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        if batch.is_control:
            self._voters.note(batch.data)

    def append_as_leader(self, epoch: int, payloads: list[Sequence[MetadataRecord]]) -> None:
        """Each payload (one controller write's records) becomes one batch of ``epoch``."""
        for records in payloads:
            data = records_to_batch(records, base_offset=self.end_offset, leader_epoch=epoch,
                                    timestamp_ms=self.clock_ms())
            self._append(Batch(self.end_offset, self.end_offset + len(records), epoch, data, False))

    def append_leader_change(self, epoch: int, leader_id: int) -> None:
        """A new leader's first entry: a LeaderChange control batch."""
        data = build_leader_change(self.end_offset, epoch, leader_id, self.clock_ms())
        self._append(Batch(self.end_offset, self.end_offset + 1, epoch, data, True))

    def append_voters(self, epoch: int, voters: tuple[Voter, ...], timestamp_ms: int | None = None) -> None:
        """A leader's VotersRecord control batch (KIP-853); or, at ``timestamp_ms`` 0, the
        one every initial controller is formatted with."""
        data = build_voters_batch(self.end_offset, epoch, voters,
                                  self.clock_ms() if timestamp_ms is None else timestamp_ms)
        self._append(Batch(self.end_offset, self.end_offset + 1, epoch, data, True))

    def last_voters(self) -> tuple[int, tuple[Voter, ...]] | None:
        return self._voters.last()

    def voters_before(self, offset: int) -> tuple[Voter, ...] | None:
        return self._voters.before(offset)

    def read_entries(self, start_offset: int, max_entries: int) -> list[tuple[int, bytes]]:
        """Whole batches from ``start_offset`` (a batch boundary) on: (epoch, bytes)."""
        if start_offset >= self.end_offset or start_offset < self._start:
            return []
        return [(b.epoch, b.data) for b in self.batches(start_offset)[:max_entries]]

    def append_entries(self, start_offset: int, entries: list[tuple[int, bytes]]) -> None:
        """A follower appends the leader's batches, which continue its log."""
        if start_offset != self.end_offset:
            raise MetadataLogError(f"entries at {start_offset} do not continue the log "
                                   f"(end {self.end_offset})")
        for _, data in entries:
            for batch in _batches_of(data):
                self._append(batch)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= ``offset`` (whole)."""
        if offset < 0:
            raise MetadataLogError(f"cannot truncate to negative offset {offset}")
        self.truncations.append(offset)
        if offset < self._start:
            self._batches, self._bases = [], []
            self._start = offset
        else:
            keep = 0
            while keep < len(self._batches) and self._batches[keep].next_offset <= offset:
                keep += 1
            del self._batches[keep:]
            del self._bases[keep:]
        self._voters.truncate(self.end_offset)
        self.high_watermark = min(self.high_watermark, self.end_offset)

    # ------------------------------------------------------------ a broker's copy

    def append_fetched(self, records: bytes, leader_high_watermark: int) -> int:
        """A broker following the controller's committed log: append fetched batches
        (offsets already assigned) and commit up to the leader's high watermark.
        Returns the new log end offset."""
        for batch in _batches_of(records) if records else ():
            if batch.next_offset <= self.end_offset:
                continue                      # already here (a repeated answer)
            self._append(batch)
        self.high_watermark = max(self.high_watermark, min(leader_high_watermark, self.end_offset))
        return self.end_offset

    # ------------------------------------------------------------ metadata readers

    def read(self, start_offset: int, end_offset: int | None = None) -> Iterator[tuple[int, MetadataRecord]]:
        """Metadata records from ``start_offset`` up to the high watermark (or
        ``end_offset``, exclusive; whole batches, as the file log reads them);
        LeaderChange control batches hold none."""
        if start_offset < self._start:
            raise MetadataLogError(f"offset {start_offset} is below the metadata log start {self._start}")
        end = self.high_watermark if end_offset is None else min(end_offset, self.end_offset)
        for batch in self.batches(start_offset):
            if batch.next_offset > end:
                return                        # whole batches only, as a fetch up to ``end`` reads
            if batch.is_control:
                continue
            for offset, record in iter_batch_records(batch.data):
                if offset >= start_offset:
                    yield offset, record

    def read_bytes(self, start_offset: int, end_offset: int) -> bytes:
        """The whole batches from ``start_offset`` that end at or before ``end_offset``
        (what a Fetch answers up to the high watermark)."""
        return b"".join(b.data for b in self.batches(start_offset)
                        if b.base_offset >= start_offset and b.next_offset <= end_offset)

    # ------------------------------------------------------------ snapshots (KIP-630)

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        end_offset, epoch, data = snapshot_to_store(self, snapshot)
        # The voter set in force, as Kafka's checkpoints carry it.
        self._store_snapshot(end_offset, epoch, data + self._voters.snapshot_suffix(
            end_offset, epoch, len(snapshot.records)))

    def _store_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        self._snapshots[(end_offset, epoch)] = data
        if self._snapshot_id is None or end_offset >= self._snapshot_id[0]:
            self._snapshot_id = (end_offset, epoch)

    def snapshot_id(self) -> tuple[int, int] | None:
        """(end offset, epoch) of the latest snapshot, if any."""
        return self._snapshot_id

    def read_snapshot(self, snapshot_id: tuple[int, int]) -> bytes | None:
        return self._snapshots.get(tuple(snapshot_id))

    def latest_snapshot(self) -> MetadataSnapshot | None:
        if self._snapshot_id is None:
            return None
        data = self._snapshots[self._snapshot_id]
        return MetadataSnapshot(self._snapshot_id[0] - 1, tuple(r for _, r in iter_batch_records(data)))

    def install_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """Take the leader's snapshot: stored, then the log restarts empty at its end."""
        for _ in iter_batch_records(data):          # checks every batch's CRC and record
            pass
        self._store_snapshot(end_offset, epoch, data)
        self.truncations.append(0)
        self._batches, self._bases = [], []
        self._start = end_offset
        self._voters.restart_at_snapshot(end_offset, data)
        self.high_watermark = max(self.high_watermark, end_offset)
        self._drop_older_snapshots()

    def delete_before_snapshot(self) -> int:
        """Let the log start at the latest snapshot's end (whole batches below it go)."""
        if self._snapshot_id is None:
            return 0
        end = min(self._snapshot_id[0], self.high_watermark)
        dropped = 0
        while self._batches and self._batches[0].next_offset <= end:
            self._batches.pop(0)
            self._bases.pop(0)
            dropped += 1
        self._start = self._batches[0].base_offset if self._batches else max(self._start, end)
        self._drop_older_snapshots()
        return dropped

    def _drop_older_snapshots(self) -> None:
        for snapshot_id in list(self._snapshots):
            if snapshot_id != self._snapshot_id:
                del self._snapshots[snapshot_id]
