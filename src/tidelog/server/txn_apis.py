"""The transaction APIs, written once for every version (docs/transactions.md).

Theory of operation. A transactional producer finds its coordinator
(FindCoordinator, key type 1, served by ``GroupApis``), then InitProducerId,
AddPartitionsToTxn / AddOffsetsToTxn, its produce requests, TxnOffsetCommit
(to the group coordinator, ``GroupApis``) and EndTxn. Each handler turns the
request into a call on the ``TxnShard`` of the transactional id (the broker's
``TransactionCoordinator``), which answers through a callback once its record
committed; the handler returns the dict at once when the answer came
synchronously, else an awaitable of it.

WriteTxnMarkers is how a coordinator tells partition leaders that a
transaction ended: each leader appends a COMMIT or ABORT control batch with
acks=all. What markers and KIP-890 verification mean is the request layer's
(``tidelog.broker.requests.txn``, run by the simulator too); this module
decodes and encodes, and carries out its effects — ``SendMarkers`` and
``SendAddPartitionsToTxn`` — over one connection per broker
(``MarkerChannel``), within the effect's timeout (``request.timeout.ms``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Awaitable, Callable

from tidelog.broker.requests import (
    AddPartitionsToTxn,
    SendAddPartitionsToTxn,
    SendMarkers,
    TxnRequests,
    WriteTxnMarkers,
)
from tidelog.broker.requests.effects import SendDescribeTransactions, SendListTransactions, SendTopicLeaders
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.group.coordinator import OFFSETS_TOPIC
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import millis
from tidelog.protocol.translate.group import SERVED as GROUP_SERVED
from tidelog.txn.records import TxnState
from tidelog.txn.shard import TRANSACTION_VERSION_EPOCH_BUMP

logger = logging.getLogger("tidelog.txn")


class TxnApis:
    def __init__(self, node, listener_name: str, clock, next_producer_id: Callable[[], Awaitable[int]],
                 plain_init_producer_id):
        self.node = node
        self.listener_name = listener_name
        self.clock = clock
        self._next_producer_id = next_producer_id
        self._plain_init_producer_id = plain_init_producer_id
        self.channel = MarkerChannel(node, listener_name)
        # The request layer: verification, markers (it takes the coordinator's write_markers).
        self.requests = TxnRequests(node, clock, self._send)
        # With ACLs, ListTransactions lists only the ids the caller may DESCRIBE (Kafka's rule).
        self.may_describe: Callable[[str], bool] = lambda transactional_id: True

    def register(self, dispatcher) -> None:
        dispatcher.register(ApiKey.INIT_PRODUCER_ID, self.handle_init_producer_id, 0, 5)
        dispatcher.register(ApiKey.ADD_PARTITIONS_TO_TXN, self.handle_add_partitions_to_txn, 0, 5)
        dispatcher.register(ApiKey.ADD_OFFSETS_TO_TXN, self.handle_add_offsets_to_txn, 0, 4)
        dispatcher.register(ApiKey.END_TXN, self.handle_end_txn, 0, 5)
        dispatcher.register(ApiKey.WRITE_TXN_MARKERS, self.handle_write_txn_markers, 1, 1)
        dispatcher.register(ApiKey.DESCRIBE_TRANSACTIONS, self.handle_describe_transactions, 0, 0)
        dispatcher.register(ApiKey.LIST_TRANSACTIONS, self.handle_list_transactions, 0, 1)
        dispatcher.register(ApiKey.DESCRIBE_PRODUCERS, self.handle_describe_producers, 0, 0)

    def register_txn_offset_commit(self, dispatcher, group_handler) -> None:
        """TxnOffsetCommit, served by the group coordinator (``group_handler``); v5 comes
        from a transaction.version 2 client, whose offsets partition is added to the
        transaction first (KIP-890 part 2, ``TxnRequests.add_offsets_partition``)."""
        def handle(header, request):
            if header.api_version < 5:
                return group_handler(header, request)
            return self._txn_offset_commit_v5(header, request, group_handler)
        dispatcher.register(ApiKey.TXN_OFFSET_COMMIT, handle, *GROUP_SERVED[ApiKey.TXN_OFFSET_COMMIT])

    def _txn_offset_commit_v5(self, header, request, group_handler):
        offsets_partition = TopicPartition(OFFSETS_TOPIC, self.node.group_coordinator.partition_for(request.group_id))
        future = asyncio.get_running_loop().create_future()
        self.requests.add_offsets_partition(request.transactional_id, int(request.producer_id),
                                            int(request.producer_epoch), offsets_partition,
                                            lambda error: future.done() or future.set_result(error))

        async def commit():
            error = await future
            if error == ErrorCode.NONE:
                answer = group_handler(header, request)
                return await answer if inspect.isawaitable(answer) else answer
            return {"throttle_time": 0, "topics": [
                {"name": topic.name, "partitions": [{"partition_index": int(p.partition_index),
                                                     "error_code": int(error)} for p in topic.partitions]}
                for topic in request.topics]}
        return commit()

    async def _fresh_producer_id(self, transactional_id: str):
        """``(shard, producer id)``: a fresh producer id, and the id's shard looked up again
        after the wait (it may have moved meanwhile); ``(error, -1)`` when either failed."""
        try:
            fresh = await self._next_producer_id()
        except (RuntimeError, OSError, ConnectionError, asyncio.TimeoutError):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        return self.coordinator.shard_for(transactional_id), fresh

    @property
    def coordinator(self):
        return self.node.txn_coordinator

    def _now(self) -> int:
        """The transaction coordinator's timer clock (monotonic; shards read wall time themselves)."""
        return self.coordinator.now_ms()

    # ===================================================== InitProducerId

    def handle_init_producer_id(self, header, request):
        transactional_id = getattr(request, "transactional_id", None)
        if not transactional_id:
            return self._plain_init_producer_id(header, request)

        def answer(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> dict:
            return {"throttle_time": 0, "error_code": int(_for_old_clients(error, header.api_version, 4)),
                    "producer_id": producer_id, "producer_epoch": producer_epoch}

        async def init():
            shard = self.coordinator.shard_for(transactional_id)
            if isinstance(shard, ErrorCode):
                return answer(shard)
            shard, fresh = await self._fresh_producer_id(transactional_id)
            if isinstance(shard, ErrorCode):
                return answer(shard)
            future = asyncio.get_running_loop().create_future()
            shard.init_producer_id(transactional_id, millis(request.transaction_timeout),
                                   int(getattr(request, "producer_id", -1)),
                                   int(getattr(request, "producer_epoch", -1)), fresh, self._now(),
                                   lambda error, pid, epoch: future.done() or future.set_result(
                                       answer(error, pid, epoch)))
            return await future
        return init()

    # ================================================ AddPartitionsToTxn

    def handle_add_partitions_to_txn(self, header, request):
        if header.api_version >= 4:
            return self._add_partitions_batched(request)
        transactional_id = request.v3_and_below_transactional_id
        topics = [(t.name, [int(p) for p in t.partitions]) for t in request.v3_and_below_topics]
        wanted = {TopicPartition(name, p) for name, partitions in topics for p in partitions}
        image = self.node.image
        unknown = {tp for tp in wanted if image.topic(tp.topic) is None
                   or tp.partition not in image.topic(tp.topic).partitions}

        def response(errors: dict) -> dict:
            return {"throttle_time": 0, "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": [
                    {"partition_index": p, "partition_error_code": int(_for_old_clients(
                        errors[TopicPartition(name, p)], header.api_version, 2))}
                    for p in partitions]} for name, partitions in topics]}
        if unknown:
            # As Kafka: the unknown partitions fail, the others are not added (OPERATION_NOT_ATTEMPTED).
            return response({tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                             else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted})
        return self._add(transactional_id, int(request.v3_and_below_producer_id),
                         int(request.v3_and_below_producer_epoch), wanted,
                         lambda error: response({tp: error for tp in wanted}))

    def _add_partitions_batched(self, request):
        """v4+, sent by brokers (KIP-890): with ``verify_only``, whether each partition is in
        the producer's open transaction; without it, add them (as v3 does, per transaction)."""
        results: list = []
        pending: list = []
        for txn in request.transactions:
            tps = [TopicPartition(t.name, int(p)) for t in txn.topics for p in t.partitions]
            slot = {"transactional_id": txn.transactional_id, "topic_results": None}
            results.append(slot)

            def fill(errors: dict, slot=slot, tps=tps) -> None:
                by_topic: dict[str, list] = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "partition_error_code": int(errors[tp])})
                slot["topic_results"] = [{"name": n, "results_by_partition": ps} for n, ps in by_topic.items()]
            # A broker adding partitions (not only verifying) does it for a client that runs
            # transaction.version 2: it sent Produce v12+ or TxnOffsetCommit v5.
            asked = AddPartitionsToTxn(txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch),
                                       tuple(tps), bool(txn.verify_only),
                                       0 if txn.verify_only else TRANSACTION_VERSION_EPOCH_BUMP)
            answer = _call(lambda respond, asked=asked: self.requests.add_partitions_to_txn(asked, respond),
                           lambda errors: errors)
            if isinstance(answer, dict):
                fill(answer)
            else:
                pending.append((answer, fill))

        def response() -> dict:
            return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}
        if not pending:
            return response()

        async def later():
            for awaitable, fill in pending:
                fill(await awaitable)
            return response()
        return later()

    def handle_add_offsets_to_txn(self, header, request):
        group_partition = self.node.group_coordinator.partition_for(request.group_id)
        return self._add(request.transactional_id, int(request.producer_id), int(request.producer_epoch),
                         {TopicPartition(OFFSETS_TOPIC, group_partition)},
                         lambda error: {"throttle_time": 0,
                                        "error_code": int(_for_old_clients(error, header.api_version, 2))})

    def _add(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: set,
             build: Callable[[ErrorCode], dict]):
        shard = self.coordinator.shard_for(transactional_id)
        if isinstance(shard, ErrorCode):
            return build(shard)
        return _call(lambda respond: shard.add_partitions(transactional_id, producer_id, producer_epoch,
                                                          partitions, self._now(), respond), build)

    # ============================================================ EndTxn

    def handle_end_txn(self, header, request):
        """EndTxn: v5+ is a transaction.version 2 client (an epoch bump with every commit
        or abort, answered with the producer id and epoch to use next); v0-v4 the old
        rules. Kafka decides by the request's version too."""
        if header.api_version >= 5:
            return self._end_txn_v2(request)

        def build(error: ErrorCode) -> dict:
            return {"throttle_time": 0, "error_code": int(_for_old_clients(error, header.api_version, 2))}
        shard = self.coordinator.shard_for(request.transactional_id)
        if isinstance(shard, ErrorCode):
            return build(shard)
        return _call(lambda respond: shard.end_transaction(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch),
            bool(request.committed), self._now(), respond), build)

    def _end_txn_v2(self, request):
        def build(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> dict:
            return {"throttle_time": 0, "error_code": int(error), "producer_id": producer_id,
                    "producer_epoch": producer_epoch}
        transactional_id = request.transactional_id

        async def end():
            shard = self.coordinator.shard_for(transactional_id)
            if isinstance(shard, ErrorCode):
                return build(shard)
            fresh = -1
            if shard.epoch_exhausted(transactional_id):
                # The bump would exhaust the epoch: the commit moves the id to a new producer id.
                shard, fresh = await self._fresh_producer_id(transactional_id)
                if isinstance(shard, ErrorCode):
                    return build(shard)
            future = asyncio.get_running_loop().create_future()
            shard.end_transaction_v2(transactional_id, int(request.producer_id), int(request.producer_epoch),
                                     bool(request.committed), fresh, self._now(),
                                     lambda error, pid, epoch: future.done() or future.set_result(
                                         build(error, pid, epoch)))
            return await future
        return end()

    # =================================================== WriteTxnMarkers

    def _send(self, effect) -> None:
        """Carry out the request layer's effects: requests to other brokers."""
        if isinstance(effect, SendMarkers):
            self.channel.send_markers(effect)
        elif isinstance(effect, SendAddPartitionsToTxn):
            self.channel.send_add_partitions(effect)
        elif isinstance(effect, SendListTransactions):
            self.channel.send_list_transactions(effect)
        elif isinstance(effect, SendDescribeTransactions):
            self.channel.send_describe_transactions(effect)
        elif isinstance(effect, SendTopicLeaders):
            self.channel.send_topic_leaders(effect)
        else:
            raise AssertionError(f"unknown effect {effect!r}")

    def handle_write_txn_markers(self, header, request):
        markers = list(request.markers)
        results: list = [None] * len(markers)
        future = asyncio.get_running_loop().create_future()

        def finish() -> None:
            if all(r is not None for r in results) and not future.done():
                future.set_result({"markers": results})

        for i, marker in enumerate(markers):
            partitions = [TopicPartition(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]

            def done(errors: dict, i=i, marker=marker, partitions=partitions) -> None:
                by_topic: dict[str, list] = {}
                for tp in partitions:
                    by_topic.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "error_code": int(errors.get(tp, ErrorCode.NONE))})
                results[i] = {"producer_id": int(marker.producer_id), "topics": [
                    {"name": name, "partitions": parts} for name, parts in by_topic.items()]}
                finish()
            if not partitions:
                done({})
                continue
            self.requests.append_markers(WriteTxnMarkers(
                int(marker.producer_id), int(marker.producer_epoch), bool(marker.transaction_result),
                int(marker.coordinator_epoch), tuple(partitions)), done)
        if future.done():
            return future.result()

        async def later():
            return await future
        return later()

    # ======================================== Describe / ListTransactions

    def handle_describe_transactions(self, header, request):
        states = []
        for transactional_id in request.transactional_ids:
            shard = self.coordinator.shard_for(transactional_id)
            meta = None if isinstance(shard, ErrorCode) else shard.describe(transactional_id)
            error = shard if isinstance(shard, ErrorCode) else (
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND if meta is None else ErrorCode.NONE)
            if meta is None:
                # Kafka leaves every other field at its zero value.
                states.append({"error_code": int(error), "transactional_id": transactional_id,
                               "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,
                               "producer_id": 0, "producer_epoch": 0, "topics": []})
                continue
            by_topic: dict[str, list] = {}
            for tp in sorted(meta.partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            states.append({"error_code": 0, "transactional_id": transactional_id,
                           "transaction_state": meta.state.display, "transaction_timeout": meta.timeout_ms,
                           "transaction_start_time": meta.start_ms, "producer_id": meta.producer_id,
                           "producer_epoch": meta.producer_epoch,
                           "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        return {"throttle_time": 0, "transaction_states": states}

    def handle_list_transactions(self, header, request):
        known = {state.display for state in TxnState}
        state_filters = list(getattr(request, "state_filters", ()) or ())
        producer_filters = {int(p) for p in getattr(request, "producer_id_filters", ()) or ()}
        shards, loading = self.coordinator.shards()
        listed = []
        for shard in shards:
            for meta in shard.transactions.values():
                if meta.producer_id < 0:
                    continue
                if state_filters and meta.state.display not in state_filters:
                    continue
                if producer_filters and meta.producer_id not in producer_filters:
                    continue
                if not self.may_describe(meta.transactional_id):
                    continue
                listed.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                               "transaction_state": meta.state.display})
        return {"throttle_time": 0,
                "error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE),
                "unknown_state_filters": [s for s in state_filters if s not in known],
                "transaction_states": listed}


    def handle_describe_producers(self, header, request):
        """The producers each partition's leader remembers, with the first offset of an open
        transaction: what ``kafka-transactions.sh find-hanging`` reads (KIP-664)."""
        topics = []
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, int(index))
                partition = self.node.replica_manager.get_partition(tp)
                entry = {"partition_index": int(index), "error_code": 0, "error_message": None, "active_producers": []}
                if partition is None or not hasattr(partition, "is_leader"):
                    known = self.node.image.partition(tp) is not None
                    entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER if known
                                              else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif not partition.is_leader:
                    entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    entry["active_producers"] = [
                        {"producer_id": pid, "producer_epoch": epoch, "last_sequence": sequence,
                         "last_timestamp": timestamp, "coordinator_epoch": coordinator_epoch,
                         "current_txn_start_offset": txn_start}
                        for pid, epoch, sequence, timestamp, coordinator_epoch, txn_start
                        in partition.log.active_producers()]
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}


