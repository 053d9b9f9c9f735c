"""A loopback TCP proxy in front of every node, so any link can be cut.

Theory of operation. ``LinkProxy`` listens on one loopback port per node (the
controller and each broker). Brokers *advertise* their proxy port (their
registered endpoint), and reach the controller through its proxy
(``controller.quorum.voters``), so every connection between processes — broker to
broker (replica fetchers), broker to controller (heartbeats, metadata,
AlterPartition), client to broker — goes through a proxy that knows its
destination. The source of a connection is found when it is accepted: the
kernel's socket table (``/proc/net/tcp``) gives the inode of the connecting
socket, and the process holding it (``/proc/<pid>/fd``) is one of the nodes —
or else a client.

``cut(a, b)`` stops traffic from ``a`` to ``b`` (``partition`` both ways,
``isolate`` every link of a node, ``heal`` ends all). Two ways to cut:

* ``drop`` (default): open connections on the link are closed and new ones are
  refused — a partition that peers notice at once (a TCP reset);
* ``blackhole``: connections stay open and bytes are silently discarded — peers
  notice only by their own timeouts, as with a pulled cable.

Because Kafka's protocol is request/response on one connection, a link cut in one
direction breaks that direction's requests; a TCP connection cannot carry
requests one way only, so ``cut(a, b)`` also closes ``b``'s answers to ``a`` on
connections ``a`` opened (and blackholes them in ``blackhole`` mode).

The proxy runs its own asyncio loop on a daemon thread; its methods are
thread-safe and synchronous. Linux only (``/proc``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable

logger = logging.getLogger("tidelog.chaos.proxy")

CLIENT = -1          # any process that is not a node
HOST = "127.0.0.1"


def _socket_inodes() -> dict[tuple[int, int], str]:
    """``{(local port, remote port): inode}`` for every loopback TCP socket."""
    table = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            table[(local_port, remote_port)] = fields[9]
    return table


def _pid_holding(inode: str, pids: list[int]) -> int | None:
    target = f"socket:[{inode}]"
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None


def _all_pids() -> list[int]:
    """This user's processes, newest first (a node that just started is among them)."""
    uid = os.getuid()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    pids.append(int(name))
            except OSError:
                continue
    return sorted(pids, reverse=True)


@dataclass(eq=False)
class _Link:
    source: int                     # node id, re-derived from ``pid`` whenever cuts change
    destination: int
    client_writer: asyncio.StreamWriter
    pid: int | None = None
    server_writer: asyncio.StreamWriter | None = None
    tasks: list = field(default_factory=list)


class LinkProxy:
    def __init__(self, node_ids: list[int], target_port: Callable[[int], int],
                 node_pids: Callable[[], dict[int, int]], mode: str = "drop"):
        """``target_port(node)`` is where the node really listens (read at connect
        time); ``node_pids()`` maps process ids to node ids (read at accept time)."""
        assert mode in ("drop", "blackhole"), mode
        self.node_ids = list(node_ids)
        self._target_port = target_port
        self._node_pids = node_pids
        self.mode = mode
        self.ports: dict[int, int] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.cuts_made = 0
        self.connections = 0
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._servers = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="tidelog-link-proxy", daemon=True)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "LinkProxy":
        self._thread.start()
        for node_id in self.node_ids:
            server = self._call(asyncio.start_server(
                lambda r, w, n=node_id: self._accept(n, r, w), HOST, 0))
            self._servers.append(server)
            self.ports[node_id] = server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        async def shutdown():
            for server in self._servers:
                server.close()
            for link in list(self._links):
                self._close_link(link)
        if self._thread.is_alive():
            self._call(shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    def port(self, node_id: int) -> int:
        return self.ports[node_id]

    # ------------------------------------------------------------ faults

    def cut(self, source: int, destination: int) -> None:
        """Traffic from ``source`` to ``destination`` stops (node ids; CLIENT = -1)."""
        self._call(self._update({(source, destination)}, add=True))

    def partition(self, a: int, b: int) -> None:
        self._call(self._update({(a, b), (b, a)}, add=True))

    def isolate(self, node: int) -> None:
        others = [n for n in self.node_ids + [CLIENT] if n != node]
        self._call(self._update({(node, o) for o in others} | {(o, node) for o in others}, add=True))

    def unblock(self, pairs: set[tuple[int, int]]) -> None:
        self._call(self._update(set(pairs), add=False))

    def heal(self) -> None:
        self._call(self._update(set(self.blocked), add=False))

    async def _update(self, pairs: set[tuple[int, int]], add: bool) -> None:
        # A process's node id may be unknown when it connects (a node that has not
        # recorded its pid yet): look again now.
        pids = self._node_pids()
        for link in self._links:
            if link.pid is not None:
                link.source = pids.get(link.pid, CLIENT)
        if add:
            self.blocked |= pairs
            self.cuts_made += 1
            if self.mode == "drop":
                for link in list(self._links):
                    if self._is_cut(link):
                        self._close_link(link)
        else:
            self.blocked -= pairs

    def _is_cut(self, link: _Link) -> bool:
        return ((link.source, link.destination) in self.blocked
                or (link.destination, link.source) in self.blocked)

    # ------------------------------------------------------------ connections

    def _source_of(self, writer: asyncio.StreamWriter, node_id: int) -> tuple[int, int | None]:
        """``(node id, pid)`` of the process that opened this connection."""
        peer_port = writer.get_extra_info("peername")[1]
        inode = _socket_inodes().get((peer_port, self.ports[node_id]))
        if inode is None:
            return CLIENT, None
        pids = self._node_pids()
        pid = _pid_holding(inode, list(pids) + [p for p in _all_pids() if p not in pids])
        return pids.get(pid, CLIENT), pid

    async def _accept(self, destination: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        source, pid = self._source_of(writer, destination)
        link = _Link(source, destination, writer, pid)
        self.connections += 1
        if self.mode == "drop" and self._is_cut(link):
            writer.close()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(HOST, self._target_port(destination))
        except OSError:
            writer.close()
            return
        link.server_writer = server_writer
        self._links.add(link)
        link.tasks = [asyncio.ensure_future(self._pump(link, reader, server_writer, (source, destination))),
                      asyncio.ensure_future(self._pump(link, server_reader, writer, (destination, source)))]

    async def _pump(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    direction: tuple[int, int]) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self._is_cut(link):
                    if self.mode == "drop":
                        break
                    continue            # blackhole: swallow
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._close_link(link)

    def _close_link(self, link: _Link) -> None:
        self._links.discard(link)
        for w in (link.client_writer, link.server_writer):
            if w is not None:
                try:
                    w.close()
                except (OSError, RuntimeError):
                    pass
        for task in link.tasks:
            if not task.done() and task is not asyncio.current_task():
                task.cancel()
