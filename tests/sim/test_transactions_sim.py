"""Transactions in the simulator: a transactional producer commits and aborts on
topic "tx" while the nemesis kills, partitions and power-cuts brokers (moving
partition leaders and transaction coordinators), and a read_committed reader
checks docs/simulation.md's transaction invariants after every answer."""

from tidelog.sim.config import SimConfig
from tests.sim.conftest import failure_report

TXN_SEED = 16    # transactions on a 5-broker cluster with faults of every kind (seed 2 until failed
                 # log directories were reported: its run changed and committed only 6)


def test_a_transactional_seed_commits_and_aborts_under_faults(run):
    assert SimConfig.from_seed(TXN_SEED).transactions
    result = run(TXN_SEED)
    assert result.passed, failure_report(result)
    done = result.stats.transactions
    assert done.get("committed", 0) > 10 and done.get("aborted", 0) > 2, done
    assert done.get("records read", 0) > 0 and result.stats.faults, done
