"""Prometheus metrics with Kafka's names: ``GET /metrics`` on ``metrics.port``.

Theory of operation. Kafka publishes its metrics as JMX MBeans, and Prometheus
reads them through the JMX exporter, whose common rules turn
``kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions`` into
``kafka_server_replicamanager_underreplicatedpartitions`` and a ``…PerSec``
meter's count into ``…_total``. tidelog serves the same names directly, so the
dashboards and alerts written for Kafka read a tidelog cluster unchanged
(docs/observability.md has the table).

Almost everything is read at scrape time. ``BrokerCollector.collect()`` walks the
live state of the ``BrokerNode`` — the replica manager's partitions, the log
manager's logs, the fetchers' lag, the group coordinator's committed offsets —
and ``ControllerCollector`` the controller's metadata image; both run on the
server's event loop, between two inputs, so what one scrape shows is one
consistent moment. Nothing is computed while requests are served, except:

* event counts the core keeps as plain integers (``ReplicaManager.isr_shrinks``,
  ``isr_expands``, ``bytes_in``, ``messages_in``) — the core imports nothing
  from here;
* ``RequestMetrics``, the dispatcher's observer: per request it adds the time
  from decode to the encoded answer (for a delayed Produce or Fetch, to its
  completion) into a fixed-bucket histogram kept per (type, version) as a plain
  list of ints — one dictionary lookup on an int key, a ``bisect`` only past
  the first bucket, two list updates, no lock and no prometheus_client object —
  and, for a consumer's Fetch, the record bytes sent per topic. The request
  counts and each type's histogram are summed from those lists at scrape time.

Each ``Server`` has its own ``CollectorRegistry`` (never the process-global
default one), so several servers in one process (tests) do not mix. ``MetricsHttpServer`` is a minimal HTTP/1.1 server on the same asyncio
loop: it answers ``GET``/``HEAD /metrics`` with the text format Prometheus asks
for (``Accept``: the classic text format or OpenMetrics; written by
server/exposition.py, prometheus_client's bytes at a fifth of its encoders'
cost), anything else with
404 or 405, and closes the connection after each answer. A collector that
raises is answered with 500 and logged; it never touches the broker. The same
server answers ``GET /state`` and ``GET /state-changes`` (server/state.py) with
JSON, through ``routes``.

Who may ask. ``/metrics`` is open to whoever reaches ``metrics.host`` (Prometheus
scrapes it without credentials), which is why that defaults to 127.0.0.1: like
Kafka's JMX port it is for the operator, and it names every topic, ACLs or not.
``/state`` and ``/state-changes`` name the same topics and every broker's epoch;
with ``metrics.state.token.file`` set (``tidelog cluster up --secure`` sets it)
they answer only a request with ``Authorization: Bearer <the file's token>``
(compared in constant time) and 401 to any other, logged without what was sent
(each one, up to a burst; then at most one line per 10 s with a count).
Bound to a loopback address, the server answers only a loopback name as
``Host`` (403 otherwise), so a web page in the operator's browser cannot read it
through DNS rebinding. A request head (request line and headers) is bounded to
``HTTP_REQUEST_MAX_BYTES`` (431 past it) and must arrive within
``HTTP_READ_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
from bisect import bisect_left
from time import perf_counter
from typing import Callable, Iterator
from urllib.parse import parse_qsl

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.replication.partition import Partition
from tidelog.server.exposition import Family, NotRendered, render_metrics
from tidelog.server.network import RateLimitedLog

logger = logging.getLogger("tidelog.metrics")

# Upper bounds (ms) of the request-time histogram's buckets (+Inf after the last).
REQUEST_TIME_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
HTTP_REQUEST_MAX_BYTES = 16 * 1024
HTTP_READ_TIMEOUT_S = 10.0

# Every metric tidelog serves: name (a counter without its _total), type, labels, help.
# The one table describe() answers from and docs/observability.md lists.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {name: (kind, labels, text) for name, kind, labels, text in [
    # kafka.server:type=ReplicaManager
    ("kafka_server_replicamanager_partitioncount", "gauge", (),
     "Partitions hosted by this broker (leader or follower, offline included)"),
    ("kafka_server_replicamanager_leadercount", "gauge", (), "Partitions this broker leads"),
    ("kafka_server_replicamanager_underreplicatedpartitions", "gauge", (),
     "Partitions led here whose ISR is smaller than their replica set"),
    ("kafka_server_replicamanager_underminisrpartitioncount", "gauge", (),
     "Partitions led here whose ISR is below min.insync.replicas"),
    ("kafka_server_replicamanager_atminisrpartitioncount", "gauge", (),
     "Partitions led here whose ISR is exactly min.insync.replicas"),
    ("kafka_server_replicamanager_offlinereplicacount", "gauge", (),
     "Partitions hosted here that are offline (their log directory failed)"),
    ("kafka_server_replicamanager_isrshrinks", "counter", (),
     "ISR shrinks this broker proposed as leader and the controller accepted"),
    ("kafka_server_replicamanager_isrexpands", "counter", (),
     "ISR expands this broker proposed as leader and the controller accepted"),
    # kafka.server:type=KafkaServer
    ("kafka_server_kafkaserver_brokerstate", "gauge", (),
     "Broker state as Kafka numbers it (0 not running, 1 starting, 2 recovery, 3 running, "
     "6 pending controlled shutdown, 7 shutting down)"),
    # kafka.server:type=BrokerTopicMetrics
    ("kafka_server_brokertopicmetrics_bytesin", "counter", ("topic",),
     "Record bytes appended to partitions led here (produce and internal writes)"),
    ("kafka_server_brokertopicmetrics_messagesin", "counter", ("topic",),
     "Records appended to partitions led here"),
    ("kafka_server_brokertopicmetrics_bytesout", "counter", ("topic",),
     "Record bytes sent to consumers in Fetch responses (not to follower replicas)"),
    # kafka.server:type=ReplicaFetcherManager / FetcherLagMetrics
    ("kafka_server_replicafetchermanager_maxlag", "gauge", ("clientId",),
     "Largest lag in records of a partition this broker follows (leader high watermark - fetch offset)"),
    ("kafka_server_fetcherlagmetrics_consumerlag", "gauge", ("clientId", "topic", "partition"),
     "Lag in records of one followed partition, as of its last fetch"),
    # kafka.server:type=LeaderReplication|FollowerReplication,name=byte-rate (replication throttles, KIP-73)
    ("kafka_server_leaderreplication_byte_rate", "gauge", (),
     "Bytes/s this leader sent followers for throttled replicas (against leader.replication.throttled.rate)"),
    ("kafka_server_followerreplication_byte_rate", "gauge", (),
     "Bytes/s this follower fetched for throttled replicas (against follower.replication.throttled.rate)"),
    ("kafka_server_leaderreplication_throttled_partitions", "counter", (),
     "Not Kafka's: partitions a follower's Fetch was answered without records by the leader throttle"),
    ("kafka_server_followerreplication_throttled_partitions", "counter", (),
     "Not Kafka's: partitions this broker's fetchers left out of a Fetch by the follower throttle"),
    # kafka.cluster:type=Partition
    ("kafka_cluster_partition_underreplicated", "gauge", ("topic", "partition"),
     "1 if this broker leads the partition and its ISR is smaller than its replica set"),
    ("kafka_cluster_partition_underminisr", "gauge", ("topic", "partition"),
     "1 if this broker leads the partition and its ISR is below min.insync.replicas"),
    # kafka.log:type=Log / LogManager
    ("kafka_log_log_logendoffset", "gauge", ("topic", "partition"), "Log end offset of the local replica"),
    ("kafka_log_log_logstartoffset", "gauge", ("topic", "partition"), "Log start offset of the local replica"),
    ("kafka_log_log_size", "gauge", ("topic", "partition"), "Bytes of the local replica's segments"),
    ("kafka_log_log_numlogsegments", "gauge", ("topic", "partition"), "Segments of the local replica"),
    ("kafka_log_logmanager_offlinelogdirectorycount", "gauge", (), "Log directories that failed"),
    ("kafka_log_logmanager_writebehind_queued_bytes", "gauge", (),
     "Not Kafka's: bytes of log appends queued for the write-behind thread (tidelog.log.write.behind.max.bytes)"),
    ("kafka_log_logmanager_writebehind_full_waits", "counter", (),
     "Not Kafka's: appends that waited for room in a full write-behind queue (the disk is the bottleneck)"),
    # kafka.network:type=RequestMetrics
    ("kafka_network_requestmetrics_totaltimems", "histogram", ("request",),
     "Time from a request's decode to its encoded response (a delayed one: to completion), ms"),
    ("kafka_network_requestmetrics_requests", "counter", ("request", "version"),
     "Requests answered, by type and version"),
    # kafka.coordinator.group:type=GroupMetadataManager, and kafka_exporter's consumer-group lag
    ("kafka_coordinator_group_groupmetadatamanager_numgroups", "gauge", (),
     "Groups coordinated by this broker (with members or committed offsets)"),
    ("kafka_coordinator_group_groupmetadatamanager_numoffsets", "gauge", (),
     "Committed offsets held by this broker's group coordinator"),
    ("kafka_consumergroup_current_offset", "gauge", ("consumergroup", "topic", "partition"),
     "Committed offset of a group coordinated here"),
    ("kafka_consumergroup_lag", "gauge", ("consumergroup", "topic", "partition"),
     "High watermark - committed offset, for partitions hosted on the coordinator"),
    # kafka.controller:type=KafkaController (controller role only)
    ("kafka_controller_kafkacontroller_activecontrollercount", "gauge", (), "1 on the active controller"),
    ("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge", (), "Partitions without a leader"),
    ("kafka_controller_kafkacontroller_preferredreplicaimbalancecount", "gauge", (),
     "Partitions whose leader is not their preferred (first) replica"),
    ("kafka_controller_kafkacontroller_globaltopiccount", "gauge", (), "Topics in the cluster"),
    ("kafka_controller_kafkacontroller_globalpartitioncount", "gauge", (), "Partitions in the cluster"),
    ("kafka_controller_kafkacontroller_fencedbrokercount", "gauge", (), "Registered brokers that are fenced"),
    ("kafka_controller_kafkacontroller_activebrokercount", "gauge", (), "Registered brokers that are not fenced"),
    # kafka.server:type=raft-metrics (the controller quorum, on controllers)
    ("kafka_server_raft_metrics_current_leader", "gauge", (), "The quorum leader's id (-1: none known)"),
    ("kafka_server_raft_metrics_current_epoch", "gauge", (), "The quorum epoch"),
    ("kafka_server_raft_metrics_current_vote", "gauge", (), "Whom this voter voted for in the epoch (-1: none)"),
    ("kafka_server_raft_metrics_high_watermark", "gauge", (), "The quorum's high watermark (commit index)"),
    ("kafka_server_raft_metrics_log_end_offset", "gauge", (), "This controller's metadata log end offset"),
    # kafka.server:type=Produce|Fetch|Request,user=…,client-id=… (client quotas, server/quotas.py); the
    # labels are the quota entity's (user "" for a client-id quota, client_id "" for a user quota)
    ("kafka_server_produce_byte_rate", "gauge", ("user", "client_id"), "Produce request bytes per second"),
    ("kafka_server_produce_throttle_time", "gauge", ("user", "client_id"),
     "Average ms a throttled Produce was throttled for producer_byte_rate"),
    ("kafka_server_fetch_byte_rate", "gauge", ("user", "client_id"), "Consumer Fetch record bytes per second"),
    ("kafka_server_fetch_throttle_time", "gauge", ("user", "client_id"),
     "Average ms a throttled Fetch was throttled for consumer_byte_rate"),
    ("kafka_server_request_request_time", "gauge", ("user", "client_id"),
     "Request handling time, percent of one thread"),
    ("kafka_server_request_throttle_time", "gauge", ("user", "client_id"),
     "Average ms a throttled request was throttled for request_percentage"),
    ("kafka_server_produce_queue_size", "gauge", (), "Connections muted for a client quota now"),
]}

REQUEST_METRICS = tuple(name for name in METRICS if name.startswith("kafka_network_"))
CONTROLLER_METRICS = tuple(name for name in METRICS if name.startswith(("kafka_controller_",
                                                                          "kafka_server_raft_metrics_")))
QUOTA_METRICS = tuple(name for name in METRICS if name.startswith(("kafka_server_produce_", "kafka_server_fetch_",
                                                                    "kafka_server_request_")))
BROKER_METRICS = tuple(name for name in METRICS if name not in REQUEST_METRICS + CONTROLLER_METRICS + QUOTA_METRICS)

def _family(name: str) -> Metric | Family:
    """An empty family of ``METRICS``: a ``Family`` (rows rendered straight to text,
    server/exposition.py) for a gauge or counter, prometheus_client's for the histogram."""
    kind, labels, text = METRICS[name]
    if kind == "histogram":
        return HistogramMetricFamily(name, text, labels=labels)
    return Family(name, kind, text, labels)


