"""Issue 32's new surfaces, attacked: DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs on every config resource (BROKER by id and "", GROUP, TOPIC,
BROKER_LOGGER, CLIENT_METRICS, unknown types), the authorized operations of Metadata,
DescribeCluster, DescribeGroups and ConsumerGroupDescribe, and the HTTP endpoints —
called by everyone who should not get through: no login, a wrong password, a user
without ACLs, a user with only DESCRIBE_CONFIGS, a user with ALTER_CONFIGS on one topic
and one group, the ordinary ``client`` user, another certificate of the cluster's CA on
the controller listener, and through a broker that forwards to the controller.

Each refusal must be Kafka's error code (tests/conformance/scenarios.py
``unauthorized_configs`` compares the same calls with a real Kafka 4.4), and nothing
may change: checked by describing as the super user and by reading the ConfigRecords
of the controller's metadata log. Absurd values get Kafka's error, or the connection
closed where Kafka's parser refuses the request, and the cluster stays up with bounded
memory. Secrets are never in an answer, a log or an HTTP page.

One ``cluster up --secure`` (a controller, two brokers, /metrics on) serves the module.
"""

from __future__ import annotations

import asyncio
import glob
import os
import socket
import uuid

import pytest

from tests.security.probe import CLOSED, call
from tests.security.test_adversary import Secure, _add_scram_user, _as_admin, _connect
from tidelog.cluster import ProcessCluster, state_token_path
from tidelog.cluster_security import create_client_user
from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.metadata.authorizer import AclOperation
from tidelog.metadata.records import ConfigRecord, decode
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity
from tidelog.records.batch import iter_batches, iter_records, read_header
from tidelog.testing import wait_until

E = ErrorCode
NONE, TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH = E.NONE, E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, \
    E.CLUSTER_AUTHORIZATION_FAILED
INVALID_REQUEST = E.INVALID_REQUEST
DESCRIBE, ALTER, INCREMENTAL = ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
Op = AclOperation        # ACL operations; their codes are the bits of authorized operations (KIP-430)
NOT_PROVIDED = -(1 << 31)
USERS = {"mallory": "mallory-Secret-1", "dora": "dora-Secret-2", "tom": "tom-Secret-3", "rita": "rita-Secret-4"}
PLANTED = "planted-Secret-5"          # a dynamic per-broker TLS password the super user sets


def bits(*operations: AclOperation) -> int:
    return sum(1 << int(op) for op in operations)


def run(coroutine):
    return asyncio.run(coroutine)


# ----------------------------------------------------------------- the cluster

class Attack(Secure):
    def security(self, who: str) -> ClientSecurity:
        if who == "admin":
            return self.sasl("admin", self.admin_password, "PLAIN")
        if who == "client":
            return self.sasl("client", self.client_password)
        return self.sasl(who, USERS[who])

    def secrets(self) -> list[str]:
        return [self.admin_password, self.client_password, PLANTED, *USERS.values()]

    def leaked(self, text: str | bytes) -> list[int]:
        """Which of ``secrets()`` ``text`` holds, by index (a failure must not print them)."""
        if isinstance(text, bytes):
            text = text.decode("latin-1")
        return [i for i, secret in enumerate(self.secrets()) if secret in text]

    async def request(self, who, api_key: int, body: dict, port: int | None = None, version: int | None = None,
                      security: ClientSecurity | None = None):
        connection = await _connect(self.host, port or self.broker_ports[0], security or self.security(who), who)
        try:
            return await connection.request(api_key, body, version=version, timeout_s=30)
        finally:
            connection.close()

    def requests(self, who, calls: list[tuple], port: int | None = None,
                 security: ClientSecurity | None = None) -> list:
        """``[(api_key, body, version)]`` sent in turn on one connection: the answers."""
        async def go():
            connection = await _connect(self.host, port or self.broker_ports[0], security or self.security(who), who)
            try:
                return [await connection.request(api_key, body, version=version, timeout_s=30)
                        for api_key, body, version in calls]
            finally:
                connection.close()
        return run(go())

    def config_records(self) -> list[tuple]:
        """Every ConfigRecord in the controller's metadata log, in order (what the cluster
        really changed, whatever any answer said)."""
        directory = os.path.join(self.directory, self.cluster.layout.controller.name, "data", "__cluster_metadata-0")
        found = []
        for path in sorted(glob.glob(os.path.join(directory, "*.log"))):
            with open(path, "rb") as f:
                data = f.read()
            for position, _ in iter_batches(data):
                if read_header(data, position).is_control:
                    continue
                for record in iter_records(data, position):
                    entry = decode(record.value)
                    if isinstance(entry, ConfigRecord):
                        found.append((entry.resource_type, entry.resource_name, entry.name, entry.value))
        return found

    def resident_kib(self) -> dict[int, int]:
        out = {}
        for node in self.cluster.layout.nodes:
            with open(f"/proc/{node.pid}/status") as f:
                out[node.node_id] = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return out


def _acl(principal: str, resource_type: int, name: str, operation: AclOperation, pattern: int = 3) -> dict:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": int(operation), "permission_type": 3}


