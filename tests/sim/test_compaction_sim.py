"""Compacted topics in the simulator (``--compact``, docs/simulation.md "Compacted topics"):
keyed records, small segments and a busy cleaner on every broker, under the seed's
faults. The checks then hold replicas to compaction's promise — the last committed
record of every key, nothing else missing, nothing different — and a broker that
exits with its machine up must load every log back whole (``restart-keeps-log``).
The cleaner's defects are caught by these seeds, and only with the defect."""

from dataclasses import replace

import pytest

from tidelog.sim.config import SimConfig
from tidelog.sim.defects import COMPACT
from tests.sim.conftest import assert_fixed_seed_passes, assert_some_seed_catches, failure_report

COMPACT_SEEDS = (3, 5, 6, 7)
# Seeds found before tombstones (and then expiring ones) were drawn, run as they were
# then (``as_found``): 41, an unclean election after followers' cleaners removed records
# for later ones the new leader never had (History.may_lack); 240, kills of a follower
# of a compacted leader; 671, a consumer served by a leader of the lineage an unclean
# election dropped. With tombstones: 1581, a follower fetched a leader's cleaned segment
# larger than segment.bytes (its tombstone batches grew when marked with their delete
# horizon) and refused it for good; 1967, a retry's duplicate superseded a value's first
# copy (producer-order).
FOUND_SEEDS = (41, 240, 671)
FOUND_WITH_TOMBSTONES = (1581, 1967)


def as_found(seed: int, defect: str | None = None) -> SimConfig:
    config = SimConfig.from_seed(seed, compact=True, defect=defect)
    if seed in FOUND_WITH_TOMBSTONES:
        return config.with_options(topics=tuple(replace(t, delete_retention_ms=None) for t in config.topics))
    return config.with_options(topics=tuple(replace(t, tombstone_percent=0, delete_retention_ms=None)
                                            for t in config.topics))


def run_compacted(run, seed: int, defect: str | None = None):
    if seed in FOUND_SEEDS + FOUND_WITH_TOMBSTONES:
        return run(seed, config=as_found(seed, defect))
    return run(seed, compact=True, defect=defect)


@pytest.mark.parametrize("seed", COMPACT_SEEDS + FOUND_SEEDS + FOUND_WITH_TOMBSTONES)
def test_a_compacted_seed_keeps_the_last_value_of_every_key(run, seed):
    result = run_compacted(run, seed)
    assert_fixed_seed_passes(result)
    # …and the cleaner did rewrite logs under the checks, and removed committed records
    assert result.stats.compaction_rewrites > 0, failure_report(result)
    assert result.stats.compacted_away > 0, failure_report(result)
    if any(t.delete_retention_ms is not None for t in result.config.topics):   # seed 5
        assert result.stats.tombstones_removed > 0, failure_report(result)


def test_compact_draws_only_its_own_options():
    for seed in range(20):
        plain, compacted = SimConfig.from_seed(seed), SimConfig.from_seed(seed, compact=True)
        assert [t.name for t in plain.topics] == [t.name for t in compacted.topics]
        for before, after in zip(plain.topics, compacted.topics):
            assert after.compact == (after.name != "tx") and (after.keys > 0) == after.compact
            if not after.compact:
                assert after == before
        assert compacted.with_options(topics=plain.topics, log_cleaner_backoff_ms=15_000) == plain


@pytest.mark.parametrize("defect, seeds", [("cleaner-beyond-high-watermark", (0, 2, 4)),
                                           ("roll-at-batch-offset", (240,)),
                                           ("cleaner-forgets-tombstones", (0, 2))])
def test_a_cleaner_defect_fails_a_compacted_seed_with_the_right_invariant(run, defect, seeds):
    assert_some_seed_catches(lambda seed, planted: run_compacted(run, seed, planted), seeds, defect, COMPACT[defect])
