"""The fixed seed set, part 0 of 4: seeds 0, 4, 8 … (``fixed_seeds(0)``; the parts
share make test's workers). Every seed must pass; a failure prints
``seed=<n> config=<…> invariant=<name>``, the last events, and the command that replays it."""

import pytest

from tests.sim.conftest import assert_fixed_seed_passes, fixed_seeds


@pytest.mark.parametrize("seed", fixed_seeds(0))
def test_seed(run, seed):
    assert_fixed_seed_passes(run(seed))


def test_the_parts_run_every_fixed_seed_once():
    from pathlib import Path
    from tests.sim.conftest import FIXED_SEEDS, SEED_MODULES
    here = Path(__file__).parent
    assert sorted(p.name for p in here.glob("test_seeds_*.py")) == [f"test_seeds_{part}.py"
                                                                    for part in range(SEED_MODULES)]
    assert sorted(seed for part in range(SEED_MODULES) for seed in fixed_seeds(part)) == list(FIXED_SEEDS)
