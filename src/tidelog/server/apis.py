"""Kafka client APIs, written once for every version (Kafka's ``KafkaApis``).

Theory of operation. Each handler reads a decoded kio request by field name
(``getattr`` with a default for fields a version lacks), asks the metadata
image, the replica manager or the controller, and returns a plain dict holding
every field it knows (protocol.codec keeps what the version has). Handlers that
must wait (acks=all produce, fetch with max wait) return an awaitable.

Produce and Fetch only translate: the kio request becomes a domain request,
the request layer (``tidelog.broker.requests``, which the simulator runs too)
decides what it means, and its answer becomes the response dict.

Topics are addressed by name up to a version and by id after (KIP-516); both
are resolved through the current metadata image, never cached here. All topic
and partition state comes from the image; every change goes to the controller.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable

from tidelog.metadata.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from tidelog.server.authorized_operations import authorized_operations
from tidelog.server.authorized_operations import requested as requested_operations
from tidelog.broker.node import BrokerNode
from tidelog.broker.requests.fetch import ClientMetadata, FetchRequest, FetchRequests
from tidelog.broker.requests.produce import ProduceRequest, ProduceRequests
from tidelog.controller.topics import validate_topic_name
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ZERO_UUID, millis
from tidelog.replication.delayed import FetchPartitionRequest
from tidelog.replication.fetch_session import ContextKind, FetchContext, FetchManager, FetchSessionCache
from tidelog.replication.fetcher import OffsetsForLeaderEpochPartition
from tidelog.replication.partition import Isolation
from tidelog.replication.replica_manager import DEBUGGING_REPLICA_ID

logger = logging.getLogger("tidelog.apis")

LATEST_TIMESTAMP = -1


def _uuid(value) -> uuid.UUID | None:
    return None if value in (None, ZERO_UUID) else value


@dataclass
class ApiContext:
    """What the client APIs may see of the process that serves them."""

    node: BrokerNode                                     # the image and the replica manager
    cluster_id: str
    controller_id: int                                   # named in Metadata / DescribeCluster
    listener_name: str
    auto_create_topics: Callable[[list[str]], dict]      # name → error code (auto.create.topics.enable)
    next_producer_id: Callable[[], Awaitable[int]]
    # ACLs (server/authorization.py RequestAuthorizer); None: nothing is checked.
    authorizer: object | None = None


def _replica(request) -> tuple[int, int]:
    """(replica id, broker epoch) of a Fetch: ``replica_state`` from v15, else ``replica_id``."""
    replica_state = getattr(request, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id), int(replica_state.replica_epoch)
    return int(getattr(request, "replica_id", -1)), -1


def _produce_response(responses: dict, topic_keys: dict) -> dict:
    """Per-partition answers grouped by topic, named as the client named them."""
    by_topic: dict[str, list] = {}
    for tp, response in responses.items():
        by_topic.setdefault(tp.topic, []).append({"index": tp.partition, **response})
    return {"throttle_time": 0, "responses": [
        {"name": topic_keys.get(topic, (topic, None))[0] or topic,
         "topic_id": topic_keys.get(topic, (None, None))[1] or ZERO_UUID,
         "partition_responses": partitions} for topic, partitions in by_topic.items()]}


class KafkaApis:
    def __init__(self, context: ApiContext):
        self.context = context
        # The request layer: ``produce.txn`` is set once the transaction APIs exist.
        self.produce = ProduceRequests(context.node, None)
        self.fetch = FetchRequests(context.node)
        self.fetch_sessions = FetchManager(FetchSessionCache(
            context.node.config["max.incremental.fetch.session.cache.slots"],
            rng=random.Random(int.from_bytes(os.urandom(8), "big"))))

    def register(self, dispatcher) -> None:
        dispatcher.register(ApiKey.PRODUCE, self.handle_produce, 3, 13)
        dispatcher.register(ApiKey.FETCH, self.handle_fetch, 4, 18)
        dispatcher.register(ApiKey.LIST_OFFSETS, self.handle_list_offsets, 1, 11)
        dispatcher.register(ApiKey.METADATA, self.handle_metadata, 0, 13)
        dispatcher.register(ApiKey.DELETE_RECORDS, self.handle_delete_records, 0, 2)
        dispatcher.register(ApiKey.OFFSET_FOR_LEADER_EPOCH, self.handle_offset_for_leader_epoch, 2, 4)
        dispatcher.register(ApiKey.DESCRIBE_CLUSTER, self.handle_describe_cluster, 0, 2)
        dispatcher.register(ApiKey.INIT_PRODUCER_ID, self.handle_init_producer_id, 0, 5)
        dispatcher.register(ApiKey.DESCRIBE_LOG_DIRS, self.handle_describe_log_dirs, 1, 4)
        dispatcher.register(ApiKey.ALTER_REPLICA_LOG_DIRS, self.handle_alter_replica_log_dirs, 1, 2)

    # ---------------------------------------------------------------- helpers

    @property
    def image(self):
        return self.context.node.image

    @property
    def replica_manager(self):
        return self.context.node.replica_manager

    def _topic_name(self, topic) -> tuple[str | None, uuid.UUID | None]:
        """(name, id) of a request's topic entry, whichever it carries."""
        topic_id = _uuid(getattr(topic, "topic_id", None))
        name = getattr(topic, "name", None) or getattr(topic, "topic", None)
        if not name and topic_id is not None:
            name = self.image.topic_name(topic_id)
        if name and topic_id is None:
            image_topic = self.image.topic(name)
            topic_id = image_topic.topic_id if image_topic else None
        return name, topic_id

    def _future(self):
        """A callback/future pair; if the callback runs at once, the dict is returned."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def resolve(value):
            if not future.done():
                future.set_result(value)
        return future, resolve

    # ---------------------------------------------------------------- produce

    def handle_produce(self, header, request):
        """Decode, let the request layer decide (broker/requests/produce.py), encode."""
        produce, topic_keys = self._produce_request(request)
        future, resolve = self._future()
        self.produce.handle_produce(produce, resolve, self.context.authorizer)
        if produce.acks == 0:
            return None
        if future.done():
            return _produce_response(future.result(), topic_keys)

        async def later():
            return _produce_response(await future, topic_keys)
        return later()

    def _produce_request(self, request) -> tuple[ProduceRequest, dict]:
        """The domain request, and each topic's (name, id) as the client named it."""
        records: dict[TopicPartition, bytes] = {}
        refused: dict[TopicPartition, ErrorCode] = {}
        topic_keys: dict[str, tuple[str | None, uuid.UUID | None]] = {}
        for topic in request.topic_data:
            name, topic_id = self._topic_name(topic)
            for data in topic.partition_data:
                tp = TopicPartition(name or "", int(data.index))
                topic_keys[tp.topic] = (getattr(topic, "name", None), topic_id)
                if name is None:
                    refused[tp] = (ErrorCode.UNKNOWN_TOPIC_ID if topic_id or hasattr(topic, "topic_id")
                                   else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    records[tp] = data.records if data.records else b""
        return ProduceRequest(int(request.acks), millis(request.timeout), records,
                              getattr(request, "transactional_id", None), refused,
                              add_partitions=request.__version__ >= 12,
                              transaction_abortable=request.__version__ >= 11), topic_keys

    # ------------------------------------------------------------------ fetch

    def handle_fetch(self, header, request):
        """Decode, let the request layer read (broker/requests/fetch.py), encode."""
        error = self._fetch_refused(request)
        if error is not None:
            return {"throttle_time": 0, "error_code": int(error), "session_id": 0, "responses": []}
        fetch, order, unknown, context = self._fetch_request(request, header.api_version)
        if context.kind == ContextKind.SESSION_ERROR:
            return {"throttle_time": 0, "error_code": int(context.error), "session_id": 0, "responses": []}
        # The response is built (its records read) the moment the fetch completes —
        # also when a shutdown completes every waiting fetch just before the logs close.
        future, resolve = self._future()
        self.fetch.handle_fetch(fetch, lambda results: resolve(
            self._fetch_response(results, order, unknown, context)))
        if future.done():
            return future.result()

        async def later():
            return await future
        return later()

    def _fetch_refused(self, request) -> ErrorCode | None:
        """A whole Fetch refused: a replica without CLUSTER_ACTION."""
        authorizer = self.context.authorizer
        if authorizer is not None and _replica(request)[0] >= 0 and not authorizer.allowed(
                AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None

    def _fetch_request(self, request, version: int) -> tuple[FetchRequest, list, list, FetchContext]:
        """The domain request; the partitions in order with their topic ids; the partitions
        refused here (topic, partition, error): unknown topics, topics not readable; the
        fetch session's context (KIP-227, replication/fetch_session.py): an incremental
        Fetch reads every partition of its session, with the requests it cached."""
        replica_id, broker_epoch = _replica(request)
        fetch = FetchRequest(replica_id, millis(request.max_wait), {}, int(request.min_bytes),
                             int(getattr(request, "max_bytes", 0x7FFFFFFF)),
                             int(getattr(request, "isolation_level", 0)), broker_epoch,
                             # KIP-392: from v11 a consumer's Fetch says its rack.
                             ClientMetadata(getattr(request, "rack_id", None) or "", self.context.listener_name)
                             if version >= 11 else None)
        authorizer = self.context.authorizer
        unknown: list[tuple] = []
        order: list[tuple] = []
        readable: dict[str, bool] = {}
        for topic in request.topics:
            name, topic_id = self._topic_name(topic)
            if name is not None and authorizer is not None and replica_id < 0 and name not in readable:
                readable[name] = authorizer.topic_allowed(AclOperation.READ, name)
            for p in topic.partitions:
                index = int(p.partition)
                if name is None or not readable.get(name, True):
                    unknown.append((topic, index, ErrorCode.TOPIC_AUTHORIZATION_FAILED if name is not None
                                    else ErrorCode.UNKNOWN_TOPIC_ID if hasattr(topic, "topic_id")
                                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                tp = TopicPartition(name, index)
                order.append((tp, topic_id))
                fetch.partitions[tp] = FetchPartitionRequest(
                    fetch_offset=int(p.fetch_offset), max_bytes=int(p.partition_max_bytes),
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    last_fetched_epoch=int(getattr(p, "last_fetched_epoch", -1)),
                    log_start_offset=int(getattr(p, "log_start_offset", -1)))
        forgotten = []
        for topic in getattr(request, "forgotten_topics_data", None) or []:
            name, _ = self._topic_name(topic)
            if name is not None:
                forgotten += [TopicPartition(name, int(index)) for index in topic.partitions]
        context = self.fetch_sessions.new_context(
            version, int(getattr(request, "session_id", 0)), int(getattr(request, "session_epoch", -1)),
            replica_id >= 0, {tp: (topic_id, fetch.partitions[tp]) for tp, topic_id in order}, forgotten,
            self.replica_manager.clock.monotonic_ms())
        fetch.partitions = {tp: partition for tp, (_, partition) in context.partitions.items()}
        order = [(tp, topic_id) for tp, (topic_id, _) in context.partitions.items()]
        return fetch, order, unknown, context

    def _fetch_response(self, results: dict, order: list, unknown: list, context: FetchContext) -> dict:
        quiet = context.quiet(results)          # an incremental session leaves these out
        entries = {tp: self.fetch.partition_response(tp, results[tp]) for tp, _ in order if tp not in quiet}
        error, session_id, send = context.respond(entries, self.replica_manager.clock.monotonic_ms())
        if error != ErrorCode.NONE:
            return {"throttle_time": 0, "error_code": int(error), "session_id": session_id, "responses": []}
        topic_ids = dict(order)
        responses: dict[tuple, list] = {}
        for tp in send:
            responses.setdefault((tp.topic, topic_ids[tp]), []).append(entries[tp])
        topics = [{"topic": name, "topic_id": topic_id or ZERO_UUID, "partitions": parts}
                  for (name, topic_id), parts in responses.items()]
        for topic, index, error in unknown:
            topics.append({"topic": getattr(topic, "topic", ""), "topic_id": getattr(topic, "topic_id", ZERO_UUID),
                           "partitions": [{"partition_index": index, "error_code": int(error),
                               "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                               "preferred_read_replica": -1, "records": b""}]})
        return {"throttle_time": 0, "error_code": 0, "session_id": session_id, "responses": topics}

    # ----------------------------------------------------------- list offsets

    def handle_list_offsets(self, header, request):
        replica_id = int(getattr(request, "replica_id", -1))
        read_committed = int(getattr(request, "isolation_level", 0)) == 1
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                entry = {"partition_index": tp.partition, "error_code": 0, "timestamp": -1,
                         "offset": -1, "leader_epoch": -1}
                if self.context.authorizer is not None and not self.context.authorizer.topic_allowed(
                        AclOperation.DESCRIBE, topic.name):
                    entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    partitions.append(entry)
                    continue
                entry.update(self._list_offset(tp, int(p.timestamp),
                                               int(getattr(p, "current_leader_epoch", -1)),
                                               replica_id, read_committed))
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    def _list_offset(self, tp: TopicPartition, timestamp: int, current_leader_epoch: int,
                     replica_id: int, read_committed: bool) -> dict:
        if replica_id == DEBUGGING_REPLICA_ID and read_committed and timestamp == LATEST_TIMESTAMP:
            # tidelog's debugging view (tidelog topics describe): this replica's own
            # high watermark, leader or follower. Kafka ignores isolation for -2.
            partition = self.replica_manager.get_partition(tp)
            if partition is None:
                return {"error_code": int(self.replica_manager.partition_error(tp))}
            return {"timestamp": -1, "offset": partition.log.high_watermark, "leader_epoch": partition.leader_epoch}
        isolation = Isolation.TXN_COMMITTED if read_committed else Isolation.HIGH_WATERMARK
        error, found_timestamp, offset, epoch = self.replica_manager.fetch_offset_for_timestamp(
            tp, timestamp, replica_id, isolation, current_leader_epoch)
        if error != ErrorCode.NONE:
            return {"error_code": int(error)}
        return {"timestamp": found_timestamp, "offset": offset, "leader_epoch": epoch}

    # ------------------------------------------------- offset for leader epoch

    def handle_offset_for_leader_epoch(self, header, request):
        """Where each asked epoch ends on this leader — the same rules a simulated
        follower's request meets (ReplicaManager.last_offset_for_leader_epoch)."""
        asked = {TopicPartition(topic.topic, int(p.partition)): OffsetsForLeaderEpochPartition(
                     int(getattr(p, "current_leader_epoch", -1)), int(p.leader_epoch))
                 for topic in request.topics for p in topic.partitions}
        answers = self.replica_manager.last_offset_for_leader_epoch(asked)
        topics: dict[str, list] = {}
        for topic in request.topics:
            partitions = topics.setdefault(topic.topic, [])
            for p in topic.partitions:
                answer = answers[TopicPartition(topic.topic, int(p.partition))]
                partitions.append({"partition": int(p.partition), "error_code": int(answer.error),
                                   "leader_epoch": answer.leader_epoch, "end_offset": answer.end_offset})
        return {"throttle_time": 0, "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]}

    # --------------------------------------------------------- delete records

    def handle_delete_records(self, header, request):
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                code, low_watermark = self.replica_manager.delete_records(tp, int(p.offset))
                partitions.append({"partition_index": tp.partition, "low_watermark": low_watermark,
                                   "error_code": int(code)})
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    # --------------------------------------------------------------- metadata

    def handle_metadata(self, header, request):
        requested = request.topics
        allow_auto_create = bool(getattr(request, "allow_auto_topic_creation", True))
        if requested is None or (header.api_version == 0 and not requested):
            names = [n for n in self.image.topic_names()]
        else:
            names = []
            for topic in requested:
                name, topic_id = self._topic_name(topic)
                names.append(name if name else topic_id)
        created_errors = {}
        denied: set[str] = set()
        authorizer = self.context.authorizer
        if authorizer is not None:
            allowed = {n for n in names if isinstance(n, str) and authorizer.topic_allowed(AclOperation.DESCRIBE, n)}
            if requested is None or (header.api_version == 0 and not requested):
                names = [n for n in names if n in allowed]          # the others are not listed at all
            else:
                denied = {n for n in names if isinstance(n, str) and n not in allowed}
        missing = [n for n in names if isinstance(n, str) and not self.image.contains_topic(n) and n not in denied]
        if missing and allow_auto_create and requested is not None:
            if authorizer is not None and not authorizer.allowed(AclOperation.CREATE, ResourceType.CLUSTER,
                                                                 CLUSTER_NAME):
                for n in [n for n in missing if not authorizer.topic_allowed(AclOperation.CREATE, n)]:
                    created_errors[n] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    missing.remove(n)
            if missing:
                created_errors.update(self.context.auto_create_topics(missing))
        for n in denied:
            created_errors[n] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        topics = [self._topic_metadata(name, created_errors, name in denied) for name in names]
        if getattr(request, "include_topic_authorized_operations", False):     # KIP-430
            for topic in topics:        # a refused topic keeps "not provided", as Kafka's
                if topic["name"] is not None and topic["error_code"] != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    topic["topic_authorized_operations"] = authorized_operations(
                        authorizer, ResourceType.TOPIC, topic["name"])
        return {"throttle_time": 0, "brokers": self._broker_list(), "cluster_id": self.context.cluster_id,
                "controller_id": self.context.controller_id, "topics": topics,
                "cluster_authorized_operations": requested_operations(
                    getattr(request, "include_cluster_authorized_operations", False), authorizer,
                    ResourceType.CLUSTER)}

    def _broker_list(self) -> list[dict]:
        listener = self.context.listener_name
        out = []
        for registration in self.image.alive_brokers():
            for endpoint in registration.endpoints:
                if endpoint.name == listener:
                    out.append({"node_id": registration.broker_id, "host": endpoint.host,
                                "port": endpoint.port, "rack": registration.rack})
        return out

    def _topic_metadata(self, name, created_errors: dict, denied: bool = False) -> dict:
        if denied:
            return {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "name": name, "topic_id": ZERO_UUID,
                    "is_internal": False, "partitions": [], "topic_authorized_operations": -2147483648}
        if isinstance(name, uuid.UUID) or name is None:
            return {"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "name": None,
                    "topic_id": name or ZERO_UUID, "is_internal": False, "partitions": [],
                    "topic_authorized_operations": -2147483648}
        topic = self.image.topic(name)
        if topic is None:
            # Not created here: a name no topic may have is INVALID_TOPIC_EXCEPTION (Kafka's).
            unknown = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if validate_topic_name(name).is_success
                       else ErrorCode.INVALID_TOPIC_EXCEPTION)
            code = created_errors.get(name, unknown)
            return {"error_code": int(code), "name": name, "topic_id": ZERO_UUID, "is_internal": False,
                    "partitions": [], "topic_authorized_operations": -2147483648}
        partitions = []
        for index in sorted(topic.partitions):
            registration = topic.partitions[index]
            alive = [r for r in registration.replicas if self.image.is_alive(r)]
            leader_alive = registration.leader >= 0 and self.image.is_alive(registration.leader)
            partitions.append({
                "error_code": int(ErrorCode.NONE if leader_alive else ErrorCode.LEADER_NOT_AVAILABLE),
                "partition_index": index, "leader_id": registration.leader if leader_alive else -1,
                "leader_epoch": registration.leader_epoch, "replica_nodes": list(registration.replicas),
                "isr_nodes": list(registration.isr),
                "offline_replicas": [r for r in registration.replicas if r not in alive]})
        return {"error_code": 0, "name": name, "topic_id": topic.topic_id,
                "is_internal": name.startswith("__"), "partitions": partitions,
                "topic_authorized_operations": -2147483648}

    # -------------------------------------------------------- producer ids

    def handle_init_producer_id(self, header, request):
        """A fresh producer id for an idempotent, non-transactional producer (its
        batches are deduplicated per partition: docs/storage.md, "Idempotent
        producers"); transactional ids are refused until transactions exist."""
        if getattr(request, "transactional_id", None):
            return {"throttle_time": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                    "producer_id": -1, "producer_epoch": -1}
        async def allocate():
            try:
                producer_id = await self.context.next_producer_id()
            except (RuntimeError, OSError, ConnectionError, asyncio.TimeoutError):
                return {"throttle_time": 0, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                        "producer_id": -1, "producer_epoch": -1}
            return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
        return allocate()

    # -------------------------------------------------------- describe log dirs

    def handle_describe_log_dirs(self, header, request):
        """Per log directory: its partitions' sizes and offset lag (a current replica's
        log end offset behind its high watermark, 0 for a leader; a future replica's —
        ``is_future_key`` — behind its current replica's), and the disk's total and
        usable bytes (v4). A null topic list asks for every partition."""
        asked = None if request.topics is None else {
            TopicPartition(t.topic, int(p)) for t in request.topics for p in t.partitions}
        logs = self.replica_manager.log_manager
        results = []
        for log_dir in logs.log_dirs:
            entry = {"error_code": 0, "log_dir": log_dir, "topics": [], "total_bytes": -1, "usable_bytes": -1}
            if log_dir in logs.offline_dirs:
                entry["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
                results.append(entry)
                continue
            by_topic: dict[str, list] = {}
            for tp, log_ in sorted(logs.logs_in_dir(log_dir).items()):
                if asked is not None and tp not in asked:
                    continue
                partition = self.replica_manager.get_partition(tp)
                lag = 0 if partition is None or partition.is_leader else max(
                    0, log_.high_watermark - log_.log_end_offset)
                by_topic.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "partition_size": log_.size_bytes,
                    "offset_lag": lag, "is_future_key": False})
            for tp, future in sorted(logs.futures_in_dir(log_dir).items()):
                current = logs.get_log(tp)
                if (asked is not None and tp not in asked) or current is None:
                    continue
                by_topic.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition, "partition_size": future.log.size_bytes,
                    "offset_lag": future.offset_lag(current), "is_future_key": True})
            entry["topics"] = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
            try:
                disk = os.statvfs(log_dir)
                entry["total_bytes"], entry["usable_bytes"] = disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize
            except OSError:
                pass
            results.append(entry)
        return {"throttle_time": 0, "error_code": 0, "results": results}

    # -------------------------------------------------- alter replica log dirs

    def handle_alter_replica_log_dirs(self, header, request):
        """Move replicas of this broker to other log directories (Kafka's rules:
        ``LogManager.alter_log_dir``). ALTER on the cluster is checked before
        (server/authorization.py); a later entry for a partition wins, as in Kafka."""
        dirs: dict[TopicPartition, str] = {}
        for entry in request.dirs:
            for topic in entry.topics:
                for index in topic.partitions:
                    dirs[TopicPartition(topic.name, int(index))] = entry.path
        answers = self.context.node.alter_replica_log_dirs(dirs)
        by_topic: dict[str, list] = {}
        for tp, code in answers.items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": int(code)})
        return {"throttle_time": 0, "results": [{"topic_name": name, "partitions": parts}
                                                for name, parts in by_topic.items()]}

    # -------------------------------------------------------- describe cluster

    def handle_describe_cluster(self, header, request):
        listener = self.context.listener_name
        brokers = []
        for broker_id in sorted(self.image.brokers):
            registration = self.image.brokers[broker_id]
            if registration.fenced and not getattr(request, "include_fenced_brokers", False):
                continue
            for endpoint in registration.endpoints:
                if endpoint.name == listener:
                    brokers.append({"broker_id": broker_id, "host": endpoint.host, "port": endpoint.port,
                                    "rack": registration.rack, "is_fenced": registration.fenced})
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
                "cluster_id": self.context.cluster_id, "controller_id": self.context.controller_id,
                "brokers": brokers, "cluster_authorized_operations": requested_operations(
                    request.include_cluster_authorized_operations, self.context.authorizer, ResourceType.CLUSTER)}
