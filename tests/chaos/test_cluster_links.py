"""``tidelog cluster up --link-proxy`` and the link verbs: isolating a broker through
its proxy fences it (its heartbeats stop reaching the controller); healing lets
it back in."""

import json
import os
import subprocess
import sys
import time

import pytest

FAST = ["--override", "broker.session.timeout.ms=3000", "--override", "broker.heartbeat.interval.ms=500"]


def _tidelog(*args, timeout=120) -> str:
    out = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _state(directory, broker: int) -> str:
    line = next(l for l in _tidelog("status", "--dir", directory).splitlines() if f"broker {broker} " in l)
    return "FENCED" if "FENCED" in line else "unfenced"


def _wait(predicate, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


@pytest.fixture
def cluster(tmp_path):
    directory = str(tmp_path / "cluster")
    out = _tidelog("up", "--dir", directory, "-n", "3", "--base-port", "0", "--link-proxy", *FAST)
    assert "through the proxies" in out
    yield directory
    _tidelog("down", "--dir", directory)
    assert not os.path.exists(os.path.join(directory, "links.json"))


def test_isolate_fences_the_broker_and_heal_unfences_it(cluster):
    links = json.load(open(os.path.join(cluster, "links.json")))
    assert set(links["ports"]) == {"1", "2", "3", "1000"}
    assert "none" in _tidelog("links", "--dir", cluster)
    out = _tidelog("isolate", "3", "--dir", cluster)
    assert "3->1000" in out and "client->3" in out
    _wait(lambda: _state(cluster, 3) == "FENCED")
    assert _state(cluster, 1) == "unfenced"
    _tidelog("heal", "--dir", cluster)
    _wait(lambda: _state(cluster, 3) == "unfenced")
    out = _tidelog("partition", "1", "2", "--dir", cluster)
    assert "1->2" in out and "2->1" in out
