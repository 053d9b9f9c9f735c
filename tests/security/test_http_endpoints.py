"""The HTTP endpoints an attacker on the network (or a web page in the operator's
browser) can reach: the web view's fault drills and pages (``tidelog ui``) and a
broker's ``/state``, ``/state-changes`` and ``/metrics``.

Real processes throughout — a controller and a broker (``tidelog.testing.Cluster``)
for the drills, a combined node (``tidelog.testing.Broker``) for ``/state`` — and
raw HTTP over a socket, so each request carries exactly the Host, Origin and
token headers the test means."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from tidelog.cluster import ProcessCluster
from tidelog.testing import Broker, Cluster, wait_until

EVIL = "evil.example"


def http(port: int, method: str, target: str, headers: dict[str, str] | None = None,
         host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection; ``host=None`` sends ``127.0.0.1:PORT``."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host if host is not None else f'127.0.0.1:{port}'}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\nConnection: close\r\n\r\n").encode("latin-1"))
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    answer_headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        answer_headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), answer_headers, body


class Ui:
    """A ``tidelog ui`` process: its URL (with the token, if any), stdout and log lines."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "ui", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()
        line = self.process.stdout.readline()
        match = re.search(r"tidelog ui ready: (http://\S+)", line)
        assert match, (line, self.log)
        self.url = match.group(1)
        parts = urlsplit(self.url)
        self.port = parts.port
        self.token = parse_qs(parts.query).get("token", [None])[0]
        self.origin = f"http://127.0.0.1:{self.port}"

    def refusals(self) -> list[str]:
        return [line for line in self.log if "refused" in line]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def process_state(cluster: Cluster, node_id: int) -> str:
    return ProcessCluster.load(cluster.directory).layout.node(node_id).process_state()


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=1, metrics=True) as running:
        yield running


def _ui(cluster: Cluster, *extra: str) -> Ui:
    return Ui("-b", cluster.bootstrap, "--cluster-dir", cluster.directory, *extra)


@pytest.fixture(scope="module")
def drills(cluster):
    ui = _ui(cluster, "--drills")
    try:
        yield ui
    finally:
        ui.close()


def drill(ui: Ui, action: str, node: int, headers: dict[str, str], host: str | None = None):
    return http(ui.port, "POST", f"/api/drill?action={action}&node={node}", headers, host)


# --------------------------------------------------------------- fault drills

def test_drills_are_off_unless_asked_for(cluster):
    ui = _ui(cluster)
    try:
        assert ui.token is None               # an open view of a plaintext cluster: no token to give
        status, headers, body = drill(ui, "pause", 1, {"Origin": ui.origin, "X-Tidelog-Token": "anything"})
        assert status == 403 and headers["content-type"] == "application/json"
        assert "drills are off" in json.loads(body)["error"]
        assert process_state(cluster, 1) == "running"
        status, _, body = http(ui.port, "GET", "/api/snapshot")
        assert status == 200 and json.loads(body)["drills"] is False
        wait_until(lambda: len(ui.refusals()) == 1, what="the refusal logged")
    finally:
        ui.close()


