"""TLS for listeners and for the connections a node makes, from Kafka's ``ssl.*`` settings.

Theory of operation. A listener whose security protocol is ``SSL`` (in
``listener.security.protocol.map``) gets a server ``ssl.SSLContext`` built here;
a node connecting to such a listener (replica fetchers, transaction markers, a
broker's controller channel, the quorum's voters) gets a client context from the
same settings. Settings are Kafka's names, looked up first with the listener's
prefix (``listener.name.<listener>.ssl.keystore.location``), then bare:

* key and certificate chain as PEM (KIP-651): ``ssl.keystore.location`` (one
  file with the private key and the chain) or ``ssl.keystore.certificate.chain``
  + ``ssl.keystore.key`` (the PEM text itself), ``ssl.key.password`` for an
  encrypted key. ``ssl.keystore.type`` and ``ssl.truststore.type`` must be PEM
  (Java key stores: convert them with ``keytool``/``openssl``);
* trusted certificates: ``ssl.truststore.location`` or
  ``ssl.truststore.certificates`` (PEM); without them, the system's;
* ``ssl.client.auth`` = none | requested | required; a client certificate's
  distinguished name becomes the connection's principal (``User:CN=…``) through
  ``ssl.principal.mapping.rules``;
* ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3), ``ssl.cipher.suites`` (Kafka's
  IANA names, or OpenSSL's; TLS 1.3 suites are OpenSSL's defaults), and on the
  client side ``ssl.endpoint.identification.algorithm`` (``https``: the server's
  certificate must name the host; empty: not checked).

No secret (key, password) is ever logged; errors name the setting, not its value.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any, Mapping, Protocol

from tidelog.core.errors import InvalidConfigError

_PROTOCOLS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3,
              "TLSV1.1": ssl.TLSVersion.TLSv1_1, "TLSV1": ssl.TLSVersion.TLSv1}


class NodeConfig(Protocol):
    originals: Mapping[str, str]

    def __getitem__(self, name: str) -> Any: ...


def setting(config: NodeConfig, listener: str, name: str):
    """``listener.name.<listener>.<name>`` if set, else ``<name>``."""
    prefixed = f"listener.name.{listener.lower()}.{name}"
    if prefixed in config.originals:
        value = config.originals[prefixed]
        default = config[name]
        if isinstance(default, list) or name in ("ssl.enabled.protocols", "ssl.cipher.suites"):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value
    return config[name]


def server_context(config: NodeConfig, listener: str) -> ssl.SSLContext:
    """The context of an SSL listener (raises InvalidConfigError naming what is wrong)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, config, listener)
    if not _load_keystore(context, config, listener):
        raise InvalidConfigError(f"listener {listener} is SSL but has no key and certificate: set "
                                 "ssl.keystore.location (PEM) or ssl.keystore.certificate.chain and ssl.keystore.key")
    client_auth = str(setting(config, listener, "ssl.client.auth") or "none").lower()
    if client_auth not in ("none", "requested", "required"):
        raise InvalidConfigError(f"ssl.client.auth must be none, requested or required, got {client_auth!r}")
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                           "required": ssl.CERT_REQUIRED}[client_auth]
    if client_auth != "none":
        _load_truststore(context, config, listener, required=True)
    return context


