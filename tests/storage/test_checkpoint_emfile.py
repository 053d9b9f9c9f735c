"""A checkpoint write that runs out of file descriptors (EMFILE/ENFILE) is retried
after a short backoff instead of failing its log directory; any other OSError,
and the last retry's, propagates at once as before."""

from __future__ import annotations

import errno

import pytest

from tidelog.core.ids import TopicPartition
from tidelog.core.limits import CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS
from tidelog.storage import checkpoint
from tidelog.storage.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from tidelog.testing.crashable import CrashableFileSystem

ENTRIES = {TopicPartition("orders", 0): 42}


class ShortOfDescriptors(CrashableFileSystem):
    """``open`` fails with ``error`` the next ``failures`` times, then works."""

    def __init__(self, root: str, failures: int, error: int = errno.EMFILE):
        super().__init__(root)
        self.failures = failures
        self.error = error
        self.opens = 0

    def open(self, path: str, create: bool = True):
        self.opens += 1
        if self.failures:
            self.failures -= 1
            raise OSError(self.error, "Too many open files" if self.error == errno.EMFILE else "injected", path)
        return super().open(path, create)


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The waits between retries, as the runtime's ``time.sleep`` would be asked for them."""
    slept: list[float] = []
    monkeypatch.setattr(checkpoint, "_retry_wait", checkpoint._retry_wait)   # restored afterwards
    checkpoint.set_retry_wait(slept.append)
    return slept


@pytest.mark.parametrize("error", [errno.EMFILE, errno.ENFILE])
def test_a_write_out_of_descriptors_is_retried_and_lands(tmp_path, sleeps, error):
    fs = ShortOfDescriptors(str(tmp_path), failures=2, error=error)
    file = OffsetCheckpointFile.in_dir(fs, str(tmp_path), checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT)
    file.write(ENTRIES)
    assert file.read() == ENTRIES
    assert sleeps == [ms / 1000 for ms in CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS[:2]]


def test_the_leader_epoch_checkpoint_is_retried_too(tmp_path, sleeps):
    fs = ShortOfDescriptors(str(tmp_path), failures=1)
    file = LeaderEpochCheckpointFile(fs, str(tmp_path / "leader-epoch-checkpoint"))
    file.write([(0, 0), (3, 17)])
    assert file.read() == [(0, 0), (3, 17)]
    assert len(sleeps) == 1


def test_descriptors_that_never_come_back_fail_after_the_retries(tmp_path, sleeps):
    fs = ShortOfDescriptors(str(tmp_path), failures=100)
    file = OffsetCheckpointFile.in_dir(fs, str(tmp_path), checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT)
    with pytest.raises(OSError) as raised:
        file.write(ENTRIES)
    assert raised.value.errno == errno.EMFILE
    assert fs.opens == len(CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS) + 1
    assert len(sleeps) == len(CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS)
    assert sum(sleeps) < 1.0   # short: the event loop waits through it


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC, errno.EACCES])
def test_any_other_os_error_propagates_at_once(tmp_path, sleeps, error):
    fs = ShortOfDescriptors(str(tmp_path), failures=1, error=error)
    file = OffsetCheckpointFile.in_dir(fs, str(tmp_path), checkpoint.RECOVERY_POINT_OFFSET_CHECKPOINT)
    with pytest.raises(OSError) as raised:
        file.write(ENTRIES)
    assert raised.value.errno == error
    assert fs.opens == 1 and sleeps == []