ACLS = [
    # dora: only DESCRIBE_CONFIGS, on the cluster, every topic and every group
    _acl("User:dora", 4, "kafka-cluster", Op.DESCRIBE_CONFIGS), _acl("User:dora", 2, "*", Op.DESCRIBE_CONFIGS),
    _acl("User:dora", 3, "*", Op.DESCRIBE_CONFIGS),
    # tom: ALTER_CONFIGS on one topic and one group
    _acl("User:tom", 2, "toms-topic", Op.ALTER_CONFIGS), _acl("User:tom", 3, "toms-group", Op.ALTER_CONFIGS),
    # rita: READ on one topic and on the groups named ritas-*
    _acl("User:rita", 2, "ritas-topic", Op.READ), _acl("User:rita", 3, "ritas-", Op.READ, pattern=4),
]


@pytest.fixture(scope="module")
def attack(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("config-attacks") / "cluster")
    cluster = ProcessCluster.create(directory, brokers=2, base_port=0, secure=True, metrics_base_port=0)
    cluster.up()
    try:
        attack = Attack(cluster)
        create_client_user(directory, (attack.host, attack.broker_ports[0]))
        for user, password in USERS.items():
            _add_scram_user(attack, user, password)
        answer = run(_as_admin(attack, ApiKey.CREATE_TOPICS, {"topics": [
            {"name": name, "num_partitions": 1, "replication_factor": 2, "assignments": [], "configs": []}
            for name in ("secret", "toms-topic", "ritas-topic")], "timeout_ms": 30_000, "validate_only": False}))
        assert all(int(t.error_code.value) == 0 for t in answer.topics), answer
        answer = run(_as_admin(attack, ApiKey.CREATE_ACLS, {"creations": ACLS}))
        assert all(int(r.error_code.value) == 0 for r in answer.results), answer

        def everywhere() -> bool:      # every broker's image has the ACLs and the topics
            for port in attack.broker_ports:
                acls = run(_as_admin(attack, ApiKey.DESCRIBE_ACLS, {
                    "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                    "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}, port))
                if sum(len(r.acls) for r in acls.resources) < len(ACLS):
                    return False
            return True
        wait_until(everywhere, timeout_s=30, what="the ACLs on every broker")
        yield attack
    finally:
        cluster.down()


# ------------------------------------------------------------------ helpers

VALUES = {TOPIC: ("retention.ms", "3600000"), BROKER: ("message.max.bytes", "2000000"),
          BROKER_LOGGER: ("root", "DEBUG"), CLIENT_METRICS: ("interval.ms", "1000"),
          GROUP: ("consumer.session.timeout.ms", "50000")}


def config_body(api: int, resources: list[tuple[int, str]], validate_only: bool = False) -> dict:
    if api == DESCRIBE:
        return {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None}
                              for t, n in resources], "include_synonyms": True, "include_documentation": False}
    operation = {"config_operation": 0} if api == INCREMENTAL else {}
    return {"validate_only": validate_only, "resources": [{"resource_type": t, "resource_name": n, "configs": [
        {"name": VALUES.get(t, ("a", "b"))[0], "value": VALUES.get(t, ("a", "b"))[1], **operation}]}
        for t, n in resources]}


def answers(response) -> list[tuple[int, str, ErrorCode, str | None]]:
    items = getattr(response, "results", None) or getattr(response, "responses", None) or ()
    return [(int(r.resource_type), r.resource_name, ErrorCode(int(r.error_code.value)), r.error_message)
            for r in items]


def codes(response) -> dict[tuple[int, str], ErrorCode]:
    return {(t, n): code for t, n, code, _ in answers(response)}


VERSIONS = {DESCRIBE: (1, 4), ALTER: (0, 2), INCREMENTAL: (0, 1)}     # the lowest and highest tidelog serves
# Every config resource the sweeps name: the cluster's, two groups, two topics.
TARGETS = [(BROKER, "1"), (BROKER, ""), (BROKER_LOGGER, "1"), (CLIENT_METRICS, "m"), (GROUP, "toms-group"),
           (GROUP, "others-group"), (TOPIC, "secret"), (TOPIC, "toms-topic")]


def expected(who: str, api: int, resource: tuple[int, str]) -> ErrorCode:
    """Kafka's answer to ``who`` (the ACLs above) for ``api`` on ``resource``."""
    kind, name = resource
    if api == ALTER and kind == BROKER_LOGGER:
        return INVALID_REQUEST                  # "Unknown resource type 8": AlterConfigs never knew loggers
    if who == "admin":
        # tidelog does not serve loggers and client metrics (Kafka would answer NONE).
        return INVALID_REQUEST if kind in (BROKER_LOGGER, CLIENT_METRICS) else NONE
    describe = api == DESCRIBE
    allowed = {
        "dora": describe,
        "tom": name in ("toms-topic", "toms-group"),                # ALTER_CONFIGS implies DESCRIBE_CONFIGS
        "client": describe and kind == TOPIC,                       # DESCRIBE_CONFIGS on every topic
    }.get(who, False)
    if kind in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        allowed = allowed and who == "dora"
        if allowed:
            return INVALID_REQUEST if kind != BROKER else NONE      # loggers, client metrics: not served
        return CLUSTER_AUTH
    if allowed:
        return NONE
    return GROUP_AUTH if kind == GROUP else TOPIC_AUTH


