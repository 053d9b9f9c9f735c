"""The file layer: RealFileSystem basics and what CrashableFileSystem keeps across a crash."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from tidelog.testing.crashable import CrashableFileSystem
from tidelog.storage.errors import LogDirLockedError
from tidelog.storage import files
from tidelog.server.write_behind import WriteBehind
from tidelog.storage.files import RealFileSystem, read_whole_file, write_file_atomically


@pytest.fixture(params=["real", "behind", "crashable"])
def any_fs(request, tmp_path):
    if request.param == "crashable":
        yield CrashableFileSystem(str(tmp_path))
    elif request.param == "behind":
        write_behind = WriteBehind(inline_bytes=0)      # every append through the thread
        yield RealFileSystem(write_behind)
        write_behind.close()
    else:
        yield RealFileSystem()


def test_append_returns_position_and_pread_reads_back(any_fs, tmp_path):
    handle = any_fs.open(str(tmp_path / "f"))
    assert handle.append(b"hello") == 0
    assert handle.append(bytearray(b" world")) == 5
    assert handle.append(memoryview(b"!")) == 11
    assert handle.size() == 12
    assert handle.pread(5, 6) == b"world"
    assert handle.pread(100, 6) == b"world!"  # short only at the end
    handle.truncate(5)
    assert handle.size() == 5 and handle.pread(100, 0) == b"hello"
    assert handle.append(b"X") == 5
    handle.fsync()
    handle.close()
    assert (tmp_path / "f").read_bytes() == b"helloX"


def test_closed_handle_raises_value_error_not_os_error(any_fs, tmp_path):
    handle = any_fs.open(str(tmp_path / "f"))
    handle.close()
    with pytest.raises(ValueError):
        handle.pread(1, 0)
    with pytest.raises(ValueError):
        handle.append(b"x")
    with pytest.raises(ValueError):
        handle.fileno()


def test_open_without_create_fails_for_missing_file(any_fs, tmp_path):
    with pytest.raises(FileNotFoundError):
        any_fs.open(str(tmp_path / "missing"), create=False)


def test_directory_operations(any_fs, tmp_path):
    d = str(tmp_path / "a" / "b")
    any_fs.mkdir(d)
    assert any_fs.is_dir(d) and any_fs.exists(d)
    any_fs.open(os.path.join(d, "x")).close()
    any_fs.rename(os.path.join(d, "x"), os.path.join(d, "y"))
    assert any_fs.listdir(d) == ["y"]
    any_fs.remove(os.path.join(d, "y"))
    assert any_fs.listdir(d) == []
    any_fs.fsync_dir(d)
    any_fs.rmtree(str(tmp_path / "a"))
    assert not any_fs.exists(str(tmp_path / "a"))


def test_atomic_write_and_read_whole_file(any_fs, tmp_path):
    path = str(tmp_path / "checkpoint")
    write_file_atomically(any_fs, path, b"one")
    write_file_atomically(any_fs, path, b"two")
    assert read_whole_file(any_fs, path, 100) == b"two"
    assert not any_fs.exists(path + ".tmp")
    with pytest.raises(ValueError, match="more than the limit"):
        read_whole_file(any_fs, path, 2)


def test_lock_is_exclusive_until_released(any_fs, tmp_path):
    lock = any_fs.lock(str(tmp_path / ".lock"))
    with pytest.raises(LogDirLockedError):
        any_fs.lock(str(tmp_path / ".lock"))
    lock.release()
    any_fs.lock(str(tmp_path / ".lock")).release()


# -- CrashableFileSystem --------------------------------------------------------------


def durable_file(fs: CrashableFileSystem, path: str, data: bytes):
    handle = fs.open(path)
    handle.append(data)
    handle.fsync()
    fs.fsync_dir(os.path.dirname(path))
    return handle


def test_crash_drops_bytes_written_since_the_last_fsync(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = str(tmp_path / "f")
    handle = durable_file(fs, path, b"durable")
    handle.append(b"-lost")
    assert fs.unsynced_bytes(path) == 5
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"durable"
    with pytest.raises(ValueError):
        handle.append(b"x")  # every handle is gone with the crash


def test_crash_undoes_an_unsynced_truncation(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = str(tmp_path / "f")
    handle = durable_file(fs, path, b"0123456789")
    handle.truncate(4)
    handle.append(b"ab")
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_synced_truncation_survives(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = str(tmp_path / "f")
    handle = durable_file(fs, path, b"0123456789")
    handle.truncate(4)
    handle.fsync()
    handle.append(b"ab")
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"0123"


def test_crash_undoes_creations_renames_and_removals_without_fsync_dir(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    root = str(tmp_path)
    durable_file(fs, os.path.join(root, "kept"), b"k")
    durable_file(fs, os.path.join(root, "old"), b"o")
    new = fs.open(os.path.join(root, "new"))  # created, never made durable
    new.append(b"n")
    new.fsync()
    fs.rename(os.path.join(root, "kept"), os.path.join(root, "renamed"))
    fs.remove(os.path.join(root, "old"))
    fs.mkdir(os.path.join(root, "dir"))
    assert fs.listdir(root) == ["dir", "new", "renamed"]
    fs.crash()
    assert fs.listdir(root) == ["kept", "old"]
    assert (tmp_path / "old").read_bytes() == b"o"


def test_fsync_dir_makes_directory_changes_durable(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    root = str(tmp_path)
    durable_file(fs, os.path.join(root, "a"), b"a")
    fs.rename(os.path.join(root, "a"), os.path.join(root, "b"))
    fs.mkdir(os.path.join(root, "d"))
    durable_file(fs, os.path.join(root, "d", "f"), b"f")
    fs.fsync_dir(root)
    fs.crash()
    assert fs.listdir(root) == ["b", "d"]
    assert (tmp_path / "d" / "f").read_bytes() == b"f"


def test_rename_over_an_existing_file_is_undone_whole(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    root = str(tmp_path)
    durable_file(fs, os.path.join(root, "target"), b"old")
    durable_file(fs, os.path.join(root, "target.tmp"), b"new")
    fs.rename(os.path.join(root, "target.tmp"), os.path.join(root, "target"))
    assert (tmp_path / "target").read_bytes() == b"new"
    fs.crash()
    assert (tmp_path / "target").read_bytes() == b"old"
    assert (tmp_path / "target.tmp").read_bytes() == b"new"


def test_tear_last_write_keeps_a_durable_prefix(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    path = str(tmp_path / "f")
    handle = durable_file(fs, path, b"head-")
    handle.append(b"0123456789")
    fs.tear_last_write(path, 3)
    assert handle.size() == 8
    fs.crash()
    assert (tmp_path / "f").read_bytes() == b"head-012"


def test_fail_injects_eio_under_a_prefix_until_healed(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    bad, good = str(tmp_path / "bad"), str(tmp_path / "good")
    fs.mkdir(bad)
    fs.mkdir(good)
    handle = fs.open(os.path.join(bad, "f"))
    fs.fail(bad)
    with pytest.raises(OSError) as info:
        handle.append(b"x")
    assert info.value.errno == errno.EIO
    with pytest.raises(OSError):
        fs.listdir(bad)
    fs.open(os.path.join(good, "f")).append(b"fine")
    fs.heal(bad)
    handle.append(b"x")


def test_paths_outside_the_root_are_refused(tmp_path):
    fs = CrashableFileSystem(str(tmp_path / "root"))
    with pytest.raises(AssertionError):
        fs.open(str(tmp_path / "elsewhere"))


def test_rmtree_and_directory_renames_are_undone_without_fsync_dir(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    root = str(tmp_path)
    fs.mkdir(os.path.join(root, "t-0"))
    fs.mkdir(os.path.join(root, "t-1"))
    fs.fsync_dir(root)
    durable_file(fs, os.path.join(root, "t-0", "a"), b"a")
    durable_file(fs, os.path.join(root, "t-1", "b"), b"b")
    fs.rename(os.path.join(root, "t-0"), os.path.join(root, "t-0.x-delete"))
    fs.rmtree(os.path.join(root, "t-1"))
    assert fs.listdir(root) == ["t-0.x-delete"]
    fs.crash()
    assert fs.listdir(root) == ["t-0", "t-1"]
    assert (tmp_path / "t-0" / "a").read_bytes() == b"a"
    assert (tmp_path / "t-1" / "b").read_bytes() == b"b"


def test_sync_later_runs_on_its_own_descriptor_after_the_handle_is_closed(tmp_path):
    fs = RealFileSystem()
    handle = fs.open(str(tmp_path / "segment.log"))
    handle.append(b"abc")
    sync = handle.sync_later()
    handle.close()
    other = fs.open(str(tmp_path / "other.log"))   # may take the closed handle's descriptor number
    sync()                                           # fsyncs segment.log's own duplicate, then closes it
    other.append(b"x")
    assert (tmp_path / "segment.log").read_bytes() == b"abc"
    other.close()


def test_sync_later_is_an_fsync_for_the_crash_model(tmp_path):
    fs = CrashableFileSystem(str(tmp_path))
    handle = fs.open(str(tmp_path / "segment.log"))
    handle.append(b"abc")
    fs.fsync_dir(str(tmp_path))
    sync = handle.sync_later()
    assert fs.unsynced_bytes(str(tmp_path / "segment.log")) == 3
    sync()
    assert fs.unsynced_bytes(str(tmp_path / "segment.log")) == 0


# -- write-behind ----------------------------------------------------------------------


class _SlowWrites:
    """Holds the writer thread in each write until released (``files._write_all`` patched)."""

    def __init__(self, monkeypatch, fail_on: bytes | None = None):
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        real = files._write_all

        def write_all(fd, data):
            if threading.current_thread().name != "tidelog-write-behind":
                return real(fd, data)              # an inline write: not held
            self.started.release()
            assert self.gate.wait(10)
            if fail_on is not None and fail_on in bytes(data):
                raise OSError(errno.ENOSPC, "No space left on device")
            real(fd, data)
        monkeypatch.setattr(files, "_write_all", write_all)


def test_write_behind_reads_see_every_append_at_once(tmp_path, monkeypatch):
    """The writer has made none of the appends yet: pread of their range reads them from
    memory (and what lies before them from the file), without waiting; written_through
    says which bytes are in the file; fileno, truncate and fsync wait for them."""
    write_behind = WriteBehind(inline_bytes=0)
    slow = _SlowWrites(monkeypatch)
    handle = RealFileSystem(write_behind).open(str(tmp_path / "f"))
    slow.gate.set()
    assert handle.append(b"0123") == 0
    write_behind.wait(write_behind.submitted)      # "0123" is in the file
    assert slow.started.acquire(timeout=10)
    slow.gate.clear()
    assert handle.append(b"456789") == 4
    assert slow.started.acquire(timeout=10)        # the writer holds it
    assert handle.append(b"abcdef") == 10
    assert handle.size() == 16 and write_behind.completed == 1
    assert handle.pread(100, 2) == b"23456789abcdef"   # file, then both queued writes
    assert handle.pread(3, 5) == b"567" and handle.pread(4, 9) == b"9abc"
    assert handle.pread(10, 16) == b"" and handle.pread(2, 0) == b"01"
    assert write_behind.completed == 1             # nothing waited
    assert handle.written_through(4) and not handle.written_through(5)
    assert handle.fileno(4) >= 0                   # a region of bytes already written: no wait
    threading.Timer(0.2, slow.gate.set).start()
    with open(handle.fileno(), "rb", closefd=False) as f:
        f.seek(0)
        assert f.read() == b"0123456789abcdef"     # fileno waited (a sendfile region)
    assert write_behind.completed == write_behind.submitted == 3 and handle.written_through(16)
    handle.truncate(4)
    handle.append(b"XY")
    assert handle.pread(10, 0) == b"0123XY"
    handle.close()
    write_behind.close()


def test_write_behind_queue_is_bounded(tmp_path, monkeypatch):
    """An append that would take the queue past max_bytes waits for the writer."""
    write_behind = WriteBehind(max_bytes=10, inline_bytes=0)
    slow = _SlowWrites(monkeypatch)
    handle = RealFileSystem(write_behind).open(str(tmp_path / "f"))
    handle.append(b"x" * 8)
    assert slow.started.acquire(timeout=10)
    appended = threading.Event()
    threading.Thread(target=lambda: (handle.append(b"y" * 8), appended.set()), daemon=True).start()
    assert not appended.wait(0.3)                  # 16 bytes would be queued: it waits
    assert write_behind.queued_bytes == 8 and write_behind.full_waits == 1
    slow.gate.set()
    assert appended.wait(10)
    assert handle.pread(16, 0) == b"x" * 8 + b"y" * 8
    handle.close()
    write_behind.close()


def test_a_failed_write_behind_fails_the_file_and_names_its_number(tmp_path, monkeypatch):
    """ENOSPC in the writer thread: the write and every later one to that file are
    not made; the next operation on the file raises OSError (so the log takes its
    directory offline), and ``failed_between`` names the writes for the network layer."""
    write_behind = WriteBehind(inline_bytes=0)
    slow = _SlowWrites(monkeypatch, fail_on=b"doomed")
    slow.gate.set()
    handle = RealFileSystem(write_behind).open(str(tmp_path / "f"))
    other = RealFileSystem(write_behind).open(str(tmp_path / "g"))
    handle.append(b"kept")
    handle.append(b"doomed")
    handle.append(b"after")
    other.append(b"fine")
    woken = []
    write_behind.when_written(write_behind.submitted, lambda: woken.append(True))
    write_behind.wait(write_behind.submitted)
    assert woken == [True]
    assert write_behind.failed_between(0, 4) and write_behind.failed_between(1, 2)
    assert not write_behind.failed_between(0, 1) and not write_behind.failed_between(3, 4)
    assert handle.pread(4, 0) == b"kept"           # what was written can still be read
    with pytest.raises(OSError) as failure:
        handle.pread(10, 4)
    assert failure.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        handle.append(b"more")
    with pytest.raises(OSError):
        handle.fsync()
    assert os.path.getsize(tmp_path / "f") == 4    # nothing written after the hole
    assert other.pread(4, 0) == b"fine"            # other files are not affected
    with pytest.raises(OSError):
        handle.close()
    assert handle.closed
    other.close()
    write_behind.close()


def test_a_small_append_with_nothing_of_its_file_queued_is_written_at_once(tmp_path, monkeypatch):
    """Under inline_bytes, with none of its file's writes queued, the caller writes (no
    hand-over), even while another file's write is queued; with one of its own queued,
    it queues behind it, so the file's order holds."""
    write_behind = WriteBehind(inline_bytes=100)
    slow = _SlowWrites(monkeypatch)
    handle = RealFileSystem(write_behind).open(str(tmp_path / "f"))
    other = RealFileSystem(write_behind).open(str(tmp_path / "g"))
    other.append(b"O" * 200)                       # queued, held by the writer
    assert slow.started.acquire(timeout=10)
    handle.append(b"small")
    assert write_behind.submitted == 1 and os.path.getsize(tmp_path / "f") == 5
    handle.append(b"L" * 200)
    assert write_behind.submitted == 2
    handle.append(b"tail")                         # behind its own queued write
    assert write_behind.submitted == 3
    slow.gate.set()
    assert handle.pread(300, 0) == b"small" + b"L" * 200 + b"tail"
    assert other.pread(300, 0) == b"O" * 200
    handle.close()
    other.close()
    write_behind.close()


