"""A small blocking Kafka client for Spark's Python workers.

Theory of operation. Spark runs a data source's code in plain Python worker
processes (planner workers, the streaming source runner, executor tasks), one
call at a time, so a blocking socket is the simplest correct client there.

* ``Connection`` is one socket to one broker. It negotiates versions with
  ApiVersions (KIP-511) and then sends each request at the highest version both
  sides support, capped where tidelog's code reads topics by name
  (``NAME_VERSION_MAX``: Produce and Fetch address topics by id from v13). A
  request is ``send`` then ``receive``; a caller may send the next request
  before decoding the previous response (the executor's fetch loop does, so the
  broker reads the next chunk while this process decodes the last one).
* ``Cluster`` knows the brokers and partition leaders from Metadata and keeps
  one connection per broker. It does not retry by itself: ``retrying`` runs an
  operation until it succeeds, fails with a non-retriable error, or the API
  timeout passes, refreshing metadata and reconnecting between attempts. That is
  how callers follow leader changes (NOT_LEADER_OR_FOLLOWER, a dead connection).

Only the wire protocol is used, so this works against any Kafka broker.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from tidelog.core.errors import ErrorCode
from tidelog.protocol import sasl_client
from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.codec import (
    ProtocolError,
    decode_response,
    encode_request,
    kio_versions,
)

logger = logging.getLogger("tidelog.spark")

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1

# Highest versions at which these APIs still name topics (v13 switched to topic ids).
# Produce and Fetch name topics up to v12; AddPartitionsToTxn v4+ is for brokers (KIP-890).
NAME_VERSION_MAX = {ApiKey.PRODUCE: 12, ApiKey.FETCH: 12, ApiKey.ADD_PARTITIONS_TO_TXN: 3}
RESPONSE_SIZE_MAX_BYTES = 256 * 1024 * 1024
# A connection's receive buffer (``Connection._read_frame``): grown to the largest response
# up to 16 MiB (a Fetch of the source's default 8 MiB fits) and kept; larger ones get their own.
RECEIVE_BUFFER_MIN_BYTES, RECEIVE_BUFFER_KEPT_MAX_BYTES = 64 * 1024, 16 * 1024 * 1024

# Errors after which the same request may succeed once metadata is refreshed or
# the broker has recovered (Kafka's RetriableException subclasses we can meet).
RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
})
_SIZE = struct.Struct(">i")
T = TypeVar("T")


def error_of(code) -> ErrorCode:
    """A kio error code field (or int) as tidelog's ``ErrorCode``."""
    value = int(getattr(code, "value", code))
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class BrokerError(Exception):
    """A Kafka error code from a broker, with what was being done."""

    def __init__(self, message: str, error_code: ErrorCode):
        super().__init__(f"{message}: {error_code.name}")
        self.error_code = error_code

    @property
    def retriable(self) -> bool:
        return self.error_code in RETRIABLE


class BrokerUnreachable(ConnectionError):
    """The connection failed or broke; the request's outcome is unknown."""


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("kafka.bootstrap.servers is empty")
    return out


