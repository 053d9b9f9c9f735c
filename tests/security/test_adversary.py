"""The house, not only the front door: every API key tidelog serves, on every listener,
called as an attacker would — with no credentials, a wrong password, a valid user
without ACLs, another certificate the cluster's CA signed, and the ordinary ``client``
user of ``cluster up --secure`` — and answered with Kafka's refusal each time.

One ``cluster up --secure`` (a controller and two brokers, real processes) serves the
whole module; a second fixture is one SASL+ACL ``tidelog serve`` with its own
controller listener. While the attacks run, the ``client`` user produces with
acks=all, and every acknowledged record is read back at the end.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
import time
import uuid

import pytest

from tests.security.probe import AUTHORIZATION_FAILED, CLOSED, call, probe_body
from tidelog.cluster import ProcessCluster
from tidelog.cluster_security import _certificate_authority, create_client_user, paths
from tidelog.controller.scram_control import salted_password
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection
from tidelog.protocol.codec import kio_versions

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

# Answered to anyone (authenticated): the handshake APIs, and DescribeCluster on a
# broker (Kafka asks no ACL for it; it names what Metadata names).
OPEN = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
OPEN_ON_BROKER = OPEN | {ApiKey.DESCRIBE_CLUSTER}
SECRET_TOPIC = "secret"


def run(coroutine):
    return asyncio.run(coroutine)


# ----------------------------------------------------------------- fixtures

class Secure:
    def __init__(self, cluster: ProcessCluster):
        self.cluster = cluster
        layout = cluster.layout
        self.host = layout.host
        self.directory = layout.directory
        self.security_dir = os.path.join(layout.directory, "security")
        self.files = paths(layout.directory)
        self.broker_ports = [n.port for n in layout.brokers]
        self.controller_port = layout.controller.port
        self.client_password = open(os.path.join(self.security_dir, "client.password")).read().strip()
        self.admin_password = open(os.path.join(self.security_dir, "admin.password")).read().strip()

    def tls(self, certificate: str | None = None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(self.files["ca"])
        if certificate is not None:
            context.load_cert_chain(certificate)
        return context

    def certificate(self, common_name: str) -> str:
        """A certificate of the cluster's own CA for ``common_name`` (what a stolen or
        mis-issued client certificate looks like)."""
        path = os.path.join(self.security_dir, f"test-{common_name}.pem")
        if not os.path.exists(path):
            ca = _certificate_authority(self.security_dir, self.files["ca"])
            ca.issue_cert("localhost", "127.0.0.1", common_name=common_name) \
                .private_key_and_cert_chain_pem.write_to_path(path)
        return path

    def node_certificate(self, node_id: int) -> str:
        return os.path.join(self.security_dir, f"node-{node_id}.pem")

    def sasl(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> ClientSecurity:
        return ClientSecurity(self.tls(), mechanism, user, password)

    def confluent(self, user: str = "client", **extra) -> dict:
        password = self.client_password if user == "client" else extra.pop("password")
        return {"bootstrap.servers": ",".join(f"{self.host}:{p}" for p in self.broker_ports),
                "security.protocol": "SASL_SSL", "ssl.ca.location": self.files["ca"],
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password, **extra}


async def _connect(host, port, security, client_id="attacker"):
    return await KafkaConnection.connect(host, port, client_id=client_id, timeout_s=10, security=security)


async def _as_admin(secure: Secure, api_key: int, body: dict, port: int | None = None):
    connection = await _connect(secure.host, port or secure.broker_ports[0],
                                secure.sasl("admin", secure.admin_password, "PLAIN"), "admin")
    try:
        return await connection.request(api_key, body)
    finally:
        connection.close()


def _add_scram_user(secure: Secure, user: str, password: str) -> None:
    salt = os.urandom(16)
    answer = run(_as_admin(secure, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [], "upsertions": [{
        "name": user, "mechanism": 2, "iterations": 4096, "salt": salt,
        "salted_password": salted_password(2, password, salt, 4096)}]}))
    assert int(answer.results[0].error_code.value) == 0


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("adversary") / "cluster")
    cluster = ProcessCluster.create(directory, brokers=2, base_port=0, secure=True)
    cluster.up()
    try:
        secure = Secure(cluster)
        create_client_user(directory, (secure.host, secure.broker_ports[0]))
        _add_scram_user(secure, "mallory", "mallory-secret")      # a valid user with no ACLs
        admin = confluent_kafka.admin.AdminClient({**secure.confluent(), "sasl.mechanism": "PLAIN",
                                                   "sasl.username": "admin", "sasl.password": secure.admin_password})
        for future in admin.create_topics([confluent_kafka.admin.NewTopic(SECRET_TOPIC, 2, 2)]).values():
            future.result(30)
        metadata = run(_as_admin(secure, ApiKey.METADATA, {"topics": [{"name": SECRET_TOPIC}]}))
        topic_id = metadata.topics[0].topic_id
        # Fetch and Produce of recent versions name the topic by id (an unknown id is
        # UNKNOWN_TOPIC_ID before any ACL, as Kafka): the real one.
        secure.by_topic_id = {ApiKey.FETCH: {"topic_id": topic_id}, ApiKey.PRODUCE: {"topic_id": topic_id}}
        yield secure
    finally:
        cluster.down()


# ------------------------------------------------------------ the sweeps

def _versions(connection, api_key: int) -> list[int]:
    ours, theirs = kio_versions(api_key), connection.api_versions[api_key]
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    return sorted({low, high})


async def _sweep(host, port, security, open_keys, overrides=None) -> dict:
    """Every API key the listener advertises, at its lowest and highest version, as the
    given identity: {(key, version): error codes, or CLOSED}. After each refusal the same
    connection must still answer ApiVersions."""
    results = {}
    connection = await _connect(host, port, security)
    try:
        for api_key in sorted(connection.api_versions):
            if api_key in open_keys or kio_versions(api_key) is None:
                continue
            for version in _versions(connection, api_key):
                if connection.closed:
                    connection = await _connect(host, port, security)
                body = probe_body(api_key, version, SECRET_TOPIC, **(overrides or {}).get(api_key, {}))
                results[(ApiKey(api_key).name, version)] = await call(connection, api_key, version, body)
    finally:
        connection.close()
    return results


# Versions whose answer has no place for an error: Kafka answers them empty.
NO_ERROR_FIELD = {("DESCRIBE_LOG_DIRS", 1), ("DESCRIBE_LOG_DIRS", 2)}
# Listings answer with what the caller may describe, without an error (Kafka's rule;
# test_listings_show_only_what_the_caller_may_describe checks what they list).
LISTINGS = {"LIST_GROUPS", "LIST_TRANSACTIONS"}


def _not_refused(results: dict) -> dict:
    """The calls that were not answered with an authorization error (and nothing else)."""
    wrong = {}
    for (name, version), codes in results.items():
        if (name, version) in NO_ERROR_FIELD and codes == set():
            continue
        if name in LISTINGS and codes == {ErrorCode.NONE}:
            continue
        if codes == CLOSED or not isinstance(codes, set) or not codes & AUTHORIZATION_FAILED \
                or codes - AUTHORIZATION_FAILED - {ErrorCode.NONE}:
            wrong[(name, version)] = codes
    return wrong


def test_a_user_without_acls_is_refused_every_api_on_the_client_listener(secure):
    results = run(_sweep(secure.host, secure.broker_ports[0], secure.sasl("mallory", "mallory-secret"), OPEN_ON_BROKER,
                         secure.by_topic_id))
    assert len(results) > 60, results            # every API the broker serves, two versions each
    # Listings answer with what may be described (nothing here), as Kafka's: checked below.
    listings = {k: results.pop(k) for k in list(results) if k[0] in ("LIST_GROUPS", "LIST_TRANSACTIONS")}
    assert listings and all(codes == {ErrorCode.NONE} for codes in listings.values()), listings
    # Metadata answers (the topic it names is refused inside): checked below.
    assert _not_refused(results) == {}
    assert results[("METADATA", max(v for n, v in results if n == "METADATA"))] >= {ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_another_certificate_of_the_cluster_ca_is_refused_every_controller_api(secure):
    """The controller listener authenticates (client certificates) and authorizes: a
    certificate the CA signed for someone else (CN=intruder) reaches it but may call
    nothing — not the metadata log's Fetch, not BrokerHeartbeat, not the admin APIs."""
    intruder = ClientSecurity(secure.tls(secure.certificate("intruder")))
    results = run(_sweep(secure.host, secure.controller_port, intruder, OPEN))
    names = {name for name, _ in results}
    assert {"FETCH", "BROKER_HEARTBEAT", "BROKER_REGISTRATION", "VOTE", "BEGIN_QUORUM_EPOCH", "CREATE_TOPICS",
            "ALTER_USER_SCRAM_CREDENTIALS", "CREATE_ACLS", "ELECT_LEADERS", "DESCRIBE_CLUSTER",
            "ADD_RAFT_VOTER", "REMOVE_RAFT_VOTER", "UPDATE_RAFT_VOTER"} <= names
    assert _not_refused(results) == {}


