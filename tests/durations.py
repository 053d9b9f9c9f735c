"""Rewrite tests/durations.txt, the seconds each test module takes, from a JUnit XML
report, for the longest-first order of the parallel run (tests/conftest.py)::

    .venv/bin/python -m pytest -p no:xdist --junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.durations /tmp/suite.xml [/tmp/other.xml ...]

A test's time there includes its set-up and tear-down, so a module's sum includes its
fixtures' start and stop. With several reports (runs stopped early, a part run alone), a
module's time is the first report's that has the module.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).with_name("durations.txt")
HEADER = ("# Seconds each test module took (python -m tests.durations REPORT.xml rewrites it from a\n"
          "# JUnit report); the parallel run starts the longest modules first (tests/conftest.py).\n")


def module_seconds(report: str) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        # "tests.integration.test_x" or "tests.integration.test_x.TestClass"
        parts = classname.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0) or 0)
    return dict(seconds)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.durations REPORT.xml [REPORT.xml ...]", file=sys.stderr)
        return 2
    seconds: dict[str, float] = {}
    for report in argv:
        for module, value in module_seconds(report).items():
            seconds.setdefault(module, value)
    lines = [f"{value:8.1f} {path}\n" for path, value in sorted(seconds.items(), key=lambda kv: -kv[1])]
    OUT.write_text(HEADER + "".join(lines))
    print(f"{OUT}: {len(lines)} modules, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
