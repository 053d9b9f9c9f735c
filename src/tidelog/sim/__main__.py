"""``python -m tidelog.sim``: run seeds, replay one, run a named scenario.

    python -m tidelog.sim --seed 17                 # one seed; on failure: the line and the trace tail
    python -m tidelog.sim --seed 17 --trace         # print every event as it happens
    python -m tidelog.sim --seeds 0-999 --jobs 4    # many seeds, in 4 processes
    python -m tidelog.sim --seeds 0-99 --long       # longer fault phases (make sim-long runs both)
    python -m tidelog.sim --seeds 0-99 --compact    # the topics compacted: keyed records, a busy cleaner
    python -m tidelog.sim --seed 17 --defect truncate-to-high-watermark
    python -m tidelog.sim --seeds 0-49 --controllers 3   # force the controller quorum's size
    python -m tidelog.sim --scenario kip-101-1      # a named fault scenario; --scenario list

A failure prints ``seed=<n> config=<…> invariant=<name>`` and exits 1. A run
does not depend on Python's per-process string hashing (tested), so a replay in
a new process takes the same path.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time


def _seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            seeds.extend(range(int(low), int(high) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def _run_one(job, echo: bool = False):
    from tidelog.sim.disk import scratch_directory
    from tidelog.sim.loop import Trace
    from tidelog.sim.simulation import run_seed
    seed, long, defect, tail, controllers, elr, log_ends, compact = job
    directory = scratch_directory(f"tidelog-sim-{seed}-")
    try:
        return run_seed(seed, directory, long=long, defect=defect, trace=Trace(echo=echo, keep=max(tail, 1)),
                        controllers=controllers, elr=elr, log_ends=log_ends, compact=compact)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.scenario:
        return _run_scenario(args)
    from tidelog.sim.config import RunStats

    elr = args.elr == "on"
    log_ends = args.log_ends == "on"
    seeds = [args.seed] if args.seed is not None else _seeds(args.seeds or "0-49")
    total, failures, started = RunStats(), [], time.monotonic()
    if args.jobs > 1 and len(seeds) > 1:
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(args.jobs)
        results = pool.map(_run_one, [(seed, args.long, args.defect, args.tail, args.controllers, elr, log_ends,
                                       args.compact) for seed in seeds], chunksize=4)
    else:
        pool = None
        results = (_run_one((seed, args.long, args.defect, args.tail, args.controllers, elr, log_ends, args.compact),
                            echo=args.trace and len(seeds) == 1)
                   for seed in seeds)
    sizes: dict[int, int] = {}
    for result in results:
        total.add(result.stats)
        sizes[result.config.controllers] = sizes.get(result.config.controllers, 0) + 1
        if result.passed:
            line = result.summary()
            if args.digest:
                line += f" full_digest={result.digest}"
            print(line, flush=True)
            continue
        failures.append(result)
        print(result.summary(), flush=True)
        if len(seeds) == 1 or not args.keep_going:
            _print_failure(result, args)
            if not args.keep_going:
                break
    if pool is not None:
        pool.shutdown(cancel_futures=True)
    if len(seeds) > 1:
        passed = len(seeds) - len(failures) if not failures or args.keep_going else "?"
        _print_totals(total, sizes, f"{passed} of {len(seeds)} seeds passed in {time.monotonic() - started:.1f} s")
    return 1 if failures else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tidelog.sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run (replay) one seed")
    parser.add_argument("--seeds", help="a range or list of seeds: 0-999 or 1,5,9")
    parser.add_argument("--long", action="store_true", help="longer fault phases (sim-long)")
    parser.add_argument("--compact", action="store_true",
                        help="the seeds' topics compacted (cleanup.policy=compact, keyed records, small "
                             "segments, a busy cleaner): the checker holds them to the last value of every key")
    parser.add_argument("--defect", help="plant a defect (see tidelog/sim/defects.py)")
    parser.add_argument("--trace", action="store_true", help="print every event")
    parser.add_argument("--tail", type=int, default=60, help="trace lines shown on failure (default 60)")
    parser.add_argument("--scenario", help="run a named fault scenario; 'list' lists them")
    parser.add_argument("--digest", action="store_true", help="print the trace digest")
    parser.add_argument("--keep-going", action="store_true", help="with --seeds: do not stop at a failure")
    parser.add_argument("--jobs", type=int, default=1, help="run seeds in this many processes")
    parser.add_argument("--controllers", type=int, choices=(1, 3, 5),
                        help="force the size of the controller quorum (default: chosen per seed)")
    parser.add_argument("--elr", choices=("on", "off"), default="on",
                        help="eligible leader replicas (KIP-966) finalized in the new cluster: on (Kafka "
                             "4.4's default) or off (then the last replica standing is excused)")
    parser.add_argument("--log-ends", choices=("on", "off"), default="on",
                        help="brokers report where their leaderless replicas end, so the controller "
                             "elects the longest log (KIP-966 unclean recovery): on (tidelog's default) "
                             "or off (Kafka 4.4's last known leader)")
    return parser


def _run_scenario(args) -> int:
    """``--scenario NAME`` (or ``list``): 0 if it ends as the scenario expects."""
    from tidelog.sim.loop import Trace
    from tidelog.sim.scenarios import SCENARIOS, run_scenario
    if args.scenario == "list":
        for name, scenario in SCENARIOS.items():
            print(f"{name:<28} {scenario.expected}")
        return 0
    from tidelog.sim.disk import scratch_directory
    directory = scratch_directory("tidelog-sim-")
    try:
        outcome = run_scenario(args.scenario, directory, defect=args.defect,
                               trace=Trace(echo=args.trace))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(outcome.report())
    return 0 if outcome.as_expected else 1


def _print_failure(result, args) -> None:
    """What failed, the trace's last events, and the command that replays the seed."""
    print(f"  {result.detail}")
    if not args.trace:
        print(f"  last {args.tail} events:")
        for line in result.trace_tail[-args.tail:]:
            print(f"    {line}")
    print(f"  replay: python -m tidelog.sim --seed {result.seed}"
          + (" --long" if args.long else "") + (" --compact" if args.compact else "") + (f" --defect {args.defect}" if args.defect else "")
          + (f" --controllers {args.controllers}" if args.controllers else "")
          + (" --elr off" if args.elr != "on" else "") + (" --log-ends off" if args.log_ends != "on" else "")
          + " --trace")


