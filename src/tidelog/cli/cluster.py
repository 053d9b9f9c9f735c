"""``tidelog cluster up|down|status|kill|pause|resume|restart`` — a local cluster of processes;
``add-broker``, and ``add-controller|remove-controller`` to change its controller quorum's voters
(KIP-853: ``up`` formats the controllers as a dynamic quorum, unless ``--link-proxy``);
``partition|cut|isolate|heal|links`` cut its links (with ``up --link-proxy``, tidelog.chaos).
``up`` also starts the live web view (``tidelog ui``, unless ``--no-ui``; its fault drills only
with ``--ui-drills``); ``down`` stops it."""

from __future__ import annotations

import asyncio
import sys
import time

from tidelog.cli.progress import Progress
from tidelog.cluster import CONTROLLER_ID, ClusterError, ProcessCluster
from tidelog.protocol.api_keys import ApiKey
from tidelog.metadata.log import METADATA_TOPIC
from tidelog.protocol.client import KafkaConnection
from tidelog.server.controller_channel import RemoteController


def run(args) -> int:
    try:
        return _run(args)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _run(args) -> int:
    if args.verb == "up":
        return _up(args)
    if args.verb in ("partition", "cut", "isolate", "heal", "links"):
        return _links(args)
    cluster = ProcessCluster.load(args.dir)
    if args.verb == "down":
        _down(cluster, args.purge)
    elif args.verb == "kill":
        cluster.kill(args.node_id)
        print(f"node {args.node_id} killed (SIGKILL)")
    elif args.verb == "pause":
        cluster.pause(args.node_id)
        print(f"node {args.node_id} paused (SIGSTOP)")
    elif args.verb == "resume":
        cluster.resume(args.node_id)
        print(f"node {args.node_id} resumed (SIGCONT)")
    elif args.verb == "restart":
        cluster.restart(args.node_id)
        print(f"node {args.node_id} restarted")
    elif args.verb == "status":
        return asyncio.run(_status(cluster))
    elif args.verb == "add-broker":
        node = cluster.add_broker(args.port)
        print(f"broker {node.node_id} up on {cluster.layout.host}:{node.port}; it holds no partition until one is "
              f"created or moved onto it (tidelog reassign)")
    elif args.verb == "add-controller":
        node = cluster.add_controller(on_step=print)
        print(f"controller {node.node_id} added: voters {_voters(cluster)}")
    elif args.verb == "remove-controller":
        cluster.remove_controller(args.node_id, on_step=print)
        print(f"controller {args.node_id} removed: voters {_voters(cluster)}")
    return 0


def _voters(cluster: ProcessCluster) -> str:
    quorum = cluster.describe_quorum()
    if quorum is None:
        return "unknown (no leader answered)"
    return f"{sorted(int(v.replica_id) for v in quorum.current_voters)}, leader {int(quorum.leader_id)}"


def _up(args) -> int:
    """``cluster up``: create (or reuse) the cluster's directory, start every node, print
    where to reach it, and start the web view."""
    overrides = _overrides(args.override)
    started = time.monotonic()
    metrics_base_port = None if args.no_metrics else (
        args.metrics_base_port if args.metrics_base_port is not None else
        0 if args.base_port == 0 else args.base_port + 100)
    # A dynamic quorum (KIP-853: add-controller / remove-controller), except behind the
    # link proxy, which points the brokers at the controller's proxy by controller.quorum.voters.
    cluster = ProcessCluster.create(args.dir, args.brokers, args.base_port, overrides=overrides,
                                    metrics_base_port=metrics_base_port, controllers=args.controllers,
                                    secure=args.secure, dynamic_quorum=not args.link_proxy)
    links = None
    if args.link_proxy:
        links = cluster.enable_link_proxy()
        print(f"link proxy on control port {links['control_port']}: brokers advertise proxy ports "
              f"{', '.join(f'{k}:{v}' for k, v in sorted(links['ports'].items()))}")
    controllers = len(cluster.layout.controllers)
    with Progress(f"starting {'the controller' if controllers == 1 else f'{controllers} controllers'} "
                  f"and {len(cluster.layout.brokers)} brokers",
                  total=len(cluster.layout.nodes)) as progress:
        cluster.up(on_ready=lambda node: progress.advance(note=f"{node.name} ready"))
    print(f"cluster up in {time.monotonic() - started:.2f} s: {len(cluster.layout.brokers)} brokers, "
          f"{cluster.layout.quorum_setting}, data in {cluster.layout.directory}")
    _print_endpoints(cluster, links)
    if cluster.layout.secure:
        _print_secure_settings(cluster)
    if not args.no_ui and metrics_base_port is not None:
        _start_ui(cluster, args)
    return 0


