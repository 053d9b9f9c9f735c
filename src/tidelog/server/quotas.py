"""Client quotas applied to requests: the dispatcher's side of broker/quotas.py.

Theory of operation. The dispatcher calls ``QuotaEnforcer`` twice per request:

* ``before``: a consumer's Fetch asks for at most what its quota lets one
  request take (``consumer_byte_rate`` × (``quota.window.num`` - 1) windows),
  as Kafka caps ``fetch.max.bytes`` — else a large fetch would be throttled,
  answered empty and asked again forever;
* ``after``, with the answer: the client's usage is recorded (a Produce's request
  bytes, a consumer Fetch's record bytes, the handling time of any request) and
  the largest throttle time earned is written into the answer's
  ``throttle_time_ms``; the connection is then muted for that long (the
  listener reads nothing more from it, network.Connection.mute), so a client
  that ignores the field is slowed all the same. A throttled Fetch is answered
  with no records and its bytes are taken back from the usage (Kafka's
  ``getThrottledResponse``): they will be fetched again — unless it belongs to a
  fetch session (KIP-227), whose cache already counts the data as sent: that one
  keeps its records and is held back by the mute alone.

The node's own traffic is exempt: a follower's Fetch and the broker-to-controller
APIs. Quotas are taken from the node's current metadata image on each request
(a cheap identity check when nothing changed). The user of a quota is the
connection's principal name (``User:alice`` → ``alice``; ``ANONYMOUS`` on a
listener without authentication), the client id the request header's.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
from typing import Callable, NamedTuple

from tidelog.broker.quotas import ClientQuotaManager, ClientQuotas
from tidelog.core.clock import Clock
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import classify_field, millis, to_entity
from tidelog.server.refusals import refusal, response_array

PERCENT_PER_MS = 0.1        # request_percentage: 1 ms of handling is 0.1% of one thread for a second

_EXEMPT = frozenset({
    ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION, ApiKey.ASSIGN_REPLICAS_TO_DIRS,
    ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
    ApiKey.FETCH_SNAPSHOT, ApiKey.DESCRIBE_QUORUM, ApiKey.WRITE_TXN_MARKERS, ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS})


def replica_id(fetch_request) -> int:
    state = getattr(fetch_request, "replica_state", None)
    return int(state.replica_id if state is not None else getattr(fetch_request, "replica_id", -1))


def quota_user(principal: str | None) -> str:
    """The user a quota names: the principal's name, without its type."""
    return (principal or "User:ANONYMOUS").partition(":")[2] or "ANONYMOUS"


def fetch_bytes(body) -> int:
    """The record bytes of a Fetch answer (a dict, or a forwarded kio entity)."""
    total = 0
    for topic in _get(body, "responses") or ():
        for partition in _get(topic, "partitions") or ():
            total += len(_get(partition, "records") or b"")
    return total


def _get(item, name):
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


