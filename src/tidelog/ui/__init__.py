"""``tidelog ui``: a live web view of a cluster — brokers, partitions, replica
offsets and the state-change timeline — from the brokers' ``/state`` and
``/state-changes`` (server/state.py).

Theory of operation. One asyncio process, no framework::

    browsers ── GET / (static page) ─────────────▶ UiServer (127.0.0.1:--port)
             ◀─ GET /events (one SSE stream each) ──  │ one poll loop, every --interval s (≥ 1)
                                                      ▼
              Metadata (Kafka protocol) ─▶ the brokers: who they are (host, Kafka port)
              GET /state, /state-changes?since=SEQ ─▶ each node's metrics port

The poll loop is the only thing that talks to the cluster, whatever the number
of browsers: every round it asks every known node for ``/state`` and for the
state changes after the last ``seq`` it saw from that node, at once and with a
short timeout (a paused or killed broker is shown unreachable, it never holds
the round up). Brokers are found with Metadata from the bootstrap servers
(again every ``REDISCOVER_ROUNDS`` rounds, and from the broker registrations in
any ``/state``, which name the fenced ones Metadata leaves out); a broker's
metrics port is its Kafka port + ``metrics_port_offset`` (what ``tidelog
cluster up`` uses), unless given. Started by ``tidelog cluster`` (``cluster_dir``),
it reads the nodes and their metrics ports from ``cluster.json`` instead — the
controller included — and, with ``--drills``, offers the fault drills (kill,
pause, resume, restart a node), which run ``ProcessCluster`` in a thread.

A round's result is merged into one snapshot: per node its reachability and
state; per partition the newest registration any broker holds (highest
partition epoch) and per replica what that replica's broker says of its own log
(log start offset, high watermark, last stable offset, log end offset). The
timeline merges the brokers' events: the same change seen by several brokers
(same kind, partition or broker, and epochs) is one entry with ``seen_by``.
Each browser gets one ``snapshot`` event when it connects, then ``state`` when
the nodes or partitions change and ``changes`` with the new timeline entries; a
comment every ``KEEPALIVE_S`` keeps proxies from closing a quiet stream.

Who may do what. The view listens on 127.0.0.1 unless ``--host`` says otherwise,
and answers only requests whose ``Host`` is the address it is bound to or a
loopback name (``127.0.0.1``, ``localhost``, ``[::1]``; with a wildcard bind
also this machine's names), with its port: a page of another site that rebinds
its own name to 127.0.0.1 (DNS rebinding) is refused. The fault drills are off
unless asked for (``--drills``, which needs ``--cluster-dir``). ``token`` — made
with ``secrets`` for each run when drills are on or the view reads brokers with a
state token — is in the URL the view prints (``?token=…``); the page's script
reads it from there. A drill is done only for a ``POST /api/drill`` with the
token in ``X-Tidelog-Token`` (which a page of another origin cannot send without
a CORS preflight this server never grants), an ``Origin`` equal to the view's own
origin (``http://`` + the allowed ``Host``), and an allowed ``Host``; anything
else is refused with 403 and a JSON error, each refusal logged once, never with
what was sent as a token. When the view reads the brokers' ``/state`` with a
token (``--state-token-file``, or the one of a ``cluster up --secure`` cluster
with ``--cluster-dir``), the page, ``/events`` and ``/api/snapshot`` need the
view's token too (``?token=``, ``X-Tidelog-Token`` or ``Authorization: Bearer``):
401 without it, as the brokers answer. ``/app.js`` and ``/style.css`` are the
package's own files and always served. Tokens are compared in constant time
(``hmac.compare_digest``); a request head is bounded (``HTTP_HEAD_MAX_BYTES``,
431 past it) and must arrive within ``HTTP_READ_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from importlib import resources
from urllib.parse import parse_qsl

logger = logging.getLogger("tidelog.ui")

REDISCOVER_ROUNDS = 10
HTTP_TIMEOUT_S = 0.8
KEEPALIVE_S = 15.0
TIMELINE_EVENTS = 500
DRILLS = ("kill", "pause", "resume", "restart")
HTTP_HEAD_MAX_BYTES = 16 * 1024
HTTP_READ_TIMEOUT_S = 10.0
MAX_STREAMS = 64            # open /events streams
MAX_QUEUED = 32             # events waiting for a slow stream; past it the stream is closed (it reconnects)
TOKEN_HEADER = "x-tidelog-token"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")
_SECURITY_HEADERS = ("Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                     "Referrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n"
                     "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'; "
                     "frame-ancestors 'none'; form-action 'none'\r\n")
_STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/style.css": ("style.css", "text/css; charset=utf-8")}


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


async def http_get_json(host: str, port: int, path: str, timeout_s: float = HTTP_TIMEOUT_S,
                        token: str | None = None):
    """One ``GET`` answered with JSON (HTTP/1.1, ``Connection: close``), with ``token``
    as ``Authorization: Bearer`` if given."""
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""

    async def get():
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{authorization}"
                         "Connection: close\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1:2]
        if status == [b"401"]:
            raise ConnectionError(f"HTTP 401 from {path.partition('?')[0]}: "
                                  + ("wrong state token" if token else "it needs a token (--state-token-file)"))
        if status != [b"200"]:
            raise ConnectionError(f"HTTP {status[0].decode() if status else '?'} from {path.partition('?')[0]}")
        return json.loads(body)
    return await asyncio.wait_for(get(), timeout_s)


@dataclass
class NodeView:
    node_id: int
    role: str                       # "broker" or "controller"
    host: str
    port: int | None                # Kafka (or controller) port, if known
    metrics_port: int | None
    state: dict | None = None       # the last /state answered
    error: str | None = None        # why the last round got no /state
    since: int = 0                  # the last state-change seq seen
    process: str | None = None      # running / paused / dead (started by tidelog cluster)
    events: list = field(default_factory=list)


def _event_key(event: dict) -> str:
    """The same change seen by several brokers has the same key."""
    own = event["kind"] in ("broker_state", "truncation", "metadata_loaded")
    return json.dumps({k: v for k, v in event.items()
                       if k not in ("seq", "time_ms") and (own or k != "broker")}, sort_keys=True)


class HttpRefused(Exception):
    """A request the view refuses: ``status`` and the JSON ``error`` it answers."""

    def __init__(self, status: str, error: str, extra: str = ""):
        super().__init__(error)
        self.status, self.error, self.extra = status, error, extra


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


class UiServer:
    def __init__(self, bootstrap: list[tuple[str, int]], host: str = "127.0.0.1", port: int = 0,
                 metrics_port_offset: int = 100, metrics_ports: dict[int, int] | None = None,
                 cluster_dir: str | None = None, interval_s: float = 1.0, security=None,
                 drills: bool = False, state_token: str | None = None):
        self.bootstrap = bootstrap
        self.security = security                   # --command-config: TLS/SASL to find the brokers
        self.host = host
        self.port = port
        self.drills = drills and cluster_dir is not None
        self.state_token = state_token             # sent to the brokers' /state as a bearer token
        # The view re-serves what the brokers guard with a token: then it needs its own.
        self.view_needs_token = state_token is not None
        self.token = secrets.token_urlsafe(32) if self.drills or self.view_needs_token else None
        self.allowed_hosts: set[str] = set()
        self.metrics_port_offset = metrics_port_offset
        self.metrics_ports = dict(metrics_ports or {})
        self.cluster_dir = cluster_dir
        self.interval_s = max(1.0, interval_s)      # at most one round a second
        self.nodes: dict[int, NodeView] = {}
        self.timeline: deque[dict] = deque(maxlen=TIMELINE_EVENTS)
        self._timeline_index: dict[str, dict] = {}
        self.state: dict = {"nodes": [], "partitions": [], "controller_id": None}
        self.rounds = 0
        self.errors: list[str] = []                 # discovery problems, shown on the page
        self._clients: set[asyncio.Queue] = set()
        self._server: asyncio.base_events.Server | None = None
        self._poller: asyncio.Task | None = None

    @property
    def url(self) -> str:
        """Where to open the view (with its token, if it has one: keep it private)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    # ---------------------------------------------------------------- life

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=HTTP_HEAD_MAX_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        self.allowed_hosts = self._allowed_hosts()
        self._poller = asyncio.create_task(self._poll_loop())

    def _allowed_hosts(self) -> set[str]:
        """The ``Host`` values the view answers: its bound address and the loopback
        names (a wildcard bind: this machine's names too), each with the port."""
        bound = self.host.lower()
        names = set(_LOOPBACK_NAMES)
        if bound in _WILDCARDS:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        else:
            names.add(f"[{bound}]" if ":" in bound else bound)
        hosts = {f"{name}:{self.port}" for name in names if name}
        if self.port == 80:
            hosts |= {name for name in names if name}
        return hosts

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for queue in list(self._clients):
            queue.put_nowait(None)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # ----------------------------------------------------------- discovery

    def _metrics_port(self, node_id: int, port: int | None) -> int | None:
        if node_id in self.metrics_ports:
            return self.metrics_ports[node_id]
        return None if port is None else port + self.metrics_port_offset

    def _learn(self, node_id: int, role: str, host: str, port: int | None, metrics_port: int | None) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            self.nodes[node_id] = NodeView(node_id, role, host, port, metrics_port)
        else:
            node.host, node.port, node.metrics_port = host, port or node.port, metrics_port or node.metrics_port

    def _discover_from_layout(self) -> None:
        from tidelog.cluster import ClusterError, ProcessCluster
        try:
            layout = ProcessCluster.load(self.cluster_dir).layout
        except (ClusterError, OSError, ValueError) as e:
            self.errors = [f"cannot read the cluster at {self.cluster_dir}: {e}"]
            return
        for n in layout.nodes:
            self._learn(n.node_id, n.role, layout.host, n.port, n.metrics_port)
            self.nodes[n.node_id].process = n.process_state()

    async def _discover(self) -> None:
        from tidelog.core.errors import KafkaError
        from tidelog.protocol.api_keys import ApiKey
        from tidelog.protocol.client import KafkaConnection
        addresses = list(self.bootstrap) + [(n.host, n.port) for n in self.nodes.values()
                                            if n.role == "broker" and n.port]
        errors = []
        for host, port in dict.fromkeys(addresses):
            try:
                connection = await KafkaConnection.connect(host, port, "tidelog-ui", 2, security=self.security)
            except (OSError, asyncio.TimeoutError, KafkaError) as e:
                errors.append(f"{host}:{port}: {type(e).__name__}: {e}")
                continue
            try:
                metadata = await connection.request(ApiKey.METADATA, {"topics": [],
                                                                      "allow_auto_topic_creation": False},
                                                     timeout_s=3)
            except (OSError, asyncio.TimeoutError, ConnectionError) as e:
                errors.append(f"{host}:{port}: {type(e).__name__}: {e}")
                continue
            finally:
                connection.close()
            for b in metadata.brokers:
                node_id = int(b.node_id)
                self._learn(node_id, "broker", b.host, int(b.port), self._metrics_port(node_id, int(b.port)))
            await self._discover_controllers(host, port)
            self.errors = []
            return
        self.errors = errors or ["no bootstrap server"]

    async def _discover_controllers(self, host: str, port: int) -> None:
        """The controllers, which Metadata never names: DescribeQuorum v2 (KIP-853) answers
        the voters' endpoints through any broker. A broker that cannot say leaves the view
        with the brokers only."""
        from tidelog.core.errors import KafkaError
        from tidelog.metadata.log import METADATA_TOPIC
        from tidelog.protocol.api_keys import ApiKey
        from tidelog.protocol.client import KafkaConnection
        try:
            connection = await KafkaConnection.connect(host, port, "tidelog-ui", 2, security=self.security)
        except (OSError, asyncio.TimeoutError, KafkaError):
            return
        try:
            answer = await connection.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, timeout_s=3)
        except (OSError, asyncio.TimeoutError, ConnectionError, KafkaError):
            return
        finally:
            connection.close()
        for node in getattr(answer, "nodes", None) or ():
            node_id = int(node.node_id)
            if node.listeners and (node_id not in self.nodes or self.nodes[node_id].role == "controller"):
                endpoint = node.listeners[0]
                self._learn(node_id, "controller", endpoint.host, int(endpoint.port),
                            self._metrics_port(node_id, int(endpoint.port)))

    def _discover_from_states(self) -> None:
        """Registrations in any /state name brokers Metadata leaves out (the fenced)."""
        for node in list(self.nodes.values()):
            for b in (node.state or {}).get("brokers", ()):
                if b["id"] not in self.nodes and b["endpoints"]:
                    e = b["endpoints"][0]
                    self._learn(b["id"], "broker", e["host"], e["port"], self._metrics_port(b["id"], e["port"]))

    # --------------------------------------------------------------- rounds

    async def _poll_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception:
                logger.exception("poll round failed")
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    async def poll_once(self) -> None:
        if self.cluster_dir is not None:
            self._discover_from_layout()
        elif self.rounds % REDISCOVER_ROUNDS == 0 or not self.nodes:
            await self._discover()
        self.rounds += 1
        nodes = [n for n in self.nodes.values() if n.metrics_port is not None]
        await asyncio.gather(*(self._poll_node(n) for n in nodes))
        if self.cluster_dir is None:
            self._discover_from_states()
        new_events = []
        arrived = sorted((e for n in nodes for e in n.events), key=lambda e: (e["time_ms"], e["broker"], e["seq"]))
        for node in nodes:
            node.events = []
        for event in arrived:
            key = _event_key(event)
            seen = self._timeline_index.get(key)
            if seen is not None:
                if event["broker"] not in seen["seen_by"]:
                    seen["seen_by"].append(event["broker"])
                continue
            if len(self.timeline) == self.timeline.maxlen:
                self._timeline_index.pop(self.timeline[0]["key"], None)
            entry = {**event, "seen_by": [event["broker"]], "key": key}
            self.timeline.append(entry)
            self._timeline_index[key] = entry
            new_events.append(entry)
        state = self._merge()
        if state != self.state:
            self.state = state
            self._broadcast("state", state)
        if new_events:
            self._broadcast("changes", {"events": [self._public(e) for e in new_events]})

    async def _poll_node(self, node: NodeView) -> None:
        try:
            state, changes = await asyncio.gather(
                http_get_json(node.host, node.metrics_port, "/state", token=self.state_token),
                http_get_json(node.host, node.metrics_port, f"/state-changes?since={node.since}",
                              token=self.state_token)
                if node.role == "broker" else asyncio.sleep(0, {"events": [], "last_seq": 0}))
        except (OSError, asyncio.TimeoutError, ConnectionError, ValueError) as e:
            node.state, node.error = None, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            return
        node.state, node.error = state, None
        if changes["last_seq"] < node.since:        # a new log (its file was removed): start over
            node.since = 0
        node.events = changes["events"]
        if node.events:
            node.since = node.events[-1]["seq"]

    def _merge(self) -> dict:
        controller_id = None
        views = {}                 # broker id → (metadata offset, its registration) from the newest image
        partitions: dict[tuple[str, int], dict] = {}
        for node in self.nodes.values():
            state = node.state
            if state is None:
                continue
            # A controller's own view wins; a broker of a dynamic quorum knows the
            # controllers only by bootstrap address (a negative id) until one redirects it.
            said = state.get("controller_id")
            if isinstance(said, int) and said >= 0 and (controller_id is None
                                                        or "controller" in state.get("roles", ())):
                controller_id = said
            for b in state.get("brokers", ()):
                if b["id"] not in views or views[b["id"]][0] < state["metadata_offset"]:
                    views[b["id"]] = (state["metadata_offset"], b)
            for p in state.get("partitions", ()):
                key = (p["topic"], p["partition"])
                merged = partitions.setdefault(key, {"topic": p["topic"], "partition": p["partition"],
                                                     "partition_epoch": -1, "replica_offsets": {}})
                if p.get("partition_epoch", -1) > merged["partition_epoch"]:
                    merged.update({k: p[k] for k in ("leader", "leader_epoch", "partition_epoch", "isr", "replicas")
                                   if k in p})
                merged["replica_offsets"][str(node.node_id)] = {
                    k: p.get(k) for k in ("role", "log_start_offset", "high_watermark", "last_stable_offset",
                                          "log_end_offset")}
        nodes = []
        for node in sorted(self.nodes.values(), key=lambda n: (n.role != "broker", n.node_id)):
            state = node.state or {}
            registration = views.get(node.node_id, (None, None))[1]
            nodes.append({
                "id": node.node_id, "role": node.role, "host": node.host, "port": node.port,
                "metrics_port": node.metrics_port, "reachable": node.state is not None, "error": node.error,
                "process": node.process, "state": state.get("state"),
                "broker_epoch": registration["broker_epoch"] if registration else (
                    state.get("broker_epoch") if node.role == "broker" else None),
                "registered": registration is not None,
                "fenced": registration["fenced"] if registration else state.get("fenced"),
                "in_controlled_shutdown": registration["in_controlled_shutdown"] if registration else None,
                "is_controller": node.node_id == controller_id,
            })
        return {"controller_id": controller_id, "nodes": nodes, "errors": list(self.errors),
                # Processes are known only of a cluster started by `tidelog cluster` (its cluster.json).
                "processes_known": self.cluster_dir is not None,
                "partitions": [partitions[k] for k in sorted(partitions)]}

    @staticmethod
    def _public(entry: dict) -> dict:
        return {k: v for k, v in entry.items() if k != "key"}

    def snapshot(self) -> dict:
        return {**self.state, "time_ms": int(time.time() * 1000), "drills": self.drills,
                "interval_s": self.interval_s, "events": [self._public(e) for e in self.timeline]}

    def _broadcast(self, kind: str, data: dict) -> None:
        message = f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
        for queue in self._clients:
            if queue.qsize() >= MAX_QUEUED:      # a stream that does not read: close it
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)
            else:
                queue.put_nowait(message)

    # ----------------------------------------------------------------- HTTP

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method = path = "?"
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HTTP_READ_TIMEOUT_S)
            except asyncio.LimitOverrunError:
                return await self._reply(writer, "431 Request Header Fields Too Large", "text/plain",
                                         b"request head too large\n")
            except (asyncio.IncompleteReadError, asyncio.TimeoutError):
                return
            lines = head.decode("latin-1").split("\r\n")
            words = lines[0].split()
            if len(words) != 3 or not words[2].startswith("HTTP/"):
                return await self._reply(writer, "400 Bad Request", "text/plain", b"bad request\n")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                name = name.strip().lower()
                if not sep:
                    continue
                if name in headers and name in ("host", "origin", "authorization", TOKEN_HEADER):
                    return await self._reply(writer, "400 Bad Request", "text/plain", b"repeated header\n")
                headers[name] = value.strip()
            method, (path, _, query) = words[0], words[1].partition("?")
            try:
                return await self._route(writer, method, path, dict(parse_qsl(query)), headers)
            except HttpRefused as refused:
                peer = writer.get_extra_info("peername")
                logger.warning("refused %s %s from %s: %s", method, path[:200], peer[0] if peer else "?", refused.error)
                return await self._reply(writer, refused.status, "application/json",
                                         json.dumps({"error": refused.error}).encode(), refused.extra)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _route(self, writer, method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> None:
        host = headers.get("host", "").lower()
        if host not in self.allowed_hosts:
            raise HttpRefused("403 Forbidden", f"Host {host[:100]!r} is not this view's address")
        if path == "/api/drill":
            if method != "POST":
                return await self._reply(writer, "405 Method Not Allowed", "text/plain", b"POST only\n",
                                         "Allow: POST\r\n")
            self._check_drill(host, headers)
            status, body = await self._drill(query)
            return await self._reply(writer, status, "application/json", json.dumps(body).encode())
        if path not in _STATIC and path not in ("/events", "/api/snapshot"):
            return await self._reply(writer, "404 Not Found", "text/plain", b"not found\n")
        if method != "GET":
            return await self._reply(writer, "405 Method Not Allowed", "text/plain", b"GET only\n",
                                     "Allow: GET\r\n")
        if path not in ("/app.js", "/style.css"):
            self._check_view(query, headers)
        if path == "/events":
            return await self._stream(writer)
        if path == "/api/snapshot":
            return await self._reply(writer, "200 OK", "application/json", json.dumps(self.snapshot()).encode())
        name, content_type = _STATIC[path]
        body = resources.files("tidelog.ui").joinpath("static", name).read_bytes()
        return await self._reply(writer, "200 OK", content_type, body)

    def _check_view(self, query: dict[str, str], headers: dict[str, str]) -> None:
        """The page, /events and /api/snapshot: the token, when the view needs one."""
        if not self.view_needs_token:
            return
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        given = headers.get(TOKEN_HEADER) or (bearer.strip() if scheme.lower() == "bearer" else None) \
            or query.get("token")
        if not _same(given, self.token):
            raise HttpRefused("401 Unauthorized", "this view needs its token (open the URL tidelog ui printed)"
                              if given is None else "wrong token", 'WWW-Authenticate: Bearer realm="tidelog ui"\r\n')

    def _check_drill(self, host: str, headers: dict[str, str]) -> None:
        """A fault drill: drills on, this view's token in X-Tidelog-Token, Origin this view's."""
        if not self.drills:
            raise HttpRefused("403 Forbidden", "fault drills are off (start tidelog ui with --cluster-dir and "
                                               "--drills, or tidelog cluster up with --ui-drills)")
        given = headers.get(TOKEN_HEADER)
        if not _same(given, self.token):
            raise HttpRefused("403 Forbidden", "no X-Tidelog-Token header" if given is None else "wrong token")
        origin = headers.get("origin")
        if origin is None or origin.lower() != f"http://{host}":
            raise HttpRefused("403 Forbidden", "no Origin header" if origin is None else
                              f"Origin {origin[:100]!r} is not this view's")

    @staticmethod
    async def _reply(writer, status: str, content_type: str, body: bytes, extra: str = "") -> None:
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                     f"{_SECURITY_HEADERS}{extra}Connection: close\r\n\r\n".encode("latin-1") + body)
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        """One browser's server-sent events: a snapshot, then what changes."""
        if len(self._clients) >= MAX_STREAMS:
            return await self._reply(writer, "503 Service Unavailable", "text/plain", b"too many streams\n",
                                     "Retry-After: 5\r\n")
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{_SECURITY_HEADERS}"
                     "Connection: close\r\n\r\nretry: 2000\n\n".encode("latin-1"))
        queue: asyncio.Queue = asyncio.Queue()
        queue.put_nowait(f"event: snapshot\ndata: {json.dumps(self.snapshot(), separators=(',', ':'))}\n\n"
                         .encode())
        self._clients.add(queue)
        try:
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    message = b": keepalive\n\n"
                if message is None:
                    return
                writer.write(message)
                await writer.drain()
        finally:
            self._clients.discard(queue)

    async def _drill(self, query: dict[str, str]) -> tuple[str, dict]:
        """Run a drill the request checks let through (``_check_drill``)."""
        action, node = query.get("action"), query.get("node", "")
        if action not in DRILLS or not node.isdigit():
            return "400 Bad Request", {"error": f"action must be one of {', '.join(DRILLS)}, node an id"}
        from tidelog.cluster import ClusterError, ProcessCluster

        def run() -> None:
            cluster = ProcessCluster.load(self.cluster_dir)
            getattr(cluster, action)(int(node))
        try:
            await asyncio.to_thread(run)
        except ClusterError as e:
            return "409 Conflict", {"error": str(e)}
        logger.info("fault drill: %s node %s", action, node)
        return "200 OK", {"done": f"{action} {node}"}


async def serve(server: UiServer, ready=None) -> None:
    await server.start()
    print(f"tidelog ui ready: {server.url}", flush=True)
    if server.drills:
        logger.info("fault drills on: POST /api/drill needs this run's token (X-Tidelog-Token) and this view's Origin")
    if ready is not None:
        ready()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def ui_state_file(cluster_dir: str) -> str:
    return os.path.join(cluster_dir, "ui.json")
