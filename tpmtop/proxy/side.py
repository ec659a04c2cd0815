"""A connection on the control port (swtpm) or the platform port (mssim): answered by the proxy
itself, never forwarded (:mod:`.protocol` says why). Layer: proxy; no Textual."""

from __future__ import annotations

import socket

from tpmtop.proxy import protocol as P
from tpmtop.proxy.conn import Conn
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.state import ServerState


class SideConn(Conn):
    __slots__ = ("state", "swtpm")

    def __init__(self, srv: ServerState, sock: socket.socket, owner: tuple[int, int] | None, tcp: bool,
                 swtpm: bool):
        super().__init__(srv, sock, owner, tcp)
        self.swtpm = swtpm
        self.state: dict[str, int] = {}  # the locality a swtpm client set; a refused request

    def process(self) -> None:
        state = self.state
        while self.buf and not self.out and not self.closed:
            got = P.control_request(self.buf, state) if self.swtpm else P.platform_request(self.buf)
            if isinstance(got, int):
                if self.incomplete(got):
                    return
                continue
            n, code, answer = got
            self.whole(n)
            if answer and not self.send(answer):
                self.close()
                return
            if not self.swtpm and code == P.MS_SIM_SESSION_END:
                self.close()
                return
            if self.swtpm and state.get("refused"):
                # its payload's length is unknown: reading on would take the payload for more
                # requests
                self.drain_and_close()
                return

    def broken(self, why: str) -> None:
        self.srv.peer_log("control errors", f"{'control' if self.swtpm else 'platform'} connection: {why}; "
                                            "connection closed", LineKind.DROPPED)
        self.close()
