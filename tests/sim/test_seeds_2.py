"""The fixed seed set, part 2 of 4: seeds 2, 6, 10 … (``fixed_seeds(2)``; the parts
share make test's workers). Every seed must pass; a failure prints
``seed=<n> config=<…> invariant=<name>``, the last events, and the command that replays it."""

import pytest

from tests.sim.conftest import assert_fixed_seed_passes, fixed_seeds


@pytest.mark.parametrize("seed", fixed_seeds(2))
def test_seed(run, seed):
    assert_fixed_seed_passes(run(seed))
