"""``tidelog serve``: a broker, a controller, or both in one process (``process.roles``).

Theory of operation. This is the asyncio driver of the sans-I/O core: it moves
bytes, fires timers and carries out what the core asks for, and decides nothing.

    start:  meta.properties (cluster id, node id) in every log dir
            the listener binds (its port goes into the broker's registration)
            controller role → ControllerServer (QuorumController + metadata log)
            broker role     → a BrokerNode (broker/node.py) over the logs, with the
                              broker's copy of the committed metadata log (the
                              controller's own in combined mode, fetched from it
                              otherwise); KafkaApis and AdminApis on the listener
            → node.start(): register, catch up, heartbeat until unfenced →
              RUNNING; one "ready" line
    run:    requests → Dispatcher → KafkaApis / AdminApis / controller APIs;
            one task wakes the node at ``next_wakeup_ms()``; effects become
            controller requests, fetcher tasks (FetcherDriver) and wake-ups
    stop:   (SIGTERM/SIGINT) ``on_stop_requested`` (a controlled shutdown when
            others can lead) until the node says StopNow; then the listener
            closes, waiting requests complete, ``BrokerNode.shutdown()`` writes
            checkpoints and the clean-shutdown marker

With ``metrics.port`` set, ``ServerMetrics`` (server/metrics.py) observes every
dispatcher and serves ``/metrics`` on the same loop from the start on, read at
scrape time from the node and the controller; the ready line names its URL.
It also answers ``/state`` and ``/state-changes`` (server/state.py). A broker
keeps its state-change log (``<first log dir>/state-change.log``) whether or not
metrics are on: the runtime hands ``StateChangeLog`` each published metadata
image and lifecycle change, and lets it look for truncations from the tick loop.

The simulator drives the same BrokerNode (sim/broker.py); the two drivers differ
only in how bytes and time move. A broken invariant anywhere (an AssertionError
out of the node, a fetcher or a request handler) goes to ``_fault`` and stops
the process with exit status 1 — it is never logged and carried on from.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import tempfile
import secrets
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tidelog.broker.config import BrokerConfig
from tidelog.broker.lifecycle import BrokerState
from tidelog.broker.node import (
    BrokerNode,
    FetcherAdded,
    FetcherRemoved,
    MetadataPublished,
    ResolveInDoubt,
    SendAlterPartition,
    SendAssignReplicasToDirs,
    SendHeartbeat,
    SendRegistration,
    StateChanged,
    StopNow,
)
from tidelog.controller.messages import CreatableTopic
from tidelog.core.clock import Clock, SystemClock
from tidelog.core.errors import ErrorCode, InvalidConfigError, StorageError
from tidelog.group.coordinator import OFFSETS_TOPIC, offsets_topic
from tidelog.metadata.file_log import FileMetadataLog
from tidelog.metadata.image import ConfigResource
from tidelog.metadata.records import ConfigResourceType, Endpoint
from tidelog.protocol.api_keys import ApiKey
from tidelog.server.admin import AdminApis, ForwardingAdminApis
from tidelog.server.apis import ApiContext, KafkaApis
from tidelog.server.controller_channel import (
    InProcessController,
    RemoteController,
    parse_address,
    parse_quorum_voters,
)
from tidelog.server.controller_server import ControllerServer
from tidelog.server.dispatch import Dispatcher
from tidelog.server.fetcher_driver import FetcherDriver
from tidelog.server.loop_monitor import EventLoopMonitor
from tidelog.server.group_apis import GroupApis
from tidelog.server.txn_apis import TxnApis
from tidelog.server import tls
from tidelog.metadata.authorizer import Authorizer, ResourceType
from tidelog.txn.in_doubt import missing_describe_acl
from tidelog.server.authorization import AUTHORIZER_CLASS_NAMES, RequestAuthorizer
from tidelog.server.sasl import SaslAuthenticator, listener_jaas
from tidelog.server.sasl_apis import SaslApis
from tidelog.protocol.client import ClientSecurity
from tidelog.server.metrics import ServerMetrics
from tidelog.server.quotas import QuotaCollector, QuotaEnforcer
from tidelog.broker.quotas import ClientQuotas
from tidelog.server.state import StateChangeLog
from tidelog.server.network import Listener, ServerLimits, address_problem, raise_open_file_limit
from tidelog.server.storage_format import META_PROPERTIES, StorageFormatError, format_log_dirs
from tidelog.storage.checkpoint import set_retry_wait
from tidelog.server.write_behind import WriteBehind
from tidelog.storage.files import RealFileSystem
from tidelog.storage.log_manager import random_directory_id

logger = logging.getLogger("tidelog.broker")

TICK_MS = 50
INITIAL_REGISTRATION_TIMEOUT_MS = 60_000
CONTROLLER_REQUEST_TIMEOUT_S = 30.0
CONTROLLER_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError)


class BrokerStartupError(Exception):
    pass


class Server:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None):
        self.config = config
        self.clock = clock or SystemClock()
        self.node_id: int = config["node.id"]
        roles = set(config["process.roles"])
        if not roles or not roles <= {"broker", "controller"}:
            raise InvalidConfigError(f"process.roles must be broker, controller or both, got {sorted(roles)}")
        self.is_broker = "broker" in roles
        self.is_controller = "controller" in roles
        if not self.is_controller and not config["controller.quorum.voters"] \
                and not config["controller.quorum.bootstrap.servers"]:
            raise InvalidConfigError("a broker-only node needs controller.quorum.voters (id@host:port) or "
                                     "controller.quorum.bootstrap.servers (host:port)")
        client, self.controller_endpoints = plan_listeners(config, self.is_broker, self.is_controller)
        # The node's main listener: the clients' on a broker, the controller's otherwise.
        self.listener_name, self.bind_host, self.bind_port = client or self.controller_endpoints[0]
        advertised = [e for e in config.listener_endpoints(advertised=True) if e[0] == self.listener_name]
        advertised_host = advertised[0][1] if advertised else self.bind_host
        self.advertised_host = advertised_host if advertised_host not in ("0.0.0.0", "") else "127.0.0.1"
        self.advertised_port = advertised[0][2] if advertised and config["advertised.listeners"] else 0
        # What Metadata/DescribeCluster call the "controller": as in KRaft, a broker
        # names an alive broker (itself) and forwards admin requests to the real
        # controller, which clients cannot reach on their listener.
        self.controller_id = self.node_id
        self.cluster_id = ""
        self.node: BrokerNode | None = None
        # One worker thread for the logs' background fsyncs (segment rolls).
        self._background_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-flush")
        # The log directories' appends, made by a thread of their own (server/write_behind.py).
        behind = config["tidelog.log.write.behind.max.bytes"]
        self.write_behind = WriteBehind(behind) if behind > 0 else None
        self.listener: Listener | None = None
        self.controller_listeners: list[Listener] = []   # a combined node's controller.listener.names
        self.controller_server: ControllerServer | None = None
        self.metrics: ServerMetrics | None = None   # metrics.port set: /metrics
        self.state_changes: StateChangeLog | None = None   # a broker's state-change.log
        self.exit_status = 0
        self._tasks: list[asyncio.Task] = []
        self._running = asyncio.Event()
        self._stop_now = asyncio.Event()        # the node said StopNow, or a fault
        self._wake = asyncio.Event()            # the node's next wake-up may have moved
        self._metadata_changed = asyncio.Event()
        self._producer_ids: list[int] | None = None
        self._tls_dynamic: dict[str, str] = {}    # the per-broker TLS settings last applied
        self.loop_monitor = EventLoopMonitor()    # the loop's stalls (GET /event-loop)

    # ------------------------------------------------------------------ start

    async def _discover_cluster_id(self) -> str | None:
        """A broker-only node with an unformatted dir learns the cluster id from its controller."""
        if self.is_controller or self.config["cluster.id"]:
            return self.config["cluster.id"]
        if any(os.path.exists(os.path.join(d, META_PROPERTIES)) for d in self.config["log.dirs"]):
            return None
        deadline = self.clock.monotonic_ms() + INITIAL_REGISTRATION_TIMEOUT_MS
        while True:
            try:
                response = await self.channel.request(ApiKey.DESCRIBE_CLUSTER,
                                                      {"include_cluster_authorized_operations": False})
                return response.cluster_id
            except CONTROLLER_ERRORS as e:
                if self.clock.monotonic_ms() > deadline:
                    raise BrokerStartupError(f"cannot reach the controller: {e}") from None
                await asyncio.sleep(0.2)

    async def start(self) -> None:
        config = self.config
        self._reach_controllers(config)
        self._check_addresses(config)     # before anything is written to the log directories
        self.cluster_id = format_log_dirs(config["log.dirs"], self.node_id, await self._discover_cluster_id())
        if config["metrics.port"] is not None:
            self.metrics = ServerMetrics(config["metrics.host"], config["metrics.port"])
            self.metrics.http.bind()
        self.dispatcher = Dispatcher(self._observer())
        self.dispatcher.metadata_image = self._published_image
        self.authorizer = self._request_authorizer()
        # Each server's listeners share a memory pool and connection quotas (Kafka's SocketServer).
        limits = ServerLimits.from_config(config)
        limits.write_behind = self.write_behind if self.is_broker else None
        self.listener = self._new_listener(self.dispatcher, self.bind_host, self.bind_port, limits)
        self.bind_port = self.listener.bind()
        if self.is_controller:
            self._start_controller_role(config)
        if self.is_broker:
            self.state_changes = StateChangeLog(config["log.dirs"][0], self.node_id)
            self._start_broker_role()
        if self.metrics is not None:
            await self._start_metrics()
        await self.listener.start()
        for listener in self.controller_listeners:
            await listener.start()
        self._tasks.append(asyncio.create_task(self._guarded(self._tick_loop())))
        self._tasks.append(asyncio.create_task(self._guarded(self.loop_monitor.run())))
        if self.is_broker:
            await self._until_running()
        roles = "broker+controller" if self.is_broker and self.is_controller else (
            "broker" if self.is_broker else "controller")
        logger.info("tidelog node %d (%s) ready: listening on %s://%s:%d (cluster %s, data in %s)%s",
                 self.node_id, roles, self.listener_name, self.bind_host, self.listener.port,
                 self.cluster_id, ",".join(config["log.dirs"]),
                 f", metrics on {self.metrics.http.url}" if self.metrics is not None else "")

    def _reach_controllers(self, config) -> None:
        """How this node reaches the controllers: the voters (or, known by address only,
        the bootstrap servers), TLS towards other nodes, and a broker's channel to the
        active controller unless its own process is the quorum's only voter."""
        voters = parse_quorum_voters(config["controller.quorum.voters"] or [])
        if not voters and not self.is_controller:
            # Controllers known by address only: their ids are learned from the leader
            # hints of their answers; until then they are tried in turn.
            voters = [(-1 - i, *parse_address(a)) for i, a in enumerate(config["controller.quorum.bootstrap.servers"])]
        # TLS towards other nodes: the inter-broker listener (ours is the only client
        # listener) and the controllers' listener, when their protocol is SSL.
        self.inter_broker_security = self._client_security(self.listener_name) if self.is_broker else None
        controller_listener = (config["controller.listener.names"] or ["CONTROLLER"])[0].upper()
        self.controller_security = self._client_security(controller_listener)
        # A broker reaches the active controller over the wire, unless its own process
        # is the quorum's only voter (a lone `tidelog serve`).
        self.in_process_controller = self.is_controller and len(voters) <= 1
        if self.is_broker and not self.in_process_controller:
            self.channel = RemoteController(voters, client_id=f"broker-{self.node_id}",
                                            security=self.controller_security)

    def _start_controller_role(self, config) -> None:
        """The ControllerServer, and the controller listeners its APIs are served on (bound, not yet serving)."""
        self.controller_server = ControllerServer(
            config, self.clock, self.cluster_id,
            co_located_broker_id=self.node_id if self.is_broker else None, security=self.controller_security)
        self.controller = self.controller_server.controller
        self.controller_server.start()
        # The controller's APIs only on controller listeners (Kafka's "listeners"
        # scopes): on a client listener anyone could fence or stop a broker. A
        # combined node's broker reaches its controller in-process.
        # With an authorizer, every controller listener checks the same ACLs as the
        # client listener, and the nodes' APIs need CLUSTER_ACTION (Kafka's ControllerApis).
        if not self.is_broker:
            self._serve_controller_apis(self.dispatcher)
        controller_limits = ServerLimits.from_config(config)   # KRaft's controller has its own
        for name, host, port in (self.controller_endpoints if self.is_broker else []):
            dispatcher = Dispatcher(self._observer())
            dispatcher.metadata_image = self._published_image
            self._serve_controller_apis(dispatcher)
            listener = self._new_listener(dispatcher, host, port, controller_limits, name)
            listener.bind()
            self.controller_listeners.append(listener)
        # Where this controller is reached, for DescribeQuorum's voter endpoints.
        self.controller_server.own_endpoint = (
            (self.listener_name, self.bind_host, self.bind_port) if not self.is_broker else
            (self.controller_endpoints[0][0], self.controller_endpoints[0][1], self.controller_listeners[0].port)
            if self.controller_listeners else None)

    async def _start_metrics(self) -> None:
        """``/metrics`` (the node's and the controller's collectors), ``/state`` and ``/event-loop``, served."""
        self.metrics.add_state(self)
        self.metrics.http.routes["/event-loop"] = lambda query: self.loop_monitor.summary()
        if self.is_controller:
            self.metrics.add_controller(self.controller_server)
        if self.is_broker:
            self.metrics.add_broker(self.node)
        await self.metrics.http.start()

    async def _until_running(self) -> None:
        """Start the broker (register, catch up, heartbeat until unfenced) and wait until it
        is RUNNING; BrokerStartupError after INITIAL_REGISTRATION_TIMEOUT_MS."""
        if not self.is_controller:
            self._tasks.append(asyncio.create_task(self._guarded(self._metadata_loop())))
        self._carry_out(lambda node: node.start(self.clock.monotonic_ms()))
        waiting = [asyncio.create_task(self._running.wait()), asyncio.create_task(self._stop_now.wait())]
        done, pending = await asyncio.wait(waiting, timeout=INITIAL_REGISTRATION_TIMEOUT_MS / 1000,
                                           return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if not self._running.is_set():
            raise BrokerStartupError("the broker did not become RUNNING within "
                                     f"{INITIAL_REGISTRATION_TIMEOUT_MS} ms (is the controller up?)")

    def _check_addresses(self, config) -> None:
        """Every address this node will listen on can be bound, or the start fails naming it."""
        addresses = [(f"listener {self.listener_name}", self.bind_host, self.bind_port)]
        if self.is_broker and self.is_controller:
            addresses += [(f"listener {name}", host, port) for name, host, port in self.controller_endpoints]
        if config["metrics.port"] is not None:
            addresses.append(("metrics.port", config["metrics.host"], config["metrics.port"]))
        for what, host, port in addresses:
            problem = address_problem(host, port)
            if problem is not None:
                raise BrokerStartupError(f"cannot listen on {host}:{port} ({what}): {problem} (another broker "
                                         "running there?); nothing was written to log.dirs")

    def _serve_controller_apis(self, dispatcher: Dispatcher) -> None:
        self.controller_server.register(dispatcher, self.authorizer)
        if self.authorizer is not None:
            dispatcher.gate = self.authorizer.controller_gate

    def _observer(self):
        return self.metrics.requests if self.metrics is not None else None

    def _new_listener(self, dispatcher: Dispatcher, host: str, port: int, limits: ServerLimits,
                      name: str | None = None) -> Listener:
        name = name or self.listener_name
        context = principal_of = authenticator = None
        protocol = self.config.security_protocol(name)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            authenticator = SaslAuthenticator.from_config(
                self.config, name, lambda user, mechanism: self.image.scram_credentials.get((user, mechanism)))
            authenticator.reauth_ms = self.config["connections.max.reauth.ms"]
            SaslApis(authenticator, self.config["connection.failed.authentication.delay.ms"]).register(dispatcher)
        if protocol in ("SSL", "SASL_SSL"):
            context = tls.server_context(self.config, name)
            rules = tls.setting(self.config, name, "ssl.principal.mapping.rules")
            tls.parse_mapping_rules(rules)              # a bad rule stops the start, not a connection
            principal_of = lambda certificate: tls.principal_for(tls.distinguished_name(certificate), rules)  # noqa: E731
        return Listener(dispatcher, host, port,
                        request_size_max_bytes=self.config["socket.request.max.bytes"],
                        idle_timeout_ms=self.config["connections.max.idle.ms"],
                        fault_handler=self._fault, limits=limits, ssl_context=context, principal_of=principal_of,
                        sasl=authenticator, sendfile=self.config["tidelog.network.sendfile.enable"])

    def _maybe_reload_tls(self) -> None:
        """This broker's dynamic TLS stores (IncrementalAlterConfigs on BROKER ``<id>``,
        as Kafka's kafka-configs --entity-type brokers): a changed one rebuilds the SSL
        listener's context; new connections get the new certificate, open ones keep theirs."""
        dynamic = dict(self.image.configs.get(ConfigResource(ConfigResourceType.BROKER, str(self.node_id)), {}))
        if dynamic == self._tls_dynamic:
            return
        self._tls_dynamic = dynamic
        overlay = BrokerConfig({**self.config.originals, **dynamic})
        for listener, name in [(self.listener, self.listener_name)]:
            if listener is None or self.config.security_protocol(name) not in ("SSL", "SASL_SSL"):
                continue
            try:
                listener.ssl_context = tls.server_context(overlay, name)
            except InvalidConfigError as e:
                logger.error("listener %s keeps its TLS certificate: the new settings fail: %s", name, e)
                continue
            logger.info("listener %s: reloaded its TLS key and trust stores (%s)", name, ", ".join(sorted(dynamic)))

    def _request_authorizer(self) -> RequestAuthorizer | None:
        name = self.config["authorizer.class.name"]
        if not name:
            return None
        if name not in AUTHORIZER_CLASS_NAMES:
            raise InvalidConfigError(f"authorizer.class.name={name} is not supported (use {AUTHORIZER_CLASS_NAMES[0]})")
        authorizer = Authorizer.from_config(self.config["super.users"], self.config["allow.everyone.if.no.acl.found"])
        logger.info("ACLs are on (super users: %s)", ", ".join(sorted(authorizer.super_users)) or "none")
        return RequestAuthorizer(authorizer, lambda: self.image)

    def _client_security(self, listener: str) -> ClientSecurity | None:
        """How to reach ``listener`` on other nodes: TLS for SSL and SASL_SSL, and for
        SASL the listener's own JAAS ``username``/``password`` (as Kafka's brokers use
        theirs on the inter-broker listener); None for PLAINTEXT."""
        try:
            protocol = self.config.security_protocol(listener)
        except InvalidConfigError:
            return None
        if protocol == "PLAINTEXT":
            return None
        context = tls.client_context(self.config, listener) if protocol in ("SSL", "SASL_SSL") else None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = str(self.config["sasl.mechanism.inter.broker.protocol"]).upper()
            if mechanism != "PLAIN":
                raise InvalidConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: tidelog nodes "
                                         "authenticate to each other with PLAIN (enable it on the listener)")
            jaas = listener_jaas(self.config, listener, mechanism)
            if jaas is None or "username" not in jaas.options or "password" not in jaas.options:
                raise InvalidConfigError(f"listener {listener} is {protocol}: its JAAS setting needs username and "
                                         "password for this node's own connections to it")
            return ClientSecurity(context, mechanism, jaas.options["username"], jaas.options["password"])
        return ClientSecurity(context)

    def _inter_broker_principal(self) -> str | None:
        """The principal the other brokers see this broker's own connections as (its
        ListTransactions questions are filtered by what that principal may DESCRIBE):
        the SASL username, the certificate's DN mapped by ssl.principal.mapping.rules
        when the listener asks for client certificates, else User:ANONYMOUS; None if the
        certificate cannot be read."""
        security, name = self.inter_broker_security, self.listener_name
        if security is not None and security.sasl_mechanism:
            return f"User:{security.username}"
        if security is None or security.ssl_context is None:
            return "User:ANONYMOUS"
        if str(tls.setting(self.config, name, "ssl.client.auth") or "none").lower() == "none":
            return "User:ANONYMOUS"
        location = tls.setting(self.config, name, "ssl.keystore.location")
        chain = tls.setting(self.config, name, "ssl.keystore.certificate.chain")
        try:
            with tempfile.TemporaryDirectory(prefix="tidelog-principal-") as directory:
                if not location and chain:
                    location = os.path.join(directory, "chain.pem")
                    with open(location, "w") as f:
                        f.write(tls._pem(str(chain)) + "\n")
                certificate = tls.certificate_subject(location)
        except (OSError, ValueError, TypeError):
            return None
        return tls.principal_for(tls.distinguished_name(certificate),
                                 tls.setting(self.config, name, "ssl.principal.mapping.rules"))

    def _start_broker_role(self) -> None:
        config = self.config
        if self.is_controller:
            # The broker reads the committed part of its controller's log (nothing
            # past the quorum's high watermark is ever published).
            metadata_log = self.controller_server.metadata_log
            self.controller_server.on_publish(self.publish)
        else:
            metadata_log = FileMetadataLog(config["log.dirs"][0], self.clock, follower=True)
        if self.authorizer is not None:
            self.dispatcher.gate = self.authorizer.gate
        if self.in_process_controller:
            self.channel = InProcessController(self.controller_server)
            self.admin = AdminApis(self, self.authorizer)
        else:
            self.admin = ForwardingAdminApis(self, self.authorizer)
        endpoint = Endpoint(self.listener_name, self.advertised_host, self.advertised_port or self.bind_port)
        self.node = BrokerNode(config, self.clock, metadata_log, self.cluster_id, uuid.uuid4(), (endpoint,),
                               fs=RealFileSystem(self.write_behind), tick_interval_ms=TICK_MS,
                               background=self._in_background,
                               new_directory_id=lambda: random_directory_id(secrets.randbits))
        self.fetcher_driver = FetcherDriver(self.node, self.listener_name, self._fault, self.inter_broker_security)
        kafka_apis = KafkaApis(ApiContext(
            node=self.node, cluster_id=self.cluster_id, controller_id=self.controller_id,
            listener_name=self.listener_name, auto_create_topics=self.auto_create_topics,
            next_producer_id=self.next_producer_id, authorizer=self.authorizer,
        ))
        kafka_apis.register(self.dispatcher)
        group_apis = GroupApis(self.node, self.listener_name, self.clock, self.create_internal_topic)
        group_apis.register(self.dispatcher)
        self.txn_apis = TxnApis(self.node, self.listener_name, self.clock, self.next_producer_id,
                                kafka_apis.handle_init_producer_id)
        self.txn_apis.channel.security = self.inter_broker_security
        self.node.txn_coordinator.take_producer_id = self.take_producer_id
        self.txn_apis.register(self.dispatcher)
        self.txn_apis.register_txn_offset_commit(self.dispatcher, group_apis.handle_txn_offset_commit)
        if self.authorizer is not None:
            group_apis.may_describe = self.authorizer.visible(ResourceType.GROUP)
            group_apis.authorizer = self.authorizer
            self.txn_apis.may_describe = self.authorizer.visible(ResourceType.TRANSACTIONAL_ID)
            principal, acls = self._inter_broker_principal(), self.authorizer.authorizer
            self.txn_apis.requests.missing_describe_acl = lambda: missing_describe_acl(
                acls, self.image.acls.values(), principal)
        kafka_apis.produce.txn = self.txn_apis.requests     # KIP-890 verification, if enabled
        self.admin.register(self.dispatcher)
        # Client quotas (KIP-13/124; server/quotas.py): from the metadata image, on the client listener.
        self.dispatcher.quotas = QuotaEnforcer(
            ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"]), self.clock,
            lambda: self.image, config["num.partitions"])
        if self.metrics is not None:
            self.metrics.registry.register(QuotaCollector(self.dispatcher.quotas))
        # DescribeQuorum on the client listener, as Kafka's brokers forward it
        # (kafka-metadata-quorum --bootstrap-server): answered by the quorum leader.
        self.dispatcher.register(ApiKey.DESCRIBE_QUORUM, self._describe_quorum, 0, 2)

    def _describe_quorum(self, header, request):
        if self.in_process_controller:
            return self.controller_server.handle_describe_quorum(header, request)
        return self.channel.forward(header.api_key, header.api_version, request)

    # -------------------------------------------------------------- the node

    def _carry_out(self, step) -> None:
        """Feed the node one input (``step(node)`` returns its effects) and do what it asks."""
        if self.node is None or self._stop_now.is_set():
            return
        try:
            effects = step(self.node)
        except Exception as e:
            self._fault(e)
            return
        for effect in effects:
            if isinstance(effect, SendRegistration):
                self._spawn(self._ask_controller(self.channel.register, effect.request,
                                                 lambda node, reply, now: node.on_registration_reply(reply, now),
                                                 lambda node, now, error: node.on_registration_failed(now, error)))
            elif isinstance(effect, SendHeartbeat):
                self._spawn(self._ask_controller(self.channel.heartbeat, effect.request,
                                                 lambda node, reply, now: node.on_heartbeat_reply(reply, now),
                                                 lambda node, now, error: node.on_heartbeat_failed(now, error)))
            elif isinstance(effect, SendAlterPartition):
                sent = effect.sent
                self._spawn(self._ask_controller(
                    self.channel.alter_partition, effect.request,
                    lambda node, reply, now: node.on_alter_partition_reply(reply, sent, now),
                    lambda node, now, error: node.on_alter_partition_failed(sent, now, error)))
            elif isinstance(effect, SendAssignReplicasToDirs):
                self._spawn(self._ask_controller(
                    self.channel.assign_replicas_to_dirs, effect.request,
                    lambda node, reply, now: node.on_assign_replicas_to_dirs_reply(reply, now),
                    lambda node, now, error: node.on_assign_replicas_to_dirs_failed(now, error)))
            elif isinstance(effect, FetcherAdded):
                self.fetcher_driver.start(effect.fetcher)
            elif isinstance(effect, FetcherRemoved):
                self.fetcher_driver.stop(effect.fetcher)
            elif isinstance(effect, MetadataPublished):
                self._maybe_reload_tls()
                self.fetcher_driver.wake_all()
                self._record_state_changes(lambda log_: log_.on_metadata_published(self.node.image))
                self._metadata_changed.set()
                self._metadata_changed = asyncio.Event()
            elif isinstance(effect, StateChanged):
                self._record_state_changes(lambda log_: log_.on_broker_state(effect.old, effect.new, effect.reason))
                if effect.new == BrokerState.RUNNING:
                    self._running.set()
            elif isinstance(effect, ResolveInDoubt):
                self.txn_apis.requests.resolve_in_doubt(
                    effect, lambda answered, reason, asked=effect: self._carry_out(
                        lambda node: node.on_in_doubt_answer(asked, answered, reason, node.clock.monotonic_ms())))
            elif isinstance(effect, StopNow):
                logger.info("stopping: %s", effect.reason)
                self._stop_now.set()
        self._wake.set()

    def _record_state_changes(self, step) -> None:
        """A diagnostic: its failure is logged, never the broker's."""
        if self.state_changes is not None:
            try:
                step(self.state_changes)
            except Exception:
                logger.exception("recording state changes failed")

    async def _ask_controller(self, call, request, on_reply, on_failed) -> None:
        try:
            reply = await asyncio.wait_for(call(request), CONTROLLER_REQUEST_TIMEOUT_S)
        except CONTROLLER_ERRORS as e:
            error = f"{type(e).__name__}: {e}"
            self._carry_out(lambda node: on_failed(node, self.clock.monotonic_ms(), error))
            return
        self._carry_out(lambda node: on_reply(node, reply, self.clock.monotonic_ms()))

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(self._guarded(coroutine))
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _guarded(self, coroutine) -> None:
        try:
            await coroutine
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._fault(e)

    def _fault(self, error: BaseException) -> None:
        """Kafka's fault handler: a broken invariant stops the process (exit status 1)."""
        logger.critical("fatal error, stopping node %d: %s: %s", self.node_id, type(error).__name__, error,
                     exc_info=(type(error), error, error.__traceback__))
        self.exit_status = 1
        self._stop_now.set()

    async def _tick_loop(self) -> None:
        """The controller's deadlines every tick; the broker node at its next wake-up."""
        while True:
            now = self.clock.monotonic_ms()
            delay_ms = TICK_MS
            if self.node is not None:
                delay_ms = min(delay_ms, max(0, self.node.next_wakeup_ms() - now))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)
                continue                          # an input moved the wake-up: recompute
            except asyncio.TimeoutError:
                pass
            if self.controller_server is not None:
                self.controller_server.on_tick()
            if self.node is not None:
                self._carry_out(lambda node: node.on_tick(self.clock.monotonic_ms()))
                self._record_state_changes(
                    lambda log_: log_.maybe_scan_truncations(self.node.log_manager.all_logs()))

    async def _metadata_loop(self) -> None:
        """A broker-only node follows the controller's committed metadata log."""
        metadata_log = self.node.metadata_log
        while True:
            try:
                error, records, high_watermark, snapshot_id = await self.channel.fetch_metadata(
                    self.node_id, self.node.broker_epoch, metadata_log.end_offset, 500)
                if error == 0 and snapshot_id is not None:
                    # Behind the controller's log start: load its snapshot (KIP-630), then the tail.
                    data = await self.channel.fetch_snapshot(self.node_id, snapshot_id)
                    metadata_log.install_snapshot(snapshot_id[0], snapshot_id[1], data)
                    logger.info("loaded the controller's metadata snapshot at offset %d", snapshot_id[0])
                    self.publish()
                    continue
            except CONTROLLER_ERRORS as e:
                logger.debug("metadata fetch failed: %s", e)
                await asyncio.sleep(0.2)
                continue
            if error != 0:
                logger.error("metadata fetch at offset %d answered error %d", metadata_log.end_offset, error)
                await asyncio.sleep(1)
                continue
            metadata_log.append_fetched(records, high_watermark)
            self.publish()

    # ------------------------------------------------ what the APIs see of us

    @property
    def image(self):
        return self.node.image if self.node is not None else self.controller_server.image

    def _published_image(self):
        """The image ApiVersions reads its finalized features from (None before start)."""
        return None if self.node is None and self.controller_server is None else self.image

    def publish(self) -> None:
        """New committed metadata (the controller wrote, or a fetch brought it)."""
        self._carry_out(lambda node: node.on_metadata_committed())

    async def wait_for_metadata(self, predicate, timeout_s: float = 5.0) -> bool:
        """Wait until ``predicate(image)`` holds (after forwarding an admin request)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate(self.image):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._metadata_changed.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    def topic_config_values(self, topic: str) -> dict[str, tuple[str, str]]:
        return self.node.topic_config_values(topic)

    def auto_create_topics(self, names: list[str]) -> dict[str, ErrorCode]:
        """Metadata's auto-creation (``auto.create.topics.enable``)."""
        if not self.config["auto.create.topics.enable"]:
            return {}
        alive = sum(1 for b in self.image.brokers.values() if not b.fenced)
        return self.admin.auto_create([offsets_topic(self.config, alive) if name == OFFSETS_TOPIC
                                       else CreatableTopic(name) for name in names])

    def create_internal_topic(self, topic: CreatableTopic) -> ErrorCode:
        """An internal topic a coordinator needs (``__consumer_offsets``), created on first use."""
        return self.admin.auto_create([topic]).get(topic.name, ErrorCode.NONE)

    async def next_producer_id(self) -> int:
        """Producer ids from blocks the controller allocates (Kafka's ProducerIdManager)."""
        block = self._producer_ids
        if block is None or block[0] >= block[1]:
            reply = await self.channel.allocate_producer_ids(self.node_id, self.node.broker_epoch)
            if reply.error_code != ErrorCode.NONE:
                raise RuntimeError(f"producer id allocation failed: {reply.error_code.name}")
            block = [reply.producer_id_start, reply.producer_id_start + reply.producer_id_len]
        self._producer_ids = [block[0] + 1, block[1]]
        return block[0]

    def take_producer_id(self) -> int:
        """A producer id from the block at hand, or -1 while a block is fetched: for the
        transaction coordinator's timer, which cannot wait (a timeout abort at the last
        epoch, TxnShard._abort_fenced, tries again at its next check)."""
        block = self._producer_ids
        if block is not None and block[0] < block[1]:
            self._producer_ids = [block[0] + 1, block[1]]
            return block[0]
        self._spawn(self.next_producer_id())          # fetches a block (and spends one id of it)
        return -1

    def _in_background(self, work: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        """The logs' background runner: ``work`` (a rolled segment's fsync) on the worker
        thread, ``done`` back on the event loop (Kafka's ``flush-log`` task)."""
        future = asyncio.get_running_loop().run_in_executor(self._background_executor, work)
        future.add_done_callback(lambda f: None if f.cancelled() else done(f.exception()))

    # ------------------------------------------------------------------- stop

    async def wait_stopped_by_node(self) -> None:
        await self._stop_now.wait()

    async def stop(self) -> None:
        logger.info("shutting down node %d", self.node_id)
        if self.node is not None and not self._stop_now.is_set():
            self._carry_out(lambda node: node.on_stop_requested(self.clock.monotonic_ms()))
            try:
                await asyncio.wait_for(self._stop_now.wait(),
                                       self.node.controlled_shutdown_timeout_ms / 1000 + 5)
            except asyncio.TimeoutError:
                logger.warning("the broker did not finish its controlled shutdown; stopping anyway")
        for task in list(self._tasks):
            task.cancel()
        if self.metrics is not None:
            await self.metrics.http.stop()
        if self.listener is not None:
            await self.listener.stop()
        for listener in self.controller_listeners:
            await listener.stop()
        if self.node is not None:
            self.fetcher_driver.shutdown()
            self.node.shutdown()                       # flushes every log inline
            self._background_executor.shutdown(wait=True)
            if self.write_behind is not None:
                self.write_behind.close()
            if not self.is_controller:
                try:
                    self.node.metadata_log.close()
                except (OSError, StorageError) as e:      # its log directory failed
                    logger.warning("the metadata log did not close cleanly: %s", e)
            if not self.in_process_controller:
                self.channel.close()
        if self.controller_server is not None:
            self.controller_server.close()
        logger.info("node %d stopped%s", self.node_id, " cleanly" if self.exit_status == 0 else " after a fatal error")


def plan_listeners(config: BrokerConfig, is_broker: bool, is_controller: bool
                   ) -> tuple[tuple[str, str, int] | None, list[tuple[str, str, int]]]:
    """(the client listener, the controller listeners) from ``listeners``,
    ``controller.listener.names`` and ``listener.security.protocol.map``, as Kafka
    checks them. Security protocols: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    (server/tls.py, server/sasl.py); any other name is refused.
    A controller-only node without ``controller.listener.names`` serves the
    controller on every listener."""
    endpoints = config.listener_endpoints()
    for name, host, port in endpoints:
        protocol = config.security_protocol(name)
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise InvalidConfigError(f"listener {name}://{host}:{port} has an unknown security protocol {protocol}")
    names = [name for name, _, _ in endpoints]
    if len(set(names)) != len(names):
        raise InvalidConfigError(f"listeners must have distinct names, got {', '.join(names)}")
    controller_names = {n.upper() for n in config["controller.listener.names"] or []}
    if is_controller and not is_broker and not controller_names:
        controller_names = set(names)
    client = [e for e in endpoints if e[0] not in controller_names]
    controller = [e for e in endpoints if e[0] in controller_names]
    if is_broker and not client:
        raise InvalidConfigError("a broker needs a listener not named in controller.listener.names")
    if len(client) > 1:
        raise InvalidConfigError(f"one client listener is supported, got {', '.join(e[0] for e in client)}")
    if not is_controller and controller:
        raise InvalidConfigError(f"listener {controller[0][0]} is a controller listener, "
                                 "but this node has no controller role")
    if is_controller and not is_broker and client:
        raise InvalidConfigError(f"a controller-only node listens on controller listeners only, "
                                 f"got {client[0][0]}")
    return (client[0] if client else None), controller


def load_config(path: str | None, overrides: list[str] | None = None) -> BrokerConfig:
    """``server.properties`` at ``path`` (if any) plus ``--override KEY=VALUE``s."""
    text = None
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidConfigError(f"cannot read {path}: {e.strerror}") from None
    return BrokerConfig.from_text(text, str(path), overrides)


# glibc serves a block above its mmap threshold (128 KiB, raised as such blocks are freed,
# lowered again by trims) with fresh pages from the kernel and gives them back on free,
# so every megabyte-sized produce request and its copies land in new pages: a page fault
# and a zeroed page per 4 KiB, about a tenth of the broker's CPU per produced byte
# (benchmarks/txn_bench.py, lean client: 2.4 vs 2.7 CPU s/GB). The JVM's pre-touched heap
# spares Kafka this. Blocks up to REQUEST_BUFFER_HEAP_MAX_BYTES (glibc's largest allowed
# threshold) come from the heap instead, and the heap keeps up to HEAP_KEEP_BYTES free
# at its top rather than trimming it; freed memory is reused, not returned.
REQUEST_BUFFER_HEAP_MAX_BYTES = 32 << 20
HEAP_KEEP_BYTES = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3       # mallopt parameters (malloc.h)


def keep_request_buffers() -> bool:
    """Tune glibc's malloc as above; False where the C library is not glibc."""
    import ctypes
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, REQUEST_BUFFER_HEAP_MAX_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, HEAP_KEEP_BYTES))


