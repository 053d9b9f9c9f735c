"""SASL authentication on a listener (SaslHandshake + SaslAuthenticate, KIP-152), sans-I/O.

Theory of operation. A connection to a ``SASL_PLAINTEXT`` or ``SASL_SSL``
listener starts unauthenticated; until it is authenticated the only requests
served are ApiVersions, SaslHandshake and SaslAuthenticate (anything else closes
the connection, as Kafka's SaslServerAuthenticator does). ``SaslSession`` is that
per-connection state machine:

    START ──SaslHandshake(mechanism enabled)──► HANDSHAKEN ──SaslAuthenticate…──► AUTHENTICATED
      │                                              │ a token the mechanism refuses
      └── any other request: close                   └──► FAILED (answered SASL_AUTHENTICATION_FAILED
                                                            after connection.failed.authentication.delay.ms,
                                                            then the connection closes)

Mechanisms: PLAIN (RFC 4616) with the users of the listener's JAAS setting, as
Kafka writes it::

    listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\
        required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

(``user_<name>="<password>"`` are the users; ``username``/``password`` are what
this node itself presents to other nodes' SASL listeners.) Passwords are compared
in constant time and never logged.

SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802/7677, KIP-84): the users are the SCRAM
credentials in the metadata log (UserScramCredentialRecord, managed with
AlterUserScramCredentials / ``tidelog users``), looked up in the node's current
metadata image. The exchange takes two SaslAuthenticate round trips: client-first
→ server-first (nonce, salt, iterations); client-final (proof) → server-final
(the server's signature). An unknown user fails the same way as a bad proof.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from tidelog.core.errors import ErrorCode, InvalidConfigError

START, HANDSHAKEN, AUTHENTICATED, FAILED = "start", "handshaken", "authenticated", "failed"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_NONCE_BYTES = 24
TOKEN_MAX_BYTES = 64 * 1024          # a PLAIN or SCRAM message is far smaller; larger ones are refused


class NodeConfig(Protocol):
    originals: Mapping[str, str]

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class JaasConfig:
    """The parts of a JAAS login-module line tidelog reads."""

    module: str
    options: dict[str, str]

    @property
    def users(self) -> dict[str, str]:
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}


_JAAS = re.compile(r'^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?)\s*;\s*$', re.S)
_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))')


def parse_jaas(text: str) -> JaasConfig:
    """``<LoginModule class> required key="value" …;`` (raises naming the problem, never
    the values)."""
    match = _JAAS.match(text or "")
    if not match:
        raise InvalidConfigError("sasl.jaas.config must be '<LoginModule> required key=\"value\" ...;'")
    options, rest = {}, match.group(3)
    position = 0
    while position < len(rest):
        option = _OPTION.match(rest, position)
        if not option:
            raise InvalidConfigError(f"sasl.jaas.config: cannot parse the options after {position} characters")
        value = option.group(2) if option.group(2) is not None else option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", value)
        position = option.end()
    return JaasConfig(match.group(1), options)


def listener_jaas(config: NodeConfig, listener: str, mechanism: str) -> JaasConfig | None:
    """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else
    ``listener.name.<listener>.sasl.jaas.config``, else ``sasl.jaas.config``."""
    for key in (f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
                f"listener.name.{listener.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        text = config.originals.get(key)
        if text:
            return parse_jaas(text)
    return None


def enabled_mechanisms(config: NodeConfig, listener: str) -> tuple[str, ...]:
    key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
    raw = config.originals.get(key)
    mechanisms = [m.strip().upper() for m in raw.split(",")] if raw else [m.upper() for m in
                                                                         config["sasl.enabled.mechanisms"]]
    unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unknown:
        raise InvalidConfigError(f"sasl.enabled.mechanisms: {unknown} not supported (supported: "
                                 f"{', '.join(SUPPORTED_MECHANISMS)})")
    return tuple(m for m in mechanisms if m)


@dataclass
class SaslAuthenticator:
    """What a SASL listener knows: its mechanisms and, per mechanism, the users."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict)
    # (user, ScramMechanism code) → its UserScramCredentialRecord, from the metadata image.
    scram_credential: Callable[[str, int], Any] = lambda name, mechanism: None
    nonce: Callable[[], bytes] = lambda: os.urandom(SCRAM_NONCE_BYTES)
    reauth_ms: int = 0          # connections.max.reauth.ms (KIP-368); 0: a login lasts the connection

    @classmethod
    def from_config(cls, config: NodeConfig, listener: str,
                    scram_credential: Callable[[str, int], Any] | None = None) -> "SaslAuthenticator":
        mechanisms = enabled_mechanisms(config, listener)
        if not mechanisms:
            raise InvalidConfigError(f"listener {listener} is SASL but sasl.enabled.mechanisms is empty")
        users = {}
        if "PLAIN" in mechanisms:
            jaas = listener_jaas(config, listener, "PLAIN")
            if jaas is None or not jaas.users:
                raise InvalidConfigError(f"listener {listener} enables PLAIN but no users: set "
                                         f"listener.name.{listener.lower()}.plain.sasl.jaas.config with "
                                         'user_<name>="<password>" entries')
            users = jaas.users
        authenticator = cls(mechanisms, users)
        if scram_credential is not None:
            authenticator.scram_credential = scram_credential
        return authenticator

    def session(self) -> "SaslSession":
        return SaslSession(self)