class Connection:
    """One blocking socket to one broker; responses come back in request order."""

    def __init__(self, host: str, port: int, client_id: str = "tidelog-spark", timeout_s: float = 30.0,
                 security=None):
        self.host, self.port, self.client_id = host, port, client_id
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
            if security is not None and security.ssl_context is not None:
                self._sock = security.ssl_context.wrap_socket(self._sock, server_hostname=host)
        except OSError as e:
            raise BrokerUnreachable(f"cannot connect to {host}:{port}: {e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout_s)
        self._correlation = 0
        self._buffer = bytearray(RECEIVE_BUFFER_MIN_BYTES)
        self._pending: dict[int, tuple[int, int]] = {}
        self.api_versions: dict[int, tuple[int, int]] = {}
        try:
            response = self.request(ApiKey.API_VERSIONS, {"client_software_name": "tidelog-spark",
                                                          "client_software_version": "0.1.0"}, version=3)
            if error_of(response.error_code) == ErrorCode.UNSUPPORTED_VERSION:
                response = self.request(ApiKey.API_VERSIONS, {}, version=0)
        except BaseException:
            self.close()
            raise
        for api in response.api_keys:
            self.api_versions[int(api.api_key)] = (int(api.min_version), int(api.max_version))
        if security is not None and security.sasl_mechanism:
            try:
                self._authenticate(security)
            except BaseException:
                self.close()
                raise

    def _authenticate(self, security) -> None:
        handshake = self.request(ApiKey.SASL_HANDSHAKE, {"mechanism": security.sasl_mechanism}, version=1)
        if error_of(handshake.error_code) != ErrorCode.NONE:
            raise BrokerError(f"{self.host}:{self.port} refused SASL mechanism {security.sasl_mechanism}",
                              error_of(handshake.error_code))
        exchange = sasl_client.tokens(security.sasl_mechanism, security.username, security.password)
        token = next(exchange)
        while True:
            answer = self.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, version=2)
            if error_of(answer.error_code) != ErrorCode.NONE:
                raise BrokerError(f"SASL authentication as {security.username} failed: {answer.error_message}",
                                  error_of(answer.error_code))
            try:
                token = exchange.send(bytes(answer.auth_bytes or b""))
            except StopIteration:
                return
            except sasl_client.SaslClientError as e:
                raise BrokerError(str(e), ErrorCode.SASL_AUTHENTICATION_FAILED) from None

    def version_for(self, api_key: int) -> int:
        ours, theirs = kio_versions(api_key), self.api_versions.get(api_key)
        if ours is None or theirs is None:
            raise BrokerError(f"{self.host}:{self.port} does not support API {api_key}",
                              ErrorCode.UNSUPPORTED_VERSION)
        version = min(ours[1], theirs[1], NAME_VERSION_MAX.get(api_key, 1 << 15))
        if version < max(ours[0], theirs[0]):
            raise BrokerError(f"no common version of API {api_key} with {self.host}:{self.port}",
                              ErrorCode.UNSUPPORTED_VERSION)
        return version

    def send(self, api_key: int, body: dict, version: int | None = None, expect_response: bool = True) -> int:
        """Send a request; returns the correlation id to ``receive`` it with.

        ``expect_response=False`` is for Produce with acks=0, which gets no answer.
        """
        version = self.version_for(api_key) if version is None else version
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        try:
            self._sock.sendall(frame)
        except OSError as e:
            self.close()
            raise BrokerUnreachable(f"send to {self.host}:{self.port} failed: {e}") from None
        if expect_response:
            self._pending[correlation_id] = (api_key, version)
        return correlation_id

    def receive(self, correlation_id: int) -> Any:
        """Read responses until the one for ``correlation_id``; return it decoded."""
        while True:
            frame = self._read_frame()
            (got,) = _SIZE.unpack_from(frame, 0)
            entry = self._pending.pop(got, None)
            if entry is None:
                self.close()
                raise BrokerUnreachable(f"{self.host}:{self.port} answered unknown correlation id {got}")
            if got == correlation_id:
                try:
                    return decode_response(entry[0], entry[1], frame)[1]
                except ProtocolError as e:
                    self.close()
                    raise BrokerUnreachable(f"bad response from {self.host}:{self.port}: {e}") from None

    def request(self, api_key: int, body: dict, version: int | None = None) -> Any:
        return self.receive(self.send(api_key, body, version))

    def _read_frame(self) -> memoryview:
        """The next response frame, without its size. It lies in this connection's
        receive buffer, valid until the next call: ``decode_response`` copies out what
        it keeps (kio returns bytes, never views), so one buffer serves every response
        up to ``RECEIVE_BUFFER_KEPT_MAX_BYTES`` without the kernel mapping fresh pages
        of a new one each time (a tenth of a Spark task's CPU at 8 MiB responses)."""
        (size,) = _SIZE.unpack(self._read_exactly(4))
        if not 4 <= size <= RESPONSE_SIZE_MAX_BYTES:
            self.close()
            raise BrokerUnreachable(f"{self.host}:{self.port} sent a response of {size} bytes")
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> memoryview:
        if size > len(self._buffer):
            buffer = bytearray(size)
            if size <= RECEIVE_BUFFER_KEPT_MAX_BYTES:
                self._buffer = buffer
        else:
            buffer = self._buffer
        view = memoryview(buffer)[:size]
        got = 0
        try:
            while got < size:
                n = self._sock.recv_into(view[got:], size - got)
                if n == 0:
                    raise OSError("connection closed by the broker")
                got += n
        except OSError as e:  # socket.timeout is an OSError
            self.close()
            raise BrokerUnreachable(f"receive from {self.host}:{self.port} failed: {e}") from None
        return view.toreadonly()

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._pending.clear()


