"""``python -m tidelog.chaos``: the real-process chaos run.

    python -m tidelog.chaos                      # the short schedule (what CI runs)
    python -m tidelog.chaos --long --seed 3      # a random schedule of --minutes (default 5), 5 brokers
    python -m tidelog.chaos --long --seeds 1-5   # several

Exits 1 if the checker finds a lost acknowledged write, an unexplained duplicate,
an order violation, a consumer that read beyond the high watermark, or replicas
that differ.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long", action="store_true", help="random schedules instead of the short one")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", help="a range of seeds for --long, e.g. 1-5")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--brokers", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the cluster directory")
    args = parser.parse_args(argv)

    from tidelog.chaos.nemesis import SHORT, SHORT_DURATION_S, random_schedule
    from tidelog.chaos.run import run_chaos

    if not args.long:
        result = run_chaos(SHORT, SHORT_DURATION_S, brokers=args.brokers or 3, keep=args.keep)
        _print(result)
        return 0 if result.ok else 1
    if args.seeds:
        low, _, high = args.seeds.partition("-")
        seeds = list(range(int(low), int(high or low) + 1))
    else:
        seeds = [args.seed]
    failed = 0
    for seed in seeds:
        brokers = args.brokers or 5
        duration = args.minutes * 60
        schedule = random_schedule(seed, brokers, duration)
        print(f"seed {seed}: {len(schedule)} faults over {duration:.0f} s on {brokers} brokers", flush=True)
        result = run_chaos(schedule, duration, brokers=brokers, keep=args.keep)
        _print(result)
        failed += not result.ok
    return 1 if failed else 0


def _print(result) -> None:
    for at, label in result.faults:
        print(f"  {at:7.1f} s  {label}")
    for error in result.fault_errors:
        print(f"  fault error: {error}")
    print(result.summary(), flush=True)
    report = result.report
    for item in report.lost[:10]:
        print(f"  LOST partition {item[0]} offset {item[1]} value {item[2]!r} (final log: {item[3]!r})")
    for item in report.order_violations[:10]:
        print(f"  ORDER {item}")
    for item in report.read_violations[:10]:
        print(f"  READ {item}")
    for value, copies, attempts in report.unexplained_duplicates[:10]:
        print(f"  DUPLICATE {value!r}: {copies} copies, {attempts} produce attempts")


if __name__ == "__main__":
    sys.exit(main())
