"""SASL/PLAIN (SASL_PLAINTEXT and SASL_SSL) with real clients: confluent-kafka,
kafka-python, aiokafka and kcat authenticate and produce/consume; a wrong password
is refused (SASL_AUTHENTICATION_FAILED, logged with the client's address, never the
password); a request before authentication closes the connection; a cluster with
SASL_SSL on every listener replicates (the nodes authenticate to each other)."""

import asyncio
import shutil
import socket
import struct
import subprocess
import time
import sys

import pytest
import trustme
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.test_tls import produce_and_consume
from tidelog.testing import Broker, Cluster, wait_until

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def broker():
    with Broker(overrides={"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0",
                           "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}) as running:
        yield running


def alice(bootstrap, password="alice-secret", protocol="SASL_PLAINTEXT", **extra):
    return {"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": password, **extra}


def test_confluent_kafka_authenticates_with_plain(broker):
    produce_and_consume(alice(broker.bootstrap), "sasl-confluent")
    wait_until(lambda: any("authenticated as User:alice" in line for line in broker.output), 10, "the login logged")


def test_a_wrong_password_is_refused_and_never_logged(broker):
    outcome = []
    producer = Producer(alice(broker.bootstrap, password="not-her-password", **{"message.timeout.ms": 3000}))
    producer.produce("sasl-refused", b"x", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(15)
    assert len(outcome) == 1 and outcome[0] is not None
    wait_until(lambda: any("failed authentication from 127.0.0.1" in line for line in broker.output), 10,
               "the failure logged with the client's address")
    assert not any("not-her-password" in line for line in broker.output)


def test_kafka_python_and_aiokafka_authenticate_with_plain(broker):
    from kafka import KafkaConsumer, KafkaProducer
    common = dict(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                  sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer = KafkaProducer(acks="all", **common)
    for i in range(30):
        producer.send("sasl-kafka-python", b"%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("sasl-kafka-python", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    assert sorted(int(m.value) for m in consumer) == list(range(30))
    consumer.close()

    from aiokafka import AIOKafkaProducer

    async def aio():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="PLAIN", sasl_plain_username="alice",
                                    sasl_plain_password="alice-secret")
        await producer.start()
        try:
            metadata = await producer.send_and_wait("sasl-aiokafka", b"x")
        finally:
            await producer.stop()
        return metadata.offset
    assert asyncio.run(aio()) == 0


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by `make test`")
def test_kcat_authenticates_with_plain(broker):
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
            "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    subprocess.run(["kcat", "-b", broker.bootstrap, *sasl, "-P", "-t", "sasl-kcat"], input=b"a\nb\n",
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, *sasl, "-C", "-t", "sasl-kcat", "-o", "beginning",
                          "-c", "2", "-e"], capture_output=True, check=True, timeout=30)
    assert out.stdout.split() == [b"a", b"b"]


def test_a_request_before_authentication_closes_the_connection(broker):
    metadata = struct.pack(">hhih", 3, 1, 7, 1) + b"x" + struct.pack(">i", -1)      # Metadata v1, all topics
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(metadata)) + metadata)
        assert sock.recv(4096) == b""                     # closed, unanswered
    produce_and_consume(alice(broker.bootstrap), "sasl-after-probe", count=5)


def test_the_tidelog_tools_say_a_sasl_listener_needs_authentication(broker):
    for command in ("topics", "users", "transactions"):
        result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", command, "list", "-b", broker.bootstrap],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "a listener that needs SASL" in result.stderr and "SASL_PLAINTEXT" in result.stderr, result.stderr


def test_sasl_ssl_on_every_listener_of_a_cluster(tmp_path):
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    overrides = {"listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:SASL_SSL",
                 "ssl.keystore.location": str(tmp_path / "server.pem"),
                 "ssl.truststore.location": str(tmp_path / "ca.pem"),
                 "sasl.jaas.config": JAAS,
                 "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300"}
    with Cluster(brokers=3, overrides=overrides) as cluster:
        settings = alice(cluster.bootstrap, protocol="SASL_SSL", **{"ssl.ca.location": str(tmp_path / "ca.pem")})
        admin = AdminClient(settings)
        admin.create_topics([NewTopic("sasl-replicated", 3, 3)])["sasl-replicated"].result(30)
        produce_and_consume(settings, "sasl-replicated", count=300)


