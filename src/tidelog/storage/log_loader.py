"""Opening a partition directory: find the segments, recover, compute the offsets.

Theory of operation (docs/storage.md, "Recovery"; Kafka's ``LogLoader``). The
directory holds ``<base_offset:020d>.log`` files and their indexes. Loading:

1. Finish what the log cleaner left half done (docs/compaction.md): a
   ``<base>.log.swap`` is a cleaned segment whose swap was committed, so the
   old segments it replaces (bases in ``[base, its next offset)``) are deleted
   and its ``.swap`` files renamed to their final names. Then remove leftovers:
   ``*.tmp`` / ``*.deleted`` / ``*.cleaned`` / other ``*.swap`` files, and
   indexes whose ``.log`` is gone.
2. Drop segments wholly below the log start offset.
3. Recover. After a clean shutdown nothing is scanned: the last segment's end
   is found from its last index entry (and if that walk does not end exactly at
   the file's end, the segment is recovered after all). Otherwise every segment
   from the one holding the recovery point onwards is validated batch by batch
   (``LogSegment.recover``); the first torn or corrupt batch and everything after
   it are cut. When the cut is in a segment that is not the last one, the later
   segments are deleted and the corruption is logged as an error: data after a
   hole is never served. A segment that ends short of the next one's base (its
   unsynced data lost, a later file's pages kept) ends the log the same way: every
   segment begins where the one before it ends its data, compacted logs included
   (LocalLog rolls so; the cleaner rewrites only segments below the recovery point
   on disk).
4. The log end offset is the last segment's next offset; the log start offset is
   at least the first segment's base; if it is above the end (the unsynced tail
   was lost), the log restarts empty at the log start offset.

Segments below the recovery point were fsynced when they rolled and are
trusted; their indexes load lazily and are rebuilt if they fail their check.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import NamedTuple

from tidelog.core.errors import CorruptRecordError
from tidelog.records.batch import BATCH_HEADER_SIZE_BYTES, read_header
from tidelog.storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from tidelog.storage.config import LogConfig
from tidelog.storage.files import FileSystem
from tidelog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    RELATIVE_OFFSET_MAX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"   # a cleaned segment being written (docs/compaction.md)
SWAP_SUFFIX = ".swap"         # a cleaned segment committed to replace the old ones
SNAPSHOT_SUFFIX = ".snapshot" # the producer state as of an offset (Log owns them)
TXN_INDEX_SUFFIX = ".txnindex" # a segment's aborted transactions (Log owns them)
SEGMENT_FILE_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)   # the .log last: it commits a rename
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", CLEANED_SUFFIX, SWAP_SUFFIX)
# ``quorum-state`` is the Raft state the metadata partition keeps beside its log (metadata/file_log.py).
_KNOWN_FILES = {LEADER_EPOCH_CHECKPOINT, "partition.metadata", "quorum-state"}


class LoadedLog(NamedTuple):
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    # Directories whose new entries were not fsynced (``defer_new_entries``): the log's
    # own (its first segment), then its parent (the log's directory itself).
    unsynced_dirs: tuple[str, ...] = ()
    # Where each newer leader epoch starts in the recovered batches, as Kafka's
    # LogSegment.recover feeds them to the epoch cache.
    recovered_epochs: tuple[tuple[int, int], ...] = ()


def load_log(fs: FileSystem, directory: str, config: LogConfig, now_ms: int, *, recovery_point: int,
             log_start_offset: int, had_clean_shutdown: bool, defer_new_entries: bool = False,
             gaps_between_segments: bool = False) -> LoadedLog:
    """``defer_new_entries``: a new log's directory and first segment are created without
    fsyncing their directories (listed in ``unsynced_dirs``: the log's first flush
    fsyncs them, ``LocalLog.sync_entries``). Nothing in such a log is durable before
    that flush anyway; a crash before it may leave no directory, or one without the
    segment, and the log is created again, empty.

    ``gaps_between_segments``: a compacted log written before segments were rolled
    where the previous one's data ends may have legitimate gaps between them (the
    LogManager says so for a directory an earlier tidelog stopped uncleanly); only a
    corrupt batch ends such a log early."""
    name = os.path.basename(directory)
    unsynced: list[str] = []
    created = not fs.exists(directory)
    bases = _segment_bases(fs, directory, sync=not defer_new_entries)
    if created and defer_new_entries:
        unsynced.append(os.path.dirname(directory))
    segments = [_open_segment(fs, directory, config, now_ms, base) for base in bases]
    segments = _drop_below_log_start(fs, directory, segments, log_start_offset)
    if not segments:
        segments = [_create_segment(fs, directory, config, now_ms, log_start_offset, sync=not defer_new_entries)]
        if defer_new_entries:
            unsynced.insert(0, directory)
    elif had_clean_shutdown:
        _load_cleanly(fs, directory, segments)
    else:
        floor = max(0, bisect_right([s.base_offset for s in segments], recovery_point) - 1)
        _recover(fs, directory, segments, floor, contiguous=not (config.compact and gaps_between_segments))

    log_end_offset = segments[-1].next_offset
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    if log_start_offset > log_end_offset:
        logger.warning("%s: log start offset %d is above the log end offset %d (unsynced data was "
                       "lost); restarting the log empty at %d",
                       name, log_start_offset, log_end_offset, log_start_offset)
        for segment in segments:
            segment.delete()
        segments = [_create_segment(fs, directory, config, now_ms, log_start_offset)]
        log_end_offset = log_start_offset
    recovered_epochs = [entry for segment in segments for entry in segment.scanned_epochs]
    if had_clean_shutdown:
        recovery_point = log_end_offset
    else:
        recovery_point = min(max(recovery_point, log_start_offset), log_end_offset)
    segments[-1].ensure_indexes()
    # One line per partition: the log directory's summary (LogManager) is the INFO one.
    logger.debug("%s: loaded %d segments, log start offset %d, log end offset %d, recovery point %d%s",
                 name, len(segments), log_start_offset, log_end_offset, recovery_point,
                 " (clean shutdown)" if had_clean_shutdown else "")
    return LoadedLog(segments, log_start_offset, log_end_offset, recovery_point, tuple(unsynced),
                     tuple(recovered_epochs))


def _segment_bases(fs: FileSystem, directory: str, sync: bool = True) -> list[int]:
    if not fs.exists(directory):
        fs.mkdir(directory)
        if sync:
            fs.fsync_dir(os.path.dirname(directory))
    _complete_swaps(fs, directory)
    bases, index_files = set(), []
    for file_name in fs.listdir(directory):
        stem, suffix = os.path.splitext(file_name)
        if file_name.endswith(_LEFTOVER_SUFFIXES):
            logger.info("%s: removing leftover file %s", directory, file_name)
            fs.remove(os.path.join(directory, file_name))
        elif suffix == LOG_SUFFIX and _is_offset(stem):
            bases.add(int(stem))
        elif suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and _is_offset(stem):
            index_files.append((int(stem), file_name))
        elif not (suffix in (SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX) and _is_offset(stem)) and file_name not in _KNOWN_FILES:
            logger.warning("%s: ignoring unexpected file %s", directory, file_name)
    for base, file_name in index_files:
        if base not in bases:
            logger.info("%s: removing index %s, its segment is gone", directory, file_name)
            fs.remove(os.path.join(directory, file_name))
    return sorted(bases)


def _complete_swaps(fs: FileSystem, directory: str) -> None:
    """Finish each cleaner swap a crash interrupted: the ``.log.swap`` commits it."""
    names = fs.listdir(directory)
    for file_name in names:
        if not file_name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        stem = file_name[:-len(LOG_SUFFIX + SWAP_SUFFIX)]
        if not _is_offset(stem):
            continue
        base = int(stem)
        end = max(base + 1, _next_offset(fs, os.path.join(directory, file_name), base))
        replaced = []
        for name in names:
            name_stem, suffix = os.path.splitext(name)
            if suffix in SEGMENT_FILE_SUFFIXES and _is_offset(name_stem) and base <= int(name_stem) < end:
                replaced.append(name)
        logger.warning("%s: completing the swap of cleaned segment %d (offsets below %d), replacing %s",
                       directory, base, end, replaced)
        for name in replaced:
            fs.remove(os.path.join(directory, name))
        fs.fsync_dir(directory)
        for suffix in SEGMENT_FILE_SUFFIXES:
            final = os.path.join(directory, segment_file_name(base, suffix))
            if fs.exists(final + SWAP_SUFFIX):
                fs.rename(final + SWAP_SUFFIX, final)
        fs.fsync_dir(directory)


def _next_offset(fs: FileSystem, path: str, base_offset: int) -> int:
    """The offset after the last batch of a whole segment file (one header read per batch)."""
    handle = fs.open(path, create=False)
    try:
        next_offset, position, size = base_offset, 0, handle.size()
        while size - position >= BATCH_HEADER_SIZE_BYTES:
            header = read_header(handle.pread(BATCH_HEADER_SIZE_BYTES, position))
            next_offset, position = header.next_offset, position + header.size_bytes
        return next_offset
    finally:
        handle.close()


def _is_offset(stem: str) -> bool:
    return len(stem) == 20 and stem.isdigit() and stem.isascii()


def _open_segment(fs, directory, config: LogConfig, now_ms: int, base_offset: int) -> LogSegment:
    return LogSegment.open_existing(fs, directory, base_offset,
                                    index_size_max_bytes=config.segment_index_bytes,
                                    index_interval_bytes=config.index_interval_bytes, now_ms=now_ms)


def _create_segment(fs, directory, config: LogConfig, now_ms: int, base_offset: int,
                    sync: bool = True) -> LogSegment:
    segment = LogSegment.create(fs, directory, base_offset,
                                index_size_max_bytes=config.segment_index_bytes,
                                index_interval_bytes=config.index_interval_bytes, now_ms=now_ms)
    if sync:
        fs.fsync_dir(directory)
    return segment


def _drop_below_log_start(fs, directory: str, segments: list[LogSegment],
                          log_start_offset: int) -> list[LogSegment]:
    keep_from = 0
    while keep_from + 1 < len(segments) and segments[keep_from + 1].base_offset <= log_start_offset:
        keep_from += 1
    if keep_from:
        logger.info("%s: deleting %d segments below the log start offset %d",
                    directory, keep_from, log_start_offset)
        for segment in segments[:keep_from]:
            segment.delete()
        fs.fsync_dir(directory)
    return segments[keep_from:]


def _out_of_relative_reach(end: int, segment: LogSegment) -> bool:
    """Whether ``segment``'s first batch ends too far past ``end`` for a segment based
    there (``LocalLog`` starts a segment at its first batch then); False when it has no
    readable first batch."""
    try:
        first = next(segment.headers(0, segment.size_bytes), None)
    except CorruptRecordError:
        return False
    return first is not None and first[1].last_offset - end > RELATIVE_OFFSET_MAX


def _load_cleanly(fs, directory: str, segments: list[LogSegment]) -> None:
    last = segments[-1]
    try:
        next_offset, end = last.read_next_offset()
        if end == last.size_bytes:
            last.next_offset = last.data_end = next_offset
            return
        problem = f"its last whole batch ends at {end}, the file at {last.size_bytes}"
    except CorruptRecordError as e:
        problem = str(e)
    logger.warning("%s: clean shutdown, but the last segment is not whole (%s); recovering it",
                   directory, problem)
    _recover(fs, directory, segments, len(segments) - 1)


def _recover(fs, directory: str, segments: list[LogSegment], first: int, contiguous: bool = False) -> None:
    """Recover ``segments[first:]``; cut everything after the first bad batch — and,
    where segments are ``contiguous`` (each begins where the one before ends its data:
    ``LocalLog`` rolls so, in compacted logs too), after the first segment that ends
    short of the next one's base offset: a crash kept a later file's pages (written
    back by the kernel, or a torn write) and lost the earlier one's (simulator seed
    44352: segment 2054 came back empty, 2064 with a torn batch, and the log ended at
    2064 without 2054..2063). The log cleaner rewrites only segments below the recovery
    point on disk, where none of this is checked; a segment that begins past the end
    before it because its first batch could not be indexed there (32-bit relative
    offsets) is no hole either."""
    cut_bytes = 0
    for i in range(first, len(segments)):
        later = segments[i + 1:]
        cut_bytes = segments[i].recover(later[0].base_offset if later else None)
        short = (contiguous and bool(later) and segments[i].next_offset < later[0].base_offset
                 and not _out_of_relative_reach(segments[i].next_offset, later[0]))
        if (cut_bytes or short) and later:
            logger.error("%s: segment %d %s at offset %d, in the middle of the log; deleting the %d "
                         "later segments (offsets %d..%d are dropped and must be fetched again)",
                         directory, segments[i].base_offset, "is corrupt" if cut_bytes else "ends short",
                         segments[i].next_offset, len(later), later[0].base_offset, later[-1].base_offset)
            for segment in later:
                segment.delete()
            fs.fsync_dir(directory)
            del segments[i + 1:]
            break
    logger.log(logging.INFO if cut_bytes else logging.DEBUG,
               "%s: recovered %d segments from base offset %d, next offset %d, %d bytes cut",
               directory, len(segments) - first, segments[first].base_offset, segments[-1].next_offset, cut_bytes)