def described(attack: Attack, resource: tuple[int, str], port: int | None = None) -> dict[str, tuple]:
    """The super user's view: {name: (value, config_source)} of what is set on ``resource``
    itself (dynamic topic, broker, default broker or group sources)."""
    response = run(attack.request("admin", DESCRIBE, config_body(DESCRIBE, [resource]), port))
    (result,) = response.results
    assert int(result.error_code.value) == 0, result
    return {c.name: (c.value, int(c.config_source)) for c in result.configs if int(c.config_source) in (1, 2, 3, 8)}


# ------------------------------------------------------------------ no login

def test_no_login_no_config_call_and_wrong_passwords_fail(attack):
    """Before SASL authentication a config call closes the connection (Kafka's
    SaslServerAuthenticator); a wrong password or an unknown user fails the login."""
    tls_only = ClientSecurity(attack.tls())

    async def anonymous(port: int):
        found = {}
        for api in (DESCRIBE, ALTER, INCREMENTAL):
            connection = await _connect(attack.host, port, tls_only)
            try:
                found[api] = await call(connection, api, connection.version_for(api),
                                        config_body(api, [(BROKER, "1"), (TOPIC, "secret")]))
            finally:
                connection.close()
        return found
    for port in attack.broker_ports:
        assert run(anonymous(port)) == {DESCRIBE: CLOSED, ALTER: CLOSED, INCREMENTAL: CLOSED}
    for user, password in (("tom", "not-toms-password"), ("nobody", "x"), ("admin", attack.client_password)):
        with pytest.raises(KafkaError) as failure:
            run(attack.request(user, DESCRIBE, config_body(DESCRIBE, [(BROKER, "1")]),
                               security=attack.sasl(user, password)))
        assert failure.value.error_code == E.SASL_AUTHENTICATION_FAILED


# ------------------------------------------------------- who may call what

@pytest.mark.parametrize("who", ["mallory", "client", "dora", "tom", "admin"])
def test_each_caller_gets_kafkas_code_for_each_config_resource(attack, who):
    """Every config API on every resource type, each resource alone and all in one request
    (authorized item by item; the super user's only together: each of its alterations is
    forwarded to the controller), at broker 1; then nothing changed but what the caller
    may change (tom: his topic and his group)."""
    before = attack.config_records()
    calls = [(api, config_body(api, resources, validate_only=True), version)
             for api in (DESCRIBE, ALTER, INCREMENTAL) for version in VERSIONS[api]
             for resources in ([] if who == "admin" else [[resource] for resource in TARGETS]) + [TARGETS]]
    for (api, body, version), response in zip(calls, attack.requests(who, calls)):
        resources = [(r["resource_type"], r["resource_name"]) for r in body["resources"]]
        assert codes(response) == {r: expected(who, api, r) for r in resources}, (ApiKey(api).name, version, resources)
    # The same for real (not validate_only): what is refused is not written.
    for api in (INCREMENTAL, ALTER):
        got = codes(run(attack.request(who, api, config_body(api, TARGETS))))
        assert got == {r: expected(who, api, r) for r in TARGETS}
    written = {(t, n) for t, n, _, _ in attack.config_records()[len(before):]}
    allowed = {"tom": {(TOPIC, "toms-topic"), (GROUP, "toms-group")},
               "admin": {(TOPIC, "secret"), (TOPIC, "toms-topic"), (GROUP, "toms-group"), (GROUP, "others-group"),
                         (BROKER, "1"), (BROKER, "")}}.get(who, set())
    assert written <= allowed and (written or not allowed), written
    if who == "admin":              # undone, so the other callers' checks see the settings the cluster began with
        for resource in allowed:
            name = VALUES[resource[0]][0]
            run(attack.request("admin", INCREMENTAL, {"validate_only": False, "resources": [
                {"resource_type": resource[0], "resource_name": resource[1],
                 "configs": [{"name": name, "config_operation": 1, "value": None}]}]}))
    for resource in ((BROKER, ""), (GROUP, "others-group"), (TOPIC, "secret")):
        assert described(attack, resource) == {}, resource
    assert "message.max.bytes" not in described(attack, (BROKER, "1"))