class QuotaEnforcer:
    def __init__(self, quotas: ClientQuotas, clock: Clock, image: Callable[[], object],
                 default_num_partitions: int = 1):
        self.quotas = quotas
        self.clock = clock
        self._image = image                     # the node's current metadata image
        self.default_num_partitions = default_num_partitions     # num.partitions, for CreateTopics' -1
        self.throttled_channels = 0             # connections muted right now (Kafka's queue-size)

    def _client_quotas(self):
        return self._image().client_quotas

    def before(self, header, request, connection):
        if header.api_key != ApiKey.FETCH or replica_id(request) >= 0:
            return request
        self.quotas.on_image(self._client_quotas())
        if not self.quotas.fetch.quotas:
            return request
        limit = self.quotas.fetch.max_value_in_window(quota_user(getattr(connection, "principal", None)),
                                                      header.client_id or "")
        max_bytes = getattr(request, "max_bytes", None)
        if limit is None or max_bytes is None or max_bytes <= limit:
            return request
        return dataclasses.replace(request, max_bytes=max(int(limit), 1))

    def wrap(self, header, request, handler, connection):
        """The handler of a CreateTopics, CreatePartitions or DeleteTopics that counts each
        topic's partitions against ``controller_mutation_rate`` (KIP-599); other requests'
        handler unchanged. From the strict versions on (CreateTopics v6, CreatePartitions v3,
        DeleteTopics v5) a topic asked for while the client is over its quota is refused
        THROTTLING_QUOTA_EXCEEDED; before them every topic is served and only throttled."""
        rule = _MUTATIONS.get(header.api_key)
        if rule is None or getattr(request, "validate_only", False):
            return handler
        self.quotas.on_image(self._client_quotas())
        manager = self.quotas.controller_mutation
        user, client_id = quota_user(getattr(connection, "principal", None)), header.client_id or ""
        if not manager.quotas:
            return handler
        strict = header.api_version >= rule.strict_since

        def counted(header, request):
            image, now_ms = self._image(), self.clock.monotonic_ms()
            arrays = [a for a in rule.arrays if getattr(request, a, None)]
            kept: dict[str, list] = {a: [] for a in arrays}
            refused: dict[str, list] = {a: [] for a in arrays}
            throttle_ms = 0
            for array in arrays:
                for topic in getattr(request, array):
                    if strict and (exceeded := manager.throttle_time_ms(user, client_id, now_ms)):
                        refused[array].append(topic)
                        throttle_ms = max(throttle_ms, exceeded)
                        continue
                    kept[array].append(topic)
                    left = manager.record(user, client_id, rule.permits(self, image, topic), now_ms)
                    if not strict:
                        throttle_ms = max(throttle_ms, left)
            served = handler(header, dataclasses.replace(request, **{a: tuple(t) for a, t in kept.items()}))
            merge = functools.partial(_merge_refused, header, request, refused, throttle_ms)
            if inspect.isawaitable(served):
                return _merge_later(served, merge)
            return merge(served)
        return counted

    def after(self, header, request, request_bytes: int, body, handled_ms: float, connection):
        """Record the request's usage; the answer with its throttle time (muting the connection)."""
        quotas = self.quotas
        quotas.on_image(self._client_quotas())
        if not quotas.enabled:
            return body
        api_key = header.api_key
        if api_key in _EXEMPT or (api_key == ApiKey.FETCH and replica_id(request) >= 0):
            return body
        user, client_id = quota_user(getattr(connection, "principal", None)), header.client_id or ""
        now_ms = self.clock.monotonic_ms()
        throttle_ms = 0
        manager: ClientQuotaManager = quotas.request
        if quotas.request.quotas:
            throttle_ms = quotas.request.record(user, client_id, handled_ms * PERCENT_PER_MS, now_ms)
        bandwidth_ms, fetched = 0, 0
        if api_key == ApiKey.PRODUCE and quotas.produce.quotas:
            bandwidth_ms = quotas.produce.record(user, client_id, request_bytes, now_ms)
            if bandwidth_ms > throttle_ms:
                manager = quotas.produce
        elif api_key == ApiKey.FETCH and body is not None and quotas.fetch.quotas:
            fetched = fetch_bytes(body)
            bandwidth_ms = quotas.fetch.record(user, client_id, fetched, now_ms)
            if bandwidth_ms > throttle_ms:
                manager = quotas.fetch
        throttle_ms = max(throttle_ms, bandwidth_ms)
        mutation_ms = _throttle_of(body)            # set by wrap(): controller_mutation_rate
        if mutation_ms > throttle_ms:
            throttle_ms, manager = mutation_ms, quotas.controller_mutation
        if throttle_ms <= 0:
            return body
        manager.record_throttle(user, client_id, throttle_ms, now_ms)
        mute = getattr(connection, "mute", None)
        if mute is not None:
            mute(throttle_ms, self)
        if body is None:                    # acks=0: no answer, but the connection is muted all the same
            return None
        if api_key == ApiKey.FETCH and not _get(body, "session_id"):
            # A sessionless Fetch over its quota is answered empty and its bytes taken back
            # (Kafka's getThrottledResponse). One in a fetch session keeps its data: the
            # session already counts those partitions as sent (its cached high watermarks),
            # so an empty answer would hide updates; the mute holds the client back instead.
            if fetched:
                quotas.fetch.unrecord(user, client_id, fetched, now_ms)
            body = _with(body, responses=())
        return _with(body, throttle_time=throttle_ms)


