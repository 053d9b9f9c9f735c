"""Scale: a 3-broker cluster with 1,000, 3,000 and 10,000 partitions.

Theory of operation. For each partition count P (``--partitions``, default 1000 3000
10000) a fresh cluster of three ``tidelog`` broker processes and one controller
(``tidelog.testing.Cluster``, every node serving ``/metrics``) is started and the run
measures, in order:

1. **create**: P/100 topics of 100 partitions each (``--rf``, default 3), sent as
   CreateTopics of ``--topics-per-request`` topics, until the last is acknowledged; then
   **all led**: until a full Metadata request (every topic) names a leader for all P;
2. **metadata**: a full Metadata request's latency (median of 5) and size on the wire;
3. **/metrics**: each broker's scrape latency (median of 3) and size;
4. **RSS** of each broker and of the controller (``/proc/<pid>/status``);
5. **kill -9** of broker 1: the time until every partition it led names another leader
   in Metadata (asked at broker 2), and the controller's CPU (utime+stime over wall time)
   meanwhile;
6. **rejoin**: broker 1 started again; the time until it is in the ISR of every
   partition it is a replica of (RF>1); and how many *other* brokers the controller
   fenced through steps 5 and 6 (its log's "fenced broker N" lines: 0 expected — its
   own long steps must not expire the sessions of brokers that stayed up);
7. **clean restart** of the whole cluster (SIGTERM, controlled shutdown, then start):
   the brokers' log loading (the first log line to "loaded N logs", from each
   server.log) and the time until every partition has a leader again.

After steps 1, 3, 5, 6 and 7 it prints the **longest event-loop stall** of any broker
during that step (``GET /event-loop``, server/loop_monitor.py: how late a 10 ms sleep
woke; stalls under 100 ms are not kept, so 0 means "under 100 ms"); the controller's
over the whole run at the end. A broker whose loop is held past
``broker.session.timeout.ms`` misses its heartbeats and is fenced.

Each figure is printed as it is measured and a table of all sizes is printed at the end,
with the ratio of each figure to the smallest size's: linear growth shows the ratio of
the partition counts (3.0 and 10.0), quadratic its square. The machine's other work
shares its cores: compare ratios within one run.

``TIDELOG_PROFILE=<directory>`` in the environment makes every node write a cProfile of
its run there (``<node id>.prof``, at a clean stop; the killed broker writes none).

    python benchmarks/scale_bench.py [--partitions 1000 3000 10000] [--rf 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tidelog.protocol.api_keys import ApiKey  # noqa: E402
from tidelog.protocol.codec import decode_response, encode_request  # noqa: E402
from tidelog.testing import Cluster  # noqa: E402

HOST = "127.0.0.1"
PARTITIONS_PER_TOPIC = 100
METADATA_VERSION = 12
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def until(probe, timeout_s: float, what: str, interval_s: float = 0.1):
    """``probe()``'s first true value, polled every ``interval_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)
    return value


def metadata(port: int, timeout_s: float = 120.0):
    """A full Metadata request (every topic) to the broker on ``port``: (response,
    latency in seconds, response size in bytes), or None if it did not answer."""
    body = {"topics": None, "allow_auto_topic_creation": False}
    frame = encode_request(ApiKey.METADATA, METADATA_VERSION, 1, "scale-bench", body)
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as s:
            started = time.monotonic()
            s.sendall(frame)
            (size,) = struct.unpack(">i", _read_exactly(s, 4))
            answer = _read_exactly(s, size)
            took = time.monotonic() - started
    except OSError:
        return None
    _, response = decode_response(ApiKey.METADATA, METADATA_VERSION, answer)
    return response, took, size + 4


def _read_exactly(s: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = s.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def partitions(response) -> dict[tuple[str, int], object]:
    return {(t.name, p.partition_index): p for t in response.topics if t.name.startswith("scale-")
            for p in t.partitions}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str) -> tuple[float, int]:
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as answer:
        size = len(answer.read())
    return time.monotonic() - started, size


def loop_stalls(cluster, node_id: int) -> dict | None:
    """The node's ``/event-loop`` answer, or None when it does not answer (killed)."""
    url = cluster.metrics_url(node_id).rsplit("/", 1)[0] + "/event-loop"
    try:
        with urllib.request.urlopen(url, timeout=120) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


def longest_stall_ms(cluster, nodes, since_s: float, until_s: float) -> float:
    """The longest stall of any of ``nodes`` that ended between ``since_s`` and
    ``until_s`` (``time.monotonic``, the same clock as the nodes'); 0: none of 100 ms."""
    longest = 0.0
    for node in nodes:
        answer = loop_stalls(cluster, node.node_id)
        for end_s, stall_ms in (answer or {}).get("stalls", []):
            if since_s <= end_s <= until_s + 1:
                longest = max(longest, stall_ms)
    return longest


