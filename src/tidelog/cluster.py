"""A local multi-process tidelog cluster: a controller quorum and N brokers.

Theory of operation. Each node is a ``tidelog serve`` process with its own data
directory under the cluster directory and its own log file (``server.log``); the
layout and pids are kept in ``cluster.json`` so separate invocations of
``tidelog cluster …`` (and tests) can find, kill, pause, resume and restart
nodes. The controllers (node ids 1000, 1001, …, ``process.roles=controller``; one
by default, three for a quorum that survives a controller's death) start first;
brokers (ids 1..N, ``process.roles=broker``) find the active one through
``controller.quorum.voters``, which lists every controller — or, in a dynamic
quorum (KIP-853, ``dynamic_quorum``), ``controller.quorum.bootstrap.servers``: the
controllers are formatted with one ``--initial-controllers`` set up front, and
``add_controller`` / ``remove_controller`` change the voters (AddRaftVoter /
RemoveRaftVoter at the leader) while the cluster runs. The voters' ports are
needed before any starts (each voter must know the others, or format writes them):
with a base port of 0 free ports are picked for them up front. All nodes share one cluster id, fixed at ``up``.
A port of 0 lets a node pick a free port; its real port is read from the
node's ready line and recorded. With metrics (``metrics_base_port``), every node
also serves Prometheus ``/metrics`` on its ``metrics_port`` (``metrics.port``;
0 = a free port, read from the ready line the same way). ``start_ui`` runs
``tidelog ui`` for the cluster (tidelog/ui) as one more process, recorded in
``ui.json`` and stopped by ``down``; its fault drills only with ``drills=True``.
Its URL may carry the view's token, so ``ui.json`` and ``ui.log`` are private
(0600). A secure cluster's nodes need a token for ``/state`` and
``/state-changes`` (``metrics.state.token.file``): ``security/state.token``, made
once (0600) and read by the view.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from tidelog.protocol.api_keys import ApiKey
from tidelog.server.storage_format import new_cluster_id

CONTROLLER_ID = 1000
_READY = re.compile(r"tidelog ready: node (\d+) listening on \w+://([^:]+):(\d+)"
                    r"(?:, metrics on http://\S+:(\d+)/metrics)?")
LAYOUT_FILE = "cluster.json"
UI_FILE = "ui.json"
LINKS_FILE = "links.json"          # the link proxy's cut links (tidelog.chaos.proxyd writes it)
_UI_READY = re.compile(r"tidelog ui ready: (http://\S+)")
STATE_TOKEN_FILE = "state.token"      # under the secure cluster's security/ directory


class ClusterError(Exception):
    pass


@dataclass
class Node:
    node_id: int
    role: str            # "controller" or "broker"
    port: int
    pid: int | None = None
    # The process's start time (/proc/<pid>/stat field 22): a pid is only ever
    # signalled while it still names the process this cluster started.
    pid_start: int | None = None
    # Settings for this node only, after the cluster-wide ones (e.g. the
    # advertised.listeners of a broker behind a proxy, tidelog.chaos).
    overrides: dict[str, str] = field(default_factory=dict)
    # Where it serves Prometheus /metrics (metrics.port); None = metrics off.
    metrics_port: int | None = None
    # A dynamic quorum's controller: its log directory's directory id (Kafka's Uuid
    # text), written by ``format`` and named in AddRaftVoter / RemoveRaftVoter.
    directory_id: str | None = None

    @property
    def name(self) -> str:
        if self.role == "controller":
            return "controller" if self.node_id == CONTROLLER_ID else f"controller-{self.node_id}"
        return f"broker-{self.node_id}"

    def alive(self) -> bool:
        return _alive(self.pid, self.pid_start)

    def process_state(self) -> str:
        return _process_state(self.pid, self.pid_start)


@dataclass
class Layout:
    directory: str
    cluster_id: str
    host: str = "127.0.0.1"
    overrides: dict[str, str] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    secure: bool = False       # TLS + SASL on every listener (cluster_security.py)
    # KIP-853: the voter set lives in the metadata log (formatted --initial-controllers,
    # changed by add-controller / remove-controller); nodes find the controllers through
    # controller.quorum.bootstrap.servers. False: the static controller.quorum.voters
    # (a layout written before dynamic quorums, the link proxy, the tests' Cluster).
    dynamic_quorum: bool = False

    @property
    def controller(self) -> Node:
        """The first controller (the only one unless the cluster has a quorum)."""
        return next(n for n in self.nodes if n.role == "controller")

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "controller"]

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters``: every controller as id@host:port."""
        return ",".join(f"{n.node_id}@{self.host}:{n.port}" for n in self.controllers)

    @property
    def quorum_bootstrap_servers(self) -> str:
        """``controller.quorum.bootstrap.servers``: every controller as host:port."""
        return ",".join(f"{self.host}:{n.port}" for n in self.controllers)

    @property
    def quorum_setting(self) -> str:
        """How nodes find the controllers, as printed by ``up``."""
        if self.dynamic_quorum:
            return f"controller.quorum.bootstrap.servers={self.quorum_bootstrap_servers} (dynamic quorum)"
        return f"controller.quorum.voters={self.quorum_voters}"

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "broker"]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{n.port}" for n in self.brokers)

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise ClusterError(f"no node {node_id} in the cluster at {self.directory}")


