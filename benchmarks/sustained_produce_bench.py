"""Sustained produce against one ``tidelog serve``, beside the disk's own sustained write rate.

A produce benchmark of a few seconds measures the page cache: the first gigabytes of
dirty pages are taken at memory speed (about 0.9 GB/s on this machine), then the
kernel throttles every writer to what the disk takes (about 0.27 GB/s). This one runs
long enough to leave the burst, and measures the reference the same way, in the same
run, on the same file system:

1. **raw**: ``os.write`` of 1 MiB blocks of random bytes to a file in a temporary
   directory (where the brokers' data directories go too) for ``--seconds`` (no
   fsync, as the broker does not fsync per request either; random, because this
   machine's virtual disk takes zeros without storing them);
2. **tidelog**: the lean client of ``txn_bench.py`` (the project's asyncio protocol
   client, batches of 900 random 1 KiB records built once, 5 requests in flight, one batch
   per partition per request, acks=all, 3 partitions, plain or ``--idempotent``)
   producing to the broker for ``--seconds``
   (``--loop-writes``: then a second broker whose event loop makes the appends' writes
   itself, ``tidelog.log.write.behind.max.bytes=0``, as before write-behind);
3. **raw** again, after the run.

Before each phase it waits until the kernel has written back the previous phase's dirty
pages (``Dirty`` + ``Writeback`` in ``/proc/meminfo`` under 64 MiB), so each starts from
the same state. Each phase prints its rate every 5 s, the **burst** (first 5 s) and the
**sustained** rate (the median 5 s window of the second half of the phase; the mean
of that half is printed beside it), and the broker's CPU seconds per GB.
The ratio printed is tidelog's sustained rate over the raw sustained rate (the lower of
the two raw phases; issue 30's target: >= 0.9).

    python benchmarks/sustained_produce_bench.py [--seconds 60] [--idempotent] [--loop-writes]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from txn_bench import LEAN_RECORDS_PER_BATCH, PARTITIONS, lean_run, process_cpu_s  # noqa: E402

from tidelog.testing import Broker  # noqa: E402

WINDOW_S = 5.0
SETTLED_BYTES = 64 << 20
RECORD_BYTES = 1024
# Random bytes, not zeros or one repeated character: this machine's virtual disk takes
# blocks of zeros at 2 GB/s (it does not store them), random ones at about 0.27 GB/s.
RAW_BLOCKS = [os.urandom(1 << 20) for _ in range(64)]


def dirty_bytes() -> int:
    """Dirty + Writeback pages, from /proc/meminfo."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in ("Dirty", "Writeback"):
                total += int(value.split()[0]) * 1024
    return total


def settle(limit_s: float = 300.0) -> float:
    """Wait until the kernel wrote back what earlier phases left dirty; seconds waited."""
    start = time.monotonic()
    os.sync()
    while dirty_bytes() > SETTLED_BYTES and time.monotonic() - start < limit_s:
        time.sleep(0.5)
    return time.monotonic() - start


class Rates:
    """Bytes done, sampled every WINDOW_S: the per-window rates, burst and sustained."""

    def __init__(self):
        self.start = time.monotonic()
        self.samples = [(0.0, 0)]

    def sample(self, done: int) -> None:
        now = time.monotonic() - self.start
        if now - self.samples[-1][0] >= WINDOW_S:
            t0, b0 = self.samples[-1]
            self.samples.append((now, done))
            print(f"    {now:5.0f} s {(done - b0) / (now - t0) / 1e6:7.1f} MB/s", flush=True)

    def summary(self, done: int) -> dict:
        self.samples.append((time.monotonic() - self.start, done))
        end_s, end_b = self.samples[-1]
        burst_s, burst_b = self.samples[1] if len(self.samples) > 2 else self.samples[-1]
        half = next((s for s in self.samples if s[0] >= end_s / 2), self.samples[0])
        # The median window of the second half: this machine's virtual disk now and then
        # takes writes at 1-2.6 GB/s for a few seconds (its host absorbing them), which
        # would carry a mean far from what the disk sustains.
        windows = [(b1 - b0) / (t1 - t0) / 1e6 for (t0, b0), (t1, b1) in zip(self.samples, self.samples[1:])
                   if t0 >= half[0] and t1 - t0 >= WINDOW_S / 2]
        return {"burst": burst_b / burst_s / 1e6,
                "sustained": statistics.median(windows) if windows else (end_b - half[1]) / (end_s - half[0]) / 1e6,
                "mean": (end_b - half[1]) / (end_s - half[0]) / 1e6, "bytes": end_b, "seconds": end_s}