def test_no_certificate_no_controller_listener(secure):
    """Item 1 of the report: an anonymous TLS client reached every controller API."""
    with pytest.raises((ssl.SSLError, ConnectionError, OSError, asyncio.TimeoutError)):
        async def go():
            connection = await _connect(secure.host, secure.controller_port, ClientSecurity(secure.tls()))
            try:            # TLS 1.3 reports a refused client certificate at the first read
                await connection.request(ApiKey.FETCH, probe_body(ApiKey.FETCH, 12, "__cluster_metadata"), version=12)
            finally:
                connection.close()
        run(go())


def test_no_sasl_no_api_and_a_wrong_password_fails(secure):
    """Before SASL authentication only ApiVersions and the SASL APIs are served (Kafka
    closes the connection on anything else); a wrong password fails the login."""
    results = run(_sweep(secure.host, secure.broker_ports[0], ClientSecurity(secure.tls()), OPEN))
    assert results and all(codes == CLOSED for codes in results.values()), results
    with pytest.raises(KafkaError) as failure:
        run(_connect(secure.host, secure.broker_ports[0], secure.sasl("client", "not-the-password")))
    assert failure.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


# What the ordinary client user must not do (item 6 of the report), with bodies that
# make each request the dangerous one.
CLIENT_FORBIDDEN = {
    ApiKey.DELETE_TOPICS: {}, ApiKey.CREATE_PARTITIONS: {}, ApiKey.DELETE_RECORDS: {},
    ApiKey.ALTER_CONFIGS: {}, ApiKey.INCREMENTAL_ALTER_CONFIGS: {}, ApiKey.CREATE_ACLS: {},
    ApiKey.DELETE_ACLS: {}, ApiKey.DESCRIBE_ACLS: {}, ApiKey.ELECT_LEADERS: {},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"upsertions": [{"name": "admin", "mechanism": 2, "iterations": 4096,
                                                          "salt": b"s", "salted_password": b"p" * 64}],
                                          "deletions": []},
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {}, ApiKey.WRITE_TXN_MARKERS: {}, ApiKey.DESCRIBE_LOG_DIRS: {},
    ApiKey.DESCRIBE_QUORUM: {}, ApiKey.ALTER_REPLICA_LOG_DIRS: {},
    ApiKey.FETCH: {"replica_id": 1},                       # a follower's fetch
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {"replica_id": 1},     # a follower's
    ApiKey.DESCRIBE_CONFIGS: {"resource_type": 4, "resource_name": "1"},    # a broker's configs
}


