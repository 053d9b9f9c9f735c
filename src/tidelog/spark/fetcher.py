"""The executor's read path: fetch one ``[start, end)`` range from the leader.

Theory of operation. A Spark task reads one offset range of one partition.
``read_range`` asks the partition's leader (from Metadata) for records with
Fetch, decodes each response into one Arrow record batch
(``arrow_records.decode_fetched``) and moves on from the offset after the last
batch. While a response is decoded, the request for the next chunk is already
on the wire (one request in flight), so broker and task work at the same time.

Errors, by kind:

* leader moved, leader unknown, connection lost or timed out (retriable): forget
  metadata and connections, back off, ask Metadata again and re-send, until
  ``kafka.default.api.timeout.ms`` has passed;
* the start offset was deleted (OFFSET_OUT_OF_RANGE below the log start) or the
  topic was deleted: data loss. ``failOnDataLoss=true`` raises ``DataLossError``;
  ``false`` logs a warning and reads what is left;
* the range ends beyond what the leader now has (its high watermark stays below
  the end until the timeout): offsets went backwards, which is data loss too.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import pyarrow as pa

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.records import iter_batches, iter_records
from tidelog.spark.arrow_records import decode_fetched
from tidelog.spark.options import PARTITION_FETCH_BYTES_MAX, ReadOptions
from tidelog.spark.wire import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    BrokerError,
    BrokerUnreachable,
    Cluster,
    error_of,
)

logger = logging.getLogger("tidelog.spark")


class DataLossError(RuntimeError):
    """Records the query should have read are gone, and failOnDataLoss is true."""


def data_loss(what: str, fail_on_data_loss: bool) -> None:
    """Raise (failOnDataLoss=true) or warn (false) about lost data."""
    if fail_on_data_loss:
        raise DataLossError(
            f"tidelog source: data loss: {what}. The query stops so that this is noticed; to skip "
            "lost data with a warning instead, set the source option failOnDataLoss to false.")
    logger.warning("tidelog source: data loss (failOnDataLoss=false, continuing): %s", what)


class _Fetcher:
    """Fetch requests for one partition, at most one in flight."""

    def __init__(self, cluster: Cluster, topic: str, partition: int, options: ReadOptions):
        self.cluster, self.topic, self.partition, self.options = cluster, topic, partition, options
        self.max_bytes = options.max_partition_fetch_bytes
        # (offset, node id, connection, correlation id), or (offset, None, None, error of send)
        self._inflight: tuple | None = None

    def send(self, offset: int) -> None:
        """Put a fetch for ``offset`` on the wire (errors surface in ``receive``)."""
        try:
            node = self.cluster.leader(self.topic, self.partition)
            connection = self.cluster.connection(node)
            correlation_id = connection.send(ApiKey.FETCH, self._body(offset))
            self._inflight = (offset, node, connection, correlation_id)
        except (BrokerUnreachable, BrokerError) as e:
            self._inflight = (offset, None, None, e)

    def receive(self, offset: int):
        """The partition's part of the response for ``offset``, following leaders."""
        deadline = time.monotonic() + self.options.client.default_api_timeout_ms / 1000
        backoff_s = self.options.client.retry_backoff_ms / 1000
        while True:
            if self._inflight is None or self._inflight[0] != offset or self._inflight[2] is None:
                self._discard()
                self.send(offset)
            _, node, connection, correlation_id = self._inflight
            self._inflight = None
            error: Exception
            try:  # every way out but a usable answer raises; retriable errors loop
                if connection is None:
                    failure = correlation_id   # the error of send()
                    if getattr(failure, "error_code", None) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                            and not self._topic_exists():
                        return _Gone()
                    raise failure if isinstance(failure, Exception) else BrokerUnreachable("no leader")
                response = connection.receive(correlation_id)
                result = response.responses[0].partitions[0]
                code = error_of(result.error_code)
                if code == ErrorCode.NONE or code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    return result
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not self._topic_exists():
                    return result
                raise BrokerError(f"Fetch {self.topic}-{self.partition}@{offset}", code)
            except BrokerUnreachable as e:
                error = e
            except BrokerError as e:
                if not e.retriable:
                    raise
                error = e
            if time.monotonic() + backoff_s > deadline:
                raise BrokerError(f"Fetch {self.topic}-{self.partition}@{offset}: gave up; last error: {error}",
                                  getattr(error, "error_code", ErrorCode.NETWORK_EXCEPTION))
            logger.info("Fetch %s-%d@%d: %s; refreshing metadata and retrying", self.topic, self.partition,
                     offset, error)
            self.cluster.forget(node)
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)

    def _topic_exists(self) -> bool:
        try:
            partitions = self.cluster.retrying(
                "Metadata", lambda: self.cluster.partitions_of([self.topic]))[self.topic]
        except BrokerError:
            return True  # cannot tell; keep retrying
        return partitions is not None and self.partition in partitions

    def _discard(self) -> None:
        """Drop an in-flight request for another offset (its connection is closed)."""
        if self._inflight is not None and self._inflight[2] is not None:
            self.cluster.forget(self._inflight[1])
        self._inflight = None

    def _body(self, offset: int) -> dict:
        return {
            "replica_id": -1, "max_wait": self.options.fetch_max_wait_ms, "min_bytes": 1,
            "max_bytes": self.max_bytes, "isolation_level": self.options.isolation_level,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": self.topic, "partitions": [{
                "partition": self.partition, "fetch_offset": offset, "partition_max_bytes": self.max_bytes,
                "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}]}],
        }


