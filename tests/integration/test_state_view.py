"""``/state``, ``/state-changes`` and ``tidelog ui`` against a real cluster
(controller + 3 broker processes): what they show is checked against what the
cluster holds — the Metadata the brokers answer, the records produced — and
against a broker killed under them.

One cluster serves the module; each test works on its own topic. The kill test
restarts the broker it killed."""

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster, wait_until

# A killed broker is fenced in ~3 s (its partitions get a new leader and a smaller ISR).
SETTINGS = {"replica.lag.time.max.ms": "1500", "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500", "offsets.topic.num.partitions": "1"}
BROKERS = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(brokers=3, overrides=SETTINGS, metrics=True) as running:
        yield running


def base_url(cluster, node_id: int) -> str:
    return cluster.metrics_url(node_id).rsplit("/", 1)[0]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"] == "application/json"
        return json.loads(response.read())


def partition_state(cluster, node_id: int, topic: str, partition: int = 0) -> dict | None:
    for p in get_json(base_url(cluster, node_id) + "/state")["partitions"]:
        if (p["topic"], p["partition"]) == (topic, partition):
            return p
    return None


def create(cluster, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(15)
    wait_until(lambda: all(len((partition_state(cluster, b, topic, i) or {}).get("isr", ())) == 3
                           for b in BROKERS for i in range(partitions)), what=f"{topic} on every broker, in sync")


def produce(cluster, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode(), partition=0)
    assert producer.flush(20) == 0


def test_state_shows_the_leader_isr_and_every_replicas_offsets(cluster):
    create(cluster, "state-offsets")
    produce(cluster, "state-offsets", 25)
    described = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("state-offsets", timeout=10)
    metadata = described.topics["state-offsets"].partitions[0]
    wait_until(lambda: all(partition_state(cluster, b, "state-offsets")["log_end_offset"] == 25 and
                           partition_state(cluster, b, "state-offsets")["high_watermark"] == 25 for b in BROKERS),
               what="every replica at 25 records, high watermark known")
    for b in BROKERS:
        state = get_json(base_url(cluster, b) + "/state")
        assert (state["node_id"], state["state"], state["fenced"], state["controller_id"]) == (b, "RUNNING", False,
                                                                                              1000)
        assert state["broker_epoch"] >= 0 and state["roles"] == ["broker"]
        assert sorted(r["id"] for r in state["brokers"]) == list(BROKERS)
        p = partition_state(cluster, b, "state-offsets")
        assert p["leader"] == metadata.leader and sorted(p["isr"]) == sorted(metadata.isrs)
        assert p["replicas"] == list(metadata.replicas) and sorted(p["replicas"]) == list(BROKERS)
        assert p["role"] == ("leader" if b == metadata.leader else "follower")
        assert (p["log_start_offset"], p["last_stable_offset"], p["log_end_offset"]) == (0, 25, 25)
    leader = partition_state(cluster, metadata.leader, "state-offsets")
    assert leader["follower_log_end_offsets"] == {str(b): 25 for b in BROKERS if b != metadata.leader}

    # An open transaction holds the last stable offset at its first record; the
    # high watermark and the log end offset move past it.
    transactional = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "state-offsets-txn"})
    transactional.init_transactions(20)
    transactional.begin_transaction()
    for i in range(5):
        transactional.produce("state-offsets", f"open-{i}".encode(), partition=0)
    assert transactional.flush(20) == 0
    try:
        wait_until(lambda: partition_state(cluster, metadata.leader, "state-offsets")["high_watermark"] == 30,
                   what="the transaction's records below the high watermark")
        p = partition_state(cluster, metadata.leader, "state-offsets")
        assert (p["log_start_offset"], p["last_stable_offset"], p["high_watermark"], p["log_end_offset"]) == (
            0, 25, 30, 30)
    finally:
        transactional.abort_transaction(20)


def test_state_changes_name_the_election_and_isr_shrink_of_a_killed_leader(cluster):
    create(cluster, "state-kill")
    victim = partition_state(cluster, 1, "state-kill")["leader"]
    witness = next(b for b in BROKERS if b != victim)
    since = get_json(base_url(cluster, witness) + "/state-changes?since=0")["last_seq"]
    cluster.kill(victim)
    try:
        def events():
            return get_json(base_url(cluster, witness) + f"/state-changes?since={since}")["events"]
        ours = lambda e: e.get("topic") == "state-kill"
        wait_until(lambda: any(e["kind"] == "leader_election" and ours(e) for e in events()),
                   timeout_s=30, what=f"a leader election after broker {victim} was killed")
        got = events()
        election = next(e for e in got if e["kind"] == "leader_election" and ours(e))
        assert election["old_leader"] == victim and election["new_leader"] not in (victim, -1)
        assert election["broker"] == witness and election["seq"] > since
        shrink = next(e for e in got if e["kind"] == "isr_shrink" and ours(e))
        assert shrink["removed"] == [victim] and victim not in shrink["new_isr"]
        assert any(e["kind"] == "broker_fenced" and e["broker_id"] == victim for e in got)
        state = partition_state(cluster, witness, "state-kill")
        assert state["leader"] == election["new_leader"] and victim not in state["isr"]
        # The same events, as JSON lines, in the witness's state-change.log.
        path = os.path.join(cluster.directory, f"broker-{witness}", "data", "state-change.log")
        with open(path) as f:
            logged = [json.loads(line) for line in f]
        assert election in logged and shrink in logged
    finally:
        cluster.start_node(victim)


