"""Real tidelog brokers for tests (yours and ours).

``Broker`` runs ``tidelog serve`` as a separate process on a free loopback port
with its data in a temporary (or given) directory, waits for its ready line,
and stops it on exit::

    from tidelog.testing import Broker

    with Broker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

It can also be killed (SIGKILL), stopped cleanly (SIGTERM) and restarted on the
same port and data, for durability tests. With ``metrics.port`` among its
overrides ("0" for a free port), ``metrics_url`` is its Prometheus endpoint.
For pytest, ``tidelog_broker`` is a module-scoped fixture: put
``from tidelog.testing import tidelog_broker`` in your ``conftest.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

_READY = re.compile(r"tidelog ready: (?:node|broker) \d+ listening on \w+://([^:]+):(\d+)"
                    r"(?:, metrics on (http://\S+/metrics))?")


def wait_until(predicate, timeout_s: float = 20.0, what: str = "condition", interval_s: float = 0.1) -> None:
    """Poll ``predicate()`` until it is true; AssertionError naming ``what`` after
    ``timeout_s`` (for tests that wait on a cluster's state)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def topic_in_sync(admin, topic: str, replicas: int, partitions=(0,)) -> bool:
    """Whether every partition of ``topic`` in ``partitions`` has ``replicas`` in-sync
    replicas, as a client's Metadata request sees it (``admin``: a confluent-kafka
    AdminClient). False, not an error, while the broker asked does not show the topic
    or a partition yet: a broker learns a topic from the metadata log a little after
    CreateTopics is answered, as in Kafka."""
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return False
    return all(p in metadata.partitions and len(metadata.partitions[p].isrs) == replicas for p in partitions)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    def __init__(self, data_dir: str | None = None, overrides: dict[str, str] | None = None,
                 start_timeout_s: float = 30.0, host: str = "127.0.0.1"):
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="tidelog-test-")
        self.overrides = dict(overrides or {})
        self.start_timeout_s = start_timeout_s
        self.host = host
        self.port = 0
        self.metrics_url: str | None = None     # Prometheus /metrics, with metrics.port set
        self.process: subprocess.Popen | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "Broker":
        """Start the broker process; returns once it serves (or raises with its output)."""
        settings = {"log.dirs": os.path.join(self.data_dir, "data"),
                    "listeners": f"PLAINTEXT://{self.host}:{self.port}", **self.overrides}
        args = [sys.executable, "-m", "tidelog.cli.main", "serve"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        self.output = []
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, bufsize=1)
        ready = threading.Event()

        def pump(process=self.process):
            for line in process.stdout:
                self.output.append(line.rstrip("\n"))
                if len(self.output) > 10_000:
                    del self.output[:5_000]
                match = _READY.search(line)
                if match:
                    self.port = int(match.group(2))
                    self.metrics_url = match.group(3)
                    ready.set()
        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError("tidelog serve did not become ready:\n" + "\n".join(self.output[-40:]))
        return self

    def stop(self, timeout_s: float = 30.0) -> int:
        """Clean shutdown (SIGTERM), as an operator would; returns the exit code."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._join()
        return code

    def kill(self) -> None:
        """SIGKILL: the process dies at once, losing what was not written to the files."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._join()

    def restart(self, clean: bool = True) -> "Broker":
        """Stop (cleanly or by SIGKILL) and start again on the same port and data."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
        self.process = None

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


try:
    import pytest

    @pytest.fixture(scope="module")
    def tidelog_broker():
        """A running single-node tidelog broker for the test module."""
        with Broker() as broker:
            yield broker
except ImportError:  # pytest is optional for users of Broker itself
    pass


class Cluster:
    """A real multi-process cluster for tests: ``controllers`` controllers (a Raft
    quorum when more than one: ids 1000, 1001, …) and ``brokers`` brokers on free
    loopback ports, data in a temporary directory::

        with Cluster(brokers=3) as cluster:
            producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
            cluster.kill(2); cluster.restart(2)

    ``overrides`` apply to every node (e.g. ``{"replica.lag.time.max.ms": "2000"}``).
    With ``metrics=True`` every node serves Prometheus ``/metrics`` on a free port:
    ``cluster.metrics_url(node_id)`` (the controller is ``CONTROLLER_ID``, 1000).
    """

    def __init__(self, brokers: int = 3, overrides: dict[str, str] | None = None, directory: str | None = None,
                 metrics: bool = False, controllers: int = 1):
        from tidelog.cluster import ProcessCluster
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="tidelog-cluster-")
        self.processes = ProcessCluster.create(self.directory, brokers, base_port=0, overrides=overrides,
                                               metrics_base_port=0 if metrics else None, controllers=controllers)

    @property
    def bootstrap(self) -> str:
        return self.processes.layout.bootstrap

    @property
    def brokers(self):
        return self.processes.layout.brokers

    def port(self, node_id: int) -> int:
        return self.processes.layout.node(node_id).port

    def metrics_url(self, node_id: int) -> str | None:
        """The node's Prometheus endpoint (None unless the cluster has ``metrics=True``)."""
        return self.processes.metrics_url(node_id)

    def start(self) -> "Cluster":
        self.processes.up()
        return self

    def kill(self, node_id: int) -> None:
        self.processes.kill(node_id)

    def stop(self, node_id: int) -> None:
        self.processes.stop_node(node_id)

    def pause(self, node_id: int) -> None:
        self.processes.pause(node_id)

    def resume(self, node_id: int) -> None:
        self.processes.resume(node_id)

    def restart(self, node_id: int) -> None:
        node = self.processes.layout.node(node_id)
        self.processes.stop_node(node_id)
        self.processes.start_node(node)

    def start_node(self, node_id: int) -> None:
        self.processes.start_node(self.processes.layout.node(node_id))

    def close(self) -> None:
        try:
            self.processes.down()
        finally:
            if self._own_dir:
                shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()
