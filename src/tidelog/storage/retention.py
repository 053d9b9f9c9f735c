"""Which segments retention may delete (Kafka's ``UnifiedLog.deleteOldSegments``).

Theory of operation. ``Log.delete_old_segments`` and
``Log.maybe_increment_log_start_offset`` decide with these functions and have
``LocalLog.delete_oldest_segments`` carry the decision out. A rule is a predicate
over ``(segment, following segment or None)``, Kafka's three breaches:

* ``below_log_start_offset``: the whole segment is below the log start offset
  (``deleteLogStartOffsetBreachedSegments``);
* ``retention_ms_breached``: the segment's largest timestamp is older than
  ``retention.ms`` (``deleteRetentionMsBreachedSegments``);
* ``retention_bytes_breached``: the log is above ``retention.bytes`` by at least
  the segment's size, oldest first (``deleteRetentionSizeBreachedSegments``).

``deletable_segment_count`` applies one (Kafka's ``deletableSegments``): the
oldest segments while the rule holds, never one holding offsets at or above the
high watermark, and the active segment only when it is not empty.
"""

from __future__ import annotations

from typing import Callable

from tidelog.storage.segment import LogSegment

Rule = Callable[[LogSegment, "LogSegment | None"], bool]


def deletable_segment_count(segments: list[LogSegment], log_end_offset: int, high_watermark: int,
                            rule: Rule) -> int:
    """How many of the oldest ``segments`` retention may delete under ``rule``."""
    count = 0
    while count < len(segments):
        segment = segments[count]
        following = segments[count + 1] if count + 1 < len(segments) else None
        upper_bound = following.base_offset if following is not None else log_end_offset
        if following is None and segment.size_bytes == 0:
            break
        if high_watermark < upper_bound or not rule(segment, following):
            break
        count += 1
    return count


def below_log_start_offset(log_start_offset: int) -> Rule:
    return lambda segment, following: following is not None and following.base_offset <= log_start_offset


def retention_ms_breached(retention_ms: int, now_ms: int) -> Rule:
    return lambda segment, following: now_ms - segment.largest_timestamp > retention_ms


def retention_bytes_breached(retention_bytes: int, size_bytes: int) -> Rule:
    """The oldest segments while the log stays at or above ``retention.bytes`` without them."""
    excess = size_bytes - retention_bytes

    def breached(segment: LogSegment, following: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size_bytes < 0:
            return False
        excess -= segment.size_bytes
        return True

    return breached
