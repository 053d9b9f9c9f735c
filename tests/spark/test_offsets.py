"""The source's offset rules, as pure functions (no Spark, no broker)."""

import json

from hypothesis import given
from hypothesis import strategies as st

from tidelog.spark.offsets import Range, from_json, plan_ranges, rate_limit, split_by_lag, split_ranges, to_json

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_checkpoint_json_is_the_starting_offsets_shape_and_round_trips():
    offsets = {A0: 7, A1: 5, B0: 0}
    shaped = to_json(offsets)
    assert shaped == {"a": {"0": 7, "1": 5}, "b": {"0": 0}}
    assert from_json(json.loads(json.dumps(shaped))) == offsets


def test_limit_is_split_by_lag_and_sums_to_exactly_the_limit():
    assert split_by_lag({A0: 90, A1: 10}, 10) == {A0: 9, A1: 1}
    assert split_by_lag({A0: 5, A1: 5, B0: 5}, 4) == {A0: 2, A1: 1, B0: 1}
    assert split_by_lag({A0: 3, A1: 0}, 10) == {A0: 3}


@given(st.dictionaries(st.sampled_from([A0, A1, B0, ("c", 3)]), st.integers(0, 10_000)), st.integers(1, 5_000))
def test_split_never_exceeds_lag_or_limit(lag, limit):
    take = split_by_lag(lag, limit)
    assert sum(take.values()) == min(limit, sum(lag.values()))
    assert all(0 <= take[tp] <= lag[tp] for tp in take)


def test_rate_limit_starts_new_partitions_at_their_log_start():
    end = rate_limit({A0: 10}, {A0: 30, A1: 40}, 20, new_partition_start={A1: 20})
    assert end == {A0: 20, A1: 30}
    assert rate_limit({A0: 10}, {A0: 30}, None, {}) == {A0: 30}


def test_plan_reads_exact_ranges_sorted():
    plan = plan_ranges({A1: 3, A0: 0}, {A0: 4, A1: 3, B0: 2}, {A0: 0, A1: 0, B0: 0})
    assert plan.ranges == [Range("a", 0, 0, 4), Range("b", 0, 0, 2)]
    assert plan.losses == []


def test_plan_reports_deleted_offsets_and_reads_the_rest():
    plan = plan_ranges({A0: 5}, {A0: 20}, {A0: 12})
    assert plan.ranges == [Range("a", 0, 12, 20)]
    assert plan.losses == ["offsets [5, 12) of a-0 were deleted (retention or DeleteRecords) before they were read"]


def test_plan_reports_deleted_topics_backwards_offsets_and_trimmed_new_partitions():
    plan = plan_ranges({A0: 5, B0: 9}, {A0: 3, A1: 10}, {A0: 0, A1: 4})
    assert plan.ranges == [Range("a", 1, 4, 10)]
    assert len(plan.losses) == 3
    assert "b-0 is gone" in plan.losses[0]
    assert "went backwards" in plan.losses[1] and "a-0" in plan.losses[1]
    assert "new partition a-1 starts at offset 4" in plan.losses[2]
    gone = plan_ranges({A0: 1}, {A0: 3}, {A0: None})
    assert gone.ranges == [] and "a-0 is gone" in gone.losses[0]


def test_min_partitions_splits_in_proportion_and_covers_every_offset():
    ranges = split_ranges([Range("a", 0, 0, 90), Range("a", 1, 100, 110)], 10)
    assert [r for r in ranges if r.partition == 1] == [Range("a", 1, 100, 110)]
    big = [r for r in ranges if r.partition == 0]
    assert len(big) == 9 and big[0].start == 0 and big[-1].end == 90
    assert all(a.end == b.start for a, b in zip(big, big[1:]))
    assert split_ranges([Range("a", 0, 0, 3)], None) == [Range("a", 0, 0, 3)]
    assert split_ranges([Range("a", 0, 0, 3)], 8) == [Range("a", 0, 0, 1), Range("a", 0, 1, 2), Range("a", 0, 2, 3)]
