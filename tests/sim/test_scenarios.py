"""The named fault scenarios on the simulator, each with its expected outcome; and
the planted defects turn the outcome around where a scenario exists to catch them."""

import pytest

from tidelog.sim.scenarios import SCENARIOS, run_scenario


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_has_its_expected_outcome(tmp_path, name):
    outcome = run_scenario(name, str(tmp_path))
    assert outcome.violation is None, outcome.report()
    assert outcome.as_expected, outcome.report()


def test_kip_101_without_leader_epochs_loses_the_committed_record(tmp_path):
    outcome = run_scenario("kip-101-1", str(tmp_path), defect="truncate-to-high-watermark")
    assert not outcome.as_expected, outcome.report()
    assert outcome.observed["A's log when elected"] == [b"m0"]        # m1 (the scenario's m2) is gone


def test_jepsen_safe_with_a_controller_that_elects_outside_the_isr_fails(tmp_path):
    outcome = run_scenario("jepsen-2013-safe", str(tmp_path), defect="unclean-election-when-disabled")
    assert outcome.violation is not None and outcome.violation.startswith("10.4-acknowledged-write-kept")


def test_applying_stale_metadata_before_registering_loses_committed_records(tmp_path):
    """The order BrokerNode keeps is what saves the scenario: a broker that applied
    its local metadata copy at start, before registering, would lead its old epoch
    after restarting with an empty disk, and the followers would truncate to it."""
    outcome = run_scenario("stale-metadata-restart", str(tmp_path), defect="publish-before-registration")
    assert outcome.violation is not None and outcome.violation.startswith("10.4-acknowledged-write-kept")


def test_a_quorum_leader_that_commits_alone_is_caught(tmp_path):
    """Cut off from the other voters, a leader that counts itself a majority commits its
    write alone; the leader elected after it lacks that committed entry."""
    outcome = run_scenario("quorum-leader-cut-off", str(tmp_path), defect="raft-commit-without-majority")
    assert outcome.violation is not None, outcome.report()
    assert outcome.violation.split(":")[0] in {"raft-committed-kept", "metadata-only-committed"}, outcome.report()


@pytest.mark.parametrize("defect", ["transaction-markers-acks-1", "produce-skips-verification"])
def test_the_request_layers_transaction_defects_are_caught_by_their_scenarios(tmp_path, defect):
    """Markers appended with acks=1 leave the new leader with a transaction nobody ends;
    a produce that skips KIP-890's check appends the never-added partition's write."""
    from tidelog.sim.defects import CAUGHT_BY_SCENARIO
    outcome = run_scenario(CAUGHT_BY_SCENARIO[defect], str(tmp_path), defect=defect)
    assert not outcome.as_expected, outcome.report()
