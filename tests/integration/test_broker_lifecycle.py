"""The broker lifecycle on real processes: what happens when the controller no
longer knows a running broker's registration (STALE_BROKER_EPOCH), and the
auto-create path of a broker that forwards to its controller."""

import os
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidelog.controller.topics import TOPIC_NAME_LENGTH_MAX
from tidelog.core.errors import ErrorCode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Cluster
from tidelog.testing import wait_until as _wait

import asyncio

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000"}




def _alive_brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def _log(cluster, node_id: int) -> str:
    node = cluster.processes.layout.node(node_id)
    with open(os.path.join(cluster.directory, node.name, "server.log"), encoding="utf-8", errors="replace") as f:
        return f.read()


def _start_impostor(cluster, node_id: int, directory: str) -> subprocess.Popen:
    """A second process claiming ``node_id`` (an operator's mistake, or a machine
    restored from an image): its own data directory, the same cluster."""
    layout = cluster.processes.layout
    settings = {"node.id": str(node_id), "process.roles": "broker", "cluster.id": layout.cluster_id,
                "log.dirs": os.path.join(directory, "data"), "listeners": f"PLAINTEXT://{layout.host}:0",
                "controller.quorum.voters": f"0@{layout.host}:{layout.controller.port}", **FAST}
    args = [sys.executable, "-m", "tidelog.cli.main", "serve"]
    for key, value in settings.items():
        args += ["--override", f"{key}={value}"]
    out = open(os.path.join(directory, "impostor.log"), "wb")
    process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    log_path = os.path.join(directory, "impostor.log")
    _wait(lambda: b"tidelog ready" in open(log_path, "rb").read() or process.poll() is not None, 30,
          what="the impostor to start")
    assert process.poll() is None, open(log_path, "rb").read().decode()[-2000:]
    return process


def test_a_broker_whose_registration_was_replaced_registers_again_and_serves(tmp_path):
    """Broker 2 is paused past its session and fenced; another process registers as
    broker 2 (allowed: the old session expired) and dies. When the original
    resumes, its heartbeats carry a broker epoch the controller no longer has:
    STALE_BROKER_EPOCH. It must register again (refused as a duplicate until the
    impostor's session expires) and come back unfenced — not heartbeat forever."""
    with Cluster(brokers=2, overrides=FAST) as cluster:
        cluster.pause(2)
        try:
            _wait(lambda: _alive_brokers(cluster.bootstrap) == {1}, what="broker 2 to be fenced")
            impostor = _start_impostor(cluster, 2, str(tmp_path))
            _wait(lambda: _alive_brokers(cluster.bootstrap) == {1, 2}, what="the impostor to be unfenced")
            impostor.kill()
            impostor.wait(10)
        finally:
            cluster.resume(2)
        _wait(lambda: "registration replaced" in _log(cluster, 2), what="broker 2 to see STALE_BROKER_EPOCH")

        def back_to_running() -> bool:
            log = _log(cluster, 2)
            return "RECOVERY → RUNNING" in log[log.index("registration replaced"):]

        _wait(back_to_running, timeout_s=30, what="broker 2 to register again and be unfenced")
        # The controller names the original (its port, not the dead impostor's) alive,
        # and its own listener serves.
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.port(2)}"}).list_topics(timeout=10)
        assert set(metadata.brokers) == {1, 2}
        assert metadata.brokers[2].port == cluster.port(2)


def test_auto_creating_an_invalid_topic_name_through_a_forwarding_broker_is_refused():
    """Kafka answers INVALID_TOPIC_EXCEPTION at once; LEADER_NOT_AVAILABLE would make
    the client retry forever."""
    with Cluster(brokers=1, overrides=FAST) as cluster:
        async def metadata(name):
            connection = await KafkaConnection.connect("127.0.0.1", cluster.port(1))
            try:
                response = await connection.request(ApiKey.METADATA, {
                    "topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False}, version=12)
                return ErrorCode(response.topics[0].error_code.value)
            finally:
                connection.close()

        for name in ("bad name!", "a" * (TOPIC_NAME_LENGTH_MAX + 1), "..", "ünicode"):
            assert asyncio.run(metadata(name)) == ErrorCode.INVALID_TOPIC_EXCEPTION, name
        assert asyncio.run(metadata("good-name")) in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NONE)


def test_a_client_cannot_fence_or_shut_down_a_combined_node(tmp_path):
    """A combined `tidelog serve` reaches its controller in-process; its client port
    does not serve BrokerHeartbeat & co., so a client cannot send
    want_shut_down / want_fence for its broker id (it did, and the partitions stayed
    leaderless until a restart)."""
    from tidelog.testing import Broker

    with Broker() as broker:
        async def attack():
            connection = await KafkaConnection.connect("127.0.0.1", broker.port)
            try:
                versions = await connection.request(ApiKey.API_VERSIONS, {"client_software_name": "t",
                                                                          "client_software_version": "1"})
                listed = {int(k.api_key) for k in versions.api_keys}
                codes = []
                for fence, shut_down in ((False, True), (True, False)):
                    try:
                        reply = await connection.request(ApiKey.BROKER_HEARTBEAT, {
                            "broker_id": 1, "broker_epoch": 0, "current_metadata_offset": 0, "want_fence": fence,
                            "want_shut_down": shut_down, "offline_log_dirs": []}, version=1, timeout_s=5)
                        codes.append(ErrorCode(reply.error_code.value))
                    except (ConnectionError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                        codes.append("closed")
                        connection.close()
                        connection = await KafkaConnection.connect("127.0.0.1", broker.port)
                return listed, codes
            finally:
                connection.close()

        listed, codes = asyncio.run(attack())
        assert ApiKey.BROKER_HEARTBEAT not in listed and ApiKey.BROKER_REGISTRATION not in listed
        assert all(code in (ErrorCode.UNSUPPORTED_VERSION, "closed") for code in codes), codes
        # The broker still leads and serves: a produce and the broker list prove it.
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("after-attack", b"x")
        assert producer.flush(15) == 0
        assert set(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).brokers) == {1}
