"""Client quotas on a real ``tidelog serve``: AlterClientQuotas / DescribeClientQuotas from
kafka-python (the client matrix's ``admin_client_quotas``), and throttling — a client over
its quota is told (``throttle_time_ms``) and muted, one without a quota is not."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.protocol.codec import millis
from tidelog.records.batch import build_batch
from tidelog.testing import Broker

EXACT, DEFAULT, SPECIFIED = 0, 1, 2
Entry = AlterClientQuotasRequest.EntryData


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"metrics.port": "0"}) as running:
        yield running


@pytest.fixture(scope="module")
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    client.create_topics([NewTopic("quota-produce", 1, 1), NewTopic("quota-fetch", 1, 1)])
    yield client
    client.close()


def alter(admin, entries: list[tuple[dict, dict]], validate_only=False) -> list[tuple[dict, int, str | None]]:
    """``entries``: (entity {type: name or None}, ops {key: value, None removes}) → per entity
    (entity, error code, message)."""
    request = AlterClientQuotasRequest(validate_only=validate_only, entries=[Entry(
        entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[Entry.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()])
        for entity, ops in entries])
    response = admin._manager.run(admin._manager.send, request)
    return [({e.entity_type: e.entity_name for e in r.entity}, r.error_code, r.error_message)
            for r in response.entries]


def describe(admin, components=(), strict=False):
    """(error code, message, {frozenset(entity items): {key: value}})."""
    request = DescribeClientQuotasRequest(strict=strict, components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components])
    response = admin._manager.run(admin._manager.send, request)
    found = {frozenset((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
             for entry in response.entries or ()}
    return response.error_code, response.error_message, found


def _entity(**parts):
    return frozenset((t.replace("_", "-"), n) for t, n in parts.items())


def test_admin_client_quotas(admin):
    """kafka-python's AlterClientQuotas and DescribeClientQuotas: set, validate_only, refusals
    with Kafka's codes and messages (nothing changed), describe's filters, removal."""
    ok = alter(admin, [({"user": "alice", "client-id": None}, {"producer_byte_rate": 2048, "request_percentage": 50}),
                       ({"user": "alice"}, {"consumer_byte_rate": 4096}),
                       ({"client-id": "app"}, {"producer_byte_rate": 1024})])
    assert [code for _, code, _ in ok] == [0, 0, 0]
    # validate_only: the same answers, nothing stored.
    assert alter(admin, [({"user": "bob"}, {"producer_byte_rate": 1})], validate_only=True) == [
        ({"user": "bob"}, 0, None)]
    # Bad input: Kafka's INVALID_REQUEST and messages; the entity's other keys are not written either.
    refused = alter(admin, [({"user": "alice"}, {"consumer_byte_rate": -1}),
                            ({"client-id": "app"}, {"producer_byte_rate": 5, "bogus_rate": 3}),
                            ({"user": "carol"}, {"producer_byte_rate": 1.5})])
    assert refused == [
        ({"user": "alice"}, ErrorCode.INVALID_REQUEST, "Quota consumer_byte_rate must be greater than 0"),
        ({"client-id": "app"}, ErrorCode.INVALID_REQUEST, "Invalid configuration key bogus_rate"),
        ({"user": "carol"}, ErrorCode.INVALID_REQUEST, "producer_byte_rate cannot be a fractional value.")]
    code, message, everything = describe(admin)
    assert (code, message) == (0, "")                   # Kafka's success message is empty, not null
    assert everything == {
        _entity(user="alice", client_id=None): {"producer_byte_rate": 2048.0, "request_percentage": 50.0},
        _entity(user="alice"): {"consumer_byte_rate": 4096.0},
        _entity(client_id="app"): {"producer_byte_rate": 1024.0}}
    assert set(describe(admin, [("user", EXACT, "alice")])[2]) == {
        _entity(user="alice", client_id=None), _entity(user="alice")}
    assert set(describe(admin, [("user", EXACT, "alice")], strict=True)[2]) == {_entity(user="alice")}
    assert set(describe(admin, [("client-id", DEFAULT, None)])[2]) == {_entity(user="alice", client_id=None)}
    assert set(describe(admin, [("client-id", SPECIFIED, None)], strict=True)[2]) == {_entity(client_id="app")}
    assert describe(admin, [("user", EXACT, None)])[:2] == (
        ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert describe(admin, [("group", SPECIFIED, None)])[:2] == (
        ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group")
    # Removing every key removes the entity.
    alter(admin, [({"user": "alice", "client-id": None}, {"producer_byte_rate": None, "request_percentage": None}),
                  ({"user": "alice"}, {"consumer_byte_rate": None}), ({"client-id": "app"}, {"producer_byte_rate": None})])
    assert describe(admin)[2] == {}


def _metric(broker, name: str, client_id: str) -> float:
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'client_id="{client_id}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _produce(connection, topic: str, payload: bytes):
    response = await connection.request(ApiKey.PRODUCE, {
        "acks": 1, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [
            {"index": 0, "records": build_batch([payload])}]}]}, version=9)
    assert response.responses[0].partition_responses[0].error_code.value == 0
    return millis(response.throttle_time)


async def _fetch(connection, topic: str, offset: int, session_epoch: int = -1):
    response = await connection.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 50_000_000, "isolation_level": 0,
        "session_id": 0, "session_epoch": session_epoch,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                    "partition_max_bytes": 50_000_000, "current_leader_epoch": -1,
                                                    "last_fetched_epoch": -1, "log_start_offset": -1}]}]},
        version=12)
    records = b"".join(p.records or b"" for t in response.responses for p in t.partitions)
    if session_epoch >= 0:
        return millis(response.throttle_time), records, response.session_id
    return millis(response.throttle_time), records


def test_a_producer_over_its_quota_is_throttled_and_muted_and_another_is_not(broker, admin):
    """client-id ``slow`` may produce 50 kB/s; 600 kB at once measures 60 kB/s over the
    10 s minimum window: throttled (60-50)/50 × 10 s = 2 s. Its next request, sent at once,
    is read only when the mute ends; ``fast`` (no quota) is never throttled."""
    assert alter(admin, [({"client-id": "slow"}, {"producer_byte_rate": 50_000})]) == [({"client-id": "slow"}, 0, None)]

    async def go():
        slow = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="slow")
        fast = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="fast")
        try:
            throttle_ms = await _produce(slow, "quota-produce", b"x" * 600_000)
            assert throttle_ms > 1000
            answered = time.monotonic()
            # Unthrottled meanwhile: the same bytes from another client id, many times over.
            for _ in range(5):
                assert await _produce(fast, "quota-produce", b"y" * 600_000) == 0
            await _produce(slow, "quota-produce", b"z")
            # A lower bound only (slowness cannot break it): muted for most of the throttle time.
            assert time.monotonic() - answered >= throttle_ms / 1000 / 2
        finally:
            slow.close()
            fast.close()
        return throttle_ms
    throttle_ms = asyncio.run(go())
    assert _metric(broker, "kafka_server_produce_throttle_time", "slow") > 0
    assert _metric(broker, "kafka_server_produce_throttle_time", "fast") == 0
    assert _metric(broker, "kafka_server_produce_byte_rate", "fast") > 0


def test_a_consumer_over_its_quota_gets_an_empty_throttled_fetch(broker, admin):
    """consumer_byte_rate 50 kB/s: one fetch may take at most 50 kB/s × 10 s = 500 kB (Kafka's cap);
    the next, over the quota, is answered without records and with a throttle time. One that
    opens a fetch session keeps its records (the session counts them as sent) and is throttled."""
    assert alter(admin, [({"client-id": "slow-consumer"}, {"consumer_byte_rate": 50_000})])[0][1] == 0

    async def go():
        producer = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="fast")
        consumer = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="slow-consumer")
        try:
            for _ in range(20):
                await _produce(producer, "quota-fetch", b"r" * 100_000)
            throttle_ms, first = await _fetch(consumer, "quota-fetch", 0)
            assert throttle_ms == 0 and 0 < len(first) <= 500_000 + 110_000    # capped (a batch may cross it)
            throttle_ms, second = await _fetch(consumer, "quota-fetch", 1)
            assert throttle_ms > 0 and second == b""
            # Another connection (the first is muted now), same client id: still over the quota.
            consumer.close()
            consumer = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="slow-consumer")
            throttle_ms, third, session_id = await _fetch(consumer, "quota-fetch", 1, session_epoch=0)
            assert throttle_ms > 0 and third and session_id != 0
        finally:
            producer.close()
            consumer.close()
    asyncio.run(go())
    assert _metric(broker, "kafka_server_fetch_throttle_time", "slow-consumer") > 0


def tidelog(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "quotas", *args], capture_output=True,
                          text=True, timeout=60)


def test_the_quotas_command_alters_and_describes(broker):
    b = ["-b", broker.bootstrap]
    done = tidelog("alter", *b, "--user", "cli-user", "--client-default", "--add-config",
                   "producer_byte_rate=1048576,request_percentage=25")
    assert (done.returncode, done.stdout) == (0, "user=cli-user client-id=<default>: updated\n"), done.stderr
    assert tidelog("alter", *b, "--client-id", "cli-app", "--add-config", "consumer_byte_rate=2048").returncode == 0
    shown = tidelog("describe", *b, "--user", "cli-user")
    assert shown.stdout == "client-id=<default> user=cli-user: producer_byte_rate=1048576, " \
                           "request_percentage=25\n", shown.stderr
    assert tidelog("describe", *b, "--client-id", "cli-app", "--strict").stdout == \
        "client-id=cli-app: consumer_byte_rate=2048\n"
    refused = tidelog("alter", *b, "--client-id", "cli-app", "--add-config", "consumer_byte_rate=-1")
    assert (refused.returncode, refused.stderr) == (
        1, "error: INVALID_REQUEST: Quota consumer_byte_rate must be greater than 0\n")
    assert tidelog("alter", *b, "--client-id", "cli-app", "--add-config", "consumer_byte_rate=x").returncode == 2
    assert tidelog("alter", *b, "--client-id", "cli-app", "--delete-config", "consumer_byte_rate").returncode == 0
    assert tidelog("alter", *b, "--user", "cli-user", "--client-default",
                   "--delete-config", "producer_byte_rate,request_percentage").returncode == 0
    assert tidelog("describe", *b, "--client-id", "cli-app").stdout == ""


async def _create_topics(port: int, client_id: str, topics: dict[str, int], version: int):
    connection = await KafkaConnection.connect("127.0.0.1", port, client_id=client_id)
    try:
        response = await connection.request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
                       for name, n in topics.items()], "timeout": 10_000, "validate_only": False}, version=version)
        return millis(response.throttle_time), {t.name: (t.error_code.value, t.error_message) for t in response.topics}
    finally:
        connection.close()


def test_controller_mutation_rate_refuses_topics_over_quota_from_the_strict_versions_on(broker, admin):
    """controller_mutation_rate 1/s: 11 partitions' worth of tokens (1 × 11 × 1 s). 13 partitions
    are taken (the bucket was not empty yet) and leave it 2 short; then CreateTopics v7 is
    refused THROTTLING_QUOTA_EXCEEDED with a throttle time, v5 (before KIP-599's strict
    versions) is served and throttled; another client id is not affected."""
    assert alter(admin, [({"client-id": "mutator"}, {"controller_mutation_rate": 1})])[0][1] == 0

    async def go():
        port = broker.port
        assert await _create_topics(port, "mutator", {"mutation-a": 13}, 7) == (0, {"mutation-a": (0, None)})
        throttle_ms, refused = await _create_topics(port, "mutator", {"mutation-b": 1, "mutation-c": 1}, 7)
        assert throttle_ms > 0 and refused == {
            name: (ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
            for name in ("mutation-b", "mutation-c")}
        throttle_ms, served = await _create_topics(port, "mutator", {"mutation-d": 1}, 5)
        assert throttle_ms > 0 and served == {"mutation-d": (0, None)}
        assert await _create_topics(port, "other", {"mutation-e": 1}, 7) == (0, {"mutation-e": (0, None)})
    asyncio.run(go())


def test_request_percentage_throttles_by_handling_time(broker, admin):
    """request_percentage 0.00001 of one thread: 1 µs of handling per 10 s window (1 ms of
    handling counts 0.1 %·s); any Metadata request costs more, so its answer carries a
    throttle time, while another client id's does not."""
    assert alter(admin, [({"client-id": "busy"}, {"request_percentage": 0.00001})])[0][1] == 0

    async def metadata(client_id):
        connection = await KafkaConnection.connect("127.0.0.1", broker.port, client_id=client_id)
        try:
            response = await connection.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})
            return millis(response.throttle_time)
        finally:
            connection.close()
    assert asyncio.run(metadata("busy")) > 0
    assert asyncio.run(metadata("idle")) == 0
    assert _metric(broker, "kafka_server_request_throttle_time", "busy") > 0
