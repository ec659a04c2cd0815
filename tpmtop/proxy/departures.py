"""Clients that leave (a part of :class:`~tpmtop.proxy.server.ProxyServer`): a pidfd per
client process says at once when it exits; then its leak report (:mod:`.accounting`).
Layer: proxy; no Textual."""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING

from tpmtop.proxy import peers
from tpmtop.proxy.accounting import ClientStats
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.serving import REAP_INTERVAL_S
from tpmtop.proxy.state import ServerState

if TYPE_CHECKING:
    pass


class Departures(ServerState):
    """ProxyServer's departure watch; state lives in ProxyServer.__init__."""

    # -- departures -----------------------------------------------------------------------------
    def _watch_exit(self, c: ClientStats) -> None:
        """A pidfd for the client's process: readable when it exits (the reaper and a new
        client look; a departure is noticed when it happens, not on a timer)."""
        if c.peer.pid is None:
            return  # no process known (an anonymous connection): nothing to watch
        try:
            fd = os.pidfd_open(c.peer.pid)
        except (OSError, AttributeError):
            return  # gone already, or no pidfds: the reaper's periodic check covers it
        with self._pidfd_lock:
            try:
                # added to the reaper's epoll set while it waits: no wake-up of it per new client
                self._exits.register(fd, select.EPOLLIN)
            except (OSError, ValueError):  # the proxy has stopped (the set is closed)
                os.close(fd)
                return
            self._pidfds[fd] = (c.id, c)

    def _close_pidfd(self, fd: int) -> None:
        """Under _pidfd_lock: out of the reaper's set, then closed (its number may be reused)."""
        try:
            self._exits.unregister(fd)
        except (OSError, ValueError):
            pass
        os.close(fd)

    def _exited(self, c: ClientStats) -> bool:
        with self._pidfd_lock:
            fds = [fd for fd, (_cid, x) in self._pidfds.items() if x is c]
            if fds:
                try:
                    return bool(select.select(fds, [], [], 0)[0])
                except (OSError, ValueError):
                    return False
        return not peers.alive(c.peer)

    def _reap_exited(self) -> None:
        """Every watched client whose process has exited departs now."""
        with self._pidfd_lock:
            fds = list(self._pidfds)
        if not fds:
            return
        p = select.poll()
        for fd in fds:
            p.register(fd, select.POLLIN)
        for fd, _ev in p.poll(0):
            self._process_exited(fd)

    def _process_exited(self, fd: int) -> None:
        with self._pidfd_lock:
            got = self._pidfds.get(fd)
            if got is None:
                return
            # Looked at again under the lock: the number a poll reported may since have been
            # closed (its client departed) and given to a new client's pidfd, whose process
            # is alive.
            try:
                readable = bool(select.select([fd], [], [], 0)[0])
            except (OSError, ValueError):
                readable = False
            if not readable:
                return
            del self._pidfds[fd]
            self._close_pidfd(fd)
        c = got[1]
        # An exited process waits for nothing more: it departs as soon as its commands still
        # being answered are accounted (the answer goes out before the accounting), even if
        # the proxy has yet to see the end of its last connection.
        with self._lock:
            c.exited = True
            ready = c.inflight <= 0
        if ready:
            self._depart(c)

    def _closed(self, c: ClientStats) -> None:
        self.accounts.connection_closed(c)
        if c.open_connections > 0 or c.departed_ns is not None:
            return
        # A client without a pid is one connection: it has left. Otherwise: has its process?
        if c.peer.pid is None or c.exited or self._exited(c):
            self._depart(c)

    def _reaper(self) -> None:
        # Departures come from the clients' pidfds (at once) or, for clients without one, a
        # periodic look; a new pidfd joins the epoll set while the reaper waits on it, and
        # stop() wakes it through the pipe.
        while not self._stop.is_set():
            try:
                r = [fd for fd, _ev in self._exits.poll(REAP_INTERVAL_S)]
            except (OSError, ValueError):
                r = []
                self._stop.wait(REAP_INTERVAL_S)
            if self._stop.is_set():
                return
            self.peer_log.tick()  # a summary of held-back lines, once its second is over
            for fd in r:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                else:
                    self._process_exited(fd)
            with self._pidfd_lock:
                watched = {x.id for (_cid, x) in self._pidfds.values()}
            for c in self.accounts.live():
                try:
                    if (c.id != 0 and c.id not in watched and c.open_connections <= 0
                            and not peers.alive(c.peer)):
                        self._depart(c)
                except Exception as e:  # the reaper must outlive any one client's trouble
                    self.peer_log("departure check failures",
                                  f"client {c.id}: departure check failed: {type(e).__name__}: {e}", LineKind.FAULT)

    def _depart(self, c: ClientStats) -> None:
        if c.departed_ns is not None:
            return
        leaked = self.accounts.depart(c)
        if c.peer.pid is not None:
            self.resolver.forget(c.peer.pid)  # its pid may come back as another process
        if self.turns is not None:
            self.turns.release(c)
        with self._pidfd_lock:
            for fd, (_cid, x) in list(self._pidfds.items()):
                if x is c:
                    del self._pidfds[fd]
                    self._close_pidfd(fd)
        t = self._client_transports.pop(c.id, None)
        if t is not None:
            t[0].close()  # closing its /dev/tpmrm0 fd (abrmd connection) flushes what it left
        head = f"client {c.id} {c.name} (pid {c.peer.pid}) left: {c.commands} commands, {c.errors} errors"
        if leaked:
            self.log(f"{head}; LEAK: left {len(leaked)} handle(s) behind: " + ", ".join(h.text() for h in leaked),
                     LineKind.LEAK)
        else:
            self.log(f"{head}; left nothing loaded")
