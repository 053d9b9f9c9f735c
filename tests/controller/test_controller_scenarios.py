"""Runs every scenario script in tests/controller/scenarios (see scenario_runner.py).

Rewrite the expected output with ``TIDELOG_REWRITE=1 pytest tests/controller`` (or
``pytest tests/controller --rewrite``) and review the diff.
"""

import difflib
import os
from pathlib import Path

import pytest

from .scenario_runner import run_script

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))


def _rewrite(config) -> bool:
    if os.environ.get("TIDELOG_REWRITE") == "1":
        return True
    try:
        return bool(config.getoption("--rewrite"))
    except ValueError:
        return False


def test_there_are_at_least_ten_scenarios():
    assert len(SCENARIOS) >= 10


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario(path, request):
    expected, actual = run_script(path)
    if _rewrite(request.config):
        path.write_text(actual)
        return
    if expected != actual:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{path.name} (expected)", tofile=f"{path.name} (actual)"))
        pytest.fail(f"scenario {path.name} differs; rerun with TIDELOG_REWRITE=1 to accept:\n"
                    + diff, pytrace=False)
