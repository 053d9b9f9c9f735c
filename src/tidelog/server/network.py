"""Kafka listener: framing, per-connection ordering, limits.

Theory of operation. Each connection has a reader loop and a writer loop joined
by a bounded queue of pending responses, one slot per request in arrival order.
The reader parses a frame and calls the dispatcher *synchronously*, so requests
take effect in the order they arrived (a produce is appended before the next
request is even parsed). The dispatcher returns the encoded response, an
awaitable that will yield it (a fetch or acks=all produce waiting in a
purgatory), or ``None`` for no response (acks=0). The writer awaits the slots
in order, so a delayed response is never overtaken by a later one.

Limits: a frame over ``request_size_max_bytes`` or a malformed header closes the
connection (logged); a full in-flight queue stops reading (backpressure); a
connection idle for ``idle_timeout_ms`` is closed. One connection's failure
never touches another.

Errors: a malformed request closes that connection; a handler that raises
anything else is a bug — the connection is closed and logged, and an
``AssertionError`` (a broken invariant) goes to ``fault_handler``, which stops
the process rather than let it serve on from an impossible state.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import Awaitable, Callable, Union

from tidelog.core.limits import (
    CONNECTION_IN_FLIGHT_REQUESTS_MAX,
    CONNECTIONS_MAX_IDLE_MS,
    REQUEST_SIZE_MAX_BYTES,
)
from tidelog.protocol.codec import ProtocolError, RequestHeader, parse_request_header

log = logging.getLogger("tidelog.network")

Response = Union[bytes, Awaitable[bytes], None]
Dispatcher = Callable[[RequestHeader, bytes, int, "Connection"], Response]

_SIZE = struct.Struct(">i")


class Connection:
    """One client connection; ``peer`` is "host:port" for logs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 dispatch: Dispatcher, request_size_max_bytes: int, idle_timeout_ms: int,
                 in_flight_max: int):
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = f"/{peer[0]}" if peer else ""        # as Kafka names a member's client host
        self._dispatch = dispatch
        self._request_size_max_bytes = request_size_max_bytes
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._pending: asyncio.Queue = asyncio.Queue(maxsize=in_flight_max)
        self.closed = False

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        try:
            await self._read_loop()
            await self._pending.put(None)  # let the writer send what is owed, then finish
            await writer_task
        finally:
            writer_task.cancel()
            self.close()

    async def _read_loop(self) -> None:
        while not self.closed:
            try:
                size_bytes = await asyncio.wait_for(self.reader.readexactly(4), self._idle_timeout_s)
            except asyncio.TimeoutError:
                log.info("closing idle connection from %s", self.peer)
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            (size,) = _SIZE.unpack(size_bytes)
            if size < 0 or size > self._request_size_max_bytes:
                log.warning("closing connection from %s: request size %d outside [0, %d]",
                            self.peer, size, self._request_size_max_bytes)
                return
            try:
                frame = await self.reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            try:
                header, body_offset = parse_request_header(frame)
                response = self._dispatch(header, frame, body_offset, self)
            except ProtocolError as e:
                log.warning("closing connection from %s: %s", self.peer, e)
                return
            if response is not None:
                await self._pending.put(response)

    async def _write_loop(self) -> None:
        while True:
            item = await self._pending.get()
            if item is None:
                return
            try:
                data = item if isinstance(item, bytes) else await item
            except AssertionError:
                self.close()                   # the reader stops; serve() re-raises this
                raise
            except Exception:
                log.exception("request from %s failed; closing its connection", self.peer)
                self.close()
                return
            if data is None or self.closed:
                continue
            try:
                self.writer.write(data)
                if self.writer.transport.get_write_buffer_size() > 1 << 20:
                    await self.writer.drain()
            except ConnectionError:
                self.close()
                return

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


class Listener:
    """A TCP listener that hands every frame to ``dispatch``."""

    def __init__(self, dispatch: Dispatcher, host: str, port: int,
                 request_size_max_bytes: int = REQUEST_SIZE_MAX_BYTES,
                 idle_timeout_ms: int = CONNECTIONS_MAX_IDLE_MS,
                 in_flight_max: int = CONNECTION_IN_FLIGHT_REQUESTS_MAX,
                 fault_handler: Callable[[BaseException], None] | None = None):
        self._dispatch = dispatch
        self._fault_handler = fault_handler
        self.host = host
        self.port = port
        self._request_size_max_bytes = request_size_max_bytes
        self._idle_timeout_ms = idle_timeout_ms
        self._in_flight_max = in_flight_max
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[Connection] = set()

    def bind(self) -> int:
        """Bind the socket now (so the real port is known before serving)."""
        import socket
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self._sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    async def start(self) -> None:
        if getattr(self, "_sock", None) is None:
            self.bind()
        self._server = await asyncio.start_server(self._on_connect, sock=self._sock, limit=1 << 20)

    async def _on_connect(self, reader, writer) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(reader, writer, self._dispatch, self._request_size_max_bytes,
                                self._idle_timeout_ms, self._in_flight_max)
        self.connections.add(connection)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # the listener is shutting down
        except AssertionError as e:
            log.critical("broken invariant serving %s", connection.peer, exc_info=True)
            if self._fault_handler is None:
                raise
            self._fault_handler(e)
        except Exception:
            log.exception("connection from %s failed", connection.peer)
        finally:
            self.connections.discard(connection)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()