def test_a_followers_append_is_never_behind(tmp_path):
    """A follower's next Fetch reports its log end offset and the leader counts it toward
    the high watermark: the bytes must be in the page cache by then (a kill -9 keeps
    them, as a Kafka follower's). A leader's append may be behind: its answer waits."""
    from tidelog.core.clock import ManualClock
    from tidelog.records.batch import build_batch
    from tidelog.storage.config import LogConfig
    from tidelog.storage.log import Log

    write_behind = WriteBehind(inline_bytes=200)  # the checkpoints inline, the batches (~370 B) not
    fs = RealFileSystem(write_behind)
    leader = Log.open(str(tmp_path / "t-0"), LogConfig(), ManualClock(0), fs=fs)
    leader.append_as_leader(build_batch([b"a" * 100] * 3, timestamp_ms=0), leader_epoch=0)
    assert write_behind.submitted == 1
    follower = Log.open(str(tmp_path / "t-1"), LogConfig(), ManualClock(0), fs=fs)
    follower.append_as_follower(build_batch([b"b" * 100] * 3, base_offset=0, partition_leader_epoch=0,
                                            timestamp_ms=0))
    assert write_behind.submitted == 1            # not queued: written at once
    segment = tmp_path / "t-1" / "00000000000000000000.log"
    assert os.path.getsize(segment) == follower.size_bytes > 0
    leader.close()
    follower.close()
    write_behind.close()


def test_an_append_made_at_once_waits_for_its_files_queued_writes(tmp_path, monkeypatch):
    """A leader's append is queued (held by the writer); the replica becomes a follower
    and appends at once: that write waits for the queued one, so the file keeps its
    order."""
    write_behind = WriteBehind(inline_bytes=0)
    slow = _SlowWrites(monkeypatch)
    handle = RealFileSystem(write_behind).open(str(tmp_path / "f"))
    handle.append(b"leader;")
    assert slow.started.acquire(timeout=10)
    threading.Timer(0.2, slow.gate.set).start()
    assert handle.append(b"follower", behind=False) == 7
    assert write_behind.submitted == 1
    with open(tmp_path / "f", "rb") as f:
        assert f.read() == b"leader;follower"
    handle.close()
    write_behind.close()