@dataclass
class TopicInfo:
    name: str
    error: ErrorCode
    leaders: dict[int, int] = field(default_factory=dict)   # partition -> leader node id (-1: none)


@dataclass(frozen=True)
class ClientConfig:
    """Client settings, named after the Kafka client configs they mirror."""

    bootstrap_servers: str
    client_id: str = "tidelog-spark"
    request_timeout_ms: int = 30_000        # kafka.request.timeout.ms
    default_api_timeout_ms: int = 60_000    # kafka.default.api.timeout.ms: the retry budget
    retry_backoff_ms: int = 100             # kafka.retry.backoff.ms (doubles up to 1 s)
    # security.protocol, ssl.* and sasl.* (the kafka.* options without the prefix): plain
    # strings, so the config pickles to Spark's executors; each builds its TLS context there.
    security_settings: tuple[tuple[str, str], ...] = ()


class Cluster:
    """Brokers, leaders and one connection per broker, refreshed on demand."""

    def __init__(self, config: ClientConfig):
        self.config = config
        from tidelog.protocol.client_config import client_security
        self._security = client_security(dict(config.security_settings)) if config.security_settings else None
        self._bootstrap = parse_bootstrap(config.bootstrap_servers)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._connections: dict[int, Connection] = {}
        self._any: Connection | None = None

    # ------------------------------------------------------------ connections

    def _connect(self, host: str, port: int) -> Connection:
        return Connection(host, port, self.config.client_id, self.config.request_timeout_ms / 1000,
                          self._security)

    def any_connection(self) -> Connection:
        """A live connection to some broker (bootstrap servers first)."""
        if self._any is not None and not self._any.closed:
            return self._any
        errors = []
        for host, port in self._bootstrap + list(self.brokers.values()):
            try:
                self._any = self._connect(host, port)
                return self._any
            except BrokerUnreachable as e:
                errors.append(str(e))
        raise BrokerUnreachable("no broker is reachable: " + "; ".join(errors))

    def connection(self, node_id: int) -> Connection:
        existing = self._connections.get(node_id)
        if existing is not None and not existing.closed:
            return existing
        if node_id not in self.brokers:
            self.refresh_metadata()
        if node_id not in self.brokers:
            raise BrokerError(f"broker {node_id} is not in the cluster metadata", ErrorCode.BROKER_NOT_AVAILABLE)
        self._connections[node_id] = self._connect(*self.brokers[node_id])
        return self._connections[node_id]

    def close(self) -> None:
        for connection in list(self._connections.values()) + [self._any]:
            if connection is not None:
                connection.close()
        self._connections.clear()
        self._any = None

    # --------------------------------------------------------------- metadata

    def refresh_metadata(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> None:
        """Ask for the given topics (None: all) and update brokers and leaders."""
        connection = self.any_connection()
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_auto_create,
                "include_topic_authorized_operations": False}
        response = connection.request(ApiKey.METADATA, body)
        self.brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        if topics is None:
            self.topics = {}
        for topic in response.topics:
            if topic.name is None:
                continue
            info = TopicInfo(topic.name, error_of(topic.error_code))
            for p in topic.partitions:
                leader = int(p.leader_id)
                info.leaders[int(p.partition_index)] = leader if error_of(p.error_code) == ErrorCode.NONE else -1
            self.topics[topic.name] = info

    def topic_names(self) -> list[str]:
        self.refresh_metadata(None)
        return sorted(name for name, info in self.topics.items() if info.error == ErrorCode.NONE)

    def partitions_of(self, topics: list[str]) -> dict[str, list[int] | None]:
        """Partition ids of each topic, None for a topic that does not exist."""
        self.refresh_metadata(list(topics))
        out: dict[str, list[int] | None] = {}
        for name in topics:
            info = self.topics.get(name)
            out[name] = sorted(info.leaders) if info is not None and info.error == ErrorCode.NONE else None
        return out

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or partition not in info.leaders:
            self.refresh_metadata([topic])
            info = self.topics.get(topic)
        if info is None or info.error != ErrorCode.NONE:
            raise BrokerError(f"topic {topic}", info.error if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        leader = info.leaders.get(partition)
        if leader is None:
            raise BrokerError(f"partition {topic}-{partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if leader < 0:
            raise BrokerError(f"partition {topic}-{partition}", ErrorCode.LEADER_NOT_AVAILABLE)
        return leader

    def forget(self, node_id: int | None = None) -> None:
        """Drop what may be stale after an error: connections and leaders."""
        if node_id is not None and node_id in self._connections:
            self._connections.pop(node_id).close()
        self.topics.clear()

    # ------------------------------------------------------------------ retry

    def retrying(self, what: str, operation: Callable[[], T]) -> T:
        """Run ``operation`` until it succeeds or fails for good.

        Retriable broker errors and broken connections are retried with
        exponential backoff, forgetting cached leaders and connections first,
        until ``default_api_timeout_ms`` has passed.
        """
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        backoff_s = self.config.retry_backoff_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                return operation()
            except (BrokerUnreachable, BrokerError) as e:
                if isinstance(e, BrokerError) and not e.retriable:
                    raise
                if time.monotonic() + backoff_s > deadline:
                    raise BrokerError(f"{what}: gave up after {attempt} attempts; last error: {e}",
                                      getattr(e, "error_code", ErrorCode.NETWORK_EXCEPTION)) from e
                logger.info("%s: attempt %d failed (%s); retrying in %.0f ms", what, attempt, e, backoff_s * 1000)
                self.forget()
                if isinstance(e, BrokerUnreachable):
                    self.close()
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 1.0)

    # ---------------------------------------------------------- list offsets

    def list_offsets(self, specs: dict[tuple[str, int], int], isolation_level: int = READ_UNCOMMITTED
                     ) -> dict[tuple[str, int], int]:
        """Offsets for ``{(topic, partition): spec}``; spec is -2 (earliest), -1
        (latest: the high watermark, or the last stable offset when read
        committed) or a timestamp in ms (-1 in the result: no such record)."""
        if not specs:
            return {}
        return self.retrying("ListOffsets", lambda: self._list_offsets_once(specs, isolation_level))

    def _list_offsets_once(self, specs, isolation_level):
        by_leader: dict[int, dict[tuple[str, int], int]] = {}
        for tp, spec in specs.items():
            by_leader.setdefault(self.leader(*tp), {})[tp] = spec
        out: dict[tuple[str, int], int] = {}
        for leader, group in by_leader.items():
            topics: dict[str, list] = {}
            for (topic, partition), spec in group.items():
                topics.setdefault(topic, []).append(
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": spec,
                     "max_num_offsets": 1})
            try:
                response = self.connection(leader).request(ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": isolation_level, "timeout": self.config.request_timeout_ms,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            except BrokerUnreachable:
                self.forget(leader)
                raise
            for topic in response.topics:
                for p in topic.partitions:
                    error = error_of(p.error_code)
                    if error != ErrorCode.NONE:
                        raise BrokerError(f"ListOffsets {topic.name}-{p.partition_index}", error)
                    out[(topic.name, int(p.partition_index))] = int(p.offset)
        return out

    # ------------------------------------------------------------- create topic

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None) -> bool:
        """Create a topic; False if it already existed."""
        def once():
            response = self.any_connection().request(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                            "assignments": [], "configs": [{"name": k, "value": v}
                                                           for k, v in (configs or {}).items()]}],
                "timeout": self.config.request_timeout_ms, "validate_only": False})
            error = error_of(response.topics[0].error_code)
            if error == ErrorCode.TOPIC_ALREADY_EXISTS:
                return False
            if error != ErrorCode.NONE:
                raise BrokerError(f"CreateTopics {name} ({response.topics[0].error_message or ''})", error)
            return True
        return self.retrying(f"create topic {name}", once)

    def wait_for_leaders(self, topic: str) -> None:
        """Block until every partition of a new topic has a leader."""
        def once():
            self.refresh_metadata([topic])
            info = self.topics.get(topic)
            if info is None or info.error != ErrorCode.NONE or not info.leaders:
                raise BrokerError(f"topic {topic}", ErrorCode.LEADER_NOT_AVAILABLE)
            if any(leader < 0 for leader in info.leaders.values()):
                raise BrokerError(f"topic {topic}", ErrorCode.LEADER_NOT_AVAILABLE)
        self.retrying(f"wait for leaders of {topic}", once)
