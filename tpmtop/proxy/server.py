"""Listeners and connection threads of ``tpmtop proxy``.

A connection is served by a thread from a small pool while it is open: a client blocked on
the TPM (or waiting for its turn) must not hold up the others' framing, and the backend
stream stays in step because every command is read whole from its client, then forwarded as
one job, then answered. A client that breaks the framing loses only its own connection, with
one logged line. Threads are bounded: at most ``max_connections`` connections are open (more
are refused with a line), a connection idle for ``idle_timeout`` seconds is closed, and a
thread whose connection closed waits briefly for the next one (the swtpm TCTI connects for
every command) and exits, keeping at most MAX_IDLE_WORKERS. The thread that accepts a
connection serves it and passes the accepting on to an idle thread (no hand-over on the
path of a command).

How clients share the TPM (:class:`Serving`): over a resource-managed TPM (/dev/tpmrm0,
tpm2-abrmd) every client gets its own upstream connection; over a raw one clients take turns
(:mod:`.turns`), or, with ``--interleave``, share it command by command.
"""

from __future__ import annotations

import enum
import errno
import os
import queue
import random
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tpmtop.errors import TpmConnectionError, TpmtopError, UsageError
from tpmtop.proxy import access, peers
from tpmtop.proxy import protocol as P
from tpmtop.proxy.accounting import Accounts, ClientStats
from tpmtop.proxy.forward import forward
from tpmtop.proxy.lines import LineKind, ProxyLine
from tpmtop.proxy.turns import Turns, TurnTimeout
from tpmtop.textsafe import safe
from tpmtop.tpm.busypoll import RequestPoll
from tpmtop.tpm.tcti import TargetKind

if TYPE_CHECKING:
    from tpmtop.tpm.transport import InstrumentedTransport

REAP_INTERVAL_S = 0.25  # the fallback departure check (where pidfds are not available)
LISTEN_BACKLOG = 128
MAX_CONNECTIONS = 1024  # open client connections (each has a thread while open)
IDLE_TIMEOUT_S = 600.0  # a connection that sends nothing this long is closed
MAX_IDLE_WORKERS = 8  # threads kept waiting for the next connection
WORKER_LINGER_S = 2.0  # how long one waits before it exits
# A raw TPM's turn passes on after its holder was idle this long while others wait (turns.py).
# Generous: a departure is seen at once (pidfd), so this only matters for a client that stays
# alive between commands — and a tool descheduled for a moment on a loaded machine must not
# lose its turn in the middle of its work (0.25 s did: 1 worker in 8 failed with 0x902).
TURN_IDLE_S = 2.0
RECOVER_GIVE_UP_MIN_S = 5.0  # a TPM unreachable for max(this, --timeout) seconds is gone
TPM_RC_RETRY = 0x922  # the TPM is busy: try again (tpm2-tss's ESAPI retries by itself)
TPM_RC_FAILURE = 0x101  # the TPM is in failure mode (here: it is gone)


class Serving(enum.Enum):
    """How clients share the TPM behind the proxy."""

    PER_CLIENT = "per-client"  # a resource-managed TPM: one upstream connection per client
    TURNS = "turns"  # a raw TPM: one client at a time, the others queue
    INTERLEAVE = "interleave"  # a raw TPM shared command by command (--interleave)


def error_response(rc: int) -> bytes:
    """A TPM response carrying only ``rc`` (what the proxy answers for a TPM it cannot reach)."""
    return struct.pack(">HII", 0x8001, 10, rc)


PAIR_TRIES = 500  # ports from bind(0) whose neighbours are tried for a pair (_listen_pair)
BELOW_EPHEMERAL_FROM = 10_000  # the lowest port of a pair taken below the ephemeral range


