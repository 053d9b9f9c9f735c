"""QuorumController: the front of the controller (Kafka's KRaft ``QuorumController``).

Theory of operation. Operations run one at a time, in call order (the caller — the
server's event loop, or a test — is the event queue). Each operation is a *write
event*:

    1. a manager decides → ControllerResult(records, response);
    2. the records are appended to the ``MetadataLog`` as one batch; their offsets
       are the ones the decision assumed (a broker epoch is a record's offset);
    3. the records are replayed into the managers, so the next decision sees them
       (as Kafka's active controller does, before the commit);
    4. the committed image is published: ``image`` and ``committed_offset`` come
       from the records the *log* says are committed, never from what was merely
       appended. With today's single-node quorum the log commits on append; with
       a Raft quorum (not built yet) the server must hold a write's response until
       ``committed_offset >= last_write_offset``, and a controller that loses
       leadership must call ``renounce()`` to drop uncommitted state.

Time: the controller never reads a clock to decide *when* to act. It exposes
``next_deadline_ms()`` (the stale-broker check); the caller fires
``on_deadline()`` at or after it. Each firing fences at most one broker and the
deadline is recomputed at once, so several stale brokers are fenced one by one.

Startup: the managers are rebuilt by replaying the latest snapshot and then the
committed tail of the log; then every registered broker gets a fresh session.
"""

from __future__ import annotations

import random
import uuid
from typing import Callable, Mapping, Sequence, TypeVar

from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.loader import MetadataLoader, snapshot_of
from tidelog.metadata.log import MetadataLog, MetadataSnapshot
from tidelog.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
    AccessControlEntryRecord,
    ClientQuotaRecord,
    RemoveAccessControlEntryRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tidelog.controller import broker_lifecycle
from tidelog.controller.cluster_control import ClusterControlManager
from tidelog.controller.configuration_control import ConfigurationControlManager
from tidelog.controller.feature_control import FeatureControlManager, ProducerIdControlManager
from tidelog.controller.heartbeat import NO_DEADLINE, UNCLEAN_RECOVERY_WAIT_MS, BrokerHeartbeatManager
from tidelog.controller.messages import (
    AllocateProducerIdsReply,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    DeleteTopicResult,
    ElectionType,
    ElectLeadersResult,
)
from tidelog.controller.reassignment import OngoingReassignment, ReassignmentResult, ReassignmentTarget
from tidelog.controller.replication_control import ReplicationControlManager
from tidelog.controller.scram_control import ScramControlManager, ScramResult, ScramUpsertion
from tidelog.controller.acl_control import AclBinding, AclControlManager, AclFilter, AclResult
from tidelog.controller.client_quota_control import ClientQuotaAlteration, ClientQuotaControlManager
from tidelog.controller.result import ApiError, ControllerResult

T = TypeVar("T")

BROKER_SESSION_TIMEOUT_MS_DEFAULT = 9000   # broker.session.timeout.ms

_BROKER_RECORDS = (RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord,
                   UnfenceBrokerRecord, BrokerRegistrationChangeRecord)
_REPLICATION_RECORDS = (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord)


