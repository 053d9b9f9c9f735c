"""Controller membership on the wire (KIP-853), driven by Kafka's own kafka-metadata-quorum.

One cluster for the module: three controllers formatted with ``tidelog format
--initial-controllers`` (a dynamic quorum, no ``controller.quorum.voters``), a fourth
formatted with ``--no-initial-controllers`` that starts as an observer of
``controller.quorum.bootstrap.servers``, and three brokers. While an idempotent
producer writes with acks=all throughout, Kafka 4.4's MetadataQuorumCommand adds the
fourth controller, removes a follower while another voter is killed (kill -9) during
the change, then removes the first controllers one by one, the leader first, until
the fourth leads alone; the quorum keeps a leader, brokers that were given only the
first three controllers' addresses find the fourth, topics are still created, and
every acknowledged record is read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.cluster import ProcessCluster
from tidelog.server.storage_format import new_cluster_id
from tidelog.testing import wait_until

from tests.acked_writes import AckedWriter, read_all

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300",
        "replica.lag.time.max.ms": "3000"}
INITIAL = (1000, 1001, 1002)
JOINER = 1003
TOPIC = "membership"


def _format(cluster: ProcessCluster, node, *how: str) -> None:
    layout = cluster.layout
    data = os.path.join(cluster._node_dir(node), "data")
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli.main", "format", f"--cluster-id={layout.cluster_id}",
         "--override", f"node.id={node.node_id}", "--override", "process.roles=controller",
         "--override", f"log.dirs={data}", "--override", f"listeners=CONTROLLER://{layout.host}:{node.port}",
         *how], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("membership"))
    processes = ProcessCluster.create(directory, 3, base_port=0, overrides=dict(FAST), controllers=4)
    layout = processes.layout
    controllers = layout.controllers
    # Brokers and controllers know only the first three: the fourth, the last voter in
    # the end, is found through them (Fetch's NodeEndpoints, DescribeCluster).
    bootstrap = ",".join(f"{layout.host}:{c.port}" for c in controllers if c.node_id in INITIAL)
    layout.overrides.update({"controller.quorum.voters": "", "controller.quorum.bootstrap.servers": bootstrap})
    directories = {c.node_id: new_cluster_id() for c in controllers}
    initial = ",".join(f"{c.node_id}@{layout.host}:{c.port}:{directories[c.node_id]}"
                       for c in controllers if c.node_id in INITIAL)
    for node in controllers:
        if node.node_id in INITIAL:
            _format(processes, node, "--initial-controllers", initial)
        else:
            _format(processes, node, "--no-initial-controllers")
    try:
        processes.up()
        yield processes
    finally:
        processes.down()


def _until(value, timeout_s: float, what: str):
    """Poll ``value()`` until it is truthy; that value (AssertionError naming ``what`` after the timeout)."""
    found = []
    try:
        wait_until(lambda: bool(found.append(value()) or found[-1]), timeout_s, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; the last describes: {_last[-4:]}") from None
    return found[-1]


def _quorum(java, cluster, *extra, timeout_s: float = 60):
    bootstrap = ",".join(f"{cluster.layout.host}:{c.port}" for c in cluster.layout.controllers if c.alive())
    return java.tool("MetadataQuorumCommand", "--bootstrap-controller", bootstrap, *extra, timeout_s=timeout_s)


_last: list = []       # every describe --status, for a timeout's message


def _status(java, cluster) -> dict:
    result = _quorum(java, cluster, "describe", "--status", timeout_s=15)
    _last.append(result)
    if result.exit_code != 0:
        return {}
    status = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(":")
        status[key.strip()] = value.strip()
    return status


def _voters(java, cluster) -> dict[int, str]:
    """{voter id: directory id} from describe --status ({} while there is no leader)."""
    status = _status(java, cluster)
    return {v["id"]: v["directoryId"] for v in json.loads(status.get("CurrentVoters", "[]"))}


def _voters_count(java, cluster, count: int, timeout_s: float) -> dict[int, str]:
    """The voters once there are ``count`` of them."""
    return _until(lambda: (lambda v: v if len(v) == count else None)(_voters(java, cluster)), timeout_s,
                  f"{count} voters")


def _leader(java, cluster) -> int:
    return int(_status(java, cluster).get("LeaderId", -1))


def _created(admin, name: str) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(15)
        return True
    except Exception as e:                  # noqa: BLE001 - retried until the deadline
        return "already exists" in str(e).lower()


def test_controllers_join_and_leave_while_records_are_written(java, cluster, tmp_path):
    layout = cluster.layout
    voters = _voters_count(java, cluster, 3, 30)
    assert set(voters) == set(INITIAL)
    # The fourth controller is an observer once it fetches from the leader; a describe
    # can also fail under load (the tool's 15 s), so ask until it says so.
    _until(lambda: JOINER in [o["id"] for o in json.loads(_status(java, cluster).get("CurrentObservers", "[]"))],
           30, f"controller {JOINER} among the observers")
    admin = AdminClient({"bootstrap.servers": layout.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    writer = AckedWriter(layout.bootstrap, TOPIC)
    try:
        wait_until(lambda: len(writer.acked) > 50, timeout_s=30)

        # add-controller: the fourth, an observer until now, described by its own properties.
        joiner = layout.node(JOINER)
        properties = tmp_path / "joiner.properties"
        properties.write_text(f"node.id={JOINER}\nprocess.roles=controller\ncontroller.listener.names=CONTROLLER\n"
                              f"listeners=CONTROLLER://{layout.host}:{joiner.port}\n"
                              f"log.dirs={os.path.join(cluster._node_dir(joiner), 'data')}\n")
        added = _quorum(java, cluster, "--command-config", str(properties), "add-controller")
        assert added.exit_code == 0, added.stderr
        assert f"Added controller {JOINER}" in added.stdout
        voters = _voters_count(java, cluster, 4, 30)
        assert set(voters) == {*INITIAL, JOINER}
        replication = _quorum(java, cluster, "describe", "--replication").stdout.splitlines()
        rows = {int(r.split()[0]): r.split() for r in replication[1:]}
        assert rows[JOINER][1] == voters[JOINER] and rows[JOINER][-1] == "Follower"

        # remove-controller of a follower while another follower is killed mid-change.
        leader = _until(lambda: max(_leader(java, cluster), 0), 30, 'a leader')
        followers = sorted(v for v in voters if v != leader)
        removed, killed = followers[0], followers[1]
        result: dict = {}
        remover = threading.Thread(target=lambda: result.update(done=_quorum(
            java, cluster, "remove-controller", "--controller-id", str(removed),
            f"--controller-directory-id={voters[removed]}")))    # "=": an id may begin with "-"
        remover.start()
        time.sleep(0.3)           # the tool's admin client is connecting: the kill lands during the change
        cluster.kill(killed)
        remover.join(120)
        assert result["done"].exit_code == 0, result["done"].stderr
        voters = _voters_count(java, cluster, 3, 60)
        assert removed not in voters and killed in voters
        cluster.start_node(layout.node(killed))

        # Every first controller is removed, the leader first (it resigns once its own
        # removal commits): the fourth is left alone, leading; the brokers, which know
        # only the first three's addresses, learn where it is.
        leader = _until(lambda: max(_leader(java, cluster), 0), 30, 'a leader')
        victims = sorted((v for v in voters if v != JOINER), key=lambda v: v != leader)
        for victim in victims:
            gone = _quorum(java, cluster, "remove-controller", "--controller-id", str(victim),
                           f"--controller-directory-id={voters[victim]}")
            assert gone.exit_code == 0, gone.stderr
            voters = _voters_count(java, cluster, len(voters) - 1, 60)
            assert victim not in voters
        assert set(voters) == {JOINER}
        assert _until(lambda: _leader(java, cluster) == JOINER, 60, "the fourth leading")
        _until(lambda: _created(admin, "after-membership"), 60, "a topic created")
        count = len(writer.acked)
        wait_until(lambda: len(writer.acked) > count + 50, timeout_s=60)
    finally:
        writer.stop()
    assert writer.failed == []
    assert writer.acked <= read_all(layout.bootstrap, TOPIC, "membership-check")


def test_format_refuses_what_kafka_storage_refuses(cluster, tmp_path):
    base = [sys.executable, "-m", "tidelog.cli.main", "format", "--override", "node.id=7",
            "--override", "process.roles=controller", "--override", "listeners=CONTROLLER://127.0.0.1:19999"]
    data = str(tmp_path / "d")
    bad = subprocess.run(base + ["--override", f"log.dirs={data}", "--initial-controllers", "7@127.0.0.1:1:nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "is not a Kafka Uuid" in bad.stderr and not os.path.exists(data)
    other = subprocess.run(base + ["--override", f"log.dirs={data}", "--initial-controllers",
                                   f"8@127.0.0.1:1:{new_cluster_id()}"], capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "node 7 is not among" in other.stderr
    ok = subprocess.run(base + ["--override", f"log.dirs={data}", "--standalone"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    directory = ok.stdout.split("voter 7: directory ")[1].split()[0]
    assert len(directory) == 22 and "CONTROLLER://127.0.0.1:19999" in ok.stdout
    again = subprocess.run(base + ["--override", f"log.dirs={data}", "--standalone"], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 1 and "already formatted" in again.stderr
