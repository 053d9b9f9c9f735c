"""Shared pieces of the Kafka Streams and Kafka Connect tests (tests/interop/).

``three_brokers()`` is the 3-broker tidelog cluster (real processes, free loopback
ports, quick group rebalances) a test module shares. ``JavaApp`` runs one Java main
class as a process of its own, so that a test can kill it with SIGKILL: its standard
output is kept line by line (``wait_for_line``), its slf4j log goes to a file shown on
failure. ``ConnectWorker`` is a Kafka Connect distributed worker
(``org.apache.kafka.connect.cli.ConnectDistributed``, the 4.3.1 jars of interop/connect)
on a free loopback REST port, with a small REST client.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.interop.conftest import GROUP_SETTINGS
from tests.interop.java_driver import ROOT, classpath, ensure_built
from tests.interop.line_driver import file_tail
from tidelog.testing import Cluster, wait_until

CONNECT_CLASSPATH_FILE = ROOT / "interop" / "connect" / "target" / "classpath.txt"

# Broker failure detection quick enough for a test, as the other cluster tests use.
CLUSTER_SETTINGS = {**GROUP_SETTINGS, "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@contextlib.contextmanager
def three_brokers():
    with Cluster(brokers=3, overrides=CLUSTER_SETTINGS) as cluster:
        yield cluster


def free_port() -> int:
    """A port for a server named before it starts (per xdist worker: docs/testing.md)."""
    from tests.kafka_fixture import free_port as worker_free_port
    return worker_free_port()


class JavaApp:
    """``java -cp <class path> main_class args`` as a process of its own."""

    def __init__(self, main_class: str, *args: str, class_path: str | None = None, log_level: str = "info",
                 name: str = "app", properties: dict[str, str] | None = None):
        if class_path is None:
            ensure_built()
            class_path = classpath()
        self.name = name
        self.log_path = tempfile.NamedTemporaryFile(prefix=f"tidelog-{name}-", suffix=".log", delete=False).name
        system = {"org.slf4j.simpleLogger.logFile": self.log_path,
                  "org.slf4j.simpleLogger.defaultLogLevel": log_level,
                  "org.slf4j.simpleLogger.showDateTime": "true", **(properties or {})}
        command = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   *(f"-D{key}={value}" for key, value in system.items()), "-cp", class_path, main_class, *args]
        self.lines: list[str] = []
        self._pump_done = False
        self._changed = threading.Condition()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        bufsize=1)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._pump_done = True
            self._changed.notify_all()

    def wait_for_line(self, wanted: str, timeout_s: float = 120, start: int = 0) -> int:
        """The index of the first output line from ``start`` on that contains ``wanted``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for index in range(start, len(self.lines)):
                    if wanted in self.lines[index]:
                        return index
                if self._pump_done:
                    raise AssertionError(f"{self.name} exited ({self.process.returncode}) before printing "
                                         f"{wanted!r}: {self.lines[-20:]}\nlog: {self.log_tail()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} did not print {wanted!r} in {timeout_s:g} s: "
                                         f"{self.lines[-20:]}\nlog: {self.log_tail()}")
                self._changed.wait(0.2)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no clean close."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout_s: float = 60) -> int:
        """SIGTERM (the app's shutdown hook closes it cleanly); its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"{self.name} did not stop in {timeout_s:g} s on SIGTERM; "
                                     f"log: {self.log_tail()}") from None
        return self.process.returncode

    def log_tail(self, lines: int = 40) -> str:
        return file_tail(self.log_path, lines)

    def log_text(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def close(self, keep_log: bool = False) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if not keep_log:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path)


# ------------------------------------------------------------------ Kafka Connect


def connect_missing() -> str | None:
    """Why the Connect tests cannot run here (beyond java/mvn), or None."""
    if not CONNECT_CLASSPATH_FILE.exists():
        return f"{CONNECT_CLASSPATH_FILE.relative_to(ROOT)} missing (make java-interop resolves Kafka Connect)"
    return None


class ConnectWorker:
    """One Kafka Connect distributed worker, its settings in a file of its own.

    Its config, offset and status topics are left for the worker to create (replication
    factor 3, compacted, as on Kafka); ``group_id`` names the worker group.
    """

    def __init__(self, bootstrap: str, group_id: str, directory: Path, name: str, extra: dict | None = None):
        self.port = free_port()
        self.name = name
        self.url = f"http://127.0.0.1:{self.port}"
        settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{group_id}-configs",
            "offset.storage.topic": f"{group_id}-offsets",
            "status.storage.topic": f"{group_id}-status",
            "config.storage.replication.factor": "3",
            "offset.storage.replication.factor": "3",
            "status.storage.replication.factor": "3",
            "offset.storage.partitions": "5",
            "status.storage.partitions": "3",
            # The source task's offsets are flushed every second (Kafka's default: a minute).
            "offset.flush.interval.ms": "1000",
            # A departed worker's tasks are reassigned after this (Kafka's default: 5 minutes).
            "scheduled.rebalance.max.delay.ms": "3000",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            **(extra or {}),
        }
        self.settings_file = directory / f"{name}.properties"
        self.settings_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        class_path = CONNECT_CLASSPATH_FILE.read_text().strip()
        self.app = JavaApp("org.apache.kafka.connect.cli.ConnectDistributed", str(self.settings_file),
                           class_path=class_path, name=f"connect-{name}")

    def request(self, method: str, path: str, body: dict | None = None, timeout_s: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                text = response.read().decode()
                return response.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            try:
                return error.code, json.loads(text)
            except ValueError:
                return error.code, text

    def get(self, path: str):
        return self.request("GET", path)

    def ready(self) -> bool:
        """The REST API answers and the worker has joined its group (it lists connectors)."""
        if self.app.process.poll() is not None:
            raise AssertionError(f"worker {self.name} exited: {self.app.lines[-20:]}\nlog: {self.app.log_tail()}")
        try:
            status, _ = self.get("/connectors")
        except (OSError, urllib.error.URLError):
            return False
        return status == 200

    def wait_ready(self, timeout_s: float = 120) -> None:
        wait_until(self.ready, timeout_s, f"Connect worker {self.name} to serve its REST API", interval_s=0.5)

    def kill(self) -> None:
        self.app.kill()

    def close(self, keep_log: bool = False) -> None:
        self.app.close(keep_log)
