"""The short chaos run (one nemesis schedule, ~65 s): three real broker processes
and a controller behind link proxies, confluent-kafka clients, kill -9 / pause /
restart / partitions / isolation. The long form: ``python -m tidelog.chaos --long``."""

from tidelog.chaos.nemesis import SHORT
from tidelog.chaos.run import run_chaos


# In the parallel phase (docs/testing.md): the workload is 65 s of one record in flight per
# partition, so how many are acknowledged depends on round trips a busy machine stretches:
# over 5,000 on a quiet machine, 4,404 in a run beside other work (load average ~9). The
# floor of 1,000 only says the writes went on through the schedule; what is checked is
# that none was lost and the replicas agree, which no load changes.
def test_short_chaos_schedule_loses_no_acknowledged_write():
    lines = []
    result = run_chaos(log=lines.append)
    report = result.report
    details = "\n".join(lines + [result.summary()] + [f"{at} s {label}" for at, label in result.faults]
                        + result.fault_errors)
    assert result.fault_errors == [], details
    assert result.report.ok, details
    assert result.replicas_identical, details
    assert sum(1 for _, label in result.faults if not label.startswith(("undo", "start", "resume"))) == len(SHORT)
    assert report.lost == [] and report.acknowledged > 1000, details
    assert report.consumed > 1000, details