def test_a_real_admin_client_meets_the_same_refusals(attack):
    """confluent-kafka's AdminClient (librdkafka) as tom and as mallory: tom alters his
    topic and his group, and is refused another group, a broker and a topic, each with
    its own code; mallory may not even describe a group."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def client(user: str) -> AdminClient:
        return AdminClient(attack.confluent(user, password=USERS[user]))

    def outcome(future) -> str:
        try:
            future.result(30)
            return "NONE"
        except KafkaException as e:
            return e.args[0].name()

    def setting(kind, name: str, key: str, value: str) -> ConfigResource:
        return ConfigResource(kind, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    tom = client("tom")
    altered = tom.incremental_alter_configs([
        setting(ResourceType.TOPIC, "toms-topic", "retention.ms", "3600000"),
        setting(ResourceType.GROUP, "toms-group", "consumer.session.timeout.ms", "50000"),
        setting(ResourceType.GROUP, "others-group", "consumer.session.timeout.ms", "50000"),
        setting(ResourceType.TOPIC, "secret", "retention.ms", "1")])
    assert {r.name: outcome(f) for r, f in altered.items()} == {
        "toms-topic": "NONE", "toms-group": "NONE", "others-group": "GROUP_AUTHORIZATION_FAILED",
        "secret": "TOPIC_AUTHORIZATION_FAILED"}
    broker = setting(ResourceType.BROKER, "1", "message.max.bytes", "2000000")
    assert outcome(tom.incremental_alter_configs([broker])[broker]) == "CLUSTER_AUTHORIZATION_FAILED"
    described_group = ConfigResource(ResourceType.GROUP, "toms-group")

    def toms_timeout() -> str:
        return tom.describe_configs([described_group])[described_group].result(30)["consumer.session.timeout.ms"].value
    # DescribeConfigs reads the answering broker's metadata, which learns the committed
    # change a moment later (Kafka's too): until then it shows the default, 45000.
    wait_until(lambda: toms_timeout() == "50000", 30, "tom's group config described as set")
    mallory = client("mallory")
    for resource, code in ((ConfigResource(ResourceType.GROUP, "toms-group"), "GROUP_AUTHORIZATION_FAILED"),
                           (ConfigResource(ResourceType.BROKER, "1"), "CLUSTER_AUTHORIZATION_FAILED"),
                           (ConfigResource(ResourceType.TOPIC, "toms-topic"), "TOPIC_AUTHORIZATION_FAILED")):
        assert outcome(mallory.describe_configs([resource])[resource]) == code
    assert described(attack, (TOPIC, "secret")) == {} and described(attack, (GROUP, "others-group")) == {}


def test_kafkas_kafka_configs_meets_the_same_refusals_and_sees_no_secret(attack, tmp_path):
    """Kafka's own kafka-configs (ConfigCommand, Java AdminClient 4.4) as tom: his group
    described, another group's alteration and a broker's description refused with the
    Java exceptions Kafka's codes map to; as the super user, a broker's every setting
    described with the passwords shown as null and sensitive."""
    from tests.interop.java_driver import JavaDriver, missing_tools
    if missing_tools():
        pytest.skip(missing_tools())
    bootstrap = f"{attack.host}:{attack.broker_ports[0]}"
    admin_properties = os.path.join(attack.security_dir, "admin-java.properties")
    tom_properties = tmp_path / "tom.properties"
    with open(admin_properties) as f:
        lines = [line for line in f if not line.startswith(("sasl.jaas.config", "sasl.mechanism"))]
    tom_properties.write_text("".join(lines) + "sasl.mechanism=SCRAM-SHA-512\n"
                              "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                              f'username="tom" password="{USERS["tom"]}";\n')
    java = JavaDriver()
    try:
        def configs(properties, *args):
            return java.tool("ConfigCommand", "--bootstrap-server", bootstrap, "--command-config", str(properties),
                             *args)
        own = configs(tom_properties, "--entity-type", "groups", "--entity-name", "toms-group", "--describe")
        assert own.exit_code == 0, own
        other = configs(tom_properties, "--entity-type", "groups", "--entity-name", "others-group", "--alter",
                        "--add-config", "consumer.session.timeout.ms=50000")
        assert other.exit_code != 0 and "GroupAuthorizationException" in other.stdout + other.stderr, other
        broker = configs(tom_properties, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
        assert broker.exit_code != 0 and "ClusterAuthorizationException" in broker.stdout + broker.stderr, broker
        everything = configs(admin_properties, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
        # (the messages do not print the output: it would hold any secret that leaked)
        assert everything.exit_code == 0, everything.stderr[-2000:]
        assert "sasl.jaas.config=null sensitive=true" in everything.stdout, "the JAAS setting is shown"
        assert not attack.leaked(everything.stdout + everything.stderr), "a secret is shown"
    finally:
        java.close()
        java.remove_log()
    assert described(attack, (GROUP, "others-group")) == {}


def test_the_controller_listener_refuses_config_calls_from_another_certificate(attack):
    """A certificate the cluster's CA signed for someone else reaches the controller
    listener (ssl.client.auth=required) but is refused every config call with the code of
    the resource's kind; an unknown type is INVALID_REQUEST before any ACL, as Kafka."""
    intruder = ClientSecurity(attack.tls(attack.certificate("intruder")))
    before = attack.config_records()
    for api in (DESCRIBE, ALTER, INCREMENTAL):
        got = codes(run(attack.request(None, api, config_body(api, TARGETS), attack.controller_port,
                                       security=intruder)))
        assert got == {r: expected("mallory", api, r) for r in TARGETS}, ApiKey(api).name
        got = codes(run(attack.request(None, api, config_body(api, [(99, "x")]), attack.controller_port,
                                       security=intruder)))
        assert got == {(99, "x"): INVALID_REQUEST}
    assert attack.config_records() == before


