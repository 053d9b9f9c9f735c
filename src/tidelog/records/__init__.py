"""Kafka record batches, magic v2 (KIP-98): parse, validate, rewrite, build."""

from tidelog.records.compression import Compression
from tidelog.records.batch import (
    BATCH_HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    BatchHeader,
    Record,
    SimpleRecord,
    TimestampType,
    build_batch,
    iter_batches,
    iter_records,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)

__all__ = [
    "BATCH_HEADER_SIZE_BYTES",
    "LOG_OVERHEAD_BYTES",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_ID",
    "BatchHeader",
    "Compression",
    "Record",
    "SimpleRecord",
    "TimestampType",
    "build_batch",
    "iter_batches",
    "iter_records",
    "read_header",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "validate_batch",
]
