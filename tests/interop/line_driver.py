"""The Go (franz-go) and JavaScript (KafkaJS) drivers, driven from Python.

Each is one process reading JSON commands a line on stdin (``{"id", "op", ...}``) and
answering a line each on stdout (``{"id", "ok", "result" | "error", "message", "ms"}``),
as the Java driver does (java_driver.py). Its log lines go to a file, shown when it fails
to answer. ``go_driver()`` builds ``interop/go/bin/driver`` when it is missing or older
than its sources (``go build``, modules from the Go module proxy the first time, as
``make go-interop`` does); ``js_driver()`` runs ``npm ci`` in ``interop/js`` when its
``node_modules`` is missing or older than package-lock.json (``make js-interop``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from tests.kafka_fixture import build_lock

ROOT = Path(__file__).resolve().parents[2]
GO_MODULE = ROOT / "interop" / "go"
GO_BINARY = GO_MODULE / "bin" / "driver"
JS_MODULE = ROOT / "interop" / "js"
JS_INSTALLED = JS_MODULE / "node_modules" / ".package-lock.json"


class DriverError(Exception):
    """A client error from the driver: ``kind`` is Kafka's error name where there is one."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@contextlib.contextmanager
def open_driver(driver):
    """A driver for a test module: closed, and its log removed, on the way out."""
    try:
        yield driver
    finally:
        driver.close()
        driver.remove_log()


def file_tail(path, lines: int = 40) -> str:
    """The last lines of a process's log file ("" when it has none)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def missing_go() -> str | None:
    return None if shutil.which("go") else "go not installed (the franz-go tests need Go 1.26+, as franz-go 1.22 does)"


def missing_node() -> str | None:
    absent = [name for name in ("node", "npm") if shutil.which(name) is None]
    return f"{' and '.join(absent)} not installed (the KafkaJS tests need Node.js and npm)" if absent else None


def _newer_than(target: Path, sources: list[Path]) -> bool:
    return target.exists() and all(s.stat().st_mtime <= target.stat().st_mtime for s in sources)


def build_go() -> None:
    with build_lock(GO_MODULE):                   # one build across xdist workers too
        sources = [GO_MODULE / "go.mod", GO_MODULE / "go.sum", *sorted(GO_MODULE.glob("*.go"))]
        if _newer_than(GO_BINARY, sources):
            return
        built = subprocess.run(["go", "build", "-buildvcs=false", "-o", str(GO_BINARY), "."], cwd=GO_MODULE,
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"building interop/go failed:\n{built.stdout[-4000:]}{built.stderr[-4000:]}")


def install_js() -> None:
    with build_lock(JS_MODULE):
        if _newer_than(JS_INSTALLED, [JS_MODULE / "package.json", JS_MODULE / "package-lock.json"]):
            return
        installed = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS_MODULE, capture_output=True,
                                   text=True)
        if installed.returncode != 0:
            raise RuntimeError(f"npm ci in interop/js failed:\n{installed.stdout[-4000:]}{installed.stderr[-4000:]}")


class LineDriver:
    """One driver process serving commands in order (the Java driver is one too)."""

    def __init__(self, command: list[str], name: str, cwd: Path | None = None, log_path: str | None = None):
        """``log_path``: a file the process writes its own log to (its stderr then joins
        stdout, kept as stray lines); without it, its stderr is the log, in a temporary file."""
        self.name = name
        if log_path is None:
            log = tempfile.NamedTemporaryFile(prefix=f"tidelog-{name}-", suffix=".log", delete=False)
            self.log_path, stderr = log.name, log
        else:
            log, self.log_path, stderr = None, log_path, subprocess.STDOUT
        self.process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=stderr, text=True, bufsize=1)
        if log is not None:
            log.close()
        self._answers: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._stray: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.hello = self._next(60)
        if not self.hello.get("ready"):
            raise RuntimeError(f"the {name} driver did not start: {self.hello}")

    def _pump(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self._answers.put(json.loads(line))
                    continue
                except ValueError:
                    pass
            if line:
                self._stray.append(line)
        self._answers.put(None)

    def _next(self, timeout_s: float) -> dict:
        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self.close(force=True)
            raise AssertionError(f"the {self.name} driver gave no answer in {timeout_s:g} s (it was killed); "
                                 f"log: {self.log_tail()}") from None
        if answer is None:
            raise AssertionError(f"the {self.name} driver exited: {self._stray[-20:]}\nlog: {self.log_tail()}")
        return answer

    def request(self, op: str, timeout_s: float = 120, **fields) -> dict:
        """The whole answer ({"ok", "result"|"error", "message", "ms"})."""
        if self.process.poll() is not None:
            raise AssertionError(f"the {self.name} driver is not running: {self._stray[-20:]}")
        command_id = next(self._ids)
        self.process.stdin.write(json.dumps({"id": command_id, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        answer = self._next(timeout_s)
        assert answer["id"] == command_id, answer
        return answer

    def call(self, op: str, timeout_s: float = 120, **fields):
        answer = self.request(op, timeout_s, **fields)
        if not answer["ok"]:
            raise DriverError(answer["error"], answer["message"])
        return answer["result"]

    def log_tail(self, lines: int = 40) -> str:
        return file_tail(self.log_path, lines)

    def close(self, force: bool = False) -> None:
        if self.process.poll() is None:
            if not force:
                try:
                    self.process.stdin.write(json.dumps({"id": 0, "op": "exit"}) + "\n")
                    self.process.stdin.flush()
                    self.process.wait(30)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def remove_log(self) -> None:
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def go_driver() -> LineDriver:
    build_go()
    return LineDriver([str(GO_BINARY)], "franz-go", GO_MODULE)


def js_driver() -> LineDriver:
    install_js()
    return LineDriver(["node", "driver.js"], "kafkajs", JS_MODULE)
