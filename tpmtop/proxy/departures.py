"""Clients that leave (a part of :class:`~tpmtop.proxy.server.ProxyServer`): a pidfd per
client process, watched by the event loop, says at once when it exits; then its leak report
(:mod:`.accounting`). Clients without a pidfd are looked at every ``REAP_INTERVAL_S``.
Layer: proxy; no Textual."""

from __future__ import annotations

import os
import select

from tpmtop.proxy import peers
from tpmtop.proxy.accounting import ClientStats
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.loop import EVENT_READ
from tpmtop.proxy.pump import TurnPump
from tpmtop.proxy.serving import REAP_INTERVAL_S
from tpmtop.proxy.state import ServerState


class Departures:
    """ProxyServer's departure watch, over the server's state."""

    def __init__(self, state: ServerState, pump: TurnPump) -> None:
        self.state = state
        self.pump = pump

    def watch_exit(self, c: ClientStats, fd: int | None = None) -> None:
        """A pidfd for the client's process: readable when it exits (the loop and a new client
        look; a departure is noticed when it happens, not on a timer). ``fd``: the pidfd the
        look-up opened on that process, if it did (this takes it)."""
        if c.peer.pid is None:
            if fd is not None:
                os.close(fd)
            return  # no process known (an anonymous connection): nothing to watch
        if fd is None:
            try:
                fd = os.pidfd_open(c.peer.pid)
            except (OSError, AttributeError):
                return  # gone already, or no pidfds: the periodic look covers it
        self.state.pidfds[fd] = c
        self.state.loop.register(fd, EVENT_READ, lambda _mask: self.process_exited(fd))

    def close_pidfd(self, fd: int) -> None:
        """Out of the loop's set, then closed (its number may be reused)."""
        self.state.pidfds.pop(fd, None)
        self.state.loop.closing(fd)
        os.close(fd)

    def has_exited(self, c: ClientStats) -> bool:
        fds = [fd for fd, x in self.state.pidfds.items() if x is c]
        return _readable(fds) if fds else not peers.alive(c.peer)

    def reap_exited(self) -> None:
        """Every watched client whose process has exited departs now (their pidfds' events
        may still be behind a new connection's in the loop)."""
        if not self.state.pidfds:
            return
        p = select.poll()
        for fd in self.state.pidfds:
            p.register(fd, select.POLLIN)
        for fd, _ev in p.poll(0):
            self.process_exited(fd)

    def process_exited(self, fd: int) -> None:
        c = self.state.pidfds.get(fd)
        if c is None:
            return
        # Never a stale event: the loop does not deliver an event of a number reused during
        # its batch (a departed client's pidfd, then a new client's: :class:`.loop.Loop`), and
        # reap_exited polls the pidfds it holds now.
        self.close_pidfd(fd)
        # An exited process waits for nothing more: it departs as soon as its commands still
        # being answered are accounted (the answer goes out before the accounting), even if
        # the proxy has yet to see the end of its last connection.
        c.exited = True
        if c.inflight <= 0:
            self.depart(c)

    def closed(self, c: ClientStats) -> None:
        self.state.accounts.connection_closed(c)
        if c.open_connections > 0 or c.departed_ns is not None:
            return
        # A client without a pid is one connection: it has left. Otherwise: has its process?
        if c.peer.pid is None or c.exited or self.has_exited(c):
            self.depart(c)

    def tick(self) -> None:
        """Every REAP_INTERVAL_S on the loop: a summary of held-back lines, once its second is
        over; clients without a pidfd whose process is gone depart."""
        self.state.loop.call_later(REAP_INTERVAL_S, self.tick)
        self.state.peer_log.tick()
        self.state.client_log.tick()
        watched = {x.id for x in self.state.pidfds.values()}
        for c in self.state.accounts.live():
            try:
                if (c.id != 0 and c.id not in watched and c.open_connections <= 0
                        and not peers.alive(c.peer)):
                    self.depart(c)
            except Exception as e:  # the look must outlive any one client's trouble
                self.state.peer_log("departure check failures",
                              f"client {c.id}: departure check failed: {type(e).__name__}: {e}", LineKind.FAULT)

    def depart(self, c: ClientStats) -> None:
        if c.departed_ns is not None:
            return
        leaked = self.state.accounts.depart(c)
        if c.peer.pid is not None:
            self.state.resolver.forget(c.peer.pid)  # its pid may come back as another process
        if self.state.turns is not None:
            self.state.turns.release(c)
            self.pump.pump()
        for fd in [fd for fd, x in self.state.pidfds.items() if x is c]:
            self.close_pidfd(fd)
        t = self.state.client_transports.pop(c.id, None)
        if t is not None:  # closing its /dev/tpmrm0 fd (abrmd connection) flushes what it left
            # At once, here (none of its commands is in flight), as when the process itself
            # exits: queued behind other clients' commands, tpm2-abrmd could still be closing
            # it when a script's next tool loads the session this one saved
            t.close()
        head = f"client {c.id} {c.name} (pid {c.peer.pid}) left: {c.commands} commands, {c.errors} errors"
        if leaked:
            self.state.log(f"{head}; LEAK: left {len(leaked)} handle(s) behind: " + ", ".join(h.text() for h in leaked),
                     LineKind.LEAK)
        else:
            self.state.client_log("clients left", f"{head}; left nothing loaded", LineKind.INFO)


def _readable(pidfds: list[int]) -> bool:
    """Has one of these processes exited (its pidfd readable), asked without waiting?"""
    try:
        return bool(select.select(pidfds, [], [], 0)[0])
    except (OSError, ValueError):
        return False
