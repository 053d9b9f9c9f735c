"""The stream reader's driver-side decisions, with a fake broker (no Spark session)."""

import pickle

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tidelog.spark.fetcher import DataLossError
from tidelog.spark.options import source_options
from tidelog.spark.source import OffsetRangePartition, TidelogStreamReader
from tidelog.spark.wire import EARLIEST, LATEST


class FakeOffsets:
    def __init__(self, earliest, latest):
        self.earliest, self.latest = earliest, latest

    def partitions(self, strict):
        return sorted(self.latest)

    def offsets(self, tps, spec):
        source = self.earliest if spec == EARLIEST else self.latest
        assert spec in (EARLIEST, LATEST)
        return {tp: source[tp] for tp in tps}

    def earliest_or_none(self, tps):
        return {tp: self.earliest.get(tp) for tp in tps}

    def resolve(self, spec, tps, what):
        return self.offsets(tps, EARLIEST if spec.kind == "earliest" else LATEST)


def reader(fake, **options):
    r = TidelogStreamReader(source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options},
                                           streaming=True))
    r._broker = fake
    return r


def test_max_offsets_per_trigger_caps_each_trigger_and_new_partitions_start_at_earliest():
    fake = FakeOffsets({("t", 0): 0, ("t", 1): 0}, {("t", 0): 100})
    r = reader(fake, maxOffsetsPerTrigger="30", startingOffsets="earliest")
    assert r.getDefaultReadLimit() == ReadMaxRows(30)
    start = r.initialOffset()
    assert start == {"t": {"0": 0}}
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"t": {"0": 30}}
    fake.latest[("t", 1)] = 60                       # a partition appears
    end2 = r.latestOffset(end, ReadMaxRows(30))
    assert end2 == {"t": {"0": 46, "1": 14}}         # 70 and 60 behind: 16.15 and 13.85 of 30
    assert r.partitions(end, end2) == [OffsetRangePartition("t", 0, 30, 46), OffsetRangePartition("t", 1, 0, 14)]
    assert r.reportLatestOffset() == {"t": {"0": 100, "1": 60}}


def test_available_now_never_goes_past_the_target():
    fake = FakeOffsets({("t", 0): 0}, {("t", 0): 10})
    r = reader(fake, startingOffsets="earliest")
    assert r.getDefaultReadLimit() == ReadAllAvailable()
    r.prepareForTriggerAvailableNow()
    fake.latest[("t", 0)] = 500                      # arrives after the query started
    assert r.latestOffset(r.initialOffset(), ReadAllAvailable()) == {"t": {"0": 10}}


def test_min_offsets_per_trigger_waits_for_data_or_the_max_delay(monkeypatch):
    now = [1_000.0]
    monkeypatch.setattr("tidelog.spark.source.time.time", lambda: now[0])
    fake = FakeOffsets({("t", 0): 0}, {("t", 0): 3})
    r = reader(fake, minOffsetsPerTrigger="5", maxTriggerDelay="10s", startingOffsets="earliest")
    start = r.initialOffset()
    assert r.latestOffset(start, ReadAllAvailable()) == start       # 3 < 5: wait
    fake.latest[("t", 0)] = 6
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 6}}
    fake.latest[("t", 0)] = 7
    later = {"t": {"0": 6}}
    assert r.latestOffset(later, ReadAllAvailable()) == later       # 1 new offset: wait
    now[0] += 11                                                    # ...but not longer than 10 s
    assert r.latestOffset(later, ReadAllAvailable()) == {"t": {"0": 7}}


def test_data_loss_fails_or_is_skipped_with_a_warning(caplog):
    fake = FakeOffsets({("t", 0): 40}, {("t", 0): 50})
    with pytest.raises(DataLossError, match=r"offsets \[10, 40\) of t-0 were deleted.*failOnDataLoss to false"):
        reader(fake).partitions({"t": {"0": 10}}, {"t": {"0": 50}})
    lenient = reader(fake, failOnDataLoss="false")
    assert lenient.partitions({"t": {"0": 10}}, {"t": {"0": 50}}) == [OffsetRangePartition("t", 0, 40, 50)]
    assert "data loss (failOnDataLoss=false, continuing)" in caplog.text
    assert lenient.partitions({"t": {"0": 10}, "gone": {"0": 3}}, {"t": {"0": 50}}) == \
        [OffsetRangePartition("t", 0, 40, 50)]
    assert "gone-0 is gone" in caplog.text


def test_executor_copies_carry_no_connection():
    r = reader(FakeOffsets({}, {}))
    copy = pickle.loads(pickle.dumps(r))
    assert copy._broker is None and copy.options == r.options
