"""``tidelog cluster up --secure``: TLS, SASL and ACLs on every listener of a local cluster.

Theory of operation. ``secure_cluster(directory, host, node_ids)`` makes, once, under
``<cluster>/security/`` (0700): a throwaway certificate authority; one certificate
per node (``node-<id>.pem``, CN=node-<id>, naming ``host``, ``localhost`` and
127.0.0.1) and one for the operator (``admin.pem``, CN=admin); an ``admin`` password
(the nodes' SASL/PLAIN identity towards broker listeners) and a ``client`` password.
The settings it returns put every broker listener on ``SASL_SSL`` (PLAIN for the
nodes, SCRAM-SHA-512 for clients) and the controllers' on ``SSL`` with client
certificates required: a node is ``User:node-<id>`` there (``ssl.principal.mapping.rules``
keep the CN), and only the nodes and ``User:admin`` are super users. ACLs are on
with Kafka's default ``allow.everyone.if.no.acl.found=false``. After ``up``,
``create_client_user`` stores the ``client`` SCRAM credential and the ACLs it needs
to produce, consume, use groups and transactions — nothing on the cluster resource.
``write_client_settings`` (called once the brokers' ports are known) writes what a
client needs, twice, as each kind of client spells it. ``client.properties`` /
``admin.properties`` use librdkafka's names (``ssl.ca.location``, ``sasl.username`` /
``sasl.password``): confluent-kafka takes them as they are, ``kcat -F`` reads them, and so
do tidelog's tools (``--command-config``); librdkafka refuses Java's names
(``ssl.truststore.location``: "Java TrustStores are not supported"; ``sasl.jaas.config``).
``client-java.properties`` / ``admin-java.properties`` use the Java client's names
(``ssl.truststore.type=PEM`` + ``ssl.truststore.location``, ``sasl.jaas.config``) for
Kafka's Java clients and tools (``--command-config``); tidelog's tools read those too.
All four carry ``bootstrap.servers``. The operator's certificate (``admin.pem``) is for
the controllers' listener, which wants a client certificate (``controller_security``).
"""

from __future__ import annotations

import asyncio
import os
import secrets

from tidelog.controller.scram_control import salted_password
from tidelog.metadata.authorizer import WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection

SCRAM_SHA_512 = 2
ITERATIONS = 4096


def _directory(cluster_directory: str) -> str:
    return os.path.join(cluster_directory, "security")


