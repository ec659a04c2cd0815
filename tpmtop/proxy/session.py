"""A client's session on the TPM port and the control/platform port (a part of
:class:`~tpmtop.proxy.server.ProxyServer`): framing, its turn, the exchange with the TPM,
the answer. Layer: proxy; no Textual."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpmtop.proxy import peers
from tpmtop.proxy import protocol as P
from tpmtop.proxy.accounting import ClientStats
from tpmtop.proxy.forward import forward
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.parking import BUSY_WORKERS, PARK_AFTER_S
from tpmtop.proxy.serving import TPM_RC_FAILURE, TPM_RC_RETRY, Serving, error_response
from tpmtop.proxy.state import ServerState
from tpmtop.proxy.turns import TurnTimeout
from tpmtop.tpm.busypoll import RequestPoll

if TYPE_CHECKING:
    from tpmtop.tpm.owner import DoneJob, Job
    from tpmtop.tpm.transport import InstrumentedTransport


class Session(ServerState):
    """ProxyServer's per-connection handlers; state lives in ProxyServer.__init__."""

    # -- the TPM port ---------------------------------------------------------------------------
    def _attach(self, sock: socket.socket) -> ClientStats:
        if sock.family == socket.AF_UNIX:
            peer = peers.unix_peer(sock)
        else:  # the accept loop's sock_diag look-up, not a second one
            with self._lock:
                owner = self._conns.get(sock)
            peer = self.resolver.resolve(sock, owner)
        known = peer.pid is not None
        before = self.accounts._next
        c = self.accounts.client_for(peer, self.protocol, shared_key=known)
        if c.id >= before:  # a new client
            # Processes that have exited depart first, before this one's commands count: a
            # script's next tool cannot change what the previous one is reported to leave.
            self._reap_exited()
            if known:
                self._watch_exit(c)
            who = f"pid {peer.pid}" if known else "pid unknown"
            self.log(f"client {c.id} connected: {peer.name} ({who}, uid {peer.uid if peer.uid is not None else '?'})"
                     f"{': ' + _short(peer.cmdline) if peer.cmdline and peer.cmdline != peer.name else ''}")
        return c

    def _data_handler(self, unix: bool = False) -> Callable[[socket.socket], bool]:
        mssim = self.protocol == "mssim" and not unix

        def handle(sock: socket.socket) -> bool:
            return _DataConn(self, sock, mssim).run()

        return handle

    def _wait_s(self) -> float:
        """How long a connection's thread waits for a request before the connection is parked
        (or, with an idle time-out as short, closed)."""
        return min(self.idle_timeout, PARK_AFTER_S)

    def _park(self, sock: socket.socket, on_ready: Callable[[], None], on_idle: Callable[[], None]) -> bool:
        if self.idle_timeout <= PARK_AFTER_S or self.parking is None:
            return False
        return self.parking.park(sock, on_ready, on_idle, self.idle_timeout - PARK_AFTER_S)

    def _command(self, sock: socket.socket, client: ClientStats, cmd: bytes, mssim: bool) -> Job | DoneJob | None:
        """One whole command of ``client``: its turn first (a raw TPM), then the TPM."""
        if self.failed or self.recovering:
            self._answer(sock, client, error_response(TPM_RC_FAILURE if self.failed else TPM_RC_RETRY), mssim)
            return None
        if self.turns is not None:
            try:
                waited = self.turns.acquire(client)
            except TurnTimeout as e:
                self.peer_log("turn time-outs", f"client {client.id} {client.name} (pid {client.peer.pid}): {e}; "
                         f"answered TPM_RC_RETRY", LineKind.FAULT)
                self._answer(sock, client, error_response(TPM_RC_RETRY), mssim)
                return None
            if waited:
                client.waits.record(waited)
            fut = self._exchange(sock, client, cmd, mssim)
            turns = self.turns  # set once in start(), before any connection is served
            fut.add_done_callback(lambda f: turns.done(client))
            return fut
        return self._exchange(sock, client, cmd, mssim)

    def _answer(self, sock: socket.socket, client: ClientStats, rsp: bytes, mssim: bool) -> None:
        try:
            sock.sendall(P.mssim_response(rsp) if mssim else rsp)
        except OSError:
            _shutdown(sock)

    def _exchange(self, sock: socket.socket, client: ClientStats, cmd: bytes, mssim: bool) -> Job | DoneJob:
        """Queue one whole command for the TPM; its job answers the client (never blocking the
        TPM's owner: a client whose buffer is full gets the rest from a helper thread)."""

        def then(rsp: bytes, wire_ns: int) -> None:  # on the TPM's owner thread
            data = P.mssim_response(rsp) if mssim else rsp
            try:
                sent = sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = -1
            if 0 <= sent < len(data):
                threading.Thread(target=self._send_rest, args=(sock, client, data[sent:]), daemon=True).start()
            for note in self.accounts.record(client, cmd, rsp, wire_ns):
                self.log(note, getattr(note, "kind", LineKind.FOREIGN))
            if sent < 0:
                self._went_away(sock, client, len(rsp))

        with self._lock:
            client.inflight += 1
        per_client = self._transport_for(client)
        if per_client is None:
            fut = forward(self.conn, client.id, cmd, then)
        else:
            transport, lock = per_client
            with lock:  # one command at a time on a client's own upstream
                fut = forward(self.conn, client.id, cmd, then, transport)
        fut.add_done_callback(lambda f: self._tpm_failed(sock, client, f, mssim, per_client is not None))
        fut.add_done_callback(lambda f: self._answered(client))
        return fut

    def _answered(self, client: ClientStats) -> None:
        """A command of ``client`` is answered and accounted: if its process has exited
        meanwhile (it got the answer and left), it departs now, its last command counted."""
        with self._lock:
            client.inflight -= 1
            last = client.inflight <= 0 and client.exited
        if last:
            self._depart(client)

    def _send_rest(self, sock: socket.socket, client: ClientStats, rest: bytes) -> None:
        try:
            sock.settimeout(None)
            P.set_idle_timeout(sock, 0.0)  # 0: no bound, the rest goes out as long as it takes
            sock.sendall(rest)
        except OSError:
            self._went_away(sock, client, len(rest))

    def _went_away(self, sock: socket.socket, client: ClientStats, n: int) -> None:
        self.peer_log("gone before the answer",
                      f"client {client.id} {client.name} (pid {client.peer.pid}): went away before its response "
                 f"({n} bytes, read from the TPM and dropped); connection closed", LineKind.DROPPED)
        _shutdown(sock)

    def _transport_for(self, client: ClientStats) -> tuple[InstrumentedTransport, threading.Lock] | None:
        """None: the shared connection (through its owner thread); over a resource manager the
        client's own upstream (its /dev/tpmrm0 descriptor, its tpm2-abrmd connection),
        reporting to the same recorder."""
        if self.serving is not Serving.PER_CLIENT:
            return None
        t = self._client_transports.get(client.id)
        if t is None:
            from tpmtop.tpm.transport import DeviceBackend, InstrumentedTransport, TctiLdrBackend

            target = self.conn.target
            timeout = getattr(self.conn, "timeout", 120.0)
            backend = (DeviceBackend(target.device_path, timeout) if target.device_path
                       else TctiLdrBackend(target.kind, target.conf, timeout))
            t = self._client_transports[client.id] = (InstrumentedTransport(backend, self.conn.recorder),
                                                      threading.Lock())
        return t

    # -- control / platform port --------------------------------------------------------------
    def _side_handler(self, protocol: str | None = None) -> Callable[[socket.socket], bool]:
        swtpm = (protocol or self.protocol) == "swtpm"

        def handle(sock: socket.socket) -> bool:
            return _SideConn(self, sock, swtpm).run()

        return handle


