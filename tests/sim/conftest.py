"""Helpers for the simulator's tests: run a seed or a scenario in a temporary directory."""

from __future__ import annotations

import pytest

from tidelog.sim.simulation import run_seed

# The fixed seed set the normal test command runs (at least 50 seeds). Each seed
# draws its own cluster, topics, timeouts and faults; see tidelog/sim/config.py.
FIXED_SEEDS = tuple(range(50))


def failure_report(result) -> str:
    lines = [result.summary(), f"  {result.detail}", "  last events:"]
    lines += [f"    {line}" for line in result.trace_tail[-40:]]
    lines.append(f"  replay: python -m tidelog.sim --seed {result.seed}"
                 + (f" --defect {result.config.defect}" if result.config.defect else "") + " --trace")
    return "\n".join(lines)


@pytest.fixture
def run(tmp_path_factory):
    """``run(seed, **options)`` → SimResult, each in its own temporary directory."""
    def _run(seed: int, **options):
        return run_seed(seed, str(tmp_path_factory.mktemp(f"sim-{seed}")), **options)
    return _run
