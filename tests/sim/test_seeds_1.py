"""The fixed seed set, part 1 of 4: seeds 1, 5, 9 … (``fixed_seeds(1)``; the parts
share make test's workers). Every seed must pass; a failure prints
``seed=<n> config=<…> invariant=<name>``, the last events, and the command that replays it."""

import pytest

from tests.sim.conftest import assert_fixed_seed_passes, fixed_seeds


@pytest.mark.parametrize("seed", fixed_seeds(1))
def test_seed(run, seed):
    assert_fixed_seed_passes(run(seed))
