"""Read a topic's whole history into a DataFrame (a batch job).

Reads every record from the log start to the high watermark of every
partition, shows the schema (Spark's Kafka source schema), the records per
partition with their offset range, and the first rows with key and value as
text. ``--json`` also parses JSON values and infers their schema.

    python examples/topic_history.py clicks --bootstrap 127.0.0.1:9092 --json
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from pyspark.sql import functions as F  # noqa: E402


def history(spark, bootstrap: str, topic: str):
    """Every committed record of ``topic`` (startingOffsets earliest, endingOffsets latest)."""
    return (spark.read.format("tidelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("includeHeaders", "true")
            .load())


def per_partition(df):
    return (df.groupBy("partition")
            .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                 F.max("offset").alias("last_offset"), F.min("timestamp").alias("oldest"),
                 F.max("timestamp").alias("newest"))
            .orderBy("partition"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--json", action="store_true", help="parse values as JSON")
    parser.add_argument("--rows", type=int, default=10)
    args = parser.parse_args(argv)

    from tidelog.spark.session import local_session
    spark = local_session("topic-history")
    df = history(spark, args.bootstrap, args.topic).cache()
    df.printSchema()
    per_partition(df).show(truncate=False)
    df.select("partition", "offset", "timestamp", F.col("key").cast("string").alias("key"),
              F.col("value").cast("string").alias("value")).orderBy("partition", "offset") \
        .show(args.rows, truncate=80)
    if args.json:
        values = df.select(F.col("value").cast("string").alias("json"))
        schema = spark.read.json(values.rdd.map(lambda row: row.json)).schema
        values.select(F.from_json("json", schema).alias("v")).select("v.*").show(args.rows, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