def test_the_client_user_has_nothing_on_the_cluster(secure):
    async def go():
        connection = await _connect(secure.host, secure.broker_ports[0], secure.sasl("client", secure.client_password))
        results = {}
        try:
            for api_key, overrides in CLIENT_FORBIDDEN.items():
                version = connection.version_for(api_key)
                body = probe_body(api_key, version, SECRET_TOPIC, **overrides)
                results[ApiKey(api_key).name] = await call(connection, api_key, version, body)
        finally:
            connection.close()
        return results
    results = run(go())
    wrong = {name: codes for name, codes in results.items()
             if codes == CLOSED or not codes & AUTHORIZATION_FAILED}
    assert wrong == {}, wrong
    # ... and the super user's password still works (the SCRAM upsert above was refused).
    run(_as_admin(secure, ApiKey.DESCRIBE_CLUSTER, {}))


def test_the_client_user_produces_consumes_and_uses_groups_and_transactions(secure):
    topic = "client-work"
    producer = confluent_kafka.Producer(secure.confluent(**{"enable.idempotence": True, "acks": "all"}))
    for i in range(20):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    transactional = confluent_kafka.Producer(secure.confluent(**{"transactional.id": "client-txn"}))
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"in-txn")
    transactional.commit_transaction(30)
    consumer = confluent_kafka.Consumer(secure.confluent(**{"group.id": "client-group", "auto.offset.reset": "earliest",
                                                            "isolation.level": "read_committed"}))
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 21 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted([b"%d" % i for i in range(20)] + [b"in-txn"])