def log_loading_s(server_log: str, from_offset: int) -> float | None:
    """Seconds from the process's first line written after ``from_offset`` (the shutdown
    before it excluded) to "loaded N logs"."""
    with open(server_log, "rb") as f:
        f.seek(from_offset)
        lines = f.read().decode("utf-8", "replace").splitlines()
    stamps = [(m.group(1), line) for line in lines if (m := _LOG_TIME.match(line))]
    starts = [i for i, (_, line) in enumerate(stamps) if "open file limit" in line]
    stamps = stamps[starts[-1]:] if starts else stamps
    if not stamps:
        return None
    first = datetime.strptime(stamps[0][0], "%Y-%m-%d %H:%M:%S,%f")
    for stamp, line in stamps:
        if "loaded" in line and " logs" in line:
            return (datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") - first).total_seconds()
    return None


def run(total: int, rf: int, topics_per_request: int, data_dir: str | None,
        session_timeout_ms: int) -> dict[str, float]:
    figures: dict[str, float] = {}

    def note(name: str, value: float, unit: str) -> None:
        figures[name] = value
        print(f"  [{total:>6} partitions] {name}: {value:.3f} {unit}", flush=True)

    overrides = {"num.partitions": "1", "auto.create.topics.enable": "false",
                 "broker.session.timeout.ms": str(session_timeout_ms)}
    directory = tempfile.mkdtemp(prefix="tidelog-scale-", dir=data_dir)
    try:
        with Cluster(brokers=3, controllers=1, metrics=True, overrides=overrides, directory=directory) as cluster:
            return _measure(cluster, total, rf, topics_per_request, note, figures)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _measure(cluster, total: int, rf: int, topics_per_request: int, note, figures) -> dict[str, float]:
    layout = cluster.processes.layout
    ports = {b.node_id: b.port for b in layout.brokers}
    second = layout.brokers[1].node_id
    controller = layout.controllers[0]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    names = [f"scale-{i:04d}" for i in range(total // PARTITIONS_PER_TOPIC)]

    started = time.monotonic()
    for i in range(0, len(names), topics_per_request):
        batch = [NewTopic(n, PARTITIONS_PER_TOPIC, rf) for n in names[i:i + topics_per_request]]
        for future in admin.create_topics(batch, operation_timeout=600, request_timeout=600).values():
            future.result()
    note("create (acknowledged)", time.monotonic() - started, "s")

    def all_led(port: int):
        answer = metadata(port)
        if answer is None:
            return None
        found = partitions(answer[0])
        return len(found) == total and all(p.leader_id >= 0 for p in found.values()) and found
    until(lambda: all_led(ports[second]), 1800, f"a leader for all {total} partitions", 0.5)
    note("create -> all led", time.monotonic() - started, "s")
    note("longest broker loop stall: create", longest_stall_ms(cluster, layout.brokers, started, time.monotonic()),
         "ms")

    served_at = time.monotonic()
    samples = [metadata(ports[second]) for _ in range(5)]
    note("metadata latency (median of 5)", statistics.median(s[1] for s in samples) * 1000, "ms")
    note("metadata size", samples[0][2] / 1024, "KiB")

    for node in layout.brokers:
        scrapes = [scrape(cluster.metrics_url(node.node_id)) for _ in range(3)]
        note(f"/metrics broker {node.node_id} latency (median of 3)",
             statistics.median(s[0] for s in scrapes) * 1000, "ms")
        note(f"/metrics broker {node.node_id} size", scrapes[0][1] / 1024, "KiB")
    note("longest broker loop stall: metadata and /metrics",
         longest_stall_ms(cluster, layout.brokers, served_at, time.monotonic()), "ms")
    for node in layout.brokers:
        note(f"RSS broker {node.node_id}", rss_mb(node.pid), "MiB")
    note("RSS controller", rss_mb(controller.pid), "MiB")

    # kill -9 of the broker leading the most partitions: they move.
    found = partitions(metadata(ports[second])[0])
    leaders = Counter(p.leader_id for p in found.values())
    first = max((b.node_id for b in layout.brokers), key=lambda n: leaders.get(n, 0))
    second = next(b.node_id for b in layout.brokers if b.node_id != first)
    led = {key for key, p in found.items() if p.leader_id == first}
    note("leaders per broker before the kill (min/max)",
         min(leaders.get(b.node_id, 0) for b in layout.brokers) * 1.0, f"/ {max(leaders.values())}")
    controller_log = os.path.join(cluster.processes._node_dir(controller), "server.log")
    controller_log_from = os.path.getsize(controller_log)
    cpu_before = cpu_s(controller.pid)
    killed_at = time.monotonic()
    cluster.kill(first)

    def moved():
        answer = metadata(ports[second])
        if answer is None:
            return False
        found = partitions(answer[0])
        return all(found[key].leader_id not in (-1, first) for key in led) if rf > 1 else True
    until(moved, 1800, f"new leaders for the {len(led)} partitions broker {first} led", 0.2)
    took = time.monotonic() - killed_at
    note("partitions the killed broker led", len(led) * 1.0, "")
    note("kill -9 -> new leaders for all it led", took, "s")
    note("controller CPU during failover", (cpu_s(controller.pid) - cpu_before) / took * 100, "%")
    survivors = [b for b in layout.brokers if b.node_id != first]
    note("longest broker loop stall: failover", longest_stall_ms(cluster, survivors, killed_at, time.monotonic()),
         "ms")

    restarted_at = time.monotonic()
    cluster.start_node(first)

    def rejoined():
        answer = metadata(ports[second])
        if answer is None:
            return False
        return all(first in p.isr_nodes for p in partitions(answer[0]).values() if first in p.replica_nodes)
    until(rejoined, 1800, f"broker {first} back in every ISR", 0.5)
    note("restart -> back in every ISR", time.monotonic() - restarted_at, "s")
    # The controller's own stalls (a fence or an unfence re-elects thousands of partitions
    # in one step) must not expire the sessions of the brokers that stayed up.
    with open(controller_log, "rb") as f:
        f.seek(controller_log_from)
        fenced = re.findall(rb"fenced broker (\d+): its session expired", f.read())
    note("killed broker fenced (the count's own check: 1)", sum(1.0 for n in fenced if int(n) == first), "")
    note("brokers fenced besides the killed one (failover and rejoin)",
         sum(1.0 for n in fenced if int(n) != first), "")
    note("longest broker loop stall: rejoin", longest_stall_ms(cluster, layout.brokers, restarted_at, time.monotonic()),
         "ms")

    # A clean restart of the whole cluster.
    logs = {b.node_id: os.path.join(cluster.processes._node_dir(b), "server.log") for b in layout.brokers}
    offsets = {n: os.path.getsize(path) for n, path in logs.items()}
    cluster.processes.down()
    restarted_at = time.monotonic()
    cluster.processes.up()
    ports = {b.node_id: b.port for b in layout.brokers}
    note("clean restart -> all RUNNING", time.monotonic() - restarted_at, "s")
    until(lambda: all_led(ports[second]), 1800, "a leader for every partition after the restart", 0.5)
    note("clean restart -> all led", time.monotonic() - restarted_at, "s")
    loading = [s for n, path in logs.items() if (s := log_loading_s(path, offsets[n])) is not None]
    if loading:
        note("log loading (slowest broker)", max(loading), "s")
    note("longest broker loop stall: clean restart",
         longest_stall_ms(cluster, layout.brokers, restarted_at, time.monotonic()), "ms")
    note("longest controller loop stall (since the restart)",
         (loop_stalls(cluster, controller.node_id) or {}).get("stall_max_ms", float("nan")), "ms")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--rf", type=int, default=3)
    parser.add_argument("--topics-per-request", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=9000,
                        help="broker.session.timeout.ms (default: Kafka's 9000; the failover time is this "
                             "plus the move)")
    parser.add_argument("--data-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the nodes keep their data (default: /dev/shm, a tmpfs, where fsync "
                             "costs nothing; give a disk directory to include its fsync latency)")
    args = parser.parse_args()
    results = {}
    for total in args.partitions:
        print(f"{total} partitions ({total // PARTITIONS_PER_TOPIC} topics x {PARTITIONS_PER_TOPIC}, "
              f"RF={args.rf}, data in {args.data_dir or tempfile.gettempdir()}, "
              f"broker.session.timeout.ms {args.session_timeout_ms}):", flush=True)
        results[total] = run(total, args.rf, args.topics_per_request, args.data_dir, args.session_timeout_ms)
    sizes = list(results)
    names = [name for name in results[sizes[0]]]
    width = max(len(n) for n in names)
    print()
    print(f"{'':<{width}} " + " ".join(f"{s:>10}" for s in sizes) + "   ratio to the first (" +
          ", ".join(f"x{s / sizes[0]:g}" for s in sizes[1:]) + " partitions)")
    for name in names:
        row = [results[s].get(name, float("nan")) for s in sizes]
        ratios = [r / row[0] if row[0] else float("nan") for r in row[1:]]
        print(f"{name:<{width}} " + " ".join(f"{v:>10.3f}" for v in row) + "   " +
              " ".join(f"{r:>6.1f}" for r in ratios))


if __name__ == "__main__":
    main()
