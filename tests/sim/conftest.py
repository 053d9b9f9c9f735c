"""Helpers for the simulator's tests: run a seed or a scenario in a temporary directory.

A simulated broker's files are real files (``tidelog.sim.disk``), thousands per seed;
on a journaling file system creating them costs about as much as the rest of the run,
so here ``tmp_path`` (and ``run``'s directories) live in memory where the machine has
``/dev/shm`` (``scratch_directory``), and each is removed when its test ends.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tidelog.sim.disk import scratch_directory
from tidelog.sim.simulation import run_seed

# The fixed seed set the normal test command runs (at least 50 seeds). Each seed
# draws its own cluster, topics, timeouts and faults; see tidelog/sim/config.py.
FIXED_SEEDS = tuple(range(50))
# They run as SEED_MODULES test modules (tests/sim/test_seeds_<part>.py: the seeds
# ``FIXED_SEEDS[part::SEED_MODULES]``), so that make test's workers share them: a test
# module runs whole in one worker (docs/testing.md).
SEED_MODULES = 4


def fixed_seeds(part: int) -> tuple[int, ...]:
    return FIXED_SEEDS[part::SEED_MODULES]


def assert_fixed_seed_passes(result) -> None:
    """Every fixed seed must pass (the invariants of docs/simulation.md after every
    event, convergence after healing), with faults struck and records produced and read."""
    assert result.passed, failure_report(result)
    stats = result.stats
    assert stats.acked_all_lost == 0
    assert sum(stats.faults.values()) > 0, "the nemesis struck nothing"
    assert stats.produce_requests > 0 and stats.consumed > 0


def assert_some_seed_catches(run_one, seeds, defect: str, expected: set[str]) -> None:
    """With ``defect`` planted, some seed of ``seeds`` fails (``run_one(seed, defect)``),
    with an invariant of ``expected``; and that seed passes without the defect."""
    failures = []
    for seed in seeds:
        result = run_one(seed, defect)
        if not result.passed:
            failures.append((seed, result.invariant))
            if result.invariant in expected:
                break
    assert failures, f"no seed of {seeds} caught {defect}"
    seed, invariant = failures[-1]
    assert invariant in expected, failures
    assert run_one(seed, None).passed       # the failure is the defect's


def failure_report(result) -> str:
    lines = [result.summary(), f"  {result.detail}", "  last events:"]
    lines += [f"    {line}" for line in result.trace_tail[-40:]]
    lines.append(f"  replay: python -m tidelog.sim --seed {result.seed}"
                 + (f" --defect {result.config.defect}" if result.config.defect else "") + " --trace")
    return "\n".join(lines)


@pytest.fixture(scope="session")
def scratch():
    """This test process's directory for simulated disks (in memory if possible)."""
    directory = scratch_directory("tidelog-sim-tests-")
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def tmp_path(scratch, request):
    """pytest's ``tmp_path`` for the simulator's tests: a new directory under ``scratch``."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def run(tmp_path):
    """``run(seed, **options)`` → SimResult, each in its own directory under ``tmp_path``."""
    def _run(seed: int, **options):
        return run_seed(seed, tempfile.mkdtemp(prefix=f"sim-{seed}-", dir=tmp_path), **options)
    return _run