def _overrides(items: list[str]) -> dict[str, str]:
    """``--override KEY=VALUE`` flags as a dict."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ClusterError(f"--override expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def _print_endpoints(cluster: ProcessCluster, links: dict | None) -> None:
    """The bootstrap servers (the proxies' ports with ``--link-proxy``) and each node's metrics URL."""
    if links is not None:
        ports = links["ports"]
        print(f"bootstrap servers (through the proxies): "
              f"{','.join(f'{cluster.layout.host}:{ports[str(b.node_id)]}' for b in cluster.layout.brokers)}")
    else:
        print(f"bootstrap servers: {cluster.layout.bootstrap}")
    for node in cluster.layout.nodes:
        if node.metrics_port is not None:
            print(f"metrics: {node.name:11} {cluster.metrics_url(node.node_id)}")


def _print_secure_settings(cluster: ProcessCluster) -> None:
    """A secure cluster's client user, created now, and the settings files for each kind of client."""
    from tidelog.cluster_security import create_client_user, kcat_line, paths
    first = cluster.layout.brokers[0]
    create_client_user(cluster.layout.directory, (cluster.layout.host, first.port))
    files = paths(cluster.layout.directory)
    print("secure: SASL_SSL on the brokers (SCRAM-SHA-512 user 'client'), TLS between nodes, ACLs on")
    print(f"client settings: {files['client']}  (CA certificate {files['ca']})")
    print("  librdkafka's names (bootstrap.servers included): confluent-kafka takes them as they are; "
          "so do tidelog's tools (--command-config)")
    print(f"  kcat: {kcat_line(cluster.layout.directory)}")
    print(f"  Java clients and Kafka's tools: {files['client_java']}")
    print(f"admin settings (super user): {files['admin']} (Java: {files['admin_java']})  — e.g. "
          f"tidelog topics --command-config {files['admin']} list")


def _start_ui(cluster: ProcessCluster, args) -> None:
    """The web view; a failure to start it is reported, not raised: the cluster is up."""
    ui_port = args.ui_port if args.ui_port is not None else 0 if args.base_port == 0 else args.base_port + 200
    try:
        print(f"web view: {cluster.start_ui(ui_port, drills=args.ui_drills)}")
        if args.ui_drills or cluster.layout.secure:
            print("  (the URL holds the view's token: keep it private"
                  + ("; fault drills on)" if args.ui_drills else ")"))
    except ClusterError as e:   # the cluster is up; the view is a convenience
        print(f"web view not started: {e}", file=sys.stderr)


def _down(cluster: ProcessCluster, purge: bool) -> None:
    """``cluster down``: stop the view, the nodes and the link proxy; ``--purge`` deletes the data."""
    cluster.stop_ui()
    cluster.down()
    cluster.stop_link_proxy()
    if not purge:
        print(f"cluster down (its data stays in {cluster.layout.directory} for the next `up`; "
              "`down --purge` deletes it)")
        return
    left = cluster.purge()
    print(f"cluster down and deleted: {cluster.layout.directory}"
          + (f" (kept, not the cluster's: {', '.join(left)})" if left else ""))


def _links(args) -> int:
    import os
    from tidelog.chaos.proxyd import LINKS_FILE, send
    if not os.path.exists(os.path.join(args.dir, LINKS_FILE)):
        raise ClusterError(f"no link proxy for the cluster at {args.dir} (start it with `up --link-proxy`)")
    command = {"partition": f"partition {getattr(args, 'a', '')} {getattr(args, 'b', '')}",
               "cut": f"cut {getattr(args, 'a', '')} {getattr(args, 'b', '')}",
               "isolate": f"isolate {getattr(args, 'a', '')}", "heal": "heal", "links": "status"}[args.verb]
    answer = send(args.dir, command)
    if "error" in answer:
        raise ClusterError(answer["error"])
    print(f"cut links: {', '.join(answer['cut']) or 'none'}")
    return 0


async def _status(cluster: ProcessCluster) -> int:
    layout = cluster.layout
    states = cluster.process_states()
    broker_security = controller_security = None
    if layout.secure:
        from tidelog import cluster_security
        broker_security = cluster_security.admin_security(layout.directory)
        controller_security = cluster_security.controller_security(layout.directory)
    registrations, quorum, controller_down = await _ask_controllers(layout, controller_security)
    print(f"cluster {layout.cluster_id} at {layout.directory}")
    print("  controller quorum: " + ("dynamic (KIP-853: add-controller / remove-controller)" if layout.dynamic_quorum
                                     else "static (controller.quorum.voters)"))
    ui_url = cluster.ui_url()
    if ui_url:
        print(f"  web view {ui_url}")
    metrics = {n.node_id: f"  metrics {cluster.metrics_url(n.node_id)}" if n.metrics_port is not None else ""
               for n in layout.nodes}
    voters = set() if quorum is None else {int(v.replica_id) for v in quorum.current_voters}
    for controller in layout.controllers:
        role = "" if quorum is None else "  leader" if int(quorum.leader_id) == controller.node_id else \
            "  voter" if controller.node_id in voters else "  observer (not a voter)"
        print(f"  controller {controller.node_id}  {layout.host}:{controller.port}  "
              f"process {states[controller.node_id]}{role}{metrics[controller.node_id]}")
    if quorum is not None:
        _print_quorum(quorum)
    elif controller_down is None:
        print("  quorum: no leader answered DescribeQuorum (an election may be under way)")
    unnoticed = _print_brokers(layout, states, registrations, controller_down, metrics)
    metadata, min_isr = await _ask_a_broker(layout, states, broker_security)
    if metadata is None:
        print("no running broker answered: partition state unknown")
        if controller_down:
            print(f"UNHEALTHY: no controller is reachable ({controller_down})")
        return 1
    _print_partitions(metadata, min_isr, states, unnoticed)
    if controller_down:
        print(f"UNHEALTHY: no controller is reachable ({controller_down}); the partition "
              "state above is the brokers' last view of it, and until the controller is back no broker "
              "can be fenced, no leader elected and no topic created")
        return 1
    return 0


async def _ask_controllers(layout, security):
    """The brokers' registrations and the metadata quorum's state as the controllers tell
    them, and why no controller answered (``None`` if one did)."""
    registrations = {}
    controller_down = None
    quorum = None
    channel = RemoteController([(c.node_id, layout.host, c.port) for c in layout.controllers], "tidelog-cluster",
                               security=security)
    try:
        described = await channel.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False},
                                          timeout_s=3)
        registrations = {int(b.broker_id): b for b in described.brokers}
        answer = await channel.request(ApiKey.DESCRIBE_QUORUM, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}, timeout_s=3)
        partition = answer.topics[0].partitions[0]
        if int(partition.error_code.value) == 0:
            quorum = partition
    except (OSError, asyncio.TimeoutError, ConnectionError) as e:
        controller_down = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    finally:
        channel.close()
    return registrations, quorum, controller_down


