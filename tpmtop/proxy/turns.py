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
- the turn also ends once its holder has held it ``max_turn_s`` while someone waits (0: no
  maximum), at the end of the command it has in flight: a client that sends a command every
  second never stays idle for ``idle_s``, and held the turn until it exited (a bystander
  waited 48 s, issue 50). Its next command then waits behind the others, like anyone's;
- waiting clients get the turn in the order they first asked (FIFO);
- a client that waits longer than ``max_wait_s`` is told so (:class:`TurnTimeout`): the proxy
  answers its command with TPM_RC_RETRY instead of leaving it hanging.

How deep the queue got and how long each client waited are accounted (``ClientStats.waits``,
``Accounts.queue_max``).

Nothing here blocks: a command that must wait is a :class:`Waiter` in the queue, and the
proxy's event loop calls :meth:`Turns.pump` after anything that can pass the turn on (an
answer, a departure, the time a holder has been idle), then grants or refuses what is due.
Only the loop's thread calls it. Layer: proxy; no Textual.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol


class Waiter(Protocol):
    """A command waiting for its client's turn (a connection of it)."""

    def turn_granted(self, waited_ns: int) -> None: ...

    def turn_refused(self, why: str) -> None: ...


# a waiting command: (it, when it began to wait (perf_counter_ns), its deadline (monotonic))
_Waiting = tuple[Waiter, int, float]


class Turns:
    def __init__(self, idle_s: float, max_wait_s: float, on_queue: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, max_turn_s: float = 0.0):
        self.idle_s = idle_s
        self.max_wait_s = max_wait_s
        self.max_turn_s = max_turn_s  # 0: a turn has no maximum length
        self._clock = clock
        self.holder: object | None = None
        self._since = 0.0  # when the holder got the turn
        self._inflight = 0
        self._last_done = 0.0
        # waiting clients (by id(): a client need not be hashable), in the order they first asked
        self._order: deque[object] = deque()
        self._waiters: dict[int, list[_Waiting]] = {}
        self._refuse: list[tuple[Waiter, str]] = []  # refused outside pump(), said by it
        self._on_queue = on_queue or (lambda depth: None)
        self.closed = False

    def _free_for(self, client: object, now: float) -> bool:
        h = self.holder
        if h is None or h is client:
            return True
        return self._inflight == 0 and (now - self._last_done >= self.idle_s or self._over(now))

    def _over(self, now: float) -> bool:
        """The holder has had its longest turn (someone waits: asked only then)."""
        return bool(self.max_turn_s) and now - self._since >= self.max_turn_s

    def _take(self, client: object) -> None:
        self.holder = client
        self._since = self._clock()
        self._inflight = 0

    def ask(self, client: object, waiter: Waiter) -> bool:
        """True: ``client``'s turn now (one more command of it in flight). False: ``waiter``
        waits; :meth:`pump` grants or refuses it."""
        if self.closed:
            self._refuse.append((waiter, "the proxy is stopping"))
            return False
        if self.holder is None and not self._order:
            self._take(client)
        if self.holder is client and not (self._order and self._over(self._clock())):
            self._inflight += 1
            return True
        if id(client) not in self._waiters:
            self._order.append(client)
            self._waiters[id(client)] = []
            self._on_queue(len(self._order))
        self._waiters[id(client)].append((waiter, time.perf_counter_ns(), self._clock() + self.max_wait_s))
        return False

    def done(self, client: object) -> None:
        """A command of ``client`` was answered."""
        if self.holder is client:
            self._inflight = max(self._inflight - 1, 0)
            self._last_done = self._clock()

    def release(self, client: object) -> None:
        """``client`` departed: the turn passes on at once (at the next :meth:`pump`)."""
        for waiter, _t0, _dl in self._drop(client):
            self._refuse.append((waiter, "it left while waiting for its turn"))
        if self.holder is client:
            self.holder = None
            self._inflight = 0

    def _drop(self, client: object) -> list[_Waiting]:
        got = self._waiters.pop(id(client), None)
        if got is None:
            return []
        self._order = deque(c for c in self._order if c is not client)
        return got

    def close(self) -> None:
        self.closed = True
        for client in list(self._order):
            for waiter, _t0, _dl in self._drop(client):
                self._refuse.append((waiter, "the proxy is stopping"))

    def pump(self) -> tuple[list[tuple[Waiter, int]], list[tuple[Waiter, str]], float | None]:
        """What is due now: (granted, with how long each waited in ns; refused, with why; when
        to look again, None if nothing waits). The caller then tells each waiter."""
        now = self._clock()
        refused, self._refuse = self._refuse, []
        for client in list(self._order):  # waited too long
            waiting = self._waiters[id(client)]
            late = [w for w in waiting if w[2] <= now]
            if late:
                refused += [(w[0], f"waited {self.max_wait_s:g} s for its turn") for w in late]
                waiting[:] = [w for w in waiting if w[2] > now]
                if not waiting:
                    self._drop(client)
        granted: list[tuple[Waiter, int]] = []
        if self._order and self._free_for(self._order[0], now):
            client = self._order[0]
            waiting = self._drop(client)
            if self.holder is not client:
                self._take(client)
            self._inflight += len(waiting)
            t = time.perf_counter_ns()
            granted = [(w, max(t - t0, 1)) for (w, t0, _dl) in waiting]
        due: float | None = None
        if self._order:
            due = min(w[2] for ws in self._waiters.values() for w in ws)
            if self.holder is not None and self._inflight == 0:
                due = min(due, self._last_done + self.idle_s)
                if self.max_turn_s:
                    due = min(due, self._since + self.max_turn_s)
        return granted, refused, due

    @property
    def waiting(self) -> int:
        return len(self._order)

    @property
    def quiet(self) -> bool:
        """Nothing to grant or refuse: :meth:`pump` would return ([], [], None)."""
        return not self._order and not self._refuse
