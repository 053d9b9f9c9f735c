"""Broker CPU per GB produced, today's broker against the one issue 30 measured (same run).

Issue 30 asked for half the broker CPU per GB on the produce path. Its reference is
the broker as it was when the issue was filed (``--reference``, default fda4cc2):
this benchmark extracts that commit's ``src`` (``git archive``) and runs its
``tidelog serve`` beside today's, alternating, in the same run, fed by txn_bench's
lean client (batches of 900 records built once, 5 requests in flight, 3 partitions:
the broker is the bottleneck), 1 KiB and 100-byte records, plain and idempotent.

What is counted: the broker process's CPU seconds per GB of record values acknowledged,
from /proc, after a warm-up a tenth as long, split

* user: tidelog's own code and the libraries it calls (reading, decoding, checking,
  appending, answering);
* system: the kernel's work for it, mostly copying request bytes in and writing the
  log into the page cache;
* per thread: the event loop (the main thread) and the rest (today: the write-behind
  writer, which does nothing but ``write()``; the reference writes on the loop).

The kernel's share depends on the machine far more than on tidelog. On the virtual
machines this is developed on, a page the page cache takes for the first time since
the guest gave it back to the host costs ~20 us of system time (about 5 s per GB
written), and one freed a moment ago almost nothing (0.2 s per GB): the same
``write()`` of the same bytes varies 25-fold. So the run also writes, right after each
broker, as many bytes as that broker's log directory holds into a new file with plain
``os.write`` (the "raw write" column, per GB of values): the kernel's cost of the same
writes at that moment, which any broker, Kafka's included, pays.

    python benchmarks/produce_cpu_bench.py [--seconds 8] [--rounds 2] [--reference fda4cc2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import txn_bench  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

TOPIC, PARTITIONS = "bench", 3
CASES = [(1024, False), (1024, True), (100, False), (100, True)]      # (value bytes, idempotent)
REFERENCE = "fda4cc2"      # main when issue 30 was filed (2026-11-26 18:26)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """User and system CPU seconds of each thread of a process (/proc/<pid>/task)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue            # the thread ended
        out[int(tid)] = (int(fields[11]) / ticks, int(fields[12]) / ticks)
    return out


def spent(pid: int, before: dict, after: dict) -> dict[str, float]:
    """CPU seconds between two ``thread_cpu`` snapshots: user, system, loop (main thread), other."""
    totals = {"user": 0.0, "system": 0.0, "loop": 0.0, "other": 0.0}
    for tid, (user, system) in after.items():
        user0, system0 = before.get(tid, (0.0, 0.0))
        du, ds = user - user0, system - system0
        totals["user"] += du
        totals["system"] += ds
        totals["loop" if tid == pid else "other"] += du + ds
    return totals


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def raw_write_cpu_s(nbytes: int, directory: str) -> float:
    """System + user CPU seconds of writing ``nbytes`` of random data to a new file in
    ``directory`` with plain os.write, 1 MiB at a time (this process's times)."""
    block = os.urandom(1 << 20)
    path = os.path.join(directory, "raw-write")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        before = os.times()
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[:min(left, len(block))])
        after = os.times()
    finally:
        os.close(fd)
        os.unlink(path)
    return (after.user - before.user) + (after.system - before.system)


def extract(reference: str, into: str) -> str:
    """The reference commit's src/, compiled, under ``into``; returns the path for PYTHONPATH."""
    archived = subprocess.run(["git", "-C", ROOT, "archive", reference, "src"], capture_output=True)
    if archived.returncode:
        raise SystemExit(f"cannot extract the reference broker ({reference}) from this clone's history: "
                         f"{archived.stderr.decode(errors='replace').strip()} (a shallow clone? git fetch --unshallow)")
    archive = archived.stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    src = os.path.join(into, "src")
    subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True, stdout=subprocess.DEVNULL)
    return src


def measure(src: str | None, value_bytes: int, idempotent: bool, seconds: float) -> dict[str, float]:
    """One broker (``src`` on PYTHONPATH, or today's) under the lean client: CPU s per GB of values."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, saved) if p)
    workdir = tempfile.mkdtemp(prefix="produce-cpu-")
    try:
        with Broker(data_dir=workdir) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
            txn_bench.VALUE = b"x" * value_bytes
            mode = "idempotent" if idempotent else "plain"
            asyncio.run(txn_bench.lean_run(broker.port, TOPIC, mode, seconds / 10))      # warm-up
            pid = broker.process.pid
            before = thread_cpu(pid)
            values = asyncio.run(txn_bench.lean_run(broker.port, TOPIC, mode, seconds))["bytes"]
            cpu = spent(pid, before, thread_cpu(pid))
            del admin
        written = directory_bytes(os.path.join(workdir, "data"))
        cpu["raw"] = raw_write_cpu_s(written, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    gb = values / 1e9
    return {key: value / gb for key, value in cpu.items()} | {"mb_s": values / 1e6 / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of produce per broker run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reference", default=REFERENCE, help="the commit whose broker is the reference")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="produce-cpu-reference-")
    try:
        reference_src = extract(args.reference, tmp)
        results: dict[tuple, list[dict]] = {}
        for round_ in range(args.rounds):
            for value_bytes, idempotent in CASES:
                for name, src in (("reference", reference_src), ("today", None)):
                    r = measure(src, value_bytes, idempotent, args.seconds)
                    results.setdefault((value_bytes, idempotent, name), []).append(r)
                    print(f"round {round_ + 1}: {value_bytes:>4} B {'idempotent' if idempotent else 'plain     '} "
                          f"{name:9} {r['user'] + r['system']:6.2f} s/GB (user {r['user']:.2f}, system "
                          f"{r['system']:.2f}; loop {r['loop']:.2f}, other threads {r['other']:.2f}; raw write "
                          f"{r['raw']:.2f}) {r['mb_s']:.0f} MB/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def median(value_bytes, idempotent, name, key):
        return statistics.median(r[key] for r in results[(value_bytes, idempotent, name)])
    print(f"\nbroker CPU s per GB of values, medians of {args.rounds} (lean client, {args.seconds:g} s a run); "
          f"reference = {args.reference}")
    print(f"{'':18}{'reference':>10}{'today':>8}{'ratio':>7}   {'user: ref':>10}{'today':>8}{'ratio':>7}"
          f"   {'today loop':>11}{'raw write':>10}")
    for value_bytes, idempotent in CASES:
        ref_total = median(value_bytes, idempotent, "reference", "user") + \
            median(value_bytes, idempotent, "reference", "system")
        now_total = median(value_bytes, idempotent, "today", "user") + median(value_bytes, idempotent, "today", "system")
        ref_user = median(value_bytes, idempotent, "reference", "user")
        now_user = median(value_bytes, idempotent, "today", "user")
        label = f"{value_bytes} B {'idempotent' if idempotent else 'plain'}"
        print(f"{label:18}{ref_total:10.2f}{now_total:8.2f}{now_total / ref_total:7.2f}   {ref_user:10.2f}"
              f"{now_user:8.2f}{now_user / ref_user:7.2f}   {median(value_bytes, idempotent, 'today', 'loop'):11.2f}"
              f"{median(value_bytes, idempotent, 'today', 'raw'):10.2f}")
    print("target: today/reference <= 0.50 (issue 30); the raw write is the kernel's cost of the same bytes "
          "at that moment, which the system column of both brokers includes")


if __name__ == "__main__":
    main()