class _DataConn:
    """One connection on the TPM port, served on a worker thread while it has something to
    say, parked (no thread) while it is silent (:mod:`.parking`)."""

    __slots__ = ("client", "mssim", "next_request", "pending", "sock", "srv")

    def __init__(self, srv: Session, sock: socket.socket, mssim: bool):
        self.srv, self.sock, self.mssim = srv, sock, mssim
        self.client: ClientStats | None = None
        self.pending: Any = None  # the job of the client's last command
        self.next_request: RequestPoll | None = None

    def run(self) -> bool:
        """Serve until the connection ends (False: the caller closes it) or is parked (True)."""
        srv, sock, mssim = self.srv, self.sock, self.mssim
        done = True
        try:
            if self.client is None:
                P.set_idle_timeout(sock, srv._wait_s())
                # Name the peer as soon as it sends its first byte, while it is surely alive (a
                # client killed mid-command must still be named); a connection closed without
                # a byte (the swtpm TCTI's start-up probe) costs no look-up.
                try:
                    # many threads busy already (a burst of connections): wait in parking at once
                    flags = socket.MSG_PEEK | (socket.MSG_DONTWAIT if srv._workers > BUSY_WORKERS else 0)
                    if not sock.recv(1, flags):
                        return False
                except (BlockingIOError, TimeoutError):
                    done = not srv._park(sock, self.resume, self.idle)
                    return not done
                except OSError:
                    return False
                self.client = srv._attach(sock)
                if mssim:
                    self.client.locality = 0
                # mssim clients keep their connection; most raw ones (tpm2-tss's swtpm: TCTI)
                # send one command per connection, and polling for their close competes with
                # the next connection's thread: a raw connection polls from its third request
                self.next_request = RequestPoll(skip=0 if mssim else 1)
            client = self.client
            while True:
                try:
                    if mssim:
                        code, locality, cmd = P.read_mssim_request(sock, self.next_request)
                        if cmd is None:
                            if code == P.MS_SIM_REMOTE_HANDSHAKE:
                                sock.sendall(P.mssim_handshake_answer())
                                continue
                            return False  # SESSION_END / STOP: the client is done with this connection
                    else:
                        cmd = P.read_raw_command(sock, self.next_request)
                except P.Closed:
                    return False
                except P.Idle:
                    done = not srv._park(sock, self.resume, self.idle)
                    if done:
                        self._idle_line()
                    return not done
                except P.FrameError as e:
                    client.dropped = str(e)
                    srv.dropped += 1
                    srv.peer_log("framing errors",
                                 f"client {client.id} {client.name} (pid {client.peer.pid}): {e}; connection closed",
                                 LineKind.DROPPED)
                    return False
                if mssim:
                    client.locality = locality
                self.pending = srv._command(sock, client, cmd, mssim)
        finally:
            if done:
                self._finish()

    def _idle_line(self) -> None:
        c = self.client
        if c is not None:
            self.srv.peer_log("idle", f"client {c.id} {c.name} (pid {c.peer.pid}): idle for "
                                      f"{self.srv.idle_timeout:g} s; connection closed", LineKind.DROPPED)

    def _finish(self) -> None:
        if self.pending is not None:
            try:  # its accounting (and leak report) must include the last command
                self.pending.result()
            except Exception:
                pass
        if self.client is not None:
            self.srv._closed(self.client)

    def resume(self) -> None:
        """On a worker: the parked connection has something to read (or has ended)."""
        _resume(self.srv, self.sock, self.run)

    def idle(self) -> None:
        """On a worker: parked and silent for the idle time-out."""
        self._idle_line()
        self._finish()
        self.srv._end_connection(self.sock)


