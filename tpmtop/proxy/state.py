"""What every part of :class:`~tpmtop.proxy.server.ProxyServer` shares: its state, declared
once here (set in ``ProxyServer.__init__``), and the methods one room calls in another. The
rooms (:mod:`.admission`, :mod:`.session`, :mod:`.faults`, :mod:`.departures`) derive from
it, so each is type-checked against the whole server's attributes. Layer: proxy; no Textual."""

from __future__ import annotations

import queue
import select
import socket
import threading
from typing import TYPE_CHECKING, Any

from tpmtop.proxy.lines import LineKind

if TYPE_CHECKING:
    from tpmtop.proxy import access, peers
    from tpmtop.proxy.accounting import Accounts, ClientStats
    from tpmtop.proxy.parking import Parking
    from tpmtop.proxy.serving import Serving
    from tpmtop.proxy.turns import Turns
    from tpmtop.ratelog import RateLimitedLog
    from tpmtop.tpm.transport import InstrumentedTransport


class ServerState:
    conn: Any  # a TpmConnection (its owner thread, transport, target, recorder)
    protocol: str
    policy: access.AccessPolicy
    max_connections: int
    idle_timeout: float
    turn_idle: float
    refused: int
    over_limit: int
    dropped: int
    peer_log: RateLimitedLog
    accounts: Accounts
    resolver: peers.TcpResolver
    serving: Serving
    turns: Turns | None
    recovering: bool
    failed: str | None
    _conns: dict[socket.socket, tuple[int, int] | None]
    _locals: dict[socket.socket, tuple[Any, ...] | None]
    _lock: threading.Lock
    _stop: threading.Event
    _work: queue.SimpleQueue[Any]
    _idle: int
    _workers: int
    _client_transports: dict[int, tuple[InstrumentedTransport, threading.Lock]]
    _pidfds: dict[int, tuple[int, ClientStats]]
    _pidfd_lock: threading.Lock
    _wake_r: int
    _wake_w: int
    _exits: select.epoll
    _recover_lock: threading.Lock
    parking: Parking | None

    # -- called across rooms (defined in one of them) -------------------------------------------
    def log(self, text: str, kind: LineKind = LineKind.INFO) -> None:
        raise NotImplementedError

    def _answer(self, sock: socket.socket, client: ClientStats, rsp: bytes, mssim: bool) -> None:
        raise NotImplementedError

    def _tpm_failed(self, sock: socket.socket, client: ClientStats, fut: Any, mssim: bool, own: bool) -> None:
        raise NotImplementedError

    def _depart(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _closed(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _reap_exited(self) -> None:
        raise NotImplementedError

    def _watch_exit(self, c: ClientStats) -> None:
        raise NotImplementedError

    def _end_connection(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def _close_pidfd(self, fd: int) -> None:
        raise NotImplementedError
