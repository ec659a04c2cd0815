"""Accepting and admitting connections (a part of :class:`~tpmtop.proxy.server.ProxyServer`):
who may connect (:mod:`.access`), the connection cap, refusals (rate-limited lines), and the
threads that accept and serve. Layer: proxy; no Textual."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpmtop.proxy import access
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.serving import MAX_IDLE_WORKERS, WORKER_LINGER_S
from tpmtop.proxy.state import ServerState

if TYPE_CHECKING:
    pass


# what a worker thread is handed: a listener to accept on (and its connections' handler), or
# a parked connection's call-back
_Task = tuple[socket.socket, Callable[[socket.socket], bool]] | Callable[[], None]


class Admission(ServerState):
    """ProxyServer's accept path; state lives in ProxyServer.__init__."""

    # -- accepting ------------------------------------------------------------------------------
    # The thread that accepts a connection serves it, and hands the accepting on to an idle
    # thread (leader/follower): the client's first bytes wait for no hand-over between threads,
    # which cost ~50 µs of a swtpm: TCTI command (that TCTI connects for every command). Each
    # listener has exactly one thread accepting on it at any time.
    def _admit(self, sock: socket.socket, peer: tuple[Any, ...] | None = None,
               local: tuple[Any, ...] | None = None) -> bool:
        """Is this connection served? A refused or over-limit one is closed here."""
        uid, pid, inode = access.peer_owner(sock, peer, local)
        if not self.policy.allows(uid):
            self._refuse(sock, uid, pid)
            return False
        with self._lock:
            full = len(self._conns) >= self.max_connections and self._open_locked() >= self.max_connections
            if not full:
                self._conns[sock] = (uid, inode) if uid is not None and inode is not None else None
        if full:
            self._over_limit(sock)
            return False
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return True

    def _open_locked(self) -> int:
        """The counted connections whose peer has not closed them. A closed one keeps its place
        until its thread reads the end, which on a loaded machine comes after the client's next
        connection: the swtpm: TCTI opens and closes a probe on each port, then connects for
        every command, so one client alone filled a limit of 2 and was refused. Asked only when
        the count is at the limit (one non-blocking peek per connection); a socket in
        ``_conns`` is still open, as its thread closes it only after removing it (under the lock)."""
        n = 0
        for sock in self._conns:
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    continue  # the peer closed it and nothing of it is left to serve
            except (BlockingIOError, InterruptedError):
                pass  # open, nothing pending
            except OSError:
                continue  # reset by the peer
            n += 1
        return n

    def _local_address(self, lsock: socket.socket) -> tuple[Any, ...] | None:
        """The address every connection accepted on *lsock* has at our end: the listener's,
        unless it listens on a wildcard (then each connection's own is asked)."""
        try:
            return self._locals[lsock]
        except KeyError:
            pass
        local = None
        if lsock.family in (socket.AF_INET, socket.AF_INET6):
            addr = lsock.getsockname()[:2]
            if addr[0] not in ("0.0.0.0", "::"):
                local = addr
        self._locals[lsock] = local
        return local

    def _dispatch(self, task: Callable[[], None]) -> None:
        """Run ``task`` (a parked connection's call-back) on a worker thread."""
        self._pass_on(task)

    def _end_connection(self, sock: socket.socket) -> None:
        """A connection served from parking has ended: forgotten and closed."""
        with self._lock:
            self._conns.pop(sock, None)
        try:
            sock.close()
        except OSError:
            pass

    def _pass_on(self, task: Any) -> None:
        """Give ``task`` (a listener to accept on, or a call-back) to an idle thread, or to a
        new one."""
        with self._lock:
            idle = self._idle > 0
            if idle:
                self._idle -= 1
            else:
                self._workers += 1
        self._work.put(task)
        if not idle:
            # Starting a thread costs ~100 µs; the swtpm TCTI connects for every command,
            # so a thread that finished its connection waits a little for the next task.
            threading.Thread(target=self._worker, daemon=True, name="proxy-conn").start()

    def _over_limit(self, sock: socket.socket) -> None:
        self.over_limit += 1
        self.peer_log("over the limit", f"{self.max_connections} connections are open (the limit): connection "
                      f"refused ({self.over_limit} so far)", LineKind.DROPPED)
        try:
            sock.close()
        except OSError:
            pass

    def _refuse(self, sock: socket.socket, uid: int | None, pid: int | None) -> None:
        """A peer the policy does not let in: one line (rate-limited: a flood of them is one
        line a second with the count), and the connection closed before a byte of it is
        read. A peer already gone whose uid could not be read (a client's empty
        start-up probe) is closed without a line."""
        try:
            if uid is None:
                try:
                    if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                        return
                except BlockingIOError:
                    pass
                except OSError:
                    return
            self.refused += 1
            # the port too: a swtpm-TCTI client opens the TPM port and the control port, so one
            # refused program gives two lines, which should not look like a repeat
            where = "a Unix socket" if sock.family == socket.AF_UNIX else f"TCP port {sock.getsockname()[1]}"
            self.peer_log("refused", f"refused a connection on {where} from {access.user_text(uid)}"
                     f"{f' pid {pid}' if pid else ''}: only {self.policy.describe()} may use this TPM "
                     f"(--allow-user / --allow-group let more in); connection closed", LineKind.DROPPED)
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _worker(self, task: _Task | None = None) -> None:
        while True:
            if task is None:
                try:
                    task = self._work.get(timeout=WORKER_LINGER_S)
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # no task was handed to this thread: it leaves
                            self._idle -= 1
                            self._workers -= 1
                            return
                    continue  # one was: take it
                if task is None:  # the proxy stops
                    return
            if callable(task):  # a parked connection's call-back
                fn, task = task, None
                try:
                    fn()
                except Exception as e:  # a bug must cost one connection, not the proxy
                    self.peer_log("handler failures", f"connection call-back failed: {type(e).__name__}: {e}",
                                  LineKind.FAULT)
                with self._lock:
                    leave = self._idle >= MAX_IDLE_WORKERS or self._stop.is_set()
                    if leave:
                        self._workers -= 1
                    else:
                        self._idle += 1
                if leave:
                    return
                continue
            lsock, handler = task
            task = None
            sock = None
            addr = local = None
            while sock is None and not self._stop.is_set():
                try:
                    sock, addr = lsock.accept()
                    local = self._local_address(lsock)
                except OSError:
                    break
            if sock is None:  # the listener is closed: the proxy stops
                with self._lock:
                    self._workers -= 1
                return
            # passed on first: the next thread wakes while this one looks the peer up
            self._pass_on((lsock, handler))
            try:
                if not self._admit(sock, addr, local):
                    sock = None
                elif handler(sock):
                    sock = None  # parked: open, watched by the parking thread, no thread of its own
            except Exception as e:  # a bug must cost one connection, not the proxy
                self.peer_log("handler failures",
                              f"connection handler failed: {type(e).__name__}: {e}; connection closed", LineKind.FAULT)
            finally:
                with self._lock:
                    if sock is not None:
                        self._conns.pop(sock, None)
                    leave = self._idle >= MAX_IDLE_WORKERS or self._stop.is_set()
                    if leave:
                        self._workers -= 1
                    else:
                        self._idle += 1
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
            if leave:
                return

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)
