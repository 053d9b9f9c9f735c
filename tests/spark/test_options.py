"""Option parsing: Spark's Kafka option names, checked before anything runs."""

import pytest

from tidelog.spark.options import (
    READ_COMMITTED,
    OptionError,
    parse_duration_ms,
    sink_options,
    source_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}


def test_defaults_follow_spark():
    stream = source_options(BASE, streaming=True)
    assert stream.starting.kind == "latest" and stream.read.fail_on_data_loss
    assert stream.subscription.topics == ("a", "b")
    batch = source_options(BASE, streaming=False)
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert not batch.read.include_headers and batch.max_offsets_per_trigger is None


def test_keys_arrive_lower_cased_from_spark_and_are_still_understood():
    options = source_options({k.lower(): v for k, v in {
        **BASE, "startingOffsets": '{"a": {"0": 5, "1": -2}}', "maxOffsetsPerTrigger": "10",
        "minOffsetsPerTrigger": "3", "maxTriggerDelay": "30s", "failOnDataLoss": "false",
        "includeHeaders": "true", "minPartitions": "4", "kafka.isolation.level": "read_committed"}.items()},
        streaming=True)
    assert options.starting.as_dict() == {("a", 0): 5, ("a", 1): -2}
    assert (options.max_offsets_per_trigger, options.min_offsets_per_trigger) == (10, 3)
    assert options.max_trigger_delay_ms == 30_000 and options.min_partitions == 4
    assert not options.read.fail_on_data_loss and options.read.include_headers
    assert options.read.isolation_level == READ_COMMITTED


def test_timestamp_options_take_precedence_over_offsets():
    options = source_options({**BASE, "startingOffsets": "earliest", "startingTimestamp": "1700000000000",
                              "startingOffsetsByTimestampStrategy": "latest"}, streaming=True)
    assert options.starting.kind == "timestamp" and options.starting.timestamp_ms == 1_700_000_000_000
    assert options.starting.not_found == "latest"
    by_partition = source_options({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": 17}}'}, streaming=True)
    assert by_partition.starting.kind == "timestamps" and by_partition.starting.as_dict() == {("a", 0): 17}


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a"}, "kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": "h:1"}, "exactly one of"),
    ({**BASE, "assign": '{"a": [0]}'}, "exactly one of"),
    ({**BASE, "startingOffsets": "{not json"}, "startingOffsets must be"),
    ({**BASE, "startingOffsets": "latest"}, "may not be latest"),
    ({**BASE, "endingOffsets": '{"a": {"0": -2}}'}, "may not be earliest"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, "use startingOffsets"),
    ({**BASE, "kafka.security.protocol": "SASL_SSL"}, "SASL needs a user"),
    ({**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"}, "only PEM"),
    ({**BASE, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI",
      "kafka.sasl.username": "u", "kafka.sasl.password": "p"}, "not supported"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, "at least 1"),
    ({**BASE, "startingOffsets": '{"a": {"0": -7}}'}, r"-7 for a-0 is neither at least 0 nor -2 \(earliest\)"),
    ({**BASE, "startingOffsets": '{"a": {"-1": 5}}'}, "-1 is not a partition of a"),
    ({**BASE, "endingOffsets": '{"a": {"0": 9223372036854775808}}'}, "neither at least 0"),
    ({**BASE, "startingOffsetsByTimestamp": '{"a": {"0": -1}}'}, "-1 for a-0 is neither at least 0$"),
    ({**BASE, "kafka.max.partition.fetch.bytes": "99999999999"}, "at most 134217728"),
    ({**BASE, "kafka.fetch.max.wait.ms": "2147483648"}, "fetch.max.wait.ms must be at most 2147483647"),
    ({**BASE, "kafka.request.timeout.ms": str(1 << 40)}, "request.timeout.ms must be at most"),
    ({**BASE, "minPartitions": str(1 << 31)}, "minPartitions must be at most"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [0, -3]}'}, "assign: -3 is not a partition of a"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "not a valid regular expression"),
])
def test_bad_batch_options_are_refused_with_the_option_named(options, message):
    with pytest.raises(OptionError, match=message):
        source_options(options, streaming=False)


def test_streams_have_no_end_and_patterns_skip_internal_topics():
    with pytest.raises(OptionError, match="batch queries only"):
        source_options({**BASE, "endingOffsets": "latest"}, streaming=True)
    pattern = source_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev.*"}, streaming=True)
    assert pattern.subscription.matches("events") and not pattern.subscription.matches("xevents")
    everything = source_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": ".*"}, streaming=True)
    assert not everything.subscription.matches("__consumer_offsets")
    assert not everything.subscription.matches("_tidelog-spark-sink-1234")


def test_sink_defaults_to_acks_all_and_idempotent_streams():
    stream = sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t"}, streaming=True)
    assert stream.acks == -1 and stream.idempotent and stream.topic == "t"
    batch = sink_options({"kafka.bootstrap.servers": "h:1", "kafka.acks": "1", "idempotentWrites": "true"},
                         streaming=False)
    assert batch.acks == 1 and not batch.idempotent and batch.topic is None
    with pytest.raises(OptionError, match="kafka.compression.type"):
        sink_options({"kafka.bootstrap.servers": "h:1", "kafka.compression.type": "brotli"}, streaming=True)


def test_durations():
    assert parse_duration_ms("15m") == 900_000
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("2h") == 7_200_000
    assert parse_duration_ms("42") == 42
    with pytest.raises(OptionError):
        parse_duration_ms("soon")