def secure_cluster(cluster_directory: str, host: str, node_ids: list[int]) -> str:
    """The path of the nodes' properties file of a secure cluster (private: it holds the
    admin password), creating its CA, certificates and passwords once."""
    directory = _directory(cluster_directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_path = os.path.join(directory, "ca.pem")
    ca = _certificate_authority(directory, ca_path)
    for name in [f"node-{i}" for i in node_ids] + ["admin"]:
        path = os.path.join(directory, f"{name}.pem")
        if not os.path.exists(path):
            leaf = ca.issue_cert(*sorted({host, "localhost", "127.0.0.1"}), common_name=name)
            leaf.private_key_and_cert_chain_pem.write_to_path(path)
            os.chmod(path, 0o600)
    admin_password = _password(directory, "admin")
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{admin_password}" user_admin="{admin_password}";')
    super_users = ";".join(["User:admin"] + [f"User:node-{i}" for i in sorted(node_ids)])
    settings = {"listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:SSL",
                "ssl.truststore.location": ca_path,
                # Controllers know the nodes by their certificates: CN=node-<id> is User:node-<id>.
                "listener.name.controller.ssl.client.auth": "required",
                "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.jaas.config": jaas,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": super_users, "allow.everyone.if.no.acl.found": "false"}
    path = os.path.join(directory, "node.properties")
    _write(path, "".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


# Who each settings file logs in as: (user, SASL mechanism, the Java client's login module).
_IDENTITIES = {"client": ("client", "SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
               "admin": ("admin", "PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule")}


def write_client_settings(cluster_directory: str, bootstrap: str) -> None:
    """The clients' settings files (private: they hold passwords), for the brokers at
    ``bootstrap``: librdkafka's names in ``<name>.properties``, the Java client's in
    ``<name>-java.properties``, for ``client`` (SCRAM-SHA-512, least privilege) and
    ``admin`` (PLAIN, a super user)."""
    directory = _directory(cluster_directory)
    ca_path = os.path.join(directory, "ca.pem")
    for name, (user, mechanism, module) in _IDENTITIES.items():
        password = _password(directory, name)
        common = f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n"
        _write(os.path.join(directory, f"{name}.properties"),
               f"# tidelog cluster {cluster_directory}: user {user!r}. librdkafka's names: confluent-kafka takes\n"
               f"# these as they are, kcat reads them (kcat -F {name}.properties -L), so do tidelog's tools\n"
               f"# (--command-config). Kafka's Java clients and tools: {name}-java.properties.\n"
               f"{common}ssl.ca.location={ca_path}\nsasl.username={user}\nsasl.password={password}\n")
        _write(os.path.join(directory, f"{name}-java.properties"),
               f"# tidelog cluster {cluster_directory}: user {user!r}. The Java client's names, for Kafka's\n"
               f"# clients and tools (--command-config); librdkafka and kcat: {name}.properties.\n"
               f"{common}ssl.truststore.type=PEM\nssl.truststore.location={ca_path}\n"
               f'sasl.jaas.config={module} required username="{user}" password="{password}";\n')


def kcat_line(cluster_directory: str) -> str:
    """A ``kcat`` command for the ``client`` user, ready to paste."""
    return f"kcat -F {paths(cluster_directory)['client']} -L"


def node_keystore(cluster_directory: str, node_id: int) -> str:
    """The node's own key and certificate chain (``ssl.keystore.location``)."""
    return os.path.join(_directory(cluster_directory), f"node-{node_id}.pem")


def _certificate_authority(directory: str, ca_path: str):
    """The cluster's CA (its key kept beside the certificate, 0600, to issue more)."""
    import trustme
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    key_path = os.path.join(directory, "ca.key")
    if os.path.exists(key_path) and os.path.exists(ca_path):
        with open(ca_path, "rb") as c, open(key_path, "rb") as k:
            return trustme.CA.from_pem(c.read(), k.read())
    ca = trustme.CA(organization_name="tidelog local cluster")
    ca.cert_pem.write_to_path(ca_path)
    ca.private_key_pem.write_to_path(key_path)
    os.chmod(key_path, 0o600)
    return ca


def paths(cluster_directory: str) -> dict[str, str]:
    """``client``/``admin``: librdkafka's spelling; ``client_java``/``admin_java``: Java's; ``ca``."""
    directory = _directory(cluster_directory)
    return {name: os.path.join(directory, f"{name}.properties") for name in ("client", "admin")} | {
        f"{name}_java": os.path.join(directory, f"{name}-java.properties") for name in ("client", "admin")} | {
        "ca": os.path.join(directory, "ca.pem")}


def admin_security(cluster_directory: str) -> ClientSecurity:
    from tidelog.protocol.client_config import load_command_config
    return load_command_config(paths(cluster_directory)["admin"])


def controller_security(cluster_directory: str) -> ClientSecurity:
    """The operator's TLS identity (``User:admin``) for the controllers' listener."""
    import ssl
    files = paths(cluster_directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(files["ca"])
    context.load_cert_chain(os.path.join(_directory(cluster_directory), "admin.pem"))
    return ClientSecurity(context)


# What the ``client`` user may do: produce (idempotently: WRITE on a topic implies
# IDEMPOTENT_WRITE, KIP-679), consume, create topics, use consumer groups and
# transactions. Nothing on the cluster: it cannot delete topics, alter configs,
# manage ACLs or credentials, or speak for a node.
CLIENT_ACLS = [(ResourceType.TOPIC, op) for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                    AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)] + \
              [(ResourceType.GROUP, op) for op in (AclOperation.READ, AclOperation.DESCRIBE)] + \
              [(ResourceType.TRANSACTIONAL_ID, op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]


def create_client_user(cluster_directory: str, bootstrap: tuple[str, int]) -> None:
    """The ``client`` SCRAM-SHA-512 user and its ACLs, stored in the metadata log through a broker."""
    password = _password(_directory(cluster_directory), "client")
    salt = os.urandom(32)

    async def go():
        connection = await KafkaConnection.connect(*bootstrap, client_id="tidelog-cluster",
                                                   security=admin_security(cluster_directory))
        try:
            answer = await connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [], "upsertions": [{
                "name": "client", "mechanism": SCRAM_SHA_512, "iterations": ITERATIONS, "salt": salt,
                "salted_password": salted_password(SCRAM_SHA_512, password, salt, ITERATIONS)}]})
            codes = [int(answer.results[0].error_code.value)]
            answer = await connection.request(ApiKey.CREATE_ACLS, {"creations": [{
                "resource_type": int(kind), "resource_name": WILDCARD, "resource_pattern_type": int(PatternType.LITERAL),
                "principal": "User:client", "host": WILDCARD, "operation": int(operation),
                "permission_type": int(AclPermissionType.ALLOW)} for kind, operation in CLIENT_ACLS]})
            codes += [int(r.error_code.value) for r in answer.results]
            if any(codes):
                raise RuntimeError(f"creating the client user and its ACLs failed with errors {sorted(set(codes))}")
        finally:
            connection.close()
    asyncio.run(go())


def _password(directory: str, name: str) -> str:
    path = os.path.join(directory, f"{name}.password")
    if not os.path.exists(path):
        _write(path, secrets.token_urlsafe(18))
    with open(path) as f:
        return f.read().strip()


def _write(path: str, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(text)
