"""MirrorMaker 2 (Apache Kafka's own, unchanged) as a test fixture.

``MirrorMaker`` runs ``org.apache.kafka.connect.mirror.MirrorMaker`` (MM2's dedicated
mode: one Connect herder per target cluster, in one JVM) from the jars
``interop/connect/pom.xml`` pins (resolved by ``make java-interop``), with an
``mm2.properties`` it writes from the clusters and settings it is given::

    with MirrorMaker({"kafka": kafka.bootstrap, "tidelog": cluster.bootstrap},
                     flows={"kafka->tidelog": {"topics": "a"}}, settings={...}) as mm2:
        ...

The log (slf4j-simple) goes to ``mm2.log`` in the fixture's directory; ``log_tail()``
shows its end when a test fails. ``stop()`` sends SIGTERM (MM2 stops its herders and
commits its source offsets), SIGKILL after a grace period.

MM2 names a mirrored topic ``<source alias>.<topic>`` on the target
(DefaultReplicationPolicy), keeps its checkpoints in ``<source>.checkpoints.internal``
on the target and its offset syncs in ``mm2-offset-syncs.<target>.internal`` on the
source (``offset-syncs.topic.location=source``).
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "interop" / "connect"
POM = MODULE / "pom.xml"
CLASSPATH_FILE = MODULE / "target" / "classpath.txt"
MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def missing_tools() -> str | None:
    absent = [name for name in ("java", "mvn") if shutil.which(name) is None]
    return f"{' and '.join(absent)} not installed (MirrorMaker 2 needs a JDK 17+ and Maven)" if absent else None


def ensure_resolved() -> None:
    """Resolve the Connect and MirrorMaker jars (``mvn -o`` first) unless done since the
    pom last changed, as ``make java-interop`` does."""
    if CLASSPATH_FILE.exists() and CLASSPATH_FILE.stat().st_mtime >= POM.stat().st_mtime:
        return
    goals = ["-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}"]
    if subprocess.run(["mvn", "-o", *goals], cwd=MODULE, capture_output=True).returncode != 0:
        online = subprocess.run(["mvn", *goals], cwd=MODULE, capture_output=True, text=True)
        if online.returncode != 0:
            raise RuntimeError("resolving interop/connect failed:\n" + online.stdout[-3000:] + online.stderr[-3000:])
    CLASSPATH_FILE.touch()


class MirrorMaker:
    """MM2 in dedicated mode between the named clusters (alias -> bootstrap servers).

    ``flows`` maps ``"source->target"`` to that flow's settings (without the prefix, e.g.
    ``{"topics": "a"}``); each named flow is enabled. ``settings`` are top-level
    (every flow and every worker); ``cluster_settings`` maps an alias to settings of
    that cluster's clients and of the worker whose target it is."""

    def __init__(self, clusters: dict[str, str], flows: dict[str, dict[str, str]],
                 settings: dict[str, str] | None = None, cluster_settings: dict[str, dict[str, str]] | None = None,
                 directory: str | None = None, log_level: str = "info"):
        self.clusters = clusters
        self.flows = flows
        self.settings = dict(settings or {})
        self.cluster_settings = cluster_settings or {}
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="mm2-"))
        self.log_level = log_level
        self.process: subprocess.Popen | None = None

    @property
    def properties_file(self) -> Path:
        return self.directory / "mm2.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "mm2.log"

    def properties(self) -> dict[str, str]:
        props = {"clusters": ", ".join(self.clusters)}
        for alias, bootstrap in self.clusters.items():
            props[f"{alias}.bootstrap.servers"] = bootstrap
            for key, value in self.cluster_settings.get(alias, {}).items():
                props[f"{alias}.{key}"] = value
        props.update(self.settings)
        for flow, flow_settings in self.flows.items():
            props[f"{flow}.enabled"] = "true"
            for key, value in flow_settings.items():
                props[f"{flow}.{key}"] = value
        return props

    def start(self) -> "MirrorMaker":
        ensure_resolved()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text("".join(f"{k} = {v}\n" for k, v in self.properties().items()))
        logging = [f"-Dorg.slf4j.simpleLogger.logFile={self.log_file}",
                   f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self.log_level}",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true",
                   "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                   # The clients' own chatter (every config they print) is not what a failure needs.
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config=warn",
                   "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.utils.AppInfoParser=warn"]
        command = ["java", *JVM, *logging, "-cp", CLASSPATH_FILE.read_text().strip(), MAIN_CLASS,
                   str(self.properties_file)]
        out = open(self.directory / "stdout.log", "wb")
        self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        out.close()
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_text().splitlines()[-lines:]
        try:
            stdout = (self.directory / "stdout.log").read_text(errors="replace").splitlines()[-10:]
        except OSError:
            stdout = []
        return "\n".join(text + (["--- stdout"] + stdout if stdout else []))

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self.running():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def close(self, keep: bool = False) -> None:
        self.stop()
        if self._own_dir and not keep:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "MirrorMaker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# -- MM2's internal records ---------------------------------------------------------------


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    return data[pos + 2:pos + 2 + length].decode(), pos + 2 + length


def decode_checkpoint(key: bytes, value: bytes) -> dict:
    """A record of ``<source>.checkpoints.internal``: the key is (group, topic, partition),
    the value a version (int16) then (upstream offset, downstream offset, metadata)."""
    group, pos = _string(key, 0)
    topic, pos = _string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    (version, upstream, downstream) = struct.unpack_from(">hqq", value, 0)
    metadata, _ = _string(value, 18)
    return {"group": group, "topic": topic, "partition": partition, "version": version,
            "upstream_offset": upstream, "downstream_offset": downstream, "metadata": metadata}


def decode_offset_sync(key: bytes, value: bytes) -> dict:
    """A record of ``mm2-offset-syncs.<target>.internal``: the key is (topic, partition),
    the value (upstream offset, downstream offset)."""
    topic, pos = _string(key, 0)
    (partition,) = struct.unpack_from(">i", key, pos)
    upstream, downstream = struct.unpack_from(">qq", value, 0)
    return {"topic": topic, "partition": partition, "upstream_offset": upstream, "downstream_offset": downstream}