def test_forwarding_does_not_lift_a_callers_rights(attack):
    """Broker 2 has no controller role: it forwards alterations to the controller as
    itself (a super user). Only what tom may alter gets there; everything else is refused
    at the broker and never reaches the metadata log — also with validate_only, also with
    AlterConfigs."""
    port = attack.broker_ports[1]
    resources = [(TOPIC, "toms-topic"), (TOPIC, "secret"), (BROKER, ""), (BROKER, "2"), (GROUP, "others-group"),
                 (GROUP, "toms-group")]
    for api in (INCREMENTAL, ALTER):
        for validate_only in (True, False):
            before = attack.config_records()
            got = codes(run(attack.request("tom", api, config_body(api, resources, validate_only), port)))
            assert got == {(TOPIC, "toms-topic"): NONE, (TOPIC, "secret"): TOPIC_AUTH, (BROKER, ""): CLUSTER_AUTH,
                           (BROKER, "2"): CLUSTER_AUTH, (GROUP, "others-group"): GROUP_AUTH,
                           (GROUP, "toms-group"): NONE}, (ApiKey(api).name, validate_only)
            written = {(t, n) for t, n, _, _ in attack.config_records()[len(before):]}
            assert written == (set() if validate_only else {(TOPIC, "toms-topic"), (GROUP, "toms-group")})
    assert described(attack, (TOPIC, "toms-topic"), port) == {"retention.ms": ("3600000", 1)}
    for resource in ((TOPIC, "secret"), (BROKER, ""), (GROUP, "others-group")):
        assert described(attack, resource, port) == {}
    assert "message.max.bytes" not in described(attack, (BROKER, "2"), port)


# ------------------------------------------------------------------- secrets

def test_secrets_are_never_described_logged_or_served_over_http(attack):
    """A dynamic per-broker TLS password set by the super user, and the static ones (the
    JAAS setting with every PLAIN password): DescribeConfigs, every version, with and
    without synonyms, as the super user and as dora (DESCRIBE_CONFIGS everywhere), on both
    brokers, the cluster default and the controller's own node, answers every password
    with a null value and is_sensitive; no answer, log, /metrics or /state shows one."""
    name = "listener.name.plaintext.ssl.key.password"
    answer = run(attack.request("admin", INCREMENTAL, {"validate_only": False, "resources": [
        {"resource_type": BROKER, "resource_name": "1", "configs": [
            {"name": name, "config_operation": 0, "value": PLANTED}]}]}))
    assert answers(answer)[0][2] == NONE
    # Refused attempts to plant one where it does not belong: the message names the setting, not the value.
    for resource, setting in (((BROKER, ""), name), ((TOPIC, "toms-topic"), "ssl.key.password"),
                              ((GROUP, "toms-group"), "sasl.jaas.config")):
        answer = run(attack.request("admin", INCREMENTAL, {"validate_only": False, "resources": [
            {"resource_type": resource[0], "resource_name": resource[1], "configs": [
                {"name": setting, "config_operation": 0, "value": PLANTED}]}]}))
        assert answers(answer)[0][2] != NONE and not attack.leaked(repr(answer))

    wait_until(lambda: name in described(attack, (BROKER, "1")), timeout_s=30, what="the planted password")
    seen = []
    for who in ("admin", "dora"):
        for port, node in zip(attack.broker_ports, ("1", "2")):
            calls = [(DESCRIBE, {"resources": [{"resource_type": BROKER, "resource_name": n, "configuration_keys": None}
                                               for n in (node, "")],
                                 "include_synonyms": synonyms, "include_documentation": False}, version)
                     for version in (1, 2, 3, 4) for synonyms in (False, True)]
            for (_, _, version), response in zip(calls, attack.requests(who, calls, port)):
                text = repr(response)
                assert not attack.leaked(text), (who, node, version)
                for result in response.results:
                    assert int(result.error_code.value) == 0
                    for c in result.configs:
                        if "password" in c.name or "jaas" in c.name:
                            seen.append(c.name)
                            assert c.value is None and c.is_sensitive, c
                            assert all(s.value is None for s in getattr(c, "synonyms", ()))
    assert {name, "sasl.jaas.config"} <= set(seen)
    # The controller's own settings, asked on its listener with the operator's certificate.
    operator = ClientSecurity(attack.tls(os.path.join(attack.security_dir, "admin.pem")))
    controller_id = str(attack.cluster.layout.controller.node_id)
    response = run(attack.request(None, DESCRIBE, config_body(DESCRIBE, [(BROKER, controller_id)]),
                                  attack.controller_port, security=operator))
    assert not attack.leaked(repr(response))
    # HTTP: /metrics (open) and /state (with its token) of every node.
    token = open(state_token_path(attack.directory)).read().strip()
    for node in attack.cluster.layout.nodes:
        for target, headers in (("/metrics", {}), ("/state", {"Authorization": f"Bearer {token}"})):
            status, body = http(node.metrics_port, "GET", target, headers)
            assert status == 200 and body, (node.node_id, target)
            assert not attack.leaked(body), (node.node_id, target)
    # The logs of every node.
    for path in glob.glob(os.path.join(attack.directory, "*", "*.log")):
        with open(path, errors="replace") as f:
            text = f.read()
        assert not attack.leaked(text), path
    run(attack.request("admin", INCREMENTAL, {"validate_only": False, "resources": [
        {"resource_type": BROKER, "resource_name": "1", "configs": [
            {"name": name, "config_operation": 1, "value": None}]}]}))