def test_the_tidelog_tools_reach_a_sasl_listener_with_command_config(broker, tmp_path):
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                          'username="alice" password="alice-secret";\n')

    def tidelog(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                              timeout=60)
    created = tidelog("topics", "-b", broker.bootstrap, "--command-config", str(properties), "create", "sasl-cli",
                      "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = tidelog("topics", "-b", broker.bootstrap, "--command-config", str(properties), "list")
    assert "sasl-cli" in listed.stdout.split()
    groups = tidelog("groups", "-b", broker.bootstrap, "--command-config", str(properties), "list")
    assert groups.returncode == 0, groups.stderr
    refused = tidelog("topics", "-b", broker.bootstrap, "list")          # no credentials
    assert refused.returncode != 0


SCRAM_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')


def test_scram_users_are_managed_in_the_metadata_log_and_authenticate(tmp_path):
    admin_properties = tmp_path / "admin.properties"
    admin_properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                                "sasl.username=admin\nsasl.password=admin-secret\n")

    def users(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "users", "-b", scram.bootstrap,
                               "--command-config", str(admin_properties), *args],
                              capture_output=True, text=True, timeout=60)
    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": SCRAM_JAAS,
                 "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "group.initial.rebalance.delay.ms": "0"}
    with Broker(overrides=overrides) as scram:
        assert users("add", "bob", "--password", "bob-secret").returncode == 0
        assert users("add", "bob", "--password", "bob-secret", "--mechanism", "SCRAM-SHA-256").returncode == 0
        too_few = users("add", "eve", "--password", "x", "--iterations", "100")
        assert too_few.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in too_few.stderr
        listed = users("list").stdout
        assert "bob: SCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 4096)" in listed

        def bob(mechanism, password="bob-secret", **extra):
            return {"bootstrap.servers": scram.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": mechanism, "sasl.username": "bob", "sasl.password": password, **extra}
        produce_and_consume(bob("SCRAM-SHA-512"), "scram-512", count=20)
        produce_and_consume(bob("SCRAM-SHA-256"), "scram-256", count=20)
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=scram.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob",
                                 sasl_plain_password="bob-secret")
        producer.send("scram-kafka-python", b"x").get(30)
        producer.close()

        def refused(settings) -> bool:
            outcome = []
            producer = Producer({**settings, "message.timeout.ms": 3000})
            producer.produce("scram-refused", b"x", on_delivery=lambda error, message: outcome.append(error))
            producer.flush(15)
            return outcome[0] is not None
        assert refused(bob("SCRAM-SHA-512", password="guess"))
        # The credentials are metadata: they survive a restart; a deleted one is gone.
        scram.restart()
        produce_and_consume(bob("SCRAM-SHA-512"), "scram-after-restart", count=5)
        assert users("delete", "bob").returncode == 0
        assert refused(bob("SCRAM-SHA-512"))
        assert not any("bob-secret" in line for line in scram.output)


def test_cluster_up_secure_gives_clients_working_settings(tmp_path):
    """client.properties in librdkafka's names: confluent-kafka takes its keys as they are,
    kcat -F reads it, tidelog's tools too (bootstrap.servers included); client-java.properties
    has the Java client's names; the admin's settings still reach the controllers (status)."""
    import json
    import shutil

    from tidelog.broker.config import parse_properties

    def cluster(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args, "--dir",
                               str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    up = cluster("up", "-n", "3", "--secure", "--base-port", "0", "--no-ui", "--no-metrics")
    try:
        assert up.returncode == 0, up.stderr
        security = tmp_path / "c" / "security"
        client_file = str(security / "client.properties")
        props = parse_properties((security / "client.properties").read_text())
        assert "password" not in (tmp_path / "c" / "cluster.json").read_text()
        layout = json.loads((tmp_path / "c" / "cluster.json").read_text())
        bootstrap = ",".join(f"127.0.0.1:{n['port']}" for n in layout["nodes"] if n["role"] == "broker")
        assert props["bootstrap.servers"] == bootstrap
        assert not [k for k in props if k in ("ssl.truststore.location", "sasl.jaas.config")], props
        assert f"kcat -F {client_file} -L" in up.stdout
        produce_and_consume(props, "secure-cluster", count=50)          # the file's keys as they are
        _other_clients_over_sasl_ssl_scram(bootstrap, props)
        if shutil.which("kcat") is not None:
            listed = subprocess.run(["kcat", "-F", client_file, "-L"], capture_output=True, text=True, timeout=30)
            assert listed.returncode == 0, listed.stderr
            assert "3 brokers:" in listed.stdout and "secure-cluster" in listed.stdout, listed.stdout
        java = parse_properties((security / "client-java.properties").read_text())
        assert java["ssl.truststore.type"] == "PEM" and java["ssl.truststore.location"] == props["ssl.ca.location"]
        assert 'username="client"' in java["sasl.jaas.config"] and java["bootstrap.servers"] == bootstrap
        for settings in ("client.properties", "client-java.properties", "admin.properties", "admin-java.properties"):
            tool = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "topics", "list", "--command-config",
                                   str(security / settings)], capture_output=True, text=True, timeout=60)
            assert tool.returncode == 0 and "secure-cluster" in tool.stdout.split(), (settings, tool.stderr)
        status = cluster("status")
        assert status.returncode == 0 and "leader" in status.stdout, status.stdout + status.stderr
    finally:
        cluster("down")


