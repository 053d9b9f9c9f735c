"""TLS listeners (SSL) with real clients: confluent-kafka, kafka-python, aiokafka and
kcat produce and consume over TLS; a plaintext client on the TLS port fails cleanly
and the broker serves on; with ssl.client.auth=required a client without a
certificate is refused; a cluster with TLS on every listener (clients, replication,
the controller) replicates with acks=all."""

import asyncio
import shutil
import socket
import struct
import subprocess
import time

import pytest
import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker, Cluster, wait_until


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(directory / "server.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    client = ca.issue_cert("alice.example.com", common_name="alice")
    client.private_key_pem.write_to_path(str(directory / "client.key"))
    client.cert_chain_pems[0].write_to_path(str(directory / "client.crt"))
    return directory


def tls_settings(certificates, client_auth="none"):
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(certificates / "server.pem"),
            "ssl.truststore.location": str(certificates / "ca.pem"), "ssl.client.auth": client_auth}


@pytest.fixture(scope="module")
def broker(certificates):
    with Broker(overrides=tls_settings(certificates)) as running:
        yield running


def client_settings(broker, certificates, **extra):
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(certificates / "ca.pem"), **extra}


def produce_and_consume(settings, topic, count=200):
    producer = Producer({**settings, "acks": "all"})
    for i in range(count):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(int(message.value()))
    consumer.close()
    assert sorted(got) == list(range(count))


def test_confluent_kafka_produces_and_consumes_over_tls(broker, certificates):
    produce_and_consume(client_settings(broker, certificates), "tls-confluent")


def test_kafka_python_and_aiokafka_over_tls(broker, certificates):
    import ssl
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                             ssl_cafile=str(certificates / "ca.pem"), acks="all")
    sent = [producer.send("tls-kafka-python", b"%d" % i) for i in range(50)]
    producer.flush(30)
    offsets = sorted(future.get(timeout=30).offset for future in sent)     # raises what the broker answered
    producer.close()
    assert offsets == list(range(50))
    consumer = KafkaConsumer("tls-kafka-python", bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                             ssl_cafile=str(certificates / "ca.pem"), auto_offset_reset="earliest")
    got = []
    deadline = time.monotonic() + 60          # polled until all 50 are in (iterating the consumer
    while len(got) < 50 and time.monotonic() < deadline:     # waited its whole idle timeout)
        for records in consumer.poll(timeout_ms=500).values():
            got += [int(m.value) for m in records]
    assignment = consumer.assignment()
    consumer.close()
    assert sorted(got) == list(range(50)), f"{len(got)} records; partitions assigned: {assignment}"

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def aio():
        context = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                                    ssl_context=context)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("tls-aiokafka", b"%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tls-aiokafka", bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                                    ssl_context=context, auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            while len(got) < 20:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 20)
                got += [int(m.value) for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()
        return sorted(got)
    assert asyncio.run(aio()) == list(range(20))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by `make test`")
def test_kcat_over_tls(broker, certificates):
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certificates / 'ca.pem'}"]
    subprocess.run(["kcat", "-b", broker.bootstrap, *tls, "-P", "-t", "tls-kcat"], input=b"one\ntwo\n",
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, *tls, "-C", "-t", "tls-kcat", "-o", "beginning",
                          "-c", "2", "-e"], capture_output=True, check=True, timeout=30)
    assert out.stdout.split() == [b"one", b"two"]


def test_a_plaintext_client_on_the_tls_port_is_closed_and_the_broker_serves_on(broker, certificates):
    api_versions = struct.pack(">hhih", 18, 0, 1, 1) + b"x"
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(api_versions)) + api_versions)
        data = b""
        while True:
            chunk = sock.recv(4096)        # a TLS alert at most, then the close
            if not chunk:
                break
            data += chunk
        assert not data.startswith(b"\x00\x00")              # never a Kafka response
    wait_until(lambda: any("TLS handshake" in line and "failed" in line for line in broker.output), 10,
               "the failed handshake in the broker's log")
    produce_and_consume(client_settings(broker, certificates), "tls-after-plaintext", count=10)


