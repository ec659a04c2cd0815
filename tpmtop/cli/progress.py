"""Progress of long headless jobs on a terminal: what is being done, how far, the rate, the time
left. Drawn on stderr by ``rich.progress`` (Rich comes with Textual: no new dependency) only when
stderr is a terminal; piped or redirected, nothing is drawn and Rich is not even imported, so a
log or a ``2>file`` stays one line per message.

Two kinds of job:

* :class:`Bar` — a job that counts its own steps (bench operations, capture elements written):
  the caller reports ``(done, total)``.
* :class:`Reading` — a job whose cost is reading an input file through code that knows nothing
  of progress (compare, export, import): a thread reads the file's offset from
  ``/proc/self/fdinfo`` (as ``pv -d`` does), so no reader needs a callback.

The core (capture, bench, exporters …) never imports this (nor Rich): it takes plain callbacks.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

REFRESH_S = 0.1


def wanted(quiet: bool = False) -> bool:
    """Whether to draw: not asked to be quiet, and stderr is a terminal."""
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced stderr
        return False


def _progress(unit: str, in_bytes: bool, counted: bool) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.table import Column
    from rich.text import Text

    class Rate(ProgressColumn):
        """Steps per second in the job's own unit (Rich's speed columns speak bytes)."""

        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text("? " + unit + "/s" if speed is None else f"{speed:,.0f} {unit}/s")

    console = Console(stderr=True)
    if not counted:  # a step that cannot say how far it is: that it is alive, and for how long
        return Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console, transient=True, refresh_per_second=1 / REFRESH_S, expand=True)
    size: list[Any] = [DownloadColumn(), TransferSpeedColumn()] if in_bytes else \
        [MofNCompleteColumn(), Rate(table_column=Column(no_wrap=True))]
    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=None), TaskProgressColumn(), *size,
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, transient=True, refresh_per_second=1 / REFRESH_S)


class Bar:
    """One counted job: ``with Bar("bench", total, "ops") as bar: bar(done, total)``. Also a
    plain callable ``(done, total)`` for the core's progress callbacks."""

    def __init__(self, what: str, total: float | None = None, unit: str = "ops", *, quiet: bool = False,
                 in_bytes: bool = False, counted: bool = True):
        self.enabled = wanted(quiet)
        self.what, self.total, self.unit, self.in_bytes, self.counted = what, total, unit, in_bytes, counted
        self._p: Any = None
        self._task: Any = None

    def start(self) -> Bar:
        if self.enabled and self._p is None:
            self._p = _progress(self.unit, self.in_bytes, self.counted)
            self._task = self._p.add_task(self.what, total=self.total)
            self._p.start()
        return self

    def __call__(self, done: float, total: float | None = None) -> None:
        if not self.enabled:
            return
        if self._p is None:
            self.start()
        if total is not None and total != self.total:
            self.total = total
            self._p.update(self._task, total=total)
        self._p.update(self._task, completed=done)

    def describe(self, what: str) -> None:
        self.what = what
        if self._p is not None:
            self._p.update(self._task, description=what)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None

    def __enter__(self) -> Bar:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reading:
    """Progress of reading ``paths`` (each as it is open), by the offset the kernel keeps for
    the open file: ``with Reading([a, b]): compare(a, b)``. A path that is not a regular file
    (a pipe, stdin) has no size: its bytes are counted without a time left."""

    def __init__(self, paths: list[str], *, quiet: bool = False, what: str = "reading"):
        self.enabled = wanted(quiet)
        self.what = what
        self.files: dict[str, tuple[str, int | None]] = {}  # real path -> (as given, size)
        for p in paths:
            try:
                st = os.stat(p)
            except OSError:
                continue
            self.files[os.path.realpath(p)] = (p, st.st_size if os.path.isfile(p) else None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar = Bar(what, None, in_bytes=True, quiet=quiet)

    def __enter__(self) -> Reading:
        if self.enabled and self.files:
            given, size = next(iter(self.files.values()))  # drawn at once, before the first file opens
            self.bar.describe(f"{self.what} {os.path.basename(given)}")
            self.bar(0, size)
            self._thread = threading.Thread(target=self._watch, name="tpmtop-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self.bar.close()

    def _open_offset(self) -> tuple[str, int] | None:
        """(real path, offset) of one of the files open now, read from /proc/self/fd*."""
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return None
        for fd in fds:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target in self.files:
                try:
                    with open(f"/proc/self/fdinfo/{fd}") as f:
                        pos = next((int(line.split()[1]) for line in f if line.startswith("pos:")), 0)
                except (OSError, ValueError):
                    continue
                return target, pos
        return None

    def _watch(self) -> None:
        shown = None
        while not self._stop.wait(REFRESH_S):
            got = self._open_offset()
            if got is None:
                continue
            real, pos = got
            given, size = self.files[real]
            if real != shown:
                shown = real
                self.bar.describe(f"{self.what} {os.path.basename(given)}")
            self.bar(pos if size is None else min(pos, size), size)
