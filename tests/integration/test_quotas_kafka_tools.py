"""Kafka's own kafka-configs (ConfigCommand, from the pinned jar) managing client quotas on
``tidelog serve``: ``--entity-type clients/users`` (and ``--entity-default``) ``--alter
--add-config producer_byte_rate=…`` and ``--describe``, printed as Kafka prints them."""

import pytest

from tests.interop.java_driver import JavaDriver, missing_tools
from tests.interop.line_driver import open_driver
from tidelog.testing import Broker

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=f"Java tools unavailable: {missing_tools()}")


@pytest.fixture(scope="module")
def java():
    with open_driver(JavaDriver()) as driver:
        yield driver


@pytest.fixture(scope="module")
def broker():
    with Broker() as running:
        yield running


def run(java, *args, expect=0):
    result = java.tool("ConfigCommand", *args)
    assert result.exit_code == expect, f"{args} exited {result.exit_code}:\n{result.stdout}\n{result.stderr}"
    return result


def test_kafka_configs_alters_and_describes_client_and_user_quotas(java, broker):
    b = ["--bootstrap-server", broker.bootstrap]
    client = [*b, "--entity-type", "clients", "--entity-name", "app"]
    user = [*b, "--entity-type", "users", "--entity-name", "alice"]
    defaults = [*b, "--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default"]
    assert run(java, *client, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048").stdout \
        == "Completed updating config for client app.\n"
    assert run(java, *user, "--alter", "--add-config", "request_percentage=12.5").stdout == \
        "Completed updating config for user alice.\n"
    assert run(java, *defaults, "--alter", "--add-config", "producer_byte_rate=4096").stdout == \
        "Completed updating default config for users in the cluster.\n"
    assert run(java, *client, "--describe").lines() == [
        "Quota configs for client-id 'app' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"]
    assert run(java, *user, "--describe").lines() == ["Quota configs for user-principal 'alice' are request_percentage=12.5"]
    assert run(java, *defaults, "--describe").lines() == [
        "Quota configs for the default user-principal, the default client-id are producer_byte_rate=4096.0"]
    # Bad input: Kafka's InvalidRequestException with its message; nothing changed.
    refused = run(java, *client, "--alter", "--add-config", "producer_byte_rate=-5", expect=1)
    assert "InvalidRequestException: Quota producer_byte_rate must be greater than 0" in refused.stdout + refused.stderr
    run(java, *client, "--alter", "--delete-config", "consumer_byte_rate")
    assert run(java, *client, "--describe").lines() == ["Quota configs for client-id 'app' are producer_byte_rate=1024.0"]
