"""The planted defects, part 2 of 2 (test_defects.py has the others and says why)."""

import pytest

from tests.sim.test_defects import DEFECT_MODULES, DEFECTS, assert_some_fixed_seed_catches

PART = DEFECTS[1::DEFECT_MODULES]


@pytest.mark.parametrize("defect", PART)
def test_a_planted_defect_fails_some_fixed_seed_with_the_right_invariant(run, defect):
    assert_some_fixed_seed_catches(run, defect)
