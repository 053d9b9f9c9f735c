"""Storage benchmark: the log's append and read speed against raw os.write / os.pread.

Theory of operation. One run, one directory, the same sizes for both sides:

* append: ``Log.append_as_leader`` of 64 KiB batches of 1 KiB records (built
  once with ``build_batch``; each append rewrites its offsets in place, as a
  produce request's buffer would be) vs ``os.write`` of the same bytes to a file;
* read: the whole log through ``Log.read`` + ``FileSlice.read_bytes`` with
  ``--read-kib`` per fetch (default 1 MiB, Kafka's ``max.partition.fetch.bytes``)
  vs ``os.pread`` of the raw file with the same read size.

Neither side fsyncs (the log's default, as Kafka's ``flush.messages``: durability
comes from replication); both read from the page cache. Each measurement is
repeated ``--rounds`` times and the best kept.
Targets: log append >= 60% of raw write, log read >= 60% of raw read.

Run: ``python benchmarks/storage_bench.py [--mb 256]`` or ``tidelog bench storage``.
It lives with the command-line tools, not in tidelog.storage, because it times
itself with the real clock, which the storage engine never reads (it is handed a
``Clock``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time

from tidelog.core.clock import SystemClock
from tidelog.records.batch import SimpleRecord, build_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

_MIB = 1 << 20


def _batch(batch_kib: int, record_bytes: int) -> bytearray:
    count = max(1, batch_kib * 1024 // record_bytes)
    value = os.urandom(record_bytes)
    return bytearray(build_batch([SimpleRecord(value)] * count, timestamp_ms=int(time.time() * 1000)))


def _raw_write(path: str, data, count: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            os.write(fd, data)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def _raw_read(path: str, read_bytes: int) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size, position = os.fstat(fd).st_size, 0
        start = time.perf_counter()
        while position < size:
            position += len(os.pread(fd, read_bytes, position))
        return time.perf_counter() - start, position
    finally:
        os.close(fd)


def _log_append(directory: str, data: bytearray, count: int) -> tuple[float, Log]:
    log = Log.open(os.path.join(directory, "bench-0"), LogConfig(), SystemClock())
    append = log.append_as_leader
    start = time.perf_counter()
    for _ in range(count):
        append(data, 0)
    return time.perf_counter() - start, log


def _log_read(log: Log, read_bytes: int) -> tuple[float, int]:
    offset, end, total = log.log_start_offset, log.log_end_offset, 0
    read = log.read
    start = time.perf_counter()
    while offset < end:
        fetched = read(offset, read_bytes)
        data = fetched.records.read_bytes()
        total += len(data)
        # The next fetch starts after the last batch: its header says where.
        last = _last_batch_next_offset(data)
        offset = last
    return time.perf_counter() - start, total


_BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")


def _last_batch_next_offset(data: bytes) -> int:
    """Walk batch lengths only (as a client would) to the offset after the last batch."""
    position, size, base_offset = 0, len(data), -1
    while position < size:
        base_offset, batch_length = _BASE_OFFSET_AND_LENGTH.unpack_from(data, position)
        last_position = position
        position += 12 + batch_length
    assert base_offset >= 0, "a read returned no whole batch"
    return base_offset + _LAST_OFFSET_DELTA.unpack_from(data, last_position + 23)[0] + 1


def run(total_mb: int, batch_kib: int, record_bytes: int, read_kib: int, rounds: int,
        directory: str) -> dict:
    data = _batch(batch_kib, record_bytes)
    count = max(1, total_mb * _MIB // len(data))
    read_bytes = read_kib * 1024
    best = {"raw_write": 0.0, "log_append": 0.0, "raw_read": 0.0, "log_read": 0.0}
    for _ in range(rounds):
        work = tempfile.mkdtemp(prefix="storage-bench-", dir=directory)
        try:
            raw_path = os.path.join(work, "raw.bin")
            seconds = _raw_write(raw_path, data, count)
            best["raw_write"] = max(best["raw_write"], count * len(data) / seconds / 1e6)
            seconds, log = _log_append(work, data, count)
            best["log_append"] = max(best["log_append"], count * len(data) / seconds / 1e6)
            seconds, size = _raw_read(raw_path, read_bytes)
            best["raw_read"] = max(best["raw_read"], size / seconds / 1e6)
            seconds, size = _log_read(log, read_bytes)
            best["log_read"] = max(best["log_read"], size / seconds / 1e6)
            log.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    best.update(batch_bytes=len(data), batches=count, read_bytes=read_bytes,
                append_ratio=best["log_append"] / best["raw_write"],
                read_ratio=best["log_read"] / best["raw_read"])
    return best


def main(argv: list[str] | None = None) -> int:
    from tidelog.cli.options import Formatter, storage_bench_options
    parser = argparse.ArgumentParser(prog="tidelog bench storage", description=__doc__.splitlines()[0],
                                     formatter_class=Formatter)
    storage_bench_options(parser)
    return report(parser.parse_args(argv))


def report(args) -> int:
    """Run with ``args`` (``tidelog bench storage``'s options) and print the results."""
    result = run(args.mb, args.batch_kib, args.record_bytes, args.read_kib, args.rounds,
                 args.dir or tempfile.gettempdir())
    print(f"storage benchmark: {result['batches']} batches of {result['batch_bytes']} bytes "
          f"({args.record_bytes}-byte records), {args.mb} MiB, "
          f"reads of {result['read_bytes'] // 1024} KiB, "
          f"best of {args.rounds}")
    print(f"  append  log {result['log_append']:9.1f} MB/s   raw os.write {result['raw_write']:9.1f} MB/s"
          f"   ratio {result['append_ratio']:.0%}  (target >= 60%)")
    print(f"  read    log {result['log_read']:9.1f} MB/s   raw os.pread {result['raw_read']:9.1f} MB/s"
          f"   ratio {result['read_ratio']:.0%}  (target >= 60%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
