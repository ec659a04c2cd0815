"""Accepting and admitting connections (a part of :class:`~tpmtop.proxy.server.ProxyServer`):
who may connect (:mod:`.access`), the connection cap, refusals (rate-limited lines). The
listeners are in the event loop; a connection let in becomes a :class:`~.session.ClientConn`
or a :class:`~.side.SideConn` there. Layer: proxy; no Textual."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from tpmtop.proxy import access
from tpmtop.proxy.conn import Conn
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.loop import EVENT_READ as READ
from tpmtop.proxy.state import ServerState

ACCEPT_RETRY_S = 0.1  # after a failed accept (out of descriptors), the listener is watched again after this

# a listener's kind of connection: (socket, its peer's (uid, inode), TCP?) -> the connection
MakeConn = Callable[[socket.socket, "tuple[int, int] | None", bool], Conn]


class Admission:
    """ProxyServer's accept path, over the server's state."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        # TCP listener -> do the connections it accepts carry TCP_NODELAY already? Set on the
        # listener, Linux copies it to each connection it accepts, which spares a setsockopt
        # per connection (two per mssim client). Asked of its first connection (getsockopt)
        # rather than assumed; where it is not inherited, each connection gets it set.
        self._nodelay_inherited: dict[socket.socket, bool] = {}

    def listen_in_loop(self, lsock: socket.socket, make: MakeConn) -> None:
        lsock.setblocking(False)
        local = self._local_address(lsock)
        tcp = lsock.family != socket.AF_UNIX  # asked once (a socket's family is an enum built per call)
        if tcp:
            try:
                lsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                self._nodelay_inherited[lsock] = False  # each connection then gets its own

        def ready(_mask: int) -> None:
            self._accept(lsock, local, tcp, make, ready)

        self.state.loop.register(lsock, READ, ready)

    def _accept(self, lsock: socket.socket, local: tuple[Any, ...] | None, tcp: bool, make: MakeConn,
                ready: Callable[[int], None]) -> None:
        """One connection per wake-up: the loop reports a listener with more waiting again at
        once (level-triggered), between the other connections' requests, and a client's one
        connection costs no second, failing accept."""
        try:
            sock, addr = lsock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # EMFILE and the like: the connection waits in the backlog
            self.state.peer_log("accept failures", f"cannot accept a connection: {e.strerror or e}", LineKind.FAULT)
            # The listener stays readable: watched again in a moment, not spun on meanwhile
            self.state.loop.unregister(lsock)
            self.state.loop.call_later(ACCEPT_RETRY_S, lambda: self._listen_again(lsock, ready))
            return
        inherited = self._nodelay_inherited.get(lsock)
        if inherited is None and tcp:
            inherited = self._nodelay_inherited[lsock] = _has_nodelay(sock)
        ok, owner, uid = self._admit(sock, addr, local, tcp, not inherited)
        if ok:
            conn = make(sock, owner, tcp)
            self.state.conns[sock] = conn
            if uid is not None and self._capped(uid):
                conn.uid = uid
                self.state.per_uid[uid] = self.state.per_uid.get(uid, 0) + 1
            conn.start()

    def _listen_again(self, lsock: socket.socket, ready: Callable[[int], None]) -> None:
        if not self.state.stopping.is_set():
            try:
                self.state.loop.register(lsock, READ, ready)
            except (OSError, ValueError):
                pass  # closed meanwhile (the proxy stops)

    def _admit(self, sock: socket.socket, peer: tuple[Any, ...] | None, local: tuple[Any, ...] | None,
               tcp: bool, nodelay: bool = True) -> tuple[bool, tuple[int, int] | None, int | None]:
        """(served?, the peer's (uid, inode), None where unknown, its uid); a connection refused
        or over a limit is closed here. ``nodelay``: a TCP connection still needs TCP_NODELAY set
        (not when it came with it from its listener)."""
        uid, pid, inode = access.peer_owner(sock, peer, local, unix=not tcp)
        if not self.state.policy.allows(uid):
            self._refuse(sock, uid, pid)
            return False, None, None
        if len(self.state.conns) >= self.state.max_connections and self._open() >= self.state.max_connections:
            self._over_limit(sock)
            return False, None, None
        assert uid is not None  # allows() let no unknown uid through
        if (self._capped(uid) and self.state.per_uid.get(uid, 0) >= self.state.max_per_user
                and self._open(uid) >= self.state.max_per_user):
            self._over_user_limit(sock, uid)
            return False, None, None
        if tcp and nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return True, ((uid, inode) if inode is not None else None), uid

    def _capped(self, uid: int) -> bool:
        """Does the per-user cap apply to ``uid``? To every user but root and the proxy's own
        (the operator, who can open the TPM itself)."""
        return uid not in (0, self.state.own_uid)

    def _open(self, uid: int | None = None) -> int:
        """The counted connections (of ``uid``, or everyone's) whose peer has not closed them:
        a closed one keeps its place until the loop reads its end, which can come after the
        next connection's accept (the swtpm: TCTI opens and closes a probe on each port, then
        connects for every command, so one client alone once filled a limit of 2). Asked only
        at the limit."""
        n = 0
        for sock, conn in self.state.conns.items():
            if uid is not None and conn.uid != uid:
                continue
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
        if lsock.family in (socket.AF_INET, socket.AF_INET6):
            addr = lsock.getsockname()[:2]
            if addr[0] not in ("0.0.0.0", "::"):
                return tuple(addr)
        return None

    def _over_limit(self, sock: socket.socket) -> None:
        st = self.state
        st.over_limit += 1
        st.peer_log("over the limit", f"{st.max_connections} connections are open (the limit): connection "
                    f"refused ({st.over_limit} so far)", LineKind.DROPPED)
        try:
            sock.close()
        except OSError:
            pass

    def _over_user_limit(self, sock: socket.socket, uid: int) -> None:
        st = self.state
        st.over_user_limit += 1
        st.peer_log("over the per-user limit", f"{access.user_text(uid)} has {st.max_per_user} connections open "
                    f"(the per-user limit, --max-per-user): connection refused ({st.over_user_limit} so far)",
                    LineKind.DROPPED)
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
            st = self.state
            st.refused += 1
            # the port too: a swtpm-TCTI client opens the TPM port and the control port, so one
            # refused program gives two lines, which should not look like a repeat
            where = "a Unix socket" if sock.family == socket.AF_UNIX else f"TCP port {sock.getsockname()[1]}"
            if uid is None:
                # Fail closed: bytes came from a peer whose owner is gone (it closed before the
                # accept) or could not be asked; whose they are cannot be known, so none is run.
                st.unattributed += 1
                st.peer_log("refused", f"refused a connection on {where}: its owner cannot be established "
                            "(the peer's socket was closed before the accept, or its owner could not be "
                            "read); nothing it sent was run; connection closed", LineKind.DROPPED)
                return
            st.peer_log("refused", f"refused a connection on {where} from {access.user_text(uid)}"
                        f"{f' pid {pid}' if pid else ''}: only {st.policy.describe()} may use this TPM "
                        f"(--allow-user / --allow-group let more in); connection closed", LineKind.DROPPED)
        finally:
            try:
                sock.close()
            except OSError:
                pass


def _has_nodelay(sock: socket.socket) -> bool:
    try:
        return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    except OSError:
        return False
