"""Listeners and per-connection threads of ``tpmtop proxy``.

One thread per connection: a client blocked on the TPM must not hold up the others' framing,
and the backend stream stays in step because every command goes through the transport's lock
whole (read completely from the client first, then forwarded, then answered). A client that
breaks the framing loses only its own connection, with one logged line.
"""

from __future__ import annotations

import errno
import os
import queue
import socket
import stat
import threading
import time
from typing import Callable

from tpmtop.errors import TpmConnectionError, TpmtopError, UsageError
from tpmtop.textsafe import safe
from tpmtop.proxy import access, peers, protocol as P
from tpmtop.proxy.accounting import Accounts, ClientStats
from tpmtop.proxy.forward import forward

REAP_INTERVAL_S = 0.25
LISTEN_BACKLOG = 128


def _listen_tcp(host: str, port: int, base: int | None = None) -> socket.socket:
    """A listening TCP socket; ``base``: the proxy's port P when this is P+1 (for the message)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        s.close()
        if e.errno == errno.EADDRINUSE:
            p = port if base is None else base
            raise UsageError(f"port {port} on {host} is already in use (the proxy needs {p} and {p + 1})") from None
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    s.listen(LISTEN_BACKLOG)
    return s


def _refuse_existing(path: str) -> None:
    """Whatever is at ``path`` was not made by this process: never unlinked, never replaced
    (a live proxy's socket, a stale one, or a file that happens to have that name)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"cannot listen on {path}: {e.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise UsageError(f"{path} exists and is not a socket: refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        live = True
    except OSError:
        live = False
    finally:
        probe.close()
    if live:
        raise UsageError(f"{path} is in use (another program listens on it): refusing to replace it")
    raise UsageError(f"{path} exists (a socket nobody listens on, perhaps left by an earlier run): "
                     f"refusing to replace it; remove it first")


def _listen_unix(path: str, mode: int = 0o600, gid: int | None = None) -> tuple[socket.socket, tuple[int, int]]:
    """A listening Unix socket at ``path`` (which must not exist) and the (device, inode) of
    the file it created: only that file is ever removed again (:func:`_unlink_own`).

    Created under umask 0177 (mode 0600 from the first instant, not chmod-ed after), then
    given ``mode``/``gid``; every connection's peer is checked anyway (:mod:`.access`)."""
    _refuse_existing(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(path)
    except OSError as e:
        s.close()
        if e.errno == errno.EADDRINUSE:  # created by someone else since the check above
            raise UsageError(f"{path} exists: refusing to replace it") from None
        raise UsageError(f"cannot listen on {path}: {e.strerror}") from None
    finally:
        os.umask(old)
    st = os.lstat(path)
    ident = (st.st_dev, st.st_ino)
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError as e:
        s.close()
        _unlink_own(path, ident)
        raise UsageError(f"cannot set the mode of {path}: {e.strerror}") from None
    s.listen(LISTEN_BACKLOG)
    return s, ident


def _unlink_own(path: str, ident: tuple[int, int]) -> None:
    """Remove ``path`` only if it is still the socket this process bound there."""
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == ident and stat.S_ISSOCK(st.st_mode):
            os.unlink(path)
    except OSError:
        pass


class ProxyServer:
    """Serve ``conn``'s TPM to other programs over ``protocol`` ("swtpm" or "mssim")."""

    def __init__(self, conn, *, protocol: str = "swtpm", host: str = "127.0.0.1", port: int = 2321,
                 socket_path: str | None = None, log: Callable[[str], None] = print,
                 accounts: Accounts | None = None, socket_mode: int = 0o600, socket_gid: int | None = None,
                 policy: access.AccessPolicy | None = None):
        if protocol not in ("swtpm", "mssim"):
            raise UsageError(f"unknown protocol {protocol!r}: use swtpm or mssim")
        self.conn = conn
        self.protocol = protocol
        self.host, self.port, self.socket_path = host, port, socket_path
        self.socket_mode, self.socket_gid = socket_mode, socket_gid
        # closed by default: this uid and root (access.AccessPolicy says why)
        self.policy = policy or access.AccessPolicy.default()
        self.refused = 0
        self._own_paths: list[tuple[str, tuple[int, int]]] = []  # sockets this process bound
        self._bound: list | None = None  # (listening socket, role) once listen() ran
        # Every line carries other processes' names and command lines (a client can set its
        # comm to an escape sequence): made terminal-safe here, once, for stderr and the dashboard.
        self.log = lambda text: log(safe(text))
        self.accounts = accounts or Accounts()
        self.resolver = peers.TcpResolver()
        self._listeners: list[socket.socket] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0
        self.dropped = 0
        # /dev/tpmrm0: one file descriptor per client, so the kernel's resource manager keeps
        # clients' transient objects apart exactly as without the proxy (set again at start:
        # the connection may be given after listen()).
        self.per_client_device = bool(getattr(conn, "is_kernel_rm", False))
        self._client_transports: dict[int, object] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def listen(self) -> "ProxyServer":
        """Bind every listener (ports, socket paths) without serving yet: a busy port or a taken
        path is refused (UsageError) before a TPM is opened; a refused start removes nothing."""
        if self._bound is not None:
            return self
        bound: list = []
        try:
            if self.port is not None:
                data, side = self._listen_pair()
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

    def start(self) -> "ProxyServer":
        self.listen()
        if self.conn is None:
            raise TypeError("ProxyServer.start() needs a TPM connection")
        self.per_client_device = bool(getattr(self.conn, "is_kernel_rm", False))
        try:
            handlers = {"data": self._data_handler(), "side": self._side_handler(),
                        "unix": self._data_handler(unix=True), "unix-ctrl": self._side_handler("swtpm")}
            for lsock, role in self._bound:
                self._serve(lsock, handlers[role])
        except BaseException:
            self.stop()
            raise
        t = threading.Thread(target=self._reaper, name="proxy-reaper", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _unlink_own_paths(self) -> None:
        for p, ident in self._own_paths:  # only what this process created, still as it made it
            _unlink_own(p, ident)
        self._own_paths.clear()

    def _listen_pair(self) -> tuple[socket.socket, socket.socket]:
        if self.port:
            data = _listen_tcp(self.host, self.port)
            try:
                return data, _listen_tcp(self.host, self.port + 1, base=self.port)
            except BaseException:
                data.close()
                raise
        for _ in range(100):  # port 0: any free pair P, P+1 (the TCTIs derive the second port)
            data = _listen_tcp(self.host, 0)
            p = data.getsockname()[1]
            if p < 65535:
                try:
                    return data, _listen_tcp(self.host, p + 1, base=p)
                except UsageError:
                    pass
            data.close()
        raise TpmtopError("no free pair of TCP ports for the proxy")

    @property
    def bound_port(self) -> int | None:
        for s in self._listeners:
            if s.family in (socket.AF_INET, socket.AF_INET6):
                return s.getsockname()[1]
        return None

    def sharing_note(self) -> str:
        if self.per_client_device:
            return ("each client gets its own /dev/tpmrm0 file descriptor: the kernel's resource manager "
                    "keeps their transient objects apart (sessions are not virtualised)")
        return ("clients share one TPM connection: they see and can flush each other's transient objects "
                "and sessions, and a client's leak fills the TPM's slots for everyone")

    def _serve(self, lsock: socket.socket, handler) -> None:
        t = threading.Thread(target=self._accept_loop, args=(lsock, handler), daemon=True,
                             name=f"proxy-accept-{lsock.getsockname()}")
        t.start()
        self._threads.append(t)

    def stop(self) -> list[ClientStats]:
        """Close everything; every client still known departs (its leak report is returned).
        Idempotent: a second call returns []."""
        if self._stopped:
            return []
        self._stopped = True
        self._stop.set()
        for s in self._listeners:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2)
        self._unlink_own_paths()
        owner = getattr(self.conn, "owner", None)
        if owner is not None:  # clients' jobs still queued are counted before anyone departs
            try:
                owner.call(lambda: None, timeout=30)
            except Exception:
                pass
        departed = []
        for c in self.accounts.snapshot():
            if c.departed_ns is None and c.id != 0:
                self._depart(c)
                departed.append(c)
        for t in self._client_transports.values():
            t.close()
        return departed

    # -- accepting ------------------------------------------------------------------------------
    def _accept_loop(self, lsock: socket.socket, handler) -> None:
        while not self._stop.is_set():
            try:
                sock, _addr = lsock.accept()
            except OSError:
                return
            uid, pid = access.peer_uid(sock)
            if not self.policy.allows(uid):
                self._refuse(sock, uid, pid)
                continue
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(sock)
                idle = self._idle > 0
                if idle:
                    self._idle -= 1
            self._work.put((sock, handler))
            if not idle:
                # Starting a thread costs ~100 µs; the swtpm TCTI connects for every command,
                # so finished connection threads wait for the next one instead of exiting.
                threading.Thread(target=self._worker, daemon=True, name="proxy-conn").start()

    def _refuse(self, sock: socket.socket, uid: int | None, pid: int | None) -> None:
        """A peer the policy does not let in: one line, and the connection closed before a byte
        of it is read. A peer already gone whose uid could not be read (a client's empty
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
            where = "a Unix socket" if sock.family == socket.AF_UNIX else "TCP"
            self.log(f"refused a connection on {where} from {access.user_text(uid)}"
                     f"{f' pid {pid}' if pid else ''}: only {self.policy.describe()} may use this TPM "
                     f"(--allow-user / --allow-group let more in); connection closed")
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sock, handler = item
            try:
                handler(sock)
            except Exception as e:  # a bug must cost one connection, not the proxy
                self.log(f"connection handler failed: {type(e).__name__}: {e}; connection closed")
            finally:
                with self._lock:
                    self._conns.discard(sock)
                    self._idle += 1
                try:
                    sock.close()
                except OSError:
                    pass

    # -- the TPM port ---------------------------------------------------------------------------
    def _attach(self, sock: socket.socket) -> ClientStats:
        peer = peers.unix_peer(sock) if sock.family == socket.AF_UNIX else self.resolver.resolve(sock)
        known = peer.pid is not None
        before = len(self.accounts.clients)
        c = self.accounts.client_for(peer, self.protocol, shared_key=known)
        if len(self.accounts.clients) != before:
            who = f"pid {peer.pid}" if known else "pid unknown"
            self.log(f"client {c.id} connected: {peer.name} ({who}, uid {peer.uid if peer.uid is not None else '?'})"
                     f"{': ' + _short(peer.cmdline) if peer.cmdline and peer.cmdline != peer.name else ''}")
        return c

    def _data_handler(self, unix: bool = False):
        mssim = self.protocol == "mssim" and not unix

        def handle(sock: socket.socket) -> None:
            client: ClientStats | None = None
            pending = None  # the job of the client's last command
            try:
                # Name the peer as soon as it sends its first byte, while it is surely alive (a
                # client killed mid-command must still be named); a connection closed without
                # a byte (the swtpm TCTI's start-up probe) costs no look-up.
                try:
                    if not sock.recv(1, socket.MSG_PEEK):
                        return
                except OSError:
                    return
                client = self._attach(sock)
                if mssim:
                    client.locality = 0
                while True:
                    try:
                        if mssim:
                            code, locality, cmd = P.read_mssim_request(sock)
                            if cmd is None:
                                if code == P.MS_SIM_REMOTE_HANDSHAKE:
                                    sock.sendall(P.mssim_handshake_answer())
                                    continue
                                return  # SESSION_END / STOP: the client is done with this connection
                        else:
                            cmd = P.read_raw_command(sock)
                    except P.Closed:
                        return
                    except P.FrameError as e:
                        client.dropped = str(e)
                        self.dropped += 1
                        self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): {e}; connection closed")
                        return
                    if mssim:
                        client.locality = locality
                    pending = self._exchange(sock, client, cmd, mssim)
            finally:
                if pending is not None:
                    try:  # its accounting (and leak report) must include the last command
                        pending.result()
                    except Exception:
                        pass
                if client is not None:
                    self._closed(client)

        return handle

    def _exchange(self, sock: socket.socket, client: ClientStats, cmd: bytes, mssim: bool):
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
            self.accounts.record(client, cmd, rsp, wire_ns)
            if sent < 0:
                self._went_away(sock, client, len(rsp))

        fut = forward(self.conn, client.id, cmd, then, self._transport_for(client))
        fut.add_done_callback(lambda f: self._tpm_failed(sock, client, f))
        return fut

    def _send_rest(self, sock: socket.socket, client: ClientStats, rest: bytes) -> None:
        try:
            sock.sendall(rest)
        except OSError:
            self._went_away(sock, client, len(rest))

    def _went_away(self, sock: socket.socket, client: ClientStats, n: int) -> None:
        self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): went away before its response "
                 f"({n} bytes, read from the TPM and dropped); connection closed")
        _shutdown(sock)

    def _tpm_failed(self, sock: socket.socket, client: ClientStats, fut) -> None:
        e = fut.exception()
        if e is not None:
            self.log(f"client {client.id} {client.name}: the TPM failed ({e}); connection closed")
            _shutdown(sock)

    def _transport_for(self, client: ClientStats):
        """None: the shared connection (through its owner thread); with /dev/tpmrm0 the
        client's own descriptor, reporting to the same recorder."""
        if not self.per_client_device:
            return None
        t = self._client_transports.get(client.id)
        if t is None:
            from tpmtop.tpm.transport import DeviceBackend, InstrumentedTransport

            t = self._client_transports[client.id] = InstrumentedTransport(
                DeviceBackend(self.conn.target.device_path), self.conn.recorder)
        return t

    # -- control / platform port --------------------------------------------------------------
    def _side_handler(self, protocol: str | None = None):
        swtpm = (protocol or self.protocol) == "swtpm"

        def handle(sock: socket.socket) -> None:
            state: dict = {}
            try:
                while True:
                    got = P.answer_control(sock, state) if swtpm else P.answer_platform(sock)
                    if got is None:
                        return
                    code, answer = got
                    if answer:
                        sock.sendall(answer)
                    if not swtpm and code == P.MS_SIM_SESSION_END:
                        return
            except (P.FrameError, OSError) as e:
                self.log(f"{'control' if swtpm else 'platform'} connection: {e}; connection closed")

        return handle

    # -- departures -----------------------------------------------------------------------------
    def _closed(self, c: ClientStats) -> None:
        self.accounts.connection_closed(c)
        # A client without a pid is one connection: it has left. Otherwise the reaper looks
        # (the swtpm TCTI closes after every command; asking psutil here would cost every
        # command ~100 µs of the GIL).
        if c.open_connections <= 0 and c.peer.pid is None:
            self._depart(c)

    def _reaper(self) -> None:
        # swtpm's TCTI closes its connection after every command: a client has left when its
        # process has, which is only seen by looking.
        while not self._stop.wait(REAP_INTERVAL_S):
            for c in self.accounts.snapshot():
                try:
                    if c.id != 0 and c.departed_ns is None and c.open_connections <= 0 and not peers.alive(c.peer):
                        self._depart(c)
                except Exception as e:  # the reaper must outlive any one client's trouble
                    self.log(f"client {c.id}: departure check failed: {type(e).__name__}: {e}")

    def _depart(self, c: ClientStats) -> None:
        if c.departed_ns is not None:
            return
        leaked = self.accounts.depart(c)
        t = self._client_transports.pop(c.id, None)
        if t is not None:
            t.close()  # closing its /dev/tpmrm0 fd makes the kernel flush what it left
        head = f"client {c.id} {c.name} (pid {c.peer.pid}) left: {c.commands} commands, {c.errors} errors"
        if leaked:
            self.log(f"{head}; LEAK: left {len(leaked)} handle(s) behind: " + ", ".join(h.text() for h in leaked))
        else:
            self.log(f"{head}; left nothing loaded")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the connection's thread sees the end and cleans up
    except OSError:
        pass


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"