def raw_phase(directory: str, seconds: float) -> dict:
    fd, path = tempfile.mkstemp(dir=directory, prefix="raw-write-")
    try:
        rates, written, i = Rates(), 0, 0
        while time.monotonic() - rates.start < seconds:
            written += os.write(fd, RAW_BLOCKS[i % len(RAW_BLOCKS)])
            i += 1
            rates.sample(written)
        return rates.summary(written)
    finally:
        os.close(fd)
        os.unlink(path)


def produce_phase(port: int, topic: str, seconds: float, idempotent: bool) -> dict:
    rates = Rates()

    def started() -> None:
        rates.start = time.monotonic()
    values = [os.urandom(RECORD_BYTES) for _ in range(LEAN_RECORDS_PER_BATCH)]
    result = asyncio.run(lean_run(port, topic, "idempotent" if idempotent else "plain", seconds, values,
                                  started, rates.sample))
    return rates.summary(result["bytes"])


def tidelog_phase(seconds: float, idempotent: bool, write_behind: bool) -> dict:
    """One ``tidelog serve`` of its own, fed for ``seconds``; its rates and CPU per GB."""
    overrides = {"num.partitions": str(PARTITIONS)}
    if not write_behind:
        overrides["tidelog.log.write.behind.max.bytes"] = "0"     # the event loop writes
    with Broker(overrides=overrides) as broker:
        cpu_before = process_cpu_s(broker.process.pid)
        result = produce_phase(broker.port, "sustained", seconds, idempotent)
        result["cpu_per_gb"] = (process_cpu_s(broker.process.pid) - cpu_before) / (result["bytes"] / 1e9)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per phase")
    parser.add_argument("--idempotent", action="store_true", help="an idempotent producer (sequence numbers)")
    parser.add_argument("--loop-writes", action="store_true",
                        help="also a broker whose event loop makes the appends' writes itself "
                             "(tidelog.log.write.behind.max.bytes=0), for comparison")
    args = parser.parse_args()
    phases = ["raw before", "tidelog"] + (["loop writes"] if args.loop_writes else []) + ["raw after"]
    directory = tempfile.mkdtemp(prefix="sustained-raw-")
    results = {}
    try:
        for phase in phases:
            waited = settle()
            print(f"{phase}: (waited {waited:.0f} s for the page cache to be written back)", flush=True)
            if phase.startswith("raw"):
                results[phase] = raw_phase(directory, args.seconds)
            else:
                results[phase] = tidelog_phase(args.seconds, args.idempotent, phase == "tidelog")
    finally:
        os.rmdir(directory)
    mode = "idempotent" if args.idempotent else "plain"
    print(f"\n{args.seconds:g} s per phase, 1 KiB records, {mode}, acks=all")
    for phase, r in results.items():
        extra = f"  broker CPU {r['cpu_per_gb']:.2f} s/GB" if "cpu_per_gb" in r else ""
        print(f"{phase:11} burst {r['burst']:7.1f} MB/s  sustained {r['sustained']:7.1f} MB/s "
              f"(mean {r['mean']:6.1f})  ({r['bytes'] / 1e9:.1f} GB){extra}")
    raw = min(results["raw before"]["sustained"], results["raw after"]["sustained"])
    print(f"tidelog sustained / raw sustained: {results['tidelog']['sustained'] / raw:.2f} (target >= 0.9)")
    if args.loop_writes:
        print(f"loop writes sustained / raw sustained: {results['loop writes']['sustained'] / raw:.2f}")


if __name__ == "__main__":
    main()
