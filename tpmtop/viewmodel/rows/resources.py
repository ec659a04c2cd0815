"""The Resources panel's gauges (slots, sessions, context gap) and what moves them between
polls (:class:`ContextGapTracker`, :class:`SlotPeaks`). No Textual here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from tpmtop.ring import Ring

if TYPE_CHECKING:
    from tpmtop.recorder import Event
from typing import Any


class GaugeLevel(StrEnum):
    """How full a kind of slot is; the theme colours ``$gauge-ok``, ``$gauge-warn``, ``$gauge-full``."""

    OK = "ok"
    WARN = "warn"  # two thirds or more
    FULL = "full"

    @classmethod
    def of(cls, fraction: float) -> GaugeLevel:
        return cls.FULL if fraction >= 1.0 else cls.WARN if fraction >= 0.66 else cls.OK


@dataclass
class Gauge:
    label: str
    used: int
    total: int
    note: str = ""
    peak: int | None = None  # high-water mark from the traffic between polls (SlotPeaks)

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0

    @property
    def peak_level(self) -> GaugeLevel:
        """``full`` when the traffic filled every slot at some moment, even if no poll saw it."""
        if self.peak is None or not self.total:
            return GaugeLevel.OK
        return GaugeLevel.of(self.peak / self.total)

    @property
    def level(self) -> GaugeLevel:
        return GaugeLevel.of(self.fraction)


def gauges(var: dict[str, Any], fixed: dict[str, Any], gap: int | None, transient_loaded: int, saved_listed: int = 0,
           peaks: dict[str, Any] | None = None) -> list[Gauge]:
    """``saved_listed``: saved sessions the TPM lists (the poll). The gap is known only for
    sessions whose ContextSave tpmtop saw on the wire; others were saved before it watched."""
    out = []
    if "HR_TRANSIENT_AVAIL" in var:
        # HR_TRANSIENT_AVAIL is what is left; the slots in use are the transient handles listed.
        used = transient_loaded
        out.append(Gauge("object slots", used, used + var["HR_TRANSIENT_AVAIL"],
                         peak=(peaks or {}).get("object")))
    if "HR_LOADED" in var and "HR_LOADED_AVAIL" in var:
        out.append(Gauge("loaded sessions", var["HR_LOADED"], var["HR_LOADED"] + var["HR_LOADED_AVAIL"],
                         peak=(peaks or {}).get("session")))
    if "HR_ACTIVE" in var:
        total = fixed.get("ACTIVE_SESSIONS_MAX") or var["HR_ACTIVE"] + var.get("HR_ACTIVE_AVAIL", 0)
        out.append(Gauge("active sessions", var["HR_ACTIVE"], total))
    gmax = fixed.get("CONTEXT_GAP_MAX")
    if gmax:
        if gap is not None:
            note = ""
        elif saved_listed:
            note = f"{saved_listed} saved before tpmtop watched: gap unknown"
        else:
            note = "no saved session"
        out.append(Gauge("context gap", gap or 0, gmax, note))
    return out


class ContextGapTracker:
    """How far the context counter has moved past the oldest still-saved session, from the
    ContextSave responses and ContextLoad commands seen on the wire. When it reaches
    CONTEXT_GAP_MAX the TPM refuses further saves (TPM_RC_CONTEXT_GAP) until that session is
    loaded and re-saved — the kernel's /dev/tpmrm0 does not re-gap."""

    CC_CONTEXT_SAVE = 0x162
    CC_CONTEXT_LOAD = 0x161
    CC_FLUSH = 0x165

    def __init__(self) -> None:
        self.saved: dict[int, int] = {}  # session handle -> contextID (sequence)
        self.last = 0

    def feed(self, ev: Event) -> None:
        if ev.rc != 0:
            return
        if ev.cc == self.CC_CONTEXT_SAVE and ev.response is not None and len(ev.response) >= 18 and ev.handles:
            h = ev.handles[0]
            if h >> 24 in (0x02, 0x03):
                seq = int.from_bytes(ev.response[10:18], "big")
                self.saved[h] = seq
                self.last = max(self.last, seq)
        elif ev.cc == self.CC_CONTEXT_LOAD and ev.command is not None and len(ev.command) >= 22:
            self.saved.pop(int.from_bytes(ev.command[18:22], "big"), None)
        elif ev.cc == self.CC_FLUSH and ev.command is not None and len(ev.command) >= 14:
            self.saved.pop(int.from_bytes(ev.command[10:14], "big"), None)

    def reset(self) -> None:
        self.saved.clear()
        self.last = 0

    @property
    def gap(self) -> int | None:
        if not self.saved:
            return None
        return max(0, self.last - min(self.saved.values()))


