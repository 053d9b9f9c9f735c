"""A transactional producer session for the sink's tasks (``transactional=true``).

Theory of operation. A task's transactional id is stable across its attempts
(``tidelog-spark-<queryId>-<partitionId>``), so ``init`` (FindCoordinator key
type 1, then InitProducerId) fences every earlier attempt of the same task and
closes its transaction: an open one is aborted by the coordinator, which
answers CONCURRENT_TRANSACTIONS until the abort's markers are written (retried
here). From then on every earlier transaction of this id is decided and its
COMMIT or ABORT marker is in each partition it wrote to.

``add_partitions`` (AddPartitionsToTxn) runs before the first batch to a
partition; batches carry the producer id, epoch and a per-partition sequence
(so a retried batch is deduplicated by the partition, never written twice);
``commit`` / ``abort`` is EndTxn. Coordinator errors (NOT_COORDINATOR, the
coordinator loading or unavailable, CONCURRENT_TRANSACTIONS) are retried with
the client's backoff until ``kafka.default.api.timeout.ms``; PRODUCER_FENCED
and the like fail the task.
"""

from __future__ import annotations

import logging
import time

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.spark.wire import BrokerError, BrokerUnreachable, Cluster, error_of

logger = logging.getLogger("tidelog.spark")

TRANSACTION_KEY = 1
_RETRY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})
_FIND_AGAIN = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class Transaction:
    def __init__(self, cluster: Cluster, transactional_id: str, timeout_ms: int):
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[tuple[str, int]] = set()
        self._coordinator: int | None = None

    # ------------------------------------------------------------------ calls

    def _find_coordinator(self) -> int:
        response = self.cluster.any_connection().request(ApiKey.FIND_COORDINATOR, {
            "key": self.transactional_id, "key_type": TRANSACTION_KEY,
            "coordinator_keys": [self.transactional_id]})
        found = response.coordinators[0] if getattr(response, "coordinators", None) else response
        code = error_of(found.error_code)
        if code != ErrorCode.NONE:
            raise BrokerError(f"FindCoordinator {self.transactional_id!r}", code)
        self.cluster.brokers.setdefault(int(found.node_id), (found.host, int(found.port)))
        return int(found.node_id)

    def _call(self, what: str, api_key: int, body: dict, error_of_response) -> object:
        """Send to the coordinator until it answers something other than a retriable error."""
        deadline = time.monotonic() + self.cluster.config.default_api_timeout_ms / 1000
        backoff_s = self.cluster.config.retry_backoff_ms / 1000
        while True:
            try:
                if self._coordinator is None:
                    self._coordinator = self._find_coordinator()
                response = self.cluster.connection(self._coordinator).request(api_key, body)
                code = error_of_response(response)
                if code == ErrorCode.NONE:
                    return response
                if code not in _RETRY:
                    raise BrokerError(f"{what} for transactional id {self.transactional_id!r}", code)
                if code in _FIND_AGAIN:
                    self._coordinator = None
                failure: Exception = BrokerError(what, code)
            except BrokerUnreachable as e:
                self._coordinator = None
                self.cluster.forget()
                failure = e
            except BrokerError as e:
                if e.error_code not in _RETRY:
                    raise
                self._coordinator = None
                failure = e
            if time.monotonic() + backoff_s > deadline:
                raise BrokerError(f"{what} for transactional id {self.transactional_id!r}: gave up; last error: "
                                  f"{failure}", getattr(failure, "error_code", ErrorCode.NETWORK_EXCEPTION))
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)

    # ------------------------------------------------------------ operations

    def init(self) -> None:
        """Fence earlier attempts and close their transaction; this session's id and epoch."""
        response = self._call("InitProducerId", ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id, "transaction_timeout": self.timeout_ms,
            "producer_id": -1, "producer_epoch": -1}, lambda r: error_of(r.error_code))
        self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)
        logger.info("tidelog sink: transactional id %s is producer %d epoch %d", self.transactional_id,
                 self.producer_id, self.producer_epoch)

    def add_partitions(self, tps) -> None:
        new = sorted(set(tps) - self.partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)

        def first_error(response) -> ErrorCode:
            for topic in response.results_by_topic_v3_and_below:
                for p in topic.results_by_partition:
                    code = error_of(p.partition_error_code)
                    if code != ErrorCode.NONE:
                        return code
            return ErrorCode.NONE
        self._call("AddPartitionsToTxn", ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": self.producer_id, "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            first_error)
        self.partitions.update(new)

    def end(self, commit: bool) -> None:
        if not self.partitions:
            return                                   # nothing was added: nothing to end
        self._call("EndTxn", ApiKey.END_TXN, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "committed": commit}, lambda r: error_of(r.error_code))
