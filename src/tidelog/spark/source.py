"""The ``tidelog`` source: Spark batch and streaming reads of tidelog topics.

Theory of operation. Spark calls a Python data source from three kinds of
process (docs/spark.md, "How it works"), and each piece lives where Spark calls it:

* planning, on the driver side: ``TidelogBatchReader.partitions`` and the
  long-lived ``TidelogStreamReader`` (``initialOffset``, ``latestOffset``,
  ``partitions``) ask the broker for partitions (Metadata) and offsets
  (ListOffsets) through ``_Offsets`` and turn them into offset ranges with the
  pure rules of ``offsets``;
* reading, on executors: ``read(partition)`` fetches one range from the
  partition's leader (``fetcher.read_range``) and yields Arrow batches.

Offsets are Spark's ``startingOffsets`` JSON, ``{"topic": {"0": 7}}``, and that
is what Spark writes into the checkpoint. "Latest" is the high watermark (the
last stable offset under read_committed), so only committed records are read.
Ranges are start-inclusive, end-exclusive. Nothing is stored in the broker:
there are no consumer groups, progress lives only in the Spark checkpoint.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidelog.spark import offsets as rules
from tidelog.spark.fetcher import data_loss, read_range
from tidelog.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions
from tidelog.spark.wire import Cluster

logger = logging.getLogger("tidelog.spark")
TopicPartition = tuple[str, int]

HEADERS_SPARK_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (plus ``headers`` with includeHeaders)."""
    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_SPARK_TYPE))
    return StructType(fields)


@dataclass
class OffsetRangePartition(InputPartition):
    """One Spark task: records ``start <= offset < end`` of ``topic``-``partition``."""

    topic: str
    partition: int
    start: int
    end: int


