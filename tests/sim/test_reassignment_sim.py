"""The simulator with the ``reassign`` fault (an opt-in kind, tidelog/sim/nemesis.py):
partitions moved to random replica sets, and cancelled, through the active controller,
among every other fault the seed draws. The invariants of docs/simulation.md hold after
every event (no acknowledged acks=all record lost, one leader per epoch), and the
cluster converges once healed."""

import pytest

from tests.sim.conftest import failure_report
from tidelog.sim.config import SimConfig

SEEDS = (0, 1, 3, 5, 6, 7, 8)   # seeds whose nemesis moves partitions (not 2 and 4)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_with_reassignments(run, seed):
    config = SimConfig.from_seed(seed)
    config = config.with_options(fault_kinds=config.fault_kinds + ("reassign",) * 4)   # about one strike in 4
    result = run(seed, config=config)
    assert result.passed, failure_report(result)
    assert result.stats.acked_all_lost == 0
    assert result.stats.faults.get("reassign", 0) > 0, "no partition was moved"
