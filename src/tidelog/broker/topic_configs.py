"""Effective topic configuration, resolved with Kafka's precedence.

A topic setting comes from, in order: the topic's own dynamic config, this
broker's dynamic setting of its broker-level name (the broker resource "<id>",
KIP-226), the dynamic cluster-wide default (the broker resource ""), the broker's
``server.properties`` (through the setting's broker-level synonym, e.g.
``log.retention.ms`` for ``retention.ms``), then Kafka's default. Brokers and
controllers both answer DescribeConfigs from this one function.
"""

from __future__ import annotations

from tidelog.controller.config_defs import STORED_ONLY_TOPIC_CONFIGS, TOPIC_CONFIGS
from tidelog.metadata.image import ConfigResource, MetadataImage
from tidelog.metadata.records import ConfigResourceType
from tidelog.broker.config import BrokerConfig
from tidelog.storage.config import TOPIC_CONFIGS_OWNED_ELSEWHERE, LogConfig


def static_log_config(config: BrokerConfig) -> LogConfig:
    """The broker-wide LogConfig from ``server.properties`` (built once per BrokerConfig,
    which does not change after it is made; LogConfig is frozen)."""
    cached = config.__dict__.get("_static_log_config")
    if cached is None:
        cached = config.__dict__["_static_log_config"] = _build_static_log_config(config)
    return cached


def _build_static_log_config(config: BrokerConfig) -> LogConfig:
    props = {"segment.bytes": config["log.segment.bytes"], "segment.ms": config.log_roll_ms,
             "retention.ms": config.log_retention_ms, "retention.bytes": config["log.retention.bytes"],
             "segment.index.bytes": config["log.index.size.max.bytes"],
             "index.interval.bytes": config["log.index.interval.bytes"],
             "max.message.bytes": config["message.max.bytes"],
             "message.timestamp.type": config["log.message.timestamp.type"],
             "message.timestamp.before.max.ms": config["log.message.timestamp.before.max.ms"],
             "message.timestamp.after.max.ms": config["log.message.timestamp.after.max.ms"],
             "cleanup.policy": ",".join(config["log.cleanup.policy"]),
             "delete.retention.ms": config["log.cleaner.delete.retention.ms"],
             "min.cleanable.dirty.ratio": config["log.cleaner.min.cleanable.ratio"],
             "min.compaction.lag.ms": config["log.cleaner.min.compaction.lag.ms"],
             "max.compaction.lag.ms": config["log.cleaner.max.compaction.lag.ms"],
             "compression.type": config["compression.type"]}
    if config["log.flush.interval.messages"] is not None:
        props["flush.messages"] = config["log.flush.interval.messages"]
    if config["log.flush.interval.ms"] is not None:
        props["flush.ms"] = config["log.flush.interval.ms"]
    return LogConfig.from_properties(props)


def topic_config_values(image: MetadataImage, config: BrokerConfig, topic: str) -> dict[str, tuple[str, str]]:
    """``{name: (value, source)}`` for every topic config, source as Kafka names it."""
    cluster = image.configs.get(ConfigResource(int(ConfigResourceType.BROKER), ""), {})
    own = image.configs.get(ConfigResource(int(ConfigResourceType.BROKER), str(config["node.id"])), {})
    topic_configs = image.configs.get(ConfigResource(int(ConfigResourceType.TOPIC), topic), {})
    static = static_log_config(config).to_properties()
    static.update({"min.insync.replicas": str(config["min.insync.replicas"]),
                   "unclean.leader.election.enable": str(config["unclean.leader.election.enable"]).lower()})
    originals = config.originals
    out = {}
    for name, definition in TOPIC_CONFIGS.items():
        if name in topic_configs:
            out[name] = (topic_configs[name], "DYNAMIC_TOPIC_CONFIG")
        elif definition.synonym in own:
            out[name] = (own[definition.synonym], "DYNAMIC_BROKER_CONFIG")
        elif definition.synonym in cluster:
            out[name] = (cluster[definition.synonym], "DYNAMIC_DEFAULT_BROKER_CONFIG")
        elif definition.synonym in originals:
            out[name] = (static.get(name, originals[definition.synonym]), "STATIC_BROKER_CONFIG")
        else:
            out[name] = (static.get(name, definition.default), "DEFAULT_CONFIG")
    return out


