"""Broker configuration with Kafka's names (``server.properties``).

Theory of operation. ``CONFIG_DEFS`` is the one table of every broker setting
tidelog understands: Kafka's name, type, default and a check. ``BrokerConfig``
parses a properties file plus ``--override KEY=VALUE`` pairs against it; a bad
value raises ``InvalidConfigError`` naming the key, an unknown key is logged and
ignored (as Kafka does). Derived settings (``log.retention.hours`` vs ``.ms``)
resolve the way Kafka resolves them.

Secrets. A setting of type ``PASSWORD`` (Kafka's ``ConfigDef.Type.PASSWORD``:
``sasl.jaas.config`` with every PLAIN user's password, the TLS key passwords, an
inline private key or PEM store) is a string like any other to the code that
reads it, but ``is_sensitive`` says so for its name, its
``listener.name.<listener>.`` form and its ``listener.name.<listener>.<mechanism>.``
form; a name tidelog cannot type counts as sensitive too (Kafka's
``maybeSensitive``). DescribeConfigs answers such a setting with a null value and
``is_sensitive=true``; logs and error messages show ``loggable_value`` (``[hidden]``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable

from tidelog.controller.heartbeat import UNCLEAN_RECOVERY_WAIT_MS
from tidelog.core.errors import InvalidConfigError
from tidelog.core.limits import WRITE_BEHIND_MAX_BYTES
from tidelog.replication.replica_selector import REPLICA_SELECTORS

logger = logging.getLogger("tidelog.config")

HIDDEN = "[hidden]"          # what a log line or error message shows of a secret (Kafka's Password.HIDDEN)


class PASSWORD:
    """The ``type`` of a secret setting (Kafka's ``ConfigDef.Type.PASSWORD``): read as a
    ``str``, never shown (see the module docstring)."""


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: type
    default: Any
    check: Callable[[Any], bool] | None = None
    doc: str = ""


def _positive(v) -> bool:
    return v > 0


def _non_negative(v) -> bool:
    return v >= 0


def _host_count(item: str) -> bool:
    """``host:count`` of ``max.connections.per.ip.overrides`` (an IPv6 host keeps its colons)."""
    host, _, count = item.rpartition(":")
    return bool(host.strip()) and count.strip().isdigit()


CONFIG_DEFS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("node.id", int, 1, _non_negative, "this node's id"),
    ConfigDef("process.roles", list, ["broker", "controller"], None, "broker, controller or both"),
    ConfigDef("listeners", list, ["PLAINTEXT://127.0.0.1:9092"], None, "where to listen"),
    ConfigDef("advertised.listeners", list, None, None, "what clients are told; defaults to listeners"),
    ConfigDef("log.dirs", list, ["./data"], None, "data directories"),
    ConfigDef("cluster.id", str, None, None, "cluster id; generated and stored on first start"),
    ConfigDef("num.partitions", int, 1, _positive, "partitions of an auto-created topic"),
    ConfigDef("default.replication.factor", int, 1, _positive),
    ConfigDef("auto.create.topics.enable", bool, True),
    ConfigDef("delete.topic.enable", bool, True),
    ConfigDef("log.segment.bytes", int, 1 << 30, lambda v: 14 <= v <= (1 << 31) - 1),
    ConfigDef("log.roll.ms", int, None, _positive),
    ConfigDef("log.roll.hours", int, 168, _positive),
    ConfigDef("log.retention.ms", int, None, lambda v: v >= -1),
    ConfigDef("log.retention.minutes", int, None, lambda v: v >= -1),
    ConfigDef("log.retention.hours", int, 168, lambda v: v >= -1),
    ConfigDef("log.retention.bytes", int, -1, lambda v: v >= -1),
    ConfigDef("log.retention.check.interval.ms", int, 300_000, _positive),
    ConfigDef("log.cleanup.policy", list, ["delete"], lambda v: set(v) <= {"compact", "delete"}),
    # The log cleaner (docs/compaction.md); log.cleaner.* topic defaults map to topic configs.
    ConfigDef("log.cleaner.enable", bool, True),
    ConfigDef("log.cleaner.dedupe.buffer.size", int, 128 * 1024 * 1024, _positive),
    ConfigDef("log.cleaner.io.buffer.size", int, 512 * 1024, _positive),
    ConfigDef("log.cleaner.backoff.ms", int, 15_000, _non_negative),
    ConfigDef("log.cleaner.min.cleanable.ratio", float, 0.5, lambda v: 0 <= v <= 1),
    ConfigDef("log.cleaner.delete.retention.ms", int, 86_400_000, _non_negative),
    ConfigDef("log.cleaner.min.compaction.lag.ms", int, 0, _non_negative),
    ConfigDef("log.cleaner.max.compaction.lag.ms", int, (1 << 63) - 1, _positive),
    ConfigDef("producer.id.expiration.ms", int, 86_400_000, _positive),
    ConfigDef("producer.id.expiration.check.interval.ms", int, 600_000, _positive),
    ConfigDef("log.index.size.max.bytes", int, 10 * 1024 * 1024, lambda v: v >= 8),
    ConfigDef("log.index.interval.bytes", int, 4096, _non_negative),
    ConfigDef("log.flush.interval.messages", int, (1 << 63) - 1, _positive),   # Kafka's: never by count
    ConfigDef("log.flush.interval.ms", int, None, _non_negative),
    ConfigDef("log.message.timestamp.before.max.ms", int, (1 << 63) - 1, _non_negative),
    ConfigDef("log.message.timestamp.after.max.ms", int, 3_600_000, _non_negative),
    ConfigDef("log.message.timestamp.type", str, "CreateTime",
              lambda v: v in ("CreateTime", "LogAppendTime")),
    ConfigDef("message.max.bytes", int, 1_048_588, _positive),
    ConfigDef("min.insync.replicas", int, 1, _positive),
    ConfigDef("unclean.leader.election.enable", bool, False),
    ConfigDef("auto.leader.rebalance.enable", bool, True),
    ConfigDef("leader.imbalance.check.interval.seconds", int, 300, _positive),
    ConfigDef("leader.imbalance.per.broker.percentage", int, 10, _non_negative),
    ConfigDef("compression.type", str, "producer",
              lambda v: v in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigDef("socket.request.max.bytes", int, 100 * 1024 * 1024, _positive),
    ConfigDef("connections.max.idle.ms", int, 600_000, _positive),
    # Client quotas (broker/quotas.py): the rate is measured over quota.window.num samples.
    ConfigDef("quota.window.num", int, 11, _positive),
    ConfigDef("quota.window.size.seconds", int, 1, _positive),
    # Replication throttles (broker/replication_quota.py, KIP-73): bytes/s of throttled
    # replicas' traffic (leader.replication.throttled.replicas and follower.… topic settings).
    ConfigDef("leader.replication.throttled.rate", int, (1 << 63) - 1, _non_negative,
              "bytes/s a leader sends to followers of its throttled replicas outside the ISR; dynamic"),
    ConfigDef("follower.replication.throttled.rate", int, (1 << 63) - 1, _non_negative,
              "bytes/s a follower fetches for its throttled replicas that lag; dynamic"),
    ConfigDef("replication.quota.window.num", int, 11, _positive),
    ConfigDef("replication.quota.window.size.seconds", int, 1, _positive),
    # Resource limits of the listeners (docs/security.md).
    ConfigDef("queued.max.request.bytes", int, 100 * 1024 * 1024, lambda v: v == -1 or v > 0,
              "bytes of requests being read, shared by a server's connections; -1 unbounded (Kafka's "
              "default; tidelog bounds it by default)"),
    ConfigDef("max.connections", int, (1 << 31) - 1, _non_negative,
              "connections a server (broker or controller) accepts at once; accepting waits beyond"),
    ConfigDef("max.connections.per.ip", int, (1 << 31) - 1, _non_negative,
              "connections from one address; further ones are closed at once"),
    ConfigDef("max.connections.per.ip.overrides", list, [], lambda v: all(_host_count(i) for i in v),
              "per-address exceptions: host:count,host:count"),
    ConfigDef("replica.lag.time.max.ms", int, 30_000, _positive),
    # Follower fetching (KIP-392, docs/replication.md): this broker's rack, registered with the
    # controller and shown in Metadata, and the rule a leader uses to send consumers to a replica.
    ConfigDef("broker.rack", str, None, None, "this broker's rack; a consumer's client.rack is matched to it"),
    ConfigDef("replica.selector.class", str, None, lambda v: v in REPLICA_SELECTORS,
              "which replica a consumer reads from: " + " or ".join(REPLICA_SELECTORS) + "; unset: the leader"),
    ConfigDef("request.timeout.ms", int, 30_000, _positive,
              "a broker's wait for another broker's answer (WriteTxnMarkers, KIP-890 verification) "
              "and for a marker's acks=all append"),
    ConfigDef("replica.fetch.max.bytes", int, 1_048_576, _positive),
    ConfigDef("replica.fetch.response.max.bytes", int, 10_485_760, _positive),
    ConfigDef("replica.fetch.wait.max.ms", int, 500, _non_negative),
    ConfigDef("replica.fetch.min.bytes", int, 1, _positive),
    ConfigDef("replica.fetch.backoff.ms", int, 1000, _non_negative),
    ConfigDef("max.incremental.fetch.session.cache.slots", int, 1000, _non_negative,
              "incremental fetch sessions (KIP-227) a broker keeps; 0: none"),
    ConfigDef("num.replica.fetchers", int, 1, _positive),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", int, 5000, _positive),
    ConfigDef("broker.session.timeout.ms", int, 9000, _positive),
    ConfigDef("broker.heartbeat.interval.ms", int, 2000, _positive),
    ConfigDef("controller.quorum.voters", list, None),
    ConfigDef("controller.quorum.bootstrap.servers", list, None, None,
              "host:port of controllers, for brokers that do not list the voters (KIP-853)"),
    ConfigDef("controller.quorum.election.timeout.ms", int, 1000, _positive,
              "a voter without a leader starts an election after 1-2x this (randomized)"),
    ConfigDef("controller.quorum.fetch.timeout.ms", int, 2000, _positive,
              "a follower that has not heard from the leader this long starts an election"),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", int, 20 * 1024 * 1024, _positive,
              "a controller snapshots its metadata image after this many new log bytes (KIP-630)"),
    ConfigDef("metadata.log.segment.bytes", int, 64 * 1024 * 1024, _positive,
              "segment size of __cluster_metadata"),
    ConfigDef("controller.listener.names", list, None),
    ConfigDef("listener.security.protocol.map", list,
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL",
               "CONTROLLER:PLAINTEXT"], None, "listener name → security protocol"),
    ConfigDef("inter.broker.listener.name", str, None),
    # TLS (server/tls.py); each also as listener.name.<listener>.<setting>. PEM only (KIP-651).
    ConfigDef("ssl.keystore.type", str, "PEM"),
    ConfigDef("ssl.keystore.location", str, None, None, "PEM file: private key and certificate chain"),
    ConfigDef("ssl.keystore.password", PASSWORD, None),
    ConfigDef("ssl.keystore.certificate.chain", PASSWORD, None, None, "PEM certificate chain, inline"),
    ConfigDef("ssl.keystore.key", PASSWORD, None, None, "PEM private key, inline"),
    ConfigDef("ssl.key.password", PASSWORD, None, None, "password of an encrypted private key"),
    ConfigDef("ssl.truststore.type", str, "PEM"),
    ConfigDef("ssl.truststore.location", str, None, None, "PEM file of trusted certificates"),
    ConfigDef("ssl.truststore.password", PASSWORD, None),
    ConfigDef("ssl.truststore.certificates", PASSWORD, None, None, "PEM trusted certificates, inline"),
    ConfigDef("ssl.client.auth", str, "none", lambda v: v.lower() in ("none", "requested", "required")),
    ConfigDef("ssl.enabled.protocols", list, ["TLSv1.2", "TLSv1.3"]),
    ConfigDef("ssl.protocol", str, "TLSv1.3"),
    ConfigDef("ssl.cipher.suites", list, []),
    ConfigDef("ssl.endpoint.identification.algorithm", str, "https"),
    ConfigDef("ssl.principal.mapping.rules", str, "DEFAULT"),
    # ACLs (server/authorization.py): on when authorizer.class.name names Kafka's StandardAuthorizer.
    ConfigDef("authorizer.class.name", str, ""),
    ConfigDef("super.users", str, "", None, "principals allowed everything, separated by ';'"),
    ConfigDef("allow.everyone.if.no.acl.found", bool, False),
    # SASL (server/sasl.py); the users are in listener.name.<l>.<mechanism>.sasl.jaas.config.
    ConfigDef("sasl.enabled.mechanisms", list, ["PLAIN"]),
    ConfigDef("sasl.mechanism.inter.broker.protocol", str, "PLAIN"),
    ConfigDef("sasl.jaas.config", PASSWORD, None),
    # Kerberos (GSSAPI) settings: tidelog has no Kerberos, but stores them (in server.properties,
    # or per listener as dynamic broker configs) and describes them as Kafka does; they do nothing.
    ConfigDef("sasl.kerberos.service.name", str, None, None, "Kerberos service name (stored; no Kerberos)"),
    ConfigDef("sasl.kerberos.kinit.cmd", str, "/usr/bin/kinit", None, "Kerberos kinit command (stored; no Kerberos)"),
    ConfigDef("sasl.kerberos.min.time.before.relogin", int, 60_000, None,
              "Kerberos relogin sleep (stored; no Kerberos)"),
    ConfigDef("sasl.kerberos.principal.to.local.rules", list, ["DEFAULT"], None,
              "Kerberos principal mapping rules (stored; no Kerberos)"),
    ConfigDef("sasl.kerberos.ticket.renew.jitter", float, 0.05, None, "Kerberos ticket renewal jitter (stored; no Kerberos)"),
    ConfigDef("sasl.kerberos.ticket.renew.window.factor", float, 0.8, None,
              "Kerberos ticket renewal point (stored; no Kerberos)"),
    ConfigDef("connections.max.reauth.ms", int, 0, _non_negative,
              "a SASL login must be renewed this often (KIP-368); 0: never"),
    ConfigDef("connection.failed.authentication.delay.ms", int, 100, _non_negative,
              "a failed authentication is answered this much later (then the connection closes)"),
    # The group coordinator (docs/groups.md).
    ConfigDef("group.initial.rebalance.delay.ms", int, 3000, _non_negative),
    ConfigDef("group.min.session.timeout.ms", int, 6000, _positive),
    ConfigDef("group.max.session.timeout.ms", int, 1_800_000, _positive),
    ConfigDef("group.max.size", int, 0x7FFFFFFF, _positive),
    ConfigDef("group.consumer.session.timeout.ms", int, 45_000, _positive),
    ConfigDef("group.consumer.heartbeat.interval.ms", int, 5_000, _positive),
    # The bounds of a consumer group's own settings (GROUP config resources, KIP-848).
    ConfigDef("group.consumer.min.session.timeout.ms", int, 45_000, _positive),
    ConfigDef("group.consumer.max.session.timeout.ms", int, 60_000, _positive),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", int, 5_000, _positive),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", int, 15_000, _positive),
    ConfigDef("offset.metadata.max.bytes", int, 4096, _non_negative),
    ConfigDef("offsets.topic.num.partitions", int, 50, _positive),
    ConfigDef("offsets.topic.replication.factor", int, 3, _positive,
              "capped to the brokers alive when the topic is created"),
    ConfigDef("offsets.topic.segment.bytes", int, 100 * 1024 * 1024, lambda v: 14 <= v <= (1 << 31) - 1),
    ConfigDef("offsets.retention.minutes", int, 10080, _positive),
    ConfigDef("offsets.retention.check.interval.ms", int, 600_000, _positive),
    ConfigDef("offsets.commit.timeout.ms", int, 5000, _positive),
    ConfigDef("transaction.state.log.num.partitions", int, 50, _positive),
    ConfigDef("transaction.state.log.replication.factor", int, 3, _positive,
              "capped to the brokers alive when the topic is created"),
    ConfigDef("transaction.state.log.min.isr", int, 2, _positive, "capped to the replication factor"),
    ConfigDef("transaction.state.log.segment.bytes", int, 100 * 1024 * 1024, lambda v: 14 <= v <= (1 << 31) - 1),
    ConfigDef("transaction.max.timeout.ms", int, 900_000, _positive),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10_000, _positive),
    ConfigDef("transactional.id.expiration.ms", int, 604_800_000, _positive),
    ConfigDef("transaction.partition.verification.enable", bool, True, None,
              "KIP-890: a leader asks the coordinator before appending a transaction's first batch"),
    # Not Kafka's (it always sends a plaintext Fetch's records with FileChannel.transferTo).
    ConfigDef("tidelog.network.sendfile.enable", bool, True, None,
              "send a Fetch's records from the segment files by sendfile on plaintext listeners "
              "(false: copy them through Python, for debugging)"),
    # Not Kafka's (its appends return once the bytes are in the page cache; tidelog's event
    # loop would wait for that copy, and for the kernel's throttling once the cache is full).
    ConfigDef("tidelog.log.write.behind.max.bytes", int, WRITE_BEHIND_MAX_BYTES, lambda v: 0 <= v <= 1 << 30,
              "appends to the log directories are written by a thread of their own, with at most "
              "this many bytes queued; a response waits until the writes before it are made "
              "(0: the event loop writes them itself)"),
    # Not Kafka's: KIP-966's unclean recovery by the longest log (docs/controller.md);
    # false leaves the controller's choice as Kafka 4.4's (the last known leader).
    ConfigDef("tidelog.unclean.recovery.log.ends.enable", bool, True, None,
              "report where this broker's leaderless replicas end in its heartbeats, so the "
              "controller elects the longest log when every eligible replica restarted uncleanly"),
    # Not Kafka's (KIP-966 proposed the same five minutes as unclean.recovery.timeout.ms).
    ConfigDef("tidelog.unclean.recovery.wait.ms", int, UNCLEAN_RECOVERY_WAIT_MS, lambda v: 0 <= v <= 86_400_000,
              "how long the controller's election of a partition whose eligible replicas all "
              "restarted uncleanly may wait for a replica that may hold a longer log to report it "
              "(at least broker.session.timeout.ms is waited where the rules wait at all)"),
    # Prometheus metrics with Kafka's names (docs/observability.md); off unless metrics.port is set.
    ConfigDef("metrics.port", int, None, lambda v: 0 <= v <= 65535,
              "serve Prometheus /metrics on this port (0 picks a free one)"),
    ConfigDef("metrics.host", str, "127.0.0.1", None,
              "the address /metrics (and /state) listens on; operator-only, as Kafka's JMX port"),
    # Not Kafka's (it has no /state). The setting is a path, so the token itself is never a
    # config value that DescribeConfigs or a log line could show.
    ConfigDef("metrics.state.token.file", str, None, None,
              "a file (keep it 0600) whose first line is the bearer token GET /state and /state-changes "
              "require (Authorization: Bearer ...); unset: they are open on metrics.host"),
]}


def config_def(name: str) -> ConfigDef | None:
    """The definition of ``name``, or of the setting it overrides for one listener
    (``listener.name.<listener>.<setting>``) or one listener's SASL mechanism
    (``listener.name.<listener>.<mechanism>.<setting>``); None if tidelog has none."""
    definition = CONFIG_DEFS.get(name)
    if definition is not None or not name.startswith("listener.name."):
        return definition
    parts = name[len("listener.name."):].split(".")
    for skip in (1, 2):                                 # the listener, then the mechanism
        definition = CONFIG_DEFS.get(".".join(parts[skip:]))
        if definition is not None:
            return definition
    return None


def is_password(name: str) -> bool:
    """``name`` (in any listener-prefixed form) is a PASSWORD setting."""
    definition = config_def(name)
    return definition is not None and definition.type is PASSWORD


def is_sensitive(name: str) -> bool:
    """Never to be shown: a PASSWORD setting, or a name of unknown type (Kafka's
    ``maybeSensitive``). A topic config, or its cluster-wide synonym, is typed."""
    from tidelog.controller.config_defs import CLUSTER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS
    definition = config_def(name)
    if definition is not None:
        return definition.type is PASSWORD
    return name not in TOPIC_CONFIGS and name not in CLUSTER_CONFIGS and name not in GROUP_CONFIGS


def loggable_value(name: str, value: Any) -> Any:
    """``value`` as a log line or error message may show it."""
    return HIDDEN if is_sensitive(name) else value


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java ``.properties`` subset: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    trailing-backslash line continuation."""
    props: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            logical += line[:-1]
            continue
        line, logical = logical + line, ""
        for sep_index, ch in enumerate(line):
            if ch in "=:":
                key, value = line[:sep_index].strip(), line[sep_index + 1:].strip()
                break
        else:
            # The line is not shown: it may be part of a secret (a jaas line without its "\").
            raise InvalidConfigError(f"{source}:{number}: expected key=value")
        if not key:
            raise InvalidConfigError(f"{source}:{number}: empty key")
        props[key] = value
    return props


def _shown(name: str, raw: str) -> str:
    return HIDDEN if is_sensitive(name) else repr(raw)


def _coerce(definition: ConfigDef, raw: str) -> Any:
    name = definition.name
    try:
        if definition.type is bool:
            lowered = raw.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            value = lowered == "true"
        elif definition.type is int:
            value = int(raw.strip())
        elif definition.type is float:
            value = float(raw.strip())
        elif definition.type is list:
            value = [item.strip() for item in raw.split(",") if item.strip()]
        else:
            value = raw.strip()
    except ValueError as e:
        raise InvalidConfigError(f"invalid value {_shown(name, raw)} for configuration {name}: {e}") from None
    if definition.check is not None and not definition.check(value):
        raise InvalidConfigError(f"invalid value {_shown(name, raw)} for configuration {name}")
    return value


def did_you_mean(name: str) -> str:
    """`` (did you mean log.retention.hours?)`` for a name close to a known setting's, else ``""``."""
    import difflib
    close = difflib.get_close_matches(name, CONFIG_DEFS, n=2, cutoff=0.8)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class BrokerConfig:
    """Typed access to the broker's settings: ``config["log.dirs"]``."""

    def __init__(self, props: dict[str, str] | None = None):
        self._values: dict[str, Any] = {name: d.default for name, d in CONFIG_DEFS.items()}
        self.originals = dict(props or {})
        for key, raw in self.originals.items():
            definition = CONFIG_DEFS.get(key)
            if definition is None and key.startswith("listener.name."):
                continue                   # a per-listener setting: read through ``originals``
            if definition is None:
                logger.warning("ignoring unknown configuration %s%s", key, did_you_mean(key))
                continue
            self._values[key] = _coerce(definition, raw)

    @classmethod
    def from_text(cls, properties_text: str | None = None, source: str = "server.properties",
                  overrides: list[str] | None = None) -> "BrokerConfig":
        """``server.properties`` text (read by the caller) plus ``--override KEY=VALUE``s."""
        props: dict[str, str] = {}
        if properties_text is not None:
            props.update(parse_properties(properties_text, source))
        for override in overrides or []:
            if "=" not in override:
                raise InvalidConfigError(f"--override expects KEY=VALUE, got {override!r}")
            key, value = override.split("=", 1)
            props[key.strip()] = value.strip()
        return cls(props)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    @property
    def log_retention_ms(self) -> int:
        if self._values["log.retention.ms"] is not None:
            return self._values["log.retention.ms"]
        if self._values["log.retention.minutes"] is not None:
            return self._values["log.retention.minutes"] * 60_000
        hours = self._values["log.retention.hours"]
        return -1 if hours == -1 else hours * 3_600_000

    @property
    def log_roll_ms(self) -> int:
        if self._values["log.roll.ms"] is not None:
            return self._values["log.roll.ms"]
        return self._values["log.roll.hours"] * 3_600_000

    def security_protocol(self, listener_name: str) -> str:
        """The listener's security protocol (``listener.security.protocol.map``)."""
        for item in self._values["listener.security.protocol.map"]:
            name, sep, protocol = item.partition(":")
            if not sep:
                raise InvalidConfigError(f"invalid listener.security.protocol.map entry {item!r}: expected NAME:PROTOCOL")
            if name.strip().upper() == listener_name:
                return protocol.strip().upper()
        raise InvalidConfigError(f"listener {listener_name} has no security protocol in "
                                 "listener.security.protocol.map")

    def listener_endpoints(self, advertised: bool = False) -> list[tuple[str, str, int]]:
        """``[(listener_name, host, port)]`` from (advertised.)listeners."""
        items = self._values["advertised.listeners"] if advertised else None
        items = items or self._values["listeners"]
        endpoints = []
        for item in items:
            name, sep, address = item.partition("://")
            host, colon, port = address.rpartition(":")
            if not sep or not colon or not port.isdigit():
                raise InvalidConfigError(f"invalid listener {item!r}: expected NAME://HOST:PORT")
            endpoints.append((name.upper(), host.strip("[]") or "0.0.0.0", int(port)))
        return endpoints


# ---------------------------------------------------------------- KIP-226: dynamic broker configs
#
# The broker settings tidelog has that Kafka lets operators change while brokers run
# (Kafka's DynamicBrokerConfig), by IncrementalAlterConfigs / AlterConfigs on BROKER "<id>"
# (one broker) or BROKER "" (the cluster-wide default). Changes are ConfigRecords in the
# metadata log, like Kafka's. How tidelog applies each:
#   LIVE  at once, by every broker when it publishes the record: the cluster-level names of
#         topic settings (the topic's value, else this broker's, else the cluster default),
#         the replication throttle rates (broker/replication_quota.py)
#         and a listener's TLS key and trust stores (server/runtime.py rebuilds its context);
#   STORED  kept and described (DescribeConfigs shows the dynamic value and its source),
#         but tidelog reads the setting from server.properties only.
# A name tidelog does not know is stored as Kafka stores it (and described as a secret of
# unknown type); a known setting that is not dynamic is refused with Kafka's error.
LIVE, STORED = "live", "stored"
_DYNAMIC_STORED = (
    "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "num.replica.fetchers",
    "producer.id.expiration.ms", "transaction.partition.verification.enable",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.mechanism.inter.broker.protocol",
    "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols", "ssl.endpoint.identification.algorithm",
    "ssl.protocol", "ssl.keystore.type", "ssl.truststore.type",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor")
# The settings Kafka takes only per listener (listener.name.<listener>.<setting>): its reconfigurable
# key and trust stores.
_PER_LISTENER_ONLY = frozenset((
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates"))
_LISTENER_PREFIX = "listener.name."


@functools.cache
def dynamic_broker_configs() -> dict[str, str]:
    """``{name: LIVE | STORED}`` of every dynamic broker setting tidelog has (built once;
    not to be changed by callers)."""
    from tidelog.controller.config_defs import CLUSTER_CONFIGS
    out = dict.fromkeys(_DYNAMIC_STORED, STORED)
    out.update(dict.fromkeys((n for n in CLUSTER_CONFIGS if n in CONFIG_DEFS or n not in out), LIVE))
    out.update(dict.fromkeys(("leader.replication.throttled.rate", "follower.replication.throttled.rate"), LIVE))
    out.update(dict.fromkeys((n for n in _PER_LISTENER_ONLY if n not in ("ssl.keystore.type",
                                                                           "ssl.truststore.type")), LIVE))
    return out


def _base_name(name: str) -> tuple[str, bool]:
    """The setting a name stands for, and whether it is listener-prefixed."""
    if not name.startswith(_LISTENER_PREFIX):
        return name, False
    parts = name[len(_LISTENER_PREFIX):].split(".")
    for skip in (1, 2):                                 # the listener, then a SASL mechanism
        base = ".".join(parts[skip:])
        if base in CONFIG_DEFS or base.startswith(("ssl.", "sasl.")):
            if skip == 2 and not base.startswith("sasl."):
                continue
            return base, True
    return ".".join(parts[1:]), True


def is_listener_setting(name: str) -> bool:
    """A TLS or SASL setting (or a listener's own), which Kafka takes per broker only."""
    base, prefixed = _base_name(name)
    return prefixed or base.startswith(("ssl.", "sasl.")) or base in ("listeners", "listener.security.protocol.map")


def broker_config_dynamic(name: str) -> bool:
    """Whether ``name`` may be changed while brokers run (DescribeConfigs' read_only false)."""
    return not name.startswith(_LISTENER_PREFIX) and name in dynamic_broker_configs()


def broker_config_applied_live(name: str) -> bool:
    base, prefixed = _base_name(name)
    if prefixed:
        return base in _PER_LISTENER_ONLY and base not in ("ssl.keystore.type", "ssl.truststore.type")
    return dynamic_broker_configs().get(name) == LIVE


def _java_set(names) -> str:
    return "[" + ", ".join(names) + "]"


def validate_dynamic_broker_change(resource_name: str, changes: dict[str, str | None]) -> str | None:
    """Kafka's refusal (its INVALID_REQUEST message) of a change to the dynamic settings of
    broker ``resource_name`` ("" for the cluster-wide default), or None. In Kafka's order:
    settings that are not dynamic, per-listener settings without their listener prefix,
    per-broker settings at the cluster level, then each value against its type and range.
    A deletion is never refused (it can only bring a setting back to its static value)."""
    from tidelog.controller.config_defs import CLUSTER_CONFIGS
    dynamic = dynamic_broker_configs()
    set_names = [n for n, v in changes.items() if v is not None]
    fixed = [n for n in set_names if not n.startswith(_LISTENER_PREFIX) and n in CONFIG_DEFS and n not in dynamic]
    if fixed:
        return f"Cannot update these configs dynamically: {_java_set(fixed)}"
    unprefixed = [n for n in set_names if n in _PER_LISTENER_ONLY]
    if unprefixed:
        return ("These security configs can be dynamically updated only per-listener using the listener prefix: "
                + _java_set(unprefixed))
    if resource_name == "":
        per_broker = [n for n in set_names if is_listener_setting(n)]
        if per_broker:
            return ("Cannot update these configs at default cluster level, broker id must be specified: "
                    + _java_set(per_broker))
    for name in set_names:
        value = changes[name]
        base, _ = _base_name(name)
        if base in CLUSTER_CONFIGS:
            definition = CLUSTER_CONFIGS[base]
            if base in _BROKER_LEVEL_CHECKS:         # Kafka's broker-level rule differs from the topic's
                definition = dataclasses.replace(definition, validator=None)
            try:
                typed = definition.parse(value, base)
            except InvalidConfigError as e:
                return str(e)
            problem = _BROKER_LEVEL_CHECKS.get(base, lambda v: None)(typed)
            if problem:
                return problem.format(value=value, typed=typed, name=base)
            continue
        definition = CONFIG_DEFS.get(base)
        if definition is not None and definition.type is not PASSWORD:
            problem = _kafka_value_problem(definition, value)
            if problem:
                return f"Invalid value {value} for configuration {base}: {problem}"
    return None


# Broker settings whose Kafka type is not the one their Python type suggests (int: INT).
_BROKER_CONFIG_TYPES = {
    **dict.fromkeys(("offsets.topic.replication.factor", "transaction.state.log.replication.factor"), "SHORT"),
    **dict.fromkeys(("log.roll.ms", "log.retention.ms", "log.retention.bytes", "log.retention.check.interval.ms",
                     "log.cleaner.dedupe.buffer.size", "log.cleaner.backoff.ms", "log.cleaner.delete.retention.ms",
                     "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
                     "log.flush.interval.messages", "log.flush.interval.ms", "log.message.timestamp.before.max.ms",
                     "log.message.timestamp.after.max.ms", "leader.imbalance.check.interval.seconds",
                     "connections.max.idle.ms", "queued.max.request.bytes", "replica.lag.time.max.ms",
                     "replica.high.watermark.checkpoint.interval.ms", "producer.id.expiration.check.interval.ms",
                     "metadata.log.max.record.bytes.between.snapshots", "connections.max.reauth.ms",
                     "offsets.retention.check.interval.ms", "leader.replication.throttled.rate",
                     "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second"), "LONG"),
    **dict.fromkeys(("max.connections.per.ip.overrides", "listener.security.protocol.map"), "STRING"),
    "sasl.kerberos.min.time.before.relogin": "LONG",
}

# The broker-level names of topic settings whose rule in Kafka's broker config differs from
# the topic setting's (measured on Kafka 4.4.0), in Kafka's words. Kafka takes any log.retention.ms and log.flush.interval.ms
# (-3 too); tidelog keeps the topic rule for those two, which its logs could not apply.
_BROKER_LEVEL_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "log.roll.ms": lambda v: None if v >= 1 else "requirement failed: {name} must be greater than or equal to 1",
    "log.roll.jitter.ms": lambda v: None if v >= 0 else
        "requirement failed: {name} must be greater than or equal to 0",
}


_PYTHON_CONFIG_TYPES = {bool: "BOOLEAN", str: "STRING", int: "INT", float: "DOUBLE", list: "LIST"}
# The numbers each of Kafka's integer types holds (ConfigDef parses with Short/Integer/Long.parseX).
_INTEGER_BOUNDS = {"SHORT": 1 << 15, "INT": 1 << 31, "LONG": 1 << 63}


def kafka_config_type(definition: ConfigDef) -> str:
    """Kafka's ConfigDef.Type name of a broker setting (DescribeConfigs' config_type, and
    the words of a refusal)."""
    return _BROKER_CONFIG_TYPES.get(definition.name, _PYTHON_CONFIG_TYPES.get(definition.type, "STRING"))


def _kafka_value_problem(definition: ConfigDef, value: str) -> str | None:
    """Why ``value`` is no value of ``definition``, in Kafka's words (ConfigDef's parser and
    its Range / ValidString validators); None if it is one."""
    kafka_type = kafka_config_type(definition)
    try:
        typed = _coerce(ConfigDef(definition.name, definition.type, definition.default), value)
    except InvalidConfigError:
        if definition.type is bool:
            return "Expected value to be either true or false"
        return f"Not a number of type {kafka_type}"
    bound = _INTEGER_BOUNDS.get(kafka_type)
    if bound is not None and not -bound <= typed < bound:
        return f"Not a number of type {kafka_type}"
    if definition.check is None or definition.check(typed):
        return None
    if definition.check is _non_negative:
        return "Value must be at least 0"
    if definition.check is _positive:
        return "Value must be at least 1"
    if definition.name == "ssl.client.auth":
        return "String must be one of: required, requested, none"
    return "Invalid value"


def existing_listener_refusal(changes: dict[str, str | None], listener_name: str) -> str | None:
    """Kafka's refusal of a listener setting without a listener prefix on one broker: it would
    change every listener, and an existing listener is only reconfigured by its prefixed
    settings (Kafka names the first listener it checks; tidelog its first)."""
    if any(v is not None and not n.startswith(_LISTENER_PREFIX) and is_listener_setting(n)
           and n not in _PER_LISTENER_ONLY for n, v in changes.items()):
        return ("Invalid value org.apache.kafka.common.config.ConfigException: Configs cannot be updated "
                f"dynamically for existing listener ListenerName({listener_name}), restart broker or create a "
                "new listener for update for configuration Invalid dynamic configuration")
    return None
