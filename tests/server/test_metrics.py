"""Prometheus ``/metrics`` in-process: a combined node (`Server`) with ``metrics.port``,
scraped over HTTP while real requests go through its listener; and the ISR event
counts the replica manager keeps for it."""

import asyncio
import os
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tidelog.broker.config import BrokerConfig
from tidelog.core.clock import ManualClock
from tidelog.core.errors import ErrorCode
from tidelog.core.ids import TopicPartition
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.records import build_batch
from tidelog.replication.delayed import FetchParams, FetchPartitionRequest
from tidelog.replication.fetcher import FetcherConfig
from tidelog.replication.partition import Isolation, PartitionState, ReplicationSettings
from tidelog.replication.replica_manager import ReplicaManager
from tidelog.server.metrics import METRICS, request_name
from tidelog.server.runtime import BrokerStartupError, Server
from tidelog.storage.log_manager import LogManager
from tests.admin_calls import connect_creating


def _config(tmp_path, **extra) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                         "broker.heartbeat.interval.ms": "100", **extra})


def _http(url: str, method: str = "GET", accept: str | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


async def scrape(server: Server) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, labels): value}`` from the server's /metrics (fetched off the loop)."""
    status, _, body = await asyncio.to_thread(_http, server.metrics.http.url)
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def _produce(connection: KafkaConnection, topic: str, batch: bytes) -> int:
    response = await connection.request(ApiKey.PRODUCE, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
    partition = response.responses[0].partition_responses[0]
    assert ErrorCode(partition.error_code.value) == ErrorCode.NONE
    return int(partition.base_offset)


def test_metrics_are_off_unless_metrics_port_is_set(tmp_path):
    async def main():
        server = Server(_config(tmp_path))
        await server.start()
        try:
            assert server.metrics is None and server.dispatcher.observer is None
        finally:
            await server.stop()
    asyncio.run(main())


def test_a_scrape_shows_what_the_broker_and_controller_hold(tmp_path):
    """Produce 3 requests of 2 records, fetch once as a consumer: every number on
    /metrics is checked against the node itself or the requests sent."""
    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0"}))
        await server.start()
        try:
            connection = await connect_creating(server.bind_port, "t")
            before = await scrape(server)
            assert value(before, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") is None
            batches = [build_batch([f"r{i}a".encode(), f"r{i}b".encode()]) for i in range(3)]
            for batch in batches:
                await _produce(connection, "t", batch)
            fetched = await connection.request(ApiKey.FETCH, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]}, version=11)
            records_sent = len(fetched.responses[0].partitions[0].records)
            assert records_sent > 0
            samples = await scrape(server)
            log_ = server.node.log_manager.get_log(TopicPartition("t", 0))

            # Requests: exactly the three Produce requests, one consumer Fetch (also counted as "Fetch").
            assert value(samples, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 3
            assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Produce") == 3
            assert value(samples, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == 3
            assert value(samples, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0
            assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") == 1
            assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") == 1
            assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="FetchFollower") is None
            assert value(samples, "kafka_network_requestmetrics_requests_total", request="ApiVersions",
                         version="3") >= 1

            # Topic throughput: the batches' bytes and records in, the fetched record bytes out.
            assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == sum(map(len, batches))
            assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 6
            assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == records_sent

            # The log and the replica manager.
            tp = {"topic": "t", "partition": "0"}
            assert value(samples, "kafka_log_log_logendoffset", **tp) == 6 == log_.log_end_offset
            assert value(samples, "kafka_log_log_logstartoffset", **tp) == 0
            assert value(samples, "kafka_log_log_size", **tp) == log_.size_bytes > 0
            assert value(samples, "kafka_log_log_numlogsegments", **tp) == 1
            assert value(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 0
            assert value(samples, "kafka_log_logmanager_writebehind_queued_bytes") == 0    # answered: written
            assert value(samples, "kafka_log_logmanager_writebehind_full_waits_total") == 0
            assert value(samples, "kafka_server_replicamanager_partitioncount") == 1
            assert value(samples, "kafka_server_replicamanager_leadercount") == 1
            assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
            assert value(samples, "kafka_cluster_partition_underreplicated", **tp) == 0
            assert value(samples, "kafka_cluster_partition_underminisr", **tp) == 0
            assert value(samples, "kafka_server_replicamanager_atminisrpartitioncount") == 1   # ISR 1, min 1
            assert value(samples, "kafka_server_kafkaserver_brokerstate") == 3                 # RUNNING
            assert value(samples, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 0

            # The controller role of this combined node.
            assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
            assert value(samples, "kafka_controller_kafkacontroller_globaltopiccount") == 1
            assert value(samples, "kafka_controller_kafkacontroller_globalpartitioncount") == 1
            assert value(samples, "kafka_controller_kafkacontroller_activebrokercount") == 1
            assert value(samples, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
            assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
            connection.close()
        finally:
            await server.stop()
    asyncio.run(main())


def test_the_families_served_are_exactly_the_table(tmp_path):
    """The families the registry answers are exactly METRICS (docs/observability.md's table)."""
    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0"}))
        await server.start()
        try:
            status, _, body = await asyncio.to_thread(_http, server.metrics.http.url)
            served = {family.name for family in text_string_to_metric_families(body.decode())}
            # The parser names a counter family without _total, as METRICS does.
            assert served == set(METRICS)
        finally:
            await server.stop()
    asyncio.run(main())


def test_http_answers(tmp_path):
    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0"}))
        await server.start()
        try:
            url = server.metrics.http.url
            status, headers, body = await asyncio.to_thread(_http, url)
            assert status == 200 and headers["Content-Type"].startswith("text/plain")
            assert b"kafka_server_replicamanager_partitioncount 0.0" in body
            status, headers, body = await asyncio.to_thread(_http, url, "GET", "application/openmetrics-text")
            assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
            assert body.endswith(b"# EOF\n")
            status, headers, body = await asyncio.to_thread(_http, url, "HEAD")
            assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
            assert (await asyncio.to_thread(_http, url.replace("/metrics", "/other")))[0] == 404
            assert (await asyncio.to_thread(_http, url, "POST"))[0] == 405
            # Garbage or a silent client closes that connection only; the broker goes on.
            reader, writer = await asyncio.open_connection(server.metrics.http.host, server.metrics.http.port)
            writer.write(b"NONSENSE\r\n\r\n")
            assert (await reader.read()).startswith(b"HTTP/1.1 400")
            writer.close()
            assert (await asyncio.to_thread(_http, url))[0] == 200
        finally:
            await server.stop()
        assert server.exit_status == 0
    asyncio.run(main())


def test_a_collector_that_fails_answers_500_and_the_broker_serves_on(tmp_path):
    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0"}))
        await server.start()
        try:
            class Broken:                      # a collector that raises (the broker itself is left alone:
                def describe(self):            # breaking its state raced with its own timers)
                    return []

                def collect(self):
                    raise TypeError("a broken collector")
            broken = Broken()
            server.metrics.registry.register(broken)
            assert (await asyncio.to_thread(_http, server.metrics.http.url))[0] == 500
            server.metrics.registry.unregister(broken)
            assert (await asyncio.to_thread(_http, server.metrics.http.url))[0] == 200
        finally:
            await server.stop()
        assert server.exit_status == 0
    asyncio.run(main())


def test_a_taken_metrics_port_fails_the_start(tmp_path):
    import socket
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()

    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": str(taken.getsockname()[1])}))
        try:
            await server.start()
        except BrokerStartupError as e:        # checked before anything is formatted; names the address
            await server.stop()
            return str(taken.getsockname()[1]) in str(e)
        await server.stop()
        return False
    try:
        assert asyncio.run(main()), "the server started without its /metrics port"
    finally:
        taken.close()


def test_request_names_are_kafkas():
    assert [request_name(k) for k in (ApiKey.PRODUCE, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.API_VERSIONS,
                                      ApiKey.DESCRIBE_LOG_DIRS, ApiKey.INIT_PRODUCER_ID)] == [
        "Produce", "OffsetForLeaderEpoch", "ApiVersions", "DescribeLogDirs", "InitProducerId"]


def test_request_metrics_publish_the_counts_kept_per_request(monkeypatch):
    """RequestMetrics keeps plain counts per (type, version) and publishes them at
    scrape time: each time lands in the bucket whose bound it does not exceed
    (a bound itself included), versions add up into one histogram per type, a
    Fetch is also counted as FetchConsumer / FetchFollower, and bytes out only
    for a consumer. The clock is pinned: the times are exact, not measured."""
    from types import SimpleNamespace

    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from tidelog.protocol.codec import RequestHeader
    from tidelog.server import metrics

    monkeypatch.setattr(metrics, "perf_counter", lambda: 0.0)
    observer = metrics.RequestMetrics()

    def observe(api_key, version, elapsed_ms, request=None, response=None):
        observer.observe(RequestHeader(int(api_key), version, 1, "test"), request, response, -elapsed_ms / 1000.0)

    for ms in (0.25, 1.0, 1.5, 5.0, 40_000.0):          # Produce v9: <= 1 twice, <= 2, <= 5, +Inf
        observe(ApiKey.PRODUCE, 9, ms)
    observe(ApiKey.PRODUCE, 8, 0.5)
    consumer, follower = SimpleNamespace(replica_id=-1), SimpleNamespace(replica_id=2)
    fetched = {"responses": [{"topic": "t", "partitions": [{"records": b"x" * 70}, {"records": None}]},
                             {"topic": "u", "partitions": [{"records": b""}]}]}
    observe(ApiKey.FETCH, 11, 7.0, consumer, fetched)
    observe(ApiKey.FETCH, 11, 0.5, follower, {"responses": [{"topic": "t", "partitions": [{"records": b"y"}]}]})
    observe(ApiKey.FETCH, 12, 3.0, consumer, {"responses": []})

    registry = CollectorRegistry()
    registry.register(observer)
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    bounds = [str(b) for b in metrics.REQUEST_TIME_BUCKETS_MS] + ["+Inf"]

    def buckets(request):
        return [samples[("kafka_network_requestmetrics_totaltimems_bucket",
                         frozenset({"request": request, "le": bound}.items()))] for bound in bounds]

    #                               1  2  5  10 25 50 ... 30000  +Inf
    assert buckets("Produce") == [3, 4, 5] + [5] * 11 + [6]
    assert buckets("Fetch") == [1, 1, 2] + [3] * 11 + [3]
    assert buckets("FetchConsumer") == [0, 0, 1] + [2] * 11 + [2]
    assert buckets("FetchFollower") == [1] * 15

    def sample(name, **labels):
        return samples.get((name, frozenset(labels.items())))

    assert sample("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 6
    assert sample("kafka_network_requestmetrics_totaltimems_sum", request="Produce") == 40_008.25
    assert sample("kafka_network_requestmetrics_totaltimems_sum", request="Fetch") == 10.5
    assert sample("kafka_network_requestmetrics_totaltimems_sum", request="FetchFollower") == 0.5
    requests = {tuple(sorted(labels)): value for (name, labels), value in samples.items()
                if name == "kafka_network_requestmetrics_requests_total"}
    assert requests == {
        (("request", "Fetch"), ("version", "11")): 2, (("request", "Fetch"), ("version", "12")): 1,
        (("request", "FetchConsumer"), ("version", "11")): 1, (("request", "FetchConsumer"), ("version", "12")): 1,
        (("request", "FetchFollower"), ("version", "11")): 1,
        (("request", "Produce"), ("version", "8")): 1, (("request", "Produce"), ("version", "9")): 5}
    assert observer.bytes_out == {"t": 70}


# ------------------------------------------------------- the replica manager's counts

TP = TopicPartition("orders", 0)
ALIVE = {b: 100 + b for b in range(3)}


def _leader(tmp_path, isr) -> tuple[ReplicaManager, ManualClock]:
    clock = ManualClock(1_700_000_000_000)
    rm = ReplicaManager(0, LogManager([os.path.join(str(tmp_path), "broker0")], clock), clock,
                        lambda topic: ReplicationSettings(1, 30_000), alive_broker_epoch=ALIVE.get,
                        fetcher_config=FetcherConfig(), is_broker_alive=lambda b: b in ALIVE)
    rm.broker_epoch = ALIVE[0]
    rm.apply_partition_states({TP: PartitionState(0, 0, tuple(isr), (0, 1, 2), 0)})
    return rm, clock


def test_isr_expands_and_shrinks_count_when_the_controller_accepts_them(tmp_path):
    """As Kafka's IsrExpandsPerSec / IsrShrinksPerSec: counted on the accepted answer,
    not on the proposal, a refusal or a retry."""
    rm, clock = _leader(tmp_path, isr=(0, 1))
    rm.append_records(1, 30_000, {TP: build_batch([b"a"])}, lambda responses: None)
    fetch = FetchParams(2, 0, 1, 1 << 20, Isolation.LOG_END, {TP: FetchPartitionRequest(1, 1 << 20, 0, 0, 0)},
                        broker_epoch=ALIVE[2])
    rm.fetch_messages(fetch, lambda results: None)                       # broker 2 caught up: expand
    expand = rm.drain_isr_proposals()[TP]
    assert rm.on_alter_partition_response(TP, ErrorCode.NETWORK_EXCEPTION, proposal=expand)   # retried
    rm.drain_isr_proposals()
    assert (rm.isr_expands, rm.isr_shrinks) == (0, 0)
    rm.on_alter_partition_response(TP, ErrorCode.NONE, 0, 1, (0, 1, 2), expand)
    assert (rm.isr_expands, rm.isr_shrinks) == (1, 0)
    rm.on_alter_partition_response(TP, ErrorCode.NONE, 0, 1, (0, 1, 2), expand)   # a duplicate answer
    assert (rm.isr_expands, rm.isr_shrinks) == (1, 0)

    rm.append_records(1, 30_000, {TP: build_batch([b"b"])}, lambda responses: None)
    clock.advance(31_000)                                                # brokers 1 and 2 fell behind
    rm.maybe_shrink_isr()
    shrink = rm.drain_isr_proposals()[TP]
    rm.on_alter_partition_response(TP, ErrorCode.INELIGIBLE_REPLICA, proposal=shrink)   # refused
    assert (rm.isr_expands, rm.isr_shrinks) == (1, 0)
    rm.maybe_shrink_isr()
    shrink = rm.drain_isr_proposals()[TP]
    rm.on_alter_partition_response(TP, ErrorCode.NONE, 0, 2, (0,), shrink)
    assert (rm.isr_expands, rm.isr_shrinks) == (1, 1)
    assert rm.get_partition(TP).isr == (0,)


def test_bytes_and_messages_in_count_appends_that_succeed(tmp_path):
    rm, _ = _leader(tmp_path, isr=(0, 1, 2))
    batch = build_batch([b"x", b"y", b"z"])
    rm.append_records(1, 30_000, {TP: batch, TopicPartition("unknown", 0): batch}, lambda responses: None)
    rm.append_records(1, 30_000, {TP: b"not a batch"}, lambda responses: None)     # refused: not counted
    assert rm.bytes_in == {"orders": len(batch)} and rm.messages_in == {"orders": 3}


def test_an_isr_change_learned_from_metadata_before_its_answer_counts_once(tmp_path):
    """A broker-only node may replay the controller's ISR record before the AlterPartition
    answer arrives; the change is counted then, and the late answer adds nothing."""
    rm, clock = _leader(tmp_path, isr=(0, 1, 2))
    rm.append_records(1, 30_000, {TP: build_batch([b"a"])}, lambda responses: None)
    clock.advance(31_000)
    rm.maybe_shrink_isr()
    shrink = rm.drain_isr_proposals()[TP]
    assert shrink.new_isr == (0,)
    rm.apply_partition_states({TP: PartitionState(0, 0, (0,), (0, 1, 2), 1)})
    assert (rm.isr_expands, rm.isr_shrinks) == (0, 1)
    rm.on_alter_partition_response(TP, ErrorCode.NONE, 0, 1, (0,), shrink)
    rm.apply_partition_states({TP: PartitionState(0, 0, (0,), (0, 1, 2), 1)})    # replayed again
    assert (rm.isr_expands, rm.isr_shrinks) == (0, 1)
    # An ISR the controller changed on its own (a fenced broker) is no proposal of ours.
    rm.apply_partition_states({TP: PartitionState(0, 0, (0, 2), (0, 1, 2), 2)})
    assert (rm.isr_expands, rm.isr_shrinks) == (0, 1)


def test_a_silent_scraper_does_not_hold_up_the_stop(tmp_path):
    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0"}))
        await server.start()
        reader, writer = await asyncio.open_connection(server.metrics.http.host, server.metrics.http.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")          # and never the end of its headers
        await writer.drain()
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        await server.stop()
        assert asyncio.get_running_loop().time() - started < 5
        assert await asyncio.wait_for(reader.read(), 2) == b""      # closed at once, unanswered
        writer.close()
    asyncio.run(main())


def test_the_scrape_is_what_prometheus_client_writes_in_every_format(tmp_path):
    """``/metrics`` is written by server/exposition.py, not by prometheus_client's
    encoders; what it writes must be byte for byte theirs, in each format a scraper
    may negotiate, on a broker whose families hold what needs care: label values
    with a quote, a backslash and a newline (a consumer group's id), values past a
    million (written as 1.2e+06), counters, the request-time histogram and the
    quota families. Checked on the loop (both at the same moment), then over HTTP."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as Tp
    from prometheus_client.exposition import choose_encoder

    group = 'odd "group" \\ with\na newline'

    def commit(port: int) -> None:
        for group_id in (group, 'only "quoted"', "only \\", "only\n"):
            consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": group_id,
                                 "enable.auto.commit": False})
            try:
                consumer.commit(offsets=[Tp("t", 0, 3)], asynchronous=False)
            finally:
                consumer.close()

    async def main():
        server = Server(_config(tmp_path, **{"metrics.port": "0", "message.max.bytes": str(4 << 20)}))
        await server.start()
        try:
            connection = await connect_creating(server.bind_port, "t")
            await _produce(connection, "t", build_batch([os.urandom(1_300_000)]))
            await asyncio.to_thread(commit, server.bind_port)
            http = server.metrics.http
            for accept in ("", "text/plain", "text/plain;version=1.0.0;escaping=allow-utf-8",
                           "application/openmetrics-text",
                           "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                           "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"):     # Prometheus's own
                encoder, content_type = choose_encoder(accept)
                status, served_type, body, _ = http._answer(["GET", "/metrics", "HTTP/1.1"], {"accept": accept})
                assert (status, served_type) == ("200 OK", content_type)
                assert body == encoder(server.metrics.registry), accept
            assert b"e+06" in body and b'consumergroup="odd \\"group\\" \\\\ with\\na newline"' in body
            assert b"kafka_network_requestmetrics_totaltimems_bucket{" in body
            samples = await scrape(server)
            assert value(samples, "kafka_consumergroup_current_offset", consumergroup=group, topic="t",
                         partition="0") == 3
            assert value(samples, "kafka_log_log_size", topic="t", partition="0") > 1_300_000
            connection.close()
        finally:
            await server.stop()
    asyncio.run(main())
