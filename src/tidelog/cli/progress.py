"""Progress for long CLI work (cluster start, waiting for leaders, offset resets).

Theory of operation. ``Progress`` shows a live line on standard error — a
spinner, what is being waited for, a bar and ``done/total`` when the total is
known, the elapsed time — using ``rich``, and only when standard error is a
terminal: piped or captured (scripts, tests, CI logs) it prints nothing, so the
command's regular output stays exactly what scripts parse. The line disappears
when the work ends; the command then prints its usual result line.
"""

from __future__ import annotations

import sys
import threading


class Progress:
    def __init__(self, description: str, total: int | None = None, stream=None, force: bool = False):
        self.description = description
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self._lock = threading.Lock()            # advance() may be called from worker threads
        self._progress = None
        self._task = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress as RichProgress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total is not None:
                columns += [BarColumn(), MofNCompleteColumn()]
            columns.append(TimeElapsedColumn())
            console = Console(file=self.stream, force_terminal=True) if self.stream is not sys.stderr or \
                not self.stream.isatty() else Console(stderr=True)
            self._progress = RichProgress(*columns, console=console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def advance(self, steps: int = 1, note: str | None = None) -> None:
        if self._progress is None:
            return
        with self._lock:
            description = self.description if note is None else f"{self.description}: {note}"
            self._progress.update(self._task, advance=steps, description=description)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