def request_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``): OFFSET_FOR_LEADER_EPOCH → OffsetForLeaderEpoch."""
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


_REQUEST_NAMES = {int(key): request_name(key) for key in ApiKey}


def _replica_id(fetch_request) -> int:
    state = getattr(fetch_request, "replica_state", None)
    return int(state.replica_id if state is not None else getattr(fetch_request, "replica_id", -1))


# ------------------------------------------------------------------ requests

_FETCH = int(ApiKey.FETCH)
_FIRST_BOUND = REQUEST_TIME_BUCKETS_MS[0]
_SUM = len(REQUEST_TIME_BUCKETS_MS) + 1       # a slot's index of its sum of ms, after the +Inf bucket
# Slot keys: api_key << 8 | version (the dispatcher observes only versions it supports, all
# below 256); a Fetch's second slot (FetchFollower / FetchConsumer) adds one of these.
_FOLLOWER, _CONSUMER = 1 << 16, 2 << 16


class RequestMetrics:
    """Request times, counts, and consumer bytes out, fed by the dispatcher's observer.

    One slot per (request name, version), a plain list: the count of each
    histogram bucket (the last is +Inf), then the sum of ms. ``observe`` — the
    observer a ``Dispatcher`` calls after each answer — is a plain function
    (cheaper to call than an instance's ``__call__``) that costs one dictionary
    lookup on an int key, a ``bisect`` only past the first bucket and two list
    updates (a Fetch: twice, and its bytes out); the request count of a (name,
    version) is its slot's total and a name's histogram the sum of its versions'
    slots, both added up by ``collect()`` at scrape time."""

    def __init__(self):
        self.slots: dict[int, list] = {}                  # api_key << 8 | version (+ _FOLLOWER/_CONSUMER)
        self.labels: dict[int, tuple[str, int]] = {}      # slot key → (request name, version)
        self.bytes_out: dict[str, int] = {}
        self.observe: Callable[[RequestHeader, object, dict | None, float], None] = self._observer()

    def __call__(self, header: RequestHeader, request, response: dict | None, started: float) -> None:
        self.observe(header, request, response, started)

    def _observer(self) -> Callable[[RequestHeader, object, dict | None, float], None]:
        slots, new_slot, fetch = self.slots, self._new_slot, self._fetch

        def observe(header: RequestHeader, request, response: dict | None, started: float) -> None:
            elapsed_ms = (perf_counter() - started) * 1000.0
            api_key, version = header[0], header[1]       # (a subscript is cheaper than the attribute)
            key = api_key << 8 | version
            slot = slots.get(key) or new_slot(key, _REQUEST_NAMES.get(api_key) or request_name(api_key), version)
            # Most requests fall in the first bucket (<= 1 ms): no bisect for those.
            slot[bisect_left(REQUEST_TIME_BUCKETS_MS, elapsed_ms) if elapsed_ms > _FIRST_BOUND else 0] += 1
            slot[_SUM] += elapsed_ms
            if api_key == _FETCH:
                fetch(key, version, request, response, elapsed_ms)
        return observe

    def _fetch(self, key: int, version: int, request, response: dict | None, elapsed_ms: float) -> None:
        follower = _replica_id(request) >= 0
        # As Kafka: a Fetch is timed as "Fetch" and as FetchFollower / FetchConsumer.
        key |= _FOLLOWER if follower else _CONSUMER
        slot = self.slots.get(key) or self._new_slot(key, "FetchFollower" if follower else "FetchConsumer", version)
        slot[bisect_left(REQUEST_TIME_BUCKETS_MS, elapsed_ms) if elapsed_ms > _FIRST_BOUND else 0] += 1
        slot[_SUM] += elapsed_ms
        if not follower and response is not None:
            for topic in response.get("responses", ()):
                sent = sum(len(p.get("records") or b"") for p in topic.get("partitions", ()))
                if sent:
                    name = topic.get("topic") or ""
                    self.bytes_out[name] = self.bytes_out.get(name, 0) + sent

    def _new_slot(self, key: int, name: str, version: int) -> list:
        self.labels[key] = (name, version)
        slot = self.slots[key] = [0] * _SUM + [0.0]
        return slot

    def describe(self) -> list[Metric]:
        return [_family(name) for name in REQUEST_METRICS]

    def collect(self) -> Iterator[Metric]:
        by_name: dict[str, list] = {}       # name → bucket counts and sum over its versions
        counts: dict[tuple[str, int], int] = {}
        for key, slot in self.slots.items():
            name, version = self.labels[key]
            total = by_name.get(name)
            if total is None:
                total = by_name[name] = [0] * _SUM + [0.0]
            for i, value in enumerate(slot):
                total[i] += value
            counts[(name, version)] = sum(slot[:_SUM])
        times = _family("kafka_network_requestmetrics_totaltimems")
        bounds = [str(b) for b in REQUEST_TIME_BUCKETS_MS] + ["+Inf"]
        for name, total in sorted(by_name.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, total):
                cumulative += count
                buckets.append((bound, cumulative))
            times.add_metric([name], buckets, total[_SUM])
        yield times
        requests = _family("kafka_network_requestmetrics_requests")
        for (name, version), count in sorted(counts.items()):
            requests.add_metric([name, str(version)], count)
        yield requests


# -------------------------------------------------------------------- broker

class _Filling:
    """The families one ``collect()`` fills: ``add(name, value, labels)`` one value, or
    ``add.rows(name, rows)`` a family's (labels, value) rows at once."""

    def __init__(self, names: tuple[str, ...]):
        self.families = {name: _family(name) for name in names}

    def __call__(self, name: str, value, labels=()) -> None:
        self.families[name].add_metric(labels, value)

    def rows(self, name: str, rows: list) -> None:
        self.families[name].rows.extend(rows)


class BrokerCollector:
    """Scrape-time view of one ``BrokerNode`` (and the bytes out its requests counted)."""

    def __init__(self, node, requests: RequestMetrics | None = None):
        self.node = node
        self.requests = requests

    def describe(self) -> list[Metric]:
        return [_family(name) for name in BROKER_METRICS]

    def collect(self) -> Iterator[Metric]:
        add = _Filling(BROKER_METRICS)
        self._partitions(add)
        add("kafka_server_kafkaserver_brokerstate", self.node.state.value)
        self._topics(add)
        self._replication(add)
        self._logs(add)
        self._groups(add)
        yield from add.families.values()

    def _partitions(self, add) -> None:
        """The replica manager's partitions: each one's under-replicated and under-min-ISR
        flags, the counts, and the ISR shrinks and expands."""
        manager = self.node.replica_manager
        leaders = under_replicated = under_min_isr = at_min_isr = offline = 0
        rows = []        # (labels, under-replicated, under min ISR)
        for tp, hosted in sorted(manager.partitions.items()):
            if not isinstance(hosted, Partition):
                offline += 1
                continue
            isr, replicas, min_isr = len(hosted.isr), len(hosted.replicas), hosted.effective_min_isr
            leader = hosted.is_leader
            leaders += leader
            below_replicas, below_min = leader and isr < replicas, leader and isr < min_isr
            under_replicated += below_replicas
            under_min_isr += below_min
            at_min_isr += leader and isr == min_isr
            rows.append(((tp.topic, str(tp.partition)), int(below_replicas), int(below_min)))
        add.rows("kafka_cluster_partition_underreplicated", [(labels, value) for labels, value, _ in rows])
        add.rows("kafka_cluster_partition_underminisr", [(labels, value) for labels, _, value in rows])
        add("kafka_server_replicamanager_partitioncount", len(manager.partitions))
        add("kafka_server_replicamanager_leadercount", leaders)
        add("kafka_server_replicamanager_underreplicatedpartitions", under_replicated)
        add("kafka_server_replicamanager_underminisrpartitioncount", under_min_isr)
        add("kafka_server_replicamanager_atminisrpartitioncount", at_min_isr)
        add("kafka_server_replicamanager_offlinereplicacount", offline)
        add("kafka_server_replicamanager_isrshrinks", manager.isr_shrinks)
        add("kafka_server_replicamanager_isrexpands", manager.isr_expands)

    def _topics(self, add) -> None:
        """Bytes and messages in, and bytes out to consumers, by topic."""
        manager = self.node.replica_manager
        for topic, count in sorted(manager.bytes_in.items()):
            add("kafka_server_brokertopicmetrics_bytesin", count, (topic,))
        for topic, count in sorted(manager.messages_in.items()):
            add("kafka_server_brokertopicmetrics_messagesin", count, (topic,))
        for topic, count in sorted(self.requests.bytes_out.items() if self.requests else ()):
            add("kafka_server_brokertopicmetrics_bytesout", count, (topic,))

    def _replication(self, add) -> None:
        """Each fetched partition's lag and the largest, and the replication quotas."""
        manager = self.node.replica_manager
        max_lag = 0
        for (source, fetcher_id), fetcher in sorted(manager.fetcher_manager.fetchers.items()):
            client_id = f"ReplicaFetcherThread-{fetcher_id}-{source}"
            for tp, state in sorted(fetcher.partition_states.items()):
                lag = state.lag or 0
                max_lag = max(max_lag, lag)
                add("kafka_server_fetcherlagmetrics_consumerlag", lag, (client_id, tp.topic, str(tp.partition)))
        add("kafka_server_replicafetchermanager_maxlag", max_lag, ("Replica",))
        quotas, now_ms = self.node.replication_quotas, manager.clock.monotonic_ms()
        for side, quota in (("leader", quotas.leader), ("follower", quotas.follower)):
            add(f"kafka_server_{side}replication_byte_rate", quota.byte_rate(now_ms))
            add(f"kafka_server_{side}replication_throttled_partitions", quota.throttled_total)

    def _logs(self, add) -> None:
        """Each log's offsets, size and segments, and the offline log directories."""
        logs = self.node.log_manager
        end, start, size, segments = [], [], [], []
        for log_ in sorted(logs.all_logs(), key=lambda l: l.topic_partition):
            tp = log_.topic_partition
            labels = (tp.topic, str(tp.partition))
            end.append((labels, log_.log_end_offset))
            start.append((labels, log_.log_start_offset))
            size.append((labels, log_.size_bytes))
            segments.append((labels, len(log_.segments)))
        for name, rows in (("logendoffset", end), ("logstartoffset", start), ("size", size),
                           ("numlogsegments", segments)):
            add.rows(f"kafka_log_log_{name}", rows)
        add("kafka_log_logmanager_offlinelogdirectorycount", len(logs.offline_dirs))
        write_behind = getattr(logs.fs, "write_behind", None)
        if write_behind is not None:
            add("kafka_log_logmanager_writebehind_queued_bytes", write_behind.queued_bytes)
            add("kafka_log_logmanager_writebehind_full_waits", write_behind.full_waits)

    def _groups(self, add) -> None:
        """The groups this broker coordinates: each committed offset and its lag, and the counts."""
        manager = self.node.replica_manager
        groups: set[str] = set()
        offsets = 0
        for shard in self.node.group_coordinator.shards()[0]:
            groups.update(g.group_id for g in shard.list_groups())
            groups.update(g.group_id for g in shard.list_consumer_groups())
            for group_id, committed in sorted(shard.offsets.items()):
                groups.add(group_id)
                for tp, value in sorted(committed.items()):
                    offsets += 1
                    labels = (group_id, tp.topic, str(tp.partition))
                    add("kafka_consumergroup_current_offset", value.offset, labels)
                    partition = manager.get_partition(tp)
                    if partition is not None:
                        add("kafka_consumergroup_lag", max(0, partition.log.high_watermark - value.offset), labels)
        add("kafka_coordinator_group_groupmetadatamanager_numgroups", len(groups))
        add("kafka_coordinator_group_groupmetadatamanager_numoffsets", offsets)


# ---------------------------------------------------------------- controller

class ControllerCollector:
    """Scrape-time view of the controller's metadata image (Kafka's ControllerMetadataMetrics)."""

    def __init__(self, controller_server):
        self.controller_server = controller_server

    def describe(self) -> list[Metric]:
        return [_family(name) for name in CONTROLLER_METRICS]

    def collect(self) -> Iterator[Metric]:
        image = self.controller_server.image
        offline = imbalanced = partitions = 0
        for _, registration in image.all_partitions():
            partitions += 1
            offline += not registration.has_leader
            imbalanced += registration.has_leader and registration.leader != registration.preferred_leader
        fenced = sum(1 for b in image.brokers.values() if b.fenced)
        values = {"activecontrollercount": int(self.controller_server.active), "offlinepartitionscount": offline,
                  "preferredreplicaimbalancecount": imbalanced, "globaltopiccount": len(image.topics_by_name),
                  "globalpartitioncount": partitions, "fencedbrokercount": fenced,
                  "activebrokercount": len(image.brokers) - fenced}
        for short, value in values.items():
            family = _family(f"kafka_controller_kafkacontroller_{short}")
            family.add_metric([], value)
            yield family
        replica = self.controller_server.raft.replica
        for short, value in (("current_leader", replica.leader_id), ("current_epoch", replica.epoch),
                             ("current_vote", replica.voted_for), ("high_watermark", replica.high_watermark),
                             ("log_end_offset", replica.log.end_offset)):
            family = _family(f"kafka_server_raft_metrics_{short}")
            family.add_metric([], value)
            yield family


# ---------------------------------------------------------------------- HTTP

class MetricsHttpServer:
    """``GET /metrics`` over HTTP/1.1 on the server's event loop, one answer per connection."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int):
        self.registry = registry
        self.host = host
        self.port = port
        self._sock: socket.socket | None = None
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()     # connections being answered
        # More read-only paths beside /metrics (/state, /state-changes): path → handler(query) → JSON
        self.routes: dict[str, Callable[[dict[str, str]], object]] = {}
        # Set (metrics.state.token.file): the bearer token every path of ``routes`` needs.
        self.routes_token: bytes | None = None
        self._refusals = RateLimitedLog(logger)     # anyone who reaches the port can cause them

    def bind(self) -> int:
        """Bind now (a taken port fails the start; port 0 learns its real port)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        if self._sock is None:
            self.bind()
        self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=HTTP_REQUEST_MAX_BYTES)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):   # a slow client does not hold the stop up
                writer.close()
            await self._server.wait_closed()
            self._server = None
        elif self._sock is not None:   # bound, never served (the start failed later)
            self._sock.close()
        self._sock = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_READ_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                return await self._write(writer, ("431 Request Header Fields Too Large", "text/plain; charset=utf-8",
                                                  b"request head too large\n", ()), False)
            except (asyncio.IncompleteReadError, asyncio.TimeoutError):
                return
            lines = head.decode("latin-1").split("\r\n")
            words = lines[0].split()
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            answer = self._answer(words, headers)
            if answer[0].startswith(("401", "403")):
                peer = writer.get_extra_info("peername")
                reason = (f"Host {headers.get('host', '')[:100]!r}" if answer[0].startswith("403") else
                          "wrong bearer token" if "authorization" in headers else "no Authorization header")
                self._refusals.log(logging.WARNING, "refused %s %s from %s: %s", words[0],
                                   words[1].partition("?")[0][:200], peer[0] if peer else "?", reason)
            await self._write(writer, answer, bool(words) and words[0] == "HEAD")
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, answer, head_only: bool) -> None:
        status, content_type, body, extra = answer
        more = "".join(f"{name}: {value}\r\n" for name, value in extra)
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(body)}\r\n{more}Connection: close\r\n\r\n".encode("latin-1"))
        if not head_only:
            writer.write(body)
        await writer.drain()

    def _authorized(self, headers: dict[str, str]) -> bool:
        """``Authorization: Bearer <routes_token>``, compared in constant time."""
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode("latin-1"), self.routes_token)

    def _host_allowed(self, host: str | None) -> bool:
        """Bound to a loopback address, only a loopback name may be the ``Host``: a web
        page whose own name was pointed at 127.0.0.1 (DNS rebinding) reads nothing. A
        request without ``Host`` (HTTP/1.0, not a browser) is answered."""
        if host is None or not _is_loopback(self.host):
            return True
        name = host.lower()
        if name.startswith("["):
            name = name[1:].partition("]")[0]
        elif name.count(":") == 1:
            name = name.partition(":")[0]
        return _is_loopback(name)

    def _answer(self, words: list[str], headers: dict[str, str]) -> tuple[str, str, bytes, tuple]:
        text = "text/plain; charset=utf-8"
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            return "400 Bad Request", text, b"bad request\n", ()
        if not self._host_allowed(headers.get("host")):
            return "403 Forbidden", text, b"this server answers only its loopback address as Host\n", ()
        method, (target, _, query) = words[0], words[1].partition("?")
        if target != "/metrics" and target not in self.routes:
            return "404 Not Found", text, b"tidelog serves Prometheus metrics at /metrics\n", ()
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, f"GET {target}\n".encode(), (("Allow", "GET, HEAD"),)
        if target in self.routes:
            if self.routes_token is not None and not self._authorized(headers):
                return ("401 Unauthorized", text, f"{target} needs Authorization: Bearer <token> "
                        "(the token of metrics.state.token.file)\n".encode(),
                        (("WWW-Authenticate", 'Bearer realm="tidelog"'),))
            try:
                answer = self.routes[target](dict(parse_qsl(query)))
            except ValueError as e:
                return "400 Bad Request", text, f"{e}\n".encode(), ()
            except Exception:   # as a collector: answer 500, log it, serve on
                logger.exception("answering %s failed", target)
                return "500 Internal Server Error", text, b"failed (see the server log)\n", ()
            return "200 OK", "application/json", json.dumps(answer, separators=(",", ":")).encode(), ()
        encoder, content_type = choose_encoder(headers.get("accept", ""))
        try:
            try:
                body = render_metrics(self.registry.collect(),
                                      om=content_type.startswith("application/openmetrics-text"))
            except NotRendered:
                body = encoder(self.registry)
            return "200 OK", content_type, body, ()
        except Exception:   # a collector bug must not touch the broker: answer 500, log it
            logger.exception("collecting metrics failed")
            return "500 Internal Server Error", text, b"collecting metrics failed (see the server log)\n", ()