def test_one_node_cannot_speak_for_another(secure):
    """Item 4 of the report: BrokerHeartbeat want_shut_down fenced any broker. Now only a
    node principal may call it, and only for itself: node 2's certificate asking to shut
    broker 1 down is refused, and broker 1 stays unfenced."""
    async def heartbeat(certificate: str, broker_id: int):
        connection = await _connect(secure.host, secure.controller_port, ClientSecurity(secure.tls(certificate)))
        try:
            return await call(connection, ApiKey.BROKER_HEARTBEAT, 1, probe_body(
                ApiKey.BROKER_HEARTBEAT, 1, "x", broker_id=broker_id, broker_epoch=0, want_shut_down=True,
                want_fence=True, replica_log_ends=[   # tidelog's tag: absurd claims of a longest log
                    {"topic_id": uuid.uuid4(), "partition_index": p, "last_epoch": 2**31 - 1,
                     "log_end_offset": 2**63 - 1} for p in (-1, 0, 2**31 - 1)]))
        finally:
            connection.close()
    assert run(heartbeat(secure.node_certificate(2), 1)) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    assert run(heartbeat(secure.certificate("intruder"), 1)) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    time.sleep(1.0)
    answer = run(_as_admin(secure, ApiKey.DESCRIBE_CLUSTER, {}))
    assert sorted(int(b.broker_id) for b in answer.brokers) == [1, 2]


