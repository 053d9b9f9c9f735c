"""Admin APIs that change metadata: topics, partitions, configs (through the controller).

Theory of operation. Each handler turns a kio request into the controller's own
request objects (``controller.messages``), calls the controller, publishes the
newly committed metadata to this broker, and answers with the controller's
error codes and messages. ``validate_only`` runs the controller manager's
decision without writing its records (hard state changes only by replay, so a
decision that is not written changes nothing).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Protocol

from tidelog.broker.config import (
    CONFIG_DEFS,
    broker_config_dynamic,
    config_def,
    existing_listener_refusal,
    is_password,
    is_sensitive,
    kafka_config_type,
    validate_dynamic_broker_change,
)
from tidelog.broker.topic_configs import NULL_DEFAULTS, broker_synonyms, topic_config_synonyms
from tidelog.controller.messages import (
    AlterConfigsResource,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
)
from tidelog.controller.acl_control import AclBinding, AclFilter
from tidelog.controller.reassignment import ReassignmentTarget
from tidelog.controller.feature_control import UpgradeType
from tidelog.controller.result import ApiError
from tidelog.controller.scram_control import ScramUpsertion
from tidelog.controller.client_quota_control import ClientQuotaAlteration
from tidelog.metadata.client_quotas import QuotaFilterError, quota_entity
from tidelog.metadata.client_quotas import describe as describe_client_quotas
from tidelog.metadata.authorizer import CLUSTER_NAME, AclOperation, ResourceType, matches_filter
from tidelog.controller.config_defs import CLUSTER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS
from tidelog.controller.topics import validate_topic_name
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.records import ConfigResourceType
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ZERO_UUID, ProtocolError

if TYPE_CHECKING:
    from tidelog.controller.quorum_controller import QuorumController
    from tidelog.metadata.image import MetadataImage

logger = logging.getLogger("tidelog.admin")

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32
_CONFIG_SOURCES = {"DYNAMIC_TOPIC_CONFIG": 1, "DYNAMIC_BROKER_CONFIG": 2,
                   "DYNAMIC_DEFAULT_BROKER_CONFIG": 3, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5,
                   "GROUP_CONFIG": 8}
UNKNOWN_CONFIG_TYPE, PASSWORD_CONFIG_TYPE = 0, 9          # DescribeConfigs v3+ config_type
# DescribeConfigs v3+ config_type, Kafka's numbers (DescribeConfigsResponse.ConfigType).
_CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
                 "PASSWORD": 9}


def broker_config_type(name: str) -> int:
    """Kafka's DescribeConfigs config_type of broker setting ``name``."""
    if is_password(name):
        return PASSWORD_CONFIG_TYPE
    if name in CLUSTER_CONFIGS and name not in CONFIG_DEFS:
        return _CONFIG_TYPES[CLUSTER_CONFIGS[name].type.value]
    definition = config_def(name)
    if definition is None:
        return UNKNOWN_CONFIG_TYPE
    return _CONFIG_TYPES[kafka_config_type(definition)]


def broker_config_read_only(name: str) -> bool:
    """Whether a broker setting cannot be changed while the broker runs (Kafka's read_only):
    all but KIP-226's dynamic ones (broker/config.py); a listener-prefixed or unknown name
    is read-only in Kafka's answer too."""
    return not broker_config_dynamic(name)
NO_AUTHORIZER = "No Authorizer is configured."            # Kafka's message with SECURITY_DISABLED


