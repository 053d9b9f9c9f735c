"""Listeners and the APIs each serves, on real processes: the controller's APIs only
on a controller listener (``controller.listener.names``), never on the clients' one;
listeners whose security protocol tidelog cannot honour are refused at start."""

import asyncio
import os
import socket
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker, wait_until

CONTROLLER_APIS = {ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
                   ApiKey.ALLOCATE_PRODUCER_IDS,
                   ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER}   # KIP-853


def free_port() -> int:
    """A port for a server named before it starts (per xdist worker: docs/testing.md)."""
    from tests.kafka_fixture import free_port as worker_free_port
    return worker_free_port()


def listed_apis(port: int) -> set[int]:
    async def ask():
        connection = await KafkaConnection.connect("127.0.0.1", port)
        try:
            versions = await connection.request(ApiKey.API_VERSIONS, {"client_software_name": "t",
                                                                      "client_software_version": "1"})
            return {int(k.api_key) for k in versions.api_keys}
        finally:
            connection.close()
    return asyncio.run(ask())


def test_a_combined_node_serves_its_controller_on_the_controller_listener_only(tmp_path):
    client_port, controller_port = free_port(), free_port()
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}",
                "controller.listener.names": "CONTROLLER", "broker.session.timeout.ms": "3000",
                "broker.heartbeat.interval.ms": "500"}
    with Broker(overrides=settings) as combined:
        assert not CONTROLLER_APIS & listed_apis(client_port)
        assert CONTROLLER_APIS <= listed_apis(controller_port)
        # A broker-only node joins the cluster through the controller listener.
        cluster_id = open(os.path.join(combined.data_dir, "data", "meta.properties")).read()
        cluster_id = next(line.split("=", 1)[1] for line in cluster_id.splitlines() if line.startswith("cluster.id"))
        args = [sys.executable, "-m", "tidelog.cli.main", "serve"]
        for key, value in {"node.id": "2", "process.roles": "broker", "cluster.id": cluster_id,
                           "log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0",
                           "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                           "broker.heartbeat.interval.ms": "500"}.items():
            args += ["--override", f"{key}={value}"]
        second = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            admin = AdminClient({"bootstrap.servers": combined.bootstrap})
            wait_until(lambda: set(admin.list_topics(timeout=10).brokers) == {1, 2}, 30, "broker 2 registered")
            producer = Producer({"bootstrap.servers": combined.bootstrap})
            producer.produce("through-both", b"x")
            assert producer.flush(15) == 0
        finally:
            second.terminate()
            second.wait(30)


def test_secured_listeners_without_their_settings_are_refused_at_start(tmp_path):
    """An SSL listener without a key, a SASL one without users, an unknown protocol: the
    node refuses to start, naming what is missing (never serving it unprotected) in one
    line, not a traceback; so does a listener missing from the protocol map, or a second
    client listener."""
    for listeners, protocol_map, message in (
            ("SSL://127.0.0.1:0", None, "no key and certificate"),
            ("SECURE://127.0.0.1:0", "SECURE:SASL_PLAINTEXT", "JAAS setting needs username and password"),
            ("ODD://127.0.0.1:0", "ODD:KERBEROS", "unknown security protocol"),
            ("PLAINTEXT://127.0.0.1:0,FOO://127.0.0.1:0", None, "listener FOO has no security protocol"),
            ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", None, "one client listener is supported")):
        args = [sys.executable, "-m", "tidelog.cli.main", "serve", "--override", f"log.dirs={tmp_path / 'data'}",
                "--override", f"listeners={listeners}"]
        if protocol_map:
            args += ["--override", f"listener.security.protocol.map={protocol_map}"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert message in result.stderr + result.stdout, result.stderr[-2000:]
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        assert "tidelog ready" not in result.stdout


def test_a_taken_port_is_named_and_nothing_is_formatted(tmp_path):
    """The address is checked before the log directory is formatted: a start that cannot
    listen leaves no meta.properties behind and says which address is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for listeners, extra in ((f"PLAINTEXT://127.0.0.1:{port}", []),
                                 ("PLAINTEXT://127.0.0.1:0", ["--override", f"metrics.port={port}"])):
            data = tmp_path / f"data-{len(extra)}"
            result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "serve", "--override",
                                     f"log.dirs={data}", "--override", f"listeners={listeners}", *extra],
                                    capture_output=True, text=True, timeout=60)
            output = result.stdout + result.stderr
            assert result.returncode == 1, output[-2000:]
            assert f"cannot listen on 127.0.0.1:{port}" in output and "Address already in use" in output, output
            assert not (data / "meta.properties").exists()


def test_a_misspelt_setting_is_warned_with_the_setting_meant(tmp_path):
    with Broker(overrides={"log.retention.hour": "5", "auto.create.topic.enable": "false"}) as broker:
        warnings = [line for line in broker.output if "WARNING" in line]
    assert any("ignoring unknown configuration log.retention.hour (did you mean log.retention.hours" in line
               for line in warnings), warnings
    assert any("auto.create.topic.enable (did you mean auto.create.topics.enable?)" in line for line in warnings)
