"""A deterministic controller harness for tests, scenarios and the simulator.

``ControllerTestEnv`` wires a ``QuorumController`` to a ``ManualClock``, a seeded
``random.Random`` and an ``InMemoryMetadataLog``, and offers the steps controller
tests are written in (Kafka's style): register brokers, unfence them, create a
topic, fence some, and look at partitions and at the exact records each step
wrote. Nothing here reads wall time or does I/O.

Incarnation ids are deterministic: broker ``b``'s ``n``-th process start gets
``UUID(int=(b << 32) | n)``, so a restart is ``env.restart(b)``. So are log
directory ids: ``directory_id(b, n, i)`` is the ``i``-th directory broker ``b``
registers at its ``n``-th start (a restart with ``log_dirs`` gets new disks).
"""

from __future__ import annotations

import random
import uuid
from typing import Mapping, Sequence

from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.delta import replay_all
from tidelog.metadata.log import InMemoryMetadataLog
from tidelog.metadata.records import (
    BrokerFeature,
    ConfigResourceType,
    Endpoint,
    MetadataRecord,
    format_record,
)
from tidelog.metadata.registrations import PartitionRegistration
from tidelog.controller.messages import (
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsTopic,
    ElectionType,
    ReplicaDirectory,
    ReplicaLogEnd,
)
from tidelog.controller.quorum_controller import QuorumController

CLUSTER_ID = "tidelog-test-cluster"
LISTENER = "PLAINTEXT"


def incarnation_id(broker_id: int, start: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(broker_id << 32) | start)


def directory_id(broker_id: int, start: int, index: int) -> uuid.UUID:
    return uuid.UUID(int=(1 << 120) | (broker_id << 32) | (start << 16) | index)


