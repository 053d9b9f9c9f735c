"""A simulator that cannot fail proves nothing: with a defect planted through a
test-only switch (tidelog/sim/defects.py), some seed of the fixed set must fail,
and with the invariant the defect breaks. The defects are shared by this module and
test_defects_1.py (``DEFECTS[part::2]``), so that make test's workers share them."""

import pytest

from tidelog.sim.defects import CONTROLLERS, EXPECTED, SCENARIO_ONLY
from tests.sim.conftest import FIXED_SEEDS

DEFECTS = sorted(set(EXPECTED) - SCENARIO_ONLY)
DEFECT_MODULES = 2


def assert_some_fixed_seed_catches(run, defect: str) -> None:
    controllers = CONTROLLERS.get(defect)      # the quorum's defects: a quorum on every seed
    failures = []
    for seed in FIXED_SEEDS:
        result = run(seed, defect=defect, controllers=controllers)
        if not result.passed:
            failures.append((seed, result.invariant))
            if result.invariant in EXPECTED[defect]:
                break
    assert failures, f"no seed of the fixed set caught {defect}"
    seed, invariant = failures[-1]
    assert invariant in EXPECTED[defect], failures
    # …and the seed passes without the defect: the failure is the defect's.
    assert run(seed, controllers=controllers).passed


@pytest.mark.parametrize("defect", DEFECTS[0::DEFECT_MODULES])
def test_a_planted_defect_fails_some_fixed_seed_with_the_right_invariant(run, defect):
    assert_some_fixed_seed_catches(run, defect)


def test_the_defect_modules_plant_every_defect():
    from tests.sim import test_defects_1
    assert sorted(DEFECTS[0::DEFECT_MODULES] + test_defects_1.PART) == DEFECTS


def test_the_defect_switch_is_off_outside_its_block():
    from tidelog.replication.partition import Partition
    from tidelog.sim.defects import planted
    original = Partition.maybe_increment_leader_high_watermark
    with planted("hw-ignores-caught-up-follower"):
        assert Partition.maybe_increment_leader_high_watermark is not original
    assert Partition.maybe_increment_leader_high_watermark is original