def _other_clients_over_sasl_ssl_scram(bootstrap: str, settings: dict) -> None:
    """kafka-python, aiokafka and kcat over SASL_SSL with SCRAM-SHA-512, unchanged."""
    import asyncio
    import shutil
    import ssl
    user, password, ca = settings["sasl.username"], settings["sasl.password"], settings["ssl.ca.location"]
    from kafka import KafkaConsumer, KafkaProducer
    common = dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_cafile=ca,
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password=password)
    producer = KafkaProducer(acks="all", **common)
    for i in range(20):
        producer.send("secure-kafka-python", b"%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("secure-kafka-python", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    assert sorted(int(m.value) for m in consumer) == list(range(20))
    consumer.close()

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def aio():
        context = ssl.create_default_context(cafile=ca)
        options = dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL", ssl_context=context,
                       sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password=password)
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("secure-aiokafka", b"%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("secure-aiokafka", auto_offset_reset="earliest", **options)
        await consumer.start()
        got = []
        try:
            while len(got) < 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 20)
                got += [int(m.value) for messages in batch.values() for m in messages]
        finally:
            await consumer.stop()
        return sorted(got)
    assert asyncio.run(aio()) == list(range(10))

    if shutil.which("kcat") is not None:
        options = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={ca}", "-X", "sasl.mechanism=SCRAM-SHA-512",
                   "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        subprocess.run(["kcat", "-b", bootstrap, *options, "-P", "-t", "secure-kcat"], input=b"one\ntwo\n",
                       check=True, timeout=30)
        out = subprocess.run(["kcat", "-b", bootstrap, *options, "-C", "-t", "secure-kcat", "-o", "beginning",
                              "-c", "2", "-e"], capture_output=True, check=True, timeout=30)
        assert out.stdout.split() == [b"one", b"two"]


def test_clients_re_authenticate_before_their_login_expires():
    """connections.max.reauth.ms (KIP-368): librdkafka renews its SCRAM and PLAIN logins
    on the open connection and keeps producing; a raw client that does not renew has
    its connection closed at its first request after the expiry."""
    import struct
    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.jaas.config": JAAS,
                 "connections.max.reauth.ms": "1500"}
    with Broker(overrides=overrides) as short:
        producer = Producer(alice(short.bootstrap))

        def re_authenticated() -> bool:                       # producing all the while
            producer.produce("reauth", b"x")
            producer.poll(0.05)
            return any("re-authenticated as User:alice" in line for line in short.output)
        wait_until(re_authenticated, 30, "a re-authentication", interval_s=0)
        for _ in range(20):                                   # and it goes on after it
            producer.produce("reauth", b"y")
            producer.poll(0.05)
        assert producer.flush(30) == 0
        from tidelog.protocol.codec import encode_request
        from tidelog.protocol.api_keys import ApiKey
        from tidelog.server.sasl import plain_token
        with socket.create_connection(("127.0.0.1", short.port), timeout=10) as sock:
            def send(api_key, version, body, correlation):
                sock.sendall(encode_request(api_key, version, correlation, "raw", body))
                head = sock.recv(4)
                if not head:
                    return None
                (size,) = struct.unpack(">i", head)
                data = b""
                while len(data) < size:
                    data += sock.recv(size - len(data))
                return data
            assert send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, 1) is not None
            assert send(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain_token("alice", "alice-secret")}, 2)
            assert send(ApiKey.METADATA, 1, {"topics": None}, 3) is not None
            time.sleep(2)                                               # the login expires
            assert send(ApiKey.METADATA, 1, {"topics": None}, 4) is None
