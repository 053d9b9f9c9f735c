"""The controller: metadata decisions, records out (Kafka's KRaft controller, KIP-631).

``QuorumController`` is the front; behind it each manager owns one kind of hard
state and changes it only in ``replay``: ``ClusterControlManager`` (brokers),
``ReplicationControlManager`` (topics, partitions, leaders, ISRs),
``ConfigurationControlManager`` (configs), ``FeatureControlManager`` and
``ProducerIdControlManager``. ``PartitionChangeBuilder`` holds the election and
epoch rules; ``heartbeat`` the broker state table and sessions. See
docs/controller.md.
"""

from tidelog.controller.heartbeat import BrokerControlState, BrokerHeartbeatManager
from tidelog.controller.messages import (
    AllocateProducerIdsReply,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
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
    ReplicaDirectory,
)
from tidelog.controller.partition_change import Election, PartitionChangeBuilder
from tidelog.controller.quorum_controller import QuorumController
from tidelog.controller.result import ApiError, ControllerResult

__all__ = [
    "AllocateProducerIdsReply",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "AlterPartitionItem",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AlterPartitionResult",
    "ApiError",
    "AssignReplicasToDirsRequest",
    "AssignReplicasToDirsResponse",
    "BrokerControlState",
    "BrokerHeartbeatManager",
    "BrokerHeartbeatReply",
    "BrokerHeartbeatRequest",
    "BrokerRegistrationReply",
    "BrokerRegistrationRequest",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreatePartitionsResult",
    "CreatePartitionsTopic",
    "ControllerResult",
    "DeleteTopicResult",
    "Election",
    "ElectLeadersResult",
    "ElectionType",
    "PartitionChangeBuilder",
    "QuorumController",
    "ReplicaDirectory",
]
