"""The metadata log seam: where records are stored, and when they count.

Theory of operation. The controller never writes storage itself; it hands each
write's records to a ``MetadataLog`` and treats them as *committed* only once the
log's ``committed_offset`` has reached them. Today the only quorum is a single node,
so the in-memory log (and later the on-disk one) commits on append; a future Raft
quorum will implement this same protocol and advance
``committed_offset`` as a majority acknowledges (KRaft's high watermark).

Offsets are Kafka offsets: each record gets the next one, consecutively from 0.
``end_offset`` is the next offset to be assigned (like a log end offset);
``committed_offset`` is the offset of the last committed record (``-1`` when none),
i.e. Kafka's ``lastCommittedOffset`` = Raft high watermark - 1.

Mapping onto a ``tidelog.storage.Log`` (the metadata log is an ordinary tidelog
log named ``__cluster_metadata``, partition 0; ``file_log.FileMetadataLog`` is that
implementation):

* ``append(records)`` → one record batch built by ``records_to_batch`` with
  ``base_offset = end_offset`` (``partitionLeaderEpoch`` = the Raft epoch), appended
  as the leader appends a producer batch; the batch CRC protects it on disk.
* ``end_offset`` → the log's ``log_end_offset``; ``committed_offset`` →
  ``high_watermark - 1``.
* ``read(start_offset)`` → fetch from ``start_offset`` up to the high watermark and
  decode with ``iter_batch_records``, skipping records before ``start_offset``
  inside the first batch.
* ``write_snapshot`` / ``latest_snapshot`` → a KRaft snapshot file
  (``<end offset>-<epoch>.checkpoint``) holding the records as batches;
  ``delete_before`` → advancing the ``log_start_offset`` once a snapshot covers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

from tidelog.metadata.records import MetadataRecord, iter_batch_records, records_to_batch

METADATA_TOPIC = "__cluster_metadata"


class MetadataLogError(Exception):
    """A read the log cannot serve (below its start) or a misuse of the seam."""


@dataclass(frozen=True)
class MetadataSnapshot:
    """The records of an image as of ``last_offset`` (inclusive)."""

    last_offset: int
    records: tuple[MetadataRecord, ...]


class MetadataLog(Protocol):
    @property
    def end_offset(self) -> int:
        """The offset the next appended record will get."""

    @property
    def committed_offset(self) -> int:
        """The offset of the last committed record, -1 when none."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still readable; earlier state lives in a snapshot."""

    def append(self, records: Sequence[MetadataRecord]) -> list[int]:
        """Append ``records`` as one batch; return their offsets (consecutive)."""

    def read(self, start_offset: int) -> Iterator[tuple[int, MetadataRecord]]:
        """Committed ``(offset, record)`` pairs from ``start_offset`` on."""

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """Store ``snapshot``; its ``last_offset`` must be committed."""

    def latest_snapshot(self) -> MetadataSnapshot | None:
        """The snapshot with the highest ``last_offset``, if any."""


class InMemoryMetadataLog:
    """A ``MetadataLog`` in memory, stored as real record batches.

    With ``auto_commit`` (the single-node quorum) a record is committed as soon as
    it is appended; otherwise ``commit(offset)`` advances the commit point, as a
    Raft majority would.
    """

    def __init__(self, auto_commit: bool = True):
        self.auto_commit = auto_commit
        self._batches: list[tuple[int, int, bytes]] = []   # (base offset, last offset, bytes)
        self._end_offset = 0
        self._committed_offset = -1
        self._log_start_offset = 0
        self._snapshots: list[MetadataSnapshot] = []

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def committed_offset(self) -> int:
        return self._committed_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    def append(self, records: Sequence[MetadataRecord]) -> list[int]:
        if not records:
            raise MetadataLogError("an append needs at least one record")
        base_offset = self._end_offset
        batch = records_to_batch(records, base_offset=base_offset)
        self._batches.append((base_offset, base_offset + len(records) - 1, batch))
        self._end_offset += len(records)
        if self.auto_commit:
            self._committed_offset = self._end_offset - 1
        return list(range(base_offset, self._end_offset))

    def commit(self, offset: int) -> None:
        """Mark everything up to ``offset`` (inclusive) committed."""
        if not self._committed_offset <= offset < self._end_offset:
            raise MetadataLogError(f"cannot commit offset {offset}: committed "
                                   f"{self._committed_offset}, end {self._end_offset}")
        self._committed_offset = offset

    def read(self, start_offset: int) -> Iterator[tuple[int, MetadataRecord]]:
        if start_offset < self._log_start_offset:
            raise MetadataLogError(f"offset {start_offset} is below the log start offset "
                                   f"{self._log_start_offset}; load a snapshot first")
        for base_offset, last_offset, batch in self._batches:
            if last_offset < start_offset:
                continue
            if base_offset > self._committed_offset:
                return
            for offset, record in iter_batch_records(batch):
                if start_offset <= offset <= self._committed_offset:
                    yield offset, record

    def write_snapshot(self, snapshot: MetadataSnapshot) -> None:
        if snapshot.last_offset > self._committed_offset:
            raise MetadataLogError(f"snapshot at {snapshot.last_offset} is past the committed "
                                   f"offset {self._committed_offset}")
        self._snapshots.append(snapshot)
        self._snapshots.sort(key=lambda s: s.last_offset)

    def latest_snapshot(self) -> MetadataSnapshot | None:
        return self._snapshots[-1] if self._snapshots else None

    def delete_before(self, offset: int) -> None:
        """Drop whole batches below ``offset``; a snapshot must cover them."""
        snapshot = self.latest_snapshot()
        if snapshot is None or snapshot.last_offset < offset - 1:
            raise MetadataLogError(f"no snapshot covers the records before offset {offset}")
        while self._batches and self._batches[0][1] < offset:
            self._log_start_offset = self._batches[0][1] + 1
            self._batches.pop(0)
