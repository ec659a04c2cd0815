"""Connections with nothing to say wait here, without a thread.

The proxy serves a connection on a thread while it has something to read (the exchange with
the TPM stays on its fast path: the thread that accepted a swtpm: TCTI connection reads its
command and answers it, no hand-over). A connection silent for ``PARK_AFTER_S`` — a held-open
one, an mssim client between two bursts, a half-open one whose peer went away — is parked:
one selector thread watches every parked socket, and hands a socket back to a worker thread
when it becomes readable (its next request, or its end), or to its idle call-back once it has
been silent for the idle time-out. So 1,000 held connections cost one thread, not 1,000
(a 1,024-connection flood once left 137 threads and ESTABLISHED sockets behind).

selectors rather than asyncio: the parked side only waits for readability and deadlines,
and the serving side stays the proxy's threads (the TPM exchange, turns, the owner thread);
a second event-loop framework for a wait is more than it needs. Layer: proxy; no Textual.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections.abc import Callable

PARK_AFTER_S = 0.25  # silent this long between requests (or before the first): parked
TICK_S = 0.5  # how often deadlines are looked at (and the stop flag)
# With this many worker threads already, a new connection with nothing to read yet is parked at
# once instead of waited on: a burst of held connections then costs no more threads than this.
BUSY_WORKERS = 16

Task = Callable[[], None]


class Parking:
    """``park(sock, on_ready, on_idle, idle_s)``; ``dispatch(task)`` runs a call-back on a
    worker thread (the proxy's pool)."""

    def __init__(self, dispatch: Callable[[Task], None]):
        self._dispatch = dispatch
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._parked: dict[socket.socket, tuple[Task, Task, float]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="proxy-parking", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._parked)

    def park(self, sock: socket.socket, on_ready: Task, on_idle: Task, idle_s: float) -> bool:
        """Watch ``sock``; False if parking is closed (the caller then ends the connection)."""
        with self._lock:
            if self._stop:
                return False
            self._parked[sock] = (on_ready, on_idle, time.monotonic() + idle_s)
            self._sel.register(sock, selectors.EVENT_READ)
        return True

    def close(self) -> list[Task]:
        """Stop watching; the ready call-backs of what is still parked (the caller runs them
        once it has shut the sockets down: each then sees its end)."""
        with self._lock:
            self._stop = True
            left = [on_ready for (on_ready, _i, _d) in self._parked.values()]
            for sock in self._parked:
                try:
                    self._sel.unregister(sock)
                except (KeyError, ValueError, OSError):
                    pass
            self._parked.clear()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        self._thread.join(5)
        self._sel.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        return left

    def _take(self, sock: socket.socket) -> tuple[Task, Task, float] | None:
        with self._lock:
            got = self._parked.pop(sock, None)
            if got is not None:
                try:
                    self._sel.unregister(sock)
                except (KeyError, ValueError, OSError):
                    pass
            return got

    def _run(self) -> None:
        while True:
            try:
                events = self._sel.select(TICK_S)
            except (OSError, ValueError):
                events = []
                time.sleep(0.05)
            with self._lock:
                if self._stop:
                    return
            for key, _mask in events:
                if key.fileobj == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                    continue
                got = self._take(key.fileobj)  # type: ignore[arg-type]  # only sockets besides the pipe
                if got is not None:
                    self._dispatch(got[0])
            now = time.monotonic()
            with self._lock:
                due = [s for s, (_r, _i, deadline) in self._parked.items() if deadline <= now]
            for sock in due:
                got = self._take(sock)
                if got is not None:
                    self._dispatch(got[1])
