"""Fixtures shared by every test directory, and how the suite runs in parallel.

``kafka_node``: the real Apache Kafka (the release interop/kafka-server/pom.xml pins), one
combined KRaft node on free loopback ports, started once per test process the first time
a test asks for it (tests/kafka_fixture.py). Without java or mvn those tests skip.

Parallel runs (``make test``: pytest-xdist, ``--dist loadfile``; docs/testing.md). Most of
the suite waits (process start-ups, JVMs, timeouts), so several worker processes overlap
those waits. A test module is one unit of work: it runs whole in one worker, so a
module-scoped broker, cluster, JVM or Spark session starts once, as when the module runs
alone. The modules are handed out longest first (``tests/durations.txt``: the seconds each
took, regenerated with ``python -m tests.durations``), so that no long module starts last.
``@pytest.mark.serial`` tests are left out of the parallel phase (``-m "not serial"``) and
run afterwards, alone, in a second pytest run: tests whose claim needs an unloaded machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka_fixture import KafkaCluster, missing_tools

# Beside the fixture's own (internal topics replicated once, no initial rebalance delay):
# small internal topics, so the first group or transaction does not wait for 50 partitions.
KAFKA_NODE_SETTINGS = {"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "5",
                       "share.coordinator.state.topic.num.partitions": "5"}

ROOT = Path(__file__).resolve().parents[1]
DURATIONS_FILE = ROOT / "tests" / "durations.txt"
# A module not yet in durations.txt is assumed to take this long (seconds): better a short
# new module started early than a long one started last.
UNKNOWN_MODULE_S = 60.0


@pytest.fixture(scope="session")
def kafka_node():
    reason = missing_tools()
    if reason:
        pytest.skip(f"real Kafka unavailable: {reason}")
    with KafkaCluster(overrides=KAFKA_NODE_SETTINGS) as kafka:
        yield kafka


def module_seconds() -> dict[str, float]:
    """``tests/durations.txt``: module path -> seconds it took last measured."""
    seconds = {}
    try:
        lines = DURATIONS_FILE.read_text().splitlines()
    except OSError:
        return seconds
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            value, path = line.split(None, 1)
            seconds[path] = float(value)
    return seconds


def pytest_collection_modifyitems(config, items):
    """In an xdist worker: order the modules longest first, each module's tests kept
    together and in their order. The order is a pure function of the collected tests,
    so every worker computes the same one (xdist checks that they agree); loadfile then
    hands the modules out in it (``--no-loadscope-reorder``)."""
    if not hasattr(config, "workerinput"):
        return                                   # not distributed: collection order
    seconds = module_seconds()
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    order = sorted(modules, key=lambda module: seconds.get(module, UNKNOWN_MODULE_S), reverse=True)
    order = spark_after_the_first_units(order, int(config.workerinput.get("workercount", 4)))
    items[:] = [item for module in order for item in modules[module]]


def spark_after_the_first_units(order: list[str], workers: int) -> list[str]:
    """The first module each worker takes is not a Spark one: ``make test`` writes the Spark
    class archive beside the first tests (tests/spark/cds.py) and a Spark JVM waits for it,
    so a worker that began with a Spark module would sit idle meanwhile. Unconditional, so
    that every worker computes the same order; the Spark modules still start in the first
    two minutes, long before the tail the longest-first order protects."""
    spark = [m for m in order if m.startswith("tests/spark/")]
    other = [m for m in order if not m.startswith("tests/spark/")]
    return other[:workers] + [m for m in order if m not in other[:workers]] if spark else order


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
