"""ReplicationControlManager: topics, partitions, leaders and ISRs.

Theory of operation. Hard state is every topic with its partitions'
``PartitionRegistration``s, plus four indexes kept in step at replay: the
partitions each broker is an ISR member of, those it is an eligible leader
replica of (KIP-966, Kafka's ``brokersToElrs``), the partitions without a leader,
and the partitions with a replica in each log directory (Kafka's
``directoriesToPartitions``). Every change goes through ``_builder``, which gives
the builder the topic's effective min ISR and whether ELR is on (the finalized
``eligible.leader.replicas.version``).
It changes only in ``replay``. Every leader or ISR change is produced by the pure
``PartitionChangeBuilder`` (``partition_change.py``), so all election and epoch
rules live in one place.

Broker events (as Kafka's ``ReplicationControlManager`` handles them):

* fenced / shutdown-now / unregistered / restart of a still-unfenced broker: for
  every partition with the broker in its ISR, target ISR = ISR − {broker}, the
  broker is not an acceptable leader; then ``FenceBrokerRecord`` (or
  ``UnregisterBrokerRecord``);
* restart after an unclean shutdown, with ELR on (``handle_broker_restarted``):
  the same for every partition with the broker in its ISR *or ELR*, and it leaves
  the ELR too (it may have lost unflushed bytes);
* unfenced: ``UnfenceBrokerRecord``, then elections for leaderless partitions,
  with the broker acceptable although the registration still says fenced;
* controlled shutdown: ``BrokerRegistrationChangeRecord(in_controlled_shutdown)``,
  then the broker's leaderships and ISR memberships move away;
* log directories offline (``handle_directories_offline``, reported in a
  heartbeat, KIP-858): for every partition with this broker's replica in a
  directory that was online, the broker leaves the ISR and, if it led, leadership
  moves to another ISR member; then ``BrokerRegistrationChangeRecord(log_dirs=the
  directories still online)``.

A replica is an acceptable leader only if its broker is active *and* the
replica's directory is online on that broker (``_acceptor``, Kafka's
``LeaderAcceptor``), in every election: broker events, AlterPartition,
ElectLeaders, AssignReplicasToDirs. New replicas are assigned the broker's
``default_dir`` (its only directory); a broker with several directories says
where it put each replica with AssignReplicasToDirs (``assign_replicas_to_dirs``),
which also elects a leader the new directory makes possible, and moves the
broker out of the partition at once if that directory is already offline.

One decision may change a partition twice (a heartbeat that fences a broker and
reports its directories offline): every helper takes an *overlay*, the partitions
as this decision's earlier records left them, so a later record is computed from
the state it will be replayed onto.

Partition reassignment (KIP-455) is ``reassignment.py``: it starts and cancels
moves through the same builder, which also completes them; the partitions with a
reassignment under way are indexed at replay (Kafka's ``reassigningTopics``).

Records are generated in (topic name, partition id) order so that they are
deterministic and readable.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.delta import MetadataReplayError
from tidelog.metadata.records import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tidelog.metadata.registrations import UNASSIGNED_DIR, PartitionRegistration, is_reserved_dir
from tidelog.controller.cluster_control import ClusterControlManager
from tidelog.controller.configuration_control import ConfigurationControlManager
from tidelog.controller.partition_change import Election, PartitionChangeBuilder
from tidelog.controller.placement import place_replicas
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult
from tidelog.controller import reassignment
from tidelog.controller import topics as topic_rules
from tidelog.controller.alter_partition import validate_alter_partition
from tidelog.controller.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    DeleteTopicResult,
    ElectionType,
    ElectLeadersResult,
)

PartitionKey = tuple[uuid.UUID, int]
Overlay = dict  # PartitionKey → the PartitionRegistration after this decision's earlier records


@dataclass
class TopicControlInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


class ReplicationControlManager:
    def __init__(self, cluster: ClusterControlManager, configs: ConfigurationControlManager,
                 rng: random.Random, default_num_partitions: int = 1,
                 default_replication_factor: int = 1):
        self.cluster = cluster
        self.configs = configs
        self.features = cluster.features
        self.rng = rng
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.topics: dict[uuid.UUID, TopicControlInfo] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._isr_members: dict[int, set[PartitionKey]] = defaultdict(set)
        self._leaderless: set[PartitionKey] = set()
        self._dir_members: dict[uuid.UUID, set[PartitionKey]] = defaultdict(set)
        self._elr_members: dict[int, set[PartitionKey]] = defaultdict(set)
        self._reassigning: set[PartitionKey] = set()

    # ------------------------------------------------------------ queries

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def topic_exists(self, name: str) -> bool:
        return name in self.topic_ids

    def partitions_with_broker_in_isr(self, broker_id: int) -> set[PartitionKey]:
        return set(self._isr_members.get(broker_id, ()))

    def partitions_without_leader(self) -> set[PartitionKey]:
        return set(self._leaderless)

    def partitions_with_broker_in_elr(self, broker_id: int) -> set[PartitionKey]:
        return set(self._elr_members.get(broker_id, ()))

    def reassigning_partitions(self) -> set[PartitionKey]:
        return set(self._reassigning)

    def partitions_in_directory(self, directory: uuid.UUID) -> set[PartitionKey]:
        return set(self._dir_members.get(directory, ()))

    def has_leaderships(self, broker_id: int) -> bool:
        return any(self.partition(*key).leader == broker_id
                   for key in self._isr_members.get(broker_id, ()))

    def _sorted(self, keys: Iterable[PartitionKey]) -> list[PartitionKey]:
        return sorted(keys, key=lambda k: (self.topics[k[0]].name, k[1]))

    # ------------------------------------------------------------ topics

    def create_topics(self, requests: Sequence[CreatableTopic]
                      ) -> ControllerResult[list[CreatableTopicResult]]:
        name_counts = Counter(t.name for t in requests)
        records: list[MetadataRecord] = []
        results = []
        created: set[str] = set()
        if _requested_partitions(requests, self.default_num_partitions) > topic_rules.REQUEST_PARTITIONS_MAX:
            # Kafka refuses the whole request (its PolicyViolationException).
            return ControllerResult([], [CreatableTopicResult(t.name, ErrorCode.POLICY_VIOLATION,
                                                              "Excessively large number of partitions per request.")
                                         for t in requests])
        for request in requests:
            if name_counts[request.name] > 1:
                error, topic_records = ApiError(ErrorCode.INVALID_REQUEST,
                                                "Duplicate topic name."), []
            else:
                error, topic_records = self._create_topic(request, created)
            if not error.is_success:
                results.append(CreatableTopicResult(request.name, error.error_code, error.message))
                continue
            created.add(request.name)
            records += topic_records
            topic = topic_records[0]
            partitions = [r for r in topic_records if isinstance(r, PartitionRecord)]
            results.append(CreatableTopicResult(request.name, topic_id=topic.topic_id,
                                                num_partitions=len(partitions),
                                                replication_factor=len(partitions[0].replicas)))
        return ControllerResult(records, results)

    def _create_topic(self, request: CreatableTopic, created: set[str]
                      ) -> tuple[ApiError, list[MetadataRecord]]:
        error = topic_rules.validate_topic_name(request.name)
        if not error.is_success:
            return error, []
        if request.name in self.topic_ids or request.name in created:
            return ApiError(ErrorCode.TOPIC_ALREADY_EXISTS,
                            f"Topic '{request.name}' already exists."), []
        key = topic_rules.collision_key(request.name)
        for other in sorted(set(self.topic_ids) | created):
            if topic_rules.collision_key(other) == key:
                return ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{request.name}' "
                                f"collides with existing topic: {other}"), []
        error = self.configs.validate_topic_configs(request.configs)
        if not error.is_success:
            return error, []
        error, assignments = self._assign(request)
        if not error.is_success:
            return error, []
        topic_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        records: list[MetadataRecord] = [TopicRecord(request.name, topic_id)]
        records += self.configs.topic_config_records(request.name, request.configs)
        records += [self._new_partition(replicas).to_record(topic_id, p)
                    for p, replicas in enumerate(assignments)]
        return NO_ERROR, records

    def _assign(self, request: CreatableTopic) -> tuple[ApiError, list[tuple[int, ...]]]:
        if request.assignments is not None:
            if request.replication_factor != -1:
                return ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                "but replication factor was not set to -1."), []
            if request.num_partitions != -1:
                return ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                "but numPartitions was not set to -1."), []
            indexes = request.assignment_partitions or tuple(range(len(request.assignments)))
            twice = sorted(i for i, n in Counter(indexes).items() if n > 1)
            if twice:
                return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition "
                                f"assignments for partition {twice[0]}"), []
            assignments = [tuple(r) for r in request.assignments]
            error = self._validate_assignment(assignments, 0)
            if error.is_success and sorted(indexes) != list(range(len(indexes))):
                error = ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "partitions should be a consecutive 0-based integer sequence")
            return error, assignments
        num_partitions = (self.default_num_partitions if request.num_partitions == -1
                          else request.num_partitions)
        replication_factor = (self.default_replication_factor if request.replication_factor == -1
                              else request.replication_factor)
        return self._place(num_partitions, replication_factor, 0)

    def _place(self, num_partitions: int, replication_factor: int, start_partition_id: int
               ) -> tuple[ApiError, list[tuple[int, ...]]]:
        """Unfenced brokers first; fenced ones (registered, not shutting down) only to reach
        the replication factor, never as the first replica — Kafka's StripedReplicaPlacer.
        The new partition's ISR and leader are its unfenced replicas (``_new_partition``)."""
        active = [(b.broker_id, b.rack) for b in self.cluster.active_brokers()]
        fenced = sorted(b.broker_id for b in self.cluster.brokers.values()
                        if b.fenced and not b.in_controlled_shutdown)
        if not active:
            return ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                            "Unable to place replicas: all brokers are currently fenced."), []
        error = topic_rules.validate_counts(num_partitions, replication_factor, len(active) + len(fenced))
        if not error.is_success:
            return error, []
        if replication_factor <= len(active):
            return NO_ERROR, place_replicas(active, num_partitions, replication_factor, self.rng,
                                            start_partition_id)
        assignments = place_replicas(active, num_partitions, len(active), self.rng, start_partition_id)
        missing = replication_factor - len(active)
        return NO_ERROR, [replicas + tuple(fenced[(p + i) % len(fenced)] for i in range(missing))
                          for p, replicas in enumerate(assignments, start_partition_id)]

    def _validate_assignment(self, assignments: list[tuple[int, ...]], first_partition_id: int
                             ) -> ApiError:
        return topic_rules.validate_assignment(
            assignments, first_partition_id,
            lambda b: self.cluster.registration(b) is not None, self.cluster.is_active)

    def _new_partition(self, replicas: tuple[int, ...]) -> PartitionRegistration:
        isr = tuple(b for b in replicas if self.cluster.is_active(b))
        directories = tuple(self.cluster.default_dir(b) for b in replicas)
        if all(d == UNASSIGNED_DIR for d in directories):
            directories = ()
        return PartitionRegistration(replicas, isr, isr[0], leader_epoch=0, partition_epoch=0,
                                     directories=directories)

    def delete_topics(self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
                      ) -> ControllerResult[list[DeleteTopicResult]]:
        records, results, seen = [], [], set()
        for name in names:
            topic_id = self.topic_ids.get(name)
            if topic_id is None:
                results.append(DeleteTopicResult(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 "This server does not host this topic-partition."))
                continue
            results.append(DeleteTopicResult(name, topic_id))
            if topic_id not in seen:
                seen.add(topic_id)
                records.append(RemoveTopicRecord(topic_id))
        for topic_id in topic_ids:
            topic = self.topics.get(topic_id)
            if topic is None:
                results.append(DeleteTopicResult(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID,
                                                 "This server does not host this topic ID."))
                continue
            results.append(DeleteTopicResult(topic.name, topic_id))
            if topic_id not in seen:
                seen.add(topic_id)
                records.append(RemoveTopicRecord(topic_id))
        return ControllerResult(records, results)

    def create_partitions(self, requests: Sequence[CreatePartitionsTopic]
                          ) -> ControllerResult[list[CreatePartitionsResult]]:
        records: list[MetadataRecord] = []
        results = []
        for request in requests:
            error, new_records = self._create_partitions(request)
            records += new_records
            results.append(CreatePartitionsResult(request.name, error.error_code, error.message))
        return ControllerResult(records, results)

    def _create_partitions(self, request: CreatePartitionsTopic
                           ) -> tuple[ApiError, list[MetadataRecord]]:
        topic_id = self.topic_ids.get(request.name)
        if topic_id is None:
            return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"Topic {request.name} does not exist."), []
        topic = self.topics[topic_id]
        current = len(topic.partitions)
        if request.count < current:
            return ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {request.name} currently "
                            f"has {current} partition(s); {request.count} would not be an "
                            "increase."), []
        if request.count == current:
            return ApiError(ErrorCode.INVALID_PARTITIONS,
                            f"Topic already has {current} partition(s)."), []
        new_count = request.count - current
        if request.assignments is not None:
            assignments = [tuple(r) for r in request.assignments]
            if len(assignments) != new_count:
                return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{len(assignments)} "
                                f"assignment(s) given for {new_count} new partition(s)."), []
            error = self._validate_assignment(assignments, current)
        else:
            replication_factor = len(topic.partitions[0].replicas)
            error, assignments = self._place(new_count, replication_factor, current)
        if not error.is_success:
            return error, []
        return NO_ERROR, [self._new_partition(replicas).to_record(topic_id, current + i)
                          for i, replicas in enumerate(assignments)]

    # ------------------------------------------------------------ broker events

    def handle_broker_fenced(self, broker_id: int, overlay: Overlay | None = None) -> list[MetadataRecord]:
        records: list[MetadataRecord] = self._leader_and_isr_updates(
            self.partitions_with_broker_in_isr(broker_id), broker_to_remove=broker_id, overlay=overlay)
        epoch = self.cluster.registration(broker_id).broker_epoch
        records.append(FenceBrokerRecord(broker_id, epoch))
        return records

    def handle_broker_restarted(self, broker_id: int, clean_shutdown: bool) -> list[MetadataRecord]:
        """A new incarnation of ``broker_id`` registers (the old one's registration is
        still there). With ELR on (KIP-966) and no clean shutdown — its previous
        broker epoch is not the registered one — it may have lost unflushed bytes:
        it leaves every ISR and ELR it is in (Kafka's ``handleBrokerUncleanShutdown``).
        Otherwise, if the old incarnation was still unfenced, it is fenced out of its
        ISRs and leaderships, so a restarted process keeps nothing it held before."""
        registration = self.cluster.registration(broker_id)
        if self.features.elr_enabled and not clean_shutdown:
            keys = self.partitions_with_broker_in_isr(broker_id) | self.partitions_with_broker_in_elr(broker_id)
            records: list[MetadataRecord] = self._leader_and_isr_updates(
                keys, broker_to_remove=broker_id, unclean_shutdown=True)
            if not registration.fenced:
                records.append(FenceBrokerRecord(broker_id, registration.broker_epoch))
            return records
        return [] if registration.fenced else self.handle_broker_fenced(broker_id)

    def handle_broker_unregistered(self, broker_id: int) -> list[MetadataRecord]:
        records: list[MetadataRecord] = self._leader_and_isr_updates(
            self.partitions_with_broker_in_isr(broker_id), broker_to_remove=broker_id)
        epoch = self.cluster.registration(broker_id).broker_epoch
        records.append(UnregisterBrokerRecord(broker_id, epoch))
        return records

    def handle_broker_unfenced(self, broker_id: int, overlay: Overlay | None = None,
                               offline_dirs: Iterable[uuid.UUID] = ()) -> list[MetadataRecord]:
        """``offline_dirs``: directories the same heartbeat reports offline (their
        replicas are not elected although the registration still lists them)."""
        epoch = self.cluster.registration(broker_id).broker_epoch
        records: list[MetadataRecord] = [UnfenceBrokerRecord(broker_id, epoch)]
        records += self._leader_and_isr_updates(self.partitions_without_leader(),
                                                broker_to_add=broker_id, overlay=overlay,
                                                offline_dirs=frozenset(offline_dirs))
        return records

    def handle_broker_in_controlled_shutdown(self, broker_id: int, overlay: Overlay | None = None
                                             ) -> list[MetadataRecord]:
        epoch = self.cluster.registration(broker_id).broker_epoch
        records: list[MetadataRecord] = [
            BrokerRegistrationChangeRecord(broker_id, epoch, in_controlled_shutdown=True)]
        records += self._leader_and_isr_updates(self.partitions_with_broker_in_isr(broker_id),
                                                broker_to_remove=broker_id, overlay=overlay)
        return records

    def handle_directories_offline(self, broker_id: int, offline_dirs: Iterable[uuid.UUID],
                                   overlay: Overlay | None = None) -> list[MetadataRecord]:
        """Kafka's ``handleDirectoriesOffline``: nothing unless some of ``offline_dirs``
        were online in the broker's registration; then the broker leaves the ISR (and
        the leadership) of every partition whose replica is in one of them, and its
        registration keeps only the directories still online."""
        registration = self.cluster.registration(broker_id)
        offline = tuple(offline_dirs)
        newly_offline = registration.directory_intersection(offline)
        if not newly_offline:
            return []
        keys = {key for d in newly_offline for key in self._dir_members.get(d, ())
                if self._current(key, overlay).directory(broker_id) in newly_offline}
        records: list[MetadataRecord] = self._leader_and_isr_updates(
            keys, broker_to_remove=broker_id, overlay=overlay, offline_dirs=frozenset(newly_offline))
        records.append(BrokerRegistrationChangeRecord(
            broker_id, registration.broker_epoch, log_dirs=registration.directory_difference(offline)))
        return records

    def _current(self, key: PartitionKey, overlay: Overlay | None) -> PartitionRegistration:
        if overlay is not None and key in overlay:
            return overlay[key]
        return self.partition(*key)

    def _acceptor(self, partition: PartitionRegistration, broker_to_remove: int = -1,
                  broker_to_add: int = -1, offline_dirs: frozenset = frozenset()):
        """Who may lead ``partition`` (Kafka's ``LeaderAcceptor``): an active broker —
        or ``broker_to_add``, being unfenced in this very write — that is not
        ``broker_to_remove`` and whose replica's directory is online (not one of
        ``offline_dirs``, reported in this write)."""
        def acceptable(replica: int) -> bool:
            if replica == broker_to_remove:
                return False
            if replica != broker_to_add and not self.cluster.is_active(replica):
                return False
            registration = self.cluster.registration(replica)
            directory = partition.directory(replica)
            return (registration is not None and directory not in offline_dirs
                    and registration.has_online_dir(directory))
        return acceptable

    def _builder(self, key: PartitionKey, partition: PartitionRegistration, acceptor,
                 election: Election = Election.ONLINE) -> PartitionChangeBuilder:
        """Every partition change starts here: the topic's effective min ISR (at most
        its replication factor), whether ELR is on (the finalized feature) and where
        the replicas' logs end as their brokers last reported."""
        topic = self.topics[key[0]].name
        min_isr = min(int(self.configs.min_insync_replicas(topic)), len(partition.replicas))
        heartbeat = self.cluster.heartbeat
        return PartitionChangeBuilder(partition, key[0], key[1], acceptor, election,
                                      min_isr=min_isr, elr_enabled=self.features.elr_enabled,
                                      default_dir=self.cluster.default_dir,
                                      log_end=lambda replica: heartbeat.log_end(replica, key),
                                      may_await_log_ends=lambda absent, registered_ms=None:
                                      heartbeat.may_await_log_ends(key, absent, registered_ms),
                                      registered_ms=heartbeat.registered_ms,
                                      reports_log_ends=heartbeat.reports_log_ends,
                                      heard_from=heartbeat.heard_from,
                                      starting=self._starting,
                                      registered=lambda replica: self.cluster.registration(replica) is not None)

    def _starting(self, broker_id: int) -> bool:
        """Registered, fenced, and heartbeating: on its way to being unfenced."""
        registration = self.cluster.registration(broker_id)
        return registration is not None and registration.fenced and self.cluster.heartbeat.in_contact(broker_id)

    def elect_awaiting(self, overlay: Overlay | None = None, broker_to_remove: int = -1,
                       broker_to_add: int = -1, offline_dirs: frozenset = frozenset()) -> list[MetadataRecord]:
        """Try again, at every heartbeat, the elections that may be waiting for replicas'
        log ends: every leaderless partition with ISR and ELR empty and an active last
        known eligible replica. Read from the partitions, not from the waits this controller
        remembers, so that a new active controller finishes a wait its predecessor began
        (the last known leader's unfencing, which started it, will not come again).
        The heartbeat that calls it passes what its own write changes (the broker
        fenced, shutting down or unfenced, its directories offline), as every other
        election of that write sees them (seed 1383 elected a broker in the very
        write that fenced it for having no directory left)."""
        heartbeat = self.cluster.heartbeat
        keys = []
        for key in self._leaderless:
            partition = self._current(key, overlay)
            if (partition.leader == NO_LEADER and not partition.isr and not partition.elr
                    and any(self.cluster.is_active(r) for r in partition.last_known_elr)):
                keys.append(key)
        for key in heartbeat.awaiting():             # a wait ends once the partition has a leader, ISR or ELR
            partition = self._current(key, overlay) if key[0] in self.topics else None
            if partition is None or partition.leader != NO_LEADER or partition.isr or partition.elr:
                heartbeat.stop_awaiting(key)
        return self._leader_and_isr_updates(keys, broker_to_remove, broker_to_add, overlay, offline_dirs)

    def leaderless_log_ends(self, broker_id: int, reported) -> dict[PartitionKey, tuple[int, int]]:
        """The part of a heartbeat's ``replica_log_ends`` worth keeping: replicas of
        ``broker_id`` in partitions without a leader (anything else is dropped, so a
        report can hold no more than the broker's own replicas)."""
        kept = {}
        for end in reported:
            key = (end.topic_id, end.partition_id)
            partition = self.partition(*key)
            if partition is not None and broker_id in partition.replicas and partition.leader == NO_LEADER:
                kept[key] = (int(end.last_epoch), int(end.log_end_offset))
        return kept

    def _leader_and_isr_updates(self, keys: Iterable[PartitionKey], broker_to_remove: int = -1,
                                broker_to_add: int = -1, overlay: Overlay | None = None,
                                offline_dirs: frozenset = frozenset(),
                                unclean_shutdown: bool = False) -> list[PartitionChangeRecord]:
        """Partition changes after removing ``broker_to_remove`` / admitting ``broker_to_add``.

        ``broker_to_add`` counts as an acceptable leader although its registration
        still says fenced (the unfence record is in the same write);
        ``broker_to_remove`` is never acceptable, even for an unclean election.
        Each partition is read from ``overlay`` when an earlier record of this
        decision changed it, and the result is put there.
        """
        records = []
        for key in self._sorted(keys):
            topic_id, partition_id = key
            topic = self.topics[topic_id]
            partition = self._current(key, overlay)
            builder = self._builder(
                key, partition, self._acceptor(partition, broker_to_remove, broker_to_add, offline_dirs),
                self._election_for(topic.name))
            builder.set_target_isr(tuple(r for r in partition.isr if r != broker_to_remove))
            if unclean_shutdown:
                builder.set_unclean_shutdown_replicas((broker_to_remove,))
            record = builder.build()
            if record is not None:
                records.append(record)
                if overlay is not None:
                    overlay[key] = partition.merge(record)
        return records

    def _election_for(self, topic: str) -> Election:
        return (Election.UNCLEAN if self.configs.unclean_leader_election_enabled(topic)
                else Election.ONLINE)

    # ------------------------------------------------------------ AlterPartition

    def alter_partition(self, request: AlterPartitionRequest
                        ) -> ControllerResult[AlterPartitionResponse]:
        """Commit ISR changes proposed by partition leaders (validation: alter_partition.py)."""
        error = self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        if not error.is_success:
            return ControllerResult([], AlterPartitionResponse(error.error_code, error.message))
        records: list[MetadataRecord] = []
        results = []
        for item in request.partitions:
            partition = self.partition(item.topic_id, item.partition_id)
            topic = self.topics.get(item.topic_id)
            error = validate_alter_partition(item, request.broker_id, partition,
                                             topic.name if topic else None,
                                             self.cluster.registration)
            if not error.is_success:
                results.append(AlterPartitionResult(item.topic_id, item.partition_id,
                                                    error.error_code, error.message))
                continue
            builder = self._builder((item.topic_id, item.partition_id), partition,
                                    self._acceptor(partition))
            builder.set_target_isr(item.new_isr)
            builder.set_target_leader_recovery_state(item.leader_recovery_state)
            record = builder.build()
            if record is not None:
                records.append(record)
                partition = partition.merge(record)
            code = (ErrorCode.NONE if partition.leader == request.broker_id
                    else ErrorCode.NEW_LEADER_ELECTED)
            results.append(AlterPartitionResult(
                item.topic_id, item.partition_id, code, None, partition.leader,
                partition.leader_epoch, partition.isr, partition.partition_epoch,
                partition.leader_recovery_state))
        return ControllerResult(records, AlterPartitionResponse(partitions=tuple(results)))

    # ------------------------------------------------------------ AssignReplicasToDirs

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest
                                ) -> ControllerResult[AssignReplicasToDirsResponse]:
        """Kafka's ``handleAssignReplicasToDirs``: a broker says in which of its log
        directories it placed each replica. The partition records the directory and,
        as any change does, elects a leader if it has none and one is now acceptable;
        a replica placed in a directory that is not online leaves the ISR and the
        leadership at once (the directory failed before the broker could say)."""
        broker_id = request.broker_id
        error = self.cluster.check_broker_epoch(broker_id, request.broker_epoch)
        if not error.is_success:
            return ControllerResult([], AssignReplicasToDirsResponse(error.error_code, error.message))
        registration = self.cluster.registration(broker_id)
        records: list[MetadataRecord] = []
        results = []
        overlay: Overlay = {}
        into_offline_dirs: set[PartitionKey] = set()
        for assignment in request.assignments:
            key = (assignment.topic_id, assignment.partition_id)
            topic = self.topics.get(assignment.topic_id)
            known = topic is not None and assignment.partition_id in topic.partitions
            partition = self._current(key, overlay) if known else None
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID
            elif partition is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif broker_id not in partition.replicas:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif is_reserved_dir(assignment.directory_id):
                code = ErrorCode.INVALID_REQUEST
            else:
                code = ErrorCode.NONE
                directories = partition.with_directory(broker_id, assignment.directory_id)
                placed = dataclasses.replace(partition, directories=directories)
                builder = self._builder(key, partition, self._acceptor(placed))
                builder.set_target_directories(directories)
                record = builder.build()
                if record is not None:
                    records.append(record)
                    overlay[key] = partition.merge(record)
                if not registration.has_online_dir(assignment.directory_id):
                    into_offline_dirs.add(key)
            results.append((assignment, code))
        records += self._leader_and_isr_updates(into_offline_dirs, broker_to_remove=broker_id,
                                                overlay=overlay)
        return ControllerResult(records, AssignReplicasToDirsResponse(results=tuple(results)))

    # ------------------------------------------------------------ reassignment (KIP-455)

    def alter_partition_reassignments(self, targets: Sequence[reassignment.ReassignmentTarget],
                                      allow_replication_factor_change: bool = True
                                      ) -> ControllerResult[list[reassignment.ReassignmentResult]]:
        return reassignment.alter_partition_reassignments(self, targets, allow_replication_factor_change)

    def list_partition_reassignments(self, topics: Mapping[str, Sequence[int]] | None = None
                                     ) -> list[reassignment.OngoingReassignment]:
        return reassignment.list_partition_reassignments(self, topics)

    # ------------------------------------------------------------ elections

    def elect_leaders(self, election_type: ElectionType,
                      partitions: Sequence[TopicPartition] | None = None
                      ) -> ControllerResult[list[ElectLeadersResult]]:
        """ElectLeaders: PREFERRED moves leadership to the first replica when it is in
        the ISR; UNCLEAN elects a leader for leaderless partitions from outside the
        ISR. With ``partitions`` None every partition is tried and partitions that
        needed no election are left out of the result (Kafka's behaviour)."""
        records: list[MetadataRecord] = []
        results = []
        for tp, key in self.partition_keys(partitions):
            if key is None:
                results.append(ElectLeadersResult(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  f"Partition {tp} does not exist."))
                continue
            error, record = self._elect(tp, key, election_type)
            if record is not None:
                records.append(record)
            if partitions is None and error.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            results.append(ElectLeadersResult(tp, error.error_code, error.message))
        return ControllerResult(records, results)

    def imbalanced_partitions(self, percentage: int) -> list[TopicPartition]:
        """Partitions to give back to their preferred leader: those of every broker whose
        share of preferred partitions led by another exceeds ``percentage``
        (Kafka's ``leader.imbalance.per.broker.percentage`` check)."""
        preferred: dict[int, list[tuple[TopicPartition, bool]]] = {}
        for tp, key in self.partition_keys(None):
            partition = self.partition(*key)
            preferred.setdefault(partition.preferred_leader, []).append(
                (tp, partition.leader != partition.preferred_leader))
        out = []
        for broker_id, partitions in sorted(preferred.items()):
            moved = [tp for tp, elsewhere in partitions if elsewhere]
            if moved and len(moved) * 100 > percentage * len(partitions):
                out += moved
        return out

    def _elect(self, tp: TopicPartition, key: PartitionKey, election_type: ElectionType
               ) -> tuple[ApiError, PartitionChangeRecord | None]:
        partition = self.partition(*key)
        if election_type == ElectionType.PREFERRED:
            election = Election.PREFERRED
            if partition.leader == partition.preferred_leader:
                return ApiError(ErrorCode.ELECTION_NOT_NEEDED, None), None
        else:
            election = Election.UNCLEAN
            if partition.has_leader:
                return ApiError(ErrorCode.ELECTION_NOT_NEEDED, None), None
        builder = self._builder(key, partition, self._acceptor(partition), election)
        record = builder.build()
        new_leader = partition.merge(record).leader if record is not None else partition.leader
        if election == Election.PREFERRED and new_leader != partition.preferred_leader:
            return ApiError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                            f"Failed to elect leader for partition {tp} under strategy "
                            "PREFERRED: the preferred replica is not an active ISR member"), record
        if election == Election.UNCLEAN and new_leader == NO_LEADER:
            return ApiError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                            f"Failed to elect leader for partition {tp} under strategy "
                            "UNCLEAN: no replica is active on an online log directory"), None
        return NO_ERROR, record

    # ------------------------------------------------------------ replay

    def replay(self, record: MetadataRecord) -> None:
        if isinstance(record, TopicRecord):
            if record.name in self.topic_ids or record.topic_id in self.topics:
                raise MetadataReplayError(f"{record}: the topic already exists")
            self.topics[record.topic_id] = TopicControlInfo(record.name, record.topic_id)
            self.topic_ids[record.name] = record.topic_id
        elif isinstance(record, PartitionRecord):
            topic = self._replay_topic(record.topic_id, record)
            old = topic.partitions.get(record.partition_id)
            new = PartitionRegistration.from_record(record)
            topic.partitions[record.partition_id] = new
            self._update_indexes((record.topic_id, record.partition_id), old, new)
        elif isinstance(record, PartitionChangeRecord):
            topic = self._replay_topic(record.topic_id, record)
            old = topic.partitions.get(record.partition_id)
            if old is None:
                raise MetadataReplayError(f"{record}: no such partition")
            new = old.merge(record)
            topic.partitions[record.partition_id] = new
            self._update_indexes((record.topic_id, record.partition_id), old, new)
        elif isinstance(record, RemoveTopicRecord):
            topic = self._replay_topic(record.topic_id, record)
            for partition_id, partition in topic.partitions.items():
                self._update_indexes((record.topic_id, partition_id), partition, None)
            del self.topics[record.topic_id]
            del self.topic_ids[topic.name]
        else:
            raise AssertionError(f"not a replication record: {record}")

    def _replay_topic(self, topic_id: uuid.UUID, record: MetadataRecord) -> TopicControlInfo:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"{record}: no such topic")
        return topic

    def _update_indexes(self, key: PartitionKey, old: PartitionRegistration | None,
                        new: PartitionRegistration | None) -> None:
        for broker_id in old.isr if old else ():
            members = self._isr_members[broker_id]
            members.discard(key)
            if not members:
                del self._isr_members[broker_id]
        for broker_id in new.isr if new else ():
            self._isr_members[broker_id].add(key)
        for directory in old.directories if old else ():
            members = self._dir_members.get(directory)
            if members is not None:
                members.discard(key)
                if not members:
                    del self._dir_members[directory]
        for directory in new.directories if new else ():
            if not is_reserved_dir(directory):
                self._dir_members[directory].add(key)
        for broker_id in old.elr if old else ():
            members = self._elr_members[broker_id]
            members.discard(key)
            if not members:
                del self._elr_members[broker_id]
        for broker_id in new.elr if new else ():
            self._elr_members[broker_id].add(key)
        if new is not None and new.leader == NO_LEADER:
            self._leaderless.add(key)
        else:
            self._leaderless.discard(key)
        if new is not None and new.is_reassigning:
            self._reassigning.add(key)
        else:
            self._reassigning.discard(key)

    # ------------------------------------------------------------ names

    def topic_partition(self, key: PartitionKey) -> TopicPartition:
        return TopicPartition(self.topics[key[0]].name, key[1])

    def partition_keys(self, partitions: Sequence[TopicPartition] | None
                       ) -> list[tuple[TopicPartition, PartitionKey | None]]:
        """``(tp, key)`` for each requested partition (key None if unknown); all if None."""
        if partitions is None:
            return [(self.topic_partition(k), k) for k in self._sorted(
                (t, p) for t, topic in self.topics.items() for p in topic.partitions)]
        result = []
        for tp in partitions:
            topic_id = self.topic_ids.get(tp.topic)
            known = topic_id is not None and tp.partition in self.topics[topic_id].partitions
            result.append((tp, (topic_id, tp.partition) if known else None))
        return result


def _requested_partitions(requests: Sequence[CreatableTopic], default_num_partitions: int) -> int:
    """The partitions one CreateTopics request asks for in all (Kafka's count: a manual
    assignment's length, else the count or the default; refused counts add nothing)."""
    total = 0
    for request in requests:
        if request.assignments is not None:
            total += len(request.assignments)
        elif request.num_partitions == -1:
            total += default_num_partitions
        elif request.num_partitions > 0:
            total += request.num_partitions
    return total

