"""Integration tests: real ``tidelog serve`` processes driven by real Kafka clients."""

import pytest

from tidelog.testing import Broker


@pytest.fixture(scope="module")
def broker():
    with Broker() as running:
        yield running