class _Gone:
    """Stands for a Fetch answer when the topic or partition no longer exists."""

    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    records = b""
    high_watermark = last_stable_offset = log_start_offset = -1


def _next_offset_after(records) -> int | None:
    """The offset after the last complete batch (headers only; cheap)."""
    last = None
    for _, header in iter_batches(records or b""):
        last = header
    return None if last is None else last.next_offset


def read_range(options: ReadOptions, topic: str, partition: int, start: int, end: int,
               cluster: Cluster | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the records ``start <= offset < end`` of one partition as Arrow batches."""
    own = cluster is None
    cluster = cluster or Cluster(options.client)
    fetcher = _Fetcher(cluster, topic, partition, options)
    offset = start
    stalled_since = None
    try:
        while offset < end:
            result = fetcher.receive(offset)
            code = error_of(result.error_code)
            if code != ErrorCode.NONE:
                offset = _on_lost(cluster, options, topic, partition, offset, end, code)
                if offset is None:
                    return
                continue
            records = result.records
            ahead = _next_offset_after(records)
            if ahead is not None and ahead < end:
                fetcher.send(ahead)    # pipelined: the broker reads while we decode
            aborted = None
            if options.isolation_level == READ_COMMITTED:
                aborted = [(int(a.producer_id), int(a.first_offset)) for a in result.aborted_transactions or ()]
            decoded = decode_fetched(records, topic, partition, offset, end,
                                     options.include_headers, options.check_crcs, aborted)
            if decoded.rows is not None and decoded.rows.num_rows:
                yield decoded.rows
            if decoded.next_offset is not None and decoded.next_offset > offset:
                offset = decoded.next_offset
                stalled_since = None
                continue
            # No complete batch came back.
            bound = int(result.last_stable_offset) if options.isolation_level == READ_COMMITTED \
                and int(result.last_stable_offset) >= 0 else int(result.high_watermark)
            if records and len(records) >= fetcher.max_bytes:
                fetcher.max_bytes = min(fetcher.max_bytes * 2, PARTITION_FETCH_BYTES_MAX)
                continue  # one batch is bigger than the fetch size: ask for more bytes
            if bound > offset:
                continue  # data is there; the broker returned early
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > options.client.default_api_timeout_ms / 1000:
                data_loss(f"offsets of {topic}-{partition} went backwards: the range [{offset}, {end}) was "
                          f"planned but the leader's high watermark is {bound}", options.fail_on_data_loss)
                return
    finally:
        if own:
            cluster.close()


def _on_lost(cluster: Cluster, options: ReadOptions, topic: str, partition: int, offset: int, end: int,
             code: ErrorCode) -> int | None:
    """Handle OFFSET_OUT_OF_RANGE or a deleted topic; returns where to go on, or None to stop."""
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        data_loss(f"{topic}-{partition} was deleted while offsets [{offset}, {end}) were still to be read",
                  options.fail_on_data_loss)
        return None
    tp = (topic, partition)
    earliest = cluster.list_offsets({tp: EARLIEST}, options.isolation_level)[tp]
    latest = cluster.list_offsets({tp: LATEST}, options.isolation_level)[tp]
    if offset < earliest:
        data_loss(f"offsets [{offset}, {min(earliest, end)}) of {topic}-{partition} were deleted (retention or "
                  f"DeleteRecords) before they were read; the log now starts at {earliest}",
                  options.fail_on_data_loss)
        return earliest if earliest < end else None
    if offset > latest:
        data_loss(f"offsets of {topic}-{partition} went backwards: reading from {offset} but the high "
                  f"watermark is now {latest}", options.fail_on_data_loss)
        return None
    return offset  # the log moved under us; fetch again


def read_records(cluster: Cluster, options: ReadOptions, topic: str, partition: int, start: int,
                 end: int) -> Iterator:
    """Records ``start <= offset < end`` as ``tidelog.records.Record`` objects (Python, slow path).

    For the sink's small reads (its control topic, scans on replay). Deleted
    offsets are skipped silently; a deleted topic ends the iteration.
    """
    for data, position, header in read_batches(cluster, options, topic, partition, start, end):
        if header.is_control:
            continue
        for record in iter_records(data, position):
            if start <= record.offset < end:
                yield record


def read_batches(cluster: Cluster, options: ReadOptions, topic: str, partition: int, start: int,
                 end: int) -> Iterator:
    """Every batch (control batches included) holding offsets in ``[start, end)``, as
    ``(response bytes, position, header)``, in offset order."""
    fetcher = _Fetcher(cluster, topic, partition, options)
    offset = start
    while offset < end:
        result = fetcher.receive(offset)
        code = error_of(result.error_code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            earliest = cluster.list_offsets({(topic, partition): EARLIEST})[(topic, partition)]
            if offset >= earliest:
                return
            offset = earliest
            continue
        if code != ErrorCode.NONE:
            return
        records = result.records or b""
        after = None
        for pos, header in iter_batches(records):
            after = header.next_offset
            if header.next_offset <= offset or header.base_offset >= end:
                continue
            yield records, pos, header
        if after is not None and after > offset:
            offset = after
        elif int(result.high_watermark) <= offset:
            return
        elif len(records) >= fetcher.max_bytes:
            fetcher.max_bytes = min(fetcher.max_bytes * 2, PARTITION_FETCH_BYTES_MAX)
