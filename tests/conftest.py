"""Fixtures shared by every test directory, and how the suite runs in parallel.

``kafka_node``: the real Apache Kafka (the release interop/kafka-server/pom.xml pins), one
combined KRaft node on free loopback ports, started once per test process the first time
a test asks for it (tests/kafka_fixture.py). Without java or mvn those tests skip.

Parallel runs (``make test``: pytest-xdist, ``--dist loadgroup``; docs/testing.md). Most
of the suite waits (process start-ups, JVMs, timeouts), so several worker processes
overlap those waits. Which tests share a worker is decided here, by one rule:

- a test that uses a project fixture wider than a test shares a worker with every other
  user of it: a module-, class- or package-scoped fixture keeps its module together (one
  broker per module, as when run alone); a session-scoped one (``kafka_node``) puts all its
  users in one group, so that Kafka starts once;
- every other test is a unit of its own, spread over the workers.

Groups are handed out longest first (``tests/durations.txt``: the seconds each module took,
regenerated with ``python -m tests.durations``), so that no long module starts last.
``@pytest.mark.serial`` tests are left out of the parallel phase (``-m "not serial"``) and
run afterwards, alone, in a second pytest run: tests whose claim needs an unloaded machine.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.kafka_fixture import KafkaCluster, missing_tools

# Beside the fixture's own (internal topics replicated once, no initial rebalance delay):
# small internal topics, so the first group or transaction does not wait for 50 partitions.
KAFKA_NODE_SETTINGS = {"offsets.topic.num.partitions": "5", "transaction.state.log.num.partitions": "5",
                       "share.coordinator.state.topic.num.partitions": "5"}

ROOT = Path(__file__).resolve().parents[1]
DURATIONS_FILE = ROOT / "tests" / "durations.txt"
# A module not yet in durations.txt: assumed to take this long (seconds).
UNKNOWN_MODULE_S = 5.0


@pytest.fixture(scope="session")
def kafka_node():
    reason = missing_tools()
    if reason:
        pytest.skip(f"real Kafka unavailable: {reason}")
    with KafkaCluster(overrides=KAFKA_NODE_SETTINGS) as kafka:
        yield kafka


def _project_fixture(fixturedef) -> bool:
    """Defined in this repository (a conftest, a test module, tidelog.testing), not by
    pytest or a plugin (tmp_path_factory, pytestconfig, ...)."""
    code = getattr(getattr(fixturedef, "func", None), "__code__", None)
    path = Path(code.co_filename).resolve() if code is not None else None
    return path is not None and path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / ".venv")


def wide_fixtures(item: pytest.Item) -> tuple[set[str], bool]:
    """The session-scoped project fixtures ``item`` uses, and whether it uses any other
    project fixture wider than a test (module, class or package scope)."""
    sessions, wide = set(), False
    for name, fixturedefs in item._fixtureinfo.name2fixturedefs.items():
        fixturedef = fixturedefs[-1]               # the one in force for this test
        if fixturedef.scope == "function" or not _project_fixture(fixturedef):
            continue
        if fixturedef.scope == "session":
            sessions.add(name)
        else:
            wide = True
    return sessions, wide


def xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """module path -> the group all its tests share a worker with; a module that is not
    in it may have its tests spread. A module shares if any of its tests uses a project
    fixture wider than a test, or asks for one by name (``request.getfixturevalue``); if
    one of them is session-scoped, the module joins that fixture's group."""
    sessions: dict[str, set[str]] = {}
    wide: set[str] = set()
    for item in items:
        module = _module(item)
        used, other = wide_fixtures(item)
        sessions.setdefault(module, set()).update(used)
        if other or used:
            wide.add(module)
    for module in sessions:
        if module not in wide and "getfixturevalue(" in (ROOT / module).read_text(errors="replace"):
            wide.add(module)
    return {module: "session-" + "-".join(sorted(sessions[module])) if sessions[module] else module
            for module in wide}


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker: mark each test's group (see the module's docstring) and order
    the work units longest first. Runs before xdist's own hook, which turns the
    ``xdist_group`` marks into work units; the order is a pure function of the collected
    tests, so every worker computes the same one (xdist checks that they agree)."""
    if not hasattr(config, "workerinput"):
        return                                   # not distributed: collection order
    seconds = module_seconds()
    tests_per_module = Counter(_module(item) for item in items)
    groups = xdist_groups(items)
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        marks = list(item.iter_markers("xdist_group"))
        if marks:
            group = marks[0].args[0] if marks[0].args else marks[0].kwargs.get("name", "default")
        else:
            group = groups.get(_module(item))
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
        units.setdefault(group or item.nodeid, []).append(item)

    def weight(unit: list[pytest.Item]) -> float:
        """The seconds a unit is expected to take: each test's share of its module's."""
        return sum(seconds.get(_module(i), UNKNOWN_MODULE_S) / tests_per_module[_module(i)] for i in unit)

    items[:] = [item for unit in sorted(units.values(), key=weight, reverse=True) for item in unit]


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
