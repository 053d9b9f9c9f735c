"""A simulator that cannot fail proves nothing: with a defect planted through a
test-only switch (tidelog/sim/defects.py), some seed of the fixed set must fail,
and with the invariant the defect breaks. The defects are shared by this module and
test_defects_1.py (``DEFECTS[part::2]``), so that make test's workers share them."""

import pytest

from tidelog.sim.defects import CONTROLLERS, EXPECTED, SCENARIO_ONLY
from tests.sim.conftest import FIXED_SEEDS, assert_some_seed_catches

DEFECTS = sorted(set(EXPECTED) - SCENARIO_ONLY)
DEFECT_MODULES = 2


def assert_some_fixed_seed_catches(run, defect: str) -> None:
    controllers = CONTROLLERS.get(defect)      # the quorum's defects: a quorum on every seed
    assert_some_seed_catches(lambda seed, planted: run(seed, defect=planted, controllers=controllers),
                             FIXED_SEEDS, defect, EXPECTED[defect])


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
