"""Kafka listener: accepting, framing, per-connection ordering, limits.

Theory of operation. Each connection has a reader loop and a writer loop joined
by a bounded queue of pending responses, one slot per request in arrival order.
The reader parses a frame and calls the dispatcher *synchronously*, so requests
take effect in the order they arrived (a produce is appended before the next
request is even parsed). The dispatcher returns the encoded response, an
awaitable that will yield it (a fetch or acks=all produce waiting in a
purgatory), or ``None`` for no response (acks=0). The writer awaits the slots
in order, so a delayed response is never overtaken by a later one.

Accepting. A listener runs its own accept loop (not ``asyncio.start_server``)
so that it, and not the event loop implementation, decides what happens at a
limit::

    accept loop ── max.connections reached? ── wait for a slot (accept nothing)
        │
        accept() ── EMFILE/ENFILE ── pause ACCEPT_BACKOFF_MS, retry (logged once a burst)
        │
        max.connections.per.ip reached for the address? ── close it at once (logged)
        │
        Connection: size (4 bytes) ── outside [0, socket.request.max.bytes]? close
                    body, a chunk at a time: memory from the pool first (waits
                      while queued.max.request.bytes is in use), then the bytes;
                      none for connections.max.idle.ms? close
                    dispatch, give the bytes back

Out of descriptors, Python 3.11's asyncio (``_accept_connection``) logs a
traceback for every failed accept() (up to its backlog, 100, per wake-up) and
retries after a second; uvloop (libuv) accepts and resets every waiting
connection with a spare descriptor, silently, and stops listening if even that
fails. Neither is what Kafka does, so the loop is ours: the connections wait in
the kernel's backlog (``LISTEN_BACKLOG``) until descriptors free up.

Limits, all as Kafka names them:

* ``socket.request.max.bytes``: a frame over it, or a malformed header, closes
  the connection (logged).
* ``queued.max.request.bytes``: the bytes of requests being read come from a
  ``MemoryPool`` shared by every connection of the server (Kafka's
  SocketServer), taken a chunk at a time *before* the chunk is read. When it is
  used up, readers wait: nothing more is read from their sockets, the kernel's
  buffers fill and the clients' sends block (back-pressure); nothing is refused.
  A request gives its bytes back once dispatched. Kafka reserves a request's
  declared size at once, which lets a client that declares a large request and
  stalls hold the pool for ``connections.max.idle.ms``; here it holds what it
  sent. The oldest request being read may always go on, so the bound is the
  pool plus one request, as with Kafka's pool. Kafka's default is -1 (no bound);
  tidelog's is ``QUEUED_MAX_REQUEST_BYTES`` (100 MiB), and -1 still means no
  bound. Before the pool is asked, each connection reads ahead at most about
  twice ``CONNECTION_READ_AHEAD_BYTES`` plus one socket read.
* ``connections.max.idle.ms``: a connection that sends nothing for that long is
  closed, between requests and in the middle of one (a request whose bytes stop
  arriving); the time counts from the last bytes received, so a slow but moving
  upload is not cut. A request waiting for pool memory is not idle (it waits on
  us, not on the client).
* ``max.connections`` (per server; the controller listeners of a combined node
  have their own count, as KRaft's controller has its own SocketServer): at the
  limit the listener stops accepting until a connection closes; new
  connections wait in the backlog, as with Kafka's blocked acceptor.
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a
  connection over its address's limit is accepted and closed at once.
* a full in-flight queue stops reading (``CONNECTION_IN_FLIGHT_REQUESTS_MAX``).

One connection's failure never touches another.

Requests rejected before they are served (a malformed frame, a frame over the
size limit, a request before SASL authentication, an unknown API key or
version, a failed TLS handshake) are logged through the listener's
``RateLimitedLog``: after a burst of ``REJECTED_LOG_BURST`` lines, at most one
line per ``REJECTED_LOG_INTERVAL_S``, the next one counting the lines left out;
never a traceback. They cost a client nothing,
not even a login, so one line each would let anyone fill the disk.

Errors: a malformed request closes that connection; a handler that raises
anything else is a bug — the connection is closed and logged, and an
``AssertionError`` (a broken invariant) goes to ``fault_handler``, which stops
the process rather than let it serve on from an impossible state.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, Union

from tidelog.core.errors import InvalidConfigError
from tidelog.core.limits import (
    ACCEPT_BACKOFF_MS,
    CONNECTION_IN_FLIGHT_REQUESTS_MAX,
    CONNECTION_READ_AHEAD_BYTES,
    CONNECTIONS_MAX_IDLE_MS,
    LISTEN_BACKLOG,
    MAX_CONNECTIONS,
    QUEUED_MAX_REQUEST_BYTES,
    REQUEST_SIZE_MAX_BYTES,
)
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import ProtocolError, RequestHeader, parse_request_header
from tidelog.protocol.file_region import FileRegion, ResponseFrame, TruncatedRegionError
from tidelog.server.write_behind import WriteBehind

logger = logging.getLogger("tidelog.network")

Response = Union[bytes, ResponseFrame, Awaitable[Union[bytes, ResponseFrame, None]], None]
Dispatcher = Callable[[RequestHeader, bytes, int, "Connection"], Response]

_SIZE = struct.Struct(">i")
_BODY_CHUNK_BYTES = 256 * 1024   # memory a request body takes from the pool at a time
SSL_HANDSHAKE_TIMEOUT_S = 10.0   # a TLS client that does not finish its handshake is dropped

# accept() failures that mean "out of descriptors or kernel memory": wait, then try again.
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

# Rejected requests (bad frames, unknown API versions, ...): after a burst of
# REJECTED_LOG_BURST lines, at most one log line per REJECTED_LOG_INTERVAL_S per listener.
REJECTED_LOG_INTERVAL_S = 10.0
REJECTED_LOG_BURST = 20


class RateLimitedLog:
    """Log lines for events any client can cause at will, bounded: a token bucket of
    ``burst`` lines refilled at one per ``interval_s`` (so sporadic events are all
    logged, a flood costs ``burst`` lines and then one per ``interval_s``). The lines
    left out are counted and the count told on the next line written. Callers pass
    a message, never an exception: no traceback, ever."""

    def __init__(self, to: logging.Logger, interval_s: float = REJECTED_LOG_INTERVAL_S,
                 burst: int = REJECTED_LOG_BURST, clock: Callable[[], float] = time.monotonic):
        self._logger = to
        self.interval_s = interval_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._refilled_s = clock()
        self.suppressed = 0          # lines left out since the last one written
        self.total = 0               # events since the start, written or not

    def log(self, level: int, message: str, *args) -> bool:
        """Log ``message % args`` if the bucket has a line left; True if written."""
        self.total += 1
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled_s) / self.interval_s)
        self._refilled_s = now
        if self._tokens < 1:
            self.suppressed += 1
            return False
        self._tokens -= 1
        if self.suppressed:
            message += " (%d more such not logged: at most one line per %.0f s after a burst of %d)"
            args = (*args, self.suppressed, self.interval_s, self.burst)
            self.suppressed = 0
        self._logger.log(level, message, *args)
        return True


class MemoryPool:
    """Bytes of requests being read, shared by the connections of one server
    (``queued.max.request.bytes``; ``capacity_bytes=None`` counts but never waits).

    A request takes memory as its bytes arrive, a chunk at a time, not its
    declared size up front: a client that declares 100 MiB and stalls holds only
    what it sent. A chunk is granted while the pool has room, first come first
    served; the *oldest* request being read is always granted, so requests that
    each hold part of the pool can never wait on each other for ever. Hence at
    most ``capacity_bytes`` plus one request (``socket.request.max.bytes``), the
    bound of Kafka's pool. ``begin`` a request, ``take`` memory for its next
    bytes, ``finish`` it to give all of it back.
    """

    def __init__(self, capacity_bytes: int | None = QUEUED_MAX_REQUEST_BYTES):
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._requests: dict[object, int] = {}   # request being read → bytes it holds; oldest first
        self._waiters: collections.deque[tuple[object, int, asyncio.Future]] = collections.deque()
        self._depleted = False

    def begin(self) -> object:
        request = object()
        self._requests[request] = 0
        return request

    async def take(self, request: object, size: int) -> None:
        if self._oldest() is request or (not self._waiters and self._fits(size)):
            self._give(request, size)
            return
        if not self._depleted:
            self._depleted = True
            logger.info("queued.max.request.bytes (%s) in use: reading requests waits for memory",
                     self.capacity_bytes)
        entry = (request, size, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        try:
            await entry[2]
        except asyncio.CancelledError:
            if not entry[2].done() or entry[2].cancelled():
                self._waiters.remove(entry)  # (if granted, finish() gives the bytes back)
                self._grant()
            raise

    def finish(self, request: object) -> None:
        self.used_bytes -= self._requests.pop(request)
        assert self.used_bytes >= 0, f"memory pool gave back more than it lent ({self.used_bytes})"
        self._grant()

    def _oldest(self) -> object | None:
        return next(iter(self._requests), None)

    def _fits(self, size: int) -> bool:
        return self.capacity_bytes is None or self.used_bytes + size <= self.capacity_bytes

    def _give(self, request: object, size: int) -> None:
        self._requests[request] += size
        self.used_bytes += size

    def _grant(self) -> None:
        oldest = self._oldest()
        for entry in self._waiters:
            if entry[0] is oldest:
                self._waiters.remove(entry)
                self._give(oldest, entry[1])
                entry[2].set_result(None)
                break
        while self._waiters and self._fits(self._waiters[0][1]):
            request, size, waiter = self._waiters.popleft()
            self._give(request, size)
            waiter.set_result(None)
        if self._depleted and not self._waiters:
            self._depleted = False
            logger.info("memory for requests available again (%d of %s bytes in use)",
                     self.used_bytes, self.capacity_bytes)


class ConnectionQuotas:
    """Connection counts of one server: ``max.connections`` in all and
    ``max.connections.per.ip`` (with its overrides) per client address."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS, max_per_ip: int = MAX_CONNECTIONS,
                 per_ip_overrides: Mapping[str, int] | None = None):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.total = 0
        self.counts: dict[str, int] = {}
        self._slot_freed = asyncio.Event()

    def slot_available(self) -> bool:
        return self.total < self.max_connections

    async def wait_for_slot(self, where: str) -> None:
        """Return once a connection may be added (Kafka's blocked acceptor)."""
        if self.slot_available():
            return
        logger.info("max.connections (%d) reached: %s stops accepting until a connection closes",
                 self.max_connections, where)
        while not self.slot_available():
            self._slot_freed.clear()
            await self._slot_freed.wait()
        logger.info("%s accepts connections again (%d open)", where, self.total)

    def add(self, ip: str) -> int | None:
        """Count a connection from ``ip``; if that address is at its limit, count
        nothing and return the limit (the caller closes the connection)."""
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        count = self.counts.get(ip, 0)
        if count >= limit:
            return limit
        self.counts[ip] = count + 1
        self.total += 1
        return None

    def remove(self, ip: str) -> None:
        count = self.counts[ip] - 1
        if count:
            self.counts[ip] = count
        else:
            del self.counts[ip]
        self.total -= 1
        self._slot_freed.set()


