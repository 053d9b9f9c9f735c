"""kio is imported without Hypothesis's strategies in every process that speaks the
protocol (tidelog/protocol/__init__.py): brokers, commands and Spark's Python workers
would otherwise each spend about 0.15 s of CPU importing Hypothesis, pytest and trio."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tidelog.server.runtime", "tidelog.server.refusals",
                                    "tidelog.server.authorization", "tidelog.server.quotas",
                                    "tidelog.spark.source", "tidelog.spark.sink"])
def test_a_process_that_speaks_the_protocol_imports_no_hypothesis(module):
    result = subprocess.run([sys.executable, "-c", f"""
import sys
import {module}
import kio.static.primitive
print("hypothesis" in sys.modules)
import hypothesis.strategies                     # still importable afterwards
"""], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False", result.stdout


def test_a_process_that_has_hypothesis_keeps_kios_strategies():
    result = subprocess.run([sys.executable, "-c", """
import hypothesis.strategies as st
import tidelog.protocol.codec
from kio.static.primitive import i16
print(st.from_type(i16).example() is not None)
"""], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "True", result.stdout