class _SideConn:
    """One connection on the control (swtpm) or platform (mssim) port; parked when silent."""

    __slots__ = ("sock", "srv", "state", "swtpm")

    def __init__(self, srv: Session, sock: socket.socket, swtpm: bool):
        self.srv, self.sock, self.swtpm = srv, sock, swtpm
        self.state: dict[str, Any] = {}

    def run(self) -> bool:
        srv, sock, swtpm, state = self.srv, self.sock, self.swtpm, self.state
        try:
            P.set_idle_timeout(sock, srv._wait_s())
            while True:
                got = P.answer_control(sock, state) if swtpm else P.answer_platform(sock)
                if got is None:
                    return False
                code, answer = got
                if answer:
                    sock.sendall(answer)
                if not swtpm and code == P.MS_SIM_SESSION_END:
                    return False
                if swtpm and state.get("refused"):
                    # its payload's length is unknown: reading on would take the payload
                    # for more requests. The answer is sent, the rest read and dropped
                    # (closing with unread bytes would reset the connection under the answer).
                    _drain_and_close(sock)
                    return False
        except P.Idle:
            return srv._park(sock, self.resume, self.idle)
        except (P.FrameError, OSError) as e:
            srv.peer_log("control errors", f"{'control' if swtpm else 'platform'} connection: {e}; connection closed",
                         LineKind.DROPPED)
            return False

    def resume(self) -> None:
        _resume(self.srv, self.sock, self.run)

    def idle(self) -> None:
        self.srv._end_connection(self.sock)


def _resume(srv: Session, sock: socket.socket, run: Callable[[], bool]) -> None:
    """A parked connection (a client's, or a control/platform one) read again on a worker: its
    handler runs on; the connection ends when the handler says so or fails."""
    try:
        kept = run()
    except Exception as e:  # a bug must cost one connection, not the proxy
        srv.peer_log("handler failures", f"connection handler failed: {type(e).__name__}: {e}; "
                                         "connection closed", LineKind.FAULT)
        kept = False
    if not kept:
        srv._end_connection(sock)


def _drain_and_close(sock: socket.socket, limit: int = 65536) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(1.0)
        n = 0
        while n < limit:
            chunk = sock.recv(4096)
            if not chunk:
                break
            n += len(chunk)
    except OSError:
        pass


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the connection's thread sees the end and cleans up
    except OSError:
        pass


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
