"""Spark as separate processes, for tests: a standalone cluster and a Spark Connect server.

Both run from the Spark that the ``pyspark`` package ships (its ``jars/`` and
``bin/spark-class``, ``bin/spark-submit``), bound to loopback on free ports, with
logs and work directories in a temporary directory, and are killed (the whole
process group) on ``close``.

* ``StandaloneCluster``: ``org.apache.spark.deploy.master.Master`` and
  ``workers`` × ``org.apache.spark.deploy.worker.Worker`` (1 core each), ready
  once the master's status page lists every worker ALIVE. ``submit`` runs
  ``spark-submit --master spark://…`` for a Python application (client mode: the
  driver is the spark-submit process and its Python child).
* ``ConnectServer``: ``org.apache.spark.sql.connect.service.SparkConnectServer``
  through spark-submit (local master), ready once its gRPC port accepts.

Executors' and the Connect server's Python workers run ``PYSPARK_PYTHON``, this
interpreter, where tidelog is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SPARK_KAFKA_CLASSPATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "interop",
                                     "spark-kafka", "target", "classpath.txt")


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's own Kafka connector (``make java-interop`` resolves them,
    interop/spark-kafka/pom.xml), or [] if they are not there."""
    try:
        with open(SPARK_KAFKA_CLASSPATH) as f:
            jars = [path for path in f.read().strip().split(os.pathsep) if path]
    except OSError:
        return []
    return jars if jars and all(os.path.isfile(path) for path in jars) else []

from tidelog.spark.session import worker_python

from . import cds

SPARK_HOME = os.path.dirname(__import__("pyspark").__file__)
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
SPARK_SUBMIT = os.path.join(SPARK_HOME, "bin", "spark-submit")
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


# Every Spark JVM a test starts runs short jobs, where JIT compiling at C2 and a parallel
# collector cost more CPU than they win back on a busy two-core machine: drivers, executors,
# a standalone master and workers, a Connect server. They map the class archive that
# `make test` writes once (tests/spark/cds.py). Only for tests (the benchmark keeps
# Spark's defaults). Asked for as each JVM starts: the archive may still be being written.
def spark_java_options() -> str:
    return cds.java_options()


def java_missing() -> str | None:
    """Why Spark cannot start here, or None."""
    if shutil.which("java") or os.environ.get("JAVA_HOME"):
        return None
    return "Spark needs a Java runtime (java on PATH or JAVA_HOME); none found"


