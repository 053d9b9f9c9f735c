"""The principal a broker's own ListTransactions questions carry
(``Server._inter_broker_principal``): what the ACL check of an in-doubt question's
"unknown" verdict is made for (docs/transactions.md, "Unclean elections")."""

from __future__ import annotations

from types import SimpleNamespace

import trustme

from tidelog.broker.config import BrokerConfig
from tidelog.server.runtime import Server

RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"


def principal(settings: dict, security) -> str | None:
    server = Server.__new__(Server)
    server.config = BrokerConfig({"node.id": "1", "process.roles": "broker", **settings})
    server.listener_name, server.inter_broker_security = "PLAINTEXT", security
    return server._inter_broker_principal()


def test_plaintext_is_anonymous():
    assert principal({}, None) == "User:ANONYMOUS"


def test_sasl_is_the_listeners_username():
    assert principal({}, SimpleNamespace(sasl_mechanism="PLAIN", username="admin", ssl_context=None)) == "User:admin"


def test_ssl_is_the_mapped_certificate_dn_when_client_certificates_are_asked_for(tmp_path):
    keystore = tmp_path / "node-3.pem"
    trustme.CA().issue_cert("localhost", common_name="node-3").private_key_and_cert_chain_pem.write_to_path(
        str(keystore))
    security = SimpleNamespace(sasl_mechanism=None, username="", ssl_context=object())
    settings = {"ssl.keystore.location": str(keystore), "ssl.principal.mapping.rules": RULES}
    assert principal({**settings, "ssl.client.auth": "required"}, security) == "User:node-3"
    assert principal({**settings, "ssl.client.auth": "none"}, security) == "User:ANONYMOUS"
    missing = {**settings, "ssl.client.auth": "required", "ssl.keystore.location": str(tmp_path / "none.pem")}
    assert principal(missing, security) is None                 # unknown: the ACL check says so
