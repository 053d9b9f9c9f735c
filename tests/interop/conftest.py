"""Kafka's own Java client and command-line tools against tidelog (interop/java).

Each test module shares one JVM (the ``java`` fixture): starting a JVM and loading
Kafka's classes costs about a second, a command on a warm one milliseconds.
"""

import pytest

from tests.interop.java_driver import JavaDriver, missing_tools
from tests.interop.line_driver import open_driver

SKIP_REASON = missing_tools()

# Quick group rebalances, as the other group tests use.
GROUP_SETTINGS = {"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0",
                  "group.min.session.timeout.ms": "1000", "group.consumer.heartbeat.interval.ms": "500"}


def pytest_collection_modifyitems(config, items):
    if SKIP_REASON:
        skip = pytest.mark.skip(reason=f"Java interop tests skipped: {SKIP_REASON}")
        for item in items:
            # A module that sets NEEDS_JAVA = False (franz-go, KafkaJS) skips on its own terms.
            if "tests/interop/" in str(item.fspath).replace("\\", "/") and getattr(item.module, "NEEDS_JAVA", True):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def java():
    with open_driver(JavaDriver()) as driver:
        yield driver

