"""A minimal asyncio Kafka client connection (tidelog's own tools and brokers).

Theory of operation. ``KafkaConnection.connect`` opens a socket, asks
ApiVersions (v3, falling back to v0 per KIP-511) and from then on sends each
request at the highest version both sides support. Requests are pipelined; a
reader task matches responses to waiters by correlation id. Every response
frame is bounded by ``response_size_max_bytes``. It speaks only the wire
protocol, so it works against any Kafka broker.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from dataclasses import dataclass, field
from typing import Any

from tidelog.core.errors import ErrorCode, KafkaError
from tidelog.protocol import sasl_client
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import (
    ProtocolError,
    decode_response,
    encode_request,
    kio_versions,
)

_SIZE = struct.Struct(">i")
RESPONSE_SIZE_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ClientSecurity:
    """How a node connects to a listener that is not PLAINTEXT: a TLS context and/or
    SASL/PLAIN credentials (the listener's JAAS ``username`` and ``password``)."""

    ssl_context: Any = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)


class KafkaConnection:
    def __init__(self, reader, writer, client_id: str):
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self._correlation = itertools.count(1)
        self._waiters: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._reader_task: asyncio.Task | None = None
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.closed = False
        self.tls = False
        self.authenticated = False        # SASL done
        self._answered = 0                # responses read so far

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "tidelog",
                      timeout_s: float = 10.0, security: "ClientSecurity | None" = None) -> "KafkaConnection":
        """Connect, negotiate API versions and, with ``security``, use TLS (the
        certificate must name ``host`` when the context checks host names) and
        authenticate with SASL before returning."""
        ssl_context = security.ssl_context if security is not None else None
        server_hostname = host if ssl_context is not None else None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ssl_context, server_hostname=server_hostname), timeout_s)
        connection = cls(reader, writer, client_id)
        connection.tls = ssl_context is not None
        connection._reader_task = asyncio.create_task(connection._read_loop())
        try:
            await asyncio.wait_for(connection._negotiate(), timeout_s)
            if security is not None and security.sasl_mechanism:
                await asyncio.wait_for(connection._sasl(security), timeout_s)
        except ConnectionError:
            connection.close()
            # Closed before its first answer: a TLS listener does that to a plaintext client.
            if ssl_context is None and connection._answered == 0 and await _speaks_tls(host, port, timeout_s):
                raise ConnectionError(f"{host}:{port} is a TLS listener and this connection is plaintext: use "
                                      "security.protocol SSL or SASL_SSL (tidelog's tools: --command-config "
                                      "FILE)") from None
            raise
        except BaseException:
            connection.close()
            raise
        return connection

    async def _sasl(self, security: "ClientSecurity") -> None:
        handshake = await self._send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.sasl_mechanism})
        if int(handshake.error_code.value) != 0:
            raise KafkaError(f"SASL mechanism {security.sasl_mechanism} refused", ErrorCode(int(handshake.error_code.value)))
        exchange = sasl_client.tokens(security.sasl_mechanism, security.username, security.password)
        token = next(exchange)
        while True:
            answer = await self._send(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if int(answer.error_code.value) != 0:
                raise KafkaError(f"SASL authentication as {security.username} failed: {answer.error_message}",
                                 ErrorCode(int(answer.error_code.value)))
            try:
                token = exchange.send(bytes(answer.auth_bytes or b""))
            except StopIteration:
                self.authenticated = True
                return
            except sasl_client.SaslClientError as e:
                raise KafkaError(str(e), ErrorCode.SASL_AUTHENTICATION_FAILED) from None

    async def _negotiate(self) -> None:
        response = await self._send(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "tidelog", "client_software_version": "0.1.0"})
        if response.error_code.value == ErrorCode.UNSUPPORTED_VERSION:
            response = await self._send(ApiKey.API_VERSIONS, 0, {})
        for api in response.api_keys:
            self.api_versions[int(api.api_key)] = (int(api.min_version), int(api.max_version))

    def version_for(self, api_key: int) -> int:
        ours = kio_versions(api_key)
        theirs = self.api_versions.get(api_key)
        if ours is None or theirs is None:
            raise KafkaError(f"the broker does not support API key {api_key}", ErrorCode.UNSUPPORTED_VERSION)
        version = min(ours[1], theirs[1])
        if version < max(ours[0], theirs[0]):
            raise KafkaError(f"no common version for API key {api_key}", ErrorCode.UNSUPPORTED_VERSION)
        return version

    async def request(self, api_key: int, body: dict, version: int | None = None,
                      timeout_s: float = 30.0) -> Any:
        """Send ``body`` (a dict, see protocol.codec) and return the decoded response."""
        version = self.version_for(api_key) if version is None else version
        return await asyncio.wait_for(self._send(api_key, version, body), timeout_s)

    async def _send(self, api_key: int, version: int, body: dict) -> Any:
        if self.closed:
            raise ConnectionError("connection is closed")
        correlation_id = next(self._correlation)
        future = asyncio.get_running_loop().create_future()
        self._waiters[correlation_id] = (future, api_key, version)
        self._writer.write(encode_request(api_key, version, correlation_id, self.client_id, body))
        await self._writer.drain()
        try:
            return await future
        finally:
            self._waiters.pop(correlation_id, None)

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if not 4 <= size <= RESPONSE_SIZE_MAX_BYTES:
                    raise ProtocolError(f"response size {size} is out of bounds")
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                waiter = self._waiters.get(correlation_id)
                if waiter is None:
                    continue
                future, api_key, version = waiter
                try:
                    _, entity = decode_response(api_key, version, frame)
                except ProtocolError as e:
                    if not future.done():
                        future.set_exception(e)
                    continue
                self._answered += 1
                if not future.done():
                    future.set_result(entity)
        except (asyncio.IncompleteReadError, ConnectionError, ProtocolError) as e:
            closed = isinstance(e, asyncio.IncompleteReadError) and not e.partial
            reason = "the broker closed the connection" if closed else f"connection lost: {e}"
            if closed and self._answered == 1 and not self.authenticated:
                # Only ApiVersions answered: a SASL listener closes a connection whose
                # next request is not a SASL handshake.
                reason += (" after ApiVersions: a listener that needs SASL does that to a client that does "
                           "not authenticate (security.protocol SASL_PLAINTEXT or SASL_SSL, sasl.mechanism, "
                           "sasl.username/sasl.password)")
            self._fail_all(ConnectionError(reason))
        except asyncio.CancelledError:
            self._fail_all(ConnectionError("connection closed"))
            raise

    def _fail_all(self, error: Exception) -> None:
        self.closed = True
        for future, _, _ in list(self._waiters.values()):
            if not future.done():
                future.set_exception(error)
        self._waiters.clear()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._writer.close()


async def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate not checked: this
    only tells a TLS listener from a plaintext one, to say why a plaintext client failed)."""
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context, server_hostname=host),
                                           timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), 1)
    except (OSError, asyncio.TimeoutError):
        pass
    return True