def _print_totals(total, sizes: dict[int, int], headline: str) -> None:
    """One line adding up a run of many seeds (``RunStats``), after ``headline``."""
    quorums = ", ".join(f"{n} seeds with {size} controller{'s' if size > 1 else ''}"
                        for size, n in sorted(sizes.items()))
    acked = ", ".join(f"acks={k}: {v}" for k, v in sorted(total.acked.items()))
    print(f"{headline}: {total.events} events, {total.sim_ms / 1000:.0f} s simulated, "
          f"{total.produce_requests} produce requests, acknowledged records ({acked}), "
          f"{total.consumed} records consumed, faults {sum(total.faults.values())} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(total.faults.items()))}), acks=all lost "
          f"{total.acked_all_lost}, excused losses {total.excused_losses} ({total.excused_losses_clean} on "
          f"clean-election topics, {total.excused_losses_clean_fsync} of them on topics that fsync every "
          f"append, {total.excused_losses_clean_held} of them held by another replica when dropped, "
          f"{total.excused_losses_clean_held_eligible} by a last known eligible one; "
          f"history resets {total.history_resets}: "
          f"{', '.join(f'{k} {v}' for k, v in sorted(total.reset_reasons.items()))}); groups: "
          f"{total.group_commits} commits acknowledged ({total.group_commits_excused} excused), "
          f"{total.rebalances} generations assigned, {total.coordinator_moves} coordinator moves, "
          f"member faults {sum(total.member_faults.values())} ({', '.join(f'{k} {v}' for k, v in sorted(total.member_faults.items()))}); "
          f"transactions: {', '.join(f'{k} {v}' for k, v in sorted(total.transactions.items())) or 'none'}; "
          f"controller quorum: {quorums}, {total.controller_elections} Raft leaders elected, "
          f"{total.controller_activations} activations, controller faults "
          f"{sum(total.controller_faults.values())} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(total.controller_faults.items()))}), "
          f"{total.metadata_records_committed} metadata offsets committed"
          + (f", {total.voter_changes} voter changes committed" if total.voter_changes else "")
          + (f"; compaction: {total.compaction_rewrites} cleaner swaps seen, {total.compacted_away} committed "
             f"records superseded and gone at the end (of them {total.tombstones_removed} tombstones past their "
             f"delete horizon), {total.tombstones_missed} deleted keys kept by a replica "
             f"that lagged behind their removed tombstone"
             if total.compaction_rewrites or total.compacted_away else ""))


if __name__ == "__main__":
    sys.exit(main())
