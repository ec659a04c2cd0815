"""Whose turn it is on a raw TPM: one client at a time, as swtpm itself serves.

A TPM without a resource manager (swtpm, the Microsoft simulator, /dev/tpm0) has three
transient-object slots and a few session slots for everyone. swtpm serves one connection at a
time, so clients that each hold a session and a couple of objects take turns and all succeed;
interleaving their commands on one connection makes them fill the slots together and fail
with TPM_RC_OBJECT_MEMORY (0x902) or TPM_RC_SESSION_MEMORY (0x903).

The turn belongs to a *client* — a process — not to a connection: the swtpm TCTI opens a TCP
connection for every command, so a tpm2-tools run is dozens of connections from one process.
The rule:

- a client with no one ahead of it takes the turn at its first command;
- the turn ends when its holder departs (its process exited and its connections closed), or
  when the holder has had no command in flight for ``idle_s`` (it is doing something else:
  waiting for a user, computing, sleeping) while someone waits;
- waiting clients get the turn in the order they first asked (FIFO);
- a client that waits longer than ``max_wait_s`` is told so (:class:`TurnTimeout`): the proxy
  answers its command with TPM_RC_RETRY instead of leaving it hanging.

How deep the queue got and how long each client waited are accounted (``ClientStats.waits``,
``Accounts.queue_max``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class TurnTimeout(Exception):
    pass


class Turns:
    def __init__(self, idle_s: float, max_wait_s: float, on_queue: Callable[[int], None] | None = None):
        self.idle_s = idle_s
        self.max_wait_s = max_wait_s
        self._cv = threading.Condition()
        self.holder: object | None = None
        self._inflight = 0
        self._last_done = 0.0
        self._waiting: deque[object] = deque()
        self._on_queue = on_queue or (lambda depth: None)
        self.closed = False

    def _free_for(self, client: object, now: float) -> bool:
        h = self.holder
        if h is None or h is client:
            return True
        return self._inflight == 0 and now - self._last_done >= self.idle_s

    def acquire(self, client: object) -> int:
        """Block until it is ``client``'s turn; one more command of it is in flight. Returns
        how long it waited (ns)."""
        t0 = time.perf_counter_ns()
        with self._cv:
            if self.holder is client or (self.holder is None and not self._waiting):
                self.holder = client
                self._inflight += 1
                return 0
            if client not in self._waiting:
                self._waiting.append(client)
                self._on_queue(len(self._waiting))
            deadline = time.monotonic() + self.max_wait_s
            try:
                while True:
                    now = time.monotonic()
                    if self.closed:
                        raise TurnTimeout("the proxy is stopping")
                    if client not in self._waiting:  # it departed while waiting (killed)
                        raise TurnTimeout("it left while waiting for its turn")
                    if self._waiting[0] is client and self._free_for(client, now):
                        break
                    if now >= deadline:
                        raise TurnTimeout(f"waited {self.max_wait_s:g} s for its turn")
                    wake = deadline - now
                    if self.holder is not None and self._inflight == 0:
                        wake = min(wake, max(self._last_done + self.idle_s - now, 0.001))
                    self._cv.wait(wake)
            except BaseException:
                if client in self._waiting:
                    self._waiting.remove(client)
                    self._cv.notify_all()
                raise
            self._waiting.popleft()
            if self.holder is not client:
                self.holder = client
                self._inflight = 0
            self._inflight += 1
            self._cv.notify_all()
        return time.perf_counter_ns() - t0

    def done(self, client: object) -> None:
        """A command of ``client`` was answered."""
        with self._cv:
            if self.holder is client:
                self._inflight = max(self._inflight - 1, 0)
                self._last_done = time.monotonic()
                if self._waiting:
                    self._cv.notify_all()

    def release(self, client: object) -> None:
        """``client`` departed: the turn passes on at once."""
        with self._cv:
            if client in self._waiting:
                self._waiting.remove(client)
            if self.holder is client:
                self.holder = None
                self._inflight = 0
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    @property
    def waiting(self) -> int:
        return len(self._waiting)