def test_a_drill_without_the_right_token_origin_or_host_is_refused(cluster, drills):
    assert drills.token and len(drills.token) >= 32
    good = {"Origin": drills.origin, "X-Tidelog-Token": drills.token}
    wrong_token = "w" + secrets.token_urlsafe(32)
    refused = [
        ({"Origin": drills.origin}, None, "no X-Tidelog-Token"),
        ({"Origin": drills.origin, "X-Tidelog-Token": wrong_token}, None, "wrong token"),
        ({"Origin": drills.origin, "Authorization": f"Bearer {drills.token}"}, None, "no X-Tidelog-Token"),
        ({"Origin": f"http://{EVIL}", "X-Tidelog-Token": drills.token}, None, "Origin"),
        ({"Origin": "null", "X-Tidelog-Token": drills.token}, None, "Origin"),
        ({"X-Tidelog-Token": drills.token}, None, "no Origin"),
        # DNS rebinding: evil.example resolved to 127.0.0.1, so Origin and Host agree.
        ({"Origin": f"http://{EVIL}", "X-Tidelog-Token": drills.token}, EVIL, "Host"),
        ({"Origin": f"http://{EVIL}:{drills.port}", "X-Tidelog-Token": drills.token}, f"{EVIL}:{drills.port}",
         "Host"),
        (good, f"127.0.0.1:{drills.port + 1}", "Host"),
        (good, "", "Host"),
    ]
    before = len(drills.refusals())
    for headers, host, reason in refused:
        status, answer_headers, body = drill(drills, "pause", 1, headers, host)
        assert status == 403, (headers, host, status, body)
        assert answer_headers["content-type"] == "application/json" and reason in json.loads(body)["error"]
        assert process_state(cluster, 1) == "running", (headers, host)
    wait_until(lambda: len(drills.refusals()) == before + len(refused), what="one log line per refusal")
    assert len(drills.refusals()) == before + len(refused)
    logged = "".join(drills.log)
    assert drills.token not in logged and wrong_token not in logged
    # Only POST does anything.
    status, headers, _ = http(drills.port, "GET", "/api/drill?action=pause&node=1", good)
    assert status == 405 and headers["allow"] == "POST"
    assert process_state(cluster, 1) == "running"


def test_a_drill_with_the_token_and_the_views_origin_and_host_is_done(cluster, drills):
    status, _, body = http(drills.port, "GET", "/api/snapshot")
    assert status == 200 and json.loads(body)["drills"] is True
    for host in (f"127.0.0.1:{drills.port}", f"localhost:{drills.port}"):
        headers = {"Origin": f"http://{host}", "X-Tidelog-Token": drills.token}
        status, _, body = drill(drills, "pause", 1, headers, host)
        assert (status, json.loads(body)) == (200, {"done": "pause 1"})
        wait_until(lambda: process_state(cluster, 1) == "paused", what="broker 1 stopped (SIGSTOP)")

        def shown(process: str) -> bool:
            nodes = json.loads(http(drills.port, "GET", "/api/snapshot")[2])["nodes"]
            return {n["id"]: n for n in nodes}[1]["process"] == process
        wait_until(lambda: shown("paused"), what="the view showing broker 1 paused")
        status, _, body = drill(drills, "resume", 1, headers, host)
        assert (status, json.loads(body)) == (200, {"done": "resume 1"})
        wait_until(lambda: process_state(cluster, 1) == "running", what="broker 1 running again (SIGCONT)")
        wait_until(lambda: shown("running"), what="the view showing broker 1 running again")


def test_the_view_answers_only_its_own_host_and_known_paths_and_methods(cluster, drills):
    assert http(drills.port, "GET", "/")[0] == 200                     # an open view: no token to read
    assert http(drills.port, "GET", "/", host=EVIL)[0] == 403
    assert http(drills.port, "GET", "/api/snapshot", host=f"{EVIL}:{drills.port}")[0] == 403
    assert http(drills.port, "GET", "/events", host=EVIL)[0] == 403
    assert http(drills.port, "GET", "/nothing-here")[0] == 404
    assert http(drills.port, "GET", "/api/drills")[0] == 404
    status, headers, _ = http(drills.port, "DELETE", "/api/snapshot")
    assert status == 405 and headers["allow"] == "GET"
    assert http(drills.port, "OPTIONS", "/api/drill", {"Origin": f"http://{EVIL}"})[0] == 405
    # A request head past 16 KiB is refused, not read on.
    assert http(drills.port, "GET", "/", {"X-Padding": "a" * 20000})[0] == 431
    assert http(drills.port, "GET", "/" + "a" * 20000)[0] == 431
    _, headers, _ = http(drills.port, "GET", "/")
    assert headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in headers["content-security-policy"]


# ------------------------------------------------------- /state with a token

@pytest.fixture(scope="module")
def guarded_broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("state-token")
    token_file = str(directory / "state.token")
    token = secrets.token_urlsafe(32)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    with Broker(overrides={"metrics.port": "0", "metrics.state.token.file": token_file}) as broker:
        yield broker, token, token_file