class MarkerChannel:
    """Requests to other brokers (WriteTxnMarkers, verifications, an uncleanly elected
    leader's ListTransactions / DescribeTransactions): one connection per broker, opened
    on demand and dropped on any failure (the caller retries)."""

    def __init__(self, node, listener_name: str, security=None):
        self.node = node
        self.listener_name = listener_name
        self.security = security
        self._connections: dict[int, KafkaConnection] = {}

    def send_markers(self, effect: SendMarkers) -> None:
        """WriteTxnMarkers v1 to the partitions' leader; its answer (None: none) to ``on_done``."""
        marker = effect.request
        body = {"markers": [{"producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
                             "transaction_result": marker.commit, "coordinator_epoch": marker.coordinator_epoch,
                             "topics": _topics(marker.partitions, "partition_indexes")}]}
        self._send(effect, ApiKey.WRITE_TXN_MARKERS, body, lambda response: {
            TopicPartition(t.name, int(p.partition_index)): ErrorCode(p.error_code.value)
            for marker in response.markers for t in marker.topics for p in t.partitions})

    def send_add_partitions(self, effect: SendAddPartitionsToTxn) -> None:
        """AddPartitionsToTxn v4 (KIP-890) to the coordinator; its answer (None: none, or a
        request-level error) to ``on_done``."""
        txn = effect.request
        # v4 and v5 have one schema; v5 only lets a coordinator answer TRANSACTION_ABORTABLE.
        body = {"transactions": [{"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
                                  "producer_epoch": txn.producer_epoch, "verify_only": txn.verify_only,
                                  "topics": _topics(txn.partitions, "partitions")}]}

        def answer(response):
            if ErrorCode(response.error_code.value) != ErrorCode.NONE:
                return None
            return {TopicPartition(topic.name, int(p.partition_index)): ErrorCode(p.partition_error_code.value)
                    for result in response.results_by_transaction for topic in result.topic_results
                    for p in topic.results_by_partition}
        self._send(effect, ApiKey.ADD_PARTITIONS_TO_TXN, body, answer)

    def send_list_transactions(self, effect: SendListTransactions) -> None:
        """ListTransactions v1 filtered by one producer id (an uncleanly elected leader's
        question); ``(transactional id, producer id, state)`` rows, or None on an error."""
        def answer(response):
            if ErrorCode(response.error_code.value) != ErrorCode.NONE:
                return None
            return [(t.transactional_id, int(t.producer_id), t.transaction_state) for t in response.transaction_states]
        self._send(effect, ApiKey.LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": [effect.producer_id],
                                                      "duration_filter": -1}, answer)

    def send_describe_transactions(self, effect: SendDescribeTransactions) -> None:
        """DescribeTransactions of one id at its coordinator: ``(state, producer id, epoch)``,
        "unknown" (TRANSACTIONAL_ID_NOT_FOUND) or None."""
        def answer(response):
            state = response.transaction_states[0]
            error = ErrorCode(state.error_code.value)
            if error != ErrorCode.NONE:
                return "unknown" if error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND else None
            return state.transaction_state, int(state.producer_id), int(state.producer_epoch)
        self._send(effect, ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [effect.transactional_id]}, answer)

    def send_topic_leaders(self, effect: SendTopicLeaders) -> None:
        """Metadata of one topic: ``{partition index: (leader id, leader epoch)}`` as the
        broker's metadata has them, or None on a topic error."""
        def answer(response):
            topic = next((t for t in response.topics if t.name == effect.topic), None)
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode(topic.error_code.value)
            if error != ErrorCode.NONE:     # e.g. TOPIC_AUTHORIZATION_FAILED: no DESCRIBE on the topic
                logger.warning("Metadata of %s at broker %d: %s", effect.topic, effect.broker_id, error.name)
                return None
            return {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in topic.partitions}
        self._send(effect, ApiKey.METADATA, {"topics": [{"name": effect.topic, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, answer)

    def _send(self, effect, api_key: int, body: dict, read: Callable) -> None:
        async def send() -> None:
            try:
                connection = await self._connection(effect.broker_id)
                answer = read(await asyncio.wait_for(connection.request(api_key, body), effect.timeout_ms / 1000))
            except (OSError, ConnectionError, asyncio.TimeoutError, RuntimeError, ValueError) as e:
                logger.info("%s to broker %d failed: %s", ApiKey(api_key).name, effect.broker_id, e)
                dropped = self._connections.pop(effect.broker_id, None)
                if dropped is not None:
                    dropped.close()
                answer = None
            effect.on_done(answer)
        asyncio.get_running_loop().create_task(send())

    async def _connection(self, broker_id: int) -> KafkaConnection:
        connection = self._connections.get(broker_id)
        if connection is not None and not connection.closed:
            return connection
        broker = self.node.image.brokers.get(broker_id)
        endpoint = None if broker is None else next(
            (e for e in broker.endpoints if e.name == self.listener_name), None)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} has no {self.listener_name} listener")
        connection = await KafkaConnection.connect(endpoint.host, endpoint.port, client_id="tidelog-txn-markers",
                                                   security=self.security)
        self._connections[broker_id] = connection
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _topics(partitions, field: str) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"name": name, field: indexes} for name, indexes in by_topic.items()]


def _call(start: Callable[[Callable[[ErrorCode], None]], None], build: Callable[[ErrorCode], dict]):
    """Run a shard operation; its answer as a dict at once, or an awaitable of it."""
    answered: list = []
    future: asyncio.Future | None = None

    def respond(error: ErrorCode) -> None:
        if future is None:
            answered.append(error)
        elif not future.done():
            future.set_result(build(error))
    start(respond)
    if answered:
        return build(answered[0])
    future = asyncio.get_running_loop().create_future()

    async def later():
        return await future
    return later()


def _for_old_clients(error: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED as INVALID_PRODUCER_EPOCH below the version that knows it (KIP-588:
    InitProducerId v4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v2), as Kafka answers
    older clients."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error

