"""The Handles panel's rows, and its memory between polls (:class:`HandleBook`). No Textual here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpmtop.recorder import HandleUse
    from tpmtop.tpm.handles import HandleEntry


class HandleState(StrEnum):
    """A row's highlight: just appeared, just went away (kept for HIGHLIGHT_S), or neither."""

    NEW = "new"
    GONE = "gone"
    SEEN = ""


class HandleOwner(StrEnum):
    """Who created a handle: tpmtop itself, a program tpmtop's proxy served (``--listen``), or
    someone tpmtop did not see create it (another program, the kernel, before tpmtop started)."""

    TPMTOP = "tpmtop"
    CLIENT = "client"
    UNKNOWN = "unknown"


@dataclass
class HandleRow:
    handle: int
    kind: str
    owner: HandleOwner
    age_s: float
    last_use_s: float | None
    uses: int
    state: HandleState
    creator: str = ""  # a CLIENT's program name (raw: made terminal-safe where shown)
    creator_pid: int | None = None

    @property
    def key(self) -> str:
        return f"0x{self.handle:08x}"

    @property
    def ours(self) -> bool:
        return self.owner is HandleOwner.TPMTOP

    @property
    def who(self) -> str:
        """Who created it, in a word: "tpmtop", the client's program name, "unknown"."""
        if self.owner is HandleOwner.CLIENT:
            return self.creator or "a proxied program"
        return self.owner.value

    @property
    def created_by(self) -> str:
        """Who created it, for people: "tpmtop", "tpm2_createprimary (pid 4242)", "unknown"."""
        if self.owner is HandleOwner.CLIENT and self.creator_pid is not None:
            return f"{self.who} (pid {self.creator_pid})"
        return self.who


Owner = tuple[HandleOwner, str, int | None]  # (owner, a client's program name, its pid)


def _owner(ours: bool, client: tuple[str, int | None] | None) -> Owner:
    if ours:
        return HandleOwner.TPMTOP, "", None
    if client is not None:
        return HandleOwner.CLIENT, client[0], client[1]
    return HandleOwner.UNKNOWN, "", None


class HandleBook:
    """The Handles panel's memory between polls: when each handle was first seen, and the
    ones that just appeared or went away (highlighted for ``HIGHLIGHT_S`` seconds)."""

    HIGHLIGHT_S = 3.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.first_seen: dict[int, float] = {}
        self.gone: dict[int, tuple[float, HandleRow]] = {}
        self.current: dict[int, tuple[str, bool]] = {}  # handle -> (kind, ours)
        self.polled = False
        self.owners: dict[int, Owner] = {}  # as last shown (kept for a gone row)
        # handle -> the recorder's command count when tpmtop flushed it: a poll that ran before
        # (its list as of an earlier command) still names it, and must not bring its row back
        self.flushed_at: dict[int, int] = {}

    def update(self, entries: Iterable[HandleEntry], seq: int | None = None) -> None:
        """``seq``: the recorder's command count when the poll ran (None: not known, so every
        listed handle is taken as it is)."""
        now = self.clock()
        seen: dict[int, tuple[str, bool]] = {}
        if seq is not None:  # a poll as of a command after the flush has the TPM's word on it
            self.flushed_at = {h: at for h, at in self.flushed_at.items() if seq < at}
        for e in entries:
            if e.handle in self.flushed_at:  # listed by a poll that ran before tpmtop flushed it
                continue
            seen[e.handle] = (e.kind, e.ours)
            self.first_seen.setdefault(e.handle, now if self.polled else now - 1e9)
            self.gone.pop(e.handle, None)
        for h in set(self.current) - set(seen):
            kind, ours = self.current[h]
            owner = self.owners.get(h, _owner(ours, None))
            self.gone[h] = (now, HandleRow(h, kind, owner[0], now - self.first_seen.get(h, now), None, 0,
                                           HandleState.GONE, owner[1], owner[2]))
            self.first_seen.pop(h, None)
        self.current = seen
        self.polled = True

    def forget(self, handle: int, seq: int | None = None) -> None:
        """A handle tpmtop flushed: its row goes at once. (Kept struck through like one a poll
        found gone, it lingered under the cursor, counted by the table and not by the panel's
        subtitle, and a second `f` on it said "select a handle the TPM still lists".) ``seq``:
        the recorder's command count after the flush; a poll older than it does not bring the
        row back (one did under load, and the row then lingered struck through)."""
        if seq is not None:
            self.flushed_at[handle] = seq
        self.current.pop(handle, None)
        self.first_seen.pop(handle, None)
        self.owners.pop(handle, None)
        self.gone.pop(handle, None)

    def rows(self, uses: dict[int, HandleUse], owned: set[int], now_ns: int,
             clients: dict[int, tuple[str, int | None]] | None = None) -> list[HandleRow]:
        """``owned``: the handles tpmtop's own commands created; ``clients``: handle -> the
        proxied program (name, pid) that created it and still holds it."""
        clients = clients or {}
        now = self.clock()
        out = []
        for h, (kind, ours) in self.current.items():
            u = uses.get(h)
            first = self.first_seen.get(h, now)
            age = (now_ns - u.first_seen_ns) / 1e9 if u is not None else now - first
            if first < now - 1e8:  # there before tpmtop started: its age is unknown
                age = float("nan") if u is None else age
            state = HandleState.NEW if now - first < self.HIGHLIGHT_S else HandleState.SEEN
            owner, creator, pid = self.owners[h] = _owner(ours or h in owned, clients.get(h))
            out.append(HandleRow(h, kind, owner, age,
                                 (now_ns - u.last_use_ns) / 1e9 if u is not None else None,
                                 u.uses if u is not None else 0, state, creator, pid))
        for h, (t, row) in list(self.gone.items()):
            if now - t > self.HIGHLIGHT_S:
                del self.gone[h]
                self.owners.pop(h, None)
            else:
                out.append(row)
        out.sort(key=lambda r: r.handle)
        return out