class ControllerTestEnv:
    def __init__(self, seed: int = 0, session_timeout_ms: int = 9000,
                 log: InMemoryMetadataLog | None = None, clock: ManualClock | None = None,
                 broker_features: Sequence[BrokerFeature] = (), **controller_options):
        self.clock = clock or ManualClock(0)
        self.broker_features = tuple(broker_features)   # what brokers register by default
        self.log = log or InMemoryMetadataLog()
        self.seed = seed
        self.controller = QuorumController(
            clock=self.clock, log=self.log, cluster_id=CLUSTER_ID, rng=random.Random(seed),
            session_timeout_ms=session_timeout_ms, **controller_options)
        self.broker_epochs: dict[int, int] = {
            b: r.broker_epoch for b, r in self.controller.cluster.brokers.items()}
        self.incarnations: dict[int, uuid.UUID] = {
            b: r.incarnation_id for b, r in self.controller.cluster.brokers.items()}
        self.starts: dict[int, int] = {   # process starts per broker
            b: i.int & 0xFFFFFFFF for b, i in self.incarnations.items()}

    # ------------------------------------------------------------ brokers

    def register(self, broker_id: int, rack: str | None = None,
                 incarnation: uuid.UUID | None = None,
                 features: Sequence[BrokerFeature] | None = None, log_dirs: int = 0,
                 previous_broker_epoch: int = -1) -> BrokerRegistrationReply:
        """Register ``broker_id``'s current process (its first one if it has none), with
        ``log_dirs`` log directories (``directory_id``; 0: none, as before KIP-858)."""
        if incarnation is None:
            incarnation = self.incarnations.get(broker_id) or incarnation_id(broker_id, 0)
        start = incarnation.int & 0xFFFFFFFF
        features = self.broker_features if features is None else features
        request = BrokerRegistrationRequest(
            broker_id, incarnation, CLUSTER_ID,
            (Endpoint(LISTENER, f"broker{broker_id}", 9092),), tuple(features), rack,
            tuple(directory_id(broker_id, start, i) for i in range(log_dirs)), previous_broker_epoch)
        reply = self.controller.register_broker(request)
        if reply.error_code == ErrorCode.NONE:
            self.broker_epochs[broker_id] = reply.broker_epoch
            self.incarnations[broker_id] = incarnation
        return reply

    def restart(self, broker_id: int, rack: str | None = None, log_dirs: int = 0,
                clean: bool = False) -> BrokerRegistrationReply:
        """A new process for ``broker_id`` registers with a new incarnation id; after a
        ``clean`` shutdown it names its previous broker epoch (KIP-966)."""
        self.starts[broker_id] = self.starts.get(broker_id, 0) + 1
        previous = self.broker_epochs.get(broker_id, -1) if clean else -1
        return self.register(broker_id, rack, incarnation_id(broker_id, self.starts[broker_id]),
                             log_dirs=log_dirs, previous_broker_epoch=previous)

    def heartbeat(self, broker_id: int, want_fence: bool = False, want_shut_down: bool = False,
                  metadata_offset: int | None = None, broker_epoch: int | None = None,
                  offline_log_dirs: Sequence[uuid.UUID] = (),
                  log_ends: Mapping[tuple[str, int], tuple[int, int]] | None = None) -> BrokerHeartbeatReply:
        """A heartbeat; by default the broker has caught up with the committed log.
        ``log_ends``: (topic, partition) → (last epoch, log end offset) it reports; ``{}``
        from a broker that reports but has nothing to say, None (the default) from one
        that does not report (``tidelog.unclean.recovery.log.ends.enable`` false)."""
        ends = None if log_ends is None else tuple(ReplicaLogEnd(self.topic_id(topic), partition, epoch, end)
                                                   for (topic, partition), (epoch, end) in log_ends.items())
        return self.controller.process_broker_heartbeat(BrokerHeartbeatRequest(
            broker_id,
            self.broker_epochs.get(broker_id, -1) if broker_epoch is None else broker_epoch,
            self.controller.committed_offset if metadata_offset is None else metadata_offset,
            want_fence, want_shut_down, tuple(offline_log_dirs), ends))

    def log_dirs(self, broker_id: int) -> tuple[uuid.UUID, ...]:
        """The log directories ``broker_id``'s current registration lists as online."""
        return self.controller.cluster.registration(broker_id).log_dirs

    def assign_replicas_to_dirs(self, broker_id: int,
                                assignments: Mapping[TopicPartition, uuid.UUID]) -> AssignReplicasToDirsResponse:
        return self.controller.assign_replicas_to_dirs(AssignReplicasToDirsRequest(
            broker_id, self.broker_epochs.get(broker_id, -1),
            tuple(ReplicaDirectory(self.topic_id(tp.topic), tp.partition, directory)
                  for tp, directory in assignments.items())))

    def register_and_unfence(self, *broker_ids: int, racks: Mapping[int, str] | None = None
                             ) -> None:
        for b in broker_ids:
            assert self.register(b, (racks or {}).get(b)).error_code == ErrorCode.NONE
        for b in broker_ids:
            assert not self.heartbeat(b).is_fenced

    def fence(self, broker_id: int) -> BrokerHeartbeatReply:
        """The broker asks to be fenced (``want_fence``), as a broker losing its disk does."""
        return self.heartbeat(broker_id, want_fence=True)

    # ------------------------------------------------------------ topics

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignments: Sequence[Sequence[int]] | None = None,
                     configs: Mapping[str, str] | None = None) -> CreatableTopicResult:
        topic = CreatableTopic(
            name, num_partitions, replication_factor,
            None if assignments is None else tuple(tuple(a) for a in assignments),
            dict(configs or {}))
        return self.controller.create_topics([topic])[0]

    def topic_id(self, name: str) -> uuid.UUID:
        return self.controller.replication.topic_ids[name]

    def partition(self, topic: str, partition_id: int) -> PartitionRegistration:
        """The committed partition state (from the published image)."""
        registration = self.controller.image.partition(TopicPartition(topic, partition_id))
        assert registration is not None, f"{topic}-{partition_id} does not exist"
        return registration

    # ------------------------------------------------------------ records

    def records_from(self, offset: int) -> list[MetadataRecord]:
        return [record for _, record in self.log.read(offset)]

    def format(self, record: MetadataRecord) -> str:
        names = {topic_id: topic.name
                 for topic_id, topic in self.controller.replication.topics.items()}
        names.update({topic_id: topic.name
                      for topic_id, topic in self.controller.image.topics_by_id.items()})
        return format_record(record, names)

    def check_consistent(self) -> None:
        """The published image equals a full replay of the log, and the managers agree.

        Meaningful once everything written is committed (always, with auto-commit).
        """
        controller = self.controller
        replayed = replay_all(self.log.read(self.log.log_start_offset)) \
            if self.log.latest_snapshot() is None else None
        if replayed is not None:
            assert replayed == controller.image, "controller image != replay of its log"
        image = controller.image
        assert dict(image.brokers) == controller.cluster.brokers
        assert {t.name: dict(t.partitions) for t in image.topics_by_id.values()} == {
            t.name: t.partitions for t in controller.replication.topics.values()}


# ---------------------------------------------------------------- random workloads

