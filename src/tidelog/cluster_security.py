"""``tidelog cluster up --secure``: TLS and SASL on every listener of a local cluster.

Theory of operation. ``secure_cluster(directory, host)`` makes, once, under
``<cluster>/security/``: a throwaway certificate authority and one certificate
for the nodes (named ``host``, ``localhost`` and 127.0.0.1), an ``admin`` password
(the nodes' own SASL/PLAIN identity, a super user) and a ``client`` password. The
settings it returns put every broker listener on ``SASL_SSL`` (PLAIN for the
nodes, SCRAM-SHA-512 for clients) and the controllers' on ``SSL``. After ``up``,
``create_client_user`` stores the ``client`` SCRAM credential in the metadata log,
and ``client.properties`` / ``admin.properties`` hold what a client needs
(``--command-config`` for the tidelog tools; the same names for Kafka clients).
"""

from __future__ import annotations

import asyncio
import os
import secrets

from tidelog.controller.scram_control import salted_password
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import ClientSecurity, KafkaConnection

SCRAM_SHA_512 = 2
ITERATIONS = 4096


def _directory(cluster_directory: str) -> str:
    return os.path.join(cluster_directory, "security")


def secure_cluster(cluster_directory: str, host: str) -> str:
    """The path of the nodes' properties file of a secure cluster (private: it holds the
    admin password), creating its CA, certificate and passwords once."""
    directory = _directory(cluster_directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_path, node_path = os.path.join(directory, "ca.pem"), os.path.join(directory, "node.pem")
    if not os.path.exists(node_path):
        import trustme
        ca = trustme.CA(organization_name="tidelog local cluster")
        ca.cert_pem.write_to_path(ca_path)
        names = sorted({host, "localhost", "127.0.0.1"})
        ca.issue_cert(*names).private_key_and_cert_chain_pem.write_to_path(node_path)
        os.chmod(node_path, 0o600)
    admin_password, client_password = _password(directory, "admin"), _password(directory, "client")
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{admin_password}" user_admin="{admin_password}";')
    _write(os.path.join(directory, "admin.properties"),
           f"security.protocol=SASL_SSL\nssl.truststore.location={ca_path}\nsasl.mechanism=PLAIN\n"
           f"sasl.username=admin\nsasl.password={admin_password}\n")
    _write(os.path.join(directory, "client.properties"),
           f"security.protocol=SASL_SSL\nssl.truststore.location={ca_path}\nsasl.mechanism=SCRAM-SHA-512\n"
           "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
           f'username="client" password="{client_password}";\n')
    settings = {"listener.security.protocol.map": "PLAINTEXT:SASL_SSL,CONTROLLER:SSL",
                "ssl.keystore.location": node_path, "ssl.truststore.location": ca_path,
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.jaas.config": jaas,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"}
    path = os.path.join(directory, "node.properties")
    _write(path, "".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def paths(cluster_directory: str) -> dict[str, str]:
    directory = _directory(cluster_directory)
    return {name: os.path.join(directory, f"{name}.properties") for name in ("client", "admin")} | {
        "ca": os.path.join(directory, "ca.pem")}


def admin_security(cluster_directory: str) -> ClientSecurity:
    from tidelog.cli.client_config import load_command_config
    return load_command_config(paths(cluster_directory)["admin"])


def controller_security(cluster_directory: str) -> ClientSecurity:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(paths(cluster_directory)["ca"])
    return ClientSecurity(context)


def create_client_user(cluster_directory: str, bootstrap: tuple[str, int]) -> None:
    """The ``client`` SCRAM-SHA-512 user, stored in the metadata log through a broker."""
    password = _password(_directory(cluster_directory), "client")
    salt = os.urandom(32)

    async def go():
        connection = await KafkaConnection.connect(*bootstrap, client_id="tidelog-cluster",
                                                   security=admin_security(cluster_directory))
        try:
            answer = await connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [], "upsertions": [{
                "name": "client", "mechanism": SCRAM_SHA_512, "iterations": ITERATIONS, "salt": salt,
                "salted_password": salted_password(SCRAM_SHA_512, password, salt, ITERATIONS)}]})
            code = int(answer.results[0].error_code.value)
            if code != 0:
                raise RuntimeError(f"creating the client user failed with error {code}")
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