class _Mutation(NamedTuple):
    arrays: tuple[str, ...]             # the request arrays of topics
    strict_since: int                   # the first version answering THROTTLING_QUOTA_EXCEEDED
    permits: Callable                   # (enforcer, image, topic) → partitions created or deleted


def _partitions(image, name) -> int:
    topic = image.topic(name) if name else None
    return 0 if topic is None else len(topic.partitions)


def _created(enforcer, image, topic) -> int:
    if topic.assignments:
        return len(topic.assignments)
    return topic.num_partitions if topic.num_partitions > 0 else enforcer.default_num_partitions


def _deleted(enforcer, image, topic) -> int:
    name = topic if isinstance(topic, str) else (topic.name or image.topic_name(topic.topic_id))
    return _partitions(image, name)


_MUTATIONS = {
    ApiKey.CREATE_TOPICS: _Mutation(("topics",), 6, _created),
    ApiKey.CREATE_PARTITIONS: _Mutation(("topics",), 3, lambda e, image, t: max(0, t.count - _partitions(image, t.name))),
    ApiKey.DELETE_TOPICS: _Mutation(("topic_names", "topics"), 5, _deleted),
}
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


def _merge_refused(header, request, refused: dict, throttle_ms: int, served):
    """``served`` (a dict or a forwarded entity) with the refused topics' answers added."""
    for array, topics in refused.items():
        if not topics:
            continue
        field = response_array(header.api_key, array)
        entries = refusal(header, dataclasses.replace(request, **{array: tuple(topics)}),
                          ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE).get(field, [])
        if isinstance(served, dict):
            served = {**served, field: list(served.get(field) or []) + entries}
        else:
            element = next(classify_field(f).type_ for f in dataclasses.fields(served) if f.name == field)
            served = dataclasses.replace(served, **{field: tuple(getattr(served, field)) + tuple(
                to_entity(element, entry) for entry in entries)})
    if throttle_ms > _throttle_of(served):
        served = _with(served, throttle_time=throttle_ms)
    return served


async def _merge_later(served, merge):
    return merge(await served)


def _throttle_of(body) -> int:
    if body is None:
        return 0
    value = _get(body, "throttle_time")
    return 0 if value is None else millis(value)


def _with(body, **fields):
    """``body`` with ``fields`` set (a handler's dict, or a forwarded answer's kio entity)."""
    if isinstance(body, dict):
        return {**body, **fields}
    names = {f.name for f in dataclasses.fields(body)}
    values = {k: (datetime.timedelta(milliseconds=v) if k == "throttle_time" else v)
              for k, v in fields.items() if k in names}
    return dataclasses.replace(body, **values)


class QuotaCollector:
    """The quota metrics of one broker's ``QuotaEnforcer`` (server/metrics.py's QUOTA_METRICS),
    read at scrape time from the managers' sensors."""

    def __init__(self, enforcer: QuotaEnforcer):
        self.enforcer = enforcer

    def describe(self):
        from tidelog.server.metrics import QUOTA_METRICS, _family
        return [_family(name) for name in QUOTA_METRICS]

    def collect(self):
        from tidelog.server.metrics import QUOTA_METRICS, _family
        f = {name: _family(name) for name in QUOTA_METRICS}
        now_ms = self.enforcer.clock.monotonic_ms()
        quotas = self.enforcer.quotas
        for prefix, manager, rate in (("kafka_server_produce", quotas.produce, "byte_rate"),
                                      ("kafka_server_fetch", quotas.fetch, "byte_rate"),
                                      ("kafka_server_request", quotas.request, "request_time")):
            manager.expire_sensors(now_ms)
            for (user, client_id), sensors in sorted(manager.sensors.items()):
                f[f"{prefix}_{rate}"].add_metric([user, client_id], sensors.rate.measure(now_ms))
                f[f"{prefix}_throttle_time"].add_metric(
                    [user, client_id], sensors.throttle_time_ms_total / sensors.throttled if sensors.throttled else 0)
        f["kafka_server_produce_queue_size"].add_metric([], self.enforcer.throttled_channels)
        yield from f.values()
