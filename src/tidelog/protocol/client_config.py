"""Client settings files (``--command-config FILE``): how tidelog's tools, the Spark connector and the
cluster's own helpers reach a secured cluster, as Kafka's tools do.

The file holds client properties, in the Java client's names or in librdkafka's (the
ones confluent-kafka and ``kcat -F`` read), so one file serves tidelog's tools and
either kind of client — ``cluster up --secure`` writes ``client.properties`` in
librdkafka's names and ``client-java.properties`` in Java's. Read here:

* ``bootstrap.servers`` — where to connect when ``--bootstrap-server`` is not given
  (options.finish);
* ``security.protocol`` — PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL;
* TLS: ``ssl.ca.location`` (librdkafka) or ``ssl.truststore.location`` with
  ``ssl.truststore.type=PEM`` (Java; a JKS or PKCS12 store is refused by name) — trusted
  CA certificates, PEM; ``ssl.keystore.location`` (a PEM file with key and
  certificate) or ``ssl.certificate.location`` + ``ssl.key.location``;
  ``ssl.key.password``; ``ssl.endpoint.identification.algorithm`` (``https``, the
  default, checks the broker's host name; empty — Java — or ``none`` — librdkafka — does
  not); ``enable.ssl.certificate.verification=false`` (librdkafka) checks nothing;
* SASL: ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``: PLAIN, SCRAM-SHA-256,
  SCRAM-SHA-512) and ``sasl.username`` / ``sasl.password`` (librdkafka) or
  ``sasl.jaas.config`` with ``username`` and ``password`` (Java).
"""
from __future__ import annotations

from tidelog.core.errors import InvalidConfigError
from tidelog.protocol.client import ClientSecurity


def load_command_config(path: str | None) -> ClientSecurity | None:
    if not path:
        return None
    from tidelog.broker.config import parse_properties
    with open(path, encoding="utf-8") as f:
        props = parse_properties(f.read(), path)
    return client_security(props)


def client_security(props: dict[str, str]) -> ClientSecurity | None:
    import ssl

    from tidelog.protocol import sasl_client
    from tidelog.server.sasl import parse_jaas
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise InvalidConfigError(f"security.protocol {protocol!r} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
                                 "SASL_SSL")
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for kind in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(kind, "PEM").upper() != "PEM":
                raise InvalidConfigError(f"{kind}={props[kind]}: only PEM files are read (ssl.ca.location or "
                                         "ssl.truststore.location with ssl.truststore.type=PEM)")
        trust = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
        if trust:
            context.load_verify_locations(cafile=trust)
        else:
            context.load_default_certs()
        password = props.get("ssl.key.password")
        if props.get("ssl.keystore.location"):
            context.load_cert_chain(props["ssl.keystore.location"], password=password)
        elif props.get("ssl.certificate.location"):
            context.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"),
                                    password=password)
        context.check_hostname = props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
        if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "PLAIN").upper()
        if mechanism not in sasl_client.MECHANISMS:
            raise InvalidConfigError(f"sasl.mechanism {mechanism} is not supported (supported: "
                                     f"{', '.join(sasl_client.MECHANISMS)})")
        username, password = props.get("sasl.username"), props.get("sasl.password")
        if props.get("sasl.jaas.config"):
            options = parse_jaas(props["sasl.jaas.config"]).options
            username, password = options.get("username"), options.get("password")
        if not username or password is None:
            raise InvalidConfigError("SASL needs a user: sasl.jaas.config with username and password "
                                     "(or sasl.username and sasl.password)")
        return ClientSecurity(context, mechanism, username, password)
    return ClientSecurity(context)
