"""A client's session on the TPM port (a part of :class:`~tpmtop.proxy.server.ProxyServer`,
and :class:`ClientConn`, one connection of it in the event loop): framing, its turn, the
exchange with the TPM, the answer. Layer: proxy; no Textual.

The exchange: a whole command goes to the TPM from the loop's thread, through the TPM's owner
(:mod:`.forward`); when the owner is idle it runs there and then, so the answer leaves with no
hand-over between threads (the loop waits for that one command: the TPM answers one at a time
whoever asks). When tpmtop's own work holds the owner, the command is queued behind it and the
connection is not read until its answer is out; the loop serves everyone else meanwhile.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING, Any

from tpmtop.proxy import peers, reconcile
from tpmtop.proxy import protocol as P
from tpmtop.proxy.accounting import ClientStats, LockoutLine
from tpmtop.proxy.conn import RECV_SIZE, Conn
from tpmtop.proxy.departures import Departures
from tpmtop.proxy.faults import Faults
from tpmtop.proxy.forward import forward
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.loop import EVENT_WRITE as WRITE
from tpmtop.proxy.pump import TurnPump
from tpmtop.proxy.serving import REAP_INTERVAL_S, TPM_RC_FAILURE, TPM_RC_RETRY, Serving, error_response
from tpmtop.proxy.state import ServerState
from tpmtop.tpm.busypoll import RequestPoll, recv_soon

if TYPE_CHECKING:
    from tpmtop.tpm.transport import InstrumentedTransport

class Session:
    """ProxyServer's side of a client's session, over the server's state; a client's
    connection (:class:`ClientConn`) calls it, and it calls the parts it is given."""

    def __init__(self, state: ServerState, departures: Departures, faults: Faults, pump: TurnPump) -> None:
        self.state, self.departures, self.faults, self.pump = state, departures, faults, pump

    def attach(self, conn: ClientConn) -> ClientStats | None:
        """The client a connection belongs to (its process), named at its first byte, while it
        is surely alive (a client killed mid-command must still be named); a connection
        closed without a byte (the swtpm TCTI's start-up probe) costs no look-up. None when
        the look-up waits for the next walk of /proc: the connection is not served until
        :meth:`name_late` names it (served as another client meanwhile, a process would lose
        its turn, or its objects behind a resource manager)."""
        sock = conn.sock
        if not conn.tcp:
            return self.client_of(peers.unix_peer(sock), "")
        resolver = self.state.resolver
        peer = resolver.resolve(sock, conn.owner)
        pidfd = resolver.take_pidfd(peer.pid)  # opened by the look-up of a new process
        if peer.waiting and conn.owner is not None:
            self.state.unnamed[conn.owner[1]] = (conn, time.monotonic())
            return None
        return self.client_of(peer, "", pidfd)

    def client_of(self, peer: peers.Peer, how: str, pidfd: int | None = None) -> ClientStats:
        """The client of a connection whose process is ``peer``; a new one gets its line
        (``how``: how it was named, when not at once). ``pidfd``: one the look-up opened on
        that process (this takes it: the new client's departure watch, else closed)."""
        known = peer.pid is not None
        before = self.state.accounts._next
        c = self.state.accounts.client_for(peer, self.state.protocol, shared_key=known)
        if c.id >= before:  # a new client
            # Processes that have exited depart first, before this one's commands count: a
            # script's next tool cannot change what the previous one is reported to leave.
            self.departures.reap_exited()
            if known:
                self.departures.watch_exit(c, pidfd)
                pidfd = None
            who = f"pid {peer.pid}" if known else "pid unknown"
            args = f": {_short(peer.cmdline)}" if peer.cmdline and peer.cmdline != peer.name else ""
            self.state.client_log("clients connected", f"client {c.id} connected: {peer.name} ({who}, uid "
                                  f"{peer.uid if peer.uid is not None else '?'}){how}{args}", LineKind.INFO)
        if pidfd is not None:  # a process already known (its watch has its own)
            os.close(pidfd)
        return c

    def name_late(self) -> None:
        """Every REAP_INTERVAL_S on the loop: the connections whose look-up waited for a walk
        of /proc (:meth:`.peers.TcpResolver.late`) get their client, and their line says that
        the name was found late, or not at all (never a guess); then they are served."""
        self.state.loop.call_later(REAP_INTERVAL_S, self.name_late)
        for inode, peer in self.state.resolver.late().items():
            conn, since = self.state.unnamed.pop(inode, (None, 0.0))
            if conn is None or conn.closed:
                continue
            waited = time.monotonic() - since
            how = (f", named {waited:.1f} s late by a walk of /proc" if peer.pid is not None else
                   f", not named by a walk of /proc {waited:.1f} s later (no process we may look into held "
                   "its connection then)")
            try:
                conn.named(self.client_of(peer, how))
            except Exception as e:  # one connection's trouble must not leave the others waiting
                self.state.handler_failed(e)
                conn.close()

    def answered(self, client: ClientStats) -> None:
        """A command of ``client`` is answered and accounted: if its process has exited
        meanwhile (it got the answer and left), it departs now, its last command counted."""
        client.inflight -= 1
        if client.inflight <= 0 and client.exited:
            self.departures.depart(client)

    def transport_for(self, client: ClientStats) -> InstrumentedTransport:
        """Over a resource manager, the client's own upstream (its /dev/tpmrm0 descriptor, its
        tpm2-abrmd connection), reporting to the same recorder; opened at its first command, on
        the upstream thread (:mod:`.upstream`)."""
        t = self.state.client_transports.get(client.id)
        if t is None:
            from tpmtop.tpm.transport import DeviceBackend, InstrumentedTransport, TctiLdrBackend

            target = self.state.conn.target
            timeout = getattr(self.state.conn, "fixed_timeout", None)  # None: the deadline by command
            backend = (DeviceBackend(target.device_path, timeout) if target.device_path
                       else TctiLdrBackend(target.kind, target.conf, timeout))
            t = self.state.client_transports[client.id] = InstrumentedTransport(backend, self.state.conn.recorder)
        return t


class ClientConn(Conn):
    """One connection on the TPM port (swtpm's raw framing, or mssim's)."""

    __slots__ = ("client", "cmd", "gone_n", "mssim", "naming", "next_request", "session")

    def __init__(self, session: Session, sock: socket.socket, owner: tuple[int, int] | None, tcp: bool,
                 mssim: bool):
        super().__init__(session.state, sock, owner, tcp)
        self.session = session
        self.mssim = mssim
        self.client: ClientStats | None = None
        self.naming = False  # its look-up waits for a walk of /proc: not served until named
        self.cmd = b""  # the command in flight
        self.gone_n = 0  # its answer's length, when the peer went away before it
        # mssim clients keep their connection; most raw ones (tpm2-tss's swtpm: TCTI) send one
        # command per connection, and polling for their close competes with the next
        # connection: a raw connection polls from its third request
        self.next_request = RequestPoll(skip=0 if mssim else 1)

    def process(self) -> None:
        if self.client is None:
            if self.naming:
                return  # its look-up waits for a walk of /proc (Session.name_late)
            c = self.session.attach(self)
            if c is None:
                self.naming = True
                return
            self.client = c
            if self.mssim:
                self.client.locality = 0
        reader = P.mssim_request if self.mssim else P.raw_command
        while not self.busy and not self.out and not self.closed:
            if not self.buf:
                if not self._next_soon():
                    return
                continue
            got = reader(self.buf)
            if isinstance(got, int):
                if self.incomplete(got):
                    return
                continue
            n, code, locality, cmd = got
            self.whole(n)
            if cmd is None:
                if code != P.MS_SIM_REMOTE_HANDSHAKE:
                    self.close()  # SESSION_END / STOP: the client is done with this connection
                    return
                if not self.send(P.mssim_handshake_answer()):
                    self.close()
                    return
                continue
            if self.mssim:
                self.client.locality = locality
            self.command(cmd)

    def named(self, client: ClientStats) -> None:
        """Its process is found (or known not to be) after a walk of /proc: what it sent
        meanwhile is served now."""
        self.naming = False
        self.client = client
        if self.mssim:
            client.locality = 0
        self.received()

    def _next_soon(self) -> bool:
        """Poll briefly for a busy client's next request (:class:`RequestPoll`): True if some
        came."""
        budget = self.next_request.budget()
        if not budget:
            return False
        chunk = recv_soon(self.sock, RECV_SIZE, budget)
        self.next_request.came(chunk is not None)
        if chunk is None:
            return False
        if not chunk:
            self.ended()
            return False
        self.last = time.monotonic()
        self.buf += chunk
        return True

    # -- a command ------------------------------------------------------------------------------
    def command(self, cmd: bytes) -> None:
        srv = self.srv
        if srv.failed or srv.recovering:
            self.answer(error_response(TPM_RC_FAILURE if srv.failed else TPM_RC_RETRY))
            return
        self.cmd = cmd
        if srv.turns is not None and not srv.turns.ask(self.client, self):
            self.pause()  # its turn comes (turn_granted) or not (turn_refused)
            self.session.pump.pump()  # at once if the holder has been idle long enough; else a timer
            return
        self.exchange()

    def turn_granted(self, waited_ns: int) -> None:
        assert self.client is not None
        if waited_ns:
            self.client.waits.record(waited_ns)
        self.exchange()
        if not self.busy:
            self.resume()

    def turn_refused(self, why: str) -> None:
        c = self.client
        assert c is not None
        self.srv.peer_log("turn time-outs", f"client {c.id} {c.name} (pid {c.peer.pid}): {why}; "
                                            f"answered TPM_RC_RETRY", LineKind.FAULT)
        self.busy = False
        self.answer(error_response(TPM_RC_RETRY))
        self.resume()

    def exchange(self) -> None:
        """The command to the TPM; answered from inside its job (:meth:`_then`)."""
        srv, client = self.srv, self.client
        assert client is not None
        client.inflight += 1
        self.busy = True
        own = srv.serving is Serving.PER_CLIENT
        fut = forward(srv.conn, client.id, self.cmd, self._then,
                      (lambda: self.session.transport_for(client)) if own else None, srv.upstream.submit)
        if fut.done():
            self._finished(fut, own)
            return
        self._want(0)  # queued behind the owner's work: not read until answered
        loop = srv.loop
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(lambda: self._after_queue(f, own)))

    def _then(self, rsp: bytes, wire_ns: int) -> None:
        """Inside the TPM job (the loop's thread, or the owner's): the answer goes out first,
        then the accounting."""
        data = P.mssim_response(rsp) if self.mssim else rsp
        sent = self.try_send(data)  # not send(): this may be the owner's thread, not the loop's
        if sent < 0:
            self.gone_n = len(rsp)
        elif sent < len(data):
            self.out = data[sent:]  # the loop sends the rest (_finished)
        srv = self.srv
        assert self.client is not None
        for note in srv.accounts.record(self.client, self.cmd, rsp, wire_ns):
            kind = getattr(note, "kind", LineKind.FOREIGN)
            if isinstance(note, LockoutLine):
                srv.peer_log("refused in lockout", note, kind)
            else:
                srv.log(note, kind)

    def _after_queue(self, fut: Any, own: bool) -> None:
        self._finished(fut, own)
        if not self.closed and not self.busy:
            self.resume()

    def _finished(self, fut: Any, own: bool) -> None:
        """On the loop: the command is answered (or failed) and accounted."""
        srv, client = self.srv, self.client
        assert client is not None
        self.busy = False
        e = fut.exception()
        if srv.turns is not None:
            srv.turns.done(client)
        self.session.answered(client)
        if e is None and srv.accounts.verify_due is not None:
            reconcile.after_flush(srv)  # a Clear or the like: what is still loaded, the TPM says
        if e is not None:
            self.session.faults.tpm_failed(self, client, e, own)
        elif self.gone_n:
            self.gone(self.gone_n)
        elif self.out:
            self._want(WRITE)
        if srv.turns is not None:
            self.session.pump.pump()

    def answer(self, rsp: bytes) -> None:
        """A response of the proxy's own (a TPM it cannot reach, a turn that did not come)."""
        if not self.send(P.mssim_response(rsp) if self.mssim else rsp):
            self.close()

    # -- its end ---------------------------------------------------------------------------------
    def _who(self) -> str:
        c = self.client
        return f"client {c.id} {c.name} (pid {c.peer.pid})" if c is not None else "a client"

    def broken(self, why: str) -> None:
        if self.client is not None:
            self.client.dropped = why
        self.srv.dropped += 1
        self.srv.peer_log("framing errors", f"{self._who()}: {why}; connection closed", LineKind.DROPPED)
        self.close()

    def idle(self) -> None:
        if self.client is not None:
            self.srv.peer_log("idle", f"{self._who()}: idle for {self.srv.idle_timeout:g} s; connection closed",
                              LineKind.DROPPED)
        self.close()

    def gone(self, n: int) -> None:
        self.srv.peer_log("gone before the answer", f"{self._who()}: went away before its response ({n} bytes, "
                                                    "read from the TPM and dropped); connection closed",
                          LineKind.DROPPED)
        self.close()

    def closed_now(self) -> None:
        if self.client is not None:
            self.session.departures.closed(self.client)


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
