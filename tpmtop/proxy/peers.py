"""Who is on the other end of a connection: pid, process name, command line, uid.

- Unix socket: the kernel says (SO_PEERCRED).
- TCP on loopback: the peer's socket is a line of /proc/net/tcp{,6} (its owner's uid and
  inode); the pid is the process with that inode among its file descriptors. Scanning every
  /proc/PID/fd costs milliseconds, so the processes found before are looked at first: the
  swtpm TCTI opens a new connection for every command, from the same process.
- A peer on another host, or a process of another user while we are not root, cannot be
  named: it is reported as "unknown (not root)" / "remote", never guessed.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tpmtop.proxy import procfs

UNKNOWN_NOT_ROOT = "unknown (not root)"
# A peer whose look-up waits for the next walk of /proc (TcpResolver.late names it), and one
# that will not be named (too many wait)
NOT_NAMED_YET = "not named yet"
NOT_NAMED = "not named (too many look-ups waiting)"


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int | None
    name: str
    cmdline: str
    uid: int | None
    user: str | None
    start_time: float | None = None  # tells a reused pid from the process before it
    exe: str = ""  # the executable (with the name, what a departed client is folded under)
    waiting: bool = False  # its look-up waits for a walk of /proc (TcpResolver.late)

    @property
    def key(self) -> tuple[int | str, float | str | None]:
        return (self.pid, self.start_time) if self.pid is not None else ("anon", self.name)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "cmdline": self.cmdline, "uid": self.uid, "user": self.user}


def _user(uid: int | None) -> str | None:
    return None if uid is None else _user_name(uid)


@functools.lru_cache(maxsize=64)  # every new client is named with it; the name service reads files
def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


def describe_pid(pid: int, uid: int | None = None) -> Peer:
    """Name, command line, uid, start time and executable of a live process (:mod:`.procfs`).
    The name is psutil's rule: the kernel's 15-character comm, extended from the command line
    when it was cut."""
    try:
        comm, start = procfs.stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return Peer(pid, f"pid {pid} (exited)", "", uid, _user(uid))
    except (OSError, ValueError, IndexError):  # PermissionError among them
        return Peer(pid, UNKNOWN_NOT_ROOT, "", uid, _user(uid))
    try:
        args = procfs.cmdline(pid)
    except OSError:
        args = []
    name = comm
    if len(comm) >= 15 and args:
        longer = os.path.basename(args[0])
        if longer.startswith(comm):
            name = longer
    if uid is None:
        try:
            uid = procfs.status_field(pid, b"Uid:")
        except (OSError, ValueError):
            uid = None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:  # another user's process (not root), a kernel thread, gone
        exe = ""
    cmdline = " ".join(args)
    return Peer(pid, name, cmdline or name, uid, _user(uid), start, exe)


def unix_peer(sock: socket.socket) -> Peer:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return describe_pid(pid, uid) if pid > 0 else Peer(None, UNKNOWN_NOT_ROOT, "", uid, _user(uid))


def _hex_addr(ip: str, port: int, v6: bool) -> str:
    """An address as /proc/net/tcp{,6} writes it (host byte order words, little-endian here)."""
    if v6:
        raw = socket.inet_pton(socket.AF_INET6, ip)
        words = struct.unpack("<4I", raw)
        return "".join(f"{w:08X}" for w in words) + f":{port:04X}"
    (n,) = struct.unpack("<I", socket.inet_aton(ip))
    return f"{n:08X}:{port:04X}"


_NL_HDR = struct.Struct("=IHHII")
# One sock_diag (inet_diag) request, packed in one call: the netlink header, then
# inet_diag_req_v2 (family, protocol, ext, pad, states) and its inet_diag_sockid (source and
# destination ports in network order, two 16-byte addresses, interface, cookie)
_DIAG_REQ = struct.Struct("=IHHIIBBBxIHH16s16sIII")
_DIAG_OWNER = struct.Struct("=II")  # idiag_uid, idiag_inode of the answer
_SOCK_DIAG_BY_FAMILY = 20
_NETLINK_SOCK_DIAG = 4
_NLMSG_ERROR = 2


class _DiagSocket:
    """One thread's netlink socket for sock_diag, kept: opening one per look-up cost as much as
    the look-up. Held by that thread alone (``_threads``), it goes when the thread ends and
    closes its socket then: left to the socket's own finalizer, it was closed with a
    ResourceWarning."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None

    def open(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
        return self.sock

    def drop(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def __del__(self) -> None:
        self.drop()


_threads = threading.local()


def _netlink() -> _DiagSocket:
    held: _DiagSocket | None = getattr(_threads, "diag", None)
    if held is None:
        held = _threads.diag = _DiagSocket()
    return held


@functools.lru_cache(maxsize=64)  # the proxy's own address and loopback peers: a handful
def _packed(family: int, ip: str) -> bytes:
    return socket.inet_pton(family, ip)


def _diag_owner(peer: tuple[Any, ...], local: tuple[Any, ...], v6: bool) -> tuple[int, int] | None:
    """(uid, inode) of the peer's socket by an exact sock_diag (inet_diag) look-up: ~20 µs,
    where reading /proc/net/tcp costs milliseconds on a busy machine."""
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    msg = _DIAG_REQ.pack(_DIAG_REQ.size, _SOCK_DIAG_BY_FAMILY, 1, 1, 0,  # NLM_F_REQUEST
                         fam, socket.IPPROTO_TCP, 0, 0xFFFFFFFF,  # every state
                         socket.htons(peer[1]), socket.htons(local[1]), _packed(fam, peer[0]),
                         _packed(fam, local[0]), 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface, no cookie
    # The thread's netlink socket (a request gets exactly one answer, a diag message or an
    # error, read before the next).
    diag = _netlink()
    try:
        nl = diag.open()
        nl.sendto(msg, (0, 0))
        data = nl.recv(8192)
    except OSError:
        diag.drop()
        return None
    if len(data) < _NL_HDR.size + 72:
        return None
    _len, mtype, _f, _s, _p = _NL_HDR.unpack_from(data, 0)
    if mtype == _NLMSG_ERROR:
        return None
    uid, inode = _DIAG_OWNER.unpack_from(data, _NL_HDR.size + 4 + 48 + 12)
    return uid, inode


def _socket_owner(peer: tuple[Any, ...], local: tuple[Any, ...], v6: bool) -> tuple[int, int] | None:
    """(uid, inode) of the peer's end of our TCP connection: sock_diag, else /proc/net/tcp{,6}."""
    got = _diag_owner(peer, local, v6)
    if got is not None:
        return got
    want_local = _hex_addr(peer[0], peer[1], v6)
    want_remote = _hex_addr(local[0], local[1], v6)
    try:
        with open("/proc/net/tcp6" if v6 else "/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[1] == want_local and parts[2] == want_remote:
                    return int(parts[7]), int(parts[9])
    except OSError:
        pass
    return None


def socket_owner(peer: tuple[Any, ...], local: tuple[Any, ...], v6: bool) -> tuple[int, int] | None:
    """(uid, inode) of the peer's end of our loopback TCP connection (an IPv4 peer on an IPv6
    listener is looked up as IPv4), or None when it has no live owner.

    Only a socket some process still holds has an owner: one its process has closed is
    orphaned (inode 0) and soon a TIME_WAIT entry, which the kernel reports as uid 0, inode 0.
    Taken at its word, that made a peer that sent a command and closed before the accept
    "root", let in and served (issue 50). Such a peer is None here: the proxy refuses it."""
    owner = _socket_owner(peer, local, v6)
    if owner is None and v6 and peer[0].startswith("::ffff:"):
        owner = _socket_owner((peer[0][7:], peer[1]), (local[0][7:], local[1]), False)
    if owner is None or owner[1] == 0:
        return None
    return owner


_GONE = -1  # _holding_fd: the process has exited


def _holding_any(pid: int, targets: dict[str, int]) -> list[tuple[int, int]]:
    """(fd, inode) for each descriptor of ``pid`` that is one of ``targets`` (link -> inode);
    none if the process is gone or not ours to read."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            inode = targets.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if inode is not None:
            out.append((int(fd), inode))
    return out


def len_then_text(name: str) -> tuple[int, str]:
    """A descriptor's name ordered as its number, without parsing it ("10" after "9")."""
    return len(name), name


def _holds(pid: int, fd: int | str, target: str) -> bool:
    """Does ``pid`` hold ``target`` through descriptor ``fd`` (one readlink; False if it or
    the process is gone)?"""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == target
    except OSError:
        return False


def _holding_fd(pid: int, target: str, hint: int | None) -> int | None:
    """The fd through which ``pid`` holds ``target`` (tried first: ``hint``, the fd number
    the previous connection of that process used; tpm2-tss reuses it), None, or _GONE."""
    if hint is not None and _holds(pid, hint, target):
        return hint
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return _GONE
    except OSError:
        return None
    # newest first: a client's connection to us is usually the descriptor it opened last
    for fd in sorted(fds, key=len_then_text, reverse=True):
        if _holds(pid, fd, target):
            return int(fd)
    return None


class TcpResolver:
    """Find the process at the other end of an accepted loopback TCP connection.

    In order, each step only if the one before found nothing: the processes found before
    (the swtpm TCTI connects for every command, from the same process); the pids this pid
    namespace gave since the previous look-up (``ns_last_pid`` then and now, across a wrap of
    the counter, and PROBE more below: a new client is one of them however many processes
    started around it), the PROBE newest by number, the rest from one listing of /proc; then,
    only if the peer's socket is still open, a walk of /proc, at most one a WALK_INTERVAL_S
    (a process that started long before it connected). A look-up that misses while a walk is
    not due waits for the next one, which serves every look-up waiting (:meth:`late`): its
    connection is not served meanwhile (its uid, which decided access, is the live socket's,
    from sock_diag; only the process is late). A peer whose socket closed meanwhile is "gone"
    without a walk. So no peer, pid order or machine load makes each connection cost a walk
    of /proc (issue 50)."""

    RECENT = 16
    PROBE = 32  # pids looked at by number, and below where the previous look-up's counter was
    WALK_INTERVAL_S = 1.0  # at most one walk of /proc this often, shared by every look-up that missed
    MAX_WAITING = 4096  # look-ups waiting for a walk; more are "not named" at once

    def __init__(self) -> None:
        # pid -> (Peer, fd of its last connection), most recent first: the swtpm TCTI opens a
        # connection per command from the same process, found again in ~10 µs
        self._recent: dict[int, tuple[Peer, int]] = {}
        self._lock = threading.Lock()
        # The pid of the newest client found: where the probe starts when ns_last_pid cannot
        # be read. The last one found, never a maximum: after the counter wraps, new clients
        # are low pids, and a maximum kept every look-up probing above them (issue 50)
        self._last_new = 0
        self._new_fd: int | None = None  # the descriptor through which the last new client held its connection
        # ns_last_pid at the previous look-up of a new client (at the start: the clients that
        # start after the proxy are in the first window)
        self._since = procfs.last_pid()
        self._walked = -math.inf  # time.monotonic() of the last walk: the first miss walks at once
        self._waiting: dict[int, int] = {}  # inode -> uid: look-ups waiting for the next walk
        self._late: dict[int, Peer] = {}  # inode -> what a walk found for a look-up that waited
        # (pid, pidfd) of the new client the last look-up found: the pidfd that told it was a
        # process, not a thread (:meth:`_leader`), kept for its departure watch (take_pidfd)
        self._pidfd: tuple[int, int] | None = None
        self.scans = 0  # walks of /proc (the benchmark and the tests read it)

    def resolve(self, sock: socket.socket, owner: tuple[int, int] | None = None) -> Peer:
        """``owner``: the peer socket's (uid, inode), when the caller has already looked it up
        (on loopback: only there is it known)."""
        if owner is None:
            asked = _live_owner(sock)
            if isinstance(asked, Peer):
                return asked
            owner = asked
        if owner is None:
            return Peer(None, "unknown", "", None, None)
        uid, inode = owner
        target = f"socket:[{inode}]"
        with self._lock:
            recent = list(self._recent.items())
        for pid, (known, hint) in recent:
            fd = _holding_fd(pid, target, hint)
            if fd == _GONE:  # exited: not looked at again (a script's tools each left one)
                self.forget(pid)
            elif fd is not None:
                self._remember(pid, known, fd)
                return known
        # Skip only the processes looked at above: another thread may have added this very
        # process to the recent ones meanwhile (1,000 connections of one process resolved at
        # once), and skipping it then named most of them "unknown".
        looked = {pid for pid, _ in recent}
        now_last = procfs.last_pid()
        newest = now_last or self._last_new
        since, self._since = self._since, now_last
        # the newest first through the last client's descriptor number: it is usually the
        # newest pid or the next, so the 32 are generated as probed, not listed first
        found = self._probe_hint(self._newest(newest, looked), target)
        if found is not None:
            return self._found(*found, uid)
        now = _live_owner(sock)
        if not isinstance(now, tuple) or now[1] != inode:
            # closed since the accept: no process holds it any more, and looking further would
            # only cost the proxy (a peer that connects, sends a byte and closes, in a loop)
            return Peer(None, "gone before it was named", "", uid, _user(uid))
        found = self._probe(self._newest(newest, looked), target)
        if found is None:
            older = self._older(newest, since, looked)
            found = self._probe_hint(older, target) or self._probe(older, target)
        if found is not None:
            return self._found(*found, uid)
        if not self._walk_due():
            if len(self._waiting) >= self.MAX_WAITING:
                return Peer(None, NOT_NAMED, "", uid, _user(uid))
            self._waiting[inode] = uid
            return Peer(None, NOT_NAMED_YET, "", uid, _user(uid), waiting=True)
        got = self._walk({**self._waiting, inode: uid}, newest)
        self._waiting.clear()
        mine = got.pop(inode)
        self._late.update(got)
        return mine

    def late(self) -> dict[int, Peer]:
        """The look-ups that waited, by the peer socket's inode, named by a walk of /proc
        (walked now if some wait and a walk is due; else by one that ran meanwhile for a
        look-up that could not wait). Called on a timer."""
        if self._waiting and self._walk_due():
            self._late.update(self._walk(dict(self._waiting), procfs.last_pid() or self._last_new))
            self._waiting.clear()
        got, self._late = self._late, {}
        return got

    def _walk_due(self) -> bool:
        return time.monotonic() - self._walked >= self.WALK_INTERVAL_S

    def _walk(self, wanted: dict[int, int], newest: int) -> dict[int, Peer]:
        """One walk of /proc for every inode of ``wanted`` (inode -> its owner's uid), newest
        processes first across the wrap (a client is usually a process that just started);
        an inode no process holds is "unknown" (or "unknown (not root)": another user's
        process we may not look into), never guessed."""
        self.scans += 1
        self._walked = time.monotonic()
        targets = {f"socket:[{inode}]": inode for inode in wanted}
        out = {inode: _unfound(uid) for inode, uid in wanted.items()}
        top = procfs.pid_max()
        left = len(targets)
        for pid in sorted((int(n) for n in os.listdir("/proc") if n.isdigit()), key=lambda p: (newest - p) % top):
            for fd, inode in _holding_any(pid, targets):
                if out[inode].pid is None:
                    out[inode] = self._found(pid, fd, wanted[inode])
                    left -= 1
            if not left:
                break
        return out

    def _newest(self, newest: int, looked: set[int]) -> Iterator[int]:
        """The PROBE newest pids (``newest`` and below, wrapping at pid_max), less ``looked``,
        newest first. Listing /proc costs ~230 µs on this project's VM while a client starts
        on the other CPU; a pid that does not exist costs one failed open."""
        if newest <= 0:
            return
        top = procfs.pid_max()
        for i in range(self.PROBE):
            pid = (newest - i) % top
            if pid > 0 and pid not in looked:
                yield pid

    def _older(self, newest: int, since: int | None, looked: set[int]) -> list[int]:
        """The rest of the window: the live pids the counter gave after ``since`` - PROBE and
        before the PROBE newest, newest first across a wrap, found by one listing of /proc (a
        probe by number would cost a failed open per pid the counter moved). Empty when the
        counter moved less than PROBE since the previous look-up (nothing to list)."""
        if newest <= 0 or since is None:
            return []
        top = procfs.pid_max()
        span = (newest - since) % top + self.PROBE  # the window's length, counted from newest
        if span <= self.PROBE:
            return []
        ages = (((newest - int(n)) % top, int(n)) for n in os.listdir("/proc") if n.isdigit())
        return [pid for age, pid in sorted(a for a in ages if self.PROBE <= a[0] < span) if pid not in looked]

    def _probe_hint(self, pids: Iterable[int], target: str) -> tuple[int, int] | None:
        """The process among ``pids`` holding ``target`` through the descriptor number the last
        new client used, one readlink per pid: a script's tools open their connections alike
        (listing a process's descriptors and reading them newest first cost ~9 system calls
        per new client). A thread's id also opens /proc/ID/fd, so a match counts only if it
        is a process's own id (its Tgid)."""
        hint = self._new_fd
        if hint is None:
            return None
        for pid in pids:
            if _holds(pid, hint, target) and self._leader(pid):
                return pid, hint
        return None

    def _probe(self, pids: Iterable[int], target: str) -> tuple[int, int] | None:
        """The process among ``pids`` holding ``target`` through any descriptor (the one the
        last new client used first)."""
        for pid in pids:
            fd = _holding_fd(pid, target, self._new_fd)
            if fd is not None and fd != _GONE and self._leader(pid):
                return pid, fd
        return None

    def _leader(self, pid: int) -> bool:
        """Is ``pid`` a process's own id, not one of its threads' (a thread's id opens
        /proc/ID/fd too)? Asked with pidfd_open, which the kernel refuses for a thread that
        does not lead its group (ENOENT; EINVAL before Linux 6.9) or a pid that is gone
        (ESRCH). The pidfd is the one the client's departure watch needs (take_pidfd): one
        system call instead of reading /proc/PID/status for its Tgid (three, ~18 µs on a
        process just started, measured on this project's VM) and then opening the pidfd.
        Where pidfd_open cannot be used (no such call, out of descriptors), the Tgid."""
        try:
            fd = os.pidfd_open(pid)
        except OSError as e:
            if e.errno in (errno.ESRCH, errno.ENOENT, errno.EINVAL):
                return False
            return procfs.tgid(pid) == pid
        except AttributeError:  # a Python without os.pidfd_open
            return procfs.tgid(pid) == pid
        self._drop_pidfd()
        self._pidfd = (pid, fd)
        return True

    def take_pidfd(self, pid: int | None) -> int | None:
        """The pidfd the look-up that just named ``pid`` opened (the caller owns it now), or
        None: that look-up opened none (a process found before, a walk of /proc)."""
        got, self._pidfd = self._pidfd, None
        if got is not None and got[0] == pid:
            return got[1]
        if got is not None:
            os.close(got[1])
        return None

    def _drop_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd[1])
            self._pidfd = None

    def _found(self, pid: int, fd: int, uid: int) -> Peer:
        """A new client process: named, remembered, and where the next probe starts (when
        ns_last_pid cannot be read)."""
        p = describe_pid(pid, uid)
        self._remember(pid, p, fd)
        self._last_new = pid
        self._new_fd = fd
        return p

    def forget(self, pid: int) -> None:
        with self._lock:
            self._recent.pop(pid, None)

    def _remember(self, pid: int, p: Peer, fd: int) -> None:
        with self._lock:
            self._recent.pop(pid, None)
            self._recent = {pid: (p, fd), **self._recent}
            while len(self._recent) > self.RECENT:
                self._recent.pop(next(reversed(self._recent)))


def _unfound(uid: int) -> Peer:
    """A peer whose socket no process we can look into holds."""
    if os.geteuid() != 0 and uid != os.geteuid():
        return Peer(None, UNKNOWN_NOT_ROOT, "", uid, _user(uid))
    return Peer(None, "unknown", "", uid, _user(uid))


def _live_owner(sock: socket.socket) -> tuple[int, int] | Peer | None:
    """The (uid, inode) of the peer's live socket now; a Peer naming why there is none (gone,
    remote), or None (not found)."""
    try:
        peer = sock.getpeername()[:2]
        local = sock.getsockname()[:2]
    except OSError:
        return Peer(None, "disconnected", "", None, None)
    if not is_loopback(peer[0]):
        return Peer(None, f"remote {peer[0]}:{peer[1]}", "", None, None)
    return socket_owner(peer, local, sock.family == socket.AF_INET6)


def is_loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip in ("::1", "::ffff:127.0.0.1") or ip.startswith("::ffff:127.")


def alive(peer: Peer) -> bool:
    """Is this peer's process still running (the same one, not a reused pid)?"""
    if peer.pid is None:
        return False
    try:
        _comm, start = procfs.stat(peer.pid)
    except (FileNotFoundError, ProcessLookupError):
        return False
    except (OSError, ValueError, IndexError):
        return True  # not readable: assume it lives (a departure is then seen by its pidfd)
    return peer.start_time is None or abs(start - peer.start_time) < 0.01