@dataclass
class SaslSession:
    """One connection's SASL state (see the module docstring)."""

    authenticator: SaslAuthenticator
    state: str = START
    mechanism: str | None = None
    principal: str | None = None
    failures: int = 0
    _scram: dict | None = None             # the SCRAM exchange so far
    expires_at_ms: int | None = None       # KIP-368: the login must be renewed before this
    _first_principal: str | None = None    # a re-authentication may not change it

    def allows(self, api_key: int, now_ms: int = 0) -> bool:
        from tidelog.protocol.api_keys import ApiKey
        handshake_apis = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
        if self.state == AUTHENTICATED:
            # KIP-368: past its lifetime a login serves nothing but its renewal.
            if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                return self.authenticator.reauth_ms > 0
            expired = self.expires_at_ms is not None and now_ms >= self.expires_at_ms
            return api_key == ApiKey.API_VERSIONS or not expired
        return api_key in handshake_apis

    def handshake(self, mechanism: str) -> ErrorCode:
        if self.state == AUTHENTICATED and self.authenticator.reauth_ms > 0:
            # Re-authentication (KIP-368): the same mechanism, and later the same principal.
            if mechanism.upper() != self.mechanism:
                return ErrorCode.ILLEGAL_SASL_STATE
            self.state = HANDSHAKEN
            return ErrorCode.NONE
        if self.state != START:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism.upper() not in self.authenticator.mechanisms:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism, self.state = mechanism.upper(), HANDSHAKEN
        return ErrorCode.NONE

    def authenticate(self, token: bytes, now_ms: int = 0) -> tuple[ErrorCode, str | None, bytes]:
        """(error, message for the client, bytes back). A failure is final."""
        result = self._authenticate(token)
        if result[0] == ErrorCode.NONE and self.state == AUTHENTICATED:
            if self._first_principal is None:
                self._first_principal = self.principal
            elif self.principal != self._first_principal:
                return self._fail("Cannot change principals during re-authentication")
            if self.authenticator.reauth_ms > 0:
                self.expires_at_ms = now_ms + self.authenticator.reauth_ms
        return result

    @property
    def session_lifetime_ms(self) -> int:
        return self.authenticator.reauth_ms

    def _authenticate(self, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        if self.state != HANDSHAKEN:
            return ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake", b""
        if len(token) > TOKEN_MAX_BYTES:
            return self._fail("the authentication token is too large")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        if self.mechanism in _SCRAM_HASHES:
            return self._scram_step(token)
        return self._fail(f"mechanism {self.mechanism} is not available")

    # ------------------------------------------------------------ SCRAM (RFC 5802)

    def _scram_step(self, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail("Authentication failed: the SCRAM message is not UTF-8")
        if self._scram is None:
            return self._scram_first(message)
        return self._scram_final(message)

    def _scram_first(self, message: str) -> tuple[ErrorCode, str | None, bytes]:
        # gs2-header "n,," (no channel binding, no authzid other than the user) + client-first-bare
        match = re.fullmatch(r"([ny]),(?:a=([^,]*))?,(n=([^,]*),r=([^,]+)(?:,.*)?)", message, re.S)
        if not match:
            return self._fail("Authentication failed: invalid SCRAM client-first message")
        user = _scram_unescape(match.group(4))
        if user is None or (match.group(2) and _scram_unescape(match.group(2)) != user):
            return self._fail("Authentication failed: invalid SCRAM user name")
        mechanism, hash_name = _SCRAM_HASHES[self.mechanism]
        credential = self.authenticator.scram_credential(user, mechanism)
        if credential is None:
            return self._fail("Authentication failed: Invalid user credentials")
        nonce = match.group(5) + base64.b64encode(self.authenticator.nonce()).decode()
        server_first = f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._scram = {"user": user, "credential": credential, "hash": hash_name, "nonce": nonce,
                       "client_nonce": match.group(5),
                       "gs2": message[:match.start(3)], "auth": match.group(3) + "," + server_first}
        return ErrorCode.NONE, None, server_first.encode()

    def _scram_final(self, message: str) -> tuple[ErrorCode, str | None, bytes]:
        state = self._scram
        match = re.fullmatch(r"(c=([^,]*),r=([^,]*)(?:,[^p][^,]*)*),p=([^,]+)", message)
        if not match:
            return self._fail("Authentication failed: invalid SCRAM client-final message")
        try:
            binding = base64.b64decode(match.group(2), validate=True).decode("utf-8", "replace")
            proof = base64.b64decode(match.group(4), validate=True)
        except ValueError:
            return self._fail("Authentication failed: invalid SCRAM client-final message")
        # librdkafka before 2.6.1 (Debian's kcat, for one) sends its own nonce once more in
        # front of the server's; Kafka 3.8.1-3.9 accepted that, and so do we (the whole
        # server nonce is still echoed). Anything else must be exactly the server's nonce.
        echoed = match.group(3)
        if echoed not in (state["nonce"], state["client_nonce"] + state["nonce"]) or binding != state["gs2"]:
            return self._fail("Authentication failed: the SCRAM nonce or channel binding does not match")
        auth_message = (state["auth"] + "," + match.group(1)).encode()
        credential, hash_name = state["credential"], state["hash"]
        signature = hmac.new(credential.stored_key, auth_message, hash_name).digest()
        if len(proof) != len(signature):
            return self._fail("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), credential.stored_key):
            return self._fail("Authentication failed: Invalid user credentials")
        server_signature = hmac.new(credential.server_key, auth_message, hash_name).digest()
        self.state, self.principal = AUTHENTICATED, f"User:{state['user']}"
        self._scram = None
        return ErrorCode.NONE, None, b"v=" + base64.b64encode(server_signature)

    def _plain(self, token: bytes) -> tuple[ErrorCode, str | None, bytes]:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            return self._fail("Authentication failed: invalid SASL/PLAIN message")
        authzid, username, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != username:
            return self._fail("Authentication failed: the authorization id must be the user name")
        expected = self.authenticator.plain_users.get(username)
        # Compare against something even for an unknown user: no timing hint of who exists.
        ok = hmac.compare_digest((expected or "\x00" * 32).encode(), password.encode()) and expected is not None
        if not ok:
            return self._fail("Authentication failed: Invalid username or password")
        self.state, self.principal = AUTHENTICATED, f"User:{username}"
        return ErrorCode.NONE, None, b""

    def _fail(self, message: str) -> tuple[ErrorCode, str, bytes]:
        self.state = FAILED
        self.failures += 1
        return ErrorCode.SASL_AUTHENTICATION_FAILED, message, b""


_SCRAM_HASHES = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}   # ScramMechanism codes


def _scram_unescape(name: str) -> str | None:
    """RFC 5802 saslname: ``=2C`` is ',', ``=3D`` is '='; any other '=' is invalid."""
    if re.search(r"=(?!2C|3D)", name):
        return None
    return name.replace("=2C", ",").replace("=3D", "=")


def plain_token(username: str, password: str) -> bytes:
    """A client's SASL/PLAIN message (RFC 4616)."""
    return b"\x00" + username.encode() + b"\x00" + password.encode()
