"""Offset arithmetic for the source: pure functions, no Spark, no network.

Theory of operation. The driver side of the source decides, per trigger or per
batch query, which ``[start, end)`` offset range of each topic-partition to read.
Everything here takes plain dicts ``{(topic, partition): offset}`` and returns
what to do, so each rule can be tested by itself:

* ``to_json``/``from_json``: the checkpoint shape, Spark's ``startingOffsets``
  JSON (``{"topic": {"0": 7}}``; partition keys are strings because Spark
  round-trips offsets through JSON).
* ``split_by_lag``: ``maxOffsetsPerTrigger`` divided across partitions in
  proportion to their lag, summing to exactly the limit.
* ``plan_ranges``: the ranges of one batch, and the data-loss findings
  (partitions deleted, offsets deleted by retention/DeleteRecords, offsets that
  went backwards) that ``failOnDataLoss`` turns into a failure or a warning.
* ``split_ranges``: ``minPartitions``, splitting big ranges into more tasks.

Invariant of every plan: ranges are non-empty, start-inclusive, end-exclusive,
and sorted by (topic, partition, start), so replaying a batch with the same
offsets gives the same Spark partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

TopicPartition = tuple[str, int]


class Range(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(offsets: dict) -> dict[TopicPartition, int]:
    return {(str(topic), int(partition)): int(offset)
            for topic, partitions in (offsets or {}).items() for partition, offset in partitions.items()}


def split_by_lag(lag: dict[TopicPartition, int], limit: int) -> dict[TopicPartition, int]:
    """How many offsets each partition may advance so that the total is ``limit``.

    Shares are proportional to lag (largest remainder goes first, ties by
    topic-partition), never more than a partition's lag.
    """
    lag = {tp: n for tp, n in lag.items() if n > 0}
    total = sum(lag.values())
    if total <= limit:
        return dict(lag)
    take = {tp: limit * n // total for tp, n in lag.items()}
    remainder = limit - sum(take.values())
    for tp in sorted(lag, key=lambda tp: (-(limit * lag[tp] % total), tp))[:remainder]:
        take[tp] += 1
    assert sum(take.values()) == limit and all(take[tp] <= lag[tp] for tp in lag)
    return take


def rate_limit(start: dict[TopicPartition, int], latest: dict[TopicPartition, int],
               limit: int | None, new_partition_start: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """End offsets no further than ``latest`` and at most ``limit`` offsets past ``start``.

    A partition missing from ``start`` is new; it begins at
    ``new_partition_start`` (its log start offset).
    """
    if limit is None:
        return dict(latest)
    begin = {tp: start.get(tp, new_partition_start.get(tp, 0)) for tp in latest}
    take = split_by_lag({tp: latest[tp] - begin[tp] for tp in latest}, limit)
    return {tp: begin[tp] + take[tp] if tp in take else latest[tp] for tp in latest}


@dataclass
class Plan:
    ranges: list[Range] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)   # data-loss findings, one sentence each


def plan_ranges(start: dict[TopicPartition, int], end: dict[TopicPartition, int],
                earliest: dict[TopicPartition, int | None]) -> Plan:
    """The ranges to read between two offsets and what data was lost on the way.

    ``earliest`` holds each end partition's log start offset (None: it no
    longer exists). Where data was lost, the plan reads what is still there,
    which is what ``failOnDataLoss=false`` asks for.
    """
    plan = Plan()
    for tp in sorted(set(start) - set(end)):
        plan.losses.append(f"{_name(tp)} is gone (its topic was deleted); records from offset "
                           f"{start[tp]} on were not read")
    for tp in sorted(end):
        stop = end[tp]
        first = earliest.get(tp)
        if first is None:
            plan.losses.append(f"{_name(tp)} is gone (its topic was deleted)")
            continue
        begin = start.get(tp)
        if begin is None:
            if first != 0:
                plan.losses.append(f"new partition {_name(tp)} starts at offset {first}, not 0: "
                                   f"offsets [0, {first}) were deleted before they could be read")
            begin = first
        elif begin < first:
            plan.losses.append(f"offsets [{begin}, {first}) of {_name(tp)} were deleted (retention or "
                               "DeleteRecords) before they were read")
            begin = first
        if stop < start.get(tp, begin):
            plan.losses.append(f"offsets of {_name(tp)} went backwards: the high watermark is now {stop}, "
                               f"below the offset {start[tp]} already read (unclean leader election or a "
                               "recreated topic); records may have been lost")
            continue
        if stop > begin:
            plan.ranges.append(Range(tp[0], tp[1], begin, stop))
    return plan


def split_ranges(ranges: list[Range], min_partitions: int | None) -> list[Range]:
    """Split ranges, in proportion to size, into at least about ``min_partitions`` pieces."""
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[Range] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        step, extra = divmod(r.size, parts)
        begin = r.start
        for i in range(parts):
            stop = begin + step + (1 if i < extra else 0)
            out.append(Range(r.topic, r.partition, begin, stop))
            begin = stop
        assert begin == r.end
    return out


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"
