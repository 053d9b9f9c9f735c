"""``tidelog cluster`` is safe to point at a cluster whose processes are gone: it
never signals a pid that now names another program, and ``status`` says when the
controller is unreachable instead of reporting a healthy cluster."""

import json
import os
import subprocess
import sys

import pytest


def tidelog(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def cluster(tmp_path):
    directory = str(tmp_path / "cluster")
    up = tidelog("up", "--dir", directory, "-n", "1", "--base-port", "0", "--no-ui", "--no-metrics")
    assert up.returncode == 0, up.stdout + up.stderr
    yield directory
    tidelog("down", "--dir", directory)


def test_a_recorded_pid_that_names_another_program_is_not_signalled(cluster):
    layout_path = os.path.join(cluster, "cluster.json")
    layout = json.load(open(layout_path))
    broker = next(n for n in layout["nodes"] if n["role"] == "broker")
    assert tidelog("kill", str(broker["node_id"]), "--dir", cluster).returncode == 0
    # The broker is gone; its pid is reused by an unrelated program.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        layout = json.load(open(layout_path))
        for node in layout["nodes"]:
            if node["node_id"] == broker["node_id"]:
                node["pid"], node["pid_start"] = bystander.pid, broker["pid_start"]   # the broker's start time
        json.dump(layout, open(layout_path, "w"))
        for verb in ("pause", "kill"):
            tidelog(verb, str(broker["node_id"]), "--dir", cluster)
        status = tidelog("status", "--dir", cluster)
        assert f"broker {broker['node_id']} " in status.stdout and "process dead" in status.stdout
        tidelog("down", "--dir", cluster)
        assert bystander.poll() is None, "tidelog cluster signalled a process it did not start"
        with open(f"/proc/{bystander.pid}/stat") as f:
            assert f.read().rsplit(") ", 1)[1][0] != "T", "the bystander was paused"
    finally:
        bystander.kill()
        bystander.wait()


def test_status_says_when_the_controller_is_unreachable(cluster):
    healthy = tidelog("status", "--dir", cluster)
    assert healthy.returncode == 0 and "UNHEALTHY" not in healthy.stdout
    assert tidelog("kill", "1000", "--dir", cluster).returncode == 0
    status = tidelog("status", "--dir", cluster)
    assert status.returncode == 1
    assert "UNHEALTHY: no controller is reachable" in status.stdout
    assert "unfenced" not in status.stdout                # nobody can know that now


def test_a_stopped_cluster_of_another_shape_names_the_ways_out(tmp_path):
    directory = str(tmp_path / "cluster")
    quick = ("--base-port", "0", "--no-ui", "--no-metrics")
    assert tidelog("up", "--dir", directory, "-n", "1", *quick).returncode == 0
    down = tidelog("down", "--dir", directory)
    assert down.returncode == 0 and "--purge" in down.stdout
    for shape in (["-n", "1", "--controllers", "3"], ["--secure"], ["-n", "2"]):
        refused = tidelog("up", "--dir", directory, *shape, *quick)
        assert refused.returncode == 1
        assert "--dir DIR" in refused.stderr and f"tidelog cluster down --purge --dir {directory}" in refused.stderr
    again = tidelog("up", "--dir", directory, *quick)               # no shape given: the stopped one, as it is
    assert again.returncode == 0, again.stderr
    assert "1 brokers" in again.stdout
    (tmp_path / "cluster" / "notes.txt").write_text("mine")
    purged = tidelog("down", "--purge", "--dir", directory)
    assert purged.returncode == 0, purged.stderr
    assert sorted(os.listdir(directory)) == ["notes.txt"], "only the cluster's own files go"
    os.remove(os.path.join(directory, "notes.txt"))
    other = tidelog("up", "--dir", directory, "-n", "2", *quick)    # a new shape in the same place
    assert other.returncode == 0, other.stderr
    assert tidelog("down", "--dir", directory, "--purge").returncode == 0
    assert not os.path.exists(directory)


def test_status_says_a_dead_broker_is_not_yet_fenced_and_survives_a_closed_pipe(tmp_path):
    directory = str(tmp_path / "cluster")
    # A session long enough that `status` runs inside it however loaded the machine is.
    up = tidelog("up", "--dir", directory, "-n", "2", "--base-port", "0", "--no-ui", "--no-metrics",
                 "--override", "broker.session.timeout.ms=120000")
    assert up.returncode == 0, up.stderr
    try:
        bootstrap = up.stdout.split("bootstrap servers: ")[1].split()[0]
        created = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "topics", "create", "st",
                                  "--partitions", "2", "--replication-factor", "2", "-b", bootstrap],
                                 capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        assert tidelog("kill", "2", "--dir", directory).returncode == 0
        status = tidelog("status", "--dir", directory).stdout
        line = next(l for l in status.splitlines() if l.strip().startswith("broker 2 "))
        assert "process dead" in line and "unfenced" in line and "session not yet expired" in line, status
        assert "not yet counted: broker 2 is dead but still in the ISR of 2 partitions" in status, status

        # A reader that went away (`| head`): no traceback.
        read, write = os.pipe()
        os.close(read)
        try:
            closed = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", "status", "--dir",
                                     directory], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
        finally:
            os.close(write)
        assert "Traceback" not in closed.stderr and "BrokenPipe" not in closed.stderr, closed.stderr
        assert closed.returncode == 141
    finally:
        tidelog("down", "--dir", directory)