def test_state_and_state_changes_need_the_bearer_token_and_metrics_stays_open(guarded_broker):
    broker, token, _ = guarded_broker
    port = urlsplit(broker.metrics_url).port
    for path in ("/state", "/state-changes?since=0"):
        for headers in ({}, {"Authorization": "Bearer " + secrets.token_urlsafe(32)},
                        {"Authorization": f"Basic {token}"}, {"Authorization": f"Bearer {token[:-1]}"},
                        {"X-Tidelog-Token": token}):
            status, answer_headers, body = http(port, "GET", path, headers)
            assert status == 401, (path, headers, body)
            assert answer_headers["www-authenticate"].startswith("Bearer") and b"topic" not in body
        assert http(port, "HEAD", path)[0] == 401
        status, answer_headers, body = http(port, "GET", path, {"Authorization": f"Bearer {token}"})
        assert status == 200 and answer_headers["content-type"] == "application/json"
        answer = json.loads(body)
        assert answer["node_id"] == 1 if path == "/state" else answer["broker"] == 1
    assert "refused GET /state" in "".join(broker.output) and token not in "".join(broker.output)
    # /metrics is for Prometheus, open on metrics.host (127.0.0.1 unless set).
    status, _, body = http(port, "GET", "/metrics")
    assert status == 200 and b"kafka_server_kafkaserver_brokerstate" in body
    assert urlsplit(broker.metrics_url).hostname == "127.0.0.1"
    # Bound to loopback, it answers loopback names only: no reading it through DNS rebinding.
    for host in (EVIL, f"{EVIL}:{port}"):
        assert http(port, "GET", "/metrics", host=host)[0] == 403
        assert http(port, "GET", "/state", {"Authorization": f"Bearer {token}"}, host=host)[0] == 403
    for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert http(port, "GET", "/metrics", host=host)[0] == 200
    assert http(port, "GET", "/other", {"Authorization": f"Bearer {token}"})[0] == 404
    assert http(port, "POST", "/state", {"Authorization": f"Bearer {token}"})[0] == 405
    assert http(port, "GET", "/state", {"X-Padding": "a" * 20000})[0] == 431


def test_a_view_reading_guarded_brokers_needs_its_own_token(guarded_broker):
    broker, _, token_file = guarded_broker
    port = urlsplit(broker.metrics_url).port
    ui = Ui("-b", broker.bootstrap, "--metrics-port", f"1={port}", "--state-token-file", token_file)
    try:
        assert ui.token and ui.token not in open(token_file).read()
        for path in ("/", "/events", "/api/snapshot"):
            status, headers, body = http(ui.port, "GET", path)
            assert status == 401 and json.loads(body)["error"], path
            assert http(ui.port, "GET", f"{path}?token={secrets.token_urlsafe(32)}")[0] == 401
        assert http(ui.port, "GET", "/app.js")[0] == 200         # the package's own script
        assert http(ui.port, "GET", f"/?token={ui.token}")[0] == 200
        assert http(ui.port, "GET", "/api/snapshot", {"X-Tidelog-Token": ui.token})[0] == 200

        def broker_seen() -> bool:
            snapshot = json.loads(http(ui.port, "GET", f"/api/snapshot?token={ui.token}")[2])
            return [(n["id"], n["reachable"], n["state"]) for n in snapshot["nodes"]] == [(1, True, "RUNNING")]
        wait_until(broker_seen, what="the view reading /state with the broker's token")
        # Drills stay off (no cluster directory): refused even with the token.
        status, _, body = http(ui.port, "POST", "/api/drill?action=kill&node=1",
                               {"Origin": ui.origin, "X-Tidelog-Token": ui.token})
        assert status == 403 and "drills are off" in json.loads(body)["error"]
        assert broker.process.poll() is None
        assert ui.token not in "".join(ui.log)
    finally:
        ui.close()


def test_drills_need_a_cluster_directory():
    run = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "ui", "--drills", "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--drills needs --cluster-dir" in run.stderr