def random_operation(env: ControllerTestEnv, rng: random.Random) -> str:
    """Apply one random, plausible controller operation; return what it was.

    Used by property tests (replay equivalence, invariants) and the simulator: brokers
    register (with 0-2 log directories), restart, heartbeat (possibly asking to be
    fenced or to shut down, or reporting log directories offline), place replicas in
    directories, go silent while time passes; topics are created, grown, deleted;
    leaders shrink and grow ISRs; preferred and unclean elections and config changes
    happen.
    """
    controller = env.controller
    brokers = sorted(controller.cluster.brokers)
    topics = sorted(controller.replication.topic_ids)
    choice = rng.randrange(13)
    if choice == 0 or not brokers:
        return _random_registration(env, rng)
    if choice <= 3:
        return _random_heartbeat(env, rng, rng.choice(brokers))
    if choice == 4:
        env.clock.advance(rng.choice([100, 2000, 5000, 9001]))
        fenced = controller.fire_due_deadlines()
        return f"tick fenced={fenced}"
    if choice == 5 or not topics:
        name = f"t{rng.randrange(5)}"
        configs = {"unclean.leader.election.enable": "true"} if rng.random() < 0.3 else {}
        env.create_topic(name, rng.randrange(1, 4), rng.randrange(1, 4), configs=configs)
        return f"create-topic {name}"
    return _random_topic_operation(env, rng, choice, rng.choice(topics))


def _random_registration(env: ControllerTestEnv, rng: random.Random) -> str:
    """A broker (one of 0..5) registers, or restarts if it is registered."""
    broker_id = rng.randrange(6)
    if broker_id in env.controller.cluster.brokers and rng.random() < 0.5:
        env.restart(broker_id, rng.choice([None, "a", "b"]), log_dirs=rng.randrange(3))
        return f"restart {broker_id}"
    env.register(broker_id, rng.choice([None, "a", "b"]), log_dirs=rng.randrange(3))
    return f"register {broker_id}"


def _random_heartbeat(env: ControllerTestEnv, rng: random.Random, broker_id: int) -> str:
    """A heartbeat that may ask to be fenced or to shut down, or report log directories offline."""
    want_fence = rng.random() < 0.2
    want_shut_down = rng.random() < 0.1
    online = env.log_dirs(broker_id)
    offline = tuple(d for d in online if rng.random() < 0.3) if rng.random() < 0.2 else ()
    env.heartbeat(broker_id, want_fence, want_shut_down, offline_log_dirs=offline)
    return f"heartbeat {broker_id} fence={want_fence} shutdown={want_shut_down} offline={len(offline)}"


def _random_topic_operation(env: ControllerTestEnv, rng: random.Random, choice: int, topic: str) -> str:
    """Operation ``choice`` (6..12) on ``topic`` or one of its partitions, drawn here."""
    controller = env.controller
    topic_id = controller.replication.topic_ids[topic]
    partitions = controller.replication.topics[topic_id].partitions
    partition_id = rng.choice(sorted(partitions))
    partition = partitions[partition_id]
    if choice == 6:
        controller.delete_topics([topic])
        return f"delete-topic {topic}"
    if choice == 7:
        controller.create_partitions([CreatePartitionsTopic(topic, len(partitions) + 1)])
        return f"create-partitions {topic}"
    if choice in (8, 9) and partition.has_leader:
        isr = [partition.leader] + [r for r in partition.replicas
                                    if r != partition.leader and rng.random() < 0.6]
        controller.alter_partition(AlterPartitionRequest(
            partition.leader, env.broker_epochs.get(partition.leader, -1),
            (AlterPartitionItem(topic_id, partition_id, partition.leader_epoch,
                                partition.partition_epoch, tuple(isr)),)))
        return f"alter-partition {topic}-{partition_id} isr={isr}"
    if choice == 12:
        broker_id = rng.choice(partition.replicas)
        registration = controller.cluster.registration(broker_id)
        if registration is None or not registration.log_dirs:
            return "assign-dirs: nothing to place"
        directory = rng.choice(registration.log_dirs)
        env.assign_replicas_to_dirs(broker_id, {TopicPartition(topic, partition_id): directory})
        return f"assign-dirs {broker_id} {topic}-{partition_id}"
    if choice == 10:
        election = rng.choice([ElectionType.PREFERRED, ElectionType.UNCLEAN])
        controller.elect_leaders(election, [TopicPartition(topic, partition_id)])
        return f"elect {election.name} {topic}-{partition_id}"
    value = rng.choice(["true", "false"])
    controller.incremental_alter_configs([AlterConfigsResource(
        ConfigResourceType.TOPIC, topic, {"unclean.leader.election.enable": value})])
    return f"set unclean={value} {topic}"
