"""Differential conformance: the same requests to Apache Kafka and to tidelog, answers compared.

A real Kafka (the session's ``kafka_node``, tests/kafka_fixture.py) and a ``tidelog serve``
with the same settings get the same request bodies, sent with tidelog's own wire client,
at the lowest and at the highest version of each API that both serve
(scenarios.py). Every field of every answer is compared (differential.py), except what
must differ between two servers: ids they make up, timestamps, host names and ports.
``unauthorized`` runs on a pair with authorizers and SASL/PLAIN users (``secure_nodes``),
``leader_change`` and ``follower_truncation`` on three brokers a side (``cluster_pair``); each pair starts once, when
its first scenario runs.

Every difference is written to docs/conformance.md when the whole module runs. A test
fails on a difference that ``ALLOWED`` below does not name; each entry there says why
the difference is accepted. Fix tidelog rather than add an entry where the difference is
small.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tidelog.protocol.api_keys import ApiKey
from tidelog.protocol.client import KafkaConnection
from tidelog.testing import Broker, Cluster

from tests.conformance.differential import ABSENT, HOST, Difference, Outcome, Side, common_versions, compare
from tests.conformance.scenarios import CLUSTER_SCENARIOS, MAIN_API, SCENARIOS, SECURE_SCENARIOS
from tests.conftest import KAFKA_NODE_SETTINGS
from tests.kafka_fixture import KafkaCluster, free_port, kafka_version, missing_tools

REPORT = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
MODES = ("low", "high")

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=f"real Kafka unavailable: {missing_tools()}")

# Differences accepted, each with its reason: patterns over Difference.key, that is
# "<scenario>@<low|high> <answer><field path>[ (only Kafka)| (only tidelog)]", in which
# "*" matches anything and every other character itself. The first matching entry wins.
_NOT_SERVED = ("APIs tidelog does not serve, so does not advertise: SASL on a PLAINTEXT listener (tidelog "
               "advertises SaslHandshake/SaslAuthenticate only on its SASL listeners), delegation "
               "tokens, partition reassignments, UpdateFeatures, UnregisterBroker, "
               "ListConfigResources, DescribeTopicPartitions, share groups and their state APIs, Raft voter "
               "changes, streams groups (docs/interop.md, Known differences)")
_NEWER = "a version newer than tidelog implements"
_FEATURES = ("tidelog advertises only the feature levels it implements (ApiVersions, kafka-features): "
             "share.version 0 (no share groups), streams.version 0 (no KIP-1071 streams groups), kraft.version 0 "
             "(static controller voters); docs/controller.md, Finalized features")
_ELR = ("Kafka 4 with eligible leader replicas (KIP-966, on by default in a new cluster) writes a cluster-wide "
        "min.insync.replicas when the cluster is formatted, so it is a dynamic default there; tidelog's ELR uses each "
        "topic's effective min ISR and writes no cluster-wide value")
ALLOWED: dict[str, str] = {
    # ApiVersions: what is served.
    "api_versions@* api_versions.api_keys[0].min_version":
        "Produce v0-v2 (message formats v0 and v1) are not served; Kafka 4 does not serve them either but still "
        "advertises v0 because of a librdkafka bug (KAFKA-18659), which recent librdkafka does not have",
    "api_versions@* api_versions.api_keys[8].max_version": f"OffsetCommit v10 (topic ids, KIP-848): {_NEWER}",
    "api_versions@* api_versions.api_keys[9].max_version": f"OffsetFetch v10 (topic ids, KIP-848): {_NEWER}",
    "api_versions@* api_versions.api_keys[15].max_version":
        f"DescribeGroups v6 (GROUP_ID_NOT_FOUND for an unknown group, KIP-1043): {_NEWER}",
    "api_versions@* api_versions.api_keys[18].max_version":
        "ApiVersions v5 (cluster and node id checks, KIP-1242): kio 0.6, tidelog's codec, has no schema for it",
    "api_versions@* api_versions.api_keys[27].max_version":
        f"WriteTxnMarkers v2 (the marker's transaction version, KIP-1228): {_NEWER}",
    "api_versions@* api_versions.api_keys[28].max_version":
        "TxnOffsetCommit v6 (topic ids) has no schema in kio, tidelog's codec",
    "api_versions@* api_versions.api_keys[35].max_version": f"DescribeLogDirs v5 (IsCordoned): {_NEWER}",
    "api_versions@* api_versions.api_keys[42].max_version":
        "DeleteGroups v3 (an error message per group): kio has no schema for it",
    "api_versions@* api_versions.api_keys[66].max_version":
        f"ListTransactions v2 (a transactional id pattern, KIP-1152): {_NEWER}",
    "api_versions@* api_versions.api_keys[*] (only Kafka)": _NOT_SERVED,
    "api_versions@high api_versions.supported_features[*].max_version": _FEATURES,
    "api_versions@high api_versions.finalized_features[*] (only Kafka)": _FEATURES,
    # Metadata.
    "metadata@low metadata.topics[conformance-absent-low]*":
        "Metadata v0-v3 auto-create a missing topic: tidelog creates it before answering and describes it at "
        "once; Kafka (KRaft) passes the creation to its controller and answers UNKNOWN_TOPIC_OR_PARTITION "
        "meanwhile. A client asks again either way",
    # Topic configs.
    "*.configs[remote.*] (only Kafka)": "tiered storage (KIP-405) is not implemented",
    "*.configs[min.insync.replicas].config_source": _ELR,
    "*.configs[min.insync.replicas].synonyms": _ELR,
    "describe_configs_*@high *.documentation": "Kafka's documentation text is not copied into tidelog",
    "create_topics_invalid@* refused.topics[conformance-bad-segment-*].error_message":
        "segment.bytes may be as small as 14 bytes in tidelog (Kafka 4: 1 MiB, with an internal setting for "
        "tests), so that tests roll segments with a few records",
    # Broker configs.
    "describe_configs_broker@* all.results[1].configs[*] (only Kafka)":
        "tidelog describes the broker settings it has (with Kafka's names), not the whole of Kafka's broker "
        "configuration (docs/interop.md, Known differences)",
    "describe_configs_broker@* all.results[1].configs[*] (only tidelog)":
        "tidelog settings that are no Kafka broker config: allow.everyone.if.no.acl.found and super.users "
        "(Kafka's authorizer's), cluster.id (Kafka keeps it in meta.properties), "
        "leader.imbalance.per.broker.percentage (gone from Kafka 4), metrics.* (tidelog's Prometheus endpoint), "
        "producer.id.expiration.check.interval.ms (internal in Kafka 4), leader.replication.throttled.rate and "
        "follower.replication.throttled.rate (dynamic settings Kafka describes only once set), tidelog.* "
        "(tidelog's own: write-behind, sendfile, unclean recovery)",
    "describe_configs_broker@* all.results[1].configs[metadata.log.segment.bytes]*":
        "tidelog rolls its metadata log every 64 MiB (Kafka: 1 GiB)",
    "describe_configs_broker@* all.results[1].configs[queued.max.request.bytes]*":
        "tidelog bounds the bytes of queued requests (100 MiB); Kafka's default is no bound (-1)",
    "describe_configs_broker@* all.results[1].configs[sasl.enabled.mechanisms]*":
        "tidelog has no Kerberos: its default SASL mechanism is PLAIN (Kafka: GSSAPI)",
    "describe_configs_broker@* all.results[1].configs[sasl.mechanism.inter.broker.protocol]*":
        "tidelog has no Kerberos: its default SASL mechanism is PLAIN (Kafka: GSSAPI)",
    "describe_configs_broker@* all.results[1].configs[ssl.keystore.type]*":
        "tidelog reads PEM stores only (Python's ssl); Kafka's default store type is JKS",
    "describe_configs_broker@* all.results[1].configs[ssl.truststore.type]*":
        "tidelog reads PEM stores only (Python's ssl); Kafka's default store type is JKS",
}

# Settings of the Kafka fixture that are about that node alone (tidelog gets the rest).
NODE_SETTINGS = {"process.roles", "node.id", "listeners", "advertised.listeners", "log.dirs",
                 "controller.quorum.voters", "controller.listener.names", "inter.broker.listener.name",
                 "listener.security.protocol.map"}


@pytest.fixture(scope="module")
def tidelog_node(kafka_node):
    settings = {k: v for k, v in kafka_node.broker_settings.items() if k not in NODE_SETTINGS}
    with Broker(overrides=settings) as broker:
        yield broker


# The secure pair: SASL/PLAIN users, "admin" a super user, "alice" without any ACL.
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def secure_nodes(kafka_node):
    """A Kafka node and a tidelog serve with Kafka's StandardAuthorizer (and tidelog's
    authorizer.class.name naming it), clients on SASL_PLAINTEXT with PLAIN. Kafka's own
    brokers and controller talk on its PLAINTEXT listeners as User:ANONYMOUS, a super user
    there; tidelog's node uses its controller listener's SASL login, "admin"."""
    settings = {**KAFKA_NODE_SETTINGS, "authorizer.class.name": STANDARD_AUTHORIZER}
    kafka = KafkaCluster(overrides={**settings, "super.users": "User:admin;User:ANONYMOUS"}, sasl_users=USERS)
    kafka.start()
    try:
        jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
        controller_port = free_port()
        tidelog_settings = {k: v for k, v in kafka.broker_settings.items() if k not in NODE_SETTINGS}
        with Broker(overrides={
                **tidelog_settings, "super.users": "User:admin",
                "listeners": f"SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": jaas}) as tidelog:
            yield {"kafka": kafka.sasl_port, "tidelog": tidelog.port}
    finally:
        kafka.close()


class KafkaControl:
    """What a cluster scenario may do to the three Kafka brokers."""

    def __init__(self, kafka: KafkaCluster):
        self.kafka = kafka
        self.broker_ids = [n.node_id for n in kafka.brokers]

    def port(self, node_id: int) -> int:
        return self.kafka.node(node_id).port

    def stop(self, node_id: int) -> None:
        self.kafka.stop_node(node_id)

    def start(self, node_id: int) -> None:
        self.kafka.start_node(node_id)


class TidelogControl:
    """The same for the three tidelog brokers (a node's port may change on a restart)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.broker_ids = [n.node_id for n in cluster.brokers]

    def port(self, node_id: int) -> int:
        return self.cluster.port(node_id)

    def stop(self, node_id: int) -> None:
        self.cluster.stop(node_id)

    def start(self, node_id: int) -> None:
        self.cluster.start_node(node_id)


# Quick fencing of a broker that stopped heartbeating, on both sides.
CLUSTER_SETTINGS = {**KAFKA_NODE_SETTINGS, "broker.session.timeout.ms": "6000",
                    "broker.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module")
def cluster_pair():
    """Three Kafka brokers beside one KRaft controller, and three tidelog brokers beside
    one controller, with the same broker settings (replication factor 3, min ISR 2 for
    the internal topics)."""
    kafka = KafkaCluster(brokers=3, controllers=1, overrides=CLUSTER_SETTINGS, start_timeout_s=180)
    kafka.start()
    try:
        settings = {k: v for k, v in kafka.broker_settings.items() if k not in NODE_SETTINGS}
        with Cluster(brokers=3, overrides=settings) as tidelog:
            yield {"kafka": KafkaControl(kafka), "tidelog": TidelogControl(tidelog)}
    finally:
        kafka.close()


class Harness:
    def __init__(self, kafka_port: int, tidelog_port: int):
        self.ports = {"kafka": kafka_port, "tidelog": tidelog_port}
        self.secure_ports: dict[str, int] | None = None
        self.clusters: dict | None = None
        self.served: dict[str, dict[int, tuple[int, int]]] = {}
        self.outcomes: dict[tuple[str, str], Outcome] = {}
        self.versions: dict[int, tuple[int, int]] = {}

    async def negotiate(self) -> None:
        for name, port in self.ports.items():
            connection = await KafkaConnection.connect(HOST, port, client_id="conformance")
            self.served[name] = dict(connection.api_versions)
            connection.close()
        self.versions = common_versions(self.served["kafka"], self.served["tidelog"])

    async def run(self, scenario: str, mode: str) -> Outcome:
        if scenario in SECURE_SCENARIOS:
            sides = [Side(name, port, self.versions, USERS, "admin") for name, port in self.secure_ports.items()]
        elif scenario in CLUSTER_SCENARIOS:
            sides = []
            for name, control in self.clusters.items():
                sides.append(Side(name, control.port(control.broker_ids[0]), self.versions))
                sides[-1].cluster = control
        else:
            sides = [Side(name, port, self.versions) for name, port in self.ports.items()]
        for side in sides:
            await side.open()
        try:
            kafka, tidelog = await asyncio.gather(*(SCENARIOS[scenario](side, mode) for side in sides))
        finally:
            for side in sides:
                side.close()
        outcome = Outcome(scenario, mode)
        for label in kafka.keys() | tidelog.keys():
            k, t = kafka.get(label, ABSENT), tidelog.get(label, ABSENT)
            if isinstance(k, dict) and "version" in k:
                outcome.versions[label] = k["version"]
            for path, kv, tv in compare(k, t):
                difference = Difference(scenario, mode, label, path, kv, tv)
                difference.reason = allowed_reason(difference.key)
                outcome.differences.append(difference)
        outcome.differences.sort(key=lambda d: (d.label, d.path))
        self.outcomes[(scenario, mode)] = outcome
        return outcome


def _matches(pattern: str, key: str) -> bool:
    """``*`` matches anything; every other character only itself (brackets too)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), key, re.DOTALL) is not None


def allowed_reason(key: str) -> str | None:
    pattern = allowed_reason_pattern(key)
    return None if pattern is None else ALLOWED[pattern]


@pytest.fixture(scope="module")
def harness(kafka_node, tidelog_node):
    h = Harness(kafka_node.port, tidelog_node.port)
    h.kafka_start_seconds = kafka_node.start_seconds
    asyncio.run(h.negotiate())
    return h


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario(harness, scenario, mode, request):
    if scenario in SECURE_SCENARIOS and harness.secure_ports is None:
        harness.secure_ports = request.getfixturevalue("secure_nodes")
    if scenario in CLUSTER_SCENARIOS and harness.clusters is None:
        harness.clusters = request.getfixturevalue("cluster_pair")
    outcome = asyncio.run(harness.run(scenario, mode))
    unexplained = [d for d in outcome.differences if d.reason is None]
    assert not unexplained, (f"{len(unexplained)} difference(s) from Kafka not in ALLOWED:\n"
                             + "\n".join(f"  {d.key}: Kafka {d.kafka!r}, tidelog {d.tidelog!r}"
                                         for d in unexplained[:40]))


def test_report(harness):
    """Write docs/conformance.md (only when every scenario ran at both versions)."""
    if len(harness.outcomes) != len(SCENARIOS) * len(MODES):
        pytest.skip("not every scenario ran; docs/conformance.md left as it was")
    REPORT.write_text(render_report(harness))
    used = {allowed_reason_pattern(d.key) for o in harness.outcomes.values() for d in o.differences}
    stale = [p for p in ALLOWED if p not in used]
    assert not stale, f"ALLOWED entries that match no difference any more (remove them): {stale}"


def allowed_reason_pattern(key: str) -> str | None:
    for pattern in ALLOWED:
        if _matches(pattern, key):
            return pattern
    return None


# -- the report ---------------------------------------------------------------------------


def _show(value) -> str:
    if value == ABSENT:
        return "—"
    text = repr(value) if not isinstance(value, str) else value
    text = text.replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if len(text) <= 120 else f"`{text[:117]}...`"


def render_report(h: Harness) -> str:
    outcomes = list(h.outcomes.values())
    total = sum(len(o.differences) for o in outcomes)
    unexplained = sum(1 for o in outcomes for d in o.differences if d.reason is None)
    lines = [
        "# Conformance: tidelog beside Apache Kafka",
        "",
        "<!-- Generated by tests/conformance/test_differential.py; do not edit by hand. -->",
        "",
        f"The same requests go to Apache Kafka {kafka_version()} (one KRaft node, broker and controller, "
        "started by tests/kafka_fixture.py from the jars interop/kafka-server/pom.xml pins) and to "
        "`tidelog serve` with the same settings, through tidelog's own wire client, at the lowest and the "
        "highest version of each API that both serve (tests/conformance/scenarios.py). Every field of every "
        "answer is compared, except what must differ between two servers: ids they make up (topic, "
        "directory, member and producer ids become placeholders), timestamps, host names, ports, "
        "cluster ids, throttle times and settings that name this run's directories or ports.",
        "",
        "Two scenarios run on other pairs, started once for them: `unauthorized` on a Kafka node with "
        "its `StandardAuthorizer` and a `tidelog serve` whose `authorizer.class.name` names it, clients on "
        "SASL_PLAINTEXT/PLAIN, where a user without any ACL calls every API both serve (error codes "
        "compared); `leader_change` on three Kafka brokers beside one KRaft controller and a three-broker "
        "tidelog cluster, where a partition's leader is stopped and later restarted "
        "(OffsetsForLeaderEpoch and ListOffsets at the new leader, at a follower and at the restarted "
        "broker); and `follower_truncation` on the same clusters, where two replicas' logs diverge (the "
        "leader alone takes records, is stopped, the other replica is elected UNCLEAN and takes records of "
        "its own) and the old leader must truncate when it comes back (Fetch, ListOffsets and "
        "OffsetsForLeaderEpoch at each replica as leader).",
        "",
        f"**{total} differences** in {len(outcomes)} runs ({len(SCENARIOS)} scenarios × low/high version); "
        f"{total - unexplained} allowed (reason given), {unexplained} not allowed (the test fails on those).",
        "",
        "## ApiVersions",
        "",
        "| API | key | Kafka | tidelog | compared at |",
        "|---|---|---|---|---|",
    ]
    kafka, tidelog = h.served["kafka"], h.served["tidelog"]
    for key in sorted(kafka.keys() | tidelog.keys()):
        name = ApiKey(key).name if key in ApiKey._value2member_map_ else "?"
        k = "{}–{}".format(*kafka[key]) if key in kafka else "—"
        t = "{}–{}".format(*tidelog[key]) if key in tidelog else "—"
        c = "v{} and v{}".format(*h.versions[key]) if key in h.versions else "—"
        lines.append(f"| {name} | {key} | {k} | {t} | {c} |")
    lines += ["", "## Differences by scenario", ""]
    by_scenario: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_scenario[outcome.scenario].append(outcome)
    for scenario in SCENARIOS:
        runs = sorted(by_scenario.get(scenario, []), key=lambda o: MODES.index(o.mode))
        api = ApiKey(MAIN_API[scenario]).name
        versions = ", ".join(f"{o.mode} v{h.versions[MAIN_API[scenario]][MODES.index(o.mode)]}" for o in runs)
        count = sum(len(o.differences) for o in runs)
        lines += [f"### {scenario} ({api}: {versions})", ""]
        if not count:
            lines += ["No difference.", ""]
            continue
        lines += ["| run | answer | field | Kafka | tidelog | allowed because |", "|---|---|---|---|---|---|"]
        for outcome in runs:
            for row in _rows(outcome):
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    stale = [p for p in ALLOWED if not any(allowed_reason_pattern(d.key) == p for o in outcomes for d in o.differences)]
    if stale:
        lines += ["## Allow-list entries that matched nothing", ""] + [f"- `{p}`" for p in stale] + [""]
    return "\n".join(lines)


def _named(path: str) -> str:
    """``api_keys[3]`` as ``api_keys[3 METADATA]``."""
    return re.sub(r"api_keys\[(\d+)\]", lambda m: f"api_keys[{m.group(1)} {_api_name(int(m.group(1)))}]", path)


def _api_name(key: int) -> str:
    return ApiKey(key).name if key in ApiKey._value2member_map_ else "?"


def _rows(outcome: Outcome) -> list[list[str]]:
    """One row per difference; entries only one side has, under one parent and one reason,
    are one row listing their names."""
    rows, grouped = [], defaultdict(list)
    for d in outcome.differences:
        if ABSENT in (d.kafka, d.tidelog) and "[" in d.path:
            parent, _, name = d.path.rpartition("[")
            side = "Kafka" if d.tidelog == ABSENT else "tidelog"
            grouped[(d.label, parent, side, d.reason)].append(name.rstrip("]"))
            continue
        rows.append([outcome.mode, d.label, f"`{_named(d.path)}`", _show(d.kafka), _show(d.tidelog),
                     d.reason or "**not allowed**"])
    for (label, parent, side, reason), names in grouped.items():
        if parent.endswith("api_keys"):
            names = [f"{n} {_api_name(int(n))}" for n in names]
        listed = ", ".join(f"`{n}`" for n in names)
        text = f"only {side} has {len(names)}: {listed}"
        rows.append([outcome.mode, label, f"`{parent}[…]`", text if side == "Kafka" else "—",
                     text if side == "tidelog" else "—", reason or "**not allowed**"])
    return rows
