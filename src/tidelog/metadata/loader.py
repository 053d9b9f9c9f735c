"""MetadataLoader: follow the metadata log and publish images (Kafka's ``MetadataLoader``).

Theory of operation. Brokers (and the controller, for the image it serves) keep a
loader per metadata log. ``catch_up()`` replays every *committed* record it has
not seen into a ``MetadataDelta`` and publishes the applied image as
``loader.image``; the delta is returned so a broker can ask it for
``local_changes(broker_id)``. On a fresh start — or when the log no longer holds
the records the loader needs (``log_start_offset`` moved past them) — the loader
first loads the latest snapshot, then the tail. Replaying a snapshot and then the
tail yields the same image as replaying the whole log: the snapshot is just the
image's ``to_records()``, each replayed at the snapshot's offset.

Invariant: ``image.offset`` only grows, and never passes ``committed_offset``.
"""

from __future__ import annotations

from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.log import MetadataLog, MetadataLogError, MetadataSnapshot


class MetadataLoader:
    def __init__(self, log: MetadataLog, use_snapshots: bool = True):
        self.log = log
        self.use_snapshots = use_snapshots
        self.image = MetadataImage()
        self.from_snapshot = False      # the last delta started from a snapshot (empty image)

    def catch_up(self) -> MetadataDelta | None:
        """Replay what is newly committed; None when there was nothing new."""
        committed_offset = self.log.committed_offset
        if committed_offset <= self.image.offset:
            return None
        start = self.image.offset + 1
        snapshot = self.log.latest_snapshot() if self.use_snapshots else None
        if start < self.log.log_start_offset or (
                self.image.offset == -1 and snapshot is not None):
            if snapshot is None or snapshot.last_offset + 1 < self.log.log_start_offset:
                raise MetadataLogError(f"offsets from {start} are gone and no snapshot covers them")
            delta = load_snapshot(snapshot)
            start = snapshot.last_offset + 1
            self.from_snapshot = True
        else:
            delta = MetadataDelta(self.image)
            self.from_snapshot = False
        for offset, record in self.log.read(start):
            delta.replay(record, offset)
        # Everything committed has been read, control batches (the quorum's
        # LeaderChange entries) included: the image is as of the committed offset.
        delta.offset = max(delta.offset, committed_offset)
        image = delta.apply()
        assert image.offset >= self.image.offset
        self.image = image
        return delta


def load_snapshot(snapshot: MetadataSnapshot) -> MetadataDelta:
    """A delta from the empty image holding ``snapshot`` (not yet applied)."""
    delta = MetadataDelta(MetadataImage())
    for record in snapshot.records:
        delta.replay(record, snapshot.last_offset)
    delta.offset = snapshot.last_offset
    return delta


def snapshot_of(image: MetadataImage) -> MetadataSnapshot:
    return MetadataSnapshot(image.offset, tuple(image.to_records()))