class EventStream:
    """Server-sent events read off a socket; bytes that came with the response head
    (the first event may share its segment) are kept, not dropped."""

    def __init__(self, sock: socket.socket, already: bytes = b""):
        self.sock = sock
        self.buffer = already

    def next(self, kind: str, timeout_s: float = 30.0) -> dict:
        """The data of the next server-sent event of ``kind``."""
        self.sock.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n\n" in self.buffer:
                block, self.buffer = self.buffer.split(b"\n\n", 1)
                lines = block.decode().split("\n")
                if f"event: {kind}" in lines:
                    return json.loads("".join(line[6:] for line in lines if line.startswith("data: ")))
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {kind} event within {timeout_s} s")
            chunk = self.sock.recv(65536)
            assert chunk, "the event stream closed"
            self.buffer += chunk


def test_tidelog_ui_serves_its_page_and_streams_a_snapshot_of_the_cluster(cluster):
    create(cluster, "state-ui", partitions=2)
    args = [sys.executable, "-m", "tidelog.cli.main", "ui", "-b", cluster.bootstrap, "--port", "0"]
    for b in (*BROKERS, 1000):   # the test cluster's metrics ports are free ones, not Kafka port + 100
        args += ["--metrics-port", f"{b}={urlsplit(cluster.metrics_url(b)).port}"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        match = re.search(r"tidelog ui ready: (http://\S+)", line)
        assert match, line
        url = match.group(1)
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode()
        assert "<title>tidelog cluster</title>" in page and '<script src="/app.js">' in page
        with urllib.request.urlopen(url + "app.js", timeout=10) as response:
            assert "EventSource" in response.read().decode()

        host, port = urlsplit(url).hostname, urlsplit(url).port
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
                         .encode())
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = sock.recv(65536)
                assert chunk, "the UI closed the event stream"
                received += chunk
            head, rest = received.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
            events = EventStream(sock, rest)
            snapshot = events.next("snapshot")
            deadline = time.monotonic() + 60
            # Connected before a round reached every broker (a busy machine: each poll has a
            # 0.8 s timeout): the next state events complete the picture.
            while not {n["id"] for n in snapshot["nodes"] if n["reachable"]} >= set(BROKERS):
                assert time.monotonic() < deadline, snapshot["nodes"]
                snapshot = events.next("state")
        nodes = {n["id"]: n for n in snapshot["nodes"]}
        # The controller too, which Metadata never names (DescribeQuorum's voter endpoints);
        # no process column without --cluster-dir.
        assert set(nodes) == set(BROKERS) | {1000}
        assert nodes[1000]["role"] == "controller" and nodes[1000]["port"] == cluster.port(1000)
        assert snapshot["processes_known"] is False
        for b in BROKERS:
            assert nodes[b]["reachable"] and nodes[b]["state"] == "RUNNING" and nodes[b]["fenced"] is False
            assert nodes[b]["port"] == cluster.port(b) and not nodes[b]["is_controller"]
        assert snapshot["controller_id"] == 1000
        ours = {p["partition"]: p for p in snapshot["partitions"] if p["topic"] == "state-ui"}
        assert set(ours) == {0, 1}
        for p in ours.values():
            assert sorted(p["replicas"]) == list(BROKERS) and sorted(p["isr"]) == list(BROKERS)
            assert set(p["replica_offsets"]) == {"1", "2", "3"}
            assert p["replica_offsets"][str(p["leader"])]["role"] == "leader"
    finally:
        process.terminate()
        process.wait(10)


