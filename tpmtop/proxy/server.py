"""``tpmtop proxy``'s server: its lifecycle (listen, start, stop) and its state. The rest of it
lives in rooms, each a part of :class:`ProxyServer`: :mod:`.listening` (the sockets),
:mod:`.admission` (accept and access: who gets in, the cap, refusals), :mod:`.session` (a
client's connection: framing, turn, exchange, answer), :mod:`.faults` (a TPM that fails),
:mod:`.departures` (clients that leave, and their leak reports), :mod:`.serving` (sharing
modes and limits).

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

import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpmtop import settings
from tpmtop.errors import UsageError
from tpmtop.limits import raise_nofile
from tpmtop.proxy import access, peers
from tpmtop.proxy.accounting import Accounts, ClientStats
from tpmtop.proxy.admission import Admission, MakeConn
from tpmtop.proxy.conn import Conn
from tpmtop.proxy.departures import Departures
from tpmtop.proxy.faults import Faults
from tpmtop.proxy.lines import LineKind, ProxyLine
from tpmtop.proxy.listening import _listen_unix, _refuse_existing, _unlink_own, listen_pair
from tpmtop.proxy.loop import Loop
from tpmtop.proxy.protocol import FRAME_DEADLINE_S
from tpmtop.proxy.serving import (
    CLIENT_LINES_PER_S,
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    REAP_INTERVAL_S,
    TURN_IDLE_S,
    Serving,
)
from tpmtop.proxy.session import ClientConn, Session
from tpmtop.proxy.side import SideConn
from tpmtop.proxy.turns import Turns
from tpmtop.proxy.upstream import Upstream
from tpmtop.ratelog import RateLimitedLog
from tpmtop.textsafe import safe
from tpmtop.tpm.tcti import TargetKind

if TYPE_CHECKING:
    from tpmtop.tpm.transport import InstrumentedTransport

__all__ = ["ProxyServer", "Serving"]


class ProxyServer(Admission, Session, Faults, Departures):
    """Serve ``conn``'s TPM to other programs over ``protocol`` ("swtpm" or "mssim")."""

    def __init__(self, conn: Any, *, protocol: str = "swtpm", host: str = "127.0.0.1", port: int = 2321,
                 socket_path: str | None = None, log: Callable[[str], None] = print,
                 accounts: Accounts | None = None, socket_mode: int = 0o600, socket_gid: int | None = None,
                 policy: access.AccessPolicy | None = None, interleave: bool = False,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT_S,
                 turn_idle: float = TURN_IDLE_S, max_turn: float | None = None,
                 max_per_user: int | None = None) -> None:
        if protocol not in ("swtpm", "mssim"):
            raise UsageError(f"unknown protocol {protocol!r}: use swtpm or mssim")
        self.conn = conn
        self.protocol = protocol
        self.host, self.port, self.socket_path = host, port, socket_path
        self.socket_mode, self.socket_gid = socket_mode, socket_gid
        # closed by default: this uid and root (access.AccessPolicy says why)
        self.policy = policy or access.AccessPolicy.default()
        self.interleave = interleave
        self.max_connections, self.idle_timeout, self.turn_idle = max_connections, idle_timeout, turn_idle
        # the longest turn while others wait (0: none); Settings.proxy_max_turn_s unless given
        self.max_turn = settings.current().proxy_max_turn_s if max_turn is None else max_turn
        # one user (but root and this uid) holds at most this many of the connections: the
        # others still get in when it holds all it may (1,024 idle ones locked everyone out)
        self.max_per_user = max(1, max_connections // 4) if max_per_user is None else max_per_user
        self._per_uid: dict[int, int] = {}
        self._own_uid = os.geteuid()
        self.over_user_limit = 0
        self.refused = 0
        self.unattributed = 0  # of them: peers whose owner could not be established (fail closed)
        self.over_limit = 0
        self._own_paths: list[tuple[str, tuple[int, int]]] = []  # sockets this process bound
        self._bound: list[tuple[socket.socket, str]] | None = None  # (listening socket, role) once listen() ran
        # Every line carries other processes' names and command lines (a client can set its
        # comm to an escape sequence): made terminal-safe here, once, for stderr and the
        # dashboard; one line is one call under one lock (lines of two threads never glue).
        self._log_lock = threading.Lock()
        self._log_to = log
        # Lines a peer can cause (a refusal, a broken frame, an idle close...): one a second at
        # most, the rest counted in a summary line (tpmtop.ratelog). A refused user must not
        # decide how big the operator's journal grows (45,000 refusals were 24,037 lines).
        self.peer_log = RateLimitedLog(self.log)
        # "client N connected" / "left" lines: a script's tools each get theirs, a flood of
        # connections or processes (74 a second from one user wrote 8,975 lines a minute) is
        # held to CLIENT_LINES_PER_S a second and counted; a LEAK line is always said
        self.client_log = RateLimitedLog(self.log, burst=CLIENT_LINES_PER_S)

        self.accounts = accounts or Accounts()
        self.resolver = peers.TcpResolver()
        self._listeners: list[socket.socket] = []
        self._conns: dict[socket.socket, Conn] = {}
        self._stop = threading.Event()
        self._stopped = False
        self.dropped = 0
        self.serving = Serving.INTERLEAVE if interleave else Serving.TURNS
        self.turns: Turns | None = None
        self._turn_timer: Any = None
        self._pumping = self._pump_again = False
        self._client_transports: dict[int, InstrumentedTransport] = {}  # per-client upstreams (PER_CLIENT)
        self._pidfds: dict[int, ClientStats] = {}  # pidfd -> client (departure watch)
        self.loop = Loop(self._handler_failed)
        self.upstream = Upstream()  # per-client upstreams' commands (PER_CLIENT)
        # fault recovery (shared upstream)
        self._recover_lock = threading.Lock()
        self.recovering = False
        self.failed: str | None = None  # set when the TPM is gone for good

    def log(self, text: str, kind: LineKind = LineKind.INFO) -> None:
        line = ProxyLine(safe(text), kind)
        with self._log_lock:
            self._log_to(line)

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
        if self.conn is None:
            raise TypeError("ProxyServer.start() needs a TPM connection")
        target = getattr(self.conn, "target", None)
        if bool(getattr(self.conn, "is_kernel_rm", False)) or getattr(target, "kind", None) == TargetKind.TABRMD:
            self.serving = Serving.PER_CLIENT
        elif self.serving is Serving.TURNS:
            wait = float(getattr(self.conn, "timeout", 120.0))
            self.turns = Turns(self.turn_idle, wait, on_queue=self._queued, max_turn_s=self.max_turn)
        mssim = self.protocol == "mssim"
        kinds: dict[str, MakeConn] = {
            "data": lambda srv, sock, owner, tcp: ClientConn(srv, sock, owner, tcp, mssim),
            "unix": lambda srv, sock, owner, tcp: ClientConn(srv, sock, owner, tcp, False),
            "side": lambda srv, sock, owner, tcp: SideConn(srv, sock, owner, tcp, not mssim),
            "unix-ctrl": lambda srv, sock, owner, tcp: SideConn(srv, sock, owner, tcp, True),
        }
        # a descriptor per connection and per client process (its pidfd), and a few of our own
        raise_nofile(2 * self.max_connections + 64)
        for lsock, role in self._bound or ():  # listen() above bound them
            self._listen_in_loop(lsock, kinds[role])
        self.loop.call_later(REAP_INTERVAL_S, self._tick)
        self.loop.start("proxy-loop")
        return self

    def check_period(self) -> float:
        return min(self.idle_timeout, FRAME_DEADLINE_S)

    def _handler_failed(self, e: BaseException) -> None:
        self.peer_log("handler failures", f"connection handler failed: {type(e).__name__}: {e}", LineKind.FAULT)

    def _pump_turns(self) -> None:
        """Grant and refuse the turns now due (:mod:`.turns`), then look again when the next
        can be. Re-entered from a grant (its command answered at once), it runs once more
        after the one in progress instead of inside it."""
        turns = self.turns
        if turns is None:
            return
        if self._pumping:
            self._pump_again = True
            return
        self._pumping = True
        try:
            while True:
                self._pump_again = False
                granted, refused, due = turns.pump()
                for waiter, waited in granted:
                    waiter.turn_granted(waited)
                for waiter, why in refused:
                    waiter.turn_refused(why)
                if not self._pump_again:
                    break
        finally:
            self._pumping = False
        t = self._turn_timer
        if due is not None and (t is None or t.cancelled or t.when > due):
            if t is not None:
                t.cancel()
            self._turn_timer = self.loop.call_at(due, self._turn_due)

    def _turn_due(self) -> None:
        self._turn_timer = None
        self._pump_turns()

    def _queued(self, depth: int) -> None:
        if depth > self.accounts.queue_max:
            self.accounts.queue_max = depth

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
        self._stop.set()
        self.loop.close()  # its thread ends; from here on this thread is the only one serving
        owner = getattr(self.conn, "owner", None)
        if owner is not None:  # clients' jobs still queued are answered and counted first
            try:
                owner.call(lambda: None, timeout=30)
            except Exception:
                pass
        self.upstream.drain()  # and the clients' own upstreams' commands
        self.loop.run_soon()  # their completions
        if self.turns is not None:
            self.turns.close()
            self._pump_turns()
        for s in self._listeners:
            s.close()
        for conn in list(self._conns.values()):
            conn.close()
        self._unlink_own_paths()
        departed = []
        for c in self.accounts.live():
            if c.id != 0:
                self._depart(c)
                departed.append(c)
        self.peer_log.flush()
        self.client_log.flush()
        for transport in list(self._client_transports.values()):
            self.upstream.submit(transport.close)
        self._client_transports.clear()
        self.upstream.close()
        for fd in list(self._pidfds):
            self._close_pidfd(fd)
        self.loop.dispose()
        return departed
