"""Who may use the TPM through the proxy: closed unless the operator opens it.

The proxy hands out a TPM: whoever reaches it can create keys, fill the TPM's object and
session slots, read PCRs, and (behind a raw TPM) flush or use other programs' objects. So:

- the proxy's own uid and root are let in (root can open the TPM device anyway);
- ``--allow-user U`` adds a user, ``--allow-group G`` every member of G (membership as the
  account database says: the group's member list or a user's primary group, what
  ``os.getgrouplist`` returns);
- everyone else is refused: one log line, the connection closed before a byte of it is read.

The peer's uid comes from the kernel, never from the client: ``SO_PEERCRED`` on the Unix
socket, the peer socket's owner by ``sock_diag`` on loopback TCP (see :mod:`.peers`). A peer
whose uid cannot be established (a remote address, a look-up that failed) is refused.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from tpmtop.errors import UsageError


def _uid_of(user: str) -> int:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        if user.isdigit():
            return int(user)
        raise UsageError(f"--allow-user {user}: no such user") from None


def gid_of(group: str, option: str = "--allow-group") -> int:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if group.isdigit():
            return int(group)
        raise UsageError(f"{option} {group}: no such group") from None


@dataclass
class AccessPolicy:
    """Uids let in, and groups whose members are. Decisions per uid are cached (the swtpm
    TCTI connects for every command): a changed group database is seen after a restart."""

    uids: frozenset[int]
    gids: frozenset[int] = frozenset()
    _cache: dict[int, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def default(cls, users: tuple[str, ...] = (), groups: tuple[str, ...] = ()) -> AccessPolicy:
        uids = {os.geteuid(), 0} | {_uid_of(u) for u in users}
        return cls(frozenset(uids), frozenset(gid_of(g) for g in groups))

    def allows(self, uid: int | None) -> bool:
        if uid is None:
            return False
        if uid in self.uids:
            return True
        if not self.gids:
            return False
        got = self._cache.get(uid)
        if got is None:
            got = self._cache[uid] = bool(self.gids & _groups_of(uid))
        return got

    def describe(self) -> str:
        users = sorted(_name(u) for u in self.uids)
        text = "users " + ", ".join(users)
        if self.gids:
            text += "; members of " + ", ".join(sorted(_group_name(g) for g in self.gids))
        return text


def _groups_of(uid: int) -> set[int]:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return set()
    return set(os.getgrouplist(pw.pw_name, pw.pw_gid))


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def peer_uid(sock: socket.socket) -> tuple[int | None, int | None]:
    """(uid, pid) of the process at the other end, from the kernel; (None, None) when it cannot
    be known (a remote peer, a peer socket already gone)."""
    uid, pid, _inode = peer_owner(sock)
    return uid, pid


def peer_owner(sock: socket.socket, peer: tuple[Any, ...] | None = None,
               local: tuple[Any, ...] | None = None,
               unix: bool | None = None) -> tuple[int | None, int | None, int | None]:
    """(uid, pid, inode of the peer's socket): the pid from SO_PEERCRED on a Unix socket, the
    inode from sock_diag on loopback TCP (kept by the server, so that naming the peer later
    needs no second look-up). *peer* (what accept returned) and *local* (the listener's own
    address, when it is not a wildcard) spare a system call each; *unix* (the listener's
    family, when the caller knows it) an enum built per call."""
    if unix is None:
        unix = sock.family == socket.AF_UNIX
    if unix:
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None, None, None
        pid, uid, _gid = struct.unpack("3i", creds)
        return uid, (pid if pid > 0 else None), None
    from tpmtop.proxy import peers

    try:
        peer = peer[:2] if peer else sock.getpeername()[:2]
        local = local or sock.getsockname()[:2]
    except OSError:
        return None, None, None
    if not peers.is_loopback(peer[0]):
        return None, None, None
    owner = peers.socket_owner(peer, local, ":" in peer[0])
    return (owner[0], None, owner[1]) if owner else (None, None, None)


def user_text(uid: int | None) -> str:
    return "uid unknown" if uid is None else f"uid {uid} ({_name(uid)})"
