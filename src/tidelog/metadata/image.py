"""The metadata image: an immutable snapshot of cluster metadata (Kafka's ``MetadataImage``).

Theory of operation. A ``MetadataImage`` is what replaying the metadata log up to
``offset`` (inclusive) yields: topics (name ↔ id) with their partitions, broker
registrations, configs, finalized features and the producer-id high mark. It is
never modified: a ``MetadataDelta`` (``delta.py``) collects replayed records and
``apply()`` builds the next image, sharing unchanged parts with this one. Readers
take the current image without locks; a stale image is acceptable because clients
learn from error codes and refresh.

Queries are the old MetadataCache's: ``contains_topic``, ``contains_partition``,
``partition``, ``topic_names``, ``all_partitions``, ``replica_endpoints`` (alive =
unfenced brokers only) and ``leader_endpoint``.

``to_records()`` writes the image as the records that rebuild it (a snapshot);
replaying them into an empty delta gives back an equal image (the identity tested
in ``tests/metadata``). Invariant 10.7 (docs/simulation.md, "Checks"): the
controller and every broker that has replayed the same offset hold equal images.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple

from tidelog.core.ids import TopicPartition
from tidelog.metadata.client_quotas import entity_data
from tidelog.metadata.records import (
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    FeatureLevelRecord,
    MetadataRecord,
    ProducerIdsRecord,
    TopicRecord,
)
from tidelog.metadata.registrations import BrokerRegistration, PartitionRegistration

_EMPTY: Mapping = MappingProxyType({})


class ConfigResource(NamedTuple):
    type: int      # ConfigResourceType
    name: str      # topic name, or "" for the cluster-wide (default broker) resource


@dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]


@dataclass(frozen=True)
class ProducerIdsImage:
    """Who took the last block of producer ids, and the first id not handed out."""

    broker_id: int = -1
    broker_epoch: int = -1
    next_producer_id: int = 0


@dataclass(frozen=True)
class MetadataImage:
    offset: int = -1                         # last record reflected; -1 = nothing
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # finalized levels
    # The offset of the last FeatureLevelRecord (ApiVersions' finalized epoch); after a
    # snapshot, the snapshot's: not part of the image's value (images are compared).
    features_epoch: int = field(default=-1, compare=False)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    # SCRAM credentials by (user, mechanism): UserScramCredentialRecords (KIP-554).
    scram_credentials: Mapping[tuple[str, int], Any] = field(default_factory=lambda: _EMPTY)
    # ACLs by id: AccessControlEntryRecords (metadata/authorizer.py).
    acls: Mapping[uuid.UUID, Any] = field(default_factory=lambda: _EMPTY)
    # Client quotas by entity (metadata/client_quotas.py QuotaEntity) → {key: value}: ClientQuotaRecords.
    client_quotas: Mapping[tuple, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)

    # ------------------------------------------------------------ topics

    def contains_topic(self, name: str) -> bool:
        return name in self.topics_by_name

    def contains_partition(self, tp: TopicPartition) -> bool:
        topic = self.topics_by_name.get(tp.topic)
        return topic is not None and tp.partition in topic.partitions

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.name

    def partition(self, tp: TopicPartition) -> PartitionRegistration | None:
        """The partition info: replicas, isr, leader, epochs; None if unknown."""
        topic = self.topics_by_name.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def topic_names(self) -> list[str]:
        return sorted(self.topics_by_name)

    def all_partitions(self) -> Iterator[tuple[TopicPartition, PartitionRegistration]]:
        for name in sorted(self.topics_by_name):
            topic = self.topics_by_name[name]
            for partition_id in sorted(topic.partitions):
                yield TopicPartition(name, partition_id), topic.partitions[partition_id]

    # ------------------------------------------------------------ brokers

    def is_alive(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def alive_brokers(self) -> list[BrokerRegistration]:
        return [self.brokers[b] for b in sorted(self.brokers) if not self.brokers[b].fenced]

    def replica_endpoints(self, tp: TopicPartition, listener_name: str) -> dict[int, Endpoint]:
        """Endpoints of the partition's replicas on ``listener_name``, alive brokers only."""
        partition = self.partition(tp)
        if partition is None:
            return {}
        result = {}
        for broker_id in partition.replicas:
            broker = self.brokers.get(broker_id)
            if broker is None or broker.fenced:
                continue
            endpoint = broker.endpoint(listener_name)
            if endpoint is not None:
                result[broker_id] = endpoint
        return result

    def leader_endpoint(self, tp: TopicPartition, listener_name: str) -> Endpoint | None:
        partition = self.partition(tp)
        if partition is None or not partition.has_leader:
            return None
        return self.replica_endpoints(tp, listener_name).get(partition.leader)

    # ------------------------------------------------------------ configs

    def topic_config(self, name: str) -> Mapping[str, str]:
        """The topic's own overrides (not defaults)."""
        return self.configs.get(ConfigResource(ConfigResourceType.TOPIC, name), _EMPTY)

    def cluster_config(self) -> Mapping[str, str]:
        return self.configs.get(ConfigResource(ConfigResourceType.BROKER, ""), _EMPTY)

    # ------------------------------------------------------------ snapshot

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image from nothing, in a deterministic order."""
        records: list[MetadataRecord] = [
            FeatureLevelRecord(name, level) for name, level in sorted(self.features.items())]
        records += [self.brokers[b].to_record() for b in sorted(self.brokers)]
        for name in sorted(self.topics_by_name):
            topic = self.topics_by_name[name]
            records.append(TopicRecord(topic.name, topic.topic_id))
            records += [topic.partitions[p].to_record(topic.topic_id, p)
                        for p in sorted(topic.partitions)]
        for resource in sorted(self.configs):
            records += [ConfigRecord(resource.type, resource.name, key, value)
                        for key, value in sorted(self.configs[resource].items())]
        if self.producer_ids != ProducerIdsImage():
            ids = self.producer_ids
            records.append(ProducerIdsRecord(ids.broker_id, ids.broker_epoch, ids.next_producer_id))
        records += [self.scram_credentials[key] for key in sorted(self.scram_credentials)]
        records += [self.acls[acl_id] for acl_id in sorted(self.acls)]
        for entity in sorted(self.client_quotas, key=repr):
            records += [ClientQuotaRecord(entity_data(entity), key, value)
                        for key, value in sorted(self.client_quotas[entity].items())]
        return records
