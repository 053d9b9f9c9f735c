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


def test_a_transaction_version_2_producer_under_the_same_faults(run):
    """KIP-890 part 2 in the simulator: no AddPartitionsToTxn (each leader adds its
    partition through the request layer), an epoch bump with every EndTxn, EndTxn
    retries across coordinator moves answered from the log, the same invariants."""
    config = SimConfig.from_seed(TXN_SEED).with_options(transaction_version=2)
    result = run(TXN_SEED, config=config)
    assert result.passed, failure_report(result)
    done = result.stats.transactions
    # Fewer than at version 1 on this seed: its faults (a replaced disk, a SIGTERM) hold
    # an abort's markers, and the restarted producer's InitProducerId waits for them.
    assert done.get("committed", 0) >= 5 and done.get("aborted", 0) >= 1, done
    assert done.get("epoch bumps", 0) == done["committed"] + done["aborted"], done
    assert done.get("records read", 0) > 0 and result.stats.faults, done
