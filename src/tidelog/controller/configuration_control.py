"""ConfigurationControlManager: topic, broker and group configs, with Kafka's names and defaults.

Theory of operation. Hard state is the set of explicitly configured keys per
resource — a topic (``ConfigResourceType.TOPIC``, its name), one broker
(``ConfigResourceType.BROKER``, its id) or the cluster-wide default broker resource
(``BROKER``, ``""``), or a consumer group (``GROUP``, its id) — and changes only
when ``ConfigRecord``s (and ``RemoveTopicRecord``, which drops the topic's keys)
are replayed.

Broker resources are KIP-226's dynamic broker configs: what may be set, where and to
what is ``broker.config.validate_dynamic_broker_change`` (Kafka's DynamicBrokerConfig
rules and INVALID_REQUEST messages; a name tidelog does not know is stored, as Kafka
stores it). Group resources take ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` within the bounds of this controller's
``group.consumer.{min,max}.*`` settings (INVALID_CONFIG, Kafka's messages). The effective value of a topic key is looked up in that order: the
topic's own value, the cluster-level synonym (``log.retention.ms`` for
``retention.ms``), then Kafka's default (``config_defs.py``).

Operations validate every key and value first and answer ``INVALID_CONFIG`` with a
message naming the key; a resource is changed all-or-nothing.

IncrementalAlterConfigs' APPEND and SUBTRACT (``AlterConfigsResource.list_changes``)
are resolved when the controller decides, as Kafka's controller does: only on a
list-valued key (else INVALID_CONFIG, "Can't APPEND to key … because its type is
not LIST.", also for a key that is no config at all; for a broker, Kafka's "Config
value append is not allowed for config key: …" or "Unknown config name: …"), item by
item on the resource's own value or, without one, (one broker) the cluster default
and Kafka's default for the key; APPEND adds
the items not there yet, SUBTRACT removes those that are (an absent one is a
no-op). A key whose value comes out unchanged is not written.
"""

from __future__ import annotations

import re

from typing import Any, Callable, Mapping, Sequence

from tidelog.core.errors import ErrorCode, InvalidConfigError
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigRecord, ConfigResourceType
from tidelog.controller.config_defs import (
    CLUSTER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigType,
    validate_group_config,
    validate_topic_config,
)
from tidelog.controller.messages import AlterConfigsResource, AlterConfigsResult
from tidelog.controller.result import NO_ERROR, ApiError, ControllerResult

CLUSTER_RESOURCE = ConfigResource(ConfigResourceType.BROKER, "")
# Per-broker dynamic settings: the TLS stores of a listener (or of all of them).
RELOADABLE_SSL = re.compile(r"(listener\.name\.[a-z0-9_]+\.)?ssl\.(keystore\.(location|certificate\.chain|key)"
                            r"|key\.password|truststore\.(location|certificates))")


