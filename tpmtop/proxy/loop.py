"""The proxy's event loop: one thread, one epoll set, every socket and deadline of the server.

Everything a client can make the proxy hold — a connection, a half-sent frame, a wait for its
turn, a process to watch — is an entry here, not a thread: 1,000 held connections are 1,000
registered sockets and one thread (a thread each once left 137 threads and ESTABLISHED
sockets behind a 1,024-connection flood). The TPM exchange stays on the fast path it had: a
whole command read on this thread goes to the TPM from this thread when the TPM's owner
thread is idle (:mod:`.forward`), so a command pays no hand-over between threads.

epoll by hand, not asyncio: a swtpm: TCTI client connects anew for every command, so
the proxy's cost per connection is its cost per command, and the goal is half of what
tpm2-abrmd plus dbus spend per client process. A connection here is one object with a
bytearray, handled by plain method calls; asyncio would add a transport, a protocol and
scheduled call-backs per connection, and its loop must not block, while the exchange above
blocks by design (the TPM answers one command at a time whoever asks). The exporter, whose
cost is its rendering, uses asyncio (:mod:`tpmtop.exporter.http`).

Deadlines are a heap of timers; a connection's idle and frame deadlines are re-armed lazily
(a timer that fires early looks at the connection's current deadline and sets itself again),
so a command costs no heap operation. Other threads hand work to the loop with
:meth:`Loop.call_soon_threadsafe` (a queued TPM job's completion, a recovery's end).
Layer: proxy; no Textual.
"""

from __future__ import annotations

import heapq
import itertools
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

Handler = Callable[[int], None]  # called with the ready events (EVENT_READ/EVENT_WRITE)
# selectors' values, and epoll's: a handler reads them as either
EVENT_READ, EVENT_WRITE = 1, 4
assert (EVENT_READ, EVENT_WRITE) == (select.EPOLLIN, select.EPOLLOUT)
MAX_WAIT_S = 1.0  # the longest select() sleeps without a timer (the stop flag is a wake-up anyway)


def _nothing() -> None:
    pass


class Timer:
    __slots__ = ("cancelled", "fn", "when")

    def __init__(self, when: float, fn: Callable[[], None]):
        self.when, self.fn, self.cancelled = when, fn, False

    def cancel(self) -> None:
        """It stays in the heap until its time, without what it would have called: a closed
        connection is freed at once, not when its deadline comes round."""
        self.cancelled = True
        self.fn = _nothing


class Loop:
    """``register(fileobj, events, handler)``; ``call_at(when, fn)``; ``call_soon_threadsafe(fn)``;
    ``run()`` on its own thread until :meth:`stop`. Only the loop's thread touches the
    selector and the timers; ``on_error(exc)`` hears of a handler that raised (a bug must
    cost one connection, not the proxy)."""

    def __init__(self, on_error: Callable[[BaseException], None]):
        # epoll itself rather than selectors: select() there builds a key object list per
        # wake-up, and the loop wakes ~9 times per client process
        self._ep = select.epoll()
        self._handlers: dict[int, Handler] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._soon: deque[Callable[[], None]] = deque()
        # Descriptors registered since the last poll. An event of the batch being served for
        # one of these numbers belongs to the descriptor that had the number before: a
        # handler earlier in the batch closed it and opened this one (a departed client's
        # pidfd, then a new client's under the same number: the old exit made the new client
        # depart, its tpm2-abrmd connection closed under it). It is not delivered; epoll is
        # level-triggered, so the new descriptor, if ready, is told at the next poll.
        self._fresh: set[int] = set()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.register(self._wake_r, EVENT_READ, self._drain_wake)
        self._stopping = False
        self._on_error = on_error
        self.thread: threading.Thread | None = None

    # -- what the loop watches (its own thread only) --------------------------------------------
    def register(self, fileobj: Any, events: int, handler: Handler) -> None:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._ep.register(fd, events)
        self._handlers[fd] = handler
        self._fresh.add(fd)  # this batch's events for its number were another descriptor's

    def modify(self, fileobj: Any, events: int, handler: Handler) -> None:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._ep.modify(fd, events)
        self._handlers[fd] = handler

    def unregister(self, fileobj: Any) -> None:
        """Before its descriptor is closed (its number may be given to the next one)."""
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if self._handlers.pop(fd, None) is None:
            return
        try:
            self._ep.unregister(fd)
        except (ValueError, OSError):
            pass  # closed already

    def closing(self, fileobj: Any) -> None:
        """Its descriptor is closed right after this, by the caller: its handler goes, and the
        kernel takes it out of the epoll set itself when it is closed (the last descriptor of
        its open file: the proxy's sockets and pidfds are never duplicated, and are opened
        close-on-exec), so no EPOLL_CTL_DEL is made (three system calls per mssim client: two
        connections and a pidfd). An event already in the batch being served for its number
        finds no handler, or a new descriptor's marked fresh (:meth:`register`), as after
        :meth:`unregister`."""
        self._handlers.pop(fileobj if isinstance(fileobj, int) else fileobj.fileno(), None)

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        t = Timer(when, fn)
        heapq.heappush(self._timers, (when, next(self._seq), t))
        return t

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        return self.call_at(time.monotonic() + delay, fn)

    # -- from any thread --------------------------------------------------------------------------
    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        self._soon.append(fn)
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (the loop wakes anyway) or closed (the loop has stopped)

    def in_loop(self) -> bool:
        return threading.current_thread() is self.thread

    def stop(self) -> None:
        self._stopping = True
        self.call_soon_threadsafe(lambda: None)

    # -- the loop ---------------------------------------------------------------------------------
    def start(self, name: str) -> None:
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)
        self.thread.start()

    def run(self) -> None:
        poll, handlers, timers, soon, fresh = self._ep.poll, self._handlers, self._timers, self._soon, self._fresh
        on_error = self._on_error
        while not self._stopping:
            if soon:
                wait: float | None = 0
            elif timers:
                wait = min(max(timers[0][0] - time.monotonic(), 0), MAX_WAIT_S)
            else:
                wait = MAX_WAIT_S
            fresh.clear()
            try:
                events = poll(wait)
            except InterruptedError:
                events = []
            for fd, mask in events:
                if fd in fresh:
                    continue  # its number was given to a new descriptor during this batch
                handler = handlers.get(fd)
                if handler is not None:  # else unregistered by an earlier handler of this batch
                    # an error or hang-up is told as readable: the handler's read sees the end
                    # (called here, not through _call: a frame less per event, ~12 per client)
                    try:
                        handler((mask & EVENT_WRITE) | (EVENT_READ if mask & ~EVENT_WRITE else 0))
                    except Exception as e:
                        on_error(e)
            if timers and timers[0][0] <= time.monotonic():
                self._run_timers()
            if soon:
                self.run_soon()

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:
            self._on_error(e)

    def _run_timers(self) -> None:
        now = time.monotonic()
        timers = self._timers
        while timers and timers[0][0] <= now:
            _when, _seq, t = heapq.heappop(timers)
            if not t.cancelled:
                self._call(t.fn)

    def run_soon(self) -> None:
        """What other threads handed over (also run by :meth:`close` once the loop is gone)."""
        soon = self._soon
        for _ in range(len(soon)):
            self._call(soon.popleft())

    def _drain_wake(self, _mask: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self, join_s: float = 5.0) -> None:
        """Stop, and wait for the loop's thread (a handler in a TPM command may hold it)."""
        self.stop()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(join_s)

    def dispose(self) -> None:
        """After :meth:`close`: what was still handed over runs, then the selector goes."""
        self.run_soon()
        self._ep.close()
        self._handlers.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
