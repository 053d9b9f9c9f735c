"""The example pipelines in examples/ run and compute the right numbers."""

import importlib.util
import json
import os
from collections import Counter

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
START_MS = 1_700_000_040_000 - 1_700_000_040_000 % 60_000   # on a minute boundary


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_page_counts(spark, bootstrap: str, events: list[dict], output: str, out_topic: str = "page-counts"
                      ) -> dict:
    """The counts job's output is exactly once: each (minute, page) window is in the
    topic once, with the count of the clicks in it, and Parquet holds the same.
    Returns the counts ({(minute ms, page): count})."""
    history = load("topic_history")
    expected = Counter(((e["event_time_ms"] // 60_000) * 60_000, e["page"]) for e in events)
    emitted = [json.loads(r.value) for r in history.history(spark, bootstrap, out_topic).collect()]
    from_topic = {(_ms(e["minute"]), e["page"]): e["count"] for e in emitted}
    assert len(from_topic) == len(emitted), "each window is emitted once"
    minutes = {minute for minute, _ in from_topic}
    assert from_topic == {window: expected[window] for window in expected if window[0] in minutes}
    parquet = {(r.ms, r.page): r["count"] for r in spark.read.parquet(output)
               .selectExpr("unix_millis(minute) AS ms", "page", "count").collect()}
    assert parquet == from_topic
    return from_topic


def test_clickstream_counts_are_exact_per_minute_and_page_in_the_topic_and_in_parquet(
        spark, broker, admin, tmp_path):
    generator, counts, history = load("clickstream_generator"), load("clickstream_counts"), load("topic_history")
    # The clicks are from 2023 (fixed event times): keep them past the 7-day default retention.
    admin.create("clicks", partitions=3, retention_ms="-1")
    events = generator.generate(broker.bootstrap, "clicks", count=1500, rate=0, seed=5, start_ms=START_MS,
                                spacing_ms=400)   # 10 minutes of event time
    assert history.history(spark, broker.bootstrap, "clicks").count() == 1500

    queries = counts.start(spark, broker.bootstrap, "clicks", "page-counts", str(tmp_path / "out"),
                           str(tmp_path / "state"), follow=False, max_offsets_per_trigger=500)
    for query in queries:
        query.awaitTermination(180)
        assert query.exception() is None
    emitted = check_page_counts(spark, broker.bootstrap, events, str(tmp_path / "out"))
    minutes = sorted({minute for minute, _ in emitted})
    assert minutes[0] == START_MS - 60_000 and len(minutes) >= 6   # late clicks from the minute before


def _ms(iso: str) -> int:
    import datetime
    return int(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