def ephemeral_low() -> int:
    """The first port of the range the kernel hands out to bind(0) and connect()."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


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


def _pair_at(host: str, p: int) -> tuple[socket.socket, socket.socket] | None:
    """Listening sockets on P and P+1, or None if either is taken (nothing left open)."""
    try:
        data = _listen_tcp(host, p)
    except UsageError:
        return None
    try:
        return data, _listen_tcp(host, p + 1, base=p)
    except UsageError:
        data.close()
        return None


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
                 policy: access.AccessPolicy | None = None, interleave: bool = False,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT_S,
                 turn_idle: float = TURN_IDLE_S):
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
        self.refused = 0
        self.over_limit = 0
        self._own_paths: list[tuple[str, tuple[int, int]]] = []  # sockets this process bound
        self._bound: list[tuple[socket.socket, str]] | None = None  # (listening socket, role) once listen() ran
        # Every line carries other processes' names and command lines (a client can set its
        # comm to an escape sequence): made terminal-safe here, once, for stderr and the
        # dashboard; one line is one call under one lock (lines of two threads never glue).
        self._log_lock = threading.Lock()
        self._log_to = log

        self.accounts = accounts or Accounts()
        self.resolver = peers.TcpResolver()
        self._listeners: list[socket.socket] = []
        self._conns: dict[socket.socket, tuple[int, int] | None] = {}  # and the peer's (uid, inode)
        self._locals: dict[socket.socket, tuple | None] = {}  # a listener: its non-wildcard address
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._work: queue.SimpleQueue = queue.SimpleQueue()  # listeners to accept on, for idle threads
        self._idle = 0
        self._workers = 0
        self.dropped = 0
        self.serving = Serving.INTERLEAVE if interleave else Serving.TURNS
        self.turns: Turns | None = None
        # per-client upstreams (PER_CLIENT): client id -> (transport, lock)
        self._client_transports: dict[int, tuple[InstrumentedTransport, threading.Lock]] = {}
        self._pidfds: dict[int, tuple[int, ClientStats]] = {}  # pidfd -> client (departure watch)
        self._pidfd_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._last_limit_log = 0.0
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

    def start(self) -> ProxyServer:
        self.listen()
        if self.conn is None:
            raise TypeError("ProxyServer.start() needs a TPM connection")
        target = getattr(self.conn, "target", None)
        if bool(getattr(self.conn, "is_kernel_rm", False)) or getattr(target, "kind", None) == TargetKind.TABRMD:
            self.serving = Serving.PER_CLIENT
        elif self.serving is Serving.TURNS:
            wait = float(getattr(self.conn, "timeout", 120.0))
            self.turns = Turns(self.turn_idle, wait, on_queue=self._queued)
        try:
            handlers = {"data": self._data_handler(), "side": self._side_handler(),
                        "unix": self._data_handler(unix=True), "unix-ctrl": self._side_handler("swtpm")}
            for lsock, role in self._bound or ():  # listen() above bound them
                self._serve(lsock, handlers[role])
        except BaseException:
            self.stop()
            raise
        t = threading.Thread(target=self._reaper, name="proxy-reaper", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _queued(self, depth: int) -> None:
        if depth > self.accounts.queue_max:
            self.accounts.queue_max = depth

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
        # Port 0: any free pair P, P+1 (the TCTIs derive the second port). The kernel gives
        # bind(0) ports of one parity and outgoing connections the other, so both neighbours of
        # the port it gives are ports that connections use — and leave in TIME_WAIT for a
        # minute. A machine running a TCTI that connects once per command has thousands of
        # them (a stress run of the test suite once failed 100 tries of P+1 alone): both
        # neighbours are tried, PAIR_TRIES times.
        for _ in range(PAIR_TRIES):
            data = _listen_tcp(self.host, 0)
            q = data.getsockname()[1]
            if q < 65535:
                try:
                    return data, _listen_tcp(self.host, q + 1, base=q)
                except UsageError:
                    pass
            data.close()
            # q itself may be taken by someone else once closed: then the pair is not free
            if q > 1 and (pair := _pair_at(self.host, q - 1)) is not None:
                return pair
        # Every try failed: the ephemeral range is full (a benchmark through that TCTI makes
        # tens of thousands of connections a minute). Below it no outgoing connection takes a
        # port, only servers that chose theirs.
        low_end = ephemeral_low()
        for _ in range(PAIR_TRIES if low_end > BELOW_EPHEMERAL_FROM + 2 else 0):
            if (pair := _pair_at(self.host, random.randrange(BELOW_EPHEMERAL_FROM, low_end - 1))) is not None:
                return pair
        raise TpmtopError("no free pair of TCP ports for the proxy")

    @property
    def bound_port(self) -> int | None:
        for s in self._listeners:
            if s.family in (socket.AF_INET, socket.AF_INET6):
                return s.getsockname()[1]
        return None

    def sharing_note(self) -> str:
        if self.serving is Serving.PER_CLIENT:
            return ("each client gets its own upstream connection: the resource manager below "
                    "(the kernel's /dev/tpmrm0 or tpm2-abrmd) keeps their objects apart")
        if self.serving is Serving.INTERLEAVE:
            return ("--interleave: clients share one TPM connection command by command: they see and can flush "
                    "each other's objects and sessions, and together they can run the TPM out of object or "
                    "session slots (TPM_RC_OBJECT_MEMORY 0x902, TPM_RC_SESSION_MEMORY 0x903)")
        return (f"a raw TPM: clients take turns, one client (process) at a time as swtpm serves; a turn ends "
                f"when its client leaves or has been idle {self.turn_idle:g} s while others wait")

    def _serve(self, lsock: socket.socket, handler) -> None:
        with self._lock:
            self._workers += 1
        t = threading.Thread(target=self._worker, args=((lsock, handler),), daemon=True,
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
        if self.turns is not None:
            self.turns.close()
        for s in self._listeners:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        with self._lock:
            waiting = self._idle
        for _ in range(waiting):  # idle threads leave now, not after their linger
            self._work.put(None)
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
        for c in self.accounts.live():
            if c.id != 0:
                self._depart(c)
                departed.append(c)
        for transport, _lock in list(self._client_transports.values()):
            transport.close()
        self._client_transports.clear()
        with self._pidfd_lock:
            for fd in self._pidfds:
                os.close(fd)
            self._pidfds.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        return departed

    # -- accepting ------------------------------------------------------------------------------
    # The thread that accepts a connection serves it, and hands the accepting on to an idle
    # thread (leader/follower): the client's first bytes wait for no hand-over between threads,
    # which cost ~50 µs of a swtpm: TCTI command (that TCTI connects for every command). Each
    # listener has exactly one thread accepting on it at any time.
    def _admit(self, sock: socket.socket, peer: tuple | None = None, local: tuple | None = None) -> bool:
        """Is this connection served? A refused or over-limit one is closed here."""
        uid, pid, inode = access.peer_owner(sock, peer, local)
        if not self.policy.allows(uid):
            self._refuse(sock, uid, pid)
            return False
        with self._lock:
            full = len(self._conns) >= self.max_connections and self._open_locked() >= self.max_connections
            if not full:
                self._conns[sock] = (uid, inode) if uid is not None and inode is not None else None
        if full:
            self._over_limit(sock)
            return False
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return True

    def _open_locked(self) -> int:
        """The counted connections whose peer has not closed them. A closed one keeps its place
        until its thread reads the end, which on a loaded machine comes after the client's next
        connection: the swtpm: TCTI opens and closes a probe on each port, then connects for
        every command, so one client alone filled a limit of 2 and was refused. Asked only when
        the count is at the limit (one non-blocking peek per connection); a socket in
        ``_conns`` is still open, as its thread closes it only after removing it (under the lock)."""
        n = 0
        for sock in self._conns:
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    continue  # the peer closed it and nothing of it is left to serve
            except (BlockingIOError, InterruptedError):
                pass  # open, nothing pending
            except OSError:
                continue  # reset by the peer
            n += 1
        return n

    def _local_address(self, lsock: socket.socket) -> tuple | None:
        """The address every connection accepted on *lsock* has at our end: the listener's,
        unless it listens on a wildcard (then each connection's own is asked)."""
        try:
            return self._locals[lsock]
        except KeyError:
            pass
        local = None
        if lsock.family in (socket.AF_INET, socket.AF_INET6):
            addr = lsock.getsockname()[:2]
            if addr[0] not in ("0.0.0.0", "::"):
                local = addr
        self._locals[lsock] = local
        return local

    def _pass_on(self, task: tuple) -> None:
        """Give ``task`` (a listener to accept on) to an idle thread, or to a new one."""
        with self._lock:
            idle = self._idle > 0
            if idle:
                self._idle -= 1
            else:
                self._workers += 1
        self._work.put(task)
        if not idle:
            # Starting a thread costs ~100 µs; the swtpm TCTI connects for every command,
            # so a thread that finished its connection waits a little for the next task.
            threading.Thread(target=self._worker, daemon=True, name="proxy-conn").start()

    def _over_limit(self, sock: socket.socket) -> None:
        self.over_limit += 1
        now = time.monotonic()
        if now - self._last_limit_log >= 1.0:  # one line a second, with the count so far
            self._last_limit_log = now
            self.log(f"{self.max_connections} connections are open (the limit): connection refused "
                     f"({self.over_limit} so far)", LineKind.DROPPED)
        try:
            sock.close()
        except OSError:
            pass

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
            # the port too: a swtpm-TCTI client opens the TPM port and the control port, so one
            # refused program gives two lines, which should not look like a repeat
            where = "a Unix socket" if sock.family == socket.AF_UNIX else f"TCP port {sock.getsockname()[1]}"
            self.log(f"refused a connection on {where} from {access.user_text(uid)}"
                     f"{f' pid {pid}' if pid else ''}: only {self.policy.describe()} may use this TPM "
                     f"(--allow-user / --allow-group let more in); connection closed", LineKind.DROPPED)
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _worker(self, task: tuple | None = None) -> None:
        while True:
            if task is None:
                try:
                    task = self._work.get(timeout=WORKER_LINGER_S)
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # no task was handed to this thread: it leaves
                            self._idle -= 1
                            self._workers -= 1
                            return
                    continue  # one was: take it
                if task is None:  # the proxy stops
                    return
            lsock, handler = task
            task = None
            sock = None
            addr = local = None
            while sock is None and not self._stop.is_set():
                try:
                    sock, addr = lsock.accept()
                    local = self._local_address(lsock)
                except OSError:
                    break
            if sock is None:  # the listener is closed: the proxy stops
                with self._lock:
                    self._workers -= 1
                return
            # passed on first: the next thread wakes while this one looks the peer up
            self._pass_on((lsock, handler))
            try:
                if not self._admit(sock, addr, local):
                    sock = None
                else:
                    handler(sock)
            except Exception as e:  # a bug must cost one connection, not the proxy
                self.log(f"connection handler failed: {type(e).__name__}: {e}; connection closed", LineKind.FAULT)
            finally:
                with self._lock:
                    if sock is not None:
                        self._conns.pop(sock, None)
                    leave = self._idle >= MAX_IDLE_WORKERS or self._stop.is_set()
                    if leave:
                        self._workers -= 1
                    else:
                        self._idle += 1
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
            if leave:
                return

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

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

    def _data_handler(self, unix: bool = False):
        mssim = self.protocol == "mssim" and not unix

        def handle(sock: socket.socket) -> None:
            client: ClientStats | None = None
            pending = None  # the job of the client's last command
            try:
                P.set_idle_timeout(sock, self.idle_timeout)
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
                # mssim clients keep their connection; most raw ones (tpm2-tss's swtpm: TCTI)
                # send one command per connection, and polling for their close competes with
                # the next connection's thread: a raw connection polls from its third request
                next_request = RequestPoll(skip=0 if mssim else 1)
                while True:
                    try:
                        if mssim:
                            code, locality, cmd = P.read_mssim_request(sock, next_request)
                            if cmd is None:
                                if code == P.MS_SIM_REMOTE_HANDSHAKE:
                                    sock.sendall(P.mssim_handshake_answer())
                                    continue
                                return  # SESSION_END / STOP: the client is done with this connection
                        else:
                            cmd = P.read_raw_command(sock, next_request)
                    except P.Closed:
                        return
                    except P.Idle:
                        self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): idle for "
                                 f"{self.idle_timeout:g} s; connection closed", LineKind.DROPPED)
                        return
                    except P.FrameError as e:
                        client.dropped = str(e)
                        self.dropped += 1
                        self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): {e}; connection closed",
                                 LineKind.DROPPED)
                        return
                    if mssim:
                        client.locality = locality
                    pending = self._command(sock, client, cmd, mssim)
            finally:
                if pending is not None:
                    try:  # its accounting (and leak report) must include the last command
                        pending.result()
                    except Exception:
                        pass
                if client is not None:
                    self._closed(client)

        return handle

    def _command(self, sock: socket.socket, client: ClientStats, cmd: bytes, mssim: bool):
        """One whole command of ``client``: its turn first (a raw TPM), then the TPM."""
        if self.failed or self.recovering:
            self._answer(sock, client, error_response(TPM_RC_FAILURE if self.failed else TPM_RC_RETRY), mssim)
            return None
        if self.turns is not None:
            try:
                waited = self.turns.acquire(client)
            except TurnTimeout as e:
                self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): {e}; "
                         f"answered TPM_RC_RETRY", LineKind.FAULT)
                self._answer(sock, client, error_response(TPM_RC_RETRY), mssim)
                return None
            if waited:
                client.waits.record(waited)
            fut = self._exchange(sock, client, cmd, mssim)
            fut.add_done_callback(lambda f: self.turns.done(client))
            return fut
        return self._exchange(sock, client, cmd, mssim)

    def _answer(self, sock: socket.socket, client: ClientStats, rsp: bytes, mssim: bool) -> None:
        try:
            sock.sendall(P.mssim_response(rsp) if mssim else rsp)
        except OSError:
            _shutdown(sock)

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
            for note in self.accounts.record(client, cmd, rsp, wire_ns):
                self.log(note, getattr(note, "kind", LineKind.FOREIGN))  # a ProxyLine keeps its kind
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
        self.log(f"client {client.id} {client.name} (pid {client.peer.pid}): went away before its response "
                 f"({n} bytes, read from the TPM and dropped); connection closed", LineKind.DROPPED)
        _shutdown(sock)

    def _tpm_failed(self, sock: socket.socket, client: ClientStats, fut, mssim: bool, own: bool) -> None:
        e = fut.exception()
        if e is None:
            return
        if own or not isinstance(e, TpmConnectionError):
            self.log(f"client {client.id} {client.name}: the TPM failed ({e}); connection closed", LineKind.FAULT)
            _shutdown(sock)
            return
        # The shared upstream is lost (a dead or stalled TPM): this client is answered with a
        # response code, never left hanging, and the proxy tries to get the TPM back.
        self._answer(sock, client, error_response(TPM_RC_RETRY), mssim)
        self._recover(str(e))

    def _recover(self, why: str) -> None:
        if self.failed or not self._recover_lock.acquire(blocking=False):
            return
        self.recovering = True
        threading.Thread(target=self._recovery, args=(why,), daemon=True, name="proxy-recover").start()

    def _recovery(self, why: str) -> None:
        conn = self.conn
        private = getattr(conn, "sim", None) is not None
        self.log(f"the TPM was lost ({why}); "
                 + ("restarting the private swtpm" if private else "reconnecting")
                 + "; clients are answered TPM_RC_RETRY meanwhile", LineKind.FAULT)
        give_up = max(RECOVER_GIVE_UP_MIN_S, float(getattr(conn, "timeout", RECOVER_GIVE_UP_MIN_S)))
        deadline = time.monotonic() + give_up
        last = why
        try:
            while not self._stop.is_set():
                try:
                    conn.owner.call(conn.reconnect, timeout=give_up + 30)
                    conn.owner.call(_probe, conn.transport, timeout=give_up + 30)
                except Exception as e:
                    last = str(e)
                    conn.owner.lost = None
                    if time.monotonic() >= deadline:
                        self.failed = f"the TPM is gone: {last} (tried again for {give_up:g} s)"
                        self.log(self.failed, LineKind.FAULT)
                        return
                    self._stop.wait(1.0)
                    continue
                if private:
                    # a new swtpm holds nothing: every handle the clients had is gone with the old one
                    self.accounts.tpm_reset()
                self.log("the TPM answers again" + (" (a new private swtpm: every object and session of "
                                                    "the clients is gone)" if private else ""),
                         LineKind.FAULT)
                return
        finally:
            self.recovering = False
            self._recover_lock.release()

    def _transport_for(self, client: ClientStats):
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
    def _side_handler(self, protocol: str | None = None):
        swtpm = (protocol or self.protocol) == "swtpm"

        def handle(sock: socket.socket) -> None:
            state: dict = {}
            try:
                P.set_idle_timeout(sock, self.idle_timeout)
                while True:
                    got = P.answer_control(sock, state) if swtpm else P.answer_platform(sock)
                    if got is None:
                        return
                    code, answer = got
                    if answer:
                        sock.sendall(answer)
                    if not swtpm and code == P.MS_SIM_SESSION_END:
                        return
                    if swtpm and state.get("refused"):
                        # its payload's length is unknown: reading on would take the payload
                        # for more requests. The answer is sent, the rest read and dropped
                        # (closing with unread bytes would reset the connection under the answer).
                        _drain_and_close(sock)
                        return
            except P.Idle:
                return
            except (P.FrameError, OSError) as e:
                self.log(f"{'control' if swtpm else 'platform'} connection: {e}; connection closed",
                         LineKind.DROPPED)

        return handle

    # -- departures -----------------------------------------------------------------------------
    def _watch_exit(self, c: ClientStats) -> None:
        """A pidfd for the client's process: readable when it exits (the reaper and a new
        client look; a departure is noticed when it happens, not on a timer)."""
        if c.peer.pid is None:
            return  # no process known (an anonymous connection): nothing to watch
        try:
            fd = os.pidfd_open(c.peer.pid)
        except (OSError, AttributeError):
            return  # gone already, or no pidfds: the reaper's periodic check covers it
        with self._pidfd_lock:
            self._pidfds[fd] = (c.id, c)
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _exited(self, c: ClientStats) -> bool:
        with self._pidfd_lock:
            fds = [fd for fd, (_cid, x) in self._pidfds.items() if x is c]
            if fds:
                try:
                    return bool(select.select(fds, [], [], 0)[0])
                except (OSError, ValueError):
                    return False
        return not peers.alive(c.peer)

    def _reap_exited(self) -> None:
        """Every watched client whose process has exited departs now."""
        with self._pidfd_lock:
            fds = list(self._pidfds)
        if not fds:
            return
        p = select.poll()
        for fd in fds:
            p.register(fd, select.POLLIN)
        for fd, _ev in p.poll(0):
            self._process_exited(fd)

    def _process_exited(self, fd: int) -> None:
        with self._pidfd_lock:
            got = self._pidfds.get(fd)
            if got is None:
                return
            # Looked at again under the lock: the number a poll reported may since have been
            # closed (its client departed) and given to a new client's pidfd, whose process
            # is alive.
            try:
                readable = bool(select.select([fd], [], [], 0)[0])
            except (OSError, ValueError):
                readable = False
            if not readable:
                return
            del self._pidfds[fd]
            os.close(fd)
        c = got[1]
        # An exited process waits for nothing more: it departs as soon as its commands still
        # being answered are accounted (the answer goes out before the accounting), even if
        # the proxy has yet to see the end of its last connection.
        with self._lock:
            c.exited = True
            ready = c.inflight <= 0
        if ready:
            self._depart(c)

    def _closed(self, c: ClientStats) -> None:
        self.accounts.connection_closed(c)
        if c.open_connections > 0 or c.departed_ns is not None:
            return
        # A client without a pid is one connection: it has left. Otherwise: has its process?
        if c.peer.pid is None or c.exited or self._exited(c):
            self._depart(c)

    def _reaper(self) -> None:
        # Departures come from the clients' pidfds (at once) or, for clients without one, a
        # periodic look; the wake pipe adds new pidfds to the wait.
        while not self._stop.is_set():
            with self._pidfd_lock:
                fds = list(self._pidfds)
            try:
                r, _, _ = select.select(fds + [self._wake_r], [], [], REAP_INTERVAL_S)
            except (OSError, ValueError):
                r = []
                self._stop.wait(REAP_INTERVAL_S)
            if self._stop.is_set():
                return
            for fd in r:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                else:
                    self._process_exited(fd)
            with self._pidfd_lock:
                watched = {x.id for (_cid, x) in self._pidfds.values()}
            for c in self.accounts.live():
                try:
                    if (c.id != 0 and c.id not in watched and c.open_connections <= 0
                            and not peers.alive(c.peer)):
                        self._depart(c)
                except Exception as e:  # the reaper must outlive any one client's trouble
                    self.log(f"client {c.id}: departure check failed: {type(e).__name__}: {e}", LineKind.FAULT)

    def _depart(self, c: ClientStats) -> None:
        if c.departed_ns is not None:
            return
        leaked = self.accounts.depart(c)
        if self.turns is not None:
            self.turns.release(c)
        with self._pidfd_lock:
            for fd, (_cid, x) in list(self._pidfds.items()):
                if x is c:
                    del self._pidfds[fd]
                    os.close(fd)
        t = self._client_transports.pop(c.id, None)
        if t is not None:
            t[0].close()  # closing its /dev/tpmrm0 fd (abrmd connection) flushes what it left
        head = f"client {c.id} {c.name} (pid {c.peer.pid}) left: {c.commands} commands, {c.errors} errors"
        if leaked:
            self.log(f"{head}; LEAK: left {len(leaked)} handle(s) behind: " + ", ".join(h.text() for h in leaked),
                     LineKind.LEAK)
        else:
            self.log(f"{head}; left nothing loaded")


def _probe(transport) -> None:
    """One harmless command (GetRandom 8) on a reconnected TPM: does it answer?"""
    transport.transact(bytes.fromhex("80010000000c0000017b0008"))


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
