"""Differential conformance of dynamic configs and authorized operations (scenarios_configs.py):
the same requests to the session's real Kafka (tests/kafka_fixture.py) and to a ``tidelog
serve`` with the same settings, at the lowest and the highest version both serve, every
field compared with test_differential.py's machinery. A difference fails the test unless
scenarios_configs.ALLOWED names it with its reason."""

from __future__ import annotations

import asyncio
import re

import pytest

from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker

from tests.conformance.differential import ABSENT, HOST, Difference, Side, common_versions, compare
from tests.conformance.scenarios_configs import ALLOWED, SCENARIOS
from tests.kafka_fixture import missing_tools

MODES = ("low", "high")
# Settings of the Kafka fixture about that node alone (tidelog gets the rest).
NODE_SETTINGS = {"process.roles", "node.id", "listeners", "advertised.listeners", "log.dirs",
                 "controller.quorum.voters", "controller.listener.names", "inter.broker.listener.name",
                 "listener.security.protocol.map"}

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=f"real Kafka unavailable: {missing_tools()}")


@pytest.fixture(scope="module")
def sides(kafka_node):
    settings = {k: v for k, v in kafka_node.broker_settings.items() if k not in NODE_SETTINGS}
    with Broker(overrides=settings) as broker:
        ports = {"kafka": kafka_node.port, "tidelog": broker.port}

        async def negotiate():
            served = {}
            for name, port in ports.items():
                connection = await KafkaConnection.connect(HOST, port, client_id="conformance")
                served[name] = dict(connection.api_versions)
                connection.close()
            return common_versions(served["kafka"], served["tidelog"])
        yield ports, asyncio.run(negotiate())


def _allowed(key: str) -> str | None:
    for pattern, reason in ALLOWED.items():
        if re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), key, re.DOTALL):
            return reason
    return None


async def _run(ports: dict, versions: dict, scenario: str, mode: str) -> list[Difference]:
    sides = [Side(name, port, versions) for name, port in ports.items()]
    for side in sides:
        await side.open()
    try:
        kafka, tidelog = [await SCENARIOS[scenario](side, mode) for side in sides]
    finally:
        for side in sides:
            side.close()
    differences = []
    for label in kafka.keys() | tidelog.keys():
        for path, k, t in compare(kafka.get(label, ABSENT), tidelog.get(label, ABSENT)):
            difference = Difference(scenario, mode, label, path, k, t)
            difference.reason = _allowed(difference.key)
            differences.append(difference)
    return differences


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario(sides, scenario, mode):
    ports, versions = sides
    differences = asyncio.run(_run(ports, versions, scenario, mode))
    unexplained = sorted((d for d in differences if d.reason is None), key=lambda d: d.key)
    assert not unexplained, (f"{len(unexplained)} difference(s) from Kafka not allowed:\n"
                             + "\n".join(f"  {d.key}: Kafka {d.kafka!r}, tidelog {d.tidelog!r}"
                                         for d in unexplained[:40]))
