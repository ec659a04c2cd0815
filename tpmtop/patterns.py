"""Failure patterns in a stream of TPM commands, and the time they cost.

The patterns users meet (systemd issues, kernel threads):
- ``repeated-failure``: one command code failing with one response code again and again
  (Unseal with TPM_RC_PCR_CHANGED 0x128 retried for 30 s; NV_DefineSpace with
  TPM_RC_NV_DEFINED 0x14c in a retry loop);
- ``slots-full``: TPM_RC_OBJECT_MEMORY 0x902 / TPM_RC_SESSION_MEMORY 0x903 (someone leaks
  handles), also TPM_RC_SESSION_HANDLES 0x905;
- ``context-gap``: TPM_RC_CONTEXT_GAP 0x901 (a long-saved session blocks context saves);
- ``session-churn``: sessions started over and over (StartAuthSession many times: the
  Linux 6.10 per-extend session, or a client that never keeps one);
- ``pcr-changed``: a policy session failed with TPM_RC_PCR_CHANGED 0x128, with the extend(s)
  that came between its PolicyPCR and the failing command when the events show them
  (:mod:`tpmtop.pcrs.attribution`: events with command bytes, or the kernel's extends).

"Time lost" is the wire time of the commands in the pattern (what the TPM spent answering
them); for session churn, of the StartAuthSession commands (the set-up a kept session
would not pay again). It works on recorder events (live, proxied, kernel) and on capture
event dicts alike. Core module (layer capture/bench): no Textual.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.pcrs import attribution
from tpmtop.tpm import names

if TYPE_CHECKING:
    import os

    from tpmtop.capture.spec import EventLine, OpLine
    from tpmtop.recorder import Event

REPEAT_MIN = 3  # the same (command, rc) failing this often is a pattern, not an accident
CHURN_MIN = 10  # sessions started before "re-created many times" is worth saying
CC_START_AUTH_SESSION = 0x176

# the commands the PCR_CHANGED watch follows (by the names events and captures carry)
_WATCHED = frozenset(names.cc_name(cc) for cc in attribution.WATCHED)
_SLOT_RCS = {0x902: "TPM_RC_OBJECT_MEMORY", 0x903: "TPM_RC_SESSION_MEMORY", 0x905: "TPM_RC_SESSION_HANDLES"}
_GAP_RC = 0x901


@dataclass
class Pattern:
    kind: str  # repeated-failure | slots-full | context-gap | session-churn | pcr-changed
    title: str
    count: int
    lost_ns: int
    first_t_ns: int
    last_t_ns: int
    command: str | None = None
    rc: int | None = None
    hint: str | None = None
    origins: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "count": self.count, "lost_ms": round(self.lost_ns / 1e6, 3),
                "first_t_ns": self.first_t_ns, "last_t_ns": self.last_t_ns, "command": self.command,
                "rc": self.rc, "rc_text": names.rc_text(self.rc) if self.rc is not None else None,
                "hint": self.hint, "origins": self.origins}

    def line(self) -> str:
        head = f"{self.title}: {self.count} times, {fmt_ms(self.lost_ns)} lost"
        if self.kind == "pcr-changed" and self.hint:  # the extend behind it: the point of saying it
            return f"{head}; the last: {self.hint}"
        return head


def fmt_ms(ns: int) -> str:
    ms = ns / 1e6
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.2f} ms"


_CC_NUMERIC = re.compile(r"TPM2_CC_0x[0-9a-f]{8}\Z")


def _fields(e: Event | dict[str, Any]) -> tuple[str, int | None, int, int, str]:
    """(command name, rc, t_ns, wire_ns, origin) of an Event or a capture event dict."""
    if isinstance(e, dict):
        cmd = e.get("command")
        # a capture is anyone's file: only names tpmtop itself writes reach a title on screen
        if cmd not in names.CC_BY_NAME and not (isinstance(cmd, str) and _CC_NUMERIC.match(cmd)):
            cmd = "(unknown command)"
        return cmd, e.get("rc"), int(e.get("t_ns") or 0), int(e.get("wire_ns") or 0), \
            str(e.get("origin") or "")
    return names.cc_name(e.cc), e.rc, e.t_ns, e.wire_ns, e.origin


class _Acc:
    __slots__ = ("count", "first", "last", "lost", "origins")

    def __init__(self) -> None:
        self.count, self.lost, self.last = 0, 0, 0
        self.first: int | None = None
        self.origins: set[str] = set()

    def add(self, t: int, w: int, origin: str) -> None:
        self.count += 1
        self.lost += w
        self.first = t if self.first is None else min(self.first, t)
        self.last = max(self.last, t)
        self.origins.add(origin)


class Detector:
    """Incremental: feed events as they come (the live recorder, a proxy, the kernel probes),
    ask for :meth:`patterns` whenever. Memory is one accumulator per (command, rc) seen."""

    def __init__(self, repeat_min: int = REPEAT_MIN, churn_min: int = CHURN_MIN) -> None:
        self.repeat_min, self.churn_min = repeat_min, churn_min
        self.fails: dict[tuple[str, int], _Acc] = {}
        self.slots: dict[int, _Acc] = {}
        self.gap = _Acc()
        self.starts = _Acc()
        self.pcr_changed = _Acc()
        self.pcr_watch = attribution.PcrChangeWatch()
        self.seen = 0
        self._sas = names.cc_name(CC_START_AUTH_SESSION)

    def add(self, events: Iterable[Event | dict[str, Any]]) -> None:
        for e in events:
            self.seen += 1
            if (e.get("expected") if isinstance(e, dict) else getattr(e, "expected", False)):
                continue  # a TPM error its sender expects (the resource manager's 0x910): no pattern
            cmd, rc, t, w, origin = _fields(e)
            if rc == attribution.RC_PCR_CHANGED or cmd in _WATCHED:
                self.pcr_watch.feed(attribution.exchange_of(e))
                if rc == attribution.RC_PCR_CHANGED:
                    self.pcr_changed.add(t, w, origin)
            # tpmtop's own per-command and saved workloads start sessions on purpose: that is
            # the strategy being measured, not a failure pattern.
            if cmd == self._sas and rc == 0 and origin != "workload":
                self.starts.add(t, w, origin)
            if not rc:
                continue
            base = names.rc_base(rc)
            if base in _SLOT_RCS:
                self.slots.setdefault(base, _Acc()).add(t, w, origin)
            elif base == _GAP_RC:
                self.gap.add(t, w, origin)
            self.fails.setdefault((cmd, rc), _Acc()).add(t, w, origin)

    def patterns(self) -> list[Pattern]:
        """Every pattern so far, worst (most time lost) first."""
        out: list[Pattern] = []
        for rc, a in self.slots.items():
            assert a.first is not None  # an accumulator is made with its first add
            out.append(Pattern("slots-full", f"TPM slots full ({_SLOT_RCS[rc]} 0x{rc:x})", a.count, a.lost,
                               a.first, a.last, None, rc, names.rc_hint(rc), sorted(a.origins)))
        gap = self.gap
        if gap.count:
            assert gap.first is not None  # set by the first add
            out.append(Pattern("context-gap", "context gap (TPM_RC_CONTEXT_GAP 0x901)", gap.count, gap.lost,
                               gap.first, gap.last, None, _GAP_RC, names.rc_hint(_GAP_RC), sorted(gap.origins)))
        for (cmd, rc), a in self.fails.items():
            base = names.rc_base(rc)
            if a.count < self.repeat_min or base in _SLOT_RCS or base == _GAP_RC:
                continue
            assert a.first is not None  # an accumulator is made with its first add
            short = cmd.removeprefix("TPM2_CC_")
            out.append(Pattern("repeated-failure", f"{short} failing with 0x{rc:x} ({names.rc_text(rc)})",
                               a.count, a.lost, a.first, a.last, cmd, rc, names.rc_hint(rc), sorted(a.origins)))
        pc = self.pcr_changed
        if pc.count:
            assert pc.first is not None  # set by the first add
            last = self.pcr_watch.breakages[-1] if self.pcr_watch.breakages else None
            out.append(Pattern("pcr-changed", "policy session broken by a PCR extend (TPM_RC_PCR_CHANGED 0x128)",
                               pc.count, pc.lost, pc.first, pc.last, None, attribution.RC_PCR_CHANGED,
                               last.text() if last is not None else names.rc_hint(attribution.RC_PCR_CHANGED),
                               sorted(pc.origins)))
        st = self.starts
        if st.count >= self.churn_min:
            assert st.first is not None  # set by the first add
            out.append(Pattern("session-churn", "session re-created many times (StartAuthSession)", st.count,
                               st.lost, st.first, st.last, self._sas, None,
                               "keep the session (continueSession) or context-save it instead of starting a new one",
                               sorted(st.origins)))
        out.sort(key=lambda p: (-p.lost_ns, -p.count))
        return out


def detect(events: Iterable[Event | dict[str, Any]], repeat_min: int = REPEAT_MIN,
           churn_min: int = CHURN_MIN) -> list[Pattern]:
    """Every pattern in ``events`` (any iterable of Events or event dicts), worst first."""
    d = Detector(repeat_min, churn_min)
    d.add(events)
    return d.patterns()


def detect_in_capture(path: str | os.PathLike[str]) -> list[Pattern]:
    """The patterns of a capture file's events (none when it was written without --events).
    The events stream past (a capture may hold a million): only the detector's counts stay."""
    return summary_and_patterns(path)[1]


def summary_and_patterns(path: str | os.PathLike[str], on_op: Callable[[OpLine], None] | None = None,
                         ) -> tuple[dict[str, Any], list[Pattern]]:
    """In one pass over the file: the capture without its events and ops (as
    :func:`tpmtop.capture.load_summary` gives it) and the patterns of its events. ``tpmtop
    compare`` read each capture twice (summary, then patterns): half its time on a big one.
    ``on_op``: called with each operation (a typed line, tpmtop.capture.spec.OpLine)."""
    from tpmtop.capture import CaptureReader

    d = Detector()

    def one(e: EventLine) -> None:  # a typed line (tpmtop.capture.spec.EventLine)
        d.add(({"command": e.command, "rc": e.rc, "t_ns": e.t_ns, "wire_ns": e.wire_ns, "origin": e.origin},))

    r = CaptureReader(path, on_event=one, on_op=on_op or (lambda _o: None), typed=True)
    doc = r.read()
    doc["_n_events"] = r.n_events
    return doc, d.patterns()


def summary_lines(patterns: list[Pattern]) -> list[str]:
    return [f"pattern: {p.line()}" for p in patterns]