def http(port: int, method: str, target: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close", "Content-Length: 0"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_http_endpoints_read_no_configs_and_change_nothing(attack):
    """An unauthenticated HTTP caller: /state and /state-changes need the token, every
    write method is refused, and no path serves or changes configs."""
    token = open(state_token_path(attack.directory)).read().strip()
    before = attack.config_records()
    for node in attack.cluster.layout.nodes:
        port = node.metrics_port
        for target in ("/state", "/event-loop", "/event-loop?since=-1&limit=99999999999999999999"):
            assert http(port, "GET", target)[0] == 401, target
            assert http(port, "GET", target, {"Authorization": "Bearer " + "x" * len(token)})[0] == 401, target
        status, body = http(port, "GET", "/event-loop?limit=-5&x=%00", {"Authorization": f"Bearer {token}"})
        assert status == 200 and b"stall_max_ms" in body, (status, body)
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            for target in ("/metrics", "/state", "/event-loop", "/configs"):
                status, _ = http(port, method, target, {"Authorization": f"Bearer {token}"})
                assert 400 <= status < 500, (method, target, status)
        for target in ("/configs", "/config", "/admin", "/state/../configs", "/metrics?name=sasl.jaas.config"):
            status, body = http(port, "GET", target, {"Authorization": f"Bearer {token}"})
            assert status in (200, 404), (target, status)
            assert b"jaas" not in body and b"password" not in body, target
        status, body = http(port, "GET", "/state", {"Authorization": f"Bearer {token}"})
        assert status == 200 and b"retention.ms" not in body
    assert attack.config_records() == before


# ------------------------------------------------------ authorized operations

async def _coordinator_port(attack: Attack, who: str, group: str) -> int:
    while True:             # __consumer_offsets is created on first use
        found = await attack.request(who, ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": [group]},
                                     version=4)
        coordinator = found.coordinators[0]
        if int(coordinator.error_code.value) == 0:
            return int(coordinator.port)
        await asyncio.sleep(0.2)


def test_authorized_operations_are_exactly_the_callers_acls(attack):
    """rita may READ one topic and the groups ritas-*: Metadata lists only her topic, with
    READ and DESCRIBE (READ implies DESCRIBE) and nothing for a topic she may not describe;
    DescribeGroups and ConsumerGroupDescribe give READ and DESCRIBE on her groups and
    GROUP_AUTHORIZATION_FAILED on another; the cluster's operations are 0 to everyone but
    a caller with DESCRIBE on the cluster (dora's DESCRIBE_CONFIGS alone does not count)."""
    ask = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
           "include_cluster_authorized_operations": True}
    for version in (8, 10, 12):
        listed = run(attack.request("rita", ApiKey.METADATA, {**ask, "topics": None}, version=version))
        assert {t.name: t.topic_authorized_operations for t in listed.topics} == {
            "ritas-topic": bits(Op.READ, Op.DESCRIBE)}
        named = run(attack.request("rita", ApiKey.METADATA, {**ask, "topics": [
            {"name": "secret"}, {"name": "ritas-topic"}]}, version=version))
        assert {t.name: (ErrorCode(int(t.error_code.value)), t.topic_authorized_operations) for t in named.topics} == {
            "secret": (TOPIC_AUTH, NOT_PROVIDED), "ritas-topic": (NONE, bits(Op.READ, Op.DESCRIBE))}
        if version <= 10:
            assert listed.cluster_authorized_operations == 0
    everything = bits(Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                      Op.IDEMPOTENT_WRITE)
    for who, operations in (("rita", 0), ("dora", 0), ("client", 0), ("mallory", 0), ("admin", everything)):
        for port in attack.broker_ports:
            answer = run(attack.request(who, ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True},
                                        port))
            assert answer.cluster_authorized_operations == operations, who
    admin_via_controller = run(attack.request(None, ApiKey.DESCRIBE_CLUSTER, {
        "include_cluster_authorized_operations": True}, attack.controller_port, security=ClientSecurity(
            attack.tls(os.path.join(attack.security_dir, "admin.pem")))))
    assert admin_via_controller.cluster_authorized_operations == everything

    classic, modern = "ritas-classic", "ritas-modern"

    async def groups():
        port = await _coordinator_port(attack, "rita", classic)
        commit = await attack.request("rita", ApiKey.OFFSET_COMMIT, {
            "group_id": classic, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "ritas-topic", "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}, port, version=8)
        assert int(commit.topics[0].partitions[0].error_code.value) == 0, commit
        described_groups = await attack.request("rita", ApiKey.DESCRIBE_GROUPS, {
            "groups": [classic, "others-group"], "include_authorized_operations": True}, port)
        port = await _coordinator_port(attack, "rita", modern)
        joined = await attack.request("rita", ApiKey.CONSUMER_GROUP_HEARTBEAT, {
            "group_id": modern, "member_id": str(uuid.uuid4()), "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": ["ritas-topic"],
            "server_assignor": None, "topic_partitions": []}, port, version=0)
        assert int(joined.error_code.value) == 0, joined
        consumer_groups = await attack.request("rita", ApiKey.CONSUMER_GROUP_DESCRIBE, {
            "group_ids": [modern, "others-group"], "include_authorized_operations": True}, port)
        return described_groups, consumer_groups
    described_groups, consumer_groups = run(groups())
    assert {g.group_id: (int(g.error_code.value), g.authorized_operations) for g in described_groups.groups} == {
        classic: (0, bits(Op.READ, Op.DESCRIBE)), "others-group": (GROUP_AUTH, NOT_PROVIDED)}
    assert {g.group_id: (int(g.error_code.value), g.authorized_operations) for g in consumer_groups.groups} == {
        modern: (0, bits(Op.READ, Op.DESCRIBE)), "others-group": (GROUP_AUTH, NOT_PROVIDED)}


# -------------------------------------------------------------- absurd values

def _incremental(resource: tuple[int, str], *configs: tuple[str, str | None], operation: int = 0) -> dict:
    return {"validate_only": False, "resources": [{"resource_type": resource[0], "resource_name": resource[1],
                                                   "configs": [{"name": k, "config_operation": operation, "value": v}
                                                               for k, v in configs]}]}


def test_absurd_values_are_refused_change_nothing_and_keep_memory_bounded(attack):
    resident, before = attack.resident_kib(), attack.config_records()
    metadata_dir = os.path.join(attack.directory, attack.cluster.layout.controller.name, "data", "__cluster_metadata-0")
    metadata_bytes = sum(os.path.getsize(p) for p in glob.glob(os.path.join(metadata_dir, "*.log")))
    toms_topic, toms_group = (TOPIC, "toms-topic"), (GROUP, "toms-group")
    refused = {     # label: (who, request, expected [(code, words the message must hold)])
        "negative retention": ("tom", _incremental(toms_topic, ("retention.ms", "-5")),
                               [(E.INVALID_CONFIG, "retention.ms")]),
        "huge retention": ("tom", _incremental(toms_topic, ("retention.ms", "9" * 40)),
                           [(E.INVALID_CONFIG, "retention.ms")]),
        "negative segment": ("tom", _incremental(toms_topic, ("segment.bytes", "-1")),
                             [(E.INVALID_CONFIG, "segment.bytes")]),
        "empty config name": ("tom", _incremental(toms_topic, ("", "1")), [(E.INVALID_CONFIG, "")]),
        "group below bound": ("tom", _incremental(toms_group, ("consumer.session.timeout.ms", "1000")),
                              [(E.INVALID_CONFIG, "45000")]),
        "group above bound": ("tom", _incremental(toms_group, ("consumer.heartbeat.interval.ms", "99999999999")),
                              [(E.INVALID_CONFIG, "consumer.heartbeat.interval.ms")]),
        "group negative": ("tom", _incremental(toms_group, ("consumer.session.timeout.ms", "-50000")),
                           [(E.INVALID_CONFIG, "consumer.session.timeout.ms")]),
        "group not a number": ("tom", _incremental(toms_group, ("consumer.session.timeout.ms", "soon")),
                               [(E.INVALID_CONFIG, "consumer.session.timeout.ms")]),
        "unknown group config": ("tom", _incremental(toms_group, ("ssl.key.password", "x")),
                                 [(E.INVALID_CONFIG, "ssl.key.password")]),
        "a key twice": ("tom", _incremental(toms_topic, ("retention.ms", "1"), ("retention.ms", "2")),
                        [(INVALID_REQUEST, "duplicate")]),
        "unknown operation": ("tom", _incremental(toms_topic, ("retention.ms", "1"), operation=7),
                              [(INVALID_REQUEST, "operation")]),
        "5000 unknown configs": ("tom", _incremental(toms_topic, *[(f"no.such.{i}", "1") for i in range(5000)]),
                                 [(E.INVALID_CONFIG, "no.such.0")]),
        "empty topic": ("admin", _incremental((TOPIC, ""), ("retention.ms", "1")),
                        [(INVALID_REQUEST, "Default topic resources are not allowed")]),
        "empty group": ("admin", _incremental((GROUP, ""), ("consumer.session.timeout.ms", "50000")),
                        [(INVALID_REQUEST, "Default group")]),
        "another broker": ("admin", _incremental((BROKER, "2"), ("message.max.bytes", "2000000")),
                           [(INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")]),
        "negative broker": ("admin", _incremental((BROKER, "-1"), ("message.max.bytes", "2000000")),
                            [(INVALID_REQUEST, "Unexpected broker id, expected 1, but received -1")]),
        "not a broker id": ("admin", _incremental((BROKER, "one"), ("message.max.bytes", "2000000")),
                            [(INVALID_REQUEST, "Node id must be an integer, but it is: one")]),
        "broker id beyond int": ("admin", _incremental((BROKER, "99999999999"), ("message.max.bytes", "2")),
                                 [(INVALID_REQUEST, "Node id must be an integer")]),
        "unknown type 99": ("mallory", _incremental((99, "x"), ("a", "b")),
                            [(INVALID_REQUEST, "Unknown resource type 99")]),
        "unknown type -1": ("mallory", _incremental((-1, "x"), ("a", "b")),
                            [(INVALID_REQUEST, "Unknown resource type -1")]),
        "a resource twice": ("mallory", {"validate_only": False, "resources": [
            _incremental(toms_topic, ("retention.ms", "1"))["resources"][0]] * 2},
            [(INVALID_REQUEST, "at most once")] * 2),
        "a resource twice, allowed": ("tom", {"validate_only": False, "resources": [
            _incremental(toms_topic, ("retention.ms", "1"))["resources"][0]] * 2},
            [(INVALID_REQUEST, "at most once")] * 2),
    }
    by_caller: dict[str, list] = {}
    for label, (who, body, wanted) in refused.items():
        by_caller.setdefault(who, []).append((INCREMENTAL, body, None))
    responses = {who: iter(attack.requests(who, calls)) for who, calls in by_caller.items()}
    for label, (who, body, wanted) in refused.items():
        got = answers(next(responses[who]))
        assert [code for _, _, code, _ in got] == [code for code, _ in wanted], (label, got)
        assert all(words in (message or "") for (_, _, _, message), (_, words) in zip(got, wanted)), (label, got)
    # AlterConfigs: a resource twice (Kafka 4.4 fails to answer that one; tidelog refuses both copies).
    twice = {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "toms-topic",
         "configs": [{"name": "retention.ms", "value": "1"}]}] * 2}
    assert [code for _, _, code, _ in answers(run(attack.request("tom", ALTER, twice)))] == [INVALID_REQUEST] * 2
    # DescribeConfigs: an unknown type refuses the whole request, as Kafka.
    got = answers(run(attack.request("admin", DESCRIBE, config_body(DESCRIBE, [(99, "x"), (TOPIC, "secret")]))))
    assert [code for _, _, code, _ in got] == [INVALID_REQUEST] * 2
    # 5000 resources in one request: each answered, only tom's own allowed (and refused for its value).
    many = {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": f"t-{i}", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "-5"}]} for i in range(4999)] + [
        _incremental(toms_topic, ("retention.ms", "-5"))["resources"][0]]}
    got = codes(run(attack.request("tom", INCREMENTAL, many)))
    assert len(got) == 5000 and got[toms_topic] == E.INVALID_CONFIG
    assert set(got.values()) == {TOPIC_AUTH, E.INVALID_CONFIG}
    # A string longer than Kafka's 32767 bytes (a 10 MB value, a 40 KB topic name) is a
    # request Kafka's parser refuses: the connection closes and nothing is stored.
    for body in (_incremental((BROKER, "1"), ("listener.name.plaintext.ssl.key.password", "x" * (10 << 20))),
                 _incremental((TOPIC, "t" * 40_000), ("retention.ms", "1")),
                 _incremental((BROKER, "1"), ("listener.name.plaintext.ssl.key.password", "x" * 32_768))):
        with pytest.raises(ConnectionError):
            run(attack.request("admin", INCREMENTAL, body))
    # Nothing changed, the cluster serves, and memory and the metadata log stayed bounded.
    assert attack.config_records() == before
    assert described(attack, toms_topic).get("retention.ms", ("3600000",))[0] == "3600000"
    assert described(attack, toms_group).get("consumer.session.timeout.ms", ("50000",))[0] == "50000"
    for port in attack.broker_ports:
        metadata = run(attack.request("admin", ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False},
                                      port))
        assert len(metadata.brokers) == 2
    grown = sum(os.path.getsize(p) for p in glob.glob(os.path.join(metadata_dir, "*.log"))) - metadata_bytes
    assert grown < 256 * 1024, grown
    after = attack.resident_kib()
    assert all(after[node] - resident[node] < 64 * 1024 for node in resident), (resident, after)


# ------------------------------------------------ log directories (issue 29's new API)

def _log_dirs(attack: Attack, port: int) -> dict[str, set[tuple[str, int, bool]]]:
    """The super user's DescribeLogDirs: {directory: {(topic, partition, is_future)}}."""
    response = run(attack.request("admin", ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, port))
    assert int(response.error_code.value) == 0, response
    return {r.log_dir: {(t.name, p.partition_index, bool(p.is_future_key)) for t in r.topics for p in t.partitions}
            for r in response.results}


def _move(path: str, topic: str = "secret") -> dict:
    return {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [0]}]}]}


