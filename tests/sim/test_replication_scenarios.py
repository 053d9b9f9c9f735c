"""Replication end to end on the simulator: one fetch round step by step, the named
fault scenarios ending in exact logs, ISR and min-ISR rules, acks=all across a
leader crash, DeleteRecords while followers lag, and long-poll fetches.

Each test runs a named scenario (``tidelog.sim.scenarios``) and asserts its
outcome: every expectation the script recorded was met, no invariant was
violated along the way (the checker runs after every simulated event), plus the
key observations by name. Scenarios that truncate run in both of Kafka's modes:
truncate-on-fetch (diverging epochs in Fetch, the normal one since IBP 2.7) and
OffsetsForLeaderEpoch (``FetcherConfig.truncate_on_fetch=False``).
"""

import pytest

from tidelog.sim.scenarios import run_scenario

MODES = {"truncate_on_fetch": True, "offsets_for_leader_epoch": False}


@pytest.fixture(params=sorted(MODES))
def truncate_on_fetch(request) -> bool:
    return MODES[request.param]


def run(tmp_path, name: str, **options):
    outcome = run_scenario(name, str(tmp_path), **options)
    assert outcome.violation is None, outcome.report()
    assert outcome.as_expected, outcome.report()
    return outcome.observed


def test_nine_steps_of_replication(tmp_path):
    seen = run(tmp_path, "replication-steps")
    assert seen["3. fetch (offset, current leader epoch, last fetched epoch, log start)"] == (0, 0, -1, 0)
    assert seen["4. the leader's record of the follower (LEO, fetch time is now)"] == (0, True)
    assert seen["5-6. ISR change proposed, leader HW"] == (None, 5)
    assert seen["8-9. the follower's (LEO, HW)"] == (5, 5)
    assert seen["caught up: (last caught-up time is now, proposed ISR)"] == (True, (1, 2))
    assert seen["acks=all: (answered, follower HW) when the leader's HW moved to 6"] == (False, 5)
    assert seen["acks=all answer"] == "NONE"


def test_kip101_scenario_1_high_watermark_truncation_keeps_committed_record(tmp_path, truncate_on_fetch):
    seen = run(tmp_path, "kip-101-1", truncate_on_fetch=truncate_on_fetch)
    assert seen["A's (LEO, HW) after its restart"] == (2, 1)
    # It asks where its epoch 0 ends instead of truncating to its HW first.
    expected = ("Fetch", 2, 0) if truncate_on_fetch else ("OffsetsForLeaderEpoch", 0)
    assert seen["A's first request after its restart"] == expected
    assert seen["A's log when elected"] == [b"m0", b"m1"]
    assert seen["both logs at the end"] == ([b"m0", b"m1"], [b"m0", b"m1"])


def test_kip101_scenario_2_divergence_after_double_crash(tmp_path, truncate_on_fetch):
    seen = run(tmp_path, "kip-101-2", truncate_on_fetch=truncate_on_fetch)
    assert seen["A's log at the end"] == seen["B's log at the end"] == [(0, b"m0"), (1, b"m2")]
    kind = "Fetch" if truncate_on_fetch else "OffsetsForLeaderEpoch"
    assert seen["how A learned where epoch 0 ends on B (answer, (epoch, end offset))"] == (kind, (0, 1))


def test_kip279_five_restarts_logs_converge(tmp_path, truncate_on_fetch):
    seen = run(tmp_path, "kip-279", truncate_on_fetch=truncate_on_fetch)
    expected = [b"m0", b"m2", b"m3", b"m4", b"m6", b"m7"]
    assert seen["final log (x, y)"] == (expected, expected)
    y_epochs = seen["epochs of y's records when it stopped the last time"]
    x_epochs = seen["epochs of x's records before y returned"]
    assert 0 < y_epochs[1] < x_epochs[1] < y_epochs[2] < x_epochs[4]


def test_delete_records_race_follower_never_fails(tmp_path):
    seen = run(tmp_path, "delete-records-race")
    assert seen["2's (HW, LEO) when the leader's log start moves"] == (5, 10)     # log start 8 > HW 5
    assert seen["(log start, LEO) per broker"] == {1: (8, 10), 2: (8, 10), 3: (8, 10)}
    assert seen["3's fetch at 5 answered OFFSET_OUT_OF_RANGE"] == [5]
    assert seen["fetchers that gave a partition up (when, which)"] == []


def test_stale_leader_write_is_truncated(tmp_path, truncate_on_fetch):
    seen = run(tmp_path, "stale-leader-write", truncate_on_fetch=truncate_on_fetch)
    assert seen["the old leader's log before healing"] == [b"m0", b"m1", b"stale", b"stale-all"]
    assert seen["stale acks=all answer"] == "NOT_LEADER_OR_FOLLOWER"
    assert seen["logs at the end"] == [[b"m0", b"m1", b"fresh"]] * 3


def test_follower_cut_off_past_lag_time_leaves_isr_and_rejoins(tmp_path):
    seen = run(tmp_path, "lagging-follower")
    assert seen["ISR (committed) and acks=all answered when the shrink was proposed"] == ((1, 2, 3), False)
    assert seen["acks=all answer once 3 was out"] == "NONE"
    assert seen["logs at the end"] == [[b"a", b"b"]] * 3


def test_acks_all_below_min_isr_is_refused_and_hw_does_not_advance(tmp_path):
    seen = run(tmp_path, "below-min-isr")
    assert seen["acks=all with ISR {1}"] == "NOT_ENOUGH_REPLICAS"
    assert seen["the leader's (LEO, HW) a second later"] == (2, 1)


def test_acks_all_records_survive_leader_crash_exactly_once(tmp_path):
    seen = run(tmp_path, "acks-all-leader-crash")
    assert seen["writes acknowledged (of 30)"] >= 20
    assert seen["the old leader's log equals the new leader's"] is True


def test_long_poll_fetches_wake_on_append(tmp_path):
    seen = run(tmp_path, "long-poll-fetch")
    assert all(ms <= 5 for ms in seen["ms from the produce to the parked fetches' answers"])
    assert seen["the followers' (LEO, HW) when the leader's HW moved"] == [(1, 0), (1, 0)]


def test_kip101_scenario_1_fails_without_leader_epochs_in_either_mode(tmp_path, truncate_on_fetch):
    """Pre-KIP-101 Kafka (planted defect: truncate to the HW at restart, no epochs):
    the scenario notices in both modes."""
    outcome = run_scenario("kip-101-1", str(tmp_path), defect="truncate-to-high-watermark",
                           truncate_on_fetch=truncate_on_fetch)
    assert not outcome.as_expected, outcome.report()
    assert outcome.observed["A's first request after its restart"] == ("Fetch", 1, -1)
    assert outcome.observed["A's log when elected"] == [b"m0"]