def _print_brokers(layout, states: dict, registrations: dict, controller_down, metrics: dict) -> list[int]:
    """One line a broker (its process and its registration); returns the brokers whose
    process is gone or stopped while the controller still counts them."""
    unnoticed = []
    for broker in layout.brokers:
        registration = registrations.get(broker.node_id)
        process = states[broker.node_id]
        registered = ("registration unknown" if controller_down else
                      "not registered" if registration is None else
                      "FENCED" if registration.is_fenced else "unfenced")
        note = ""
        if registered == "unfenced" and process != "running":
            unnoticed.append(broker.node_id)
            note = (f"  (process {process}, session not yet expired: the controller fences it within "
                    "broker.session.timeout.ms of its last heartbeat, 9 s by default)")
        elif registered == "FENCED" and process == "running":
            note = "  (running but fenced: catching up with the metadata, or its heartbeats are not getting through)"
        print(f"  broker {broker.node_id}  {layout.host}:{broker.port}  process {process}  {registered}"
              f"{metrics[broker.node_id]}{note}")
    return unnoticed


async def _ask_a_broker(layout, states: dict, security):
    """Metadata for every topic and each topic's ``min.insync.replicas``, from the first
    running broker that answers; (None, {}) if none does."""
    for broker in layout.brokers:
        if states[broker.node_id] != "running":
            continue
        try:
            connection = await KafkaConnection.connect(layout.host, broker.port, "tidelog-cluster", 3,
                                                       security=security)
        except (OSError, asyncio.TimeoutError):
            continue
        try:
            metadata = await connection.request(ApiKey.METADATA, {"topics": None, "allow_auto_topic_creation": False})
            topics = [t.name for t in metadata.topics]
            min_isr = {}
            if topics:
                configs = await connection.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                    {"resource_type": 2, "resource_name": t, "configuration_keys": ["min.insync.replicas"]}
                    for t in topics], "include_synonyms": False, "include_documentation": False})
                for result in configs.results:
                    for c in result.configs:
                        min_isr[result.resource_name] = int(c.value)
        finally:
            connection.close()
        return metadata, min_isr
    return None, {}


