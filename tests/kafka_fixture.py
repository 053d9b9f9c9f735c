"""The real Apache Kafka (KRaft), run beside tidelog as a test and benchmark fixture.

``KafkaCluster`` starts Apache Kafka's own broker and controller from the jars that
``interop/kafka-server/pom.xml`` pins (resolved into the local Maven cache by ``make
java-interop``), on free loopback ports with its data in a temporary directory, the way
an operator does it: ``kafka-storage format`` (``kafka.tools.StorageTool``) with a random
cluster id for every node, then ``kafka-server-start`` (``kafka.Kafka``). It returns once
every broker answers ApiVersions and Metadata lists all of them (a Kafka broker opens its
client listener only after the controller unfenced it)::

    with KafkaCluster() as kafka:                        # one node, broker and controller
        ... kafka.bootstrap ...
    with KafkaCluster(brokers=3, controllers=3) as kafka:  # 3 brokers + a 3-voter quorum
        ...

Start time. Most of a Kafka start is the JVM loading and compiling its classes, so the
``test`` profile runs the JIT's first tier only (``-XX:TieredStopAtLevel=1``), the serial
collector and a 512 MiB heap, and every JVM maps a class-data-sharing archive of the
classes a start loads (``interop/kafka-server/target/kafka-server.jsa``; written by the
first start that finds none, when that node stops, and rebuilt when the class path
changes). The ``bench`` profile uses what ``kafka-server-start.sh`` does instead: a
1 GiB heap, G1 and the full JIT.

For pytest, ``kafka_node`` (tests/conftest.py) is one single-node Kafka per test process
(under pytest-xdist, per worker that runs a module using it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "interop" / "kafka-server"
POM = MODULE / "pom.xml"
CLASSPATH_FILE = MODULE / "target" / "classpath.txt"
CDS_ARCHIVE = MODULE / "target" / "kafka-server.jsa"
HOST = "127.0.0.1"

# What kafka-server-start.sh gives a broker (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS).
BENCH_JVM = ["-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent"]
# A quick start for tests: small heap, serial GC, C1 only.
TEST_JVM = ["-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
COMMON_JVM = ["-Djava.awt.headless=true", "-Xlog:cds=off", "-Xlog:class+path=off"]

_BUILD_LOCKS: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def build_lock(module: Path):
    """One build or resolve of ``module`` (Maven, go build, npm ci) at a time, across the
    threads of this process and across processes (pytest-xdist workers): the thread lock,
    then an exclusive ``flock`` on a file named after the module in the temp directory."""
    digest = hashlib.sha1(str(Path(module).resolve()).encode()).hexdigest()[:12]
    thread_lock = _BUILD_LOCKS.setdefault(digest, threading.Lock())
    with thread_lock, open(Path(tempfile.gettempdir()) / f"tidelog-build-{digest}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class KafkaStartError(RuntimeError):
    pass


def missing_tools() -> str | None:
    """Why real Kafka cannot run here, or None."""
    absent = [name for name in ("java", "mvn") if shutil.which(name) is None]
    return f"{' and '.join(absent)} not installed (real Kafka needs a JDK 17+ and Maven)" if absent else None


def ensure_resolved() -> float:
    """Resolve the server jars and write their class path (``mvn -o`` first, online only
    when the local Maven cache lacks something), unless done since the pom last changed.
    Returns the seconds it took (0 when there was nothing to do)."""
    with build_lock(MODULE):
        if CLASSPATH_FILE.exists() and CLASSPATH_FILE.stat().st_mtime >= POM.stat().st_mtime:
            return 0.0
        started = time.monotonic()
        goals = ["-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}"]
        offline = subprocess.run(["mvn", "-o", *goals], cwd=MODULE, capture_output=True, text=True)
        if offline.returncode != 0:
            online = subprocess.run(["mvn", *goals], cwd=MODULE, capture_output=True, text=True)
            if online.returncode != 0:
                raise KafkaStartError("resolving interop/kafka-server failed:\n" + online.stdout[-4000:]
                                      + online.stderr[-4000:])
        CLASSPATH_FILE.touch()
        return time.monotonic() - started


def classpath() -> str:
    ensure_resolved()
    return CLASSPATH_FILE.read_text().strip()


def kafka_version() -> str:
    """The pinned Kafka release (the kafka_2.13 jar on the class path)."""
    for jar in classpath().split(os.pathsep):
        name = os.path.basename(jar)
        if name.startswith("kafka_2.13-") and name.endswith(".jar"):
            return name[len("kafka_2.13-"):-len(".jar")]
    return "unknown"


def random_cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, URL-safe base64, never
    starting with "-" (tidelog's own rule, as Kafka's; one id in 64 did, and
    ``kafka-storage format --cluster-id -x…`` failed: "expected one argument")."""
    from tidelog.server.storage_format import new_cluster_id
    return new_cluster_id()


