"""After a broker's or a controller's event the checker looks at that process only
(``Simulation._after_event``): a process changes only its own state, and what it tells
another travels as a message whose delivery is the other's event. With ``audit_scope``
on, every check also compares each process left out with what it was when the checker
last looked at it, and fails the run (``invariant=checker-scope``) if it changed. Seeds
0-5: quorums of 1, 3 and 5, groups, transactions, every fault kind the seeds draw."""

import pytest

from tests.sim.conftest import failure_report


@pytest.mark.parametrize("seed", range(6))
def test_an_event_changes_no_process_but_its_own(run, seed):
    result = run(seed, audit_scope=True)
    assert result.passed, failure_report(result)


def test_a_last_known_leader_loss_another_replica_could_have_avoided_is_counted_apart(run):
    """Seed 1730: broker 3, the last known leader of t0-0, comes back from a power cut
    that took its unflushed tail, while broker 1, out of the ISR and ELR, still holds
    every committed record. Without the brokers' log-end reports broker 3 is elected
    (Kafka 4.4 elects the same) and the tail is gone: the reset is excused, but named as
    one the longest log would avoid. With them (tidelog's default) the longest log is
    elected and nothing is reset. (Seed 1726 showed the same with a replaced disk
    until delayed fetches began answering with their arrival reads, which moved its
    timing.)"""
    result = run(1730, log_ends=False)
    assert result.passed, failure_report(result)
    avoidable = [reason for reason in result.stats.reset_reasons
                 if reason.startswith("last known leader after every eligible replica's unclean shutdown, another")]
    assert avoidable, result.stats.reset_reasons
    result = run(1730)
    assert result.passed, failure_report(result)
    assert result.stats.reset_reasons == {}, result.stats.reset_reasons