class QuorumController:
    def __init__(self, *, clock: Clock, log: MetadataLog, cluster_id: str,
                 rng: random.Random,  # replica placement's random start; seeded by tests and the simulator
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS_DEFAULT,
                 default_num_partitions: int = 1, default_replication_factor: int = 1,
                 bootstrap_features: Mapping[str, int] | None = None,
                 co_located_broker_id: int | None = None,
                 node_id: int = -1,
                 static_configs: Mapping[str, str] | None = None,
                 unclean_recovery_wait_ms: int = UNCLEAN_RECOVERY_WAIT_MS):
        self.clock = clock
        # In combined mode (broker and controller in one process) a registration of
        # our own broker id left in the log belongs to a process that is gone — us,
        # before the restart — so its session is not revived on load (Kafka would
        # make the restarted broker wait a whole session timeout).
        self.co_located_broker_id = co_located_broker_id
        self.node_id = node_id
        self.log = log
        self.cluster_id = cluster_id
        self._settings = (rng, session_timeout_ms, default_num_partitions,
                          default_replication_factor, dict(static_configs or {}), unclean_recovery_wait_ms)
        self._build_managers()
        self._loader = MetadataLoader(log)
        self.last_write_offset = -1
        self._load_from_log()
        # The finalized features of a new cluster (feature_control.BOOTSTRAP_FEATURES):
        # written once, as the first records, by the first active controller (a
        # quorum's log takes writes only once its leader is active: QuorumMember).
        self.bootstrap_features = dict(bootstrap_features or {})
        if log.end_offset == 0 and not getattr(log, "quorum", False):
            self.maybe_bootstrap()

    def _build_managers(self) -> None:
        (rng, session_timeout_ms, num_partitions, replication_factor, static_configs,
         recovery_wait_ms) = self._settings
        self.heartbeat = BrokerHeartbeatManager(self.clock, session_timeout_ms, recovery_wait_ms)
        self.features = FeatureControlManager(self.node_id)
        self.producer_ids = ProducerIdControlManager()
        self.configs = ConfigurationControlManager(static_configs)
        self.scram = ScramControlManager()
        self.acls = AclControlManager(rng)
        self.client_quotas = ClientQuotaControlManager()
        self.cluster = ClusterControlManager(self.cluster_id, self.heartbeat, self.features)
        self.replication = ReplicationControlManager(self.cluster, self.configs, rng,
                                                     num_partitions, replication_factor)
        self.cluster.unclean_shutdown_handler = self.replication.handle_broker_restarted

    def _load_from_log(self) -> None:
        snapshot = self.log.latest_snapshot()
        start = 0
        if snapshot is not None:
            for record in snapshot.records:
                self.replay(record, snapshot.last_offset)
            self.last_write_offset = snapshot.last_offset
            start = snapshot.last_offset + 1
        for offset, record in self.log.read(start):
            self.replay(record, offset)
            self.last_write_offset = offset
        self.cluster.activate()
        if self.co_located_broker_id is not None:
            self.heartbeat.remove(self.co_located_broker_id)
        self.on_commit()

    # ------------------------------------------------------------ the write path

    def _write(self, decide: Callable[[], ControllerResult[T]]) -> ControllerResult[T]:
        result = decide()
        if result.records:
            expected = self.log.end_offset
            offsets = self.log.append(result.records)
            assert offsets[0] == expected and len(offsets) == len(result.records), offsets
            for offset, record in zip(offsets, result.records):
                self.replay(record, offset)
            self.last_write_offset = offsets[-1]
        self.on_commit()
        return result

    def maybe_bootstrap(self) -> bool:
        """Write the bootstrap feature levels unless a feature level was ever written."""
        if not self.bootstrap_features or self.features.bootstrapped:
            return False
        self._write(lambda: ControllerResult(
            [FeatureLevelRecord(n, v) for n, v in sorted(self.bootstrap_features.items())], None))
        return True

    def on_commit(self) -> None:
        """Publish what the log now says is committed (the Raft layer calls this when
        its high watermark moves; single-node writes call it themselves)."""
        self._loader.catch_up()

    def replay(self, record: MetadataRecord, offset: int) -> None:
        """Apply one record to the managers' hard state (a failure here is fatal)."""
        if isinstance(record, _BROKER_RECORDS):
            self.cluster.replay(record, offset)
        elif isinstance(record, _REPLICATION_RECORDS):
            if isinstance(record, RemoveTopicRecord):
                topic = self.replication.topics.get(record.topic_id)
                if topic is not None:
                    self.configs.delete_topic_configs(topic.name)
            self.replication.replay(record)
        elif isinstance(record, ConfigRecord):
            self.configs.replay(record)
        elif isinstance(record, FeatureLevelRecord):
            self.features.replay(record)
        elif isinstance(record, ProducerIdsRecord):
            self.producer_ids.replay(record)
        elif isinstance(record, (UserScramCredentialRecord, RemoveUserScramCredentialRecord)):
            self.scram.replay(record)
        elif isinstance(record, (AccessControlEntryRecord, RemoveAccessControlEntryRecord)):
            self.acls.replay(record)
        elif isinstance(record, ClientQuotaRecord):
            self.client_quotas.replay(record)
        else:
            raise AssertionError(f"no replay rule for {record}")

    def renounce(self) -> None:
        """Drop everything not committed and rebuild from the log (leadership lost)."""
        self._build_managers()
        self._loader = MetadataLoader(self.log)
        self.last_write_offset = -1
        self._load_from_log()

    # ------------------------------------------------------------ what is committed

    @property
    def committed_offset(self) -> int:
        return self.log.committed_offset

    @property
    def image(self) -> MetadataImage:
        """The image of the committed records (what brokers will see)."""
        return self._loader.image

    def write_snapshot(self) -> MetadataSnapshot:
        """Snapshot the committed image into the log (it may then drop its prefix)."""
        snapshot = snapshot_of(self.image)
        self.log.write_snapshot(snapshot)
        return snapshot

    # ------------------------------------------------------------ broker lifecycle

    def register_broker(self, request: BrokerRegistrationRequest) -> BrokerRegistrationReply:
        result = self._write(lambda: self.cluster.register_broker(request, self.log.end_offset))
        return result.response

    def process_broker_heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatReply:
        result = self._write(lambda: broker_lifecycle.process_broker_heartbeat(
            self.cluster, self.replication, request, self.committed_offset))
        if result.response.in_controlled_shutdown:
            # Kafka's processBatchEndOffset: the offset other brokers must reach
            # before this one may shut down.
            self.heartbeat.maybe_update_controlled_shutdown_offset(
                request.broker_id, self.log.end_offset - 1)
        return result.response

    def unregister_broker(self, broker_id: int) -> ApiError:
        return self._write(lambda: broker_lifecycle.unregister_broker(
            self.cluster, self.replication, broker_id)).response

    def next_deadline_ms(self) -> int | None:
        """When ``on_deadline`` should next be called; None if nothing is scheduled."""
        deadline = self.heartbeat.next_check_time_ms()
        return None if deadline == NO_DEADLINE else deadline

    def on_deadline(self) -> int | None:
        """Run the stale-broker check: fence at most one broker; return its id."""
        return self._write(lambda: broker_lifecycle.maybe_fence_one_stale_broker(
            self.cluster, self.replication)).response

    def fire_due_deadlines(self) -> list[int]:
        """Fire every deadline that is due now; the brokers fenced, in order.

        "Now" is read once, on entry: fencing a broker that leads many partitions can
        take the controller seconds, and heartbeats that arrived meanwhile are not yet
        read. Only the sessions that had expired when the check began are ended;
        the others are judged at the next check, after those heartbeats."""
        now_ms = self.clock.monotonic_ms()
        fenced = []
        while (deadline := self.next_deadline_ms()) is not None and deadline <= now_ms:
            broker_id = self.on_deadline()
            if broker_id is None:
                break
            fenced.append(broker_id)
        return fenced

    # ------------------------------------------------------------ topics and partitions

    def create_topics(self, topics: Sequence[CreatableTopic]) -> list[CreatableTopicResult]:
        return self._write(lambda: self.replication.create_topics(topics)).response

    def delete_topics(self, names: Sequence[str] = (), topic_ids: Sequence[uuid.UUID] = ()
                      ) -> list[DeleteTopicResult]:
        return self._write(lambda: self.replication.delete_topics(names, topic_ids)).response

    def create_partitions(self, topics: Sequence[CreatePartitionsTopic]
                          ) -> list[CreatePartitionsResult]:
        return self._write(lambda: self.replication.create_partitions(topics)).response

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        return self._write(lambda: self.replication.alter_partition(request)).response

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        return self._write(lambda: self.replication.assign_replicas_to_dirs(request)).response

    def elect_leaders(self, election_type: ElectionType,
                      partitions: Sequence[TopicPartition] | None = None
                      ) -> list[ElectLeadersResult]:
        return self._write(lambda: self.replication.elect_leaders(election_type,
                                                                  partitions)).response

    def alter_partition_reassignments(self, targets: Sequence[ReassignmentTarget],
                                      allow_replication_factor_change: bool = True
                                      ) -> list[ReassignmentResult]:
        return self._write(lambda: self.replication.alter_partition_reassignments(
            targets, allow_replication_factor_change)).response

    def list_partition_reassignments(self, topics: Mapping[str, Sequence[int]] | None = None
                                     ) -> list[OngoingReassignment]:
        """A read: the reassignments the replayed records leave under way."""
        return self.replication.list_partition_reassignments(topics)

    def balance_partition_leaders(self, percentage: int) -> int:
        """``auto.leader.rebalance.enable``: preferred elections for the partitions of
        brokers over ``leader.imbalance.per.broker.percentage``; returns how many moved."""
        partitions = self.replication.imbalanced_partitions(percentage)
        if not partitions:
            return 0
        results = self.elect_leaders(ElectionType.PREFERRED, partitions)
        return sum(1 for result in results if result.error_code == ErrorCode.NONE)

    # ------------------------------------------------------------ configs, features, ids

    def incremental_alter_configs(self, resources: Sequence[AlterConfigsResource]
                                  ) -> list[AlterConfigsResult]:
        return self._write(lambda: self.configs.incremental_alter_configs(
            resources, self.replication.topic_exists)).response

    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[ScramUpsertion]) -> list[ScramResult]:
        return self._write(lambda: self.scram.alter(list(deletions), list(upsertions))).response

    def alter_client_quotas(self, alterations: Sequence[ClientQuotaAlteration], validate_only: bool = False
                            ) -> list[tuple[tuple, ApiError]]:
        """AlterClientQuotas: per entity, its error (validate_only decides and writes nothing)."""
        def decide():
            result = self.client_quotas.alter(list(alterations))
            return ControllerResult([], result.response) if validate_only else result
        return self._write(decide).response

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclResult]:
        return self._write(lambda: self.acls.create(list(bindings))).response

    def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclResult]:
        return self._write(lambda: self.acls.delete(list(filters))).response

    def update_features(self, updates: Mapping[str, int], upgrade_types: Mapping[str, int] | None = None,
                        validate_only: bool = False) -> ApiError:
        return self._write(lambda: self.features.update_features(
            updates, self.cluster.brokers.values(), upgrade_types, validate_only)).response

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int
                              ) -> AllocateProducerIdsReply:
        def decide() -> ControllerResult[AllocateProducerIdsReply]:
            error = self.cluster.check_broker_epoch(broker_id, broker_epoch)
            if not error.is_success:
                return ControllerResult([], AllocateProducerIdsReply(error.error_code,
                                                                     error.message))
            return self.producer_ids.allocate_producer_ids(broker_id, broker_epoch)
        return self._write(decide).response