def free_port() -> int:
    """A port for a server named before it starts (per xdist worker: docs/testing.md)."""
    from tests.kafka_fixture import free_port as worker_free_port
    return worker_free_port()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def spark_env(directory: str) -> dict[str, str]:
    """The environment of every Spark process: loopback, our Python, and Spark's default
    conf directory (no SPARK_CONF_DIR: the class path the class archive was made with)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
    env.update({"SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": spark_java_options(),
                "PYSPARK_PYTHON": worker_python(directory),
                "PYSPARK_DRIVER_PYTHON": sys.executable})
    return env


class _Process:
    """One process (group) whose output goes to a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: str, cwd: str | None = None):
        self.name, self.args, self.log_path = name, args, log_path
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(args, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log(self, tail_chars: int = 6000) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-tail_chars:]

    def failure(self, lines: int = 40) -> str:
        """What a failed run said: its first distinct exception and cause lines (a stack
        trace's tail names none), then the end of its log."""
        seen: dict[str, None] = {}
        for line in self.log(10_000_000).splitlines():
            text = line.strip()
            if ("Exception" in text or "Error" in text or text.startswith("Caused by")) \
                    and not text.startswith("at ") and len(seen) < lines:
                seen.setdefault(text[:400], None)
        return "\n".join(seen) + "\n...\n" + self.log(3000)

    def kill(self) -> None:
        """SIGKILL the whole group (spark-submit's JVM and its Python, a worker and its executors)."""
        if self._log.closed:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self._log.close()

    def wait(self, timeout_s: float) -> int:
        code = self.process.wait(timeout_s)
        self._log.close()
        return code


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on loopback."""

    def __init__(self, workers: int = 2, worker_memory: str = "1g", start_timeout_s: float = 180.0):
        self.directory = tempfile.mkdtemp(prefix="tidelog-spark-standalone-")
        self.env = spark_env(self.directory)
        self.workers_count, self.worker_memory = workers, worker_memory
        self.start_timeout_s = start_timeout_s
        self.port, self.ui_port = free_port(), free_port()
        self.processes: list[_Process] = []
        self.drivers: list[_Process] = []   # spark-submit'ed applications

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> "StandaloneCluster":
        try:
            self.processes.append(_Process("master", [
                SPARK_CLASS, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(self.ui_port)], self.env, os.path.join(self.directory, "master.log")))
            self._read_master_ports()
            for i in range(self.workers_count):
                work_dir = os.path.join(self.directory, f"worker-{i}")
                os.makedirs(work_dir)
                self.processes.append(_Process(f"worker-{i}", [
                    SPARK_CLASS, WORKER_CLASS, "--host", "127.0.0.1", "--port", str(free_port()),
                    "--webui-port", str(free_port()), "--cores", "1", "--memory", self.worker_memory,
                    "--work-dir", work_dir, self.master_url], self.env, os.path.join(self.directory, f"worker-{i}.log")))
            self._wait_for_workers()
        except BaseException:
            self.close()
            raise
        return self

    def status(self) -> dict:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.loads(response.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")
        except OSError:
            return 0

    def _read_master_ports(self) -> None:
        """The ports the master bound, from its log: a port picked free may be taken by
        another process before the master binds it, and Spark then tries the next one
        (a worker given the planned port never registers)."""
        deadline = time.monotonic() + self.start_timeout_s
        log_path = os.path.join(self.directory, "master.log")
        while True:
            with open(log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            ports = {name: int(port) for name, port in
                     re.findall(r"Successfully started service '(sparkMaster|MasterUI)' on port (\d+)", text)}
            if len(ports) == 2:
                self.port, self.ui_port = ports["sparkMaster"], ports["MasterUI"]
                return
            if not self.processes[0].running or time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone master did not start:\n{self.processes[0].log(3000)}")
            time.sleep(0.2)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while self.alive_workers() < self.workers_count:
            dead = [p for p in self.processes if not p.running]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0].name} exited" if dead else f"not ready after {self.start_timeout_s:g} s"
                raise RuntimeError(f"Spark standalone cluster: {why}:\n" +
                                   "\n".join(f"--- {p.name}\n{p.log(3000)}" for p in self.processes))
            time.sleep(0.5)

    def submit(self, app: list[str], log_name: str, conf: dict[str, str] | None = None, cwd: str | None = None,
               ) -> _Process:
        """``spark-submit --master spark://…`` a Python application (client mode)."""
        settings = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.ui.enabled": "false", "spark.executor.memory": "512m", "spark.driver.memory": "512m",
                    "spark.pyspark.python": self.env["PYSPARK_PYTHON"], "spark.pyspark.driver.python": sys.executable,
                    "spark.driver.extraJavaOptions": spark_java_options(),
                    "spark.executor.extraJavaOptions": spark_java_options(), **(conf or {})}
        args = [SPARK_SUBMIT, "--master", self.master_url, "--deploy-mode", "client"]
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
        driver = _Process(log_name, args + app, self.env, os.path.join(self.directory, f"{log_name}.log"), cwd=cwd)
        self.drivers.append(driver)
        return driver

    def executor_errors(self, frames: int = 60) -> str:
        """Each distinct exception the executors logged (their ``stderr`` in the workers'
        work directories), with its first stack frames: a task's failure on an executor
        reaches the driver's log without them."""
        found: dict[str, None] = {}
        for root, _, files in os.walk(self.directory):
            if "stderr" not in files or "worker-" not in root:
                continue
            with open(os.path.join(root, "stderr"), "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            for i, line in enumerate(lines):
                if ("Exception" in line or "Error" in line) and not line.lstrip().startswith("at "):
                    stack = [line] + [x for x in lines[i + 1:i + 1 + frames] if x.lstrip().startswith(("at ", "Caused"))
                                      and "java.io.ObjectInputStream" not in x and "reflect." not in x]
                    found.setdefault(f"--- {os.path.relpath(root, self.directory)}\n" + "\n".join(stack), None)
        return "\n".join(list(found)[:8]) or "(no exception in the executors' logs)"

    def close(self) -> None:
        for process in self.drivers + list(reversed(self.processes)):   # then workers (and executors), master
            process.kill()
        self.drivers, self.processes = [], []
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class ConnectServer:
    """A Spark Connect server (spark-submit of SparkConnectServer) on a loopback port."""

    def __init__(self, master: str = "local[2]", start_timeout_s: float = 180.0, conf: dict[str, str] | None = None):
        self.directory = tempfile.mkdtemp(prefix="tidelog-spark-connect-")
        # spark-submit sizes the Connect server (a long-running "daemon" class) with
        # SPARK_DAEMON_MEMORY, not spark.driver.memory; Spark refuses less than 450 MiB.
        self.env = {**spark_env(self.directory), "SPARK_DAEMON_MEMORY": "1g"}
        self.master, self.start_timeout_s = master, start_timeout_s
        self.port = free_port()
        self.conf = conf or {}
        self.process: _Process | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> "ConnectServer":
        settings = {"spark.connect.grpc.binding.address": "127.0.0.1",
                    "spark.connect.grpc.binding.port": str(self.port),
                    "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                    "spark.sql.session.timeZone": "UTC", "spark.pyspark.python": self.env["PYSPARK_PYTHON"],
                    "spark.driver.extraJavaOptions": spark_java_options(), **self.conf}
        args = [SPARK_SUBMIT, "--master", self.master, "--class", CONNECT_SERVER_CLASS, "--name", "tidelog-connect"]
        for key, value in settings.items():
            args += ["--conf", f"{key}={value}"]
        self.process = _Process("connect-server", args, self.env, os.path.join(self.directory, "server.log"))
        deadline = time.monotonic() + self.start_timeout_s
        while not _accepts(self.port):
            if not self.process.running or time.monotonic() > deadline:
                log = self.process.log()
                self.close()
                raise RuntimeError(f"Spark Connect server did not start:\n{log}")
            time.sleep(0.5)
        return self

    def log(self) -> str:
        return self.process.log() if self.process else ""

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "ConnectServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