def test_attacks_lose_no_acknowledged_write(secure):
    """acks=all produce through every sweep above, again, and read everything back."""
    topic, stop, acknowledged, errors = "under-attack", threading.Event(), [], []

    def produce():
        producer = confluent_kafka.Producer(secure.confluent(**{"acks": "all", "enable.idempotence": True,
                                                                "linger.ms": 5}))

        def delivered(error, message):
            (errors if error else acknowledged).append(error or message.value())
        i = 0
        while not stop.is_set():
            producer.produce(topic, b"%d" % i, on_delivery=delivered)
            producer.poll(0)
            i += 1
            time.sleep(0.002)
        producer.flush(30)
    thread = threading.Thread(target=produce)
    thread.start()
    try:
        run(_sweep(secure.host, secure.broker_ports[1], secure.sasl("mallory", "mallory-secret"), OPEN_ON_BROKER,
                   secure.by_topic_id))
        run(_sweep(secure.host, secure.controller_port, ClientSecurity(secure.tls(secure.certificate("intruder"))),
                   OPEN))
        run(_sweep(secure.host, secure.broker_ports[0], ClientSecurity(secure.tls()), OPEN))
    finally:
        stop.set()
        thread.join(60)
    assert errors == [] and len(acknowledged) > 100
    consumer = confluent_kafka.Consumer(secure.confluent(**{"group.id": "verify", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got, deadline = set(), time.monotonic() + 60
    while len(got) < len(set(acknowledged)) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.add(message.value())
    consumer.close()
    assert set(acknowledged) <= got


# ------------------------------------------- one SASL + ACL `tidelog serve`

def _free_port() -> int:
    """A port for a server named before it starts (per xdist worker: docs/testing.md)."""
    from tests.kafka_fixture import free_port
    return free_port()


@pytest.fixture(scope="module")
def single():
    """One combined node: SASL_PLAINTEXT for clients and for its controller listener,
    PLAIN users admin (super user) and alice (no ACLs), Kafka's default
    allow.everyone.if.no.acl.found=false."""
    from tidelog.testing import Broker
    controller_port = _free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    with Broker(overrides={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin"}) as broker:
        broker.controller_port = controller_port
        yield broker


def _plain(user: str, password: str) -> ClientSecurity:
    return ClientSecurity(None, "PLAIN", user, password)


def test_single_node_refuses_a_user_without_acls_on_both_listeners(single):
    client = run(_sweep("127.0.0.1", single.port, _plain("alice", "alice-secret"), OPEN_ON_BROKER,
                        {ApiKey.FETCH: {"topic_id": None}, ApiKey.PRODUCE: {"topic_id": None}}))
    # Fetch and Produce by topic id name no topic here: UNKNOWN_TOPIC_ID comes before any ACL, as in Kafka.
    wrong = {k: v for k, v in _not_refused(client).items() if v - {ErrorCode.NONE} != {ErrorCode.UNKNOWN_TOPIC_ID}}
    assert wrong == {}
    controller = run(_sweep("127.0.0.1", single.controller_port, _plain("alice", "alice-secret"), OPEN))
    assert {"FETCH", "BROKER_HEARTBEAT", "VOTE", "CREATE_TOPICS", "ALTER_USER_SCRAM_CREDENTIALS"} <= \
        {name for name, _ in controller}
    assert _not_refused(controller) == {}
    # Nobody without a login gets further than the handshake, on either listener.
    for port in (single.port, single.controller_port):
        anonymous = run(_sweep("127.0.0.1", port, None, OPEN | {ApiKey.DESCRIBE_CLUSTER}))
        assert anonymous and all(codes == CLOSED for codes in anonymous.values()), anonymous
        with pytest.raises(KafkaError):
            run(_connect("127.0.0.1", port, _plain("admin", "wrong")))
    # The super user (the node's own identity) is still served on the controller listener.
    async def as_admin():
        connection = await _connect("127.0.0.1", single.controller_port, _plain("admin", "admin-secret"))
        try:
            return await call(connection, ApiKey.DESCRIBE_QUORUM, 0, probe_body(ApiKey.DESCRIBE_QUORUM, 0,
                                                                                "__cluster_metadata"))
        finally:
            connection.close()
    assert run(as_admin()) == {ErrorCode.NONE}


def test_listings_show_only_what_the_caller_may_describe(secure):
    """ListGroups and ListTransactions as Kafka answers them under ACLs: no error, and only
    the groups / transactional ids the caller may DESCRIBE (everything with DESCRIBE on the
    cluster)."""
    consumer = confluent_kafka.Consumer(secure.confluent(**{"group.id": "listed-group"}))
    consumer.commit(offsets=[confluent_kafka.TopicPartition(SECRET_TOPIC, 0, 0)], asynchronous=False)
    consumer.close()

    async def listed(security):          # each broker lists the groups it coordinates
        groups = set()
        for port in secure.broker_ports:
            connection = await _connect(secure.host, port, security)
            try:
                answer = await connection.request(ApiKey.LIST_GROUPS, {})
                assert int(answer.error_code.value) == 0
                groups |= {g.group_id for g in answer.groups}
            finally:
                connection.close()
        return groups
    assert "listed-group" in run(listed(secure.sasl("client", secure.client_password)))
    assert run(listed(secure.sasl("mallory", "mallory-secret"))) == set()


def test_no_secret_in_logs_answers_or_readable_files(secure):
    """After every attack above: no password in any log of the cluster or in a
    DescribeConfigs answer of any node's configs, and nothing under the cluster's
    directory readable by other local users."""
    import stat
    secrets = [secure.admin_password, secure.client_password, "mallory-secret"]
    for node in secure.cluster.layout.nodes:
        resource = {"resource_type": 4, "resource_name": str(node.node_id), "configuration_keys": None}
        if node.role == "broker":
            answer = run(_as_admin(secure, ApiKey.DESCRIBE_CONFIGS, {"resources": [resource],
                                                                    "include_synonyms": True}, node.port))
            text = repr(answer)
            assert not any(s in text for s in secrets)
            jaas = [c for r in answer.results for c in r.configs if c.name == "sasl.jaas.config"]
            assert jaas and all(c.value is None and c.is_sensitive for c in jaas)
    def private(path: str) -> bool:     # no group/other bits on it or on a directory above it
        while True:
            if not os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                return True
            if os.path.samefile(path, secure.directory):
                return False
            path = os.path.dirname(path)
    assert private(secure.directory)
    readable = []
    for root, directories, files in os.walk(secure.directory):
        for name in directories + files:
            path = os.path.join(root, name)
            if not private(path):
                readable.append((path, oct(os.stat(path).st_mode & 0o777)))
            if name.endswith(".log"):
                with open(path, errors="replace") as f:
                    text = f.read()
                assert not any(s in text for s in secrets), path
    assert readable == []


def test_items_are_authorized_one_by_one(secure):
    """Where Kafka authorizes item by item (configs, groups, committed topics), the items
    allowed are served and only the others refused, in one answer."""
    acl = {"resource_pattern_type": 3, "principal": "User:mallory", "host": "*", "permission_type": 3}
    answer = run(_as_admin(secure, ApiKey.CREATE_ACLS, {"creations": [
        {**acl, "resource_type": 3, "resource_name": "mallorys-group", "operation": 3},             # READ group
        {**acl, "resource_type": 2, "resource_name": "mallorys-topic", "operation": 3},             # READ topic
        {**acl, "resource_type": 2, "resource_name": SECRET_TOPIC, "operation": 10},                # DESCRIBE_CONFIGS
        {**acl, "resource_type": 2, "resource_name": "mallorys-topic", "operation": 11}]}))         # ALTER_CONFIGS
    assert all(int(r.error_code.value) == 0 for r in answer.results)
    time.sleep(1.0)                         # the ACLs reach every broker's image

    async def go():
        connection = await _connect(secure.host, secure.broker_ports[0], secure.sasl("mallory", "mallory-secret"))
        try:
            configs = await connection.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": SECRET_TOPIC, "configuration_keys": None},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None}]})
            # Forwarded to the controller (an entity comes back) with the refused item added.
            altered = await connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": name, "configs": [
                    {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}
                for name in ("mallorys-topic", SECRET_TOPIC)]})
            assert {r.resource_name: int(r.error_code.value) for r in altered.responses} == {
                "mallorys-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, SECRET_TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
            deadline = time.monotonic() + 30
            while True:             # until __consumer_offsets exists
                found = await connection.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "key": "mallorys-group",
                                                                          "coordinator_keys": ["mallorys-group"]})
                coordinator = found.coordinators[0] if getattr(found, "coordinators", None) else found
                if int(coordinator.error_code.value) == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
        finally:
            connection.close()
        connection = await _connect(secure.host, int(coordinator.port), secure.sasl("mallory", "mallory-secret"))
        try:        # the group's coordinator serves it; the other group is refused
            groups = await connection.request(ApiKey.DESCRIBE_GROUPS, {"groups": ["mallorys-group", "someone-else"]})
            return configs, groups
        finally:
            connection.close()
    configs, groups = run(go())
    by_name = {r.resource_name: r for r in configs.results}
    assert int(by_name[SECRET_TOPIC].error_code.value) == 0 and by_name[SECRET_TOPIC].configs
    assert int(by_name["1"].error_code.value) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    by_group = {g.group_id: int(g.error_code.value) for g in groups.groups}
    assert by_group == {"mallorys-group": 0, "someone-else": ErrorCode.GROUP_AUTHORIZATION_FAILED}
