"""What every part of :class:`~tpmtop.proxy.server.ProxyServer` shares: its state, declared
once here (set in ``ProxyServer.__init__``), and the methods one room calls in another. The
rooms (:mod:`.admission`, :mod:`.session`, :mod:`.faults`, :mod:`.departures`) derive from
it, so each is type-checked against the whole server's attributes. Layer: proxy; no Textual."""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING, Any

from tpmtop.proxy.lines import LineKind

if TYPE_CHECKING:
    from tpmtop.proxy import access, peers
    from tpmtop.proxy.accounting import Accounts, ClientStats
    from tpmtop.proxy.conn import Conn
    from tpmtop.proxy.loop import Loop
    from tpmtop.proxy.serving import Serving
    from tpmtop.proxy.session import ClientConn
    from tpmtop.proxy.turns import Turns
    from tpmtop.proxy.upstream import Upstream
    from tpmtop.ratelog import RateLimitedLog
    from tpmtop.tpm.transport import InstrumentedTransport


class ServerState:
    conn: Any  # a TpmConnection (its owner thread, transport, target, recorder)
    protocol: str
    policy: access.AccessPolicy
    max_connections: int
    max_per_user: int  # open connections of one user (not root's, not the proxy's own uid)
    over_user_limit: int
    _own_uid: int
    _per_uid: dict[int, int]  # uid -> its open connections, for the capped users
    idle_timeout: float
    turn_idle: float
    refused: int
    unattributed: int
    over_limit: int
    dropped: int
    peer_log: RateLimitedLog
    client_log: RateLimitedLog  # who came and went (rate-limited with a burst)
    accounts: Accounts
    resolver: peers.TcpResolver
    serving: Serving
    turns: Turns | None
    recovering: bool
    failed: str | None
    loop: Loop
    upstream: Upstream
    _conns: dict[socket.socket, Conn]  # every open client connection (all three ports)
    _stop: threading.Event
    _client_transports: dict[int, InstrumentedTransport]
    _pidfds: dict[int, ClientStats]  # a client process's pidfd (departure watch) -> the client
    _recover_lock: threading.Lock

    def user_closed(self, uid: int) -> None:
        """A connection counted against ``uid``'s cap (:mod:`.admission`) is closed."""
        n = self._per_uid.get(uid, 0) - 1
        if n > 0:
            self._per_uid[uid] = n
        else:
            self._per_uid.pop(uid, None)

    def check_period(self) -> float:
        """How often a connection's deadlines are looked at (:mod:`.conn`)."""
        raise NotImplementedError

    # -- called across rooms (defined in one of them) -------------------------------------------
    def log(self, text: str, kind: LineKind = LineKind.INFO) -> None:
        raise NotImplementedError

    def _tpm_failed(self, conn: ClientConn, client: ClientStats, e: BaseException, own: bool) -> None:
        raise NotImplementedError

    def _pump_turns(self) -> None:
        raise NotImplementedError

    def _handler_failed(self, e: BaseException) -> None:
        raise NotImplementedError

    def _depart(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _closed(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _reap_exited(self) -> None:
        raise NotImplementedError

    def _watch_exit(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _attach(self, conn: ClientConn) -> ClientStats:
        raise NotImplementedError

    def _answered(self, client: ClientStats) -> None:
        raise NotImplementedError

    def _transport_for(self, client: ClientStats) -> InstrumentedTransport:
        raise NotImplementedError