def test_cluster_up_starts_the_web_view_with_fault_drills_and_down_stops_it(tmp_path):
    def tidelog(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args, "--dir", directory],
                              capture_output=True, text=True, timeout=120)
    directory = str(tmp_path / "cluster")
    up = tidelog("up", "-n", "1", "--base-port", "0", "--ui-drills")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        url = re.search(r"web view: (http://\S+)", up.stdout).group(1)
        assert f"web view {url}" in tidelog("status").stdout
        # The URL holds the view's token, so the files that name it are the owner's only.
        token = parse_qs(urlsplit(url).query)["token"][0]
        for name in ("ui.json", "ui.log"):
            assert os.stat(os.path.join(directory, name)).st_mode & 0o077 == 0, name
        base = url.split("?")[0]

        def snapshot():
            return get_json_any(base + "api/snapshot")
        wait_until(lambda: all(n["reachable"] for n in snapshot()["nodes"]), what="every node answering the view")
        nodes = {n["id"]: n for n in snapshot()["nodes"]}
        assert set(nodes) == {1, 1000} and nodes[1000]["is_controller"] and nodes[1000]["role"] == "controller"
        assert snapshot()["drills"] is True and nodes[1]["process"] == "running"

        drill = {"X-Tidelog-Token": token, "Origin": base.rstrip("/")}
        request = urllib.request.Request(base + "api/drill?action=pause&node=1", method="POST", headers=drill)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read()) == {"done": "pause 1"}
        wait_until(lambda: {n["id"]: n for n in snapshot()["nodes"]}[1]["process"] == "paused",
                   what="broker 1 shown paused")
        assert not {n["id"]: n for n in snapshot()["nodes"]}[1]["reachable"]
        request = urllib.request.Request(base + "api/drill?action=resume&node=1", method="POST", headers=drill)
        urllib.request.urlopen(request, timeout=30).close()
        wait_until(lambda: {n["id"]: n for n in snapshot()["nodes"]}[1]["reachable"], what="broker 1 answering again")
    finally:
        down = tidelog("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not os.path.exists(os.path.join(directory, "ui.json"))
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def get_json_any(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_the_web_view_of_a_secure_cluster(tmp_path):
    """cluster up --secure starts the view (it reads the nodes' metrics ports; cluster.json
    names them), and a standalone tidelog ui finds SASL_SSL brokers with --command-config."""
    def tidelog(*args):
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "cluster", *args, "--dir", directory],
                              capture_output=True, text=True, timeout=120)
    directory = str(tmp_path / "secure")
    up = tidelog("up", "-n", "2", "--secure", "--base-port", "0")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        url = re.search(r"web view: (http://\S+)", up.stdout).group(1)
        # The view of a secure cluster needs its token (in the URL printed); drills are off.
        base, token = url.split("?")[0], parse_qs(urlsplit(url).query)["token"][0]
        for path in ("", "api/snapshot", "events"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base + path, timeout=10)
            assert refused.value.code == 401
        wait_until(lambda: [n["state"] for n in get_json_any(f"{base}api/snapshot?token={token}")["nodes"]
                            if n["role"] == "broker"] == ["RUNNING", "RUNNING"], what="both brokers in the view")
        assert get_json_any(f"{base}api/snapshot?token={token}")["drills"] is False
        layout = json.load(open(os.path.join(directory, "cluster.json")))
        brokers = [n for n in layout["nodes"] if n["role"] == "broker"]
        # The nodes' /state and /state-changes need the cluster's state token (a 0600 file).
        token_file = os.path.join(directory, "security", "state.token")
        assert os.stat(token_file).st_mode & 0o077 == 0
        state_token = open(token_file).read().strip()
        for node in layout["nodes"]:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{node['metrics_port']}/state", timeout=10)
            assert refused.value.code == 401
            request = urllib.request.Request(f"http://127.0.0.1:{node['metrics_port']}/state",
                                             headers={"Authorization": f"Bearer {state_token}"})
            assert get_json_any(request)["node_id"] == node["node_id"]
        standalone = [sys.executable, "-m", "tidelog.cli.main", "ui", "-b", f"127.0.0.1:{brokers[0]['port']}",
                      "--port", "0", *[f"--metrics-port={n['node_id']}={n['metrics_port']}" for n in layout["nodes"]]]

        def view(extra: list[str]) -> dict:
            process = subprocess.Popen(standalone + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                for line in process.stdout:
                    match = re.search(r"tidelog ui ready: (http://\S+)", line)
                    if match:
                        break
                time.sleep(3)                   # a discovery round and a poll
                view_url = match.group(1)
                return get_json_any(view_url.replace("/?", "/api/snapshot?") if "?" in view_url
                                    else view_url + "api/snapshot")
            finally:
                process.terminate()
                process.wait(10)
        refused = view([])                      # a plaintext client on a SASL_SSL listener
        assert not any(n["state"] == "RUNNING" for n in refused["nodes"]), refused
        admin = os.path.join(directory, "security", "admin.properties")
        no_token = view(["--command-config", admin])     # found, but /state refuses it
        assert not any(n["reachable"] for n in no_token["nodes"]) and no_token["nodes"], no_token
        assert all("401" in n["error"] for n in no_token["nodes"]), no_token
        seen = view(["--command-config", admin, "--state-token-file", token_file])
        assert sorted(n["id"] for n in seen["nodes"] if n["state"] == "RUNNING") == sorted(
            n["node_id"] for n in layout["nodes"]), seen       # the controller found through DescribeQuorum
    finally:
        assert tidelog("down").returncode == 0