def _start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None if it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int | None, start: int | None = None) -> bool:
    """``pid`` is a live process — and, when ``start`` is known, still the one that
    started then (not another program that reused the pid)."""
    if not pid:
        return False
    if start is not None and _start_time(pid) not in (start, None):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited child not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _process_state(pid: int | None, start: int | None = None) -> str:
    if not _alive(pid, start):
        return "dead"
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().split(") ", 1)[1][0]
        return "paused" if state == "T" else "running"
    except OSError:
        return "running"


def state_token_path(directory: str) -> str:
    """Where a secure cluster keeps the token of its nodes' /state (metrics.state.token.file)."""
    return os.path.join(os.path.abspath(directory), "security", STATE_TOKEN_FILE)


def ensure_state_token(directory: str) -> str:
    """``state_token_path``, made (0600, a ``secrets`` token) unless it exists; complete
    before it appears (linked into place), so a node starting alongside never reads half."""
    import secrets
    path = state_token_path(directory)
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        os.remove(temporary)
    return path


def _private(path: str, flags: int) -> int:
    """Open ``path`` readable by its owner only (an existing file is made so)."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def _free_port(host: str) -> int:
    """A port free now (a quorum's voters must know each other's ports before they start)."""
    import socket
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _uuid(kafka_text: str):
    import uuid
    from tidelog.server.storage_format import uuid_of_kafka_text
    return uuid.UUID(uuid_of_kafka_text(kafka_text))


def _voter_ids(quorum) -> set[int]:
    return {int(v.replica_id) for v in quorum.current_voters}


def _caught_up(quorum, node_id: int) -> bool:
    """``node_id`` fetches from the leader and its log reaches the high watermark."""
    return any(int(o.replica_id) == node_id and int(o.log_end_offset) >= int(quorum.high_watermark)
               for o in quorum.observers)


def _fetched_since(quorum, brokers: list[int], since_ms: int) -> bool:
    """Every broker in ``brokers`` fetched the metadata log from this leader at or after ``since_ms``."""
    fetched = {int(o.replica_id): o.last_fetch_timestamp for o in quorum.observers}
    millis = lambda t: int(t.timestamp() * 1000) if hasattr(t, "timestamp") else int(t)
    return all(b in fetched and millis(fetched[b]) >= since_ms for b in brokers)


def _describe(quorum) -> str:
    if quorum is None:
        return "no leader answered"
    return (f"leader {int(quorum.leader_id)}, voters {sorted(_voter_ids(quorum))}, observers "
            f"{[(int(o.replica_id), int(o.log_end_offset)) for o in quorum.observers]}, high watermark "
            f"{int(quorum.high_watermark)}")


class ProcessCluster:
    def __init__(self, layout: Layout):
        import threading
        self.layout = layout
        self._children: dict[int, subprocess.Popen] = {}
        self._save_lock = threading.Lock()

    # ------------------------------------------------------------ layout on disk

    @classmethod
    def load(cls, directory: str) -> "ProcessCluster":
        path = os.path.join(directory, LAYOUT_FILE)
        try:
            with open(path) as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise ClusterError(f"no cluster at {directory} (run `tidelog cluster up --dir {directory}`)") from None
        nodes = [Node(**n) for n in raw.pop("nodes")]
        return cls(Layout(nodes=nodes, **raw))

    def save(self) -> None:
        with self._save_lock:
            os.makedirs(self.layout.directory, mode=0o700, exist_ok=True)
            path = os.path.join(self.layout.directory, LAYOUT_FILE)
            with open(path + ".tmp", "w") as f:
                json.dump(asdict(self.layout), f, indent=2)
            os.replace(path + ".tmp", path)

    @classmethod
    def create(cls, directory: str, brokers: int | None = None, base_port: int = 9092, host: str = "127.0.0.1",
               overrides: dict[str, str] | None = None, metrics_base_port: int | None = None,
               controllers: int | None = None, secure: bool | None = None,
               dynamic_quorum: bool = False) -> "ProcessCluster":
        """A new cluster layout (or the stopped one at ``directory``). Brokers listen on
        ``base_port``, +1, …, the controllers after them. ``metrics_base_port`` turns on
        /metrics in the same order (0: free ports). ``brokers``, ``controllers`` and
        ``secure`` left None take the stopped cluster's shape (new: 3, 1, plaintext); a
        shape given that differs from the stopped cluster's is refused, naming the ways
        out (another ``--dir``, or ``down --purge``). ``dynamic_quorum`` (a new cluster
        only; a stopped one keeps its kind) formats the controllers as a KIP-853 quorum
        whose voters can be added and removed (``add_controller``/``remove_controller``)."""
        if brokers is not None and brokers < 1:
            raise ClusterError("a cluster needs at least one broker")
        if controllers is not None and controllers < 1:
            raise ClusterError("a cluster needs at least one controller")
        directory = os.path.abspath(directory)
        if os.path.exists(os.path.join(directory, LAYOUT_FILE)):
            existing = cls.load(directory)
            layout = existing.layout
            if any(n.alive() for n in layout.nodes):
                raise ClusterError(f"a cluster is already running at {directory} (`tidelog cluster down --dir "
                                   f"{directory}` first, or start another one with --dir DIR and other ports, "
                                   "--base-port)")
            count = lambda n, what: f"{n} {what}{'' if n == 1 else 's'}"
            differences = [text for given, has, text in (
                (brokers, len(layout.brokers), count(len(layout.brokers), "broker")),
                (controllers, len(layout.controllers), count(len(layout.controllers), "controller")),
                (secure, layout.secure, "TLS and SASL (--secure)" if layout.secure else "no TLS/SASL (no --secure)"),
            ) if given is not None and given != has]
            if differences:
                raise ClusterError(
                    f"{directory} holds a stopped cluster with {', '.join(differences)}; `up` there restarts it as "
                    f"it is (leave out -n, --controllers and --secure). For a cluster of another shape, give it its "
                    f"own directory (--dir DIR), or delete this one first: "
                    f"tidelog cluster down --purge --dir {directory}")
            layout.overrides.update(overrides or {})
            existing._assign_metrics_ports(metrics_base_port)
            return existing
        brokers = 3 if brokers is None else brokers
        controllers = 1 if controllers is None else controllers
        secure = bool(secure)
        port = lambda offset: 0 if base_port == 0 else base_port + offset
        # The voters' ports are written by format (dynamic) or named to each voter (static): known up front.
        controller_port = port if (controllers == 1 and not dynamic_quorum) or base_port != 0 \
            else lambda offset: _free_port(host)
        nodes = [Node(CONTROLLER_ID + i, "controller", controller_port(brokers + i)) for i in range(controllers)]
        nodes += [Node(i, "broker", port(i - 1)) for i in range(1, brokers + 1)]
        os.makedirs(directory, mode=0o700, exist_ok=True)       # the nodes' data and logs: private
        if secure:
            from tidelog.cluster_security import secure_cluster
            secure_cluster(directory, host, [n.node_id for n in nodes])
        cluster = cls(Layout(directory, new_cluster_id(), host, dict(overrides or {}), nodes, secure,
                             dynamic_quorum))
        cluster._assign_metrics_ports(metrics_base_port)
        if dynamic_quorum:
            cluster._format_initial_controllers()
            cluster.save()
        return cluster

    def _format_controller(self, node: Node, initial_controllers: str | None) -> None:
        """``tidelog format`` for a dynamic quorum's controller: with the first voter set
        (``--initial-controllers``), or none (``--no-initial-controllers``: it starts as an
        observer and waits for AddRaftVoter). Records its directory id."""
        from tidelog.cli.format import FormatError, format_storage
        from tidelog.server.runtime import SERVER_UMASK, load_config
        from tidelog.server.storage_format import directory_id, kafka_text_of_uuid
        settings = self._settings(node)
        config = load_config(None, [f"{key}={value}" for key, value in settings.items()])
        os.makedirs(self._node_dir(node), mode=0o700, exist_ok=True)       # private, as start_node makes it
        umask = os.umask(SERVER_UMASK)          # what format writes is private, as the server's files are
        try:
            format_storage(config, self.layout.cluster_id, initial_controllers=initial_controllers)
        except FormatError as e:
            raise ClusterError(f"cannot format {node.name}: {e}") from None
        finally:
            os.umask(umask)
        node.directory_id = kafka_text_of_uuid(directory_id(config["log.dirs"][0]))

    def _format_initial_controllers(self) -> None:
        """Every controller of a new dynamic quorum, formatted with the same voter set."""
        controllers = self.layout.controllers
        for node in controllers:
            node.directory_id = new_cluster_id()        # a Kafka Uuid, as kafka-storage random-uuid
        initial = ",".join(f"{n.node_id}@{self.layout.host}:{n.port}:{n.directory_id}" for n in controllers)
        for node in controllers:
            self._format_controller(node, initial)

    def _assign_metrics_ports(self, base: int | None) -> None:
        if base is None:
            return
        brokers = self.layout.brokers
        for offset, node in enumerate([*brokers, *self.layout.controllers]):
            if node.metrics_port is None:
                node.metrics_port = 0 if base == 0 else base + offset

    def metrics_url(self, node_id: int) -> str | None:
        node = self.layout.node(node_id)
        return None if node.metrics_port is None else f"http://{self.layout.host}:{node.metrics_port}/metrics"

    # ---------------------------------------------------------------- processes

    def _node_dir(self, node: Node) -> str:
        return os.path.join(self.layout.directory, node.name)

    def _quorum_settings(self, node: Node) -> dict[str, str]:
        """How ``node`` finds the controllers: the static voters, or (dynamic) the
        controllers' addresses as bootstrap servers — a controller's the others', so a
        new one asks the quorum, not itself."""
        layout = self.layout
        if not layout.dynamic_quorum:
            return {"controller.quorum.voters": layout.quorum_voters}
        others = [c for c in layout.controllers if c is not node] or [node]
        return {"controller.quorum.voters": "",
                "controller.quorum.bootstrap.servers": ",".join(f"{layout.host}:{c.port}" for c in others)}

    def _settings(self, node: Node) -> dict[str, str]:
        layout = self.layout
        return {
            "node.id": str(node.node_id), "process.roles": node.role, "cluster.id": layout.cluster_id,
            "log.dirs": os.path.join(self._node_dir(node), "data"),
            "listeners": f"{'CONTROLLER' if node.role == 'controller' else 'PLAINTEXT'}://{layout.host}:{node.port}",
            **self._quorum_settings(node),
            **({"metrics.port": str(node.metrics_port), "metrics.host": layout.host}
               if node.metrics_port is not None else {}),
            # A secure cluster's /state and /state-changes need a token (the path is not secret).
            **({"metrics.state.token.file": ensure_state_token(layout.directory)}
               if layout.secure and node.metrics_port is not None else {}),
            **layout.overrides,
            **node.overrides,
        }

    def _args(self, node: Node) -> list[str]:
        layout = self.layout
        settings = self._settings(node)
        args = [sys.executable, "-m", "tidelog.cli.main", "serve"]
        if layout.secure:            # secrets stay in a private file, not on command lines
            from tidelog.cluster_security import node_keystore, secure_cluster
            args.append(secure_cluster(layout.directory, layout.host, [n.node_id for n in layout.nodes]))
            settings.setdefault("ssl.keystore.location", node_keystore(layout.directory, node.node_id))
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start_node(self, node: Node, timeout_s: float = 60.0) -> None:
        if node.alive():
            raise ClusterError(f"{node.name} is already running (pid {node.pid})")
        os.makedirs(self._node_dir(node), mode=0o700, exist_ok=True)
        log_path = os.path.join(self._node_dir(node), "server.log")
        start_at = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        with open(log_path, "ab") as out:
            process = subprocess.Popen(self._args(node), stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self._children[node.node_id] = process
        node.pid, node.pid_start = process.pid, _start_time(process.pid)
        deadline = time.monotonic() + timeout_s
        while True:
            with open(log_path, "rb") as f:
                f.seek(start_at)
                match = _READY.search(f.read().decode("utf-8", "replace"))
            if match:
                node.port = int(match.group(3))
                if match.group(4) and node.metrics_port is not None:
                    node.metrics_port = int(match.group(4))
                break
            if process.poll() is not None or time.monotonic() > deadline:
                with open(log_path, "rb") as f:
                    f.seek(start_at)
                    tail = f.read().decode("utf-8", "replace").splitlines()[-30:]
                self.kill(node.node_id)
                raise ClusterError(f"{node.name} did not become ready:\n" + "\n".join(tail))
            time.sleep(0.02)
        self.save()

    def up(self, on_ready=None) -> None:
        """Start the controllers, then every broker (in parallel); return once all serve.
        ``on_ready(node)`` is called as each node becomes ready (progress output)."""
        for controller in self.layout.controllers:
            if not controller.alive():
                self.start_node(controller)
            if on_ready is not None:
                on_ready(controller)
        # Brokers start in parallel; each returns once it is RUNNING (unfenced).
        self._start_parallel([b for b in self.layout.brokers if not b.alive()], on_ready)
        self.save()
        if self.layout.secure:       # the clients' settings name the brokers' ports, known now
            from tidelog.cluster_security import write_client_settings
            write_client_settings(self.layout.directory, self.layout.bootstrap)

    def add_broker(self, port: int | None = None, timeout_s: float = 60.0) -> Node:
        """Start one more broker in the running cluster: the next broker id, ``port`` or a
        free one, /metrics on a free port if the others serve it. It registers with the
        controllers like any broker and holds nothing until partitions are created or
        moved onto it (``tidelog reassign``). Kept in the layout, so ``down`` stops it and
        ``up`` starts it again."""
        layout = self.layout
        if layout.secure:
            raise ClusterError("add-broker does not support a --secure cluster yet: its certificates and SASL "
                               "users are made for the nodes that existed at `up`")
        if os.path.exists(os.path.join(layout.directory, LINKS_FILE)):
            raise ClusterError("add-broker does not support a cluster behind the link proxy (up --link-proxy)")
        if not any(n.alive() for n in layout.controllers):
            raise ClusterError(f"the cluster at {layout.directory} is not running (`tidelog cluster up` first)")
        node = Node(max((b.node_id for b in layout.brokers), default=0) + 1, "broker",
                    _free_port(layout.host) if port is None else port)
        if any(n.metrics_port is not None for n in layout.brokers):
            node.metrics_port = 0
        layout.nodes.append(node)
        try:
            self.start_node(node, timeout_s)
        except ClusterError:
            layout.nodes.remove(node)
            self.save()
            raise
        return node

    # --------------------------------------------- controller membership (KIP-853)

    def add_controller(self, timeout_s: float = 120.0, on_step=None) -> Node:
        """Kafka's ``kafka-metadata-quorum add-controller`` for this cluster: a new controller
        (the next id, a free port) formatted ``--no-initial-controllers``, started as an
        observer of the quorum, waited for until its log is at the leader's high watermark,
        then AddRaftVoter to the leader (answered once the new voter set is committed).
        Kept in the layout. ``on_step(text)`` is told each step. A refused AddRaftVoter
        leaves the new controller running as an observer (``remove_controller`` stops it)."""
        layout = self._membership_checks("add-controller")
        step = on_step or (lambda text: None)
        node = Node(max(c.node_id for c in layout.controllers) + 1, "controller", _free_port(layout.host))
        if any(n.metrics_port is not None for n in layout.controllers):
            node.metrics_port = 0
        self._format_controller(node, None)
        layout.nodes.append(node)
        try:
            self.start_node(node)
        except ClusterError:
            layout.nodes.remove(node)
            self.save()
            raise
        step(f"{node.name} started on {layout.host}:{node.port} as an observer (directory id {node.directory_id})")
        deadline = time.monotonic() + timeout_s
        quorum = self._until(lambda q: q is not None and _caught_up(q, node.node_id), deadline,
                             f"{node.name} to catch up with the metadata log")
        step(f"{node.name} caught up (log end offset {int(quorum.high_watermark)}); AddRaftVoter to leader "
             f"{int(quorum.leader_id)}")
        request = {"cluster_id": layout.cluster_id, "timeout": int(max(1.0, deadline - time.monotonic()) * 1000),
                   "voter_id": node.node_id, "voter_directory_id": _uuid(node.directory_id),
                   "listeners": [{"name": "CONTROLLER", "host": layout.host, "port": node.port}]}
        self._change_voters(ApiKey.ADD_RAFT_VOTER, request, deadline)
        self._until(lambda q: q is not None and node.node_id in _voter_ids(q), deadline,
                    f"{node.name} among the voters")
        return node

    def remove_controller(self, node_id: int, timeout_s: float = 120.0, on_step=None) -> None:
        """Kafka's ``kafka-metadata-quorum remove-controller``: RemoveRaftVoter for
        ``node_id`` (its directory id from DescribeQuorum) at the leader, answered once the
        smaller set is committed (a leader removing itself resigns then); once a leader
        other than it is elected and every running broker has fetched from that leader,
        the process is stopped, and it leaves the layout with its directory. A controller
        that is not a voter (an observer whose add failed) is only stopped. The last voter
        is refused: the metadata log would have no voter left."""
        layout = self._membership_checks("remove-controller")
        step = on_step or (lambda text: None)
        node = layout.node(node_id)
        if node.role != "controller":
            raise ClusterError(f"node {node_id} is a broker, not a controller")
        deadline = time.monotonic() + timeout_s
        quorum = self._until(lambda q: q is not None, deadline, "a quorum leader")
        voters = {int(v.replica_id): v for v in quorum.current_voters}
        if node_id in voters:
            if len(voters) == 1:
                raise ClusterError(f"controller {node_id} is the quorum's last voter: without it the metadata log "
                                   f"has no voter and the cluster no controller (Kafka refuses it too, "
                                   f"VOTER_NOT_FOUND); add another first: tidelog cluster add-controller")
            step(f"RemoveRaftVoter {node_id} at leader {int(quorum.leader_id)}")
            self._change_voters(ApiKey.REMOVE_RAFT_VOTER, {
                "cluster_id": layout.cluster_id, "voter_id": node_id,
                "voter_directory_id": voters[node_id].replica_directory_id}, deadline)
            removed_at_ms = int(time.time() * 1000)
            brokers = [b.node_id for b in layout.brokers if b.alive()]
            quorum = self._until(lambda q: q is not None and node_id not in _voter_ids(q)
                                 and int(q.leader_id) != node_id
                                 and _fetched_since(q, brokers, removed_at_ms), deadline,
                                 f"a leader other than {node_id} followed by brokers {brokers}")
            step(f"voters now {sorted(_voter_ids(quorum))}, leader {int(quorum.leader_id)}; the brokers follow it")
        else:
            step(f"controller {node_id} is not a voter (an observer): nothing to remove from the quorum")
        self.stop_node(node_id)
        import shutil
        shutil.rmtree(self._node_dir(node), ignore_errors=True)
        layout.nodes.remove(node)
        self.save()
        step(f"controller {node_id} stopped and its directory {self._node_dir(node)} deleted")

    def _membership_checks(self, verb: str) -> Layout:
        layout = self.layout
        if not layout.dynamic_quorum:
            raise ClusterError(f"{verb} needs a dynamic quorum (KIP-853); the cluster at {layout.directory} was "
                               "started with a static controller.quorum.voters (an older `cluster up`, or "
                               "--link-proxy), whose voters cannot change")
        if layout.secure:
            raise ClusterError(f"{verb} does not support a --secure cluster yet: its certificates are made for "
                               "the nodes that existed at `up`")
        if not any(n.alive() for n in layout.controllers):
            raise ClusterError(f"the cluster at {layout.directory} is not running (`tidelog cluster up` first)")
        return layout

    def describe_quorum(self):
        """The leader's DescribeQuorum partition (v2: directory ids), or None while no
        running controller names a leader that answers."""
        import asyncio
        from tidelog.metadata.log import METADATA_TOPIC
        from tidelog.server.controller_channel import RemoteController
        layout = self.layout
        running = [(c.node_id, layout.host, c.port) for c in layout.controllers if c.alive()]

        async def ask():
            channel = RemoteController(running, "tidelog-cluster")
            try:
                answer = await channel.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                    {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, version=2,
                    timeout_s=5)
            finally:
                channel.close()
            partition = answer.topics[0].partitions[0]
            return partition if int(partition.error_code.value) == 0 else None
        if not running:
            return None
        try:
            return asyncio.run(ask())
        except (OSError, ConnectionError, asyncio.TimeoutError):
            return None

    def _until(self, condition, deadline: float, what: str):
        """DescribeQuorum until ``condition(answer)`` holds; that answer (ClusterError at the deadline)."""
        while True:
            quorum = self.describe_quorum()
            if condition(quorum):
                return quorum
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}; the quorum last described: {_describe(quorum)}")
            time.sleep(0.1)

    def _change_voters(self, api_key: int, request: dict, deadline: float) -> None:
        """AddRaftVoter / RemoveRaftVoter at the quorum leader, again while no leader
        answers or another change is in progress, until ``deadline``; a refusal is raised."""
        import asyncio
        from tidelog.core.errors import ErrorCode
        from tidelog.protocol.client import KafkaConnection
        layout = self.layout

        async def ask(port: int):
            connection = await KafkaConnection.connect(layout.host, port, "tidelog-cluster", timeout_s=5)
            try:
                return await connection.request(api_key, request, timeout_s=max(1.0, deadline - time.monotonic()))
            finally:
                connection.close()
        retried = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER)
        while True:
            quorum = self._until(lambda q: q is not None, deadline, "a quorum leader")
            leader = next((c for c in layout.controllers if c.node_id == int(quorum.leader_id)), None)
            error, message = ErrorCode.NOT_LEADER_OR_FOLLOWER, f"leader {int(quorum.leader_id)} has no address here"
            if leader is not None:
                try:
                    answer = asyncio.run(ask(leader.port))
                    error, message = ErrorCode(int(answer.error_code)), getattr(answer, "error_message", None)
                except (OSError, ConnectionError, asyncio.TimeoutError) as e:
                    message = f"{type(e).__name__}: {e}"
            if error == ErrorCode.NONE:
                return
            if error not in retried or time.monotonic() > deadline:
                raise ClusterError(f"{'AddRaftVoter' if api_key == ApiKey.ADD_RAFT_VOTER else 'RemoveRaftVoter'} "
                                   f"{request['voter_id']} answered {error.name}: {message}")
            time.sleep(0.2)

    def _start_parallel(self, brokers: list[Node], on_ready=None) -> None:
        import threading
        errors: list[Exception] = []

        def start(node: Node) -> None:
            try:
                self.start_node(node)
                if on_ready is not None:
                    on_ready(node)
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=start, args=(b,)) for b in brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _signal(self, node_id: int, sig: int) -> Node:
        node = self.layout.node(node_id)
        if not node.alive():
            raise ClusterError(f"{node.name} is not running")
        os.kill(node.pid, sig)
        return node

    def _reap(self, node: Node, timeout_s: float) -> None:
        child = self._children.pop(node.node_id, None)
        deadline = time.monotonic() + timeout_s
        while node.alive() and time.monotonic() < deadline:
            if child is not None:
                try:
                    child.wait(0.05)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(0.05)

    def stop_node(self, node_id: int, timeout_s: float = 40.0) -> None:
        """SIGTERM: controlled shutdown, then a clean stop."""
        node = self.layout.node(node_id)
        if not node.alive():
            return
        if node.process_state() == "paused":
            os.kill(node.pid, signal.SIGCONT)
        os.kill(node.pid, signal.SIGTERM)
        self._reap(node, timeout_s)
        if node.alive():
            os.kill(node.pid, signal.SIGKILL)
            self._reap(node, 5)
        node.pid = node.pid_start = None
        self.save()

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node dies at once."""
        node = self.layout.node(node_id)
        if node.alive():
            os.kill(node.pid, signal.SIGKILL)
            self._reap(node, 10)
        node.pid = node.pid_start = None
        self.save()

    def pause(self, node_id: int) -> None:
        self._signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self._signal(node_id, signal.SIGCONT)

    def restart(self, node_id: int) -> None:
        node = self.layout.node(node_id)
        self.stop_node(node_id)
        self.start_node(node)

    def down(self) -> None:
        for broker in self.layout.brokers:
            if broker.alive() and broker.process_state() == "paused":
                os.kill(broker.pid, signal.SIGCONT)
        import threading
        threads = [threading.Thread(target=self.stop_node, args=(b.node_id,)) for b in self.layout.brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for controller in self.layout.controllers:
            if controller.alive() and controller.process_state() == "paused":
                os.kill(controller.pid, signal.SIGCONT)
        threads = [threading.Thread(target=self.stop_node, args=(c.node_id,)) for c in self.layout.controllers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def purge(self) -> list[str]:
        """Delete what this cluster keeps in its directory (every node's data and log, the
        layout, the web view's and link proxy's files, a secure cluster's certificates and
        passwords), and the directory itself once empty. Only names the cluster made are
        removed: a directory that also holds other files keeps them, and they are returned.
        Every process must be stopped first."""
        import shutil
        running = [n.name for n in self.layout.nodes if n.alive()]
        if running:
            raise ClusterError(f"cannot purge {self.layout.directory}: {', '.join(running)} still running")
        directory = self.layout.directory
        ours = {self._node_dir(n) for n in self.layout.nodes} | {
            os.path.join(directory, name) for name in (
                LAYOUT_FILE, LAYOUT_FILE + ".tmp", UI_FILE, "ui.log", LINKS_FILE, "link-proxy.log", "security")}
        for path in sorted(ours):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.remove(path)
        left = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        if not left and os.path.isdir(directory):
            os.rmdir(directory)
        return left

    # ---------------------------------------------------------- link proxy (chaos)

    def enable_link_proxy(self, mode: str = "drop", timeout_s: float = 10.0) -> dict:
        """Start ``tidelog.chaos.proxyd`` for this cluster (before ``up``): every broker
        advertises its proxy port and reaches the controller through the controller's
        proxy, so ``partition``/``cut``/``isolate``/``heal`` can cut any link."""
        if len(self.layout.controllers) > 1:
            raise ClusterError("the link proxy supports a single controller")
        self.save()
        links_path = os.path.join(self.layout.directory, LINKS_FILE)
        if os.path.exists(links_path):
            os.remove(links_path)
        log_path = os.path.join(self.layout.directory, "link-proxy.log")
        with open(log_path, "ab") as out:
            subprocess.Popen([sys.executable, "-m", "tidelog.chaos.proxyd", "--dir", self.layout.directory,
                              "--mode", mode], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(links_path):
            if time.monotonic() > deadline:
                raise ClusterError(f"the link proxy did not start (see {log_path})")
            time.sleep(0.05)
        with open(links_path) as f:
            links = json.load(f)
        ports = {int(k): v for k, v in links["ports"].items()}
        for broker in self.layout.brokers:
            broker.overrides.update({
                "advertised.listeners": f"PLAINTEXT://{self.layout.host}:{ports[broker.node_id]}",
                "controller.quorum.voters": f"{CONTROLLER_ID}@{self.layout.host}:{ports[CONTROLLER_ID]}"})
        self.save()
        return links

    def stop_link_proxy(self) -> None:
        path = os.path.join(self.layout.directory, LINKS_FILE)
        if not os.path.exists(path):
            return
        with open(path) as f:
            pid = json.load(f)["pid"]
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
        os.remove(path)

    # ------------------------------------------------------------------ web view

    def start_ui(self, port: int = 0, timeout_s: float = 15.0, drills: bool = False) -> str:
        """Run ``tidelog ui`` for this cluster (its fault drills with ``drills``); returns its
        URL, which holds the view's token when it has one."""
        self.stop_ui()
        directory = self.layout.directory
        log_path = os.path.join(directory, "ui.log")
        start_at = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        args = [sys.executable, "-m", "tidelog.cli.main", "ui", "-b", self.layout.bootstrap,
                "--host", self.layout.host, "--port", str(port), "--cluster-dir", directory]
        with os.fdopen(_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab") as out:
            process = subprocess.Popen(args + (["--drills"] if drills else []),
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            with open(log_path, "rb") as f:
                f.seek(start_at)
                match = _UI_READY.search(f.read().decode("utf-8", "replace"))
            if match:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    process.kill()
                raise ClusterError(f"tidelog ui did not start (see {log_path})")
            time.sleep(0.02)
        with os.fdopen(_private(os.path.join(directory, UI_FILE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as f:
            json.dump({"pid": process.pid, "pid_start": _start_time(process.pid), "url": match.group(1),
                       "drills": drills}, f)
        return match.group(1)

    def ui_url(self) -> str | None:
        """The URL of this cluster's running ``tidelog ui``, if any."""
        try:
            with open(os.path.join(self.layout.directory, UI_FILE)) as f:
                ui = json.load(f)
        except (OSError, ValueError):
            return None
        return ui["url"] if _alive(ui.get("pid"), ui.get("pid_start")) else None

    def stop_ui(self) -> None:
        path = os.path.join(self.layout.directory, UI_FILE)
        try:
            with open(path) as f:
                ui = json.load(f)
        except (OSError, ValueError):
            return
        pid, start = ui.get("pid"), ui.get("pid_start")
        if _alive(pid, start):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _alive(pid, start) and time.monotonic() < deadline:
                try:   # our child (started by this process): reap it
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.05)
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        os.remove(path)

    def process_states(self) -> dict[int, str]:
        return {n.node_id: n.process_state() for n in self.layout.nodes}
