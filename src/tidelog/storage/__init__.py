"""The storage engine: segments, indexes, epoch cache, checkpoints, recovery.

Layers, bottom up: ``files`` (every byte goes through a ``FileSystem``; tests crash
it), ``checkpoint`` (Kafka's text files), ``index`` and ``segment`` (one
``.log``/``.index``/``.timeindex`` triple), ``epoch_cache``, ``local_log`` (one
partition's segments, Kafka's ``LocalLog``), ``log`` (the partition on top,
Kafka's ``UnifiedLog``, with ``producer_state_files`` and ``retention``) and
``log_loader`` (open + recovery), ``log_manager`` (log directories). See
docs/storage.md.
"""

from tidelog.storage.config import LogConfig
from tidelog.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from tidelog.storage.files import FileSystem, RealFileSystem
from tidelog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    FileSlice,
    Log,
    LogAppendInfo,
    LogOffsetMetadata,
)
from tidelog.storage.log_manager import LogManager
from tidelog.storage.segment import LogSegment, OffsetAndTimestamp

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "FetchDataInfo",
    "FileSlice",
    "FileSystem",
    "LeaderEpochCache",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogOffsetMetadata",
    "LogSegment",
    "OffsetAndTimestamp",
    "RealFileSystem",
]
