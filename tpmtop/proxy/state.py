"""What every part of :class:`~tpmtop.proxy.server.ProxyServer` shares: one state object, made
by the server and handed to each of its parts (:mod:`.admission`, :mod:`.session`,
:mod:`.faults`, :mod:`.departures`, :mod:`.pump`), which hold it rather than inherit it. It
knows no part: a part that needs another is given it. Layer: proxy; no Textual."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tpmtop.proxy import access, peers
from tpmtop.proxy.accounting import Accounts, ClientStats
from tpmtop.proxy.lines import LineKind, ProxyLine
from tpmtop.proxy.loop import Loop
from tpmtop.proxy.protocol import FRAME_DEADLINE_S
from tpmtop.proxy.serving import CLIENT_LINES_PER_S, Serving
from tpmtop.proxy.turns import Turns
from tpmtop.proxy.upstream import Upstream
from tpmtop.ratelog import RateLimitedLog
from tpmtop.textsafe import safe

if TYPE_CHECKING:
    from tpmtop.tpm.transport import InstrumentedTransport


class OpenConn(Protocol):
    """What the state needs of an open connection (:class:`.conn.Conn` is one)."""

    uid: int | None  # counted against this user's cap (admission), None if not

    def close(self) -> None: ...


class NamedLater(Protocol):
    """A connection whose look-up waits for a walk of /proc (:class:`.session.ClientConn`)."""

    closed: bool

    def named(self, client: ClientStats) -> None: ...

    def close(self) -> None: ...


class ServerState:
    def __init__(self, *, protocol: str, policy: access.AccessPolicy, log: Callable[[str], None],
                 accounts: Accounts | None, interleave: bool, max_connections: int, max_per_user: int | None,
                 idle_timeout: float, turn_idle: float, max_turn: float) -> None:
        self.conn: Any = None  # a TpmConnection (its owner thread, transport, target, recorder)
        self.protocol = protocol
        self.policy = policy  # closed by default: this uid and root (access.AccessPolicy says why)
        self.max_connections, self.idle_timeout, self.turn_idle = max_connections, idle_timeout, turn_idle
        # one user (but root and this uid) holds at most this many of the connections: the
        # others still get in when it holds all it may (1,024 idle ones locked everyone out)
        self.max_per_user = max(1, max_connections // 4) if max_per_user is None else max_per_user
        self.max_turn = max_turn  # the longest turn while others wait (0: none)
        self.per_uid: dict[int, int] = {}  # uid -> its open connections, for the capped users
        self.own_uid = os.geteuid()
        self.over_user_limit = 0
        self.refused = 0
        self.unattributed = 0  # of them: peers whose owner could not be established (fail closed)
        self.over_limit = 0
        self.dropped = 0
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
        self.conns: dict[socket.socket, OpenConn] = {}  # every open client connection (all three ports)
        self.stopping = threading.Event()
        self.serving = Serving.INTERLEAVE if interleave else Serving.TURNS
        self.turns: Turns | None = None
        self.client_transports: dict[int, InstrumentedTransport] = {}  # per-client upstreams (PER_CLIENT)
        # connections whose look-up waits for a walk of /proc: the peer socket's inode -> (the
        # connection, when it began to wait)
        self.unnamed: dict[int, tuple[NamedLater, float]] = {}
        self.pidfds: dict[int, ClientStats] = {}  # a client process's pidfd (departure watch) -> the client
        self.loop = Loop(self.handler_failed)
        self.upstream = Upstream()  # per-client upstreams' commands (PER_CLIENT)
        self.recover_lock = threading.Lock()  # fault recovery (shared upstream)
        self.recovering = False
        self.failed: str | None = None  # set when the TPM is gone for good

    def log(self, text: str, kind: LineKind = LineKind.INFO) -> None:
        line = ProxyLine(safe(text), kind)
        with self._log_lock:
            self._log_to(line)

    def check_period(self) -> float:
        """How often a connection's deadlines are looked at (:mod:`.conn`)."""
        return min(self.idle_timeout, FRAME_DEADLINE_S)

    def handler_failed(self, e: BaseException) -> None:
        """A handler in the loop raised: one (rate-limited) line; the loop goes on."""
        self.peer_log("handler failures", f"connection handler failed: {type(e).__name__}: {e}", LineKind.FAULT)

    def user_closed(self, uid: int) -> None:
        """A connection counted against ``uid``'s cap (:mod:`.admission`) is closed."""
        n = self.per_uid.get(uid, 0) - 1
        if n > 0:
            self.per_uid[uid] = n
        else:
            self.per_uid.pop(uid, None)
