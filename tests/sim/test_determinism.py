"""A seed is a pure function: the same seed gives the same trace, event for event,
in this process and in a new one (whatever Python's string hashing)."""

import os
import subprocess
import sys

from tidelog.sim.loop import Trace
from tidelog.sim.simulation import run_seed


def _trace(tmp_path, seed):
    trace = Trace(record_all=True)
    result = run_seed(seed, str(tmp_path), trace=trace)
    return result, trace.lines


def test_same_seed_twice_gives_the_same_trace(tmp_path):
    first, first_lines = _trace(tmp_path / "a", 7)
    second, second_lines = _trace(tmp_path / "b", 7)
    assert first.passed and second.passed
    assert len(first_lines) > 1000
    assert first_lines == second_lines
    assert first.digest == second.digest
    assert first.stats == second.stats


def test_different_seeds_differ(tmp_path):
    assert run_seed(3, str(tmp_path / "a")).digest != run_seed(4, str(tmp_path / "b")).digest


def test_replay_in_a_new_process_gives_the_same_digest(tmp_path):
    result = run_seed(5, str(tmp_path))
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-m", "tidelog.sim", "--seed", "5", "--digest"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"full_digest={result.digest}" in out.stdout
