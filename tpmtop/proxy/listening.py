"""The proxy's listening sockets: a TCP pair (P for the TPM, P+1 for control/platform) and
Unix socket paths it creates and, at the end, removes — only what it created itself.
Layer: proxy; no Textual."""

from __future__ import annotations

import errno
import os
import random
import socket
import stat

from tpmtop.errors import TpmtopError, UsageError

LISTEN_BACKLOG = 128
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


def listen_pair(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """Listening sockets on PORT and PORT+1 (port 0: any free pair)."""
    if port:
        data = _listen_tcp(host, port)
        try:
            return data, _listen_tcp(host, port + 1, base=port)
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
        data = _listen_tcp(host, 0)
        q = data.getsockname()[1]
        if q < 65535:
            try:
                return data, _listen_tcp(host, q + 1, base=q)
            except UsageError:
                pass
        data.close()
        # q itself may be taken by someone else once closed: then the pair is not free
        if q > 1 and (pair := _pair_at(host, q - 1)) is not None:
            return pair
    # Every try failed: the ephemeral range is full (a benchmark through that TCTI makes
    # tens of thousands of connections a minute). Below it no outgoing connection takes a
    # port, only servers that chose theirs.
    low_end = ephemeral_low()
    for _ in range(PAIR_TRIES if low_end > BELOW_EPHEMERAL_FROM + 2 else 0):
        if (pair := _pair_at(host, random.randrange(BELOW_EPHEMERAL_FROM, low_end - 1))) is not None:
            return pair
    raise TpmtopError("no free pair of TCP ports for the proxy")