def test_log_directory_calls_need_cluster_rights_and_move_nothing_otherwise(attack):
    """AlterReplicaLogDirs needs ALTER on the cluster and DescribeLogDirs DESCRIBE on it
    (Kafka's KafkaApis): every other caller — a user without ACLs, one with
    DESCRIBE_CONFIGS or ALTER_CONFIGS only, the ordinary client —
    gets CLUSTER_AUTHORIZATION_FAILED, learns
    nothing of the directories (the code does not depend on whether the path exists),
    and no replica moves. The super user's move to a directory the broker does not have
    ("/etc", a relative "../x") is LOG_DIR_NOT_FOUND and moves nothing either."""
    port = attack.broker_ports[0]
    before = _log_dirs(attack, port)
    (real_dir,) = [d for d, partitions in before.items() if ("secret", 0, False) in partitions]
    for who in ("mallory", "dora", "tom", "client"):
        for path in (real_dir, "/etc", "../x"):
            answer = run(attack.request(who, ApiKey.ALTER_REPLICA_LOG_DIRS, _move(path), port))
            got = {(r.topic_name, p.partition_index): ErrorCode(int(p.error_code.value))
                   for r in answer.results for p in r.partitions}
            assert got == {("secret", 0): CLUSTER_AUTH}, (who, path, got)
        described_dirs = run(attack.request(who, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, port))
        assert ErrorCode(int(described_dirs.error_code.value)) == CLUSTER_AUTH and not described_dirs.results, who
    for path in ("/etc", "../x", real_dir + "/../x"):
        answer = run(attack.request("admin", ApiKey.ALTER_REPLICA_LOG_DIRS, _move(path), port))
        assert [ErrorCode(int(p.error_code.value)) for r in answer.results for p in r.partitions] == \
            [E.LOG_DIR_NOT_FOUND], path
    assert _log_dirs(attack, port) == before
    assert not os.path.exists("/etc/secret-0") and not glob.glob("/etc/secret-0*")
