"""Kafka's kafka-configs (org.apache.kafka.tools.ConfigCommand, from the pinned jar) changing
dynamic broker configs (KIP-226: one broker, ``--entity-default``) and a group's configs
(KIP-848) on ``tidelog serve``, unchanged; what it prints is checked as Kafka prints it."""

import pytest

from tidelog.testing import Broker

CONFIGS = "ConfigCommand"


@pytest.fixture(scope="module")
def broker():
    with Broker() as running:
        yield running


def run(java, *args, expect=0):
    result = java.tool(CONFIGS, *args)
    assert result.exit_code == expect, f"{args} exited {result.exit_code}:\n{result.stdout}\n{result.stderr}"
    return result


def test_a_brokers_own_setting_and_the_cluster_default(java, broker):
    b = ["--bootstrap-server", broker.bootstrap]
    one = [*b, "--entity-type", "brokers", "--entity-name", "1"]
    default = [*b, "--entity-type", "brokers", "--entity-default"]
    assert run(java, *one, "--alter", "--add-config", "message.max.bytes=2000000").stdout == \
        "Completed updating config for broker 1.\n"
    assert run(java, *default, "--alter", "--add-config", "log.retention.ms=3600000").stdout == \
        "Completed updating default config for brokers in the cluster.\n"
    assert run(java, *one, "--describe").lines() == [
        "Dynamic configs for broker 1 are:",
        "  message.max.bytes=2000000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=2000000, "
        "DEFAULT_CONFIG:message.max.bytes=1048588}"]
    assert run(java, *default, "--describe").lines() == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000}"]
    every = run(java, *one, "--describe", "--all").lines()
    assert ("  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "log.retention.ms=3600000, DEFAULT_CONFIG:log.retention.hours=168}") in every
    refused = run(java, *one, "--alter", "--add-config", "log.dirs=/elsewhere", expect=1)
    assert "Cannot update these configs dynamically: [log.dirs]" in refused.stdout + refused.stderr
    run(java, *one, "--alter", "--delete-config", "message.max.bytes")
    run(java, *default, "--alter", "--delete-config", "log.retention.ms")
    assert run(java, *one, "--describe").lines() == ["Dynamic configs for broker 1 are:"]


def test_a_groups_configs(java, broker):
    group = ["--bootstrap-server", broker.bootstrap, "--entity-type", "groups", "--entity-name", "payments"]
    assert run(java, *group, "--alter", "--add-config", "consumer.heartbeat.interval.ms=6000").stdout == \
        "Completed updating config for group payments.\n"
    assert run(java, *group, "--describe").lines() == [
        "Dynamic configs for group payments are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
        "consumer.heartbeat.interval.ms=6000, DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}"]
    refused = run(java, *group, "--alter", "--add-config", "consumer.session.timeout.ms=1000", expect=1)
    assert "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive." in \
        refused.stdout + refused.stderr
