"""The logs of one broker across its log directories (Kafka's ``LogManager``).

Theory of operation. Each log directory (JBOD: one per disk) holds partition
directories ``<topic>-<partition>`` and, at its root::

    .lock                               held while this LogManager owns the directory
    .kafka_cleanshutdown                present only after a clean shutdown: Kafka's
                                        {"version":0,"broker_epoch":N}, the broker's epoch then
    recovery-point-offset-checkpoint    {tp: recovery point}
    log-start-offset-checkpoint         {tp: log start offset}
    replication-offset-checkpoint       {tp: high watermark} (written for replication)
    cleaner-offset-checkpoint           {tp: where the clean section of a compacted log ends}

Start: lock each directory, note and delete the clean-shutdown marker (so a crash
from here on forces recovery next time; ``previous_broker_epoch`` is the epoch the
markers name when every directory has one, else -1: the broker registers with it,
KIP-966's unclean-shutdown detection), read the checkpoints, remove
``*-delete`` directories, and ``Log.open`` every partition (skipping recovery
after a clean shutdown). Shutdown: flush, write every checkpoint, write the marker,
unlock.

Periodic work the broker drives: retention (``delete_old_segments``), flushes,
checkpoints, and log compaction (``clean_logs``: one bounded step of the
``LogCleaner`` per call, docs/compaction.md).

Topic ids: each partition directory holds Kafka's ``partition.metadata``
(``version: 0`` and the topic id, KIP-516), written when metadata first assigns
the partition here. A log whose file names another id than the metadata's topic
of that name is a deleted topic's (re-created under the same name while this
broker was away): the broker deletes it before hosting the new one
(``replication/metadata_changes.py``).

A directory is *offline* after any ``OSError`` in it (or a checkpoint that does
not parse): its logs are closed and dropped, later calls for its partitions
raise ``OfflineLogDirError``, and the other directories keep working. New logs
go to the online directory holding the fewest partitions.

Directory ids (KIP-858): each directory is known by the ``directory.id`` in its
``meta.properties`` (``server/storage_format.py`` writes it when it formats the
directory). A directory whose file lacks one gets a new id, written into the file
at load (as Kafka's broker does at start-up); a disk replaced by an empty one
therefore comes back under a new id. The broker registers the ids of its online
directories with the controller and reports those that go offline
(``directory_ids``, ``offline_directory_ids``), so the controller can move the
partitions of a failed directory; ``placements`` says where each log is, for the
broker's AssignReplicasToDirs.

Moving a replica between directories (AlterReplicaLogDirs, KIP-113; docs/storage.md).
``alter_log_dir`` checks the request as Kafka's ``ReplicaManager.alterReplicaLogDirs``
does and creates a *future log* ``<tp>.<unique>-future`` in the target directory
(``future_log.py``); ``copy_to_future_logs``, called by the broker's loop, copies a
bounded chunk into each and swaps a future that has caught up with its current log:

    1. flush both logs (everything the current holds is durable in the future);
    2. rename the current ``<tp>`` to ``<tp>.<unique>-delete`` (same ``unique``);
    3. rename the future to ``<tp>`` in its directory;
    4. delete the ``-delete`` directory.

A crash after 2 and before 3 leaves a future with no current log but with the
``-delete`` directory of the same ``unique``: the load promotes that future (it held
everything at step 1) before it removes any ``-delete`` directory. A future found
beside its current log resumes; one in the same directory as its current log, or a
second one, is deleted; one with neither a current log nor that evidence (its
current's directory is missing) is left on disk untouched and logged. The broker then
reports the new directory to the controller with AssignReplicasToDirs
(``placements``), so the partition record's ``directories`` follow the move.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from collections import Counter
from typing import Callable, Iterator, Mapping

from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode, KafkaError, StorageError
from tidelog.core.limits import PREFERRED_LOG_DIRS_MAX
from tidelog.core.ids import TopicPartition
from tidelog.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from tidelog.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner
from tidelog.storage.config import INT64_MAX, LogConfig
from tidelog.storage.errors import DuplicateLogError, LogDirLockedError, OfflineLogDirError
from tidelog.storage.files import FileLock, FileSystem, RealFileSystem, read_whole_file, write_file_atomically
from tidelog.storage.future_log import FutureLog
from tidelog.storage.log import Background, Log

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES_FILE = "meta.properties"
# Written into meta.properties once every compacted log of the directory rolls its segments
# contiguously (docs/storage.md, "Recovery"): a directory without it was last stopped
# uncleanly by an earlier tidelog, whose compacted logs may have gaps between segments.
CONTIGUOUS_SEGMENTS_KEY = "tidelog.contiguous.segments"
_META_PROPERTIES_SIZE_MAX_BYTES = 64 * 1024
PARTITION_METADATA_FILE = "partition.metadata"
_PARTITION_METADATA_SIZE_MAX_BYTES = 4096
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
METADATA_TOPIC = "__cluster_metadata"  # the metadata log is the Raft layer's, not ours
_SKIPPED_DIR_SUFFIXES = ("-stray",)
FILE_NAME_LENGTH_MAX = 255        # a future log's directory name must fit (Kafka's KAFKA-4893 check)


class LogManager:
    def __init__(self, log_dirs: list[str], clock: Clock, fs: FileSystem | None = None,
                 default_config: LogConfig | None = None,
                 topic_configs: Mapping[str, LogConfig] | None = None,
                 background: Background | None = None,
                 new_directory_id: Callable[[], uuid.UUID] | None = None):
        assert log_dirs, "a LogManager needs at least one log directory"
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        assert len(set(self.log_dirs)) == len(self.log_dirs), "a log directory is listed twice"
        self.clock = clock
        self.fs = fs or RealFileSystem()
        self.default_config = default_config or LogConfig()
        self.topic_configs = dict(topic_configs or {})
        self._background = background           # where a roll's fsync runs (LocalLog._flush_in_background)
        self._logs: _CountedDict[TopicPartition, Log] = _CountedDict()      # changes counted: _timed_flush
        # log dir → the recovery points its checkpoint file holds (read at start, then as written)
        self._recovery_points_on_disk: dict[str, Mapping[TopicPartition, int]] = {}
        self._gaps_between_segments: set[str] = set()   # dirs without CONTIGUOUS_SEGMENTS_KEY (legacy)
        self._timed_flush: tuple[tuple[int, int], list[Log]] = ((-1, -1), [])
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}    # partition.metadata, as read or written
        self._dir_of: _CountedDict[TopicPartition, str] = _CountedDict()   # changes counted: placements_version
        self._offline_dirs: set[str] = set()
        self._offline_partitions: set[TopicPartition] = set()
        self._directory_ids: dict[str, uuid.UUID] = {}     # log dir → its directory.id, once read
        self._marker_epochs: dict[str, int] = {}           # log dir → its clean-shutdown marker's epoch
        # The driver hands in where new directory ids come from (random in tidelog serve,
        # seeded in the simulator); without one an id is derived from the path.
        self._new_directory_id = new_directory_id
        self._locks: dict[str, FileLock] = {}
        self._deletions = 0
        self._cleaner = LogCleaner(self._on_io_error, self._recovery_point_on_disk_at_least)
        # Replicas being moved to another directory (tp → its future log), and the
        # directory AlterReplicaLogDirs asked for a partition not hosted yet.
        self._futures: dict[TopicPartition, FutureLog] = {}
        self._preferred_dirs: dict[TopicPartition, str] = {}
        found = _Found()
        for log_dir in self.log_dirs:
            self._load_dir(log_dir, found)
        self._resolve_futures(found)
        for log_dir, name in found.deleted:
            self._remove_deleted_dir(log_dir, name)

    # -- loading ------------------------------------------------------------------------

    def _load_dir(self, log_dir: str, found: "_Found") -> None:
        fs = self.fs
        try:
            if not fs.exists(log_dir):
                fs.mkdir(log_dir)
                fs.fsync_dir(os.path.dirname(log_dir))
            self._locks[log_dir] = fs.lock(os.path.join(log_dir, LOCK_FILE))
        except LogDirLockedError:
            self._abort_start()
            raise  # another broker owns it: refuse to start, as Kafka does
        except OSError as e:
            self._mark_dir_offline(log_dir, e)
            return
        try:
            self._directory_ids[log_dir] = self._load_directory_id(log_dir)
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            had_clean_shutdown = fs.exists(marker)
            if had_clean_shutdown:
                self._marker_epochs[log_dir] = _marker_epoch(read_whole_file(fs, marker, 1024))
                fs.remove(marker)
                fs.fsync_dir(log_dir)
            recovery_points = self._checkpoint(log_dir, RECOVERY_POINT_OFFSET_CHECKPOINT).read()
            self._recovery_points_on_disk[log_dir] = recovery_points
            log_start_offsets = self._checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT).read()
            high_watermarks = self._checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT).read()
            cleaner_checkpoints = self._checkpoint(log_dir, CLEANER_OFFSET_CHECKPOINT).read()
            gaps = not self._segments_contiguous(log_dir, had_clean_shutdown)
            if gaps:
                self._gaps_between_segments.add(log_dir)
            found.checkpoints[log_dir] = (recovery_points, log_start_offsets, had_clean_shutdown)
            for name in fs.listdir(log_dir):
                tp = self._partition_dir(log_dir, name, found)
                if tp is None:
                    continue
                if tp in self._logs:
                    message = f"{tp} is in both {self._dir_of[tp]} and {log_dir}"
                    self._abort_start()
                    raise DuplicateLogError(message)
                self._logs[tp] = Log.open(
                    os.path.join(log_dir, name), self.config_for(tp.topic), self.clock, fs,
                    recovery_point=recovery_points.get(tp, 0), log_start_offset=log_start_offsets.get(tp, 0),
                    high_watermark=high_watermarks.get(tp, 0), cleaner_checkpoint=cleaner_checkpoints.get(tp, 0),
                    had_clean_shutdown=had_clean_shutdown, on_io_error=self._on_io_error,
                    on_recovery_point_lowered=self._recovery_point_lowered, background=self._background,
                    gaps_between_segments=gaps)
                self._dir_of[tp] = log_dir
        except (OSError, StorageError) as e:
            self._mark_dir_offline(log_dir, e)
            return
        loaded = len(self.logs_in_dir(log_dir))
        logger.info("%s: loaded %d logs%s", log_dir, loaded,
                    "" if not loaded else " after a clean shutdown" if had_clean_shutdown else
                    " after an unclean shutdown (each recovered from its recovery point)")

    def _load_directory_id(self, log_dir: str) -> uuid.UUID:
        """The ``directory.id`` of ``log_dir``'s ``meta.properties``; a new one, written
        into the file (its other lines kept), if it has none or an unusable one."""
        path = os.path.join(log_dir, META_PROPERTIES_FILE)
        lines = self._meta_properties_lines(path)
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "directory.id":
                directory_id = parse_directory_id(value.strip())
                if directory_id is not None:
                    return directory_id
        directory_id = self._new_directory_id() if self._new_directory_id is not None \
            else _directory_id_of_path(log_dir)
        kept = [line for line in lines if line.partition("=")[0].strip() != "directory.id"]
        if not any(line.partition("=")[0].strip() == "version" for line in kept):
            kept.insert(0, "version=1")
        kept.append(f"directory.id={format_directory_id(directory_id)}")
        write_file_atomically(self.fs, path, ("\n".join(kept) + "\n").encode())
        logger.debug("%s: new directory id %s", log_dir, format_directory_id(directory_id))
        return directory_id

    def _meta_properties_lines(self, path: str) -> list[str]:
        if not self.fs.exists(path):
            return []
        try:
            return read_whole_file(self.fs, path, _META_PROPERTIES_SIZE_MAX_BYTES).decode("utf-8").splitlines()
        except (ValueError, UnicodeDecodeError) as e:     # ValueError: too large
            raise StorageError(f"{path} is unreadable: {e}") from e

    def _segments_contiguous(self, log_dir: str, had_clean_shutdown: bool) -> bool:
        """Whether every compacted log of ``log_dir`` begins each segment where the one
        before ends (``CONTIGUOUS_SEGMENTS_KEY``). A directory without the key that an
        earlier tidelog stopped cleanly (every boundary is then below the recovery point
        on disk, never checked again) or that holds no partition yet gets it now, before
        anything is appended; one stopped uncleanly gets it at its next clean shutdown."""
        path = os.path.join(log_dir, META_PROPERTIES_FILE)
        lines = self._meta_properties_lines(path)
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == CONTIGUOUS_SEGMENTS_KEY:
                return value.strip() == "true"      # set by hand to anything else: the old rule
        if not had_clean_shutdown and any(self.fs.is_dir(os.path.join(log_dir, name))
                                          for name in self.fs.listdir(log_dir)):
            return False
        write_file_atomically(self.fs, path, ("\n".join([*lines, f"{CONTIGUOUS_SEGMENTS_KEY}=true"]) + "\n").encode())
        return True

    def _partition_dir(self, log_dir: str, name: str, found: "_Found") -> TopicPartition | None:
        """The partition of a current log's directory; None for anything else (a
        ``-delete`` or ``-future`` directory is noted in ``found`` for after the listing)."""
        path = os.path.join(log_dir, name)
        if not self.fs.is_dir(path):
            return None
        if name.endswith(DELETE_DIR_SUFFIX):
            found.deleted.append((log_dir, name))      # removed once every future is resolved
            return None
        if name.endswith(FUTURE_DIR_SUFFIX):
            parsed = _parse_unique_dir_name(name, FUTURE_DIR_SUFFIX)
            if parsed is None:
                logger.warning("%s: ignoring directory %s, not <topic>-<partition>.<id>-future", log_dir, name)
            else:
                found.futures.append((log_dir, name, *parsed))
            return None
        if name.endswith(_SKIPPED_DIR_SUFFIXES):
            logger.warning("%s: skipping %s (future/stray logs are not supported)", log_dir, name)
            return None
        try:
            tp = TopicPartition.parse(name)
        except ValueError:
            logger.warning("%s: ignoring directory %s, not <topic>-<partition>", log_dir, name)
            return None
        return None if tp.topic == METADATA_TOPIC else tp

    def _resolve_futures(self, found: "_Found") -> None:
        """After every directory is listed: resume, promote, delete or leave each future
        log found (module docstring)."""
        evidence = {(tp, unique) for _, name in found.deleted
                    for tp, unique in [_parse_unique_dir_name(name, DELETE_DIR_SUFFIX) or (None, None)]}
        for log_dir, name, tp, unique in found.futures:
            if log_dir in self._offline_dirs:
                continue
            path = os.path.join(log_dir, name)
            try:
                if tp in self._logs and self._dir_of[tp] != log_dir and tp not in self._futures:
                    self._futures[tp] = FutureLog(self._open_found(log_dir, path, tp, found), log_dir, unique)
                    logger.info("%s: resuming the move of %s from %s", log_dir, tp, self._dir_of[tp])
                elif tp in self._logs or tp in self._futures:
                    logger.warning("%s: deleting %s, a second copy of %s", log_dir, name, tp)
                    self._remove_deleted_dir(log_dir, name)
                elif (tp, unique) in evidence:
                    logger.info("%s: %s was being swapped in when the broker stopped: it is %s now",
                                log_dir, name, tp)
                    current = os.path.join(log_dir, str(tp))
                    self.fs.rename(path, current)
                    self.fs.fsync_dir(log_dir)
                    self._logs[tp] = self._open_found(log_dir, current, None, found)
                    self._dir_of[tp] = log_dir
                else:
                    logger.warning("%s: leaving %s alone: %s has no current log to move (is its directory "
                                   "missing?)", log_dir, name, tp)
            except (OSError, StorageError) as e:
                self._mark_dir_offline(log_dir, e)

    def _open_found(self, log_dir: str, path: str, topic_partition: TopicPartition | None,
                    found: "_Found") -> Log:
        tp = topic_partition or TopicPartition.parse(os.path.basename(path))
        recovery_points, log_start_offsets, had_clean_shutdown = found.checkpoints[log_dir]
        return Log.open(path, self.config_for(tp.topic), self.clock, self.fs,
                        recovery_point=recovery_points.get(tp, 0), log_start_offset=log_start_offsets.get(tp, 0),
                        had_clean_shutdown=had_clean_shutdown, on_io_error=self._on_io_error,
                        on_recovery_point_lowered=self._recovery_point_lowered,
                        background=self._background, topic_partition=topic_partition,
                        gaps_between_segments=log_dir in self._gaps_between_segments)

    def _remove_deleted_dir(self, log_dir: str, name: str) -> None:
        if log_dir in self._offline_dirs:
            return
        try:
            logger.info("%s: removing %s, deleted before the restart", log_dir, name)
            self.fs.rmtree(os.path.join(log_dir, name))
            self.fs.fsync_dir(log_dir)
        except OSError as e:
            self._mark_dir_offline(log_dir, e)

    def _checkpoint(self, log_dir: str, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile.in_dir(self.fs, log_dir, name)

    def config_for(self, topic: str) -> LogConfig:
        return self.topic_configs.get(topic, self.default_config)

    # -- logs ---------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        log = self._logs.get(tp)
        if log is not None:
            return log
        if tp in self._offline_partitions:
            raise OfflineLogDirError(f"{tp} lives in an offline log directory")
        online = [d for d in self.log_dirs if d not in self._offline_dirs]
        if not online:
            raise OfflineLogDirError("every log directory is offline")
        preferred = self._preferred_dirs.pop(tp, None)     # AlterReplicaLogDirs asked for it before
        log_dir = preferred if preferred in online else self._emptiest(online)
        path = os.path.join(log_dir, str(tp))
        if config is not None:
            self.topic_configs[tp.topic] = config
        try:
            # Its directory and first segment are listed durably by its first flush, not
            # here (``load_log``'s ``defer_new_entries``): a broker taking a thousand new
            # partitions at once spent ~20 ms of fsyncs on each, its loop held for seconds.
            log = Log.open(path, self.config_for(tp.topic), self.clock, self.fs,
                           on_io_error=self._on_io_error,
                           on_recovery_point_lowered=self._recovery_point_lowered, background=self._background,
                           defer_new_entries=True)
        except OSError as e:
            self._mark_dir_offline(log_dir, e)
            raise StorageError(f"{tp}: cannot create its log in {log_dir}: {e}") from e
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        logger.debug("created log %s in %s", tp, log_dir)
        return log

    def delete_log(self, tp: TopicPartition) -> None:
        """Close and remove a partition's log (renamed ``*-delete`` first, as Kafka does),
        its future log first."""
        self._preferred_dirs.pop(tp, None)
        self._remove_future(tp)
        log = self._logs.pop(tp, None)
        self._topic_ids.pop(tp, None)
        if log is None:
            return
        log_dir = self._dir_of.pop(tp)
        self._cleaner.abort(log)
        log.close()
        try:
            doomed = self._delete_dir_name(log_dir, tp)
            self.fs.rename(log.directory, doomed)
            self.fs.fsync_dir(log_dir)
            self.fs.rmtree(doomed)
            self.fs.fsync_dir(log_dir)
        except OSError as e:
            self._mark_dir_offline(log_dir, e)
            raise StorageError(f"{tp}: cannot delete its log in {log_dir}: {e}") from e
        logger.info("deleted log %s from %s", tp, log_dir)

    # -- moving replicas between directories (AlterReplicaLogDirs) ---------------------------

    def alter_log_dir(self, tp: TopicPartition, log_dir: str, hosted: str) -> ErrorCode:
        """Move ``tp``'s log to ``log_dir``, as Kafka's ``ReplicaManager.alterReplicaLogDirs``
        answers each partition. ``hosted``: the replica manager's view of the partition
        (``"online"``, ``"offline"`` or ``"none"``). The directory must be named exactly as
        configured (absolute; no ``..``). A move to where the log is cancels a pending one
        and does nothing else; a move elsewhere replaces a pending one; a partition not
        hosted yet gets its log in ``log_dir`` when it is created (REPLICA_NOT_AVAILABLE)."""
        if len(_unique_dir_name(tp, "0" * 32, FUTURE_DIR_SUFFIX)) > FILE_NAME_LENGTH_MAX:
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if log_dir not in self.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if log_dir in self._offline_dirs or hosted == "offline" or tp in self._offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        future = self._futures.get(tp)
        if hosted == "online" and future is not None and future.log_dir != log_dir:
            logger.info("%s: the move to %s is replaced by one to %s", tp, future.log_dir, log_dir)
            self._remove_future(tp)
        current = self._logs.get(tp)
        if self._dir_of.get(tp) != log_dir and tp not in self._futures \
                and (tp in self._preferred_dirs or len(self._preferred_dirs) < PREFERRED_LOG_DIRS_MAX):
            self._preferred_dirs[tp] = log_dir
        if hosted != "online" or current is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if self._dir_of[tp] == log_dir or tp in self._futures:
            self._preferred_dirs.pop(tp, None)
            return ErrorCode.NONE
        if self._offline_dirs:
            # Kafka's rule: no future log while a directory is offline, lest one exist in two.
            return ErrorCode.KAFKA_STORAGE_ERROR
        self._preferred_dirs.pop(tp, None)
        try:
            self._create_future(tp, current, log_dir)
        except OSError as e:
            self._mark_dir_offline(log_dir, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        except StorageError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _create_future(self, tp: TopicPartition, current: Log, log_dir: str) -> None:
        unique = self._unique_hex(log_dir, tp, FUTURE_DIR_SUFFIX)
        path = os.path.join(log_dir, _unique_dir_name(tp, unique, FUTURE_DIR_SUFFIX))
        self.fs.mkdir(path)
        self.fs.fsync_dir(log_dir)
        log = Log.open(path, self.config_for(tp.topic), self.clock, self.fs, on_io_error=self._on_io_error,
                       on_recovery_point_lowered=self._recovery_point_lowered,
                       background=self._background, topic_partition=tp)
        topic_id = self.topic_id_of(tp)
        if topic_id is not None:
            _write_partition_metadata(self.fs, path, topic_id)
        if current.log_start_offset > 0:
            log.truncate_fully_and_start_at(current.log_start_offset)
        self._cleaner.abort(current)        # no compaction of the current while it is copied (Kafka's)
        self._futures[tp] = FutureLog(log, log_dir, unique)
        logger.info("%s: moving from %s to %s (future log %s)", tp, self._dir_of[tp], log_dir, path)

    def _remove_future(self, tp: TopicPartition) -> None:
        """Cancel a move: close the future log and delete its directory."""
        future = self._futures.pop(tp, None)
        if future is None:
            return
        log = future.log
        log.close()
        log.mark_offline()          # a background flush finishing later must not touch it
        if future.log_dir in self._offline_dirs:
            return
        try:
            doomed = os.path.join(future.log_dir, _unique_dir_name(
                tp, self._unique_hex(future.log_dir, tp, DELETE_DIR_SUFFIX), DELETE_DIR_SUFFIX))
            self.fs.rename(log.directory, doomed)
            self.fs.fsync_dir(future.log_dir)
            self.fs.rmtree(doomed)
            self.fs.fsync_dir(future.log_dir)
        except OSError as e:
            self._mark_dir_offline(future.log_dir, e)
        logger.info("%s: deleted its future log in %s", tp, future.log_dir)

    def future_log(self, tp: TopicPartition) -> FutureLog | None:
        return self._futures.get(tp)

    def futures_in_dir(self, log_dir: str) -> dict[TopicPartition, FutureLog]:
        return {tp: future for tp, future in self._futures.items() if future.log_dir == log_dir}

    def preferred_log_dir(self, tp: TopicPartition) -> str | None:
        return self._preferred_dirs.get(tp)

    def has_future_work(self) -> bool:
        """Whether ``copy_to_future_logs`` has something to copy."""
        return any(tp in self._logs for tp in self._futures)

    def copy_to_future_logs(self, chunk_bytes: int) -> dict[TopicPartition, Log]:
        """One bounded step of every move: copy into each future log (``FutureLog.step_bytes``
        from ``chunk_bytes``) and swap each one that caught up. Returns the partitions
        swapped → their new current log (the caller's ``Partition.log`` must follow)."""
        swapped: dict[TopicPartition, Log] = {}
        for tp in sorted(self._futures):
            future, current = self._futures[tp], self._logs.get(tp)
            if current is None or current.is_offline:
                continue
            try:
                future.catch_up(current, future.step_bytes(current, chunk_bytes))
                if future.caught_up(current):
                    swapped[tp] = self._replace_current_with_future(tp)
            except StorageError as e:      # the failed directory is offline now (on_io_error)
                logger.error("%s: moving to %s failed: %s", tp, future.log_dir, e)
            except KafkaError as e:        # the logs disagree in a way the copy cannot mend: give up
                logger.error("%s: moving to %s failed, the move is cancelled: %s", tp, future.log_dir, e)
                self._remove_future(tp)
        return swapped

    def _replace_current_with_future(self, tp: TopicPartition) -> Log:
        """Kafka's ``replaceCurrentWithFutureLog``, crash-safe by its order (module docstring)."""
        future, current = self._futures[tp], self._logs[tp]
        source_dir, target_dir = self._dir_of[tp], future.log_dir
        assert future.caught_up(current) and source_dir != target_dir
        future.log.flush()
        current.flush()
        high_watermark, recovery_point, log_start_offset = (
            current.high_watermark, future.log.recovery_point, future.log.log_start_offset)
        doomed = os.path.join(source_dir, _unique_dir_name(tp, future.unique, DELETE_DIR_SUFFIX))
        current.close()
        current.mark_offline()
        try:
            self.fs.rename(current.directory, doomed)
            self.fs.fsync_dir(source_dir)
        except OSError as e:
            self._mark_dir_offline(source_dir, e)       # the partition is offline; so is its move
            self._remove_future(tp)
            raise StorageError(f"{tp}: cannot retire its log in {source_dir}: {e}") from e
        del self._futures[tp]
        future.log.close()
        future.log.mark_offline()
        path = os.path.join(target_dir, str(tp))
        try:
            self.fs.rename(future.log.directory, path)
            self.fs.fsync_dir(target_dir)
        except OSError as e:
            # The source directory is healthy: put the current log back, go on from it.
            self._mark_dir_offline(target_dir, e)
            try:
                self.fs.rename(doomed, current.directory)
                self.fs.fsync_dir(source_dir)
                self._logs[tp] = self._reopen(current.directory, tp, high_watermark, current.recovery_point,
                                              current.log_start_offset)
            except (OSError, StorageError) as again:
                self._mark_dir_offline(source_dir, again)
            raise StorageError(f"{tp}: cannot swap in its log in {target_dir}: {e}") from e
        log = self._reopen(path, tp, high_watermark, recovery_point, log_start_offset)
        self._logs[tp] = log
        self._dir_of[tp] = target_dir
        logger.info("%s: moved from %s to %s", tp, source_dir, target_dir)
        try:
            self.fs.rmtree(doomed)
            self.fs.fsync_dir(source_dir)
            for log_dir in (source_dir, target_dir):
                self._write_offsets_checkpoints(log_dir)
        except OSError as e:
            self._mark_dir_offline(source_dir if self.fs.exists(doomed) else target_dir, e)
        return log

    def _reopen(self, path: str, tp: TopicPartition, high_watermark: int, recovery_point: int,
                log_start_offset: int) -> Log:
        """A log just flushed and closed, opened again where it now is (no recovery needed)."""
        return Log.open(path, self.config_for(tp.topic), self.clock, self.fs, recovery_point=recovery_point,
                        log_start_offset=log_start_offset, high_watermark=high_watermark,
                        had_clean_shutdown=True, on_io_error=self._on_io_error,
                        on_recovery_point_lowered=self._recovery_point_lowered, background=self._background)

    def _unique_hex(self, log_dir: str, tp: TopicPartition, suffix: str) -> str:
        """32 hex digits naming no directory in ``log_dir`` (see ``_delete_dir_name``)."""
        while True:
            self._deletions += 1
            unique = f"{self.clock.now_ms() % (1 << 64):016x}{self._deletions:016x}"
            if not self.fs.exists(os.path.join(log_dir, _unique_dir_name(tp, unique, suffix))):
                return unique

    # -- topic ids (partition.metadata) --------------------------------------------------

    def topic_id_of(self, tp: TopicPartition) -> uuid.UUID | None:
        """The topic id in the partition's ``partition.metadata``; None if the log, the
        file or a readable id is missing (a log written before tidelog kept the file)."""
        log = self._logs.get(tp)
        if log is None:
            return None
        if tp in self._topic_ids:
            return self._topic_ids[tp]
        path = os.path.join(log.directory, PARTITION_METADATA_FILE)
        try:
            if not self.fs.exists(path):
                return None
            text = read_whole_file(self.fs, path, _PARTITION_METADATA_SIZE_MAX_BYTES).decode("utf-8")
        except (OSError, StorageError, UnicodeDecodeError) as e:
            logger.warning("%s: cannot read %s: %s", tp, PARTITION_METADATA_FILE, e)
            return None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                try:
                    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(value.strip() + "=="))
                except ValueError:
                    break
                self._topic_ids[tp] = topic_id
                return topic_id
        logger.warning("%s: %s holds no topic id", tp, PARTITION_METADATA_FILE)
        return None

    def record_topic_id(self, tp: TopicPartition, topic_id: uuid.UUID) -> None:
        """Write ``partition.metadata`` (Kafka's format) unless it already names ``topic_id``.
        A failed write takes the directory offline (its partitions go Offline as for any
        I/O error there); it does not raise."""
        log = self._logs.get(tp)
        if log is None or self.topic_id_of(tp) == topic_id:
            return
        try:
            # A new log's is synced by its first flush.
            deferred = log.defer_if_pending(os.path.join(log.directory, PARTITION_METADATA_FILE))
            _write_partition_metadata(self.fs, log.directory, topic_id, durable=not deferred)
        except OSError as e:
            log_dir = self._dir_of[tp]
            logger.error("%s: cannot write %s in %s: %s", tp, PARTITION_METADATA_FILE, log_dir, e)
            self._mark_dir_offline(log_dir, e)
            return
        self._topic_ids[tp] = topic_id

    def _delete_dir_name(self, log_dir: str, tp: TopicPartition) -> str:
        """``<tp>.<32 hex digits>-delete``, a name no directory in ``log_dir`` has.

        Kafka fills the digits with a random UUID; any unused name does, so they
        come from the injected clock and a counter (a simulated run names the
        same directories every time) and are checked against what is on disk (a
        leftover of an earlier process, or a clock that went back, is skipped).
        """
        unique = self._unique_hex(log_dir, tp, DELETE_DIR_SUFFIX)
        return os.path.join(log_dir, _unique_dir_name(tp, unique, DELETE_DIR_SUFFIX))

    def _emptiest(self, online: list[str]) -> str:
        """The first of the online directories holding the fewest logs. One pass over
        the logs, none with one directory: a broker creating 10,000 logs must not count
        every log per directory for each (that was quadratic)."""
        if len(online) == 1:
            return online[0]
        counts = Counter(self._dir_of[tp] for tp in self._logs)
        return min(online, key=lambda d: counts.get(d, 0))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def logs_in_dir(self, log_dir: str) -> dict[TopicPartition, Log]:
        return {tp: log for tp, log in self._logs.items() if self._dir_of[tp] == log_dir}

    def log_dir_of(self, tp: TopicPartition) -> str | None:
        return self._dir_of.get(tp)

    @property
    def offline_dirs(self) -> frozenset[str]:
        return frozenset(self._offline_dirs)

    def directory_id(self, log_dir: str) -> uuid.UUID | None:
        """``log_dir``'s ``directory.id``; None if it failed before it could be read."""
        return self._directory_ids.get(log_dir)

    @property
    def directory_ids(self) -> tuple[uuid.UUID, ...]:
        """The ids of the online directories, sorted (what the broker registers)."""
        return tuple(sorted(i for d, i in self._directory_ids.items() if d not in self._offline_dirs))

    @property
    def offline_directory_ids(self) -> tuple[uuid.UUID, ...]:
        """The ids of the directories that failed, sorted (what the heartbeat reports)."""
        return tuple(sorted(i for d, i in self._directory_ids.items() if d in self._offline_dirs))

    @property
    def placements_version(self) -> int:
        """Moves on every change of ``placements()`` (a log created, deleted, moved or
        reloaded): a caller compares it instead of the O(logs) mapping each tick."""
        return self._dir_of.version

    def placements(self) -> dict[TopicPartition, uuid.UUID]:
        """Each log this manager loaded or created (online or not) → its directory's id."""
        return {tp: self._directory_ids[d] for tp, d in self._dir_of.items() if d in self._directory_ids}

    @property
    def offline_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._offline_partitions)

    def is_offline(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s directory failed: its log is closed until the restart."""
        return tp in self._offline_partitions

    # -- periodic work and checkpoints ------------------------------------------------------

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """Kafka's producer-id expiration check over every log; returns producers forgotten."""
        return sum(log.remove_expired_producers(expiration_ms) for log in self.all_logs() if not log.is_offline)

    def delete_old_segments(self) -> int:
        """Apply retention to every log (Kafka's cleanupLogs); returns segments deleted."""
        return sum(self._each_log(lambda log: log.delete_old_segments()))

    def clean_logs(self, settings) -> bool:
        """One bounded step of log compaction over the compacted logs (docs/compaction.md);
        ``settings``: the broker's, indexed by Kafka's names (``log.cleaner.*``). Writes the
        directory's ``cleaner-offset-checkpoint`` when a pass completes. Returns whether
        there was work (False while idle or backing off: ``log.cleaner.backoff.ms``)."""
        config = CleanerConfig.from_settings(settings)
        if not config.enable:
            return False
        cleaning = self._cleaner.clean_one(self._compacted_logs(), config, self.clock.now_ms(),
                                           self.clock.monotonic_ms())
        if cleaning is None:
            return False
        if cleaning.done:
            log_dir = self._dir_of[cleaning.log.topic_partition]
            try:
                self._write_cleaner_checkpoint(log_dir, self.logs_in_dir(log_dir))
            except OSError as e:
                self._mark_dir_offline(log_dir, e)
                raise StorageError(f"{log_dir}: cannot write {CLEANER_OFFSET_CHECKPOINT}: {e}") from e
        return True

    def _compacted_logs(self) -> Iterator[Log]:
        """Lazily: the cleaner reads the logs only when it picks its next one (at most once
        per ``log.cleaner.backoff.ms`` when idle), not every tick (O(logs): 15 ms a tick
        with 10,000 logs)."""
        for tp, log in list(self._logs.items()):
            if log.config.compact and tp not in self._futures:
                yield log

    def flush_all(self) -> None:
        self._each_log(lambda log: log.flush())

    def flush_dirty_logs(self) -> int:
        """Flush the logs whose ``flush.ms``/``flush.messages`` is due (Kafka's flushDirtyLogs,
        run every ``log.flush.scheduler.interval.ms``); returns how many were flushed.
        Only a log with a ``flush.ms`` and unflushed records can be due (``flush.messages``
        is checked on append). The logs with a ``flush.ms`` are listed again only when the
        logs or a log's config changed: with the default, never, a tick costs nothing per
        log (it walked all of them: 65 % of an idle broker's tick at 5,000 partitions)."""
        key = (self._logs.version, Log.config_changes)
        if self._timed_flush[0] != key:
            self._timed_flush = (key, [log for log in self._logs.values() if log.config.flush_ms != INT64_MAX])
        due = [log for log in self._timed_flush[1] if log.log_end_offset != log.recovery_point]
        return sum(self._each_log(lambda log: log.maybe_flush(), due)) if due else 0

    def checkpoint_recovery_points(self) -> None:
        """Each directory's recovery points, its future logs' too (as Kafka's: a future log
        is never in the directory of its current log, so one entry per partition)."""
        self._write_per_dir(RECOVERY_POINT_OFFSET_CHECKPOINT, lambda log: log.recovery_point)

    def _recovery_point_lowered(self, log: Log) -> None:
        """A truncation lowered ``log``'s recovery point (``Log._recovery_point_lowered``):
        if its directory's checkpoint holds a higher one, write the checkpoint now, before
        the log takes records again below the old value."""
        found = self._recovery_point_on_disk(log)
        if found is None or found[1] is None or log.recovery_point >= found[1]:
            return
        try:
            self._write_offsets_checkpoints(found[0])
        except OSError as e:
            self._mark_dir_offline(found[0], e)

    def _recovery_point_on_disk_at_least(self, log: Log, offset: int) -> None:
        """Before the cleaner swaps segments below ``offset`` (at most ``log``'s recovery
        point): write the directory's checkpoint if the one on disk is below it."""
        found = self._recovery_point_on_disk(log)
        if found is None or (found[1] is not None and found[1] >= offset):
            return
        log_dir = found[0]
        try:
            self._write_offsets_checkpoints(log_dir)
        except OSError as e:
            self._mark_dir_offline(log_dir, e)
            raise StorageError(f"{log_dir}: cannot write {RECOVERY_POINT_OFFSET_CHECKPOINT}: {e}") from e

    def _recovery_point_on_disk(self, log: Log) -> tuple[str, int | None] | None:
        """``(log's directory, the recovery point its checkpoint holds for it, None if
        none)``; None when ``log`` is not a current log of an online directory."""
        log_dir = self._dir_of.get(log.topic_partition)
        if log_dir is None or log_dir in self._offline_dirs or self._logs.get(log.topic_partition) is not log:
            return None
        return log_dir, self._recovery_points_on_disk.get(log_dir, {}).get(log.topic_partition)

    def checkpoint_log_start_offsets(self) -> None:
        self._write_per_dir(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)

    def _write_offsets_checkpoints(self, log_dir: str) -> None:
        logs = self._logs_with_futures(log_dir)
        recovery_points = {tp: log.recovery_point for tp, log in logs.items()}
        self._checkpoint(log_dir, RECOVERY_POINT_OFFSET_CHECKPOINT).write(recovery_points)
        self._recovery_points_on_disk[log_dir] = recovery_points
        self._checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT).write(
            {tp: log.log_start_offset for tp, log in logs.items()})

    def _logs_with_futures(self, log_dir: str) -> dict[TopicPartition, Log]:
        logs = self.logs_in_dir(log_dir)
        logs.update({tp: future.log for tp, future in self.futures_in_dir(log_dir).items()})
        return logs

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The ``replication-offset-checkpoint`` entries of every online directory."""
        result: dict[TopicPartition, int] = {}
        for log_dir in self._online_dirs():
            try:
                result.update(self._checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT).read())
            except (OSError, StorageError) as e:
                self._mark_dir_offline(log_dir, e)
        return result

    def write_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write each directory's ``replication-offset-checkpoint`` with its partitions' HWs."""
        self._write_per_dir(REPLICATION_OFFSET_CHECKPOINT, None, high_watermarks)

    @property
    def previous_broker_epoch(self) -> int:
        """The broker epoch of the last clean shutdown, if every directory shut down
        cleanly then (and says so); -1 otherwise (Kafka's ``previousBrokerEpoch``)."""
        epochs = {self._marker_epochs.get(d, -1) for d in self.log_dirs}
        return epochs.pop() if len(epochs) == 1 else -1

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush, write every checkpoint and the clean-shutdown marker (naming
        ``broker_epoch``), close, unlock."""
        self._cleaner.abort()
        for log_dir in self.log_dirs:
            logs = self.logs_in_dir(log_dir)
            futures = [future.log for future in self.futures_in_dir(log_dir).values()]
            try:
                if log_dir not in self._offline_dirs:
                    for log in (*logs.values(), *futures):
                        log.flush()
                    self._write_dir_checkpoints(log_dir, logs)
                    if log_dir in self._gaps_between_segments:   # every boundary now below the recovery point
                        self._segments_contiguous(log_dir, had_clean_shutdown=True)
                        self._gaps_between_segments.discard(log_dir)
                for log in (*logs.values(), *futures):
                    log.close()
                if log_dir not in self._offline_dirs:
                    self._write_marker(log_dir, broker_epoch)
            except (OSError, StorageError) as e:
                self._mark_dir_offline(log_dir, e)
            self._release_lock(log_dir)
        self._logs.clear()
        self._dir_of.clear()
        self._futures.clear()

    def _write_dir_checkpoints(self, log_dir: str, logs: Mapping[TopicPartition, Log]) -> None:
        """Every checkpoint of ``log_dir``: its future logs are in the offsets checkpoints
        only (a high watermark or cleaner checkpoint of theirs would hide the current's)."""
        self._write_offsets_checkpoints(log_dir)
        self._checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT).write(
            {tp: log.high_watermark for tp, log in logs.items()})
        self._write_cleaner_checkpoint(log_dir, logs)

    def _write_cleaner_checkpoint(self, log_dir: str, logs: Mapping[TopicPartition, Log]) -> None:
        self._checkpoint(log_dir, CLEANER_OFFSET_CHECKPOINT).write(
            {tp: log.cleaner_checkpoint for tp, log in logs.items() if log.cleaner_checkpoint > 0})

    def _write_marker(self, log_dir: str, broker_epoch: int) -> None:
        write_file_atomically(self.fs, os.path.join(log_dir, CLEAN_SHUTDOWN_FILE),
                              b'{"version":0,"broker_epoch":%d}' % broker_epoch)

    # -- failures -----------------------------------------------------------------------

    def _each_log(self, action, logs=None) -> list:
        """Run ``action`` on every log (or those of ``logs``); a failing directory goes
        offline, the rest go on."""
        results, first_error = [], None
        for log in list(self._logs.values()) if logs is None else logs:
            if log.is_offline:
                continue
            try:
                results.append(action(log))
            except StorageError as e:
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return results

    def _write_per_dir(self, name: str, value_of,
                       values: Mapping[TopicPartition, int] | None = None) -> None:
        first_error = None
        for log_dir in self._online_dirs():
            logs = self.logs_in_dir(log_dir) if values is not None else self._logs_with_futures(log_dir)
            if values is None:
                entries = {tp: value_of(log) for tp, log in logs.items()}
            else:
                entries = {tp: value for tp, value in values.items() if tp in logs}
            try:
                self._checkpoint(log_dir, name).write(entries)
                if name == RECOVERY_POINT_OFFSET_CHECKPOINT:
                    self._recovery_points_on_disk[log_dir] = entries
            except OSError as e:
                self._mark_dir_offline(log_dir, e)
                first_error = first_error or StorageError(f"{log_dir}: cannot write {name}: {e}")
        if first_error is not None:
            raise first_error

    def _online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self._offline_dirs]

    def _on_io_error(self, log_dir: str, error: OSError) -> None:
        self._mark_dir_offline(log_dir, error)

    def _mark_dir_offline(self, log_dir: str, error: Exception) -> None:
        if log_dir in self._offline_dirs:
            return
        self._offline_dirs.add(log_dir)
        logs = self.logs_in_dir(log_dir)
        logger.error("log directory %s is offline (%s); %d partitions go offline: %s", log_dir, error,
                     len(logs), ", ".join(str(tp) for tp in sorted(logs)))
        for tp, log in logs.items():
            log.mark_offline()
            try:
                log.close()
            except (OSError, ValueError):
                pass
            del self._logs[tp]
            self._topic_ids.pop(tp, None)
            self._offline_partitions.add(tp)
        # A move into or out of this directory stops; the future's files stay for the restart.
        for tp, future in list(self._futures.items()):
            if future.log_dir == log_dir or tp in logs:
                del self._futures[tp]
                future.log.mark_offline()
                try:
                    future.log.close()
                except (OSError, ValueError):
                    pass
        self._release_lock(log_dir)

    def _abort_start(self) -> None:
        """Undo a start that must fail: close what was opened, unlock every directory."""
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._dir_of.clear()
        for log_dir in list(self._locks):
            self._release_lock(log_dir)

    def _release_lock(self, log_dir: str) -> None:
        lock = self._locks.pop(log_dir, None)
        if lock is not None:
            try:
                lock.release()
            except OSError:
                pass


