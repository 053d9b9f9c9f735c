"""A simulator that cannot fail proves nothing: with a defect planted through a
test-only switch (tidelog/sim/defects.py), some seed of the fixed set must fail,
and with the invariant the defect breaks."""

import pytest

from tidelog.sim.defects import CONTROLLERS, EXPECTED, SCENARIO_ONLY
from tests.sim.conftest import FIXED_SEEDS


@pytest.mark.parametrize("defect", sorted(set(EXPECTED) - SCENARIO_ONLY))
def test_a_planted_defect_fails_some_fixed_seed_with_the_right_invariant(run, defect):
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


def test_the_defect_switch_is_off_outside_its_block():
    from tidelog.replication.partition import Partition
    from tidelog.sim.defects import planted
    original = Partition.maybe_increment_leader_high_watermark
    with planted("hw-ignores-caught-up-follower"):
        assert Partition.maybe_increment_leader_high_watermark is not original
    assert Partition.maybe_increment_leader_high_watermark is original
