"""How long a tidelog command takes, against kcat -L measured in the same run.

One ``tidelog serve`` with a topic; then, ``--rounds`` times each, alternating: the
``tidelog`` console script with ``--help``, ``topics --help``, ``topics list`` and
``topics describe`` against the broker, and ``kcat -L`` against it as the reference (a
C client: what a command's start costs without an interpreter). Each is a fresh
process, as a user runs it; wall time per run (median and best) and the CPU time of
the process (user + system, from the children's rusage) are printed. Targets on the
project's 2-core machine: ``--help`` and ``topics --help`` under 0.15 s, ``topics
list`` under 0.4 s. The machine's load average is printed with the numbers: wall time
on a shared machine moves with it, CPU time much less.

    python benchmarks/cli_bench.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from tidelog.testing import Broker  # noqa: E402

TARGETS_S = {"tidelog --help": 0.15, "tidelog topics --help": 0.15, "tidelog topics list": 0.4}


def tidelog_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m``."""
    script = os.path.join(os.path.dirname(sys.executable), "tidelog")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "tidelog.cli.main"]


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.decode(errors='replace')[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="runs of each command (default 10)")
    args = parser.parse_args(argv)
    tidelog = tidelog_command()
    with Broker() as broker:
        subprocess.run([*tidelog, "topics", "-b", broker.bootstrap, "create", "bench", "--partitions", "3"],
                       check=True, capture_output=True, timeout=60)
        commands = {
            "tidelog --help": [*tidelog, "--help"],
            "tidelog topics --help": [*tidelog, "topics", "--help"],
            "tidelog topics list": [*tidelog, "topics", "-b", broker.bootstrap, "list"],
            "tidelog topics describe": [*tidelog, "topics", "-b", broker.bootstrap, "describe", "bench"],
        }
        if shutil.which("kcat"):
            commands["kcat -L (reference)"] = ["kcat", "-L", "-b", broker.bootstrap]
        else:
            print("kcat not found: no reference (make kcat installs it)")
        for argv_ in commands.values():           # warm the page cache and the .pyc files
            timed(argv_)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, argv_ in commands.items():
                samples[name].append(timed(argv_))
    load = os.getloadavg()[0]
    print(f"CLI start-up, {args.rounds} runs each, alternating; load average {load:.2f} on {os.cpu_count()} CPUs")
    print(f"  {'command':28} {'median s':>9} {'best s':>8} {'CPU s':>7}  target")
    for name, runs in samples.items():
        walls = [w for w, _ in runs]
        cpu = statistics.median(c for _, c in runs)
        target = TARGETS_S.get(name)
        verdict = "" if target is None else (f"< {target} s " + ("met" if statistics.median(walls) < target
                                                                  else "NOT met (median)"))
        print(f"  {name:28} {statistics.median(walls):9.3f} {min(walls):8.3f} {cpu:7.3f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