class ConfigurationControlManager:
    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        self.configs: dict[ConfigResource, dict[str, str]] = {}
        # The controller's own server.properties, by broker-level name (e.g.
        # unclean.leader.election.enable): below the dynamic configs, above Kafka's defaults.
        self.static: dict[str, str] = dict(static or {})

    # ------------------------------------------------------------ queries

    def topic_value(self, topic: str, key: str) -> Any:
        """The effective typed value of topic config ``key`` for ``topic``."""
        definition = TOPIC_CONFIGS[key]
        own = self.configs.get(ConfigResource(ConfigResourceType.TOPIC, topic), {})
        if key in own:
            return definition.parse(own[key])
        cluster = self.configs.get(CLUSTER_RESOURCE, {})
        if definition.synonym in cluster:
            return definition.parse(cluster[definition.synonym])
        if definition.synonym in self.static:
            return definition.parse(self.static[definition.synonym])
        return definition.parse(definition.default)

    def describe_topic(self, topic: str) -> list[tuple[str, str, str]]:
        """``(key, value, source)`` for every topic key; source is ``topic``,
        ``cluster`` or ``default`` (what DescribeConfigs reports)."""
        own = self.configs.get(ConfigResource(ConfigResourceType.TOPIC, topic), {})
        cluster = self.configs.get(CLUSTER_RESOURCE, {})
        result = []
        for key, definition in sorted(TOPIC_CONFIGS.items()):
            if key in own:
                result.append((key, own[key], "topic"))
            elif definition.synonym in cluster:
                result.append((key, cluster[definition.synonym], "cluster"))
            elif definition.synonym in self.static:
                result.append((key, self.static[definition.synonym], "static"))
            else:
                result.append((key, definition.default, "default"))
        return result

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        return self.topic_value(topic, "unclean.leader.election.enable")

    def min_insync_replicas(self, topic: str) -> int:
        return self.topic_value(topic, "min.insync.replicas")

    # ------------------------------------------------------------ validation

    @staticmethod
    def validate_topic_configs(configs: Mapping[str, str | None]) -> ApiError:
        return _validate(configs, validate_topic_config)

    @staticmethod
    def topic_config_records(topic: str, configs: Mapping[str, str]) -> list[ConfigRecord]:
        return [ConfigRecord(ConfigResourceType.TOPIC, topic, key, value)
                for key, value in sorted(configs.items())]

    # ------------------------------------------------------------ operations

    def incremental_alter_configs(self, resources: Sequence[AlterConfigsResource],
                                  topic_exists: Callable[[str], bool]
                                  ) -> ControllerResult[list[AlterConfigsResult]]:
        records: list[ConfigRecord] = []
        results = []
        for resource in resources:
            resource, error = self._resolve_list_changes(resource)
            if error.is_success:
                error = self._validate_alter(resource, topic_exists)
            if error.is_success:
                records += [ConfigRecord(resource.resource_type, resource.resource_name, key, value)
                            for key, value in sorted(resource.changes.items())]
            results.append(AlterConfigsResult(resource.resource_type, resource.resource_name,
                                              error.error_code, error.message))
        return ControllerResult(records, results)

    def _resolve_list_changes(self, resource: AlterConfigsResource) -> tuple[AlterConfigsResource, ApiError]:
        """``resource`` with its APPEND / SUBTRACT changes turned into new values."""
        if not resource.list_changes:
            return resource, NO_ERROR
        broker = resource.resource_type == ConfigResourceType.BROKER
        current = self.configs.get(ConfigResource(resource.resource_type, resource.resource_name), {})
        changes = dict(resource.changes)
        for key, (operation, items) in sorted(resource.list_changes.items()):
            default, refusal = self._list_default(resource, key)
            if refusal is not None:
                return resource, ApiError(ErrorCode.INVALID_CONFIG, refusal.format(
                    op=operation.lower() if broker else operation, key=key))
            value = current.get(key)
            if value is None and broker and resource.resource_name:
                value_base = self.configs.get(CLUSTER_RESOURCE, {}).get(key, default)
            else:
                value_base = default if value is None else value
            parts = [part for part in value_base.split(",") if part]
            for item in (item for item in items.split(",") if item):
                if operation == "APPEND" and item not in parts:
                    parts.append(item)
                elif operation == "SUBTRACT" and item in parts:
                    parts.remove(item)
            if ",".join(parts) != value:
                changes[key] = ",".join(parts)
        return AlterConfigsResource(resource.resource_type, resource.resource_name, changes), NO_ERROR

    @staticmethod
    def _list_default(resource: AlterConfigsResource, key: str) -> tuple[str, str | None]:
        """The value an APPEND / SUBTRACT starts from when the resource has none, or Kafka's
        refusal (a format of ``op`` and ``key``): the key is no list, or (broker) no config."""
        if resource.resource_type == ConfigResourceType.BROKER:
            from tidelog.broker.config import CONFIG_DEFS, config_def
            definition = config_def(key)
            if definition is None and key not in CLUSTER_CONFIGS:
                return "", "Unknown config name: {key}"
            if key in CLUSTER_CONFIGS:
                topic = CLUSTER_CONFIGS[key]
                return topic.default, (None if topic.type is ConfigType.LIST else
                                       "Config value {op} is not allowed for config key: {key}")
            if definition.type is not list:
                return "", "Config value {op} is not allowed for config key: {key}"
            default = CONFIG_DEFS.get(key, definition).default
            return ",".join(default or []), None
        definition = TOPIC_CONFIGS.get(key) if resource.resource_type == ConfigResourceType.TOPIC else None
        if definition is None or definition.type is not ConfigType.LIST:
            return "", "Can't {op} to key {key} because its type is not LIST."
        return definition.default, None

    def _validate_alter(self, resource: AlterConfigsResource,
                        topic_exists: Callable[[str], bool]) -> ApiError:
        if resource.resource_type == ConfigResourceType.TOPIC:
            if not topic_exists(resource.resource_name):
                return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Topic {resource.resource_name} does not exist.")
            return self.validate_topic_configs(resource.changes)
        if resource.resource_type == ConfigResourceType.BROKER:
            # KIP-226: one broker's settings (a broker id) or the cluster-wide defaults ("").
            from tidelog.broker.config import validate_dynamic_broker_change
            if resource.resource_name != "" and not resource.resource_name.isdigit():
                return ApiError(ErrorCode.INVALID_REQUEST, "A broker resource is a broker id or \"\" "
                                "(the cluster-wide default).")
            refusal = validate_dynamic_broker_change(resource.resource_name, dict(resource.changes))
            return NO_ERROR if refusal is None else ApiError(ErrorCode.INVALID_REQUEST, refusal)
        if resource.resource_type == ConfigResourceType.GROUP:
            if resource.resource_name == "":
                return ApiError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
            return _validate(resource.changes, lambda k, v: validate_group_config(k, v, self.static))
        return ApiError(ErrorCode.INVALID_REQUEST,
                        f"Unsupported config resource type {resource.resource_type}.")

    def group_value(self, group_id: str, key: str) -> int | None:
        """Group ``group_id``'s own value of group config ``key``, or None."""
        value = self.configs.get(ConfigResource(ConfigResourceType.GROUP, group_id), {}).get(key)
        return None if value is None else int(value)

    # ------------------------------------------------------------ replay

    def replay(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        config = self.configs.setdefault(resource, {})
        if record.value is None:
            config.pop(record.name, None)
        else:
            config[record.name] = record.value
        if not config:
            del self.configs[resource]

    def delete_topic_configs(self, topic: str) -> None:
        self.configs.pop(ConfigResource(ConfigResourceType.TOPIC, topic), None)


def _validate(changes: Mapping[str, str | None],
              validate: Callable[[str, str | None], None]) -> ApiError:
    for key, value in sorted(changes.items()):
        try:
            validate(key, value)
        except InvalidConfigError as e:
            return ApiError(ErrorCode.INVALID_CONFIG, str(e))
    return NO_ERROR