def client_context(config: NodeConfig, listener: str) -> ssl.SSLContext:
    """The context a node uses to connect to another node's SSL listener: it trusts
    ``ssl.truststore.*`` (or the system) and presents its keystore, if any."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, config, listener)
    _load_truststore(context, config, listener, required=False)
    _load_keystore(context, config, listener)
    algorithm = setting(config, listener, "ssl.endpoint.identification.algorithm")
    context.check_hostname = bool(algorithm) and str(algorithm).lower() == "https"
    return context


def _common(context: ssl.SSLContext, config: NodeConfig, listener: str) -> None:
    for name in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = str(setting(config, listener, name) or "PEM").upper()
        if kind != "PEM":
            raise InvalidConfigError(f"{name}={kind} is not supported: tidelog reads PEM (KIP-651); "
                                     "convert the store to PEM files")
    enabled = [p.upper() for p in setting(config, listener, "ssl.enabled.protocols")]
    unknown = [p for p in enabled if p not in _PROTOCOLS]
    if unknown or not enabled:
        raise InvalidConfigError(f"ssl.enabled.protocols: unknown or empty {unknown or enabled} "
                                 f"(known: TLSv1.2, TLSv1.3)")
    versions = sorted(_PROTOCOLS[p] for p in enabled)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    suites = setting(config, listener, "ssl.cipher.suites")
    if suites:
        openssl_names = [_openssl_cipher(s) for s in suites if not s.startswith("TLS_AES_")
                         and not s.startswith("TLS_CHACHA20_")]
        if openssl_names:
            try:
                context.set_ciphers(":".join(openssl_names))
            except ssl.SSLError:
                raise InvalidConfigError(f"ssl.cipher.suites: none of {suites} is available") from None


def _openssl_cipher(name: str) -> str:
    """Kafka (Java) writes TLS 1.2 suites by their IANA names; OpenSSL has its own:
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 → ECDHE-RSA-AES128-GCM-SHA256."""
    match = re.fullmatch(r"TLS_(\w+?)_WITH_(AES|CHACHA20)_?(\d+)?_(GCM|CBC|POLY1305)_(SHA\d*)", name)
    if not match:
        return name
    kx, cipher, bits, mode, mac = match.groups()
    kx = kx.replace("_", "-")
    if cipher == "CHACHA20":
        return f"{kx}-CHACHA20-POLY1305"
    body = f"AES{bits}-GCM-{mac}" if mode == "GCM" else f"AES{bits}-{mac}"
    return f"{kx}-{body}" if kx != "RSA" else body


def _load_keystore(context: ssl.SSLContext, config: NodeConfig, listener: str) -> bool:
    password = setting(config, listener, "ssl.key.password") or None
    location = setting(config, listener, "ssl.keystore.location")
    chain = setting(config, listener, "ssl.keystore.certificate.chain")
    key = setting(config, listener, "ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(location, password=password)
            return True
        if chain and key:
            # The ssl module loads keys from files only: a private, short-lived one.
            with tempfile.TemporaryDirectory(prefix="tidelog-tls-") as directory:
                path = os.path.join(directory, "keystore.pem")
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as f:
                    f.write(_pem(key) + "\n" + _pem(chain) + "\n")
                context.load_cert_chain(path, password=password)
            return True
    except (ssl.SSLError, OSError) as e:
        what = "ssl.keystore.location" if location else "ssl.keystore.certificate.chain / ssl.keystore.key"
        raise InvalidConfigError(f"listener {listener}: cannot load the key and certificate from {what} "
                                 f"({type(e).__name__}: {getattr(e, 'strerror', None) or e.args[-1]})") from None
    if chain or key:
        raise InvalidConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
    return False


def _load_truststore(context: ssl.SSLContext, config: NodeConfig, listener: str, required: bool) -> None:
    location = setting(config, listener, "ssl.truststore.location")
    certificates = setting(config, listener, "ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif certificates:
            context.load_verify_locations(cadata=_pem(certificates))
        elif required:
            raise InvalidConfigError(f"listener {listener}: ssl.client.auth needs trusted certificates "
                                     "(ssl.truststore.location or ssl.truststore.certificates)")
        else:
            context.load_default_certs()
    except (ssl.SSLError, OSError) as e:
        raise InvalidConfigError(f"listener {listener}: cannot load the trusted certificates "
                                 f"({type(e).__name__}: {getattr(e, 'strerror', None) or e.args[-1]})") from None


def _pem(text: str) -> str:
    """PEM given inline in a properties file may have lost its line breaks."""
    text = text.strip()
    if "\n" in text:
        return text
    return re.sub(r"(-----[A-Z ]+-----)", r"\n\1\n", text).replace("\n\n", "\n").strip()


# ------------------------------------------------------------------ principals

_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET",
              "domainComponent": "DC", "userId": "UID"}


def certificate_subject(path: str) -> dict:
    """The first certificate of PEM file ``path`` as ``SSLSocket.getpeercert()`` gives a
    peer's (only ``subject``, in the certificate's order), so that this node's own
    principal is derived exactly as its peers' are. Raises OSError or ValueError."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    names = {NameOID.COMMON_NAME: "commonName", NameOID.ORGANIZATION_NAME: "organizationName",
             NameOID.ORGANIZATIONAL_UNIT_NAME: "organizationalUnitName", NameOID.COUNTRY_NAME: "countryName",
             NameOID.LOCALITY_NAME: "localityName", NameOID.STATE_OR_PROVINCE_NAME: "stateOrProvinceName",
             NameOID.STREET_ADDRESS: "streetAddress", NameOID.DOMAIN_COMPONENT: "domainComponent",
             NameOID.USER_ID: "userId"}
    with open(path, "rb") as f:
        certificate = x509.load_pem_x509_certificate(f.read())
    return {"subject": tuple(tuple((names.get(attribute.oid, attribute.oid.dotted_string), str(attribute.value))
                                   for attribute in rdn) for rdn in certificate.subject.rdns)}


def distinguished_name(peer_certificate: dict | None) -> str | None:
    """The subject as Java's ``X500Principal.getName()`` writes it (RFC 2253: the most
    specific RDN first): ``CN=alice,OU=eng,O=Example,C=US``."""
    if not peer_certificate or "subject" not in peer_certificate:
        return None
    parts = []
    for rdn in reversed(peer_certificate["subject"]):
        parts.append("+".join(f"{_RDN_NAMES.get(key, key)}={_escape(value)}" for key, value in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    value = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if value.startswith((" ", "#")):
        value = "\\" + value
    return value[:-1] + "\\ " if value.endswith(" ") else value


def principal_for(dn: str | None, rules: list[str] | str | None) -> str:
    """``User:<name>``: the DN mapped by ``ssl.principal.mapping.rules`` (Kafka's
    ``RULE:pattern/replacement/[LU]`` list, ``DEFAULT`` = the DN itself), or
    ``User:ANONYMOUS`` without a certificate."""
    if dn is None:
        return "User:ANONYMOUS"
    for rule in parse_mapping_rules(rules):
        if rule is None:
            return f"User:{dn}"
        pattern, replacement, case = rule
        match = pattern.fullmatch(dn)
        if match:
            name = match.expand(replacement)
            return f"User:{name.lower() if case == 'L' else name.upper() if case == 'U' else name}"
    return f"User:{dn}"


def parse_mapping_rules(rules: list[str] | str | None) -> list:
    """``[(compiled pattern, replacement, case) | None (DEFAULT)]``; a bad rule raises."""
    if rules is None or rules == "":
        return [None]
    text = rules if isinstance(rules, str) else ",".join(rules)
    out = []
    for match in re.finditer(r"\s*(DEFAULT|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)", text):
        if match.group(1) == "DEFAULT":
            out.append(None)
            continue
        pattern = match.group(2).replace("\\/", "/")
        replacement = re.sub(r"\$(\d)", r"\\\1", match.group(3).replace("\\/", "/"))
        try:
            out.append((re.compile(pattern), replacement, match.group(4)))
        except re.error as e:
            raise InvalidConfigError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {e}") from None
    if not out:
        raise InvalidConfigError(f"ssl.principal.mapping.rules: cannot parse {text!r}")
    return out