def log_config(image: MetadataImage, config: BrokerConfig, topic: str) -> LogConfig:
    values = topic_config_values(image, config, topic)
    props = {k: v for k, (v, source) in values.items()
             if k not in TOPIC_CONFIGS_OWNED_ELSEWHERE and k not in STORED_ONLY_TOPIC_CONFIGS
             and source.startswith("DYNAMIC")}
    return LogConfig.from_properties(props, static_log_config(config))


# Broker settings that stand for one another (Kafka's DynamicBrokerConfig.brokerConfigSynonyms):
# a synonym chain looks at all of them, most precise unit first.
_SYNONYM_GROUPS = [("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                   ("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                   ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")]
_BROKER_NAMES = {name: group for group in _SYNONYM_GROUPS for name in group}
# Broker-level names of topic settings whose built-in default Kafka leaves null (so they
# are no synonym of their topic setting until someone sets them).
NULL_DEFAULTS = {"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
                  "log.flush.interval.ms"}


def _as_text(value) -> str | None:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return None if value is None else str(value)


def broker_synonyms(image: MetadataImage, config: BrokerConfig, node_id: int, names,
                    defaults: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    """Kafka's DescribeConfigs synonyms of broker setting ``names[0]``: ``(name, value,
    source)`` of it and the settings standing for it (``log.retention.hours`` for
    ``log.retention.ms``), from the most to the least specific source — this broker's
    dynamic settings, the cluster-wide dynamic defaults, server.properties, then the
    built-in defaults that are not null — from the first entry naming ``names[0]`` on
    (Kafka's ConfigHelper.configSynonyms). ``defaults``: built-in defaults of names that
    tidelog's own broker settings lack."""
    from tidelog.broker.config import CONFIG_DEFS
    if not names:
        return []
    asked = names[0]
    names = _BROKER_NAMES.get(asked, tuple(names))
    own = image.configs.get(ConfigResource(int(ConfigResourceType.BROKER), str(node_id)), {})
    cluster = image.configs.get(ConfigResource(int(ConfigResourceType.BROKER), ""), {})
    chain = []
    for source, values in (("DYNAMIC_BROKER_CONFIG", own), ("DYNAMIC_DEFAULT_BROKER_CONFIG", cluster),
                           ("STATIC_BROKER_CONFIG", config.originals)):
        chain += [(name, values[name], source) for name in names if name in values]
    for name in names:
        default = _as_text(CONFIG_DEFS[name].default) if name in CONFIG_DEFS else None
        if default is None and name not in NULL_DEFAULTS:
            default = (defaults or {}).get(name)
        if default is not None:
            chain.append((name, default, "DEFAULT_CONFIG"))
    while chain and chain[0][0] != asked:
        chain.pop(0)
    return chain


def topic_config_synonyms(image: MetadataImage, config: BrokerConfig, node_id: int,
                          topic: str, name: str) -> list[tuple[str, str, str]]:
    """The synonyms of topic setting ``name``: the topic's own value, then the chain of its
    broker-level name (``cleanup.policy`` → ``log.cleanup.policy``; ``retention.ms`` →
    ``log.retention.ms``, which has none until one of ``log.retention.ms``, ``.minutes`` or
    ``.hours`` names it — Kafka's ConfigHelper.createTopicConfigEntry)."""
    topic_configs = image.configs.get(ConfigResource(int(ConfigResourceType.TOPIC), topic), {})
    own = [(name, topic_configs[name], "DYNAMIC_TOPIC_CONFIG")] if name in topic_configs else []
    definition = TOPIC_CONFIGS.get(name)
    if definition is None or not definition.synonym:
        return own
    return own + broker_synonyms(image, config, node_id, [definition.synonym],
                                 defaults={definition.synonym: definition.default})