@dataclass
class ServerLimits:
    """What the listeners of one server share, as the listeners of Kafka's
    SocketServer do: the memory pool and the connection quotas."""

    memory_pool: MemoryPool
    quotas: ConnectionQuotas
    # A broker's log appends, made by a thread (server/write_behind.py): no response goes
    # out before the writes it may confirm are made (Connection._writes_confirmed).
    write_behind: "WriteBehind | None" = None

    @classmethod
    def from_config(cls, config) -> "ServerLimits":
        """From a ``BrokerConfig`` (Kafka's names); ``InvalidConfigError`` if the
        overrides name a host that does not resolve."""
        queued = config["queued.max.request.bytes"]
        overrides = parse_per_ip_overrides(config["max.connections.per.ip.overrides"])
        if config["max.connections.per.ip"] == 0 and not overrides:
            raise InvalidConfigError("max.connections.per.ip can be set to zero only if "
                                     "max.connections.per.ip.overrides is set")
        return cls(MemoryPool(None if queued == -1 else queued),
                   ConnectionQuotas(config["max.connections"], config["max.connections.per.ip"], overrides))


def client_ip(host: str) -> str:
    """The address a per-IP limit counts: an IPv4 client on an IPv6 socket counts as IPv4."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def parse_per_ip_overrides(items: list[str]) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` items; a host name
    counts for every address it resolves to (Kafka resolves them at start)."""
    overrides: dict[str, int] = {}
    for item in items:
        host, _, count = item.rpartition(":")
        host = host.strip().strip("[]")
        try:
            address = client_ip(str(ipaddress.ip_address(host)))
            addresses = [address]
        except ValueError:
            try:
                addresses = sorted({client_ip(info[4][0]) for info in socket.getaddrinfo(host, None)})
            except OSError as e:
                raise InvalidConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}: {e}") from None
        for address in addresses:
            overrides[address] = int(count)
    return overrides


