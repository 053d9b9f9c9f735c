"""The controller quorum in the simulator: seeds run 1, 3 or 5 controllers (production's
RaftReplica, QuorumController and QuorumMember over the simulated network), chosen
without disturbing anything else the seed decides; a quorum seed with failovers
passes every invariant; and the quorum's invariants catch a broker that applies
metadata the quorum has not committed."""

import dataclasses

from tidelog.sim.config import SimConfig
from tidelog.sim.controller import SimController
from tidelog.sim.scenarios import run_scenario
from tests.sim.conftest import FIXED_SEEDS, failure_report

QUORUM_SEED = 13          # 3 controllers, failovers under faults (seed 10 until failed log directories
                          # were reported: its run changed and no longer faults the quorum leader)


def test_the_quorum_size_comes_from_the_seed_and_changes_no_other_option():
    sizes = set()
    for seed in FIXED_SEEDS:
        config = SimConfig.from_seed(seed)
        sizes.add(config.controllers)
        single = SimConfig.from_seed(seed, controllers=1)
        assert dataclasses.replace(single, controllers=config.controllers,
                                   controller_drift_ppm=config.controller_drift_ppm) == config
        assert len(config.controller_drift_ppm) == config.controllers - 1
    assert sizes == {1, 3, 5}


def test_a_quorum_seed_with_failovers_passes(run):
    result = run(QUORUM_SEED)
    assert result.config.controllers == 3
    assert result.passed, failure_report(result)
    stats = result.stats
    assert stats.controller_elections >= 2, "no failover"
    assert stats.controller_activations >= 2
    assert any(kind.endswith("-leader") for kind in stats.controller_faults), stats.controller_faults
    assert stats.metadata_records_committed > 0


def test_a_broker_fed_uncommitted_metadata_is_caught(tmp_path, monkeypatch):
    """Break the active controller's metadata fetch so that it answers up to its log end
    instead of the quorum's high watermark: brokers get batches before a majority has
    them (already while the cluster is set up; a cut-off leader's would never be
    committed) — metadata-only-committed."""
    original = SimController._metadata_answer

    def up_to_the_log_end(self, from_offset):
        answer = original(self, from_offset)
        if answer["error"] == 0:
            answer["records"] = self.log.read_bytes(from_offset, self.log.end_offset)
            answer["high_watermark"] = self.log.end_offset
        return answer

    monkeypatch.setattr(SimController, "_metadata_answer", up_to_the_log_end)
    outcome = run_scenario("quorum-leader-cut-off", str(tmp_path))
    assert outcome.violation is not None, outcome.report()
    assert outcome.violation.startswith("metadata-only-committed"), outcome.report()


def test_voter_changes_keep_one_leader_and_every_committed_batch(tmp_path):
    """KIP-853 in the whole simulator (controllers, brokers, the checker after every
    event): add a controller started from bootstrap servers, remove a voter while
    another is killed mid-change, the leader removes itself (sim/scenarios.py)."""
    outcome = run_scenario("quorum-voter-changes", str(tmp_path))
    assert outcome.violation is None and outcome.as_expected, outcome.report()