# The broker's files (the metadata log with the SCRAM keys, every record, checkpoints)
# are its user's alone: 0600 files, 0700 directories, whatever the caller's umask.
SERVER_UMASK = 0o077


# The cyclic garbage collector's thresholds in a server process (Python's default: 700, 10,
# 10). A broker's long-lived heap grows with its partitions, and a delayed fetch keeps a
# few objects per partition of its session for up to replica.fetch.wait.max.ms: with the
# default, those outlive two young collections, reach the oldest generation and set off a
# full collection of the whole heap about once a second (~170 ms each at 10,000 partitions
# RF=3: half of an idle broker's CPU, and as many loop stalls). A young generation of
# 5,000 lets them die young, and a full collection is considered after 100 middle ones,
# not 10 (docs/performance.md, "Idle brokers").
GC_THRESHOLDS = (5_000, 10, 100)


def run_server(properties: str | None, overrides: list[str]) -> int:
    os.umask(SERVER_UMASK)
    try:
        config = load_config(properties, overrides)
    except InvalidConfigError as e:
        logger.error("%s", e)
        return 2
    raise_open_file_limit()
    gc.set_threshold(*GC_THRESHOLDS)
    if not keep_request_buffers():
        logger.info("not glibc: request buffers use the C library's default allocation")
    set_retry_wait(time.sleep)   # checkpoint writes out of descriptors wait between tries
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass

    async def main() -> int:
        try:
            server = Server(config)      # checks the listeners against the settings
        except InvalidConfigError as e:
            logger.error("%s", e)
            return 2
        try:
            await server.start()
        except (BrokerStartupError, StorageFormatError, InvalidConfigError, OSError) as e:
            logger.error("cannot start: %s", e)
            await server.stop()
            return 1
        metrics = f", metrics on {server.metrics.http.url}" if server.metrics is not None else ""
        print(f"tidelog ready: node {server.node_id} listening on "
              f"{server.listener_name}://{server.bind_host}:{server.bind_port}{metrics}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        signalled = asyncio.create_task(stop.wait())
        stopped_by_node = asyncio.create_task(server.wait_stopped_by_node())
        await asyncio.wait([signalled, stopped_by_node], return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        stopped_by_node.cancel()
        await server.stop()
        await _cancel_remaining_tasks()
        return server.exit_status

    return asyncio.run(main())


async def _cancel_remaining_tasks(timeout_s: float = 5.0) -> None:
    """Cancel every task still running once the node stopped, again and again: under
    Python 3.11 ``asyncio.wait_for`` can swallow a cancellation that races its inner
    future, and a retry loop around it then runs on, so ``asyncio.run``'s single cancel
    hung the process after "stopped cleanly" (a broker-only node, about 1 SIGTERM in 5)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    current = asyncio.current_task()
    while True:
        pending = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
        if not pending:
            return
        if loop.time() > deadline:
            logger.warning("%d tasks did not stop: %s", len(pending), [task.get_coro() for task in pending])
            return
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
