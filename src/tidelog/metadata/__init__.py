"""Cluster metadata: records, the immutable image, deltas and the log seam (docs/controller.md).

Layering: ``records`` (what is written) → ``registrations`` (one broker, one
partition, and the merge rules) → ``image``/``delta`` (replay) → ``log``/``loader``
(where records live and how a process follows them).
"""

from tidelog.metadata.delta import (
    LocalPartition,
    LocalReplicaChanges,
    MetadataDelta,
    MetadataReplayError,
    replay_all,
)
from tidelog.metadata.image import ConfigResource, MetadataImage, ProducerIdsImage, TopicImage
from tidelog.metadata.loader import MetadataLoader, load_snapshot, snapshot_of
from tidelog.metadata.log import (
    METADATA_TOPIC,
    InMemoryMetadataLog,
    MetadataLog,
    MetadataLogError,
    MetadataSnapshot,
)
from tidelog.metadata.registrations import BrokerRegistration, PartitionRegistration

__all__ = [
    "METADATA_TOPIC",
    "BrokerRegistration",
    "ConfigResource",
    "InMemoryMetadataLog",
    "LocalPartition",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLoader",
    "MetadataLog",
    "MetadataLogError",
    "MetadataReplayError",
    "MetadataSnapshot",
    "PartitionRegistration",
    "ProducerIdsImage",
    "TopicImage",
    "load_snapshot",
    "replay_all",
    "snapshot_of",
]
