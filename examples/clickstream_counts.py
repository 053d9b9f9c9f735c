"""Per-minute page-view counts from the clickstream, with Structured Streaming.

Reads the ``clicks`` topic with the ``tidelog`` source, parses the JSON events,
and counts views per page in one-minute event-time windows. A 2-minute
watermark bounds the state: a window's count is final, and emitted once, when
the watermark passes its end (append mode), so late clicks up to 2 minutes are
still counted. The same counts go to two sinks, each a streaming query with its
own checkpoint under ``--state`` (default: under the system's temporary
directory, ``tidelog-examples/``; the paths are printed):

* the ``page-counts`` topic (key: page; value: JSON), through the tidelog sink,
  whose writes are idempotent when a micro-batch is replayed;
* Parquet files under ``--output``.

    python examples/clickstream_counts.py --bootstrap 127.0.0.1:9092 --output /tmp/page-counts

By default it processes what is in the topic now (Trigger.AvailableNow) and
exits; ``--follow`` keeps running and picks up new clicks every 5 seconds.
Restarting it continues from the checkpoints.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

EVENT = StructType([StructField("user", StringType()), StructField("page", StringType()),
                    StructField("event_time_ms", LongType())])


def page_counts(spark, bootstrap: str, topic: str, max_offsets_per_trigger: int | None = None):
    clicks = (spark.readStream.format("tidelog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        clicks = clicks.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    events = (clicks.load()
              .select(F.from_json(F.col("value").cast("string"), EVENT).alias("e"))
              .select("e.page", F.timestamp_millis("e.event_time_ms").alias("event_time")))
    return (events.withWatermark("event_time", "2 minutes")
            .groupBy(F.window("event_time", "1 minute"), "page").count()
            .select(F.col("window.start").alias("minute"), "page", "count"))


def start(spark, bootstrap: str, topic: str, out_topic: str, output: str, state: str, follow: bool,
          max_offsets_per_trigger: int | None = None) -> list:
    """Start both streaming queries; returns them."""
    counts = page_counts(spark, bootstrap, topic, max_offsets_per_trigger)
    trigger = {"processingTime": "5 seconds"} if follow else {"availableNow": True}
    to_topic = (counts.select(F.col("page").alias("key"),
                              F.to_json(F.struct("minute", "page", "count")).alias("value"))
                .writeStream.format("tidelog").outputMode("append")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
                .option("checkpointLocation", os.path.join(state, "to-topic"))
                .trigger(**trigger).start())
    to_parquet = (counts.writeStream.format("parquet").outputMode("append")
                  .option("path", output).option("checkpointLocation", os.path.join(state, "to-parquet"))
                  .trigger(**trigger).start())
    return [to_topic, to_parquet]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--out-topic", default="page-counts")
    examples_dir = os.path.join(tempfile.gettempdir(), "tidelog-examples")
    parser.add_argument("--output", default=os.path.join(examples_dir, "page-counts.parquet"),
                        help=f"Parquet directory (default under {examples_dir})")
    parser.add_argument("--state", default=os.path.join(examples_dir, "page-counts.checkpoints"),
                        help=f"checkpoint directory (default under {examples_dir})")
    parser.add_argument("--follow", action="store_true", help="keep running (5 s triggers)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    args = parser.parse_args(argv)

    print(f"checkpoints in {os.path.abspath(args.state)}, Parquet in {os.path.abspath(args.output)}", flush=True)
    from tidelog.spark.session import local_session
    spark = local_session("clickstream-counts")
    queries = start(spark, args.bootstrap, args.topic, args.out_topic, args.output, args.state, args.follow,
                    args.max_offsets_per_trigger)
    try:
        for query in queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        for query in queries:
            query.stop()
    result = spark.read.parquet(args.output) if os.path.exists(args.output) else None
    if result is not None:
        result.orderBy("minute", F.desc("count")).show(20, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