def _print_partitions(metadata, min_isr: dict, states: dict, unnoticed: list[int]) -> None:
    """The partitions under-replicated, under min ISR and leaderless, and what the brokers
    the controller has not yet fenced still hold."""
    under_replicated, under_min_isr, leaderless = [], [], []
    for topic in sorted(metadata.topics, key=lambda t: t.name):
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            name = f"{topic.name}-{p.partition_index}"
            isr, replicas = list(p.isr_nodes), list(p.replica_nodes)
            if int(p.leader_id) < 0:
                leaderless.append(name)
            if len(isr) < len(replicas):
                under_replicated.append(f"{name} (isr {isr} of {replicas})")
            if len(isr) < min(min_isr.get(topic.name, 1), len(replicas)):
                under_min_isr.append(f"{name} (isr {isr}, min.insync.replicas {min_isr.get(topic.name)})")
    total = sum(len(t.partitions) for t in metadata.topics)
    print(f"partitions: {total} in {len(metadata.topics)} topics")
    for label, items in (("under-replicated", under_replicated), ("under min ISR", under_min_isr),
                         ("leaderless", leaderless)):
        print(f"  {label}: {len(items)}" + ("" if not items else "\n    " + "\n    ".join(items)))
    for node_id in unnoticed:
        partitions = [p for t in metadata.topics for p in t.partitions]
        in_isr = sum(1 for p in partitions if node_id in [int(r) for r in p.isr_nodes])
        leads = sum(1 for p in partitions if int(p.leader_id) == node_id)
        if in_isr or leads:
            print(f"  not yet counted: broker {node_id} is {states[node_id]} but still in the ISR of {in_isr} "
                  f"partitions and leads {leads}; the counts above change once the controller fences it")


def _print_quorum(quorum) -> None:
    """As ``kafka-metadata-quorum describe --status`` and ``--replication`` do."""
    high_watermark = int(quorum.high_watermark)
    now_ms = int(time.time() * 1000)
    print(f"  quorum: leader {int(quorum.leader_id)}, epoch {int(quorum.leader_epoch)}, "
          f"high watermark {high_watermark}")
    for kind, replicas in (("voter", quorum.current_voters), ("observer", quorum.observers)):
        for r in sorted(replicas, key=lambda r: int(r.replica_id)):
            end = int(r.log_end_offset)
            fetched = getattr(r, "last_fetch_timestamp", -1)
            fetched = int(fetched.timestamp() * 1000) if hasattr(fetched, "timestamp") else int(fetched)
            ago = f"{(now_ms - fetched) / 1000:.1f} s ago" if fetched > 0 else "never"
            lag = max(0, high_watermark - end) if end >= 0 else "?"
            print(f"    {kind:8} {int(r.replica_id):5}  log end offset {end:7}  lag {lag}  last fetch {ago}")
