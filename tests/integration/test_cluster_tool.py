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
    up = tidelog("up", "--dir", directory, "-n", "1", "--base-port", "0")
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