class SlotPeaks:
    """High-water marks of object and session slots, from the traffic seen on the wire.

    A per-command session lives for under a millisecond: a poll every second sees 0 in use
    while the TPM fills up between polls. So each poll sets a baseline (what the TPM listed),
    and every command after it moves the count: a handle created (CreatePrimary, Load,
    StartAuthSession, ContextLoad) is +1, one flushed (FlushContext, a session used without
    continueSession, a ContextSave of a session: it leaves its slot) is -1. The peak is the
    highest count reached since the last reset."""

    CREATES = frozenset({0x131, 0x157, 0x176, 0x161})  # CreatePrimary, Load, StartAuthSession, ContextLoad
    CC_FLUSH, CC_SAVE = 0x165, 0x162

    def __init__(self) -> None:
        self.now = {"object": 0, "session": 0}
        self.peak = {"object": 0, "session": 0}
        # (seq, kind, ±1). A Ring, not a deque: under per-command sessions it fills, and a full
        # garbage collection would visit its 20,000 references every time (tpmtop.ring)
        self.moves: Ring[tuple[int, str, int]] = Ring(20_000)
        self.since = 0  # the last baseline's recorder sequence number

    @staticmethod
    def _kind(h: int | None) -> str | None:
        top = (h or 0) >> 24
        return "object" if top == 0x80 else "session" if top in (0x02, 0x03) else None

    def baseline(self, objects: int, sessions: int, seq: int) -> None:
        """What a poll listed once the command numbered ``seq`` had run; moves seen after it
        (the poll's message may arrive after later traffic was read) are applied again."""
        self.now = {"object": objects, "session": sessions}
        self.since = seq
        for k, v in self.now.items():
            self.peak[k] = max(self.peak[k], v)
        for s_, kind, d in self.moves:
            if s_ > seq:
                self._apply(kind, d)

    def _move(self, seq: int, kind: str | None, d: int) -> None:
        if kind is None or seq <= self.since:
            return
        self.moves.append((seq, kind, d))
        self._apply(kind, d)

    def _apply(self, kind: str, d: int) -> None:
        v = self.now[kind] = max(0, self.now[kind] + d)
        if v > self.peak[kind]:
            self.peak[kind] = v

    def feed(self, events: Iterable[Event]) -> None:
        for ev in events:
            if ev.rc != 0:
                continue
            seq = ev.seq
            if ev.cc in self.CREATES:
                self._move(seq, self._kind(ev.rsp_handle), +1)
            elif ev.cc == self.CC_FLUSH:
                cmd = ev.command
                if cmd is not None and len(cmd) >= 14:
                    self._move(seq, self._kind(int.from_bytes(cmd[10:14], "big")), -1)
            elif ev.cc == self.CC_SAVE and ev.handles and self._kind(ev.handles[0]) == "session":
                self._move(seq, "session", -1)
            for h, attrs in ev.sessions:  # a session used without continueSession ends with the command
                if not attrs & 0x01 and self._kind(h) == "session":
                    self._move(seq, "session", -1)

    def reset(self) -> None:
        self.peak = dict(self.now)
