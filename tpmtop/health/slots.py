"""Slots: the transient objects and sessions loaded in the TPM against what it has room for
(TPM_PT_HR_TRANSIENT_AVAIL, TPM_PT_HR_LOADED_AVAIL, TPM_PT_HR_ACTIVE_AVAIL), each handle with
the client that made it where a capture of `tpmtop proxy` (or `tpmtop run`) says so — the
"out of memory for object contexts" question (TPM_RC_OBJECT_MEMORY 0x902, SESSION_MEMORY 0x903).

Through /dev/tpmrm0 the kernel's resource manager shows each client only its own transients:
there, health's own (none) is all it can see, and the line says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpmtop.health.probe import TpmFacts
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown


@dataclass(frozen=True)
class Holder:
    name: str
    pid: int | None
    left: bool  # the client had departed when the capture was written: it leaked the handle

    def text(self) -> str:
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        return f"{self.name}{pid}" + (", exited without flushing it" if self.left else "")


class SlotHolders:
    """Handle -> who created it, from the ``clients`` of proxy/run captures (held and leaked)."""

    def __init__(self) -> None:
        self.by_handle: dict[int, Holder] = {}

    def feed_capture(self, cap: dict[str, Any]) -> None:
        for c in cap.get("clients") or []:
            if not isinstance(c, dict):
                continue
            pid = c.get("pid") if isinstance(c.get("pid"), int) else None
            for key, left in (("held", False), ("leaked", True)):
                for h in c.get(key) or []:
                    try:
                        handle = int(str(h.get("handle")), 16)
                    except (AttributeError, ValueError):
                        continue
                    self.by_handle[handle] = Holder(str(c.get("name") or "?"), pid, left)


def _row(kind: str, loaded: list[int], avail: int | None) -> tuple[str, bool]:
    total = len(loaded) + avail if avail is not None else None
    if avail is None:
        return f"{len(loaded)} {kind} loaded (room not reported)", False
    return f"{len(loaded)} of {total} {kind} slots used", avail == 0


def verdict(facts: TpmFacts, holders: SlotHolders, tcti: str = "") -> Verdict:
    if facts.transients is None or facts.sessions is None:
        return unknown(Kind.SLOTS, f"loaded handles not listed: {facts.errors.get('slots', '?')}")
    t_avail = facts.var.get("HR_TRANSIENT_AVAIL")
    s_avail = facts.var.get("HR_LOADED_AVAIL")
    t_text, t_full = _row("object", facts.transients, t_avail)
    s_text, s_full = _row("session", facts.sessions, s_avail)
    ev = [f"TPM_PT_HR_TRANSIENT_AVAIL {t_avail}, TPM_PT_HR_LOADED_AVAIL {s_avail}, TPM_PT_HR_ACTIVE_AVAIL "
          f"{facts.var.get('HR_ACTIVE_AVAIL')}"]
    rows = []
    for h in facts.transients + facts.sessions:
        who = holders.by_handle.get(h)
        rows.append({"handle": f"0x{h:08x}", "holder": who.name if who else None,
                     "pid": who.pid if who else None, "left": who.left if who else None})
        ev.append(f"0x{h:08x} held by {who.text() if who else 'unknown (no capture names it)'}")
    if "tpmrm" in tcti:
        ev.append("through the kernel's resource manager each client sees only its own objects and sessions")
    text = f"{t_text}, {s_text}"
    level = Level.INFO
    if t_full or s_full:
        level = Level.WARN
        text = ("out of " + " and ".join(w for w, full in (("object slots", t_full), ("session slots", s_full))
                                         if full)
                + f": the next load fails with TPM_RC_{'OBJECT' if t_full else 'SESSION'}_MEMORY "
                  f"(0x90{'2' if t_full else '3'}) until one is flushed — {text}")
    data: tuple[tuple[str, object], ...] = (("transients", len(facts.transients)), ("transient_avail", t_avail),
                                            ("sessions", len(facts.sessions)), ("session_avail", s_avail),
                                            ("handles", rows))
    return Verdict(Kind.SLOTS, level, text, tuple(ev), data)