def raise_open_file_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (Kafka's operators do it with
    ``ulimit -n``): every connection, segment and index is a descriptor."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        try:  # Linux caps a process's descriptors at fs.nr_open
            with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 10240  # OPEN_MAX on macOS, a safe value elsewhere
    if soft != resource.RLIM_INFINITY and soft >= target:
        logger.info("open file limit (RLIMIT_NOFILE) is %d", soft)
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as e:
        logger.warning("cannot raise the open file limit (RLIMIT_NOFILE) from %d to %d: %s", soft, target, e)
        return
    logger.info("raised the open file limit (RLIMIT_NOFILE) from %d to %d", soft, target)


class Connection:
    """One client connection; ``peer`` is "host:port" for logs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 dispatch: Dispatcher, request_size_max_bytes: int, idle_timeout_ms: int,
                 in_flight_max: int, memory_pool: MemoryPool | None = None,
                 rejected_log: RateLimitedLog | None = None):
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = f"/{peer[0]}" if peer else ""        # as Kafka names a member's client host
        self._dispatch = dispatch
        self._request_size_max_bytes = request_size_max_bytes
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._pool = memory_pool if memory_pool is not None else MemoryPool(None)
        self._pending: asyncio.Queue = asyncio.Queue(maxsize=in_flight_max)
        self.closed = False
        self.principal = "User:ANONYMOUS"      # the TLS client certificate's, on an SSL listener
        self.sasl = None                       # a SaslSession on a SASL listener
        # A Fetch's records go out by sendfile (a plaintext listener; never TLS, whose
        # bytes must go through the SSL object): the dispatcher then encodes file regions.
        self.sendfile = False
        self.listener: "Listener | None" = None  # counts the bytes sent by sendfile
        self.close_after_response = False      # a failed authentication: answer, then close
        self.watch_writes(None)
        # Client quotas (server/quotas.py): no request is read before this loop time (s).
        self.muted_until = 0.0
        self._muted_by = None
        # The listener's log of rejected requests (shared by its connections).
        self.rejected_log = rejected_log if rejected_log is not None else RateLimitedLog(logger)

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
                async with asyncio.timeout(self._idle_timeout_s):
                    size_bytes = await self.reader.readexactly(4)
            except TimeoutError:
                logger.info("closing idle connection from %s", self.peer)
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            (size,) = _SIZE.unpack(size_bytes)
            if size < 0 or size > self._request_size_max_bytes:
                self.rejected_log.log(logging.WARNING, "closing connection from %s: request size %d outside [0, %d]",
                                      self.peer, size, self._request_size_max_bytes)
                return
            request = self._pool.begin()
            try:
                frame = await self._read_body(size, request)
                if frame is None:
                    return
                if self.muted_until:
                    await self._wait_unmuted()
                try:
                    header, body_offset = parse_request_header(frame)
                    response = self._dispatch(header, frame, body_offset, self)
                except ProtocolError as e:
                    self.rejected_log.log(logging.WARNING, "closing connection from %s: %s", self.peer, e)
                    return
                del frame
            finally:
                self._pool.finish(request)
            if response is not None:
                await self._pending.put((response, header.api_key, self._writes_submitted()))

    def mute(self, throttle_ms: int, by=None) -> None:
        """Read no request for ``throttle_ms`` (Kafka mutes a throttled client's channel)."""
        until = asyncio.get_running_loop().time() + throttle_ms / 1000
        if until > self.muted_until:
            if not self.muted_until and by is not None:
                by.throttled_channels += 1
                self._muted_by = by
            self.muted_until = until

    async def _wait_unmuted(self) -> None:
        loop = asyncio.get_running_loop()
        while (delay := self.muted_until - loop.time()) > 0:
            await asyncio.sleep(delay)
        self.muted_until = 0.0
        if self._muted_by is not None:
            self._muted_by.throttled_channels -= 1
            self._muted_by = None

    async def _read_body(self, size: int, request: object) -> bytes | None:
        """The ``size`` bytes of a request, memory taken from the pool before each
        chunk is read; None if the peer goes away or sends nothing for
        ``connections.max.idle.ms`` (the clock restarts with every chunk; a wait
        for memory does not count)."""
        reader = self.reader
        chunks: list[bytes] = []
        held = received = 0
        while received < size:
            if held == received:
                grant = min(size - held, _BODY_CHUNK_BYTES)
                await self._pool.take(request, grant)
                held += grant
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    chunk = await reader.read(held - received)
            except TimeoutError:
                logger.info("closing connection from %s: %d of a %d-byte request received, then nothing "
                         "for %d ms", self.peer, received, size, self._idle_timeout_s * 1000)
                return None
            except ConnectionError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            received += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _write_loop(self) -> None:
        while True:
            entry = await self._pending.get()
            if entry is None:
                return
            item, api_key, submitted = entry
            try:
                data = item if isinstance(item, (bytes, ResponseFrame)) else await item
            except AssertionError:
                self.close()                   # the reader stops; serve() re-raises this
                raise
            except Exception:
                logger.exception("request from %s failed; closing its connection", self.peer)
                self.close()
                return
            if (data is not None and self._write_behind is not None
                    and not await self._writes_made(self._writes_confirmed(api_key, submitted))):
                self.close()
            if data is None or self.closed:
                if type(data) is ResponseFrame:
                    data.close()
                continue
            try:
                if type(data) is ResponseFrame:
                    await self._write_frame(data)
                else:
                    self.writer.write(data)
                if self.close_after_response:
                    await self.writer.drain()
                    self.close()
                    return
                if self.writer.transport.get_write_buffer_size() > 1 << 20:
                    await self.writer.drain()
            except ConnectionError:
                self.close()
                return
            except TruncatedRegionError as e:
                logger.warning("closing connection from %s: %s", self.peer, e)
                self.close()
                return

    def watch_writes(self, write_behind: "WriteBehind | None") -> None:
        """Hold each response until the log writes it may confirm are made."""
        self._write_behind = write_behind
        self._writes_checked = write_behind.submitted if write_behind is not None else 0

    def _writes_submitted(self) -> int:
        return self._write_behind.submitted if self._write_behind is not None else 0

    def _writes_confirmed(self, api_key: int, submitted_at_dispatch: int) -> int | None:
        """The last write a response may confirm: a Produce's own appends were queued
        while it was handled; anything else may rest on a write made since (a group's or
        a transaction's state written when its wait ends), so every write queued until
        now. A Fetch confirms nothing (its records are read from what the file holds,
        the unwritten tail from memory): None, it is not held."""
        if api_key == ApiKey.FETCH:
            return None
        if api_key == ApiKey.PRODUCE:
            return submitted_at_dispatch
        return self._write_behind.submitted

    async def _writes_made(self, upto: int | None) -> bool:
        """Wait until write ``upto`` (and each one before it) is made; False if one made
        since the last response checked failed (this response may confirm it: it is not
        sent)."""
        write_behind = self._write_behind
        if upto is None or upto <= self._writes_checked:
            return True
        if write_behind.completed < upto:
            loop = asyncio.get_running_loop()
            made = loop.create_future()

            def wake() -> None:
                if not made.done():
                    made.set_result(None)

            def from_the_writer() -> None:
                try:
                    loop.call_soon_threadsafe(wake)
                except RuntimeError:        # the loop has closed: nobody waits any more
                    pass
            write_behind.when_written(upto, from_the_writer)
            await made
        if write_behind.failed_between(self._writes_checked, upto):
            logger.warning("closing connection from %s: a log write made before its response failed", self.peer)
            return False
        self._writes_checked = upto
        return True

    async def _write_frame(self, frame: ResponseFrame) -> None:
        """Write a response with file regions: its bytes through the transport, each
        region by ``os.sendfile`` once the transport has sent everything before it.
        A region that comes up short (its file truncated) raises ``TruncatedRegionError``
        before anything after it is written: the caller closes the connection."""
        try:
            for part in frame.parts:
                if type(part) is FileRegion:
                    await self._send_region(part)
                    part.close()
                else:
                    self.writer.write(part)
        finally:
            frame.close()

    async def _send_region(self, region: FileRegion) -> None:
        await self._drained()
        sock_fd = self.writer.get_extra_info("socket").fileno()
        offset, end = region.position, region.position + region.length
        while offset < end:
            if self.closed:
                raise ConnectionResetError("connection closed while sending")
            try:
                sent = os.sendfile(sock_fd, region.fd, offset, end - offset)
            except BlockingIOError:            # the socket's buffer is full: wait for room
                await self._writable(sock_fd)
                continue
            if sent == 0:
                raise TruncatedRegionError(region, offset - region.position)
            offset += sent
        if self.listener is not None:
            self.listener.sendfile_bytes += region.length

    async def _drained(self) -> None:
        """Return once the transport's write buffer is empty (the bytes before a region
        are on the socket), waiting as ``drain`` does with the buffer's limits at 0."""
        transport = self.writer.transport
        if not transport.get_write_buffer_size():
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)
        try:
            await self.writer.drain()
        finally:
            transport.set_write_buffer_limits(high=high, low=low)

    async def _writable(self, sock_fd: int) -> None:
        """Wait until the socket takes more bytes. The transport owns ``sock_fd`` in the
        event loop (asyncio and uvloop refuse a second watcher on it), so the wait is on a
        duplicate of it: the same socket, another number."""
        loop = asyncio.get_running_loop()
        fd = os.dup(sock_fd)
        ready = loop.create_future()
        loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_writer(fd)
            os.close(fd)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()
            if self._muted_by is not None:          # closed while muted
                self._muted_by.throttled_channels -= 1
                self._muted_by = None


