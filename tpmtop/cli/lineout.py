"""A server's lines to stderr, written by a thread of their own.

`tpmtop proxy` logs from its event loop (a client connected, left, was refused...). A write to
stderr blocks when nobody reads it — a pipe whose reader stopped, a terminal paused with
Ctrl-S, a slow SSH link — and a loop blocked there serves no one: a benchmark that stopped
reading the proxy's stderr once stalled every client behind a full 64 KiB pipe. So the loop
only queues a line; this thread writes it. At most ``max_waiting`` lines wait; beyond that they
are counted, and the count is said as soon as stderr takes lines again. :meth:`LineOut.flush`
waits (boundedly) for what is queued, before the end-of-run output and at exit.
Layer: cli; no Textual.
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading
from collections.abc import Callable

MAX_WAITING = 10_000


class LineOut:
    def __init__(self, write: Callable[[str], None] | None = None, max_waiting: int = MAX_WAITING) -> None:
        self._write = write or _stderr
        self._q: queue.Queue[str | threading.Event] = queue.Queue(max_waiting)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def __call__(self, line: str) -> None:
        """Queue ``line`` (with its newline); never waits."""
        self._start()
        try:
            self._q.put_nowait(line)
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until what was queued before this call is written (at most ``timeout`` s)."""
        if self._thread is None:
            return
        done = threading.Event()
        try:
            self._q.put(done, timeout=timeout)
        except queue.Full:
            return
        done.wait(timeout)

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="stderr-lines", daemon=True)
                    self._thread.start()
                    atexit.register(self.flush, 2.0)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            with self._lock:
                lost, self.dropped = self.dropped, 0
            try:
                if lost:
                    self._write(f"tpmtop: {lost:,} line(s) not written: stderr was not being read\n")
                self._write(item)
            except (OSError, ValueError):
                pass  # stderr closed: nothing to say it on


def _stderr(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()