def _is_loopback(name: str) -> bool:
    return name in ("localhost", "::1") or (name.startswith("127.") and name.replace(".", "").isdigit())


def read_token_file(path: str) -> bytes:
    """The token in ``path`` (its first line), for ``metrics.state.token.file``."""
    from tidelog.core.errors import InvalidConfigError
    try:
        with open(path, "rb") as f:
            token = f.read(4096).split(b"\n", 1)[0].strip()
    except OSError as e:
        raise InvalidConfigError(f"cannot read metrics.state.token.file {path}: {e.strerror}") from None
    if len(token) < 16:
        raise InvalidConfigError(f"metrics.state.token.file {path} holds no token of at least 16 characters")
    return token


class ServerMetrics:
    """One server's metrics: its registry, the dispatchers' observer and ``/metrics``."""

    def __init__(self, host: str, port: int):
        self.registry = CollectorRegistry()
        self.request_metrics = RequestMetrics()
        self.registry.register(self.request_metrics)
        # What runtime.py hands each Dispatcher as its observer: the plain function
        # ``RequestMetrics.observe``, cheaper to call per request than the instance.
        self.requests = self.request_metrics.observe
        self.http = MetricsHttpServer(self.registry, host, port)

    def add_broker(self, node) -> None:
        self.registry.register(BrokerCollector(node, self.request_metrics))

    def add_controller(self, controller_server) -> None:
        self.registry.register(ControllerCollector(controller_server))

    def add_state(self, server) -> None:
        """``/state`` (server/state.py) and, on a broker, ``/state-changes?since=SEQ``; with
        ``metrics.state.token.file`` set, both need its token as a bearer token."""
        from tidelog.server.state import broker_state
        token_file = server.config["metrics.state.token.file"]
        if token_file:
            self.http.routes_token = read_token_file(token_file)
        self.http.routes["/state"] = lambda query: broker_state(server)
        changes = server.state_changes
        if changes is not None:
            def state_changes(query: dict[str, str]) -> dict:
                try:
                    since, limit = int(query.get("since", "0")), int(query.get("limit", "1000"))
                except ValueError:
                    raise ValueError("since and limit are integers") from None
                if server.node is not None:    # truncations since the last tick's look
                    changes.maybe_scan_truncations(server.node.log_manager.all_logs())
                return changes.since(since, limit)
            self.http.routes["/state-changes"] = state_changes
