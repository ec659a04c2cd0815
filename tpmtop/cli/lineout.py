"""A server's lines to stderr, written by a thread of their own.

`tpmtop proxy` logs from its event loop (a client connected, left, was refused...). A write to
stderr blocks when nobody reads it — a pipe whose reader stopped, a terminal paused with
Ctrl-S, a slow SSH link — and a loop blocked there serves no one: a benchmark that stopped
reading the proxy's stderr once stalled every client behind a full 64 KiB pipe. So a line is
written at once only when stderr says it can take it without waiting (poll: POLLOUT; a pipe
then has a free buffer, a terminal room, and a line of at most PIPE_BUF bytes goes whole) and
nothing is queued before it; otherwise it is queued and a thread of its own writes it (a
hand-over per line cost the proxy ~0.1 ms of CPU per client process, two lines each). At most
``max_waiting`` lines wait; beyond that they are counted, and the count is said as soon as
stderr takes lines again. :meth:`LineOut.flush` waits (boundedly) for what is queued, before
the end-of-run output and at exit.
Layer: cli; no Textual.
"""

from __future__ import annotations

import atexit
import queue
import select
import sys
import threading
from collections.abc import Callable

MAX_WAITING = 10_000
PIPE_BUF = 4096  # a write of at most this many bytes to a pipe with a free buffer goes whole
DIRECT_MAX = PIPE_BUF // 4  # characters: at most PIPE_BUF bytes in UTF-8


class LineOut:
    def __init__(self, write: Callable[[str], None] | None = None, max_waiting: int = MAX_WAITING,
                 fd: int | None = None) -> None:
        """``fd``: the descriptor ``write`` writes to, for the direct path (None: always queue)."""
        self._write = write or _stderr
        self._q: queue.Queue[str | threading.Event] = queue.Queue(max_waiting)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queued = 0  # lines queued and not yet written: a new line goes behind them
        self.dropped = 0
        self._fd = 2 if write is None and fd is None else fd
        self._poll: select.poll | None = None
        if self._fd is not None:
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLOUT)

    def __call__(self, line: str) -> None:
        """Write ``line`` (with its newline) now if stderr can take it without waiting, else
        queue it; never waits."""
        with self._lock:
            direct = not self._queued and not self.dropped and self._poll is not None
            if direct and len(line) <= DIRECT_MAX and self._can_write():
                try:
                    self._write(line)
                    return
                except (OSError, ValueError):
                    pass  # said again by the thread, which knows what to do with a closed stderr
            self._queued += 1
        self._start()
        try:
            self._q.put_nowait(line)
        except queue.Full:
            with self._lock:
                self._queued -= 1
                self.dropped += 1

    def _can_write(self) -> bool:
        assert self._poll is not None
        try:
            return any(ev & select.POLLOUT for _fd, ev in self._poll.poll(0))
        except OSError:
            return False

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
            with self._lock:
                self._queued -= 1


def _stderr(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()