class _Found:
    """What a load found besides current logs, resolved once every directory is listed."""

    def __init__(self):
        self.deleted: list[tuple[str, str]] = []                            # (log dir, name)
        self.futures: list[tuple[str, str, TopicPartition, str]] = []       # (log dir, name, tp, unique)
        self.checkpoints: dict[str, tuple[dict, dict, bool]] = {}           # recovery, log start, clean


def _unique_dir_name(tp: TopicPartition, unique: str, suffix: str) -> str:
    """Kafka's ``<topic>-<partition>.<unique>-delete`` / ``-future`` directory names."""
    return f"{tp}.{unique}{suffix}"


def _parse_unique_dir_name(name: str, suffix: str) -> tuple[TopicPartition, str] | None:
    stem, dot, unique = name[:-len(suffix)].rpartition(".")
    if not dot or not unique:
        return None
    try:
        return TopicPartition.parse(stem), unique
    except ValueError:
        return None


def _write_partition_metadata(fs: FileSystem, directory: str, topic_id: uuid.UUID, durable: bool = True) -> None:
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    write_file_atomically(fs, os.path.join(directory, PARTITION_METADATA_FILE),
                          f"version: 0\ntopic_id: {encoded}\n".encode(), durable=durable)


def random_directory_id(random_bits: Callable[[int], int]) -> uuid.UUID:
    """A new directory id from ``random_bits(128)`` (Kafka reserves the ids 0-99)."""
    while True:
        directory_id = uuid.UUID(int=random_bits(128))
        if directory_id.int >= 100:
            return directory_id


