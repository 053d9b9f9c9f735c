"""Topic-level ``compression.type`` as Kafka's LogValidator applies it: batches in
another codec are recompressed on the leader (offsets, timestamps, keys, headers
and producer fields kept); ``producer`` keeps the producer's codec."""

import pytest

from tidelog.core.errors import InvalidConfigError
from tidelog.records.batch import SimpleRecord, build_batch, iter_batches, iter_records
from tidelog.records.compression import Compression
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

from .conftest import T0_MS

RECORDS = [SimpleRecord(f"value-{i}".encode() * 20, f"k{i}".encode(), [("h", b"x")], T0_MS + i) for i in range(5)]


def stored_codecs(log) -> list[int]:
    codecs = []
    for segment in log.segments:
        data = segment.log.pread(segment.size_bytes, 0)
        codecs += [header.compression for _, header in iter_batches(data)]
    return codecs


@pytest.mark.parametrize("topic_codec, sent, stored", [
    ("producer", Compression.GZIP, Compression.GZIP),
    ("zstd", Compression.NONE, Compression.ZSTD),
    ("lz4", Compression.GZIP, Compression.LZ4),
    ("uncompressed", Compression.SNAPPY, Compression.NONE),
    ("snappy", Compression.SNAPPY, Compression.SNAPPY),
])
def test_batches_are_stored_in_the_topics_codec(log_dir, clock, fs, topic_codec, sent, stored):
    log = Log.open(log_dir, LogConfig(compression_type=topic_codec), clock, fs)
    batch = build_batch(RECORDS, compression=sent, producer_id=9, producer_epoch=2, base_sequence=0)
    info = log.append_as_leader(build_batch([b"first"], timestamp_ms=T0_MS), 0)
    info = log.append_as_leader(batch, 0)
    assert (info.first_offset, info.last_offset) == (1, 5)
    assert stored_codecs(log) == [stored if topic_codec != "producer" else Compression.NONE, stored]
    data = log.read(1, 1 << 20).records.read_bytes()
    records = [r for position, _ in iter_batches(data) for r in iter_records(data, position)]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (i + 1, T0_MS + i, f"k{i}".encode(), f"value-{i}".encode() * 20, (("h", b"x"),)) for i in range(5)]
    # The producer fields survive: a retry of the same batch is still a duplicate.
    assert log.append_as_leader(batch, 0).batch_count == 0


def test_an_unknown_codec_name_is_refused():
    with pytest.raises(InvalidConfigError, match="compression.type"):
        LogConfig.from_properties({"compression.type": "brotli"})
