"""``tpmtop proxy``'s server: its lifecycle (listen, start, stop). It owns its parts, each over
one shared :class:`~.state.ServerState` and given the parts it calls (composition, not mixins):
:mod:`.admission` (accept and access: who gets in, the caps, refusals), :mod:`.session` (a
client's connection: framing, turn, exchange, answer), :mod:`.faults` (a TPM that fails),
:mod:`.departures` (clients that leave, and their leak reports), :mod:`.pump` (the raw TPM's
turns); :mod:`.listening` makes the sockets, :mod:`.serving` holds the sharing modes and limits.

One thread serves every connection: an event loop (:mod:`.loop`) holds the listeners, the
connections, the clients' pidfds and every deadline, so nothing a client does — holding
connections open, sending half a frame, waiting for its turn — makes the proxy grow a thread
or stall the others. A whole command goes to the TPM from that thread (:mod:`.session`). A
client that breaks the framing loses only its own connection, with one (rate-limited) line.
At most ``max_connections`` connections are open (more are refused with a line), and a
connection idle for ``idle_timeout`` seconds is closed.

How clients share the TPM (:class:`Serving`): over a resource-managed TPM (/dev/tpmrm0,
tpm2-abrmd) every client gets its own upstream connection; over a raw one clients take turns
(:mod:`.turns`), or, with ``--interleave``, share it command by command.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from tpmtop import settings
from tpmtop.errors import UsageError
from tpmtop.limits import raise_nofile
from tpmtop.proxy import access
from tpmtop.proxy.accounting import Accounts, ClientStats
from tpmtop.proxy.admission import Admission, MakeConn
from tpmtop.proxy.departures import Departures
from tpmtop.proxy.faults import Faults
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.listening import _listen_unix, _refuse_existing, _unlink_own, listen_pair
from tpmtop.proxy.loop import Loop
from tpmtop.proxy.pump import TurnPump
from tpmtop.proxy.serving import IDLE_TIMEOUT_S, MAX_CONNECTIONS, REAP_INTERVAL_S, TURN_IDLE_S, Serving
from tpmtop.proxy.session import ClientConn, Session
from tpmtop.proxy.side import SideConn
from tpmtop.proxy.state import ServerState
from tpmtop.proxy.turns import Turns
from tpmtop.tpm.tcti import TargetKind

__all__ = ["ProxyServer", "Serving"]


class ProxyServer:
    """Serve ``conn``'s TPM to other programs over ``protocol`` ("swtpm" or "mssim").

    It owns its parts — :class:`Admission`, :class:`Session`, :class:`Faults`,
    :class:`Departures`, the :class:`TurnPump` — over one :class:`ServerState`, each part
    given the others it calls."""

    def __init__(self, conn: Any, *, protocol: str = "swtpm", host: str = "127.0.0.1", port: int = 2321,
                 socket_path: str | None = None, log: Callable[[str], None] = print,
                 accounts: Accounts | None = None, socket_mode: int = 0o600, socket_gid: int | None = None,
                 policy: access.AccessPolicy | None = None, interleave: bool = False,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT_S,
                 turn_idle: float = TURN_IDLE_S, max_turn: float | None = None,
                 max_per_user: int | None = None) -> None:
        if protocol not in ("swtpm", "mssim"):
            raise UsageError(f"unknown protocol {protocol!r}: use swtpm or mssim")
        self.state = ServerState(
            protocol=protocol, policy=policy or access.AccessPolicy.default(), log=log, accounts=accounts,
            interleave=interleave, max_connections=max_connections, max_per_user=max_per_user,
            idle_timeout=idle_timeout, turn_idle=turn_idle,
            # the longest turn while others wait (0: none); Settings.proxy_max_turn_s unless given
            max_turn=settings.current().proxy_max_turn_s if max_turn is None else max_turn)
        self.state.conn = conn
        self.host, self.port, self.socket_path = host, port, socket_path
        self.socket_mode, self.socket_gid = socket_mode, socket_gid
        self._own_paths: list[tuple[str, tuple[int, int]]] = []  # sockets this process bound
        self._bound: list[tuple[socket.socket, str]] | None = None  # (listening socket, role) once listen() ran
        self._listeners: list[socket.socket] = []
        self._stopped = False
        self.pump = TurnPump(self.state)
        self.departures = Departures(self.state, self.pump)
        self.faults = Faults(self.state)
        self.session = Session(self.state, self.departures, self.faults, self.pump)
        self.admission = Admission(self.state)

    # -- what others read of it (the state's) ------------------------------------------------------
    @property
    def conn(self) -> Any:
        return self.state.conn

    @conn.setter
    def conn(self, conn: Any) -> None:  # set once the TPM is open (ports are bound before)
        self.state.conn = conn

    @property
    def protocol(self) -> str:
        return self.state.protocol

    @property
    def policy(self) -> access.AccessPolicy:
        return self.state.policy

    @property
    def accounts(self) -> Accounts:
        return self.state.accounts

    @property
    def loop(self) -> Loop:
        return self.state.loop

    @property
    def turns(self) -> Turns | None:
        return self.state.turns

    @property
    def serving(self) -> Serving:
        return self.state.serving

    @property
    def failed(self) -> str | None:
        return self.state.failed

    @property
    def recovering(self) -> bool:
        return self.state.recovering

    @property
    def refused(self) -> int:
        return self.state.refused

    @property
    def unattributed(self) -> int:
        return self.state.unattributed

    @property
    def over_limit(self) -> int:
        return self.state.over_limit

    @property
    def dropped(self) -> int:
        return self.state.dropped

    @property
    def turn_idle(self) -> float:
        return self.state.turn_idle

    @property
    def max_turn(self) -> float:
        return self.state.max_turn

    @property
    def open_connections(self) -> int:
        return len(self.state.conns)

    def log(self, text: str, kind: LineKind = LineKind.INFO) -> None:
        self.state.log(text, kind)

    @property
    def per_client_device(self) -> bool:  # the name the dashboard knew
        return self.serving is Serving.PER_CLIENT

    # -- lifecycle ------------------------------------------------------------------------------
    def listen(self) -> ProxyServer:
        """Bind every listener (ports, socket paths) without serving yet: a busy port or a taken
        path is refused (UsageError) before a TPM is opened; a refused start removes nothing."""
        if self._bound is not None:
            return self
        bound: list[tuple[socket.socket, str]] = []
        try:
            if self.port is not None:
                data, side = listen_pair(self.host, self.port)
                bound += [(data, "data"), (side, "side")]
            if self.socket_path:
                # both paths are checked before either is created
                for p in (self.socket_path, self.socket_path + ".ctrl"):
                    _refuse_existing(p)
                # the Unix socket speaks the swtpm protocol (the only TCTI with path=), control on PATH.ctrl
                for p, role in ((self.socket_path, "unix"), (self.socket_path + ".ctrl", "unix-ctrl")):
                    lsock, ident = _listen_unix(p, self.socket_mode, self.socket_gid)
                    self._own_paths.append((p, ident))
                    bound.append((lsock, role))
        except BaseException:
            for lsock, _ in bound:
                lsock.close()
            self._unlink_own_paths()
            raise
        self._bound = bound
        self._listeners = [lsock for lsock, _ in bound]
        return self

    def start(self) -> ProxyServer:
        self.listen()
        st = self.state
        if st.conn is None:
            raise TypeError("ProxyServer.start() needs a TPM connection")
        target = getattr(st.conn, "target", None)
        if bool(getattr(st.conn, "is_kernel_rm", False)) or getattr(target, "kind", None) == TargetKind.TABRMD:
            st.serving = Serving.PER_CLIENT
        elif st.serving is Serving.TURNS:
            wait = float(getattr(st.conn, "timeout", 120.0))
            st.turns = Turns(st.turn_idle, wait, on_queue=self.pump.queued, max_turn_s=st.max_turn)
        mssim = st.protocol == "mssim"
        session = self.session
        kinds: dict[str, MakeConn] = {
            "data": lambda sock, owner, tcp: ClientConn(session, sock, owner, tcp, mssim),
            "unix": lambda sock, owner, tcp: ClientConn(session, sock, owner, tcp, False),
            "side": lambda sock, owner, tcp: SideConn(st, sock, owner, tcp, not mssim),
            "unix-ctrl": lambda sock, owner, tcp: SideConn(st, sock, owner, tcp, True),
        }
        # a descriptor per connection and per client process (its pidfd), and a few of our own
        raise_nofile(2 * st.max_connections + 64)
        for lsock, role in self._bound or ():  # listen() above bound them
            self.admission.listen_in_loop(lsock, kinds[role])
        st.loop.call_later(REAP_INTERVAL_S, self.departures.tick)
        st.loop.call_later(REAP_INTERVAL_S, self.session.name_late)
        st.loop.start("proxy-loop")
        return self

    def _unlink_own_paths(self) -> None:
        for p, ident in self._own_paths:  # only what this process created, still as it made it
            _unlink_own(p, ident)
        self._own_paths.clear()

    @property
    def bound_port(self) -> int | None:
        for s in self._listeners:
            if s.family in (socket.AF_INET, socket.AF_INET6):
                port: int = s.getsockname()[1]
                return port
        return None

    def sharing_note(self) -> str:
        if self.serving is Serving.PER_CLIENT:
            return ("each client gets its own upstream connection: the resource manager below "
                    "(the kernel's /dev/tpmrm0 or tpm2-abrmd) keeps their objects apart")
        if self.serving is Serving.INTERLEAVE:
            return ("--interleave: clients share one TPM connection command by command: they see and can flush "
                    "each other's objects and sessions, and together they can run the TPM out of object or "
                    "session slots (TPM_RC_OBJECT_MEMORY 0x902, TPM_RC_SESSION_MEMORY 0x903)")
        longest = (f", or has held it {self.max_turn:g} s (proxy_max_turn_s)" if self.max_turn
                   else "; no longest turn (proxy_max_turn_s 0)")
        return (f"a raw TPM: clients take turns, one client (process) at a time as swtpm serves; a turn ends "
                f"when its client leaves or has been idle {self.turn_idle:g} s while others wait{longest}")

    def stop(self) -> list[ClientStats]:
        """Close everything; every client still known departs (its leak report is returned).
        Idempotent: a second call returns []."""
        if self._stopped:
            return []
        self._stopped = True
        st = self.state
        st.stopping.set()
        st.loop.close()  # its thread ends; from here on this thread is the only one serving
        owner = getattr(st.conn, "owner", None)
        if owner is not None:  # clients' jobs still queued are answered and counted first
            try:
                owner.call(lambda: None, timeout=30)
            except Exception:
                pass
        st.upstream.drain()  # and the clients' own upstreams' commands
        st.loop.run_soon()  # their completions
        if st.turns is not None:
            st.turns.close()
            self.pump.pump()
        for s in self._listeners:
            s.close()
        for conn in list(st.conns.values()):
            conn.close()
        self._unlink_own_paths()
        departed = []
        for c in st.accounts.live():
            if c.id != 0:
                self.departures.depart(c)
                departed.append(c)
        st.peer_log.flush()
        st.client_log.flush()
        for transport in list(st.client_transports.values()):
            st.upstream.submit(transport.close)
        st.client_transports.clear()
        st.upstream.close()
        for fd in list(st.pidfds):
            self.departures.close_pidfd(fd)
        st.loop.dispose()
        return departed
