"""Runs the sans-IO follower fetchers over real connections (Kafka's ``ReplicaFetcherThread``).

Theory of operation. ``ReplicaFetcherManager`` (replication/fetcher.py) decides
which fetchers exist; the ``BrokerNode`` reports each as a ``FetcherAdded`` /
``FetcherRemoved`` effect and the runtime calls ``start`` / ``stop`` here, which
start or cancel one asyncio task per fetcher. The task is Kafka's
fetcher thread loop: ``poll`` a plan, send it to the source broker as a Kafka
request, feed the answer back with ``on_response`` (or ``on_request_failed`` on a
connection error or timeout), and sleep until ``next_wakeup_ms`` — or until
``wake`` is called because partitions were added. One request is in flight per
fetcher; connections are per source broker, found through the metadata image's
endpoints for this broker's listener.

Each fetcher keeps an incremental fetch session with its leader (KIP-227,
``FetchSessionHandler`` in replication/fetch_session.py): the plan names every partition
ready to fetch; on the wire a Fetch carries only the partitions whose request changed
and the ones to forget, and the leader answers only the partitions with something new
(an omitted partition has nothing: the fetcher leaves it as it is). A session error
(the leader restarted, evicted the session, or saw a duplicate epoch) is answered with
no partitions and the next Fetch is full, at once, without a backoff, as Kafka's
fetcher does; a failed request closes the session too.

A connection error, a timeout or a malformed answer is an expected condition:
the fetcher backs off and asks again. A failure while truncating or appending one
partition is handled inside the fetcher (that partition is marked failed, the
others go on: replication/fetcher.py). What escapes ``on_response`` is a broken
invariant (an ``AssertionError``, ``IllegalTransition``): a bug, which goes to the
fault handler and stops the broker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from tidelog.broker.node import BrokerNode
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import ZERO_UUID, ProtocolError
from tidelog.replication.fetch_session import FetchSessionHandler
from tidelog.replication.fetcher import (
    EpochEndOffset,
    FetchPartitionResult,
    FetchRequestPlan,
    LeaderOffsets,
    ListOffsetsPlan,
    OffsetsForLeaderEpochPlan,
)

logger = logging.getLogger("tidelog.fetcher_driver")

REPLICA_SOCKET_TIMEOUT_S = 30.0  # replica.socket.timeout.ms


def _code(value) -> ErrorCode:
    return ErrorCode(int(getattr(value, "value", value)))


def _topic_id(image, name: str):
    topic = image.topic(name)
    return topic.topic_id if topic else ZERO_UUID


def _by_topic(topic_partitions) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in topic_partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


class FetcherDriver:
    def __init__(self, node: BrokerNode, listener_name: str, fault_handler: Callable[[BaseException], None],
                 security=None):
        self.node = node
        self.listener_name = listener_name
        self.security = security          # TLS / SASL towards the inter-broker listener
        self.fault_handler = fault_handler
        self.tasks: dict[tuple[int, int], asyncio.Task] = {}
        self.wakeups: dict[tuple[int, int], asyncio.Event] = {}
        self.connections: dict[int, KafkaConnection] = {}
        self.sessions: dict[tuple[int, int], FetchSessionHandler] = {}

    # ------------------------------------------------------------ tasks

    def start(self, fetcher) -> None:
        key = (fetcher.source_broker_id, fetcher.fetcher_id)
        wakeup = self.wakeups[key] = asyncio.Event()
        fetcher.wakeup = wakeup.set
        self.sessions[key] = FetchSessionHandler()
        self.tasks[key] = asyncio.get_running_loop().create_task(self._run(fetcher, key))

    def stop(self, fetcher) -> None:
        key = (fetcher.source_broker_id, fetcher.fetcher_id)
        task = self.tasks.pop(key, None)
        self.wakeups.pop(key, None)
        self.sessions.pop(key, None)
        if task is not None:
            task.cancel()

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def shutdown(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    async def _run(self, fetcher, key) -> None:
        try:
            await self._loop(fetcher, key)
        except asyncio.CancelledError:
            raise
        except Exception as e:           # a bug in the fetcher's rules: stop the broker
            self.fault_handler(e)

    async def _loop(self, fetcher, key) -> None:
        clock = self.node.clock
        wakeup = self.wakeups[key]
        while True:
            now = clock.monotonic_ms()
            plan = fetcher.poll(now)
            if plan is None:
                next_ms = fetcher.next_wakeup_ms(now)
                wakeup.clear()
                timeout = None if next_ms is None else max(0, next_ms - now) / 1000
                try:
                    await asyncio.wait_for(wakeup.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                results = await self._send(fetcher.source_broker_id, plan)
            except (OSError, ConnectionError, asyncio.TimeoutError, ProtocolError, KafkaError) as e:
                logger.debug("fetcher %s: request to broker %d failed: %s", key, fetcher.source_broker_id, e)
                self._drop_connection(fetcher.source_broker_id)
                session = self.sessions.get(key)
                if session is not None:
                    session.reset()
                fetcher.on_request_failed(plan, clock.monotonic_ms())
                continue
            fetcher.on_response(plan, results, clock.monotonic_ms())

    # ------------------------------------------------------------ connections

    async def _connection(self, broker_id: int) -> KafkaConnection:
        connection = self.connections.get(broker_id)
        if connection is not None and not connection.closed:
            return connection
        registration = self.node.image.brokers.get(broker_id)
        endpoint = None
        if registration is not None:
            endpoint = next((e for e in registration.endpoints if e.name == self.listener_name), None)
        if endpoint is None:
            raise ConnectionError(f"broker {broker_id} has no {self.listener_name} endpoint")
        connection = await KafkaConnection.connect(endpoint.host, endpoint.port,
                                                   client_id=f"replica-fetcher-{self.node.node_id}", timeout_s=5,
                                                   security=self.security)
        self.connections[broker_id] = connection
        return connection

    def _drop_connection(self, broker_id: int) -> None:
        connection = self.connections.pop(broker_id, None)
        if connection is not None:
            connection.close()

    # ------------------------------------------------------------ requests

    async def _send(self, broker_id: int, plan):
        connection = await self._connection(broker_id)
        if isinstance(plan, FetchRequestPlan):
            session = self.sessions.setdefault((plan.source_broker_id, plan.fetcher_id), FetchSessionHandler())
            return await self._fetch(connection, plan, session)
        if isinstance(plan, OffsetsForLeaderEpochPlan):
            return await self._offsets_for_leader_epoch(connection, plan)
        if isinstance(plan, ListOffsetsPlan):
            return await self._list_offsets(connection, plan)
        raise AssertionError(f"unknown plan {plan!r}")

    async def _fetch(self, connection: KafkaConnection, plan: FetchRequestPlan, session: FetchSessionHandler) -> dict:
        image = self.node.image
        session_id, session_epoch, send, forgotten = session.build(plan.partitions)
        topics: dict[str, list] = {}
        for tp, p in send.items():
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": p.current_leader_epoch,
                "fetch_offset": p.fetch_offset, "last_fetched_epoch": p.last_fetched_epoch,
                "log_start_offset": p.log_start_offset, "partition_max_bytes": p.partition_max_bytes})
        body = {
            "replica_id": plan.replica_id,
            "replica_state": {"replica_id": plan.replica_id, "replica_epoch": plan.broker_epoch},
            "max_wait": plan.max_wait_ms, "min_bytes": plan.min_bytes, "max_bytes": plan.max_bytes,
            "isolation_level": plan.isolation_level, "session_id": session_id,
            "session_epoch": session_epoch, "rack_id": "",
            "forgotten_topics_data": [{"topic": name, "topic_id": _topic_id(image, name), "partitions": parts}
                                      for name, parts in _by_topic(forgotten).items()],
            "topics": [{"topic": name, "topic_id": _topic_id(image, name), "partitions": parts}
                       for name, parts in topics.items()]}
        response = await connection.request(ApiKey.FETCH, body, timeout_s=plan.max_wait_ms / 1000 + REPLICA_SOCKET_TIMEOUT_S)
        error = _code(response.error_code)
        if not session.on_response(plan.partitions, error, int(getattr(response, "session_id", 0))):
            logger.debug("fetch session %d with broker %d: %s; fetching in full", session_id,
                      plan.source_broker_id, error.name)
            return {}
        if error != ErrorCode.NONE:
            raise KafkaError(f"fetch failed: {error.name}", error)
        results = {}
        for topic in response.responses:
            name = getattr(topic, "topic", None) or image.topic_name(topic.topic_id)
            for p in topic.partitions:
                diverging = getattr(p, "diverging_epoch", None)
                diverging_epoch = None
                if diverging is not None and (int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0):
                    diverging_epoch = (int(diverging.epoch), int(diverging.end_offset))
                results[TopicPartition(name, int(p.partition_index))] = FetchPartitionResult(
                    _code(p.error_code), int(p.high_watermark), int(p.log_start_offset),
                    bytes(p.records or b""), diverging_epoch)
        return results

    async def _offsets_for_leader_epoch(self, connection: KafkaConnection, plan: OffsetsForLeaderEpochPlan) -> dict:
        topics: dict[str, list] = {}
        for tp, p in plan.partitions.items():
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": p.current_leader_epoch,
                "leader_epoch": p.leader_epoch})
        response = await connection.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": plan.replica_id,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]},
            timeout_s=REPLICA_SOCKET_TIMEOUT_S)
        return {TopicPartition(topic.topic, int(p.partition)): EpochEndOffset(
                    _code(p.error_code), int(p.leader_epoch), int(p.end_offset))
                for topic in response.topics for p in topic.partitions}

    async def _list_offsets(self, connection: KafkaConnection, plan: ListOffsetsPlan) -> dict:
        answers = {}
        for timestamp in (-2, -1):
            topics: dict[str, list] = {}
            for tp, epoch in plan.partitions.items():
                topics.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "current_leader_epoch": epoch, "timestamp": timestamp})
            response = await connection.request(ApiKey.LIST_OFFSETS, {
                "replica_id": plan.replica_id, "isolation_level": 0, "timeout": 30_000,
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]},
                timeout_s=REPLICA_SOCKET_TIMEOUT_S)
            for topic in response.topics:
                for p in topic.partitions:
                    answers[(TopicPartition(topic.name, int(p.partition_index)), timestamp)] = (
                        _code(p.error_code), int(p.offset))
        results = {}
        for tp in plan.partitions:
            start_error, start = answers.get((tp, -2), (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
            end_error, end = answers.get((tp, -1), (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
            error = start_error if start_error != ErrorCode.NONE else end_error
            results[tp] = LeaderOffsets(error, start, end)
        return results
