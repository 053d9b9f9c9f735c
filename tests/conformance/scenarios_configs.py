"""Conformance scenarios of dynamic configs (issue 32 items 4-6): broker configs per broker
and cluster-wide (KIP-226), GROUP config resources (KIP-848) and authorized operations
(KIP-430), each with its refusals; run by test_differential_configs.py beside the same
real Kafka node as test_differential.py.

Each scenario undoes what it set, so the scenarios after it see the settings the node
started with."""

from __future__ import annotations

from tidelog.protocol.api_keys import ApiKey

from tests.conformance.differential import Side, wait_for
from tests.conformance.scenarios import create_topic

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
BROKER, GROUP = 4, 32


def _alter(resource_type: int, name: str, *changes) -> dict:
    return {"validate_only": False, "resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
        {"name": key, "config_operation": op, "value": value} for op, key, value in changes]}]}


def _describe(resource_type: int, name: str, keys: list[str] | None) -> dict:
    return {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True, "include_documentation": False}


async def _settled(side: Side, mode: str, wanted: dict[str, str | None]) -> None:
    """Wait (not compared) until broker 1 describes ``wanted`` (None: no dynamic value):
    Kafka's broker applies a committed config change a moment after the answer."""
    async def probe():
        answer = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(BROKER, "1", list(wanted)), mode)
        configs = {c["name"]: c for c in answer["results"][0]["configs"]}
        return all((configs.get(k) or {}).get("value") == v if v is not None
                   else (configs.get(k) or {}).get("config_source") not in (2, 3) for k, v in wanted.items())
    await wait_for(probe, f"{side.name}: broker 1 describing {wanted}")


async def dynamic_broker_configs(side: Side, mode: str) -> dict:
    """Set one broker's message.max.bytes and the cluster-wide log.retention.ms; describe
    them (the broker, the cluster default and a topic taking both); every refusal; undo."""
    topic = f"conformance-dynamic-{mode}"
    await create_topic(side, topic)
    alter = ApiKey.INCREMENTAL_ALTER_CONFIGS
    answers = {
        "set_broker": await side.call(alter, _alter(BROKER, "1", (SET, "message.max.bytes", "2000000")), mode),
        "set_default": await side.call(alter, _alter(BROKER, "", (SET, "log.retention.ms", "3600000"),
                                                     (SUBTRACT, "log.cleanup.policy", "compact")), mode),
        "set_listener": await side.call(alter, _alter(
            BROKER, "1", (SET, "listener.name.plaintext.sasl.kerberos.service.name", "kafka")), mode),
    }
    await _settled(side, mode, {"message.max.bytes": "2000000", "log.retention.ms": "3600000",
                                "listener.name.plaintext.sasl.kerberos.service.name": "kafka"})
    keys = ["message.max.bytes", "log.retention.ms", "log.retention.hours", "log.cleanup.policy",
            "listener.name.plaintext.sasl.kerberos.service.name", "num.replica.fetchers", "log.dirs"]
    answers["broker"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(BROKER, "1", keys), mode)
    answers["default"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(BROKER, "", None), mode)
    answers["topic"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(2, topic, [
        "max.message.bytes", "retention.ms", "cleanup.policy"]), mode)
    refused = {
        "not_dynamic": _alter(BROKER, "1", (SET, "log.dirs", "/elsewhere")),
        "hours": _alter(BROKER, "1", (SET, "log.retention.hours", "1")),
        "no_prefix": _alter(BROKER, "1", (SET, "ssl.keystore.password", "x")),
        "per_broker_at_default": _alter(BROKER, "", (SET, "listener.name.plaintext.ssl.keystore.location", "/x")),
        "existing_listener": _alter(BROKER, "1", (SET, "sasl.kerberos.service.name", "kafka")),
        "bad_value": _alter(BROKER, "1", (SET, "message.max.bytes", "abc")),
        "below_minimum": _alter(BROKER, "", (SET, "message.max.bytes", "-3")),
        "roll_ms": _alter(BROKER, "1", (SET, "log.roll.ms", "-3")),
        "ratio": _alter(BROKER, "", (SET, "log.cleaner.min.cleanable.ratio", "2")),
        "bad_list_item": _alter(BROKER, "1", (APPEND, "log.cleanup.policy", "archive")),
        "append_not_list": _alter(BROKER, "1", (APPEND, "message.max.bytes", "5")),
        "subtract_not_list": _alter(BROKER, "", (SUBTRACT, "message.max.bytes", "5")),
        "append_unknown": _alter(BROKER, "1", (APPEND, "no.such.config", "5")),
        "other_broker": _alter(BROKER, "2", (SET, "message.max.bytes", "2000000")),
    }
    for label, body in refused.items():
        answers[f"refused_{label}"] = await side.call(alter, body, mode)
    answers["undo_broker"] = await side.call(alter, _alter(
        BROKER, "1", (DELETE, "message.max.bytes", None),
        (DELETE, "listener.name.plaintext.sasl.kerberos.service.name", None)), mode)
    answers["undo_default"] = await side.call(alter, _alter(BROKER, "", (DELETE, "log.retention.ms", None),
                                                            (DELETE, "log.cleanup.policy", None)), mode)
    await _settled(side, mode, {"message.max.bytes": None, "log.retention.ms": None})
    answers["after"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(BROKER, "1", keys[:2]), mode)
    return answers