def _incremental_refusal(configs) -> str | None:
    """What Kafka refuses in one resource of IncrementalAlterConfigs before looking at the
    keys (INVALID_REQUEST, its messages): a key twice, a null value but for DELETE, an
    operation that is none of SET, DELETE, APPEND, SUBTRACT."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        return "Error due to duplicate config keys"
    null = [c.name for c in configs if int(c.config_operation) != DELETE and c.value is None]
    if null:
        return "Null value not supported for : " + ", ".join(null)
    unknown = [c.name for c in configs if int(c.config_operation) not in (SET, DELETE, APPEND, SUBTRACT)]
    if unknown:
        return "Unknown config operation for : " + ", ".join(unknown)
    return None


# The config resource types (Kafka's ConfigResource.Type: topic 2, broker 4, broker logger 8,
# client metrics 16, group 32) each config API knows; Kafka's AlterConfigs never knew loggers.
_KNOWN_CONFIG_RESOURCES = {ApiKey.DESCRIBE_CONFIGS: {2, 4, 8, 16, 32},
                           ApiKey.INCREMENTAL_ALTER_CONFIGS: {2, 4, 8, 16, 32},
                           ApiKey.ALTER_CONFIGS: {2, 4, 16, 32}}
_INT32_MAX = (1 << 31) - 1
_UNSUPPORTED_CONFIG_RESOURCES = {8: "BROKER_LOGGER", 16: "CLIENT_METRICS"}   # known to Kafka, not served


def invalid_config_resources(api_key: int, resources) -> dict[int, str]:
    """``{index: message}`` of the resources of a config request that Kafka refuses
    INVALID_REQUEST before it asks any ACL (so a caller without rights learns the same as
    one with them): an unknown resource type ("Unknown resource type 99"), and in
    AlterConfigs / IncrementalAlterConfigs a resource named twice ("Each resource must
    appear at most once.", every copy refused). DescribeConfigs with an unknown type is
    refused whole, as Kafka's."""
    known = _KNOWN_CONFIG_RESOURCES[api_key]
    unknown = {i: f"Unknown resource type {int(r.resource_type)}" for i, r in enumerate(resources)
               if int(r.resource_type) not in known}
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        if not unknown:
            return {}
        message = next(iter(unknown.values()))
        return {i: unknown.get(i, message) for i in range(len(resources))}
    counts: dict[tuple[int, str], int] = {}
    for r in resources:
        key = (int(r.resource_type), r.resource_name)
        counts[key] = counts.get(key, 0) + 1
    return {**{i: "Each resource must appear at most once." for i, r in enumerate(resources)
               if counts[(int(r.resource_type), r.resource_name)] > 1}, **unknown}


def _node_id(name: str) -> int | None:
    """A broker resource's name as Kafka's Integer.parseInt reads it (None: not an int)."""
    digits = name[1:] if name[:1] in ("+", "-") else name
    if not digits.isascii() or not digits.isdigit() or not -_INT32_MAX - 1 <= int(name) <= _INT32_MAX:
        return None
    return int(name)


class NodeConfig(Protocol):
    """The node's settings (a ``BrokerConfig``): typed values by Kafka's names."""

    originals: Mapping[str, str]

    def __getitem__(self, name: str) -> Any: ...


class ControllerChannel(Protocol):
    def forward(self, api_key: int, version: int, request: Any) -> Awaitable[Any]: ...


class AdminHost(Protocol):
    """What the admin APIs need from the node that serves them: a broker, or the
    controller itself (``ControllerServer``). A protocol rather than either class,
    so that they can import this module without it importing them back."""

    node_id: int
    config: NodeConfig

    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller(self) -> QuorumController: ...  # nodes with the controller role only

    @property
    def channel(self) -> ControllerChannel: ...  # brokers that forward to a remote controller

    def publish(self) -> None: ...

    def topic_config_values(self, topic: str) -> dict[str, tuple[str, str]]: ...

    def wait_for_metadata(self, predicate: Callable[[MetadataImage], bool],
                          timeout_s: float = ...) -> Awaitable[bool]: ...


class AdminApis:
    def __init__(self, broker: AdminHost, authorizer=None, receiving_broker: bool = True):
        self.broker = broker
        self.authorizer = authorizer        # server/authorization.py RequestAuthorizer, or None
        # A broker's client listener (True) checks what Kafka's receiving broker checks itself
        # (_local_refusals); the controller's (False) takes what brokers forward, any broker's.
        self.receiving_broker = receiving_broker

    def register(self, dispatcher) -> None:
        create, delete = self.handle_create_topics, self.handle_delete_topics
        if self.authorizer is not None:
            create, delete = self._authorized_create_topics, self._authorized_delete_topics
        dispatcher.register(ApiKey.CREATE_TOPICS, create, 2, 7)
        dispatcher.register(ApiKey.DELETE_TOPICS, delete, 1, 6)
        dispatcher.register(ApiKey.CREATE_ACLS, self.handle_create_acls, 1, 3)
        dispatcher.register(ApiKey.DELETE_ACLS, self.handle_delete_acls, 1, 3)
        dispatcher.register(ApiKey.DESCRIBE_ACLS, self.handle_describe_acls, 1, 3)
        dispatcher.register(ApiKey.CREATE_PARTITIONS, self.handle_create_partitions, 0, 3)
        dispatcher.register(ApiKey.ELECT_LEADERS, self.handle_elect_leaders, 0, 2)
        dispatcher.register(ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                            self.handle_alter_partition_reassignments, 0, 1)
        dispatcher.register(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                            self.handle_list_partition_reassignments, 0, 0)
        dispatcher.register(ApiKey.UNREGISTER_BROKER, self.handle_unregister_broker, 0, 0)
        dispatcher.register(ApiKey.UPDATE_FEATURES, self.handle_update_features, 0, 2)
        dispatcher.register(ApiKey.DESCRIBE_CONFIGS, self.handle_describe_configs, 1, 4)
        dispatcher.register(ApiKey.INCREMENTAL_ALTER_CONFIGS, self.handle_incremental_alter_configs, 0, 1)
        dispatcher.register(ApiKey.ALTER_CONFIGS, self.handle_alter_configs, 0, 2)
        dispatcher.register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, self.handle_alter_user_scram_credentials, 0, 0)
        dispatcher.register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                            self.handle_describe_user_scram_credentials, 0, 0)
        dispatcher.register(ApiKey.ALTER_CLIENT_QUOTAS, self.handle_alter_client_quotas, 0, 1)
        dispatcher.register(ApiKey.DESCRIBE_CLIENT_QUOTAS, self.handle_describe_client_quotas, 0, 1)

    @property
    def controller(self):
        return self.broker.controller

    # ----------------------------------------------------------------- topics

    def handle_create_topics(self, header, request):
        topics = []
        for t in request.topics:
            assignments = indexes = None
            if t.assignments:
                ordered = sorted(t.assignments, key=lambda a: a.partition_index)
                assignments = tuple(tuple(int(b) for b in a.broker_ids) for a in ordered)
                indexes = tuple(int(a.partition_index) for a in ordered)
            topics.append(CreatableTopic(
                name=t.name, num_partitions=int(t.num_partitions),
                replication_factor=int(t.replication_factor), assignments=assignments,
                configs={c.name: c.value for c in t.configs}, assignment_partitions=indexes))
        requested_configs = {t.name: t.configs for t in topics}
        if request.validate_only:
            results = self.controller.replication.create_topics(topics).response
        else:
            results = self.controller.create_topics(topics)
            self.broker.publish()
        out, answered = [], set()
        for result in results:
            if result.name in answered:
                continue                # a name given twice is answered once, as by Kafka
            answered.add(result.name)
            entry = {"name": result.name, "topic_id": result.topic_id or ZERO_UUID,
                     "error_code": int(result.error_code), "error_message": result.error_message,
                     "topic_config_error_code": 0, "num_partitions": result.num_partitions,
                     "replication_factor": result.replication_factor, "configs": []}
            if result.error_code == ErrorCode.NONE:
                values = self.broker.topic_config_values(result.name)
                if request.validate_only:       # not created: its configs are the request's
                    values.update({k: (v, "DYNAMIC_TOPIC_CONFIG")
                                   for k, v in requested_configs.get(result.name, {}).items() if k in values})
                entry["configs"] = [
                    {"name": name, "value": None if is_sensitive(name) else value, "read_only": False,
                     "config_source": _CONFIG_SOURCES[source], "is_sensitive": is_sensitive(name)}
                    for name, (value, source) in sorted(values.items())]
            out.append(entry)
        return {"throttle_time": 0, "topics": out}

    def handle_delete_topics(self, header, request):
        names, ids, invalid = _delete_topics_entries(request)
        if not self.broker.config["delete.topic.enable"]:
            return {"throttle_time": 0, "responses": invalid + [
                {"name": n, "topic_id": ZERO_UUID, "error_code": int(ErrorCode.TOPIC_DELETION_DISABLED)}
                for n in names]}
        results = self.controller.delete_topics(names, ids)
        self.broker.publish()
        return {"throttle_time": 0, "responses": invalid + [
            {"name": r.name, "topic_id": r.topic_id or ZERO_UUID, "error_code": int(r.error_code),
             "error_message": r.error_message} for r in results]}

    def handle_create_partitions(self, header, request):
        topics = []
        for t in request.topics:
            assignments = None
            if t.assignments:
                assignments = tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments)
            topics.append(CreatePartitionsTopic(t.name, int(t.count), assignments))
        if request.validate_only:
            results = self.controller.replication.create_partitions(topics).response
        else:
            results = self.controller.create_partitions(topics)
            self.broker.publish()
        return {"throttle_time": 0, "results": [
            {"name": r.name, "error_code": int(r.error_code), "error_message": r.error_message}
            for r in results]}

    def handle_elect_leaders(self, header, request):
        """ElectLeaders (PREFERRED, or UNCLEAN from v1); null partitions = every partition."""
        election = ElectionType(int(getattr(request, "election_type", ElectionType.PREFERRED)))
        partitions = None if request.topic_partitions is None else [
            TopicPartition(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
        results = self.controller.elect_leaders(election, partitions)
        self.broker.publish()
        by_topic: dict[str, list] = {}
        for result in results:
            by_topic.setdefault(result.partition.topic, []).append(
                {"partition_id": result.partition.partition, "error_code": int(result.error_code),
                 "error_message": result.error_message})
        return {"throttle_time": 0, "error_code": 0, "replica_election_results": [
            {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()]}

    # ---------------------------------------------------------------- reassignment (KIP-455)

    def handle_alter_partition_reassignments(self, header, request):
        """Start, change or cancel (null replicas) partition moves (controller/reassignment.py)."""
        targets = [ReassignmentTarget(t.name, int(p.partition_index),
                                      None if p.replicas is None else tuple(int(b) for b in p.replicas))
                   for t in request.topics for p in t.partitions]
        allow = bool(getattr(request, "allow_replication_factor_change", True))
        results = self.controller.alter_partition_reassignments(targets, allow)
        self.broker.publish()
        by_topic: dict[str, list] = {}
        for result in results:
            by_topic.setdefault(result.topic, []).append(
                {"partition_index": result.partition_id, "error_code": int(result.error_code),
                 "error_message": result.error_message})
        return {"throttle_time": 0, "allow_replication_factor_change": allow, "error_code": 0,
                "error_message": None, "responses": [
                    {"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}

    def handle_list_partition_reassignments(self, header, request):
        """The ongoing reassignments, of every partition (null topics) or of those asked."""
        topics = None if request.topics is None else {
            t.name: [int(p) for p in t.partition_indexes] for t in request.topics}
        by_topic: dict[str, list] = {}
        for ongoing in self.controller.list_partition_reassignments(topics):
            by_topic.setdefault(ongoing.topic, []).append(
                {"partition_index": ongoing.partition_id, "replicas": list(ongoing.replicas),
                 "adding_replicas": list(ongoing.adding_replicas),
                 "removing_replicas": list(ongoing.removing_replicas)})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": [
            {"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}

    def handle_unregister_broker(self, header, request):
        """UnregisterBroker (kafka-cluster unregister): a retired broker's registration goes,
        and with it its ISR memberships and leaderships (controller/broker_lifecycle.py)."""
        error = self.controller.unregister_broker(int(request.broker_id))
        self.broker.publish()
        return {"throttle_time": 0, "error_code": int(error.error_code), "error_message": error.message}

    # ---------------------------------------------------------------- features (KIP-584)

    def handle_update_features(self, header, request):
        """UpdateFeatures: the controller checks every level against its own range and
        every registered broker's, all or nothing (controller/feature_control.py)."""
        updates, names = _feature_updates(request)
        if updates is None:
            error = ApiError(ErrorCode.INVALID_REQUEST, f"Feature {names[0]} appears more than once.")
        else:
            levels, upgrade_types = updates
            error = self.controller.update_features(levels, upgrade_types,
                                                    bool(getattr(request, "validate_only", False)))
            self.broker.publish()
        return _update_features_response(header.api_version, names, error)

    # ---------------------------------------------------------------- configs

    def handle_describe_configs(self, header, request):
        invalid = invalid_config_resources(ApiKey.DESCRIBE_CONFIGS, request.resources)
        if invalid:                 # an unknown resource type: the whole request, as Kafka
            return {"throttle_time": 0, "results": [
                {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": invalid[i],
                 "resource_type": int(r.resource_type), "resource_name": r.resource_name, "configs": []}
                for i, r in enumerate(request.resources)]}
        results = []
        for resource in request.resources:
            rtype, name = int(resource.resource_type), resource.resource_name
            keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
            # Kafka's error message is empty, not null, when it has none to give.
            entry = {"error_code": 0, "error_message": "", "resource_type": rtype,
                     "resource_name": name, "configs": []}
            if rtype == TOPIC_RESOURCE and name == "":
                entry.update(error_code=int(ErrorCode.INVALID_TOPIC_EXCEPTION),
                             error_message="Topic name is invalid: the empty string is not allowed")
            elif rtype == TOPIC_RESOURCE:
                if not self.broker.image.contains_topic(name):
                    entry.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    values = self.broker.topic_config_values(name)
                    entry["configs"] = [self._config_entry(k, v, s, request, topic_config_synonyms(
                                            self.broker.image, self.broker.config, self.broker.node_id, name, k),
                                            config_type=_CONFIG_TYPES.get(TOPIC_CONFIGS[k].type.value,
                                                                          UNKNOWN_CONFIG_TYPE)
                                            if k in TOPIC_CONFIGS else UNKNOWN_CONFIG_TYPE,
                                            documentation=TOPIC_CONFIGS[k].doc if k in TOPIC_CONFIGS else None)
                                        for k, (v, s) in sorted(values.items())
                                        if keys is None or k in keys]
            elif rtype == BROKER_RESOURCE and name == "":
                # The cluster-wide defaults: only what is set, as Kafka answers.
                entry["configs"] = [self._config_entry(k, v, "DYNAMIC_DEFAULT_BROKER_CONFIG", request,
                                                       [(k, v, "DYNAMIC_DEFAULT_BROKER_CONFIG")],
                                                       read_only=broker_config_read_only(k),
                                                       config_type=broker_config_type(k),
                                                       documentation=self._broker_doc(k))
                                    for k, v in self._dynamic_defaults().items() if keys is None or k in keys]
            elif rtype == GROUP_RESOURCE:
                if name == "":
                    entry.update(error_code=int(ErrorCode.INVALID_REQUEST),
                                 error_message="Group name must not be empty")
                else:
                    entry["configs"] = [self._config_entry(k, v, s, request, synonyms, config_type=3,
                                                           documentation=GROUP_CONFIGS[k].doc)
                                        for k, (v, s, synonyms) in self._group_values(name).items()
                                        if keys is None or k in keys]
            elif rtype == BROKER_RESOURCE:
                if _node_id(name) is None:
                    entry.update(error_code=int(ErrorCode.INVALID_REQUEST),
                                 error_message=f"Broker id must be an integer, but it is: {name}")
                elif name != str(self.broker.node_id):
                    entry.update(error_code=int(ErrorCode.INVALID_REQUEST),
                                 error_message=f"Unexpected broker id, expected {self.broker.node_id} or empty "
                                               f"string, but received {name}")
                else:
                    entry["configs"] = [self._config_entry(k, v, s, request, broker_synonyms(
                                            self.broker.image, self.broker.config, self.broker.node_id, [k]),
                                            read_only=broker_config_read_only(k),
                                            config_type=broker_config_type(k), documentation=self._broker_doc(k))
                                        for k, (v, s) in sorted(self._broker_values().items())
                                        if keys is None or k in keys]
            else:
                entry.update(error_code=int(ErrorCode.INVALID_REQUEST),
                             error_message=f"resource type {rtype} is not supported")
            results.append(entry)
        return {"throttle_time": 0, "results": results}

    def _dynamic_defaults(self) -> dict[str, str]:
        from tidelog.metadata.image import ConfigResource
        return dict(sorted(self.broker.image.configs.get(ConfigResource(int(ConfigResourceType.BROKER), ""),
                                                         {}).items()))

    @staticmethod
    def _broker_doc(name: str) -> str | None:
        definition = config_def(name)
        if definition is not None and definition.doc:
            return definition.doc
        topic = CLUSTER_CONFIGS.get(name)
        return topic.doc if topic is not None else None

    def _group_values(self, group_id: str) -> dict[str, tuple[str, str, list]]:
        """``{name: (value, source, synonyms)}`` of a group's configs: its own (GROUP_CONFIG),
        else the broker's setting (Kafka's synonym, static or default)."""
        from tidelog.metadata.image import ConfigResource
        own = self.broker.image.configs.get(ConfigResource(int(ConfigResourceType.GROUP), group_id), {})
        out = {}
        for name, definition in GROUP_CONFIGS.items():
            source = "STATIC_BROKER_CONFIG" if definition.synonym in self.broker.config.originals else "DEFAULT_CONFIG"
            synonyms = [(definition.synonym, str(self.broker.config[definition.synonym]), source)]
            if name in own:
                out[name] = (own[name], "GROUP_CONFIG", [(name, own[name], "GROUP_CONFIG")] + synonyms)
            else:
                out[name] = (synonyms[0][1], source, synonyms)
        return out

    def _broker_values(self) -> dict[str, tuple[str | None, str]]:
        """``{name: (value, source)}`` of this broker: every setting tidelog has, the
        listener-prefixed ones of its server.properties, then (each overriding the one
        before, Kafka's order) the cluster-wide dynamic defaults and this broker's own
        dynamic settings (its TLS stores, from IncrementalAlterConfigs on BROKER <id>).
        Secrets are still in here: ``_config_entry`` hides them."""
        from tidelog.metadata.image import ConfigResource
        configs = self.broker.image.configs
        cluster = configs.get(ConfigResource(int(ConfigResourceType.BROKER), ""), {})
        own = configs.get(ConfigResource(int(ConfigResourceType.BROKER), str(self.broker.node_id)), {})
        originals = self.broker.config.originals
        out = {}
        for name in CONFIG_DEFS:
            value = self.broker.config[name]
            if isinstance(value, list):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = str(value).lower()
            source = "STATIC_BROKER_CONFIG" if name in originals else "DEFAULT_CONFIG"
            out[name] = (None if value is None else str(value), source)
        for name, definition in CLUSTER_CONFIGS.items():        # topic settings' broker-level names
            if name not in out:
                default = None if name in NULL_DEFAULTS else definition.default
                out[name] = ((originals[name], "STATIC_BROKER_CONFIG") if name in originals
                             else (default, "DEFAULT_CONFIG"))
        for name, value in originals.items():
            if name.startswith("listener.name."):
                out[name] = (value, "STATIC_BROKER_CONFIG")
        for name, value in cluster.items():
            out[name] = (value, "DYNAMIC_DEFAULT_BROKER_CONFIG")
        for name, value in own.items():
            out[name] = (value, "DYNAMIC_BROKER_CONFIG")
        return out

    @staticmethod
    def _config_entry(name: str, value, source: str, request, synonyms=None, read_only: bool = False,
                      config_type: int | None = None, documentation: str | None = None) -> dict:
        """One DescribeConfigs entry; a secret (``broker.config.is_sensitive``: a PASSWORD
        setting in any listener form, or a name of unknown type) has a null value, in its
        synonyms too, and ``is_sensitive`` true, as Kafka answers every version.
        ``synonyms``: Kafka's chain, ``(name, value, source)`` most specific first
        (broker/topic_configs.py; empty when no source names the setting); None: the entry
        itself. ``config_type``: Kafka's number for the setting's type (v3+)."""
        sensitive = is_sensitive(name)
        if sensitive:
            value = None
        if config_type is None:
            config_type = PASSWORD_CONFIG_TYPE if is_password(name) else UNKNOWN_CONFIG_TYPE
        entry = {"name": name, "value": value, "read_only": read_only,
                 "config_source": _CONFIG_SOURCES[source], "is_sensitive": sensitive, "synonyms": [],
                 "config_type": config_type,
                 "documentation": (documentation or None) if getattr(request, "include_documentation", False)
                 else None}
        if getattr(request, "include_synonyms", False):
            entry["synonyms"] = [{"name": n, "value": None if sensitive else v, "source": _CONFIG_SOURCES[s]}
                                 for n, v, s in synonyms] if synonyms is not None else \
                [{"name": name, "value": value, "source": _CONFIG_SOURCES[source]}]
        return entry

    def _local_refusals(self, request) -> dict[tuple[int, str], tuple[ErrorCode, str]]:
        """What the broker that receives an alteration refuses itself, before the controller
        (Kafka's ConfigAdminManager): another broker's settings (the admin client sends
        those to that broker), a listener setting without its prefix. The controller's
        listener (requests brokers forward) takes any broker's."""
        if not self.receiving_broker:
            return {}
        own, refused = str(self.broker.node_id), {}
        listener = self.broker.config.listener_endpoints()[0][0]
        for r in request.resources:
            if int(r.resource_type) != BROKER_RESOURCE or r.resource_name == "":
                continue
            if _node_id(r.resource_name) is None:
                refused[(BROKER_RESOURCE, r.resource_name)] = (
                    ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {r.resource_name}")
                continue
            if r.resource_name != own:
                refused[(BROKER_RESOURCE, r.resource_name)] = (
                    ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {own}, but received {r.resource_name}")
                continue
            changes = {c.name: None if int(getattr(c, "config_operation", SET)) == DELETE else c.value
                       for c in r.configs}
            message = existing_listener_refusal(changes, listener)
            if message is not None and validate_dynamic_broker_change(own, changes) is None:
                refused[(BROKER_RESOURCE, r.resource_name)] = (ErrorCode.INVALID_REQUEST, message)
        return refused

    def _refused_before_the_controller(self, header, request) -> tuple[Any, list[dict]]:
        """The request without the resources refused before the controller sees them, and
        their answers, one per resource given (a duplicate's every copy): those Kafka
        refuses as invalid whoever asks (``invalid_config_resources``), then what the
        receiving broker refuses itself (``_local_refusals``)."""
        invalid = invalid_config_resources(header.api_key, request.resources)
        denied = [{"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": invalid[i],
                   "resource_type": int(r.resource_type), "resource_name": r.resource_name}
                  for i, r in enumerate(request.resources) if i in invalid]
        request = dataclasses.replace(request, resources=tuple(
            r for i, r in enumerate(request.resources) if i not in invalid))
        refused = self._local_refusals(request)
        denied += [{"error_code": int(code), "error_message": message, "resource_type": rtype, "resource_name": name}
                   for (rtype, name), (code, message) in refused.items()]
        return dataclasses.replace(request, resources=tuple(
            r for r in request.resources if (int(r.resource_type), r.resource_name) not in refused)), denied

    def _alter(self, header, request, incremental: bool):
        request, denied = self._refused_before_the_controller(header, request)
        resources, errors = [], {}
        for resource in request.resources:
            rtype, name = int(resource.resource_type), resource.resource_name
            if rtype == TOPIC_RESOURCE and name == "":
                errors[(rtype, name)] = (ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
                continue
            if rtype == TOPIC_RESOURCE:
                ctype = int(ConfigResourceType.TOPIC)
            elif rtype == BROKER_RESOURCE and name != "" and _node_id(name) is None:
                errors[(rtype, name)] = (ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
                continue
            elif rtype == BROKER_RESOURCE:
                ctype = int(ConfigResourceType.BROKER)        # KIP-226: a broker id, or "" (cluster default)
            elif rtype == GROUP_RESOURCE:
                ctype = int(ConfigResourceType.GROUP)
            else:
                errors[(rtype, name)] = (ErrorCode.INVALID_REQUEST, f"resource type {rtype} "
                                         f"({_UNSUPPORTED_CONFIG_RESOURCES.get(rtype)}) cannot be altered: "
                                         "tidelog alters topic, broker and group configs")
                continue
            changes: dict[str, str | None] = {}
            list_changes: dict[str, tuple[str, str]] = {}    # APPEND / SUBTRACT: the controller resolves them
            if incremental:
                refusal = _incremental_refusal(resource.configs)
                if refusal is not None:
                    errors[(rtype, name)] = (ErrorCode.INVALID_REQUEST, refusal)
                    continue
                for c in resource.configs:
                    op = int(c.config_operation)
                    if op == SET:
                        changes[c.name] = c.value
                    elif op == DELETE:
                        changes[c.name] = None
                    else:
                        list_changes[c.name] = ("APPEND" if op == APPEND else "SUBTRACT", c.value)
            else:
                # AlterConfigs replaces the whole set: keys not given are deleted.
                current = self.broker.image.configs
                from tidelog.metadata.image import ConfigResource
                for key in current.get(ConfigResource(ctype, name), {}):
                    changes[key] = None
                for c in resource.configs:
                    changes[c.name] = c.value
            if (rtype, name) not in errors:
                resources.append(AlterConfigsResource(ctype, name, changes, list_changes))
        if request.validate_only:
            results = self.controller.configs.incremental_alter_configs(
                resources, self.controller.replication.topic_exists).response
        else:
            results = self.controller.incremental_alter_configs(resources)
            self.broker.publish()
        out = denied + [{"error_code": int(code), "error_message": message, "resource_type": rtype,
                         "resource_name": name} for (rtype, name), (code, message) in errors.items()]
        for r in results:
            rtype = int(r.resource_type)                # ConfigResourceType: Kafka's wire numbers
            out.append({"error_code": int(r.error_code), "error_message": r.error_message,
                        "resource_type": rtype, "resource_name": r.resource_name})
        return {"throttle_time": 0, "responses": out}

    def handle_incremental_alter_configs(self, header, request):
        return self._alter(header, request, incremental=True)

    def handle_alter_configs(self, header, request):
        return self._alter(header, request, incremental=False)

    # ----------------------------------------------------------------- ACLs

    def acls_disabled(self) -> bool:
        """No authorizer on this node (``authorizer.class.name`` unset): as Kafka's AclApis,
        CreateAcls / DescribeAcls / DeleteAcls answer SECURITY_DISABLED and nothing is
        stored — ACLs nobody enforces would only look like protection. Decided by the
        node that receives the request (a broker without an authorizer answers without
        forwarding; the controller by its own settings)."""
        if self.authorizer is not None:
            return False
        try:
            name = self.broker.config["authorizer.class.name"]
        except KeyError:
            return True
        return not (name or "").strip()

    def _may_alter_cluster(self) -> bool:
        return self.authorizer is None or self.authorizer.allowed(AclOperation.ALTER, ResourceType.CLUSTER,
                                                                  CLUSTER_NAME)

    def _authorized_create_topics(self, header, request):
        """CREATE on the cluster, or on each topic (Kafka's rule); refused ones answered here."""
        cluster_ok = self.authorizer.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        refused = [t for t in request.topics if not cluster_ok
                   and not self.authorizer.topic_allowed(AclOperation.CREATE, t.name)]
        denied = [{"name": t.name, "topic_id": ZERO_UUID, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                   "error_message": "Authorization failed.", "num_partitions": -1, "replication_factor": -1,
                   "configs": []} for t in refused]
        return self._merge(header, dataclasses.replace(request, topics=tuple(
            t for t in request.topics if t not in refused)), self.handle_create_topics, "topics", denied)

    def _authorized_delete_topics(self, header, request):
        names = list(getattr(request, "topic_names", None) or [])
        # An entry with a name and an id is refused as invalid before any ACL (as Kafka).
        named = [t for t in getattr(request, "topics", None) or [] if getattr(t, "name", None)
                 and getattr(t, "topic_id", None) in (None, ZERO_UUID)]
        refused = {n for n in names + [t.name for t in named]
                   if not self.authorizer.topic_allowed(AclOperation.DELETE, n)}
        denied = [{"name": n, "topic_id": ZERO_UUID, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                   "error_message": "Authorization failed."} for n in sorted(refused)]
        kept = {}
        if hasattr(request, "topic_names") and request.topic_names is not None:
            kept["topic_names"] = tuple(n for n in request.topic_names if n not in refused)
        if getattr(request, "topics", None) is not None:
            kept["topics"] = tuple(t for t in request.topics if getattr(t, "name", None) not in refused)
        return self._merge(header, dataclasses.replace(request, **kept), self.handle_delete_topics,
                           "responses", denied)

    @staticmethod
    def _merge(header, request, handler, field: str, denied: list):
        if not denied:
            return handler(header, request)
        if not getattr(request, "topics", None) and not getattr(request, "topic_names", None):
            return {"throttle_time": 0, field: denied}
        result = handler(header, request)

        def add(body):
            if isinstance(body, dict):
                return {**body, field: list(body[field]) + denied}
            return dataclasses.replace(body, **{field: tuple(getattr(body, field)) + tuple(
                _entity_like(getattr(body, field), d) for d in denied)})
        if isinstance(result, dict):
            return add(result)

        async def later():
            return add(await result)
        return later()

    def handle_create_acls(self, header, request):
        if self.acls_disabled():
            return {"throttle_time": 0, "results": [
                {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": NO_AUTHORIZER}
                for _ in request.creations]}
        if not self._may_alter_cluster():
            return {"throttle_time": 0, "results": [
                {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": "Authorization failed."}
                for _ in request.creations]}
        results = self.controller.create_acls([AclBinding(
            int(c.resource_type), c.resource_name, int(c.resource_pattern_type), c.principal, c.host,
            int(c.operation), int(c.permission_type)) for c in request.creations])
        self.broker.publish()
        return {"throttle_time": 0, "results": [{"error_code": int(r.error_code), "error_message": r.error_message}
                                                for r in results]}

    def handle_delete_acls(self, header, request):
        if self.acls_disabled():
            return {"throttle_time": 0, "filter_results": [
                {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": NO_AUTHORIZER, "matching_acls": []}
                for _ in request.filters]}
        if not self._may_alter_cluster():
            return {"throttle_time": 0, "filter_results": [
                {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": "Authorization failed.",
                 "matching_acls": []} for _ in request.filters]}
        results = self.controller.delete_acls([AclFilter(
            int(f.resource_type_filter), f.resource_name_filter, int(f.pattern_type_filter), f.principal_filter,
            f.host_filter, int(f.operation), int(f.permission_type)) for f in request.filters])
        self.broker.publish()
        return {"throttle_time": 0, "filter_results": [
            {"error_code": int(r.error_code), "error_message": r.error_message, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": a.resource_type,
                 "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
                 "host": a.host, "operation": a.operation, "permission_type": a.permission_type}
                for a in r.matching]} for r in results]}

    def handle_describe_acls(self, header, request):
        """From this node's metadata image (DESCRIBE on the cluster, checked by the gate)."""
        if self.acls_disabled():
            return {"throttle_time": 0, "error_code": int(ErrorCode.SECURITY_DISABLED),
                    "error_message": NO_AUTHORIZER, "resources": []}
        matching = [a for a in self.broker.image.acls.values() if matches_filter(
            a, int(request.resource_type_filter), request.resource_name_filter, int(request.pattern_type_filter),
            request.principal_filter, request.host_filter, int(request.operation), int(request.permission_type))]
        resources: dict[tuple, list] = {}
        for a in sorted(matching, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal)):
            resources.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(
                {"principal": a.principal, "host": a.host, "operation": a.operation,
                 "permission_type": a.permission_type})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()]}

    # ----------------------------------------------------------------- SCRAM users (KIP-554)

    def handle_alter_user_scram_credentials(self, header, request):
        results = self.controller.alter_user_scram_credentials(
            [(d.name, int(d.mechanism)) for d in request.deletions],
            [ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
             for u in request.upsertions])
        self.broker.publish()
        return {"throttle_time": 0, "results": [
            {"user": r.user, "error_code": int(r.error_code), "error_message": r.error_message} for r in results]}

    def handle_describe_user_scram_credentials(self, header, request):
        """From this node's metadata image: mechanisms and iterations, never keys."""
        by_user: dict[str, list] = {}
        for (name, mechanism), credential in self.broker.image.scram_credentials.items():
            by_user.setdefault(name, []).append({"mechanism": mechanism, "iterations": credential.iterations})
        # Kafka's ScramImage.describe: a null or an empty list of users asks for every user.
        names = sorted(by_user) if not request.users else [u.name for u in request.users]
        results, seen = [], set()
        for name in names:
            if name in seen:
                results.append({"user": name, "error_code": int(ErrorCode.DUPLICATE_RESOURCE),
                                "error_message": "the user is named twice", "credential_infos": []})
                continue
            seen.add(name)
            if name not in by_user:
                results.append({"user": name, "error_code": int(ErrorCode.RESOURCE_NOT_FOUND),
                                "error_message": "no credentials for this user", "credential_infos": []})
                continue
            results.append({"user": name, "error_code": 0, "error_message": None,
                            "credential_infos": sorted(by_user[name], key=lambda c: c["mechanism"])})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}

    # ----------------------------------------------------------------- client quotas (KIP-546)

    def handle_alter_client_quotas(self, header, request):
        results = self.controller.alter_client_quotas(_quota_alterations(request), bool(request.validate_only))
        self.broker.publish()
        return {"throttle_time": 0, "entries": [
            {"error_code": int(error.error_code), "error_message": error.message,
             "entity": [{"entity_type": t, "entity_name": n} for t, n in entity]} for entity, error in results]}

    def handle_describe_client_quotas(self, header, request):
        """From this node's metadata image (Kafka's ClientQuotasImage.describe)."""
        components = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
        try:
            matched = describe_client_quotas(self.broker.image.client_quotas, components, bool(request.strict))
        except QuotaFilterError as e:
            return {"throttle_time": 0, "error_code": int(e.error_code), "error_message": e.message, "entries": None}
        # Kafka answers a success with an empty message, not a null one.
        return {"throttle_time": 0, "error_code": 0, "error_message": "", "entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
             "values": [{"key": k, "value": v} for k, v in sorted(values.items())]} for entity, values in matched]}

    def auto_create(self, topics: list[CreatableTopic]) -> dict[str, ErrorCode]:
        """Create topics for Metadata's auto-creation (and the internal topics the
        coordinators create on first use); returns errors by name."""
        results = self.controller.create_topics(topics)
        self.broker.publish()
        out = {}
        for result in results:
            if result.error_code == ErrorCode.NONE:
                logger.info("auto-created topic %s with %d partitions", result.name, result.num_partitions)
            elif result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                out[result.name] = result.error_code
        return out


def _quota_alterations(request) -> list[ClientQuotaAlteration]:
    """AlterClientQuotas' entries as the controller's alterations (a removal: value None)."""
    return [ClientQuotaAlteration(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                                  tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops))
            for entry in request.entries]


def _delete_topics_entries(request) -> tuple[list[str], list, list[dict]]:
    """DeleteTopics' names and ids to delete, and the entries Kafka's controller refuses
    before anything else (INVALID_REQUEST, in its words): a name and an id together,
    neither, or a name or id given twice (answered once)."""
    entries = [(n, None) for n in getattr(request, "topic_names", None) or []] + [
        (getattr(t, "name", None) or None, None if getattr(t, "topic_id", None) in (None, ZERO_UUID) else t.topic_id)
        for t in getattr(request, "topics", None) or []]
    counts: dict = {}
    for name, topic_id in entries:
        counts[name or topic_id] = counts.get(name or topic_id, 0) + 1
    names, ids, invalid, answered = [], [], [], set()

    def refuse(name, topic_id, message):
        invalid.append({"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": int(ErrorCode.INVALID_REQUEST),
                        "error_message": message})
    for name, topic_id in entries:
        if name is not None and topic_id is not None:
            refuse(name, topic_id, "You may not specify both topic name and topic id.")
        elif name is None and topic_id is None:
            refuse(None, None, "Neither topic name nor id were specified.")
        elif counts[name or topic_id] > 1:
            if (name or topic_id) not in answered:
                answered.add(name or topic_id)
                refuse(name, None, "Duplicate topic name.") if name else refuse(None, topic_id, "Duplicate topic id.")
        elif name is not None:
            names.append(name)
        else:
            ids.append(topic_id)
    return names, ids, invalid


class ForwardingAdminApis(AdminApis):
    """A broker without the controller role forwards metadata changes to it (as
    Kafka's brokers forward CreateTopics & co. to the KRaft controller), then waits
    briefly until its own metadata shows the change so the client's next request
    sees it. DescribeConfigs is answered locally from the metadata image."""

    def _forward(self, header, request, settled=None):
        async def forward():
            response = await self.broker.channel.forward(header.api_key, header.api_version, request)
            if settled is not None and not getattr(request, "validate_only", False):
                await self.broker.wait_for_metadata(settled)
            return response
        return forward()

    def handle_create_topics(self, header, request):
        names = [t.name for t in request.topics]
        return self._forward(header, request, lambda image: all(image.contains_topic(n) for n in names))

    def handle_delete_topics(self, header, request):
        names, _, _ = _delete_topics_entries(request)      # not the ones refused as invalid
        return self._forward(header, request, lambda image: not any(image.contains_topic(n) for n in names))

    def handle_create_partitions(self, header, request):
        return self._forward(header, request)

    def handle_elect_leaders(self, header, request):
        return self._forward(header, request)

    def handle_alter_partition_reassignments(self, header, request):
        return self._forward(header, request)

    def handle_list_partition_reassignments(self, header, request):
        return self._forward(header, request)

    def handle_unregister_broker(self, header, request):
        broker_id = int(request.broker_id)
        return self._forward(header, request, lambda image: broker_id not in image.brokers)

    def handle_incremental_alter_configs(self, header, request):
        return self._forward_alter(header, request)

    def _forward_alter(self, header, request):
        """Forward what this broker does not refuse itself (``_refused_before_the_controller``);
        answer both."""
        kept, denied = self._refused_before_the_controller(header, request)
        if not denied:
            return self._forward(header, request)
        if not kept.resources:
            return {"throttle_time": 0, "responses": denied}

        async def forward():
            response = await self._forward(header, kept)
            return dataclasses.replace(response, responses=tuple(response.responses) + tuple(
                _entity_like(response.responses, d) for d in denied))
        return forward()

    def handle_update_features(self, header, request):
        async def forward():
            response = await self.broker.channel.forward(header.api_key, header.api_version, request)
            updates, _ = _feature_updates(request)
            if int(getattr(response.error_code, "value", response.error_code)) == 0 and updates is not None \
                    and not getattr(request, "validate_only", False):
                levels = updates[0]
                await self.broker.wait_for_metadata(lambda image: all(
                    image.features.get(name, 0) == level for name, level in levels.items()))
            return response
        return forward()

    def handle_alter_configs(self, header, request):
        return self._forward_alter(header, request)

    def handle_create_acls(self, header, request):
        if self.acls_disabled() or not self._may_alter_cluster():   # answered here, not forwarded
            return super().handle_create_acls(header, request)
        return self._forward_acls(header, request)

    def handle_delete_acls(self, header, request):
        if self.acls_disabled() or not self._may_alter_cluster():
            return super().handle_delete_acls(header, request)
        return self._forward_acls(header, request)

    def _forward_acls(self, header, request):
        async def forward():
            response = await self.broker.channel.forward(header.api_key, header.api_version, request)
            # The client's next request through this broker must meet the new ACLs.
            if header.api_key == ApiKey.CREATE_ACLS:
                wanted = {(int(c.resource_type), c.resource_name, int(c.resource_pattern_type), c.principal, c.host,
                           int(c.operation), int(c.permission_type))
                          for c, r in zip(request.creations, response.results)
                          if int(getattr(r.error_code, "value", r.error_code)) == 0}
                await self.broker.wait_for_metadata(lambda image: wanted <= {
                    (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation,
                     a.permission_type) for a in image.acls.values()})
            else:
                await self.broker.wait_for_metadata(lambda image: not any(matches_filter(
                    a, int(f.resource_type_filter), f.resource_name_filter, int(f.pattern_type_filter),
                    f.principal_filter, f.host_filter, int(f.operation), int(f.permission_type))
                    for f in request.filters for a in image.acls.values()))
            return response
        return forward()

    def handle_alter_user_scram_credentials(self, header, request):
        async def forward():
            response = await self.broker.channel.forward(header.api_key, header.api_version, request)
            done = {r.user for r in response.results if int(getattr(r.error_code, "value", r.error_code)) == 0}
            upserted = {(u.name, int(u.mechanism)) for u in request.upsertions if u.name in done}
            deleted = {(d.name, int(d.mechanism)) for d in request.deletions if d.name in done}
            # The next login must see the change: wait until this broker's image has it.
            await self.broker.wait_for_metadata(lambda image: upserted <= set(image.scram_credentials)
                                                and not deleted & set(image.scram_credentials))
            return response
        return forward()

    def handle_alter_client_quotas(self, header, request):
        async def forward():
            response = await self.broker.channel.forward(header.api_key, header.api_version, request)
            if request.validate_only:
                return response
            done = {quota_entity((e.entity_type, e.entity_name) for e in r.entity)
                    for r in response.entries if int(getattr(r.error_code, "value", r.error_code)) == 0}
            wanted = [(quota_entity(a.entity), key, value) for a in _quota_alterations(request)
                      if quota_entity(a.entity) in done for key, value in a.ops]
            # The next request through this broker must meet the new quotas.
            await self.broker.wait_for_metadata(lambda image: all(
                image.client_quotas.get(entity, {}).get(key) == value for entity, key, value in wanted))
            return response
        return forward()

    def auto_create(self, topics: list[CreatableTopic]) -> dict[str, ErrorCode]:
        """Ask the controller in the background; the client retries on LEADER_NOT_AVAILABLE.
        A name the controller would refuse is answered INVALID_TOPIC_EXCEPTION at once
        (Kafka's KafkaApis checks ``Topic.isValid`` before auto-creating), so the
        client does not retry it forever."""
        out: dict[str, ErrorCode] = {}
        for topic in topics:
            invalid = validate_topic_name(topic.name)
            if not invalid.is_success:
                out[topic.name] = invalid.error_code
        topics = [topic for topic in topics if topic.name not in out]
        if not topics:
            return out

        async def create():
            try:
                await self.broker.channel.forward(ApiKey.CREATE_TOPICS, 7, {
                    "topics": [{"name": t.name, "num_partitions": t.num_partitions,
                                "replication_factor": t.replication_factor, "assignments": [],
                                "configs": [{"name": k, "value": v} for k, v in (t.configs or {}).items()]}
                               for t in topics],
                    "timeout": 30_000, "validate_only": False})
            except (OSError, ConnectionError, asyncio.TimeoutError, ProtocolError) as e:  # the client asks again
                logger.warning("auto-creating %s failed: %s", [t.name for t in topics], e)
        asyncio.get_running_loop().create_task(create())
        return {**out, **{t.name: ErrorCode.LEADER_NOT_AVAILABLE for t in topics}}


def _entity_like(items, data: dict):
    """``data`` as an element of the kio tuple ``items`` (to extend a forwarded response)."""
    from tidelog.protocol.codec import to_entity
    return to_entity(type(items[0]), data) if items else data


def _feature_updates(request) -> tuple[tuple[dict[str, int], dict[str, int]] | None, list[str]]:
    """``((levels, upgrade types), names)`` of an UpdateFeatures request; ``(None, [the
    name given twice])`` if a feature is named twice. v0's ``allow_downgrade`` is a safe
    downgrade (Kafka's ``UpdateFeaturesRequest.upgradeTypeOrDefault``)."""
    levels: dict[str, int] = {}
    upgrade_types: dict[str, int] = {}
    names = [u.feature for u in request.feature_updates]
    for update in request.feature_updates:
        if update.feature in levels:
            return None, [update.feature]
        levels[update.feature] = int(update.max_version_level)
        if hasattr(update, "upgrade_type"):
            upgrade_types[update.feature] = int(update.upgrade_type)
        else:
            upgrade_types[update.feature] = (UpgradeType.SAFE_DOWNGRADE if update.allow_downgrade
                                             else UpgradeType.UPGRADE)
    return (levels, upgrade_types), names


def _update_features_response(version: int, names: list[str], error) -> dict:
    """Kafka 4's answer: one error for the request; before v2 also one result per feature."""
    body = {"throttle_time": 0, "error_code": int(error.error_code), "error_message": error.message}
    if version < 2:
        body["results"] = [{"feature": name, "error_code": int(error.error_code), "error_message": error.message}
                           for name in names]
    return body