class _Offsets:
    """Driver-side questions to the broker: which partitions, which offsets."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self.cluster = Cluster(options.read.client)

    def close(self) -> None:
        self.cluster.close()

    def partitions(self, strict: bool) -> list[TopicPartition]:
        """The subscribed partitions that exist now (``strict``: missing ones are an error)."""
        sub = self.options.subscription
        c = self.cluster
        if sub.kind == "subscribePattern":
            topics = [t for t in c.retrying("Metadata", c.topic_names) if sub.matches(t)]
        elif sub.kind == "subscribe":
            topics = list(sub.topics)
        else:
            topics = sorted({t for t, _ in sub.partitions})
        found = c.retrying("Metadata", lambda: c.partitions_of(topics)) if topics else {}
        missing = [t for t in topics if found.get(t) is None]
        if missing and (strict or sub.kind == "assign"):
            raise OptionError(f"topic(s) {', '.join(missing)} do not exist")
        existing = {(t, p) for t, ps in found.items() if ps is not None for p in ps}
        if sub.kind == "assign":
            absent = [tp for tp in sub.partitions if tp not in existing]
            if absent:
                raise OptionError("assigned partition(s) do not exist: " + ", ".join(f"{t}-{p}" for t, p in absent))
            return list(sub.partitions)
        return sorted(existing)

    def offsets(self, tps, spec: int) -> dict[TopicPartition, int]:
        return self.cluster.list_offsets({tp: spec for tp in tps}, self.options.read.isolation_level)

    def earliest_or_none(self, tps) -> dict[TopicPartition, int | None]:
        """Log start offsets; None for partitions that no longer exist."""
        topics = sorted({t for t, _ in tps})
        c = self.cluster
        found = c.retrying("Metadata", lambda: c.partitions_of(topics)) if topics else {}
        alive = [tp for tp in tps if found.get(tp[0]) is not None and tp[1] in found[tp[0]]]
        earliest = self.offsets(alive, EARLIEST)
        return {tp: earliest.get(tp) for tp in tps}

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], what: str) -> dict[TopicPartition, int]:
        """Turn startingOffsets/endingOffsets (or their timestamp forms) into offsets."""
        if spec.kind == "earliest":
            return self.offsets(tps, EARLIEST)
        if spec.kind == "latest":
            return self.offsets(tps, LATEST)
        given = spec.as_dict()
        if spec.kind == "timestamp":
            given = {tp: spec.timestamp_ms for tp in tps}
        if set(given) != set(tps):
            raise OptionError(
                f"{what} must name every subscribed partition (use -2 for earliest, -1 for latest); "
                f"given {_names(given)}, subscribed {_names(tps)}")
        if spec.kind == "offsets":
            out = dict(given)
            for special in (EARLIEST, LATEST):
                wanted = [tp for tp, v in given.items() if v == special]
                out.update(self.offsets(wanted, special))
            bad = {tp: v for tp, v in out.items() if v < 0}
            if bad:
                raise OptionError(f"{what} has invalid offsets {_names(bad)}: use -2, -1 or an offset >= 0")
            return out
        found = self.cluster.list_offsets(given, self.options.read.isolation_level)
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing:
            if spec.not_found == "error" and what.startswith("starting"):
                raise OptionError(f"{what}: no record at or after the timestamp in {_names(missing)} "
                                  "(set startingOffsetsByTimestampStrategy=latest to start at the latest offset)")
            found.update(self.offsets(missing, LATEST))
        return found


def _names(tps) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def _report(plan: rules.Plan, fail_on_data_loss: bool) -> None:
    for finding in plan.losses:
        data_loss(finding, fail_on_data_loss)


def _read(options: SourceOptions, partition) -> Iterator:
    if not isinstance(partition, OffsetRangePartition):
        return iter(())   # Spark's placeholder when there is nothing to read
    return read_range(options.read, partition.topic, partition.partition, partition.start, partition.end)


def _to_partitions(ranges: list[rules.Range]) -> list[OffsetRangePartition]:
    return [OffsetRangePartition(r.topic, r.partition, r.start, r.end) for r in ranges]


class TidelogBatchReader(DataSourceReader):
    """``spark.read.format("tidelog")``: startingOffsets (default earliest) to
    endingOffsets (default latest, the high watermark at planning time)."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[OffsetRangePartition]:
        broker = _Offsets(self.options)
        try:
            tps = broker.partitions(strict=True)
            start = broker.resolve(self.options.starting, tps, "startingOffsets")
            end = broker.resolve(self.options.ending, tps, "endingOffsets")
            latest = broker.offsets(tps, LATEST)
            for tp in tps:
                if end[tp] > latest[tp]:
                    raise OptionError(f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is beyond its high "
                                      f"watermark {latest[tp]}")
                if start[tp] > end[tp]:
                    raise OptionError(f"startingOffsets {start[tp]} of {tp[0]}-{tp[1]} is after its "
                                      f"endingOffsets {end[tp]}")
            plan = rules.plan_ranges(start, end, broker.earliest_or_none(tps))
        finally:
            broker.close()
        _report(plan, self.options.read.fail_on_data_loss)
        return _to_partitions(rules.split_ranges(plan.ranges, self.options.min_partitions))

    def read(self, partition: OffsetRangePartition):
        return _read(self.options, partition)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("tidelog")``.

    One instance lives in Spark's streaming source runner for the whole query
    (it keeps a broker connection and the AvailableNow target); executors get
    fresh, unconnected copies for ``read``.
    """

    def __init__(self, options: SourceOptions):
        self.options = options
        self._broker: _Offsets | None = None
        self._initial: dict | None = None
        self._target: dict[TopicPartition, int] | None = None   # Trigger.AvailableNow: read up to here
        self._latest: dict[TopicPartition, int] | None = None
        self._delay_since_ms: float | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_broker"] = None
        return state

    @property
    def broker(self) -> _Offsets:
        if self._broker is None:
            self._broker = _Offsets(self.options)
        return self._broker

    def initialOffset(self) -> dict:
        # Spark asks more than once at query start; "latest" must not move in between.
        if self._initial is None:
            tps = self.broker.partitions(strict=False)
            self._initial = rules.to_json(self.broker.resolve(self.options.starting, tps, "startingOffsets"))
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._snapshot()
        logger.info("tidelog source: Trigger.AvailableNow reads up to %s", rules.to_json(self._target))

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else rules.to_json(self._latest)

    def _snapshot(self) -> dict[TopicPartition, int]:
        """High watermarks of every subscribed partition, discovering new ones."""
        tps = self.broker.partitions(strict=False)
        return self.broker.offsets(tps, LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = rules.from_json(start)
        latest = dict(self._target) if self._target is not None else self._snapshot()
        self._latest = latest
        new = [tp for tp in latest if tp not in begin]
        first = self.broker.offsets(new, EARLIEST) if new else {}
        if self._waits_for_more(begin, latest, first):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = rules.rate_limit(begin, latest, max_rows, first)
        if end != begin:
            self._delay_since_ms = None
        return rules.to_json(end)

    def _waits_for_more(self, begin, latest, first) -> bool:
        """minOffsetsPerTrigger: wait for that many new offsets, at most maxTriggerDelay."""
        minimum = self.options.min_offsets_per_trigger
        if not minimum or self._target is not None:   # AvailableNow drains whatever there is
            return False
        available = sum(max(0, latest[tp] - begin.get(tp, first.get(tp, 0))) for tp in latest)
        now_ms = time.time() * 1000
        if self._delay_since_ms is None:
            self._delay_since_ms = now_ms
        return available < minimum and now_ms - self._delay_since_ms < self.options.max_trigger_delay_ms

    def partitions(self, start: dict, end: dict) -> list[OffsetRangePartition]:
        begin, stop = rules.from_json(start), rules.from_json(end)
        plan = rules.plan_ranges(begin, stop, self.broker.earliest_or_none(sorted(stop)))
        _report(plan, self.options.read.fail_on_data_loss)
        return _to_partitions(rules.split_ranges(plan.ranges, self.options.min_partitions))

    def read(self, partition: OffsetRangePartition):
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the broker."""

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None
