"""Kafka client APIs, written once for every version (Kafka's ``KafkaApis``).

Theory of operation. Each handler reads a decoded kio request by field name
(``getattr`` with a default for fields a version lacks), asks the metadata
image, the replica manager or the controller, and returns a plain dict holding
every field it knows (protocol.codec keeps what the version has). Handlers that
must wait (acks=all produce, fetch with max wait) return an awaitable.

Topics are addressed by name up to a version and by id after (KIP-516); both
are resolved through the current metadata image, never cached here. All topic
and partition state comes from the image; every change goes to the controller.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.codec import ZERO_UUID, millis
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.partition import Isolation

if TYPE_CHECKING:
    from tidelog.server.broker import Broker

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CLUSTER = 21, 22, 23, 60

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP = -4, -5
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


def _uuid(value) -> uuid.UUID | None:
    return None if value in (None, ZERO_UUID) else value


class KafkaApis:
    def __init__(self, broker: "Broker"):
        self.broker = broker

    def register(self, dispatcher) -> None:
        dispatcher.register(PRODUCE, self.handle_produce, 3, 13)
        dispatcher.register(FETCH, self.handle_fetch, 4, 18)
        dispatcher.register(LIST_OFFSETS, self.handle_list_offsets, 1, 11)
        dispatcher.register(METADATA, self.handle_metadata, 0, 13)
        dispatcher.register(DELETE_RECORDS, self.handle_delete_records, 0, 2)
        dispatcher.register(OFFSET_FOR_LEADER_EPOCH, self.handle_offset_for_leader_epoch, 2, 4)
        dispatcher.register(DESCRIBE_CLUSTER, self.handle_describe_cluster, 0, 2)
        dispatcher.register(INIT_PRODUCER_ID, self.handle_init_producer_id, 0, 5)

    # ---------------------------------------------------------------- helpers

    @property
    def image(self):
        return self.broker.image

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
        acks = int(request.acks)
        entries: dict[TopicPartition, bytes] = {}
        errors: dict[TopicPartition, ErrorCode] = {}
        topic_keys: dict[str, tuple[str | None, uuid.UUID | None]] = {}
        for topic in request.topic_data:
            name, topic_id = self._topic_name(topic)
            for data in topic.partition_data:
                tp = TopicPartition(name or "", int(data.index))
                topic_keys[tp.topic] = (getattr(topic, "name", None), topic_id)
                if name is None:
                    errors[tp] = (ErrorCode.UNKNOWN_TOPIC_ID if topic_id or hasattr(topic, "topic_id")
                                  else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif not data.records:
                    errors[tp] = ErrorCode.CORRUPT_MESSAGE
                else:
                    entries[tp] = data.records
        future, resolve = self._future()
        self.broker.replica_manager.append_records(acks, millis(request.timeout), entries, resolve)

        def build(responses: dict) -> dict | None:
            if acks == 0:
                return None
            by_topic: dict[str, list] = {}
            for tp, code in errors.items():
                by_topic.setdefault(tp.topic, []).append(
                    {"index": tp.partition, "error_code": int(code), "base_offset": -1,
                     "log_append_time": -1, "log_start_offset": -1})
            for tp, response in responses.items():
                by_topic.setdefault(tp.topic, []).append({"index": tp.partition, **response})
            return {"throttle_time": 0, "responses": [
                {"name": topic_keys.get(topic, (topic, None))[0] or topic,
                 "topic_id": topic_keys.get(topic, (None, None))[1] or ZERO_UUID,
                 "partition_responses": partitions} for topic, partitions in by_topic.items()]}

        if future.done():
            return build(future.result())
        if acks == 0:
            return None

        async def later():
            return build(await future)
        return later()

    # ------------------------------------------------------------------ fetch

    def handle_fetch(self, header, request):
        controller_server = getattr(self.broker, "controller_server", None)
        if controller_server is not None and any(
                getattr(t, "topic", None) == METADATA_TOPIC for t in request.topics):
            return controller_server.handle_metadata_fetch(header, request)
        replica_state = getattr(request, "replica_state", None)
        replica_id = int(replica_state.replica_id if replica_state is not None
                         else getattr(request, "replica_id", -1))
        broker_epoch = int(replica_state.replica_epoch) if replica_state is not None else -1
        session_id = int(getattr(request, "session_id", 0))
        if session_id != 0:
            return {"throttle_time": 0, "error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                    "session_id": 0, "responses": []}
        params = FetchParams(
            replica_id=replica_id, max_wait_ms=millis(request.max_wait), min_bytes=int(request.min_bytes),
            max_bytes=int(getattr(request, "max_bytes", 0x7FFFFFFF)),
            isolation=Isolation.TXN_COMMITTED if int(getattr(request, "isolation_level", 0)) == 1
            else Isolation.HIGH_WATERMARK,
            broker_epoch=broker_epoch)
        unknown: list[tuple] = []
        order: list[tuple] = []
        for topic in request.topics:
            name, topic_id = self._topic_name(topic)
            for p in topic.partitions:
                index = int(p.partition)
                if name is None:
                    unknown.append((topic, index))
                    continue
                tp = TopicPartition(name, index)
                order.append((tp, topic_id))
                params.partitions[tp] = FetchPartitionRequest(
                    fetch_offset=int(p.fetch_offset), max_bytes=int(p.partition_max_bytes),
                    current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                    last_fetched_epoch=int(getattr(p, "last_fetched_epoch", -1)),
                    log_start_offset=int(getattr(p, "log_start_offset", -1)))
        future, resolve = self._future()
        self.broker.replica_manager.fetch_messages(params, resolve)

        def build(results: dict) -> dict:
            responses: dict[tuple, list] = {}
            for tp, topic_id in order:
                result = results[tp]
                partition = self.broker.replica_manager.get_partition(tp)
                entry = {
                    "partition_index": tp.partition, "error_code": int(result.error),
                    "high_watermark": result.high_watermark, "last_stable_offset": result.last_stable_offset,
                    "log_start_offset": result.log_start_offset, "preferred_read_replica": -1,
                    "aborted_transactions": None if params.isolation != Isolation.TXN_COMMITTED else [],
                    "records": self.broker.read_bytes(result.records),
                    "diverging_epoch": {"epoch": -1, "end_offset": -1},
                    "current_leader": {"leader_id": -1, "leader_epoch": -1},
                    "snapshot_id": {"end_offset": -1, "epoch": -1},
                }
                if result.diverging_epoch is not None:
                    entry["diverging_epoch"] = {"epoch": result.diverging_epoch[0],
                                                "end_offset": result.diverging_epoch[1]}
                if result.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                    registration = self.image.partition(tp)
                    if registration is not None:
                        entry["current_leader"] = {"leader_id": registration.leader,
                                                   "leader_epoch": registration.leader_epoch}
                elif partition is not None:
                    entry["current_leader"] = {"leader_id": partition.leader,
                                               "leader_epoch": partition.leader_epoch}
                responses.setdefault((tp.topic, topic_id), []).append(entry)
            topics = [{"topic": name, "topic_id": topic_id or ZERO_UUID, "partitions": parts}
                      for (name, topic_id), parts in responses.items()]
            for topic, index in unknown:
                topics.append({"topic": getattr(topic, "topic", ""), "topic_id": getattr(topic, "topic_id", ZERO_UUID),
                               "partitions": [{"partition_index": index, "error_code": int(
                                   ErrorCode.UNKNOWN_TOPIC_ID if hasattr(topic, "topic_id")
                                   else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                   "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                                   "preferred_read_replica": -1, "records": b""}]})
            return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": topics}

        if future.done():
            return build(future.result())

        async def later():
            return build(await future)
        return later()

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
                entry.update(self._list_offset(tp, int(p.timestamp),
                                               int(getattr(p, "current_leader_epoch", -1)),
                                               replica_id, read_committed))
                partitions.append(entry)
            topics.append({"name": topic.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    def _list_offset(self, tp: TopicPartition, timestamp: int, current_leader_epoch: int,
                     replica_id: int, read_committed: bool) -> dict:
        partition = self.broker.replica_manager.get_partition(tp)
        if partition is None:
            return {"error_code": int(self.broker.replica_manager.partition_error(tp))}
        if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
            code = (ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < partition.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
            return {"error_code": int(code)}
        if replica_id != DEBUGGING_REPLICA_ID and not partition.is_leader:
            return {"error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)}
        log = partition.log
        is_client = replica_id == CONSUMER_REPLICA_ID
        bound = log.high_watermark if is_client else log.log_end_offset
        if replica_id == DEBUGGING_REPLICA_ID and read_committed and timestamp == LATEST_TIMESTAMP:
            # tidelog's debugging view (tidelog topics describe): this replica's own
            # high watermark, leader or follower. Kafka ignores isolation for -2.
            return {"timestamp": -1, "offset": log.high_watermark, "leader_epoch": partition.leader_epoch}
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            offset = log.log_start_offset
        elif timestamp in (LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
            offset = bound
        else:
            found = log.fetch_offset_by_timestamp(timestamp)
            if found is None or found[0] >= bound:
                return {"timestamp": -1, "offset": -1, "leader_epoch": -1}
            offset, ts, epoch = found
            return {"timestamp": ts, "offset": offset, "leader_epoch": epoch}
        epoch = log.leader_epoch_cache.epoch_for_offset(offset) if offset < log.log_end_offset else partition.leader_epoch
        return {"timestamp": -1, "offset": offset, "leader_epoch": -1 if epoch is None else epoch}

    # ------------------------------------------------- offset for leader epoch

    def handle_offset_for_leader_epoch(self, header, request):
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, int(p.partition))
                entry = {"partition": tp.partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
                partition = self.broker.replica_manager.get_partition(tp)
                current = int(getattr(p, "current_leader_epoch", -1))
                if partition is None:
                    entry["error_code"] = int(self.broker.replica_manager.partition_error(tp))
                elif current >= 0 and current < partition.leader_epoch:
                    entry["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH)
                elif current > partition.leader_epoch:
                    entry["error_code"] = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
                elif not partition.is_leader:
                    entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    epoch, end_offset = partition.log.end_offset_for_epoch(int(p.leader_epoch))
                    entry.update(leader_epoch=epoch, end_offset=end_offset)
                partitions.append(entry)
            topics.append({"topic": topic.topic, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    # --------------------------------------------------------- delete records

    def handle_delete_records(self, header, request):
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                code, low_watermark = self.broker.replica_manager.delete_records(tp, int(p.offset))
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
        missing = [n for n in names if isinstance(n, str) and not self.image.contains_topic(n)]
        if missing and allow_auto_create and requested is not None:
            created_errors = self.broker.auto_create_topics(missing)
        topics = [self._topic_metadata(name, created_errors) for name in names]
        return {"throttle_time": 0, "brokers": self._broker_list(), "cluster_id": self.broker.cluster_id,
                "controller_id": self.broker.controller_id, "topics": topics,
                "cluster_authorized_operations": -2147483648}

    def _broker_list(self) -> list[dict]:
        listener = self.broker.listener_name
        out = []
        for registration in self.image.alive_brokers():
            for endpoint in registration.endpoints:
                if endpoint.name == listener:
                    out.append({"node_id": registration.broker_id, "host": endpoint.host,
                                "port": endpoint.port, "rack": registration.rack})
        return out

    def _topic_metadata(self, name, created_errors: dict) -> dict:
        if isinstance(name, uuid.UUID) or name is None:
            return {"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "name": None,
                    "topic_id": name or ZERO_UUID, "is_internal": False, "partitions": [],
                    "topic_authorized_operations": -2147483648}
        topic = self.image.topic(name)
        if topic is None:
            code = created_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
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
        """A fresh producer id for an idempotent, non-transactional producer.

        tidelog does not yet check sequence numbers (ROADMAP step 8), so a retried
        batch may still be written twice; transactions are refused."""
        if getattr(request, "transactional_id", None):
            return {"throttle_time": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                    "producer_id": -1, "producer_epoch": -1}
        async def allocate():
            try:
                producer_id = await self.broker.next_producer_id()
            except (RuntimeError, OSError, ConnectionError, asyncio.TimeoutError):
                return {"throttle_time": 0, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                        "producer_id": -1, "producer_epoch": -1}
            return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
        return allocate()

    # -------------------------------------------------------- describe cluster

    def handle_describe_cluster(self, header, request):
        listener = self.broker.listener_name
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
                "cluster_id": self.broker.cluster_id, "controller_id": self.broker.controller_id,
                "brokers": brokers, "cluster_authorized_operations": -2147483648}