async def group_configs(side: Side, mode: str) -> dict:
    """A group's own session timeout and heartbeat interval; the refusals (bounds, names,
    types, APPEND, the default group); the description before and after."""
    group = f"conformance-group-configs-{mode}"
    alter = ApiKey.INCREMENTAL_ALTER_CONFIGS
    keys = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"]
    answers = {"before": await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(GROUP, group, keys), mode),
               "set": await side.call(alter, _alter(GROUP, group, (SET, "consumer.session.timeout.ms", "50000"),
                                                    (SET, "consumer.heartbeat.interval.ms", "6000")), mode)}

    async def applied():                  # not compared: Kafka's broker applies it a moment later
        answer = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(GROUP, group, keys), mode)
        return all(c["config_source"] == 8 for c in answer["results"][0]["configs"])
    await wait_for(applied, f"{side.name}: group {group}'s own settings described")
    answers["after"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(GROUP, group, keys), mode)
    refused = {
        "below_bound": _alter(GROUP, group, (SET, "consumer.session.timeout.ms", "1000")),
        "above_bound": _alter(GROUP, group, (SET, "consumer.heartbeat.interval.ms", "20000")),
        "not_a_number": _alter(GROUP, group, (SET, "consumer.heartbeat.interval.ms", "soon")),
        "unknown": _alter(GROUP, group, (SET, "no.such.config", "1")),
        "append": _alter(GROUP, group, (APPEND, "consumer.session.timeout.ms", "50000")),
        "default_group": _alter(GROUP, "", (SET, "consumer.session.timeout.ms", "50000")),
    }
    for label, body in refused.items():
        answers[f"refused_{label}"] = await side.call(alter, body, mode)
    answers["describe_default_group"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(GROUP, "", keys), mode)
    answers["unchanged"] = await side.call(ApiKey.DESCRIBE_CONFIGS, _describe(GROUP, group, keys), mode)
    answers["undo"] = await side.call(alter, _alter(GROUP, group, (DELETE, "consumer.session.timeout.ms", None),
                                                    (DELETE, "consumer.heartbeat.interval.ms", None)), mode)
    return answers


async def describe_cluster_operations(side: Side, mode: str) -> dict:
    """DescribeCluster with and without the caller's authorized operations (KIP-430)."""
    asked = {"include_cluster_authorized_operations": True}
    return {"asked": await side.call(ApiKey.DESCRIBE_CLUSTER, asked, mode),
            "not_asked": await side.call(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False},
                                         mode)}


SCENARIOS = {f.__name__: f for f in (dynamic_broker_configs, group_configs, describe_cluster_operations)}

# Differences of these scenarios accepted, with the reason (the patterns of
# test_differential.py: "<scenario>@<mode> <answer><path>", "*" matches anything).
ALLOWED: dict[str, str] = {
    "dynamic_broker_configs@* default.results[].configs[min.insync.replicas] (only Kafka)":
        "Kafka 4 with eligible leader replicas (KIP-966) writes a cluster-wide min.insync.replicas when the "
        "cluster is formatted, so its cluster default lists one; tidelog writes no cluster-wide value",
}
