"""The fixed seed set: every seed must pass (the invariants of docs/simulation.md
after every event, convergence after healing). A failure prints
``seed=<n> config=<…> invariant=<name>``, the last events, and the command that
replays it."""

import pytest

from tests.sim.conftest import FIXED_SEEDS, failure_report


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_seed(run, seed):
    result = run(seed)
    assert result.passed, failure_report(result)
    stats = result.stats
    assert stats.acked_all_lost == 0
    assert sum(stats.faults.values()) > 0, "the nemesis struck nothing"
    assert stats.produce_requests > 0 and stats.consumed > 0
