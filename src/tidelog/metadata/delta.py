"""MetadataDelta: replay records on top of an image; say what changed locally.

Theory of operation. A delta starts from a base ``MetadataImage``, accepts records
one at a time through ``replay(record, offset)`` and remembers only what they
changed; ``apply()`` returns the next immutable image, sharing every unchanged
topic and partition with the base. Replay is strict, as in Kafka: a record that cannot
be applied (a change to an unknown partition, a fence naming the wrong broker
epoch, ...) raises ``MetadataReplayError`` — the log and this process disagree,
which is fatal for the process.

``local_changes(broker_id)`` is the pure function of the delta that tells one
broker's replica manager what to do (Kafka's ``TopicsDelta.localChanges``): the
partitions it must now lead, follow, or delete, each with its new state. The
replica manager applies the deletes first (a topic can be deleted and re-created
under a new id in one delta).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, NamedTuple

from tidelog.core.ids import TopicPartition
from tidelog.metadata.image import ConfigResource, MetadataImage, ProducerIdsImage, TopicImage
from tidelog.metadata.client_quotas import record_entity
from tidelog.metadata.records import (
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from tidelog.metadata.registrations import BrokerRegistration, PartitionRegistration


class MetadataReplayError(Exception):
    """A record that cannot be applied to the state it is replayed onto (fatal)."""


class LocalPartition(NamedTuple):
    topic_id: uuid.UUID
    partition: PartitionRegistration


@dataclass(frozen=True)
class LocalReplicaChanges:
    """What one broker must do after a delta: lead, follow, delete (deletes first)."""

    leaders: Mapping[TopicPartition, LocalPartition]
    followers: Mapping[TopicPartition, LocalPartition]
    deletes: frozenset[TopicPartition]

    @property
    def is_empty(self) -> bool:
        return not (self.leaders or self.followers or self.deletes)


class _TopicDelta:
    __slots__ = ("name", "topic_id", "base", "partitions")

    def __init__(self, name: str, topic_id: uuid.UUID, base: TopicImage | None):
        self.name, self.topic_id, self.base = name, topic_id, base
        self.partitions: dict[int, PartitionRegistration] = {}

    def current(self, partition_id: int) -> PartitionRegistration | None:
        if partition_id in self.partitions:
            return self.partitions[partition_id]
        return None if self.base is None else self.base.partitions.get(partition_id)

    def apply(self) -> TopicImage:
        partitions = dict(self.base.partitions) if self.base is not None else {}
        partitions.update(self.partitions)
        return TopicImage(self.name, self.topic_id, MappingProxyType(partitions))


class MetadataDelta:
    def __init__(self, image: MetadataImage):
        self.image = image
        self.offset = image.offset
        self._features: dict[str, int] = {}
        self._features_epoch = image.features_epoch
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[uuid.UUID, _TopicDelta] = {}
        self._removed_topics: dict[uuid.UUID, TopicImage] = {}
        self._configs: dict[ConfigResource, dict[str, str | None]] = {}
        self._producer_ids: ProducerIdsImage | None = None
        self._scram: dict[tuple[str, int], UserScramCredentialRecord | None] = {}
        self._acls: dict[uuid.UUID, AccessControlEntryRecord | None] = {}
        self._client_quotas: dict[tuple, dict[str, float]] = {}    # entity → its quotas now (empty: none)

    # ------------------------------------------------------------ replay

    def replay(self, record: MetadataRecord, offset: int) -> None:
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"no replay rule for {type(record).__name__}")
        handler(self, record)
        self.offset = offset
        if type(record) is FeatureLevelRecord:
            self._features_epoch = offset

    def _broker(self, broker_id: int, broker_epoch: int, what: str) -> BrokerRegistration:
        broker = self._brokers[broker_id] if broker_id in self._brokers \
            else self.image.brokers.get(broker_id)
        if broker is None:
            raise MetadataReplayError(f"{what}: broker {broker_id} is not registered")
        if broker.broker_epoch != broker_epoch:
            raise MetadataReplayError(f"{what}: broker {broker_id} has epoch "
                                      f"{broker.broker_epoch}, the record names {broker_epoch}")
        return broker

    def _replay_register_broker(self, record: RegisterBrokerRecord) -> None:
        self._brokers[record.broker_id] = BrokerRegistration.from_record(record)

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        self._broker(record.broker_id, record.broker_epoch, "UnregisterBrokerRecord")
        self._brokers[record.broker_id] = None

    def _replay_fence_broker(self, record: FenceBrokerRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, "FenceBrokerRecord")
        self._brokers[record.broker_id] = broker.with_fenced(True)

    def _replay_unfence_broker(self, record: UnfenceBrokerRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, "UnfenceBrokerRecord")
        self._brokers[record.broker_id] = broker.with_fenced(False)

    def _replay_broker_change(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, "BrokerRegistrationChangeRecord")
        self._brokers[record.broker_id] = broker.merge(record)

    def _topic(self, topic_id: uuid.UUID, what: str) -> _TopicDelta:
        topic = self._topics.get(topic_id)
        if topic is None:
            base = None if topic_id in self._removed_topics else self.image.topics_by_id.get(topic_id)
            if base is None:
                raise MetadataReplayError(f"{what}: topic id {topic_id} is unknown")
            topic = self._topics[topic_id] = _TopicDelta(base.name, topic_id, base)
        return topic

    def _replay_topic(self, record: TopicRecord) -> None:
        if record.topic_id in self._topics or (
                record.topic_id in self.image.topics_by_id
                and record.topic_id not in self._removed_topics):
            raise MetadataReplayError(f"TopicRecord: topic id {record.topic_id} already exists")
        self._topics[record.topic_id] = _TopicDelta(record.name, record.topic_id, None)

    def _replay_partition(self, record: PartitionRecord) -> None:
        topic = self._topic(record.topic_id, "PartitionRecord")
        topic.partitions[record.partition_id] = PartitionRegistration.from_record(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._topic(record.topic_id, "PartitionChangeRecord")
        current = topic.current(record.partition_id)
        if current is None:
            raise MetadataReplayError(f"PartitionChangeRecord: {topic.name}-{record.partition_id} "
                                      "does not exist")
        topic.partitions[record.partition_id] = current.merge(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topic(record.topic_id, "RemoveTopicRecord")
        del self._topics[record.topic_id]
        if topic.base is not None:
            self._removed_topics[record.topic_id] = topic.base
        # The topic's configs go with it, as in Kafka.
        resource = ConfigResource(ConfigResourceType.TOPIC, topic.name)
        for key in self._config(resource):
            self._configs.setdefault(resource, {})[key] = None

    def _config(self, resource: ConfigResource) -> dict[str, str]:
        config = dict(self.image.configs.get(resource, {}))
        for key, value in self._configs.get(resource, {}).items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        return config

    def _replay_config(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        self._configs.setdefault(resource, {})[record.name] = record.value

    def _replay_feature_level(self, record: FeatureLevelRecord) -> None:
        self._features[record.name] = record.feature_level

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        current = self._producer_ids or self.image.producer_ids
        if record.next_producer_id < current.next_producer_id:
            raise MetadataReplayError(f"ProducerIdsRecord moves the next producer id back from "
                                      f"{current.next_producer_id} to {record.next_producer_id}")
        self._producer_ids = ProducerIdsImage(record.broker_id, record.broker_epoch,
                                              record.next_producer_id)

    def _replay_scram(self, record: UserScramCredentialRecord) -> None:
        self._scram[(record.name, record.mechanism)] = record

    def _replay_remove_scram(self, record: RemoveUserScramCredentialRecord) -> None:
        self._scram[(record.name, record.mechanism)] = None

    def _replay_acl(self, record: AccessControlEntryRecord) -> None:
        self._acls[record.id] = record

    def _replay_remove_acl(self, record: RemoveAccessControlEntryRecord) -> None:
        if record.id not in self._acls and record.id not in self.image.acls:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord: no ACL {record.id}")
        self._acls[record.id] = None

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        entity = record_entity(record)
        if entity not in self._client_quotas:
            self._client_quotas[entity] = dict(self.image.client_quotas.get(entity, {}))
        if record.remove:
            self._client_quotas[entity].pop(record.key, None)
        else:
            self._client_quotas[entity][record.key] = record.value

    # ------------------------------------------------------------ apply

    def apply(self) -> MetadataImage:
        image = self.image
        features = dict(image.features)
        for name, level in self._features.items():
            if level == 0:
                features.pop(name, None)
            else:
                features[name] = level
        brokers = dict(image.brokers)
        for broker_id, broker in self._brokers.items():
            if broker is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = broker
        by_id = dict(image.topics_by_id)
        by_name = dict(image.topics_by_name)
        for topic_id, topic in self._removed_topics.items():
            del by_id[topic_id]
            if by_name.get(topic.name) is topic:
                del by_name[topic.name]
        for topic_id, topic_delta in self._topics.items():
            topic = topic_delta.apply()
            by_id[topic_id] = by_name[topic.name] = topic
        configs = dict(image.configs) if self._configs else None
        for resource in self._configs:
            config = self._config(resource)
            if config:
                configs[resource] = MappingProxyType(config)
            else:
                configs.pop(resource, None)
        scram = dict(image.scram_credentials)
        for key, credential in self._scram.items():
            if credential is None:
                scram.pop(key, None)
            else:
                scram[key] = credential
        acls = dict(image.acls)
        for acl_id, acl in self._acls.items():
            if acl is None:
                acls.pop(acl_id, None)
            else:
                acls[acl_id] = acl
        client_quotas = dict(image.client_quotas)
        for entity, quotas in self._client_quotas.items():
            if quotas:
                client_quotas[entity] = MappingProxyType(dict(quotas))
            else:
                client_quotas.pop(entity, None)
        return MetadataImage(
            offset=self.offset,
            features=MappingProxyType(features),
            features_epoch=self._features_epoch,
            brokers=MappingProxyType(brokers),
            topics_by_id=MappingProxyType(by_id),
            topics_by_name=MappingProxyType(by_name),
            configs=MappingProxyType(configs) if configs is not None else image.configs,   # same object: unchanged
            producer_ids=self._producer_ids or image.producer_ids,
            scram_credentials=MappingProxyType(scram) if self._scram else image.scram_credentials,
            acls=MappingProxyType(acls) if self._acls else image.acls,
            client_quotas=MappingProxyType(client_quotas) if self._client_quotas else image.client_quotas,
        )

    # ------------------------------------------------------------ local changes

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions ``broker_id`` must now lead, follow or delete."""
        leaders: dict[TopicPartition, LocalPartition] = {}
        followers: dict[TopicPartition, LocalPartition] = {}
        deletes: set[TopicPartition] = set()
        for topic in self._removed_topics.values():
            for partition_id, partition in topic.partitions.items():
                if broker_id in partition.replicas:
                    deletes.add(TopicPartition(topic.name, partition_id))
        for topic in self._topics.values():
            for partition_id, partition in topic.partitions.items():
                tp = TopicPartition(topic.name, partition_id)
                previous = None if topic.base is None else topic.base.partitions.get(partition_id)
                if broker_id in partition.replicas:
                    target = leaders if partition.leader == broker_id else followers
                    target[tp] = LocalPartition(topic.topic_id, partition)
                elif previous is not None and broker_id in previous.replicas:
                    deletes.add(tp)
        return LocalReplicaChanges(MappingProxyType(leaders), MappingProxyType(followers),
                                   frozenset(deletes))


_HANDLERS = {
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence_broker,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence_broker,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_broker_change,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ConfigRecord: MetadataDelta._replay_config,
    FeatureLevelRecord: MetadataDelta._replay_feature_level,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    UserScramCredentialRecord: MetadataDelta._replay_scram,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_scram,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_acl,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
}


def replay_all(records, image: MetadataImage | None = None) -> MetadataImage:
    """Replay ``(offset, record)`` pairs onto ``image`` (or the empty image)."""
    delta = MetadataDelta(image or MetadataImage())
    for offset, record in records:
        delta.replay(record, offset)
    return delta.apply()