def address_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now (None: it can, or port 0), checked with
    a throwaway socket bound as a listener binds: a start checks every address before it
    writes anything to disk."""
    if not port:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


class Listener:
    """A TCP listener that hands every frame to ``dispatch``.

    ``limits`` are shared with the other listeners of the same server; without
    them the listener has its own (``queued.max.request.bytes`` at its default,
    no connection limits)."""

    def __init__(self, dispatch: Dispatcher, host: str, port: int,
                 request_size_max_bytes: int = REQUEST_SIZE_MAX_BYTES,
                 idle_timeout_ms: int = CONNECTIONS_MAX_IDLE_MS,
                 in_flight_max: int = CONNECTION_IN_FLIGHT_REQUESTS_MAX,
                 fault_handler: Callable[[BaseException], None] | None = None,
                 limits: ServerLimits | None = None,
                 accept_backoff_ms: int = ACCEPT_BACKOFF_MS,
                 ssl_context: ssl.SSLContext | None = None,
                 principal_of: Callable[[dict | None], str] | None = None,
                 sasl=None, sendfile: bool = True):
        self._dispatch = dispatch
        # Fetch responses by sendfile on a plaintext listener (tidelog.network.sendfile.enable).
        self.sendfile = sendfile
        self.sendfile_bytes = 0     # records sent by sendfile since the start
        # An SSL listener (server/tls.py): each connection's TLS handshake happens
        # before its first request is read; ``principal_of`` names the peer from its
        # certificate (Kafka's SslPrincipalMapper).
        self.ssl_context = ssl_context          # replaced when the stores are reloaded
        self._principal_of = principal_of
        # A SASL listener (server/sasl.py): each connection gets a SaslSession and is
        # served nothing but ApiVersions / SaslHandshake / SaslAuthenticate before it.
        self._sasl = sasl
        self._fault_handler = fault_handler
        self.host = host
        self.port = port
        self._request_size_max_bytes = request_size_max_bytes
        self._idle_timeout_ms = idle_timeout_ms
        self._in_flight_max = in_flight_max
        self.limits = limits or ServerLimits(MemoryPool(), ConnectionQuotas())
        self._accept_backoff_s = accept_backoff_ms / 1000
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._connection_tasks: set[asyncio.Task] = set()
        self.connections: set[Connection] = set()
        self.accept_failures = 0   # accept() calls that failed (EMFILE, ...) since the start
        self.rejected_log = RateLimitedLog(logger)   # requests refused before being served

    def bind(self) -> int:
        """Bind the socket now (so the real port is known before serving); a failure
        names the address."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise OSError(e.errno, f"cannot listen on {self.host}:{self.port}: {e.strerror}") from None
        self._sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    async def start(self) -> None:
        if self._sock is None:
            self.bind()
        self._sock.listen(LISTEN_BACKLOG)
        self._sock.setblocking(False)
        self._accept_task = asyncio.create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        where = f"listener {self.host}:{self.port}"
        quotas = self.limits.quotas
        while True:
            await quotas.wait_for_slot(where)
            sock, address = await self._accept(where)
            try:
                await quotas.wait_for_slot(where)   # another listener of the server may have taken it
            except asyncio.CancelledError:
                sock.close()
                raise
            ip = client_ip(address[0]) if isinstance(address, tuple) else str(address)
            limit = quotas.add(ip)
            if limit is not None:
                logger.info("Rejected connection from %s, address already has the configured maximum of %d "
                         "connections.", ip, limit)
                sock.close()
                continue
            task = asyncio.create_task(self._serve_socket(sock, ip))
            self._connection_tasks.add(task)
            task.add_done_callback(self._connection_tasks.discard)

    async def _accept(self, where: str) -> tuple[socket.socket, object]:
        """The next connection. Out of descriptors (EMFILE/ENFILE) or any other
        failure of accept() pauses accepting for ``accept_backoff_ms`` and tries
        again, logged once per burst; waiting clients stay in the backlog."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                sock, address = await loop.sock_accept(self._sock)
            except (ConnectionAbortedError, InterruptedError):
                continue                    # the client gave up before we took it
            except OSError as e:
                self.accept_failures += 1
                if failures == 0:
                    level = logging.WARNING if e.errno in _OUT_OF_RESOURCES else logging.ERROR
                    logger.log(level, "%s cannot accept connections (%s); retrying every %d ms",
                            where, e, self._accept_backoff_s * 1000)
                failures += 1
                await asyncio.sleep(self._accept_backoff_s)
                continue
            if failures:
                logger.info("%s accepts connections again after %d failed accepts", where, failures)
            return sock, address

    async def _serve_socket(self, sock: socket.socket, ip: str) -> None:
        try:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = asyncio.StreamReader(limit=CONNECTION_READ_AHEAD_BYTES)
                protocol = asyncio.StreamReaderProtocol(reader)
                if self.ssl_context is None:
                    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, sock)
                else:
                    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
                        lambda: protocol, sock, ssl=self.ssl_context,
                        ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S)
            except ssl.SSLError as e:        # not TLS, an untrusted certificate, no common protocol
                self.rejected_log.log(logging.INFO, "TLS handshake with %s failed: %s", ip, e.reason or e)
                sock.close()
                return
            except (OSError, asyncio.TimeoutError) as e:     # gone before we could start
                logger.debug("connection from %s lost at accept: %s", ip, e)
                sock.close()
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop())
            principal = None
            if self.ssl_context is not None and self._principal_of is not None:
                principal = self._principal_of(transport.get_extra_info("peercert"))
            await self._on_connect(reader, writer, principal)
        finally:
            self.limits.quotas.remove(ip)

    async def _on_connect(self, reader, writer, principal: str | None = None) -> None:
        connection = Connection(reader, writer, self._dispatch, self._request_size_max_bytes,
                                self._idle_timeout_ms, self._in_flight_max, self.limits.memory_pool,
                                self.rejected_log)
        connection.principal = principal or "User:ANONYMOUS"
        connection.sendfile = self.sendfile and self.ssl_context is None
        connection.listener = self
        connection.watch_writes(self.limits.write_behind)
        if self._sasl is not None:
            connection.sasl = self._sasl.session()
        self.connections.add(connection)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # the listener is shutting down
        except AssertionError as e:
            logger.critical("broken invariant serving %s", connection.peer, exc_info=True)
            if self._fault_handler is None:
                raise
            self._fault_handler(e)
        except Exception:
            logger.exception("connection from %s failed", connection.peer)
        finally:
            connection.close()
            self.connections.discard(connection)

    async def stop(self) -> None:
        if self._accept_task is not None:
            self._accept_task.cancel()
            try:
                await self._accept_task
            except asyncio.CancelledError:
                pass
            self._accept_task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for connection in list(self.connections):
            connection.close()