@pytest.mark.parametrize("command", ["topics", "groups", "acls"])
def test_the_tidelog_tools_say_a_plaintext_connection_reached_a_tls_listener(broker, command):
    import sys
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", command, "list", "-b", broker.bootstrap],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"{broker.bootstrap} is a TLS listener and this connection is plaintext" in result.stderr, result.stderr
    assert "SSL or SASL_SSL" in result.stderr and "bytes read" not in result.stderr


def test_client_auth_required_refuses_a_client_without_a_certificate(certificates):
    with Broker(overrides=tls_settings(certificates, client_auth="required")) as strict:
        anonymous = Producer({**client_settings(strict, certificates), "message.timeout.ms": 3000})
        outcome = []
        anonymous.produce("tls-required", b"x", on_delivery=lambda error, message: outcome.append(error))
        anonymous.flush(15)
        assert len(outcome) == 1 and outcome[0] is not None      # never delivered
        wait_until(lambda: any("TLS handshake" in line for line in strict.output), 10, "the refusal logged")
        with_certificate = client_settings(strict, certificates, **{
            "ssl.certificate.location": str(certificates / "client.crt"),
            "ssl.key.location": str(certificates / "client.key")})
        produce_and_consume(with_certificate, "tls-required", count=10)


def test_a_cluster_with_tls_on_every_listener_replicates(certificates):
    overrides = {"listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:SSL",
                 "ssl.keystore.location": str(certificates / "server.pem"),
                 "ssl.truststore.location": str(certificates / "ca.pem"),
                 "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
    with Cluster(brokers=3, overrides=overrides) as cluster:
        settings = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SSL",
                    "ssl.ca.location": str(certificates / "ca.pem")}
        admin = AdminClient(settings)
        admin.create_topics([NewTopic("tls-replicated", 3, 3)])["tls-replicated"].result(30)
        produce_and_consume(settings, "tls-replicated", count=300)      # acks=all: followers fetch over TLS


def test_the_tidelog_tools_reach_a_tls_listener_with_command_config(broker, certificates, tmp_path):
    import sys
    properties = tmp_path / "client.properties"
    properties.write_text(f"security.protocol=SSL\nssl.truststore.location={certificates / 'ca.pem'}\n")
    described = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "topics", "-b", broker.bootstrap,
                                "--command-config", str(properties), "create", "tls-cli"],
                               capture_output=True, text=True, timeout=60)
    assert described.returncode == 0, described.stderr


def test_the_key_store_is_reloaded_without_a_restart(tmp_path):
    """IncrementalAlterConfigs on BROKER <id> (kafka-configs --entity-type brokers) with a
    new listener.name.ssl.ssl.keystore.location: new connections get the new certificate."""
    old_ca, new_ca = trustme.CA(), trustme.CA()
    old_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "old.pem"))
    new_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "new.pem"))
    old_ca.cert_pem.write_to_path(str(tmp_path / "old-ca.pem"))
    new_ca.cert_pem.write_to_path(str(tmp_path / "new-ca.pem"))
    with Broker(overrides={"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(tmp_path / "old.pem")}) \
            as broker:
        def trusting(ca):
            return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                    "ssl.ca.location": str(tmp_path / ca)}
        produce_and_consume(trusting("old-ca.pem"), "before-reload", count=5)
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
        admin = AdminClient(trusting("old-ca.pem"))
        resource = ConfigResource("BROKER", "1", incremental_configs=[ConfigEntry(
            "listener.name.ssl.ssl.keystore.location", str(tmp_path / "new.pem"),
            incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(15)
        wait_until(lambda: any("reloaded its TLS key" in line for line in broker.output), 15, "the reload")
        produce_and_consume(trusting("new-ca.pem"), "after-reload", count=5)
        refused = []
        stale = Producer({**trusting("old-ca.pem"), "message.timeout.ms": 3000})
        stale.produce("after-reload", b"x", on_delivery=lambda error, message: refused.append(error))
        stale.flush(15)
        assert refused and refused[0] is not None          # the old CA no longer matches