# Ports for servers that must be named before they start (Kafka's listeners, a quorum's
# voters). Alone, the kernel picks one (bind to port 0); under pytest-xdist each worker
# (PYTEST_XDIST_WORKER=gwN) takes them in turn from a block of its own, below the kernel's
# ephemeral range (32768 and up), so that neither another worker nor an outgoing
# connection can take a port between the probe and the server's bind.
PORT_BLOCK_BASE = 20_000
PORT_BLOCK_SIZE = 1_000
PORT_BLOCKS = 12                         # gw0..gw11; more workers fall back to the kernel
_port_lock = threading.Lock()
_port_next: list[int] = []


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    block = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else -1
    if not 0 <= block < PORT_BLOCKS:
        with socket.socket() as s:
            s.bind((HOST, 0))
            return s.getsockname()[1]
    low = PORT_BLOCK_BASE + block * PORT_BLOCK_SIZE
    with _port_lock:
        if not _port_next:               # start anywhere in the block: runs before ours may linger
            _port_next.append(low + int.from_bytes(os.urandom(2), "big") % PORT_BLOCK_SIZE)
        for _ in range(PORT_BLOCK_SIZE):
            port = low + (_port_next[0] - low) % PORT_BLOCK_SIZE
            _port_next[0] = port + 1
            with socket.socket() as s:
                try:
                    s.bind((HOST, port))
                except OSError:
                    continue             # in use (or lingering): the next one
                return port
    raise RuntimeError(f"no free port in {low}..{low + PORT_BLOCK_SIZE - 1} (xdist worker {worker})")


def _blocking_request(port: int, api_key: int, version: int, body: dict, timeout_s: float = 2.0):
    """One request on a fresh connection, decoded with tidelog's codec (None on any failure)."""
    from tidelog.protocol.codec import decode_response, encode_request
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as s:
            s.sendall(encode_request(api_key, version, 1, "kafka-fixture", body))
            (size,) = struct.unpack(">i", _recv_exactly(s, 4))
            return decode_response(api_key, version, _recv_exactly(s, size))[1]
    except Exception:
        return None


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = s.recv(n - got)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