def _directory_id_of_path(log_dir: str) -> uuid.UUID:
    """A stable id for a directory when no source of ids was handed in (tests)."""
    directory_id = uuid.uuid5(uuid.NAMESPACE_URL, "tidelog-log-dir:" + os.path.abspath(log_dir))
    return directory_id if directory_id.int >= 100 else uuid.UUID(int=directory_id.int + 100)


def format_directory_id(directory_id: uuid.UUID) -> str:
    """Kafka's textual Uuid: URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(directory_id.bytes).decode().rstrip("=")


def parse_directory_id(text: str) -> uuid.UUID | None:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
    if len(raw) != 16:
        return None
    directory_id = uuid.UUID(bytes=raw)
    return None if directory_id.int < 100 else directory_id


def _marker_epoch(data: bytes) -> int:
    """The broker epoch in a clean-shutdown marker; -1 for an empty (older) or unreadable one."""
    try:
        value = json.loads(data.decode("utf-8")).get("broker_epoch", -1)
    except (ValueError, UnicodeDecodeError, AttributeError):
        return -1
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


class _CountedDict(dict):
    """A dict that counts its changes (``version``); only the writes LogManager uses."""

    version = 0

    def __setitem__(self, key, value) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args):
        self.version += 1
        return super().pop(*args)

    def clear(self) -> None:
        self.version += 1
        super().clear()
