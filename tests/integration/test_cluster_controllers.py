"""``tidelog cluster add-controller`` / ``remove-controller`` (KIP-853) on a cluster of real
processes started by ``tidelog cluster up``: one controller grows to a quorum of three
and loses its leader while an idempotent producer writes with acks=all; the quorum keeps
a leader, the broker follows it, topics are still created, the last voter cannot be
removed, and every acknowledged record is read back."""

import json
import os
import subprocess
import sys

from tidelog.cluster import ProcessCluster

from tests.acked_writes import AckedWriter, read_all

TOPIC = "membership"


def tidelog(*args, timeout=200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def _status_roles(directory: str) -> dict[int, str]:
    """{controller id: leader/voter/observer} from ``cluster status``'s controller lines."""
    status = tidelog("cluster", "status", "--dir", directory, timeout=60).stdout
    roles = {}
    for line in status.splitlines():
        words = line.split()
        if words[:1] == ["controller"] and words[1].isdigit():
            roles[int(words[1])] = words[5] if len(words) > 5 else "?"
    return roles


def test_controllers_are_added_and_the_leader_removed_while_records_are_written(tmp_path):
    directory = str(tmp_path / "cluster")
    up = tidelog("cluster", "up", "--dir", directory, "-n", "1", "--controllers", "1", "--base-port", "0",
                 "--no-ui", "--no-metrics")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "(dynamic quorum)" in up.stdout
    cluster = ProcessCluster.load(directory)
    bootstrap = cluster.layout.bootstrap
    writer = None
    try:
        created = tidelog("topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "1",
                          "-b", bootstrap, timeout=60)
        assert created.returncode == 0, created.stderr
        writer = AckedWriter(bootstrap, TOPIC)
        writer.more()

        for added in (1001, 1002):
            result = tidelog("cluster", "add-controller", "--dir", directory)
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"controller {added} added" in result.stdout, result.stdout
            writer.more()
        assert _status_roles(directory) == {1000: "leader", 1001: "voter", 1002: "voter"}
        quorum = ProcessCluster.load(directory).describe_quorum()
        assert sorted(int(v.replica_id) for v in quorum.current_voters) == [1000, 1001, 1002]
        layout = json.load(open(os.path.join(directory, "cluster.json")))
        assert sorted(n["node_id"] for n in layout["nodes"] if n["role"] == "controller") == [1000, 1001, 1002]

        removed = tidelog("cluster", "remove-controller", "1000", "--dir", directory)     # the leader
        assert removed.returncode == 0, removed.stdout + removed.stderr
        roles = _status_roles(directory)
        assert sorted(roles) == [1001, 1002] and sorted(roles.values()) == ["leader", "voter"], roles
        assert not os.path.exists(os.path.join(directory, "controller"))
        writer.more()
        again = tidelog("topics", "create", "after", "--partitions", "1", "--replication-factor", "1",
                        "-b", bootstrap, timeout=60)
        assert again.returncode == 0, again.stderr

        leader = next(c for c, role in roles.items() if role == "leader")
        follower = next(c for c in roles if c != leader)
        assert tidelog("cluster", "remove-controller", str(follower), "--dir", directory).returncode == 0
        last = tidelog("cluster", "remove-controller", str(leader), "--dir", directory)
        assert last.returncode == 1 and "last voter" in last.stderr, last.stderr
        assert _status_roles(directory) == {leader: "leader"}
        writer.more()
        writer.stop()
        assert writer.failed == []
        assert writer.acked and writer.acked <= read_all(bootstrap, TOPIC, "controllers-check")
    finally:
        if writer is not None:
            writer.stop()
        tidelog("cluster", "down", "--dir", directory)