@dataclass
class KafkaNode:
    node_id: int
    roles: tuple[str, ...]               # ("broker",), ("controller",) or both
    port: int | None                     # the client (PLAINTEXT) listener of a broker
    controller_port: int | None          # the CONTROLLER listener of a controller
    directory: Path
    sasl_port: int | None = None         # a broker's SASL_PLAINTEXT listener (with sasl_users)
    process: subprocess.Popen | None = field(default=None, repr=False)
    writes_archive: Path | None = None   # this node's JVM writes the CDS archive at exit

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_file, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def cpu_seconds(self) -> float:
        """User + system CPU time of this node's JVM so far (Linux /proc)."""
        if self.process is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class KafkaCluster:
    """Apache Kafka in KRaft mode: ``controllers=0`` is one combined node (broker and
    controller in one JVM, as in Kafka's quickstart) and requires ``brokers=1``; otherwise
    ``brokers`` broker-only nodes (ids 1..) and ``controllers`` controller-only nodes (ids
    1000..) forming the Raft quorum. ``overrides`` go into every broker's server.properties.

    ``sasl_users`` (name -> password) gives every broker a second client listener,
    SASL_PLAINTEXT with the PLAIN mechanism and those users (``sasl_port``; the
    PLAINTEXT one stays, for the brokers and controllers themselves, whose principal
    there is User:ANONYMOUS). With Kafka's authorizer, e.g.::

        KafkaCluster(sasl_users={"admin": "a", "alice": "b"}, overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS"})
    """

    def __init__(self, brokers: int = 1, controllers: int = 0, overrides: dict[str, str] | None = None,
                 profile: str = "test", directory: str | None = None, start_timeout_s: float = 90.0,
                 log_level: str = "info", sasl_users: dict[str, str] | None = None):
        if controllers == 0 and brokers != 1:
            raise ValueError("a combined node is one broker; give controllers for more brokers")
        self.brokers_count = brokers
        self.controllers_count = controllers
        self.overrides = dict(overrides or {})
        self.jvm = (BENCH_JVM if profile == "bench" else TEST_JVM) + COMMON_JVM
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="kafka-fixture-"))
        self.start_timeout_s = start_timeout_s
        self.log_level = log_level
        self.sasl_users = dict(sasl_users or {})
        self.cluster_id = random_cluster_id()
        self.nodes: list[KafkaNode] = []
        self.format_seconds = 0.0
        self.start_seconds = 0.0        # format + start until every broker serves

    # -- layout ---------------------------------------------------------------------------

    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.brokers)

    @property
    def port(self) -> int:
        return self.brokers[0].port

    @property
    def sasl_port(self) -> int | None:
        return self.brokers[0].sasl_port

    def _layout(self) -> None:
        self.nodes = []
        if self.controllers_count == 0:
            self.nodes.append(KafkaNode(1, ("broker", "controller"), free_port(), free_port(), self.directory / "node-1"))
        else:
            for i in range(self.controllers_count):
                self.nodes.append(KafkaNode(1000 + i, ("controller",), None, free_port(),
                                            self.directory / f"node-{1000 + i}"))
            for i in range(self.brokers_count):
                self.nodes.append(KafkaNode(1 + i, ("broker",), free_port(), None, self.directory / f"node-{1 + i}"))
        if self.sasl_users:
            for node in self.brokers:
                node.sasl_port = free_port()

    @property
    def broker_settings(self) -> dict[str, str]:
        """The settings every broker gets that are not about its own id, roles, listeners
        or directories (what a tidelog beside it should get too)."""
        replication = str(min(self.brokers_count, 3))
        min_isr = str(min(self.brokers_count, 2))
        return {
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }

    def _properties(self, node: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes if n.controller_port)
        listeners = []
        if node.is_broker:
            listeners.append(f"PLAINTEXT://{HOST}:{node.port}")
            if node.sasl_port:
                listeners.append(f"SASL_PLAINTEXT://{HOST}:{node.sasl_port}")
        if node.controller_port:
            listeners.append(f"CONTROLLER://{HOST}:{node.controller_port}")
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" + (",SASL_PLAINTEXT:SASL_PLAINTEXT"
                                                                 if self.sasl_users else "")
        props = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": protocols,
            "log.dirs": str(node.directory / "data"),
        }
        if node.is_broker:
            if node.sasl_port:
                users = " ".join(f'user_{name}="{password}"' for name, password in self.sasl_users.items())
                props.update({
                    "sasl.enabled.mechanisms": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                        f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
                })
            props.update({
                "advertised.listeners": ",".join(
                    [f"PLAINTEXT://{HOST}:{node.port}"]
                    + ([f"SASL_PLAINTEXT://{HOST}:{node.sasl_port}"] if node.sasl_port else [])),
                "inter.broker.listener.name": "PLAINTEXT",
                **self.broker_settings,
            })
        return props

    # -- processes ------------------------------------------------------------------------

    def _java(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        archive = []
        if CDS_ARCHIVE.exists() and CDS_ARCHIVE.stat().st_mtime >= CLASSPATH_FILE.stat().st_mtime:
            archive = [f"-XX:SharedArchiveFile={CDS_ARCHIVE}"]
        elif node.writes_archive is not None and main == "kafka.Kafka":
            archive = [f"-XX:ArchiveClassesAtExit={node.writes_archive}"]
        logging = [f"-Dorg.slf4j.simpleLogger.logFile={node.log_file}",
                   f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self.log_level}",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"]
        return ["java", *self.jvm, *archive, *logging, "-cp", classpath(), main, *args]

    def _format(self, node: KafkaNode) -> subprocess.Popen:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.properties_file.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()))
        command = self._java(node, "kafka.tools.StorageTool", "format", "--cluster-id", self.cluster_id,
                             "--config", str(node.properties_file), "--ignore-formatted")
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def start(self) -> "KafkaCluster":
        started = time.monotonic()
        self._layout()
        if not (CDS_ARCHIVE.exists() and CDS_ARCHIVE.stat().st_mtime >= CLASSPATH_FILE.stat().st_mtime):
            self.nodes[0].writes_archive = CDS_ARCHIVE.with_name(f"{CDS_ARCHIVE.name}.{os.getpid()}.tmp")
        formats = [(node, self._format(node)) for node in self.nodes]
        for node, process in formats:
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise KafkaStartError(f"kafka-storage format of node {node.node_id} failed:\n{output[-3000:]}")
        self.format_seconds = time.monotonic() - started
        for node in self.nodes:
            out = open(node.directory / "stdout.log", "wb")
            node.process = subprocess.Popen(self._java(node, "kafka.Kafka", str(node.properties_file)),
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
            out.close()
        try:
            self._wait_ready(started + self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, deadline: float) -> None:
        from tidelog.protocol.api_keys import ApiKey
        waiting = list(self.brokers)
        while True:
            for node in self.nodes:
                if node.process.poll() is not None:
                    raise KafkaStartError(f"Kafka node {node.node_id} exited with {node.process.returncode}:\n"
                                          f"{node.log_tail()}")
            waiting = [n for n in waiting
                       if _blocking_request(n.port, ApiKey.API_VERSIONS, 0, {}, timeout_s=1) is None]
            if not waiting:
                metadata = _blocking_request(self.port, ApiKey.METADATA, 12,
                                             {"topics": [], "allow_auto_topic_creation": False})
                if metadata is not None and len(metadata.brokers) == self.brokers_count:
                    return
            if time.monotonic() > deadline:
                raise KafkaStartError("Kafka did not become ready in time; last log lines:\n"
                                      + "\n".join(f"--- node {n.node_id}\n{n.log_tail()}" for n in self.nodes))
            time.sleep(0.05)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM one node (a broker's controlled shutdown moves its leaderships first)."""
        process = self.node(node_id).process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node."""
        process = self.node(node_id).process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def start_node(self, node_id: int) -> None:
        """Start a stopped node again on its directory (returns once it is launched)."""
        node = self.node(node_id)
        out = open(node.directory / "stdout.log", "ab")
        node.process = subprocess.Popen(self._java(node, "kafka.Kafka", str(node.properties_file)),
                                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        out.close()

    def cpu_seconds(self, brokers_only: bool = False) -> float:
        return sum(n.cpu_seconds() for n in (self.brokers if brokers_only else self.nodes))

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (a controlled shutdown): brokers first, then the controllers; SIGKILL
        whatever has not exited after ``timeout_s``."""
        for group in (self.brokers, [n for n in self.nodes if not n.is_broker]):
            running = [n for n in group if n.process is not None and n.process.poll() is None]
            for node in running:
                node.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for node in running:
                try:
                    node.process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
        for node in self.nodes:
            if node.writes_archive is not None and node.writes_archive.exists():
                os.replace(node.writes_archive, CDS_ARCHIVE)
                node.writes_archive = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":   # python -m tests.kafka_fixture [brokers controllers]: time a start and a stop
    import sys
    b, c = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (1, 0)
    resolve = ensure_resolved()
    cluster = KafkaCluster(brokers=b, controllers=c)
    cluster.start()
    stop_started = time.monotonic()
    cluster.close()
    print(f"Kafka {kafka_version()}: {b} broker(s), {c or 'combined'} controller(s); resolve {resolve:.1f} s, "
          f"format {cluster.format_seconds:.1f} s, ready after {cluster.start_seconds:.1f} s, "
          f"stop {time.monotonic() - stop_started:.1f} s")
