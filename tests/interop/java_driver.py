"""Kafka's own Java client and tools, driven from Python (interop/java).

``JavaDriver`` starts one JVM running ``dev.tidelog.interop.Driver`` (interop/java/src)
with the pinned Kafka jars (interop/java/pom.xml) on its class path and talks to it in
JSON lines: ``java.call("producer.send", name="p", topic="t", records=[...])`` returns
the result or raises ``JavaError`` with the Java exception's simple class name.
``java.tool("TopicCommand", "--bootstrap-server", b, "--list")`` runs a Kafka tool's
``main`` in that JVM and returns ``ToolResult(exit_code, stdout, stderr)``.

``ensure_built()`` builds the module when its class path file is missing or older than
its sources (``make java-interop`` does the same; ``mvn -o`` first, online only if the
local Maven cache lacks something); the tests skip, saying why, only when ``java`` or
``mvn`` is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.interop.line_driver import DriverError, LineDriver
from tests.kafka_fixture import build_lock

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "interop" / "java"
CLASSPATH_FILE = MODULE / "target" / "classpath.txt"
CLASSES = MODULE / "target" / "classes"
MAIN_CLASS = "dev.tidelog.interop.Driver"
TOOLS = "org.apache.kafka.tools."


# A Java exception from the driver: ``kind`` is its simple class name.
JavaError = DriverError


@dataclass
class ToolResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


def missing_tools() -> str | None:
    """Why the Java interop tests cannot run here, or None."""
    absent = [name for name in ("java", "mvn") if shutil.which(name) is None]
    return f"{' and '.join(absent)} not installed (the Java interop tests need a JDK 17+ and Maven)" if absent else None


def _sources() -> list[Path]:
    return [MODULE / "pom.xml", *sorted((MODULE / "src").rglob("*.java"))]


def ensure_built() -> None:
    """Compile the driver and write the class path, if anything changed since the last build."""
    with build_lock(MODULE):                      # one build across xdist workers too
        if CLASSPATH_FILE.exists() and CLASSES.exists():
            built = CLASSPATH_FILE.stat().st_mtime
            if all(source.stat().st_mtime <= built for source in _sources()):
                return
        goals = ["-q", "-B", "compile", "dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH_FILE}"]
        offline = subprocess.run(["mvn", "-o", *goals], cwd=MODULE, capture_output=True, text=True)
        if offline.returncode != 0:
            online = subprocess.run(["mvn", *goals], cwd=MODULE, capture_output=True, text=True)
            if online.returncode != 0:
                raise RuntimeError("building interop/java failed:\n" + online.stdout[-4000:] + online.stderr[-4000:])
        CLASSPATH_FILE.touch()


def classpath() -> str:
    return f"{CLASSES}{os.pathsep}{CLASSPATH_FILE.read_text().strip()}"


def java_command(main_class: str, *args: str, log_file: str | None = None) -> list[str]:
    """``java -cp <the module's class path> main_class args`` (for a tool in its own JVM)."""
    properties = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
    if log_file:
        properties.append(f"-Dorg.slf4j.simpleLogger.logFile={log_file}")
    return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *properties, "-cp", classpath(),
            main_class, *args]


class JavaDriver(LineDriver):
    """One JVM serving commands in order (see interop/java/src/.../Driver.java)."""

    def __init__(self, log_level: str = "info"):
        ensure_built()
        log_path = tempfile.NamedTemporaryFile(prefix="tidelog-java-", suffix=".log", delete=False).name
        command = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dorg.slf4j.simpleLogger.logFile={log_path}",
                   f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
                   "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", classpath(), MAIN_CLASS]
        started = time.monotonic()
        super().__init__(command, "Java", log_path=log_path)
        self.kafka_version = self.hello["kafka"]
        self.start_seconds = time.monotonic() - started

    def tool(self, name: str, *args: str, timeout_s: float = 60) -> ToolResult:
        """A Kafka tool's main (``TopicCommand`` is ``org.apache.kafka.tools.TopicCommand``)."""
        class_name = name if "." in name else TOOLS + name
        result = self.call("tool.run", timeout_s=timeout_s + 30, timeout_ms=int(timeout_s * 1000),
                           args=list(args), **{"class": class_name})
        return ToolResult(result["exit_code"], result["stdout"], result["stderr"] +
                          (f"\n{result['exception']}" if result.get("exception") else ""), result["timed_out"])
