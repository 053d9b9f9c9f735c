"""Who may do what, per request: ACLs on every listener (``authorizer.class.name``).

Theory of operation. With an authorizer configured (Kafka's StandardAuthorizer
class name, or ``tidelog``), every request is checked against the ACLs of the
node's metadata image (``metadata/authorizer.py`` has the rules) for the
connection's principal (from TLS or SASL; ``User:ANONYMOUS`` otherwise) and
client address. Without one, nothing is checked (Kafka's default).

Two ways, by API:

* **in the handler**, per topic, answering Kafka's per-item errors: Produce (WRITE
  topic; WRITE transactional id), Fetch (READ topic; a follower's: CLUSTER_ACTION),
  Metadata (DESCRIBE topic: unlisted when not allowed, TOPIC_AUTHORIZATION_FAILED
  when named; auto-creation needs CREATE on the cluster or the topic),
  ListOffsets (DESCRIBE), CreateTopics (CREATE), DeleteTopics (DELETE),
  CreateAcls / DeleteAcls (ALTER cluster);
* **by this gate**, for the whole request (``WHOLE_REQUEST``): the operation and
  resources it needs; a refusal is answered in the request's own shape, the
  top-level error code and every item's (GROUP_/TOPIC_/CLUSTER_/
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ``server/refusals.py``) — never a closed
  connection.

A controller listener uses ``controller_gate``: the same table, plus the nodes' own
APIs (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds, the
Raft RPCs and the metadata log's Fetch) which need CLUSTER_ACTION on the cluster, as
Kafka's ControllerApis asks. An API in no list is refused to everyone but super users
(fail closed), with CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Callable, Collection, NamedTuple

from tidelog.core.errors import ErrorCode
from tidelog.metadata.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    Authorizer,
    ResourceType,
)
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.admin import invalid_config_resources
from tidelog.server.dispatch import current_connection
from tidelog.protocol.codec import classify_field, to_entity
from tidelog.server.refusals import refusal, response_array

logger = logging.getLogger("tidelog.authorizer")

AUTHORIZER_CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "tidelog")

_FAILED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
           ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
           ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
           ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

Need = tuple[AclOperation, ResourceType, str]
CLUSTER = (ResourceType.CLUSTER, CLUSTER_NAME)


def _cluster(operation: AclOperation) -> Callable[[object], list[Need]]:
    return lambda request: [(operation, *CLUSTER)]


def _group(operation: AclOperation, field: str = "group_id") -> Callable[[object], list[Need]]:
    return lambda request: [(operation, ResourceType.GROUP, str(getattr(request, field)))]


def _transactional(request) -> list[Need]:
    return [(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(request.transactional_id))]


def _topics(operation: AclOperation, array: str, name_field: str) -> Callable[[object], list[Need]]:
    return lambda request: [(operation, ResourceType.TOPIC, str(getattr(t, name_field)))
                            for t in getattr(request, array) or ()]


def _find_coordinator(request) -> list[Need]:
    keys = list(getattr(request, "coordinator_keys", None) or [])
    if not keys and getattr(request, "key", None) is not None:
        keys = [request.key]
    kind = ResourceType.TRANSACTIONAL_ID if int(getattr(request, "key_type", 0)) == 1 else ResourceType.GROUP
    return [(AclOperation.DESCRIBE, kind, str(k)) for k in keys]


def _init_producer_id(request) -> list[Need]:
    if getattr(request, "transactional_id", None):
        return _transactional(request)
    return [(AclOperation.IDEMPOTENT_WRITE, *CLUSTER)]


def _add_partitions(request) -> list[Need]:
    if getattr(request, "transactions", None):                  # v4: brokers verifying (KIP-890)
        return [(AclOperation.CLUSTER_ACTION, *CLUSTER)]
    # v0-3, a producer's: WRITE on its transactional id and on each topic.
    return [(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(request.v3_and_below_transactional_id))] + [
        (AclOperation.WRITE, ResourceType.TOPIC, str(t.name)) for t in request.v3_and_below_topics or ()]


def _offset_for_leader_epoch(request) -> list[Need]:
    if int(getattr(request, "replica_id", -1)) >= 0:
        return [(AclOperation.CLUSTER_ACTION, *CLUSTER)]
    return [(AclOperation.DESCRIBE, ResourceType.TOPIC, str(t.topic)) for t in request.topics]


# The ACL resource a config resource (Kafka's ConfigResource.Type) is authorized on, as
# Kafka's ConfigHelper and ConfigAdminManager ask: a topic's and a group's own; the
# cluster for a broker (by id or ""), its loggers and client metrics.
_CONFIG_ACL_RESOURCES = {2: ResourceType.TOPIC, 32: ResourceType.GROUP}


def _config_need(operation: AclOperation, resource) -> Need:
    kind = _CONFIG_ACL_RESOURCES.get(int(resource.resource_type), ResourceType.CLUSTER)
    return operation, kind, CLUSTER_NAME if kind == ResourceType.CLUSTER else str(resource.resource_name)


def _configs(describe: bool) -> Callable[[object], list[Need]]:
    operation = AclOperation.DESCRIBE_CONFIGS if describe else AclOperation.ALTER_CONFIGS
    return lambda request: [_config_need(operation, r) for r in request.resources]


WHOLE_REQUEST: dict[int, Callable[[object], list[Need]]] = {
    ApiKey.JOIN_GROUP: _group(AclOperation.READ),
    ApiKey.SYNC_GROUP: _group(AclOperation.READ),
    ApiKey.HEARTBEAT: _group(AclOperation.READ),
    ApiKey.LEAVE_GROUP: _group(AclOperation.READ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _group(AclOperation.READ),
    ApiKey.OFFSET_COMMIT: lambda r: _group(AclOperation.READ)(r) + _topics(AclOperation.READ, "topics", "name")(r),
    ApiKey.OFFSET_FETCH: lambda r: ([(AclOperation.DESCRIBE, ResourceType.GROUP, str(g.group_id))
                                     for g in getattr(r, "groups", None) or ()]
                                    or _group(AclOperation.DESCRIBE)(r)),
    ApiKey.OFFSET_DELETE: _group(AclOperation.DELETE),
    ApiKey.DESCRIBE_GROUPS: lambda r: [(AclOperation.DESCRIBE, ResourceType.GROUP, str(g)) for g in r.groups],
    ApiKey.DELETE_GROUPS: lambda r: [(AclOperation.DELETE, ResourceType.GROUP, str(g)) for g in r.groups_names],
    ApiKey.CONSUMER_GROUP_DESCRIBE: lambda r: [(AclOperation.DESCRIBE, ResourceType.GROUP, str(g))
                                               for g in r.group_ids],
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: lambda r: _transactional(r) + _group(AclOperation.READ)(r),
    ApiKey.END_TXN: _transactional,
    ApiKey.TXN_OFFSET_COMMIT: lambda r: _transactional(r) + _group(AclOperation.READ)(r),
    ApiKey.WRITE_TXN_MARKERS: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.DESCRIBE_TRANSACTIONS: lambda r: [(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, str(t))
                                             for t in r.transactional_ids],
    ApiKey.DESCRIBE_PRODUCERS: _topics(AclOperation.READ, "topics", "name"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DELETE_RECORDS: _topics(AclOperation.DELETE, "topics", "name"),
    ApiKey.CREATE_PARTITIONS: _topics(AclOperation.ALTER, "topics", "name"),
    ApiKey.DESCRIBE_CONFIGS: _configs(describe=True),
    ApiKey.ALTER_CONFIGS: _configs(describe=False),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(describe=False),
    ApiKey.ELECT_LEADERS: _cluster(AclOperation.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(AclOperation.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(AclOperation.DESCRIBE),
    ApiKey.UNREGISTER_BROKER: _cluster(AclOperation.ALTER),
    ApiKey.UPDATE_FEATURES: _cluster(AclOperation.ALTER),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(AclOperation.DESCRIBE),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _cluster(AclOperation.ALTER),
    ApiKey.DESCRIBE_QUORUM: _cluster(AclOperation.DESCRIBE),
    ApiKey.DESCRIBE_ACLS: _cluster(AclOperation.DESCRIBE),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(AclOperation.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(AclOperation.ALTER),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(AclOperation.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(AclOperation.ALTER_CONFIGS),
    # The nodes' own APIs (Kafka's ControllerApis): only a principal with CLUSTER_ACTION
    # on the cluster — the nodes, as super users — may register, heartbeat, change an
    # ISR, take producer ids or take part in the quorum.
    ApiKey.BROKER_REGISTRATION: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.BROKER_HEARTBEAT: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.ALTER_PARTITION: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.ALLOCATE_PRODUCER_IDS: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.VOTE: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.BEGIN_QUORUM_EPOCH: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.END_QUORUM_EPOCH: _cluster(AclOperation.CLUSTER_ACTION),
    ApiKey.FETCH_SNAPSHOT: _cluster(AclOperation.CLUSTER_ACTION),
}
# On a controller listener: the metadata log's Fetch is the quorum's and the brokers'
# (CLUSTER_ACTION), and DescribeCluster needs ALTER on the cluster, as Kafka's controller
# asks (KIP-919: it names every controller). A broker's DescribeCluster is open, as Kafka's.
CONTROLLER_LISTENER = {ApiKey.FETCH: _cluster(AclOperation.CLUSTER_ACTION),
                       ApiKey.DESCRIBE_CLUSTER: _cluster(AclOperation.ALTER),
                       # KIP-853: an operator's voter changes, and a controller's own update.
                       ApiKey.ADD_RAFT_VOTER: _cluster(AclOperation.ALTER),
                       ApiKey.REMOVE_RAFT_VOTER: _cluster(AclOperation.ALTER),
                       ApiKey.UPDATE_RAFT_VOTER: _cluster(AclOperation.CLUSTER_ACTION)}
IN_HANDLER = {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.CREATE_TOPICS,
              ApiKey.DELETE_TOPICS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
              ApiKey.LIST_GROUPS, ApiKey.LIST_TRANSACTIONS}      # these two list what may be described
ALWAYS = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.DESCRIBE_CLUSTER}


class Item(NamedTuple):
    """An API authorized item by item, as Kafka does: ``whole`` needs of the request first
    (refused whole), then ``need(request, item)`` for each item of the ``array``; the
    items allowed are served, the others answered with their authorization error."""
    array: str
    need: Callable[[object, object], Need]
    whole: Callable[[object], list[Need]] = lambda request: []
    # Indexes of the items Kafka refuses as invalid before it asks any ACL: they go to the
    # handler unchecked, and it refuses them (INVALID_REQUEST) whoever asks.
    unchecked: Callable[[int, object], Collection[int]] = lambda api_key, request: ()


def _config_item(operation: AclOperation) -> Callable[[object, object], Need]:
    return lambda request, resource: _config_need(operation, resource)


def _invalid_config_resources(api_key: int, request) -> Collection[int]:
    return invalid_config_resources(api_key, request.resources)


def _named(operation: AclOperation, resource_type: ResourceType, field: str | None = None):
    return lambda request, item: (operation, resource_type, str(item if field is None else getattr(item, field)))


def _coordinator_key(request, key) -> Need:
    kind = ResourceType.TRANSACTIONAL_ID if int(getattr(request, "key_type", 0)) == 1 else ResourceType.GROUP
    return AclOperation.DESCRIBE, kind, str(key)


# Kafka answers these per item; an array a version lacks falls back to WHOLE_REQUEST.
PER_ITEM: dict[int, Item] = {
    ApiKey.DESCRIBE_CONFIGS: Item("resources", _config_item(AclOperation.DESCRIBE_CONFIGS),
                                  unchecked=_invalid_config_resources),
    ApiKey.ALTER_CONFIGS: Item("resources", _config_item(AclOperation.ALTER_CONFIGS),
                               unchecked=_invalid_config_resources),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Item("resources", _config_item(AclOperation.ALTER_CONFIGS),
                                           unchecked=_invalid_config_resources),
    ApiKey.DELETE_RECORDS: Item("topics", _named(AclOperation.DELETE, ResourceType.TOPIC, "name")),
    ApiKey.CREATE_PARTITIONS: Item("topics", _named(AclOperation.ALTER, ResourceType.TOPIC, "name")),
    ApiKey.DESCRIBE_PRODUCERS: Item("topics", _named(AclOperation.READ, ResourceType.TOPIC, "name")),
    ApiKey.DESCRIBE_GROUPS: Item("groups", _named(AclOperation.DESCRIBE, ResourceType.GROUP)),
    ApiKey.DELETE_GROUPS: Item("groups_names", _named(AclOperation.DELETE, ResourceType.GROUP)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Item("group_ids", _named(AclOperation.DESCRIBE, ResourceType.GROUP)),
    ApiKey.DESCRIBE_TRANSACTIONS: Item("transactional_ids",
                                       _named(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)),
    ApiKey.OFFSET_FETCH: Item("groups", _named(AclOperation.DESCRIBE, ResourceType.GROUP, "group_id")),
    ApiKey.FIND_COORDINATOR: Item("coordinator_keys", _coordinator_key),
    ApiKey.OFFSET_COMMIT: Item("topics", _named(AclOperation.READ, ResourceType.TOPIC, "name"),
                               _group(AclOperation.READ)),
    ApiKey.TXN_OFFSET_COMMIT: Item("topics", _named(AclOperation.READ, ResourceType.TOPIC, "name"),
                                   lambda r: _transactional(r) + _group(AclOperation.READ)(r)),
}


class Partial:
    """Some items of a request refused: the handler serves the others, and the answer
    lists the refused ones with their error codes beside what it served."""

    def __init__(self, header, request, item: Item, allowed: list, refused: dict[ErrorCode, list]):
        self.allowed_request = dataclasses.replace(request, **{item.array: tuple(allowed)})
        self.field = response_array(header.api_key, item.array)
        self.refused = [entry for code, items in refused.items() for entry in refusal(
            header, dataclasses.replace(request, **{item.array: tuple(items)}), code).get(self.field, [])]

    def answer(self, handler, header):
        served = handler(header, self.allowed_request)
        if inspect.isawaitable(served):
            return self._merge_later(served)
        return self.merge(served)

    async def _merge_later(self, served):
        return self.merge(await served)

    def merge(self, served):
        if isinstance(served, dict):
            return {**served, self.field: list(served.get(self.field) or []) + self.refused}
        element = _response_element(type(served), self.field)           # a forwarded answer (an entity)
        return dataclasses.replace(served, **{self.field: tuple(getattr(served, self.field)) + tuple(
            to_entity(element, entry) for entry in self.refused)})


def _response_element(cls, field: str):
    return next(classify_field(f).type_ for f in dataclasses.fields(cls) if f.name == field)


class RequestAuthorizer:
    """The authorizer as the handlers of one listener see it."""

    def __init__(self, authorizer: Authorizer, image: Callable[[], object]):
        self.authorizer = authorizer
        self.image = image

    def who(self) -> tuple[str, str]:
        connection = current_connection.get()
        if connection is None:
            return "User:ANONYMOUS", "*"
        return getattr(connection, "principal", "User:ANONYMOUS"), connection.peer.rpartition(":")[0]

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str,
                log_denied: bool = True) -> bool:
        principal, host = self.who()
        ok = self.authorizer.authorize(self.image().acls.values(), principal, host, operation, resource_type, name)
        if not ok and log_denied:
            logger.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s",
                     principal, operation.name, host, resource_type.name, name)
        return ok

    def visible(self, resource_type: ResourceType) -> Callable[[str], bool]:
        """For a listing: may the caller DESCRIBE this one (or the whole cluster)? A name
        left out is not a denial worth a log line, as in Kafka."""
        def may_describe(name: str) -> bool:
            return self.allowed(AclOperation.DESCRIBE, *CLUSTER, log_denied=False) or \
                self.allowed(AclOperation.DESCRIBE, resource_type, name, log_denied=False)
        return may_describe

    def topic_allowed(self, operation: AclOperation, topic: str) -> bool:
        return self.allowed(operation, ResourceType.TOPIC, topic)

    def gate(self, header, request):
        """The client listener's check: None to go on, or a response body refusing the request."""
        api_key = header.api_key
        if api_key in ALWAYS or api_key in IN_HANDLER:
            return None
        return self._check(header, request, WHOLE_REQUEST.get(api_key))

    def controller_gate(self, header, request):
        """A controller listener's check (the same ACLs, the nodes' APIs included)."""
        api_key = header.api_key
        rule = CONTROLLER_LISTENER.get(api_key)
        if rule is None and (api_key in ALWAYS or api_key in IN_HANDLER):
            return None
        return self._check(header, request, rule or WHOLE_REQUEST.get(api_key))

    def _check(self, header, request, rule):
        api_key = header.api_key
        item = PER_ITEM.get(api_key)
        if item is not None and getattr(request, item.array, None) is not None:
            return self._check_items(header, request, item)
        if rule is None:
            principal, _ = self.who()
            if principal in self.authorizer.super_users:
                return None
            logger.info("Principal = %s is Denied %s (open to super users only when ACLs are on)",
                     principal, _name(api_key))
            return _refusal(header, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        for operation, resource_type, name in rule(request):
            if operation == AclOperation.IDEMPOTENT_WRITE and self._may_write_any_topic():
                continue                    # KIP-679: WRITE on any topic implies IDEMPOTENT_WRITE
            if not self.allowed(operation, resource_type, name):
                return _refusal(header, request, _FAILED.get(resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        return None

    def _check_items(self, header, request, item: Item):
        for operation, resource_type, name in item.whole(request):
            if not self.allowed(operation, resource_type, name):
                return _refusal(header, request, _FAILED.get(resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        allowed, refused = [], {}
        unchecked = item.unchecked(header.api_key, request)
        for index, entry in enumerate(getattr(request, item.array)):
            if index in unchecked:
                allowed.append(entry)
                continue
            operation, resource_type, name = item.need(request, entry)
            if self.allowed(operation, resource_type, name):
                allowed.append(entry)
            else:
                refused.setdefault(_FAILED.get(resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), []).append(entry)
        if not refused:
            return None
        if not allowed and len(refused) == 1:
            return _refusal(header, request, next(iter(refused)))
        return Partial(header, request, item, allowed, refused)

    def _may_write_any_topic(self) -> bool:
        principal, host = self.who()
        return self.authorizer.authorize_any(self.image().acls.values(), principal, host, AclOperation.WRITE,
                                             ResourceType.TOPIC)


def _refusal(header, request, code: ErrorCode) -> dict:
    """The whole request refused with ``code``, in the API's own shape: the top-level
    error code and every item's (server/refusals.py), never a closed connection."""
    return refusal(header, request, code)


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
