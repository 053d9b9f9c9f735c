"""The README's Spark walkthrough, run as written: its three commands (only the
interpreter, the broker's address and the output directory substituted) produce
per-minute counts in the `page-counts` topic and in Parquet."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from .conftest import driver_submit_args
from .spark_processes import java_missing

pytestmark = pytest.mark.skipif(java_missing() is not None, reason=java_missing() or "")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def walkthrough_commands() -> list[list[str]]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## Process it with Spark", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def test_the_readme_spark_walkthrough_produces_the_counts(broker, tmp_path, request):
    commands = walkthrough_commands()
    assert [c[1] for c in commands] == ["examples/clickstream_generator.py", "examples/clickstream_counts.py",
                                        "examples/topic_history.py"]
    # The commands' own Spark JVMs get the tests' JVM settings (as the shared session has).
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PYSPARK_SUBMIT_ARGS"] = driver_submit_args()
    outputs = []
    for command in commands:
        args = [sys.executable] + command[1:] + ["--bootstrap", broker.bootstrap]
        args = [str(tmp_path / "page-counts") if a == "/tmp/page-counts" else a for a in args]
        if command[1].endswith("clickstream_counts.py"):
            args += ["--state", str(tmp_path / "state")]
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    assert str(tmp_path / "state") in outputs[1]                      # it says where its state is
    assert "count" in outputs[1] and "page" in outputs[1]             # the table of counts
    # The shared session only now: its JVM would compete with the commands' for the CPU.
    spark = request.getfixturevalue("spark")
    counts = [json.loads(r.value) for r in spark.read.format("tidelog")
              .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", "page-counts").load()
              .collect()]
    total = sum(c["count"] for c in counts)
    # 20,000 clicks one second apart: every window but the last few (under the
    # 2-minute watermark) is closed and counted, each once.
    assert 19_000 <= total <= 20_000, total
    assert len({(c["minute"], c["page"]) for c in counts}) == len(counts)
    parquet = spark.read.parquet(str(tmp_path / "page-counts")).selectExpr("sum(count) AS n").collect()[0].n
    assert parquet == total
    assert "page" in outputs[2] and "count" in outputs[2]                # the history, parsed as JSON
