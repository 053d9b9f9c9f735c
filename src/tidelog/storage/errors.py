"""Errors raised by the storage layer, beyond those in ``tidelog.core.errors``.

All of them are ``StorageError`` (Kafka's ``KAFKA_STORAGE_ERROR``): the data on
disk, or the disk itself, cannot be trusted or used.
"""

from __future__ import annotations

from tidelog.core.errors import StorageError


class CheckpointFormatError(StorageError):
    """A checkpoint file that does not parse; the message names the file and line."""


class LogDirLockedError(StorageError):
    """Another process (or another LogManager) holds the log directory's lock."""


class OfflineLogDirError(StorageError):
    """The log directory holding the partition has failed and is offline."""


class CorruptSegmentError(StorageError):
    """Stored data that no longer parses (media corruption); it is never served."""


class DuplicateLogError(Exception):
    """One partition found in two log directories: a misconfigured broker that must
    not start (deliberately not a ``StorageError``, which would only take a
    directory offline)."""
