"""What a captured workload would cost on other chips and in other session modes (issue 56).

A capture (bench, proxy, run, kernel, an imported pcap, the lab: every ``tpmtop.capture/1``)
is reduced to a :class:`Workload`:

- its PCR_Extends (N): the kernel's extends, re-timed by session mode with the commands each
  mode sends (``tpmtop.sessions.modes.MODE_INFO``: none E0; per-command L + S + F + Eh;
  reuse L + S + F once, then Eh; saved L + S + F once, then L + Eh + C);
- the session set-up commands the capture spent on its extends (ContextLoad,
  StartAuthSession, FlushContext, ContextSave of an extend operation): replaced by each
  mode's own, so they are counted, not priced;
- every other command: priced by chip as it was captured (with or without an HMAC session),
  the same in every mode.

Each chip prices each command from its profile; a command a profile has no figure for is
*uncovered*: counted and named per chip, left out of the TPM time and so out of the ratios
(both sides of a ratio leave out the same commands: the non-extend ones are the same in every
mode). A mode whose own commands a chip does not cover gets no total and no ratio.

No Textual here; the CLI (tpmtop.cli.whatif) prints what :func:`whatif` returns.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tpmtop.errors import UsageError
from tpmtop.profiles.profile import ANY, HMAC_SESSION, NO_SESSION, Profile, has_hmac_session
from tpmtop.sessions.modes import MODE_INFO, MODES, OP_COMMANDS, OPS, Mode, Op
from tpmtop.tpm import names

SCHEMA_ID = "tpmtop.whatif/1"
# The projection's letters (tpmtop.boot.projection.COMPONENTS) as (command, session variant).
LETTERS: dict[str, tuple[str, str]] = {
    "E0": ("PCR_Extend", NO_SESSION), "Eh": ("PCR_Extend", HMAC_SESSION), "L": ("ContextLoad", ANY),
    "S": ("StartAuthSession", ANY), "F": ("FlushContext", ANY), "C": ("ContextSave", ANY),
}
EXTEND = "PCR_Extend"
SETUP = frozenset({"ContextLoad", "StartAuthSession", "FlushContext", "ContextSave"})


@dataclass
class Workload:
    """What a capture's TPM did, as the what-if prices it."""

    path: str
    basis: str  # "events" (per command) or "runs" (the runs' per-command counts)
    extends: int = 0
    replaced: Counter[str] = field(default_factory=Counter)  # the extends' own session set-ups
    # (command name, cc or None, variant) -> count; the name as the capture spells it (short)
    others: Counter[tuple[str, int | None, str]] = field(default_factory=Counter)

    @property
    def commands(self) -> int:
        return self.extends + sum(self.replaced.values()) + sum(self.others.values())

    def to_json(self) -> dict[str, Any]:
        return {"capture": self.path, "basis": self.basis, "commands": self.commands, "extends": self.extends,
                "replaced_setup": dict(self.replaced),
                "others": [{"command": n, "session": v.replace("_", " "), "count": c}
                           for (n, _cc, v), c in sorted(self.others.items())]}


def _short(command: str) -> tuple[str, int | None]:
    cc = names.cc_from_name(command)
    return (names.cc_short(cc) if cc is not None else command.removeprefix("TPM2_CC_")), cc


class _Counter:
    def __init__(self, wl: Workload) -> None:
        self.wl = wl
        self.hmac_of: dict[bytes, bool] = {}
        self.short_of: dict[str, tuple[str, int | None]] = {}

    def add(self, command: str, op: str | None, hmac: bool, count: int = 1) -> None:
        got = self.short_of.get(command)
        if got is None:
            got = self.short_of[command] = _short(command)
        short, cc = got
        if short == EXTEND:
            self.wl.extends += count
        elif short in SETUP and op == "extend":
            self.wl.replaced[short] += count
        else:
            self.wl.others[(short, cc, HMAC_SESSION if hmac else NO_SESSION)] += count

    def event(self, e: Any) -> None:  # a typed event line (tpmtop.capture.spec.EventLine)
        raw = bytes(e.sessions)
        hmac = self.hmac_of.get(raw)
        if hmac is None:
            sess = [(int(s["handle"], 16), s.get("attrs", 0)) for s in json.loads(raw)
                    if isinstance(s, dict) and isinstance(s.get("handle"), str)]
            hmac = self.hmac_of[raw] = has_hmac_session(sess)
            if len(self.hmac_of) > 10_000:  # ever-new session handles must not grow memory
                self.hmac_of.clear()
        self.add(e.command, e.op, hmac)


def read_workload(path: str) -> Workload:
    """Streamed (a million-event capture is never held as dicts). UsageError (exit 2) for a
    file that is not a capture, or a capture without a command."""
    from tpmtop.capture import CaptureReader

    wl = Workload(path, "events")
    counter = _Counter(wl)
    reader = CaptureReader(path, on_event=counter.event, on_op=lambda _o: None, typed=True)
    doc = reader.read()
    if not reader.n_events:
        wl.basis = "runs"
        _from_runs(doc.get("runs") or [], counter)
    if not wl.commands:
        raise UsageError(f"{path}: a capture with no TPM commands: nothing to re-price")
    return wl


def _from_runs(runs: list[Any], counter: _Counter) -> None:
    """Without events: the runs' per-command counts. An observed run (tpmtop kernel, proxy)
    holds every command its narrower runs hold, so when there is one only those count."""
    observed = [r for r in runs if isinstance(r, dict) and r.get("engine") == "observed"]
    for run in observed or runs:
        if not isinstance(run, dict):
            continue
        op, mode = run.get("op"), run.get("mode")
        own = OP_COMMANDS.get(Op(op)) if op in OPS else None
        for command, summ in (run.get("commands") or {}).items():
            count = summ.get("count") if isinstance(summ, dict) else None
            if not isinstance(count, int) or count <= 0:
                continue
            short, _cc = _short(command)
            # the kernel's own set-ups (observed, mode "kernel") are its extends'
            setup_op = "extend" if mode == "kernel" or op == "extend" else op
            hmac = short == own and mode not in (None, "none", "kernel")
            counter.add(command, setup_op, hmac, count)


# -- pricing -----------------------------------------------------------------------------------
@dataclass
class Cell:
    """One chip in one mode."""

    chip: str
    mode: str
    total_us: float | None  # TPM time of the covered commands; None: the mode's own commands are uncovered
    per_extend_us: float | None  # what each extend costs after the mode's once-per-boot set-up
    once_us: float | None
    ratio: float | None = None  # total against this chip's "none"
    uncovered: dict[str, int] = field(default_factory=dict)  # command -> count not priced

    @property
    def uncovered_count(self) -> int:
        return sum(self.uncovered.values())

    def to_json(self) -> dict[str, Any]:
        return {"chip": self.chip, "mode": self.mode,
                "tpm_s": None if self.total_us is None else self.total_us / 1e6,
                "per_extend_ms": None if self.per_extend_us is None else self.per_extend_us / 1e3,
                "once_ms": None if self.once_us is None else self.once_us / 1e3,
                "ratio_vs_none": self.ratio, "uncovered_commands": self.uncovered_count,
                "uncovered": dict(sorted(self.uncovered.items()))}


def letter_us(profile: Profile, letter: str) -> float | None:
    cmd, variant = LETTERS[letter]
    f = profile.figure(names.cc_from_name(cmd), variant)
    return None if f is None else f.median_us


def price(wl: Workload, profile: Profile, mode: str) -> Cell:
    info = MODE_INFO[Mode(mode)]
    uncovered: Counter[str] = Counter()
    each = {x: letter_us(profile, x) for x in info.each}
    once = {x: letter_us(profile, x) for x in info.once} if wl.extends else {}
    missing = [x for x, v in (each | once).items() if v is None]
    per_extend = once_us = ext_us = None
    if missing:
        for x in info.each:
            if each[x] is None:
                uncovered[LETTERS[x][0]] += wl.extends
        for x in once:
            if once[x] is None:
                uncovered[LETTERS[x][0]] += 1
    else:
        per_extend = sum(v for v in each.values() if v is not None)
        once_us = sum(v for v in once.values() if v is not None)
        ext_us = once_us + wl.extends * per_extend
    other_us = 0.0
    for (short, cc, variant), count in wl.others.items():
        f = profile.figure(cc, variant)
        if f is None:
            uncovered[short] += count
        else:
            other_us += f.median_us * count
    total = None if missing and wl.extends else (ext_us or 0.0) + other_us
    return Cell(profile.name, mode, total, per_extend if wl.extends else None, once_us if wl.extends else None,
                uncovered=dict(uncovered))


@dataclass
class WhatIf:
    workload: Workload
    chips: list[Profile]
    modes: list[str]
    cells: list[Cell]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_ID, "workload": self.workload.to_json(),
                "chips": [{"name": p.name, "model": p.chip.get("model"), "origin": p.origin} for p in self.chips],
                "modes": self.modes, "cells": [c.to_json() for c in self.cells],
                "rules": RULES}


RULES = ("TPM time is the sum of each command's figure in the chip's profile (its median, the "
         "session variant as captured); PCR_Extends are re-timed by mode with the commands the mode adds, "
         "replacing the session set-ups the capture spent on them; per extend is the cost of each extend "
         "after the mode's once-per-boot set-up; uncovered commands (no figure in the profile) are counted, "
         "left out of the TPM time and of the ratio against none.")


def whatif(wl: Workload, chips: Iterable[Profile], modes: Iterable[str]) -> WhatIf:
    chips, modes = list(chips), list(modes)
    cells = []
    for p in chips:
        none = price(wl, p, "none")
        for m in modes:
            c = none if m == "none" else price(wl, p, m)
            if c.total_us is not None and none.total_us:
                c.ratio = c.total_us / none.total_us
            cells.append(c)
    return WhatIf(wl, chips, modes, cells)


def parse_choice(text: str, allowed: Mapping[str, Any] | tuple[str, ...], what: str) -> list[str]:
    """``a,b`` or ``all`` -> the names, in the order given; UsageError names a bad one."""
    names_ = list(allowed)
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"no {what} given (choose from {', '.join(names_)}, or all)")
    if items == ["all"]:
        return names_
    for x in items:
        if x not in names_:
            raise UsageError(f"unknown {what} '{x}' (choose from {', '.join(names_)}, or all)")
    return list(dict.fromkeys(items))


def all_modes() -> tuple[str, ...]:
    return MODES


def projection_costs(profile: Profile) -> dict[str, Any]:
    """The profile's figures as ``tpmtop boot``'s projection letters (E0, L, S, F, Eh, C), each
    saying which profile and whether published or estimated; a letter it has no figure for
    is left out (the projection then says which command it lacks)."""
    from decimal import Decimal

    from tpmtop.boot.projection import Cost

    out: dict[str, Any] = {}
    for letter, (cmd, variant) in LETTERS.items():
        f = profile.figure(names.cc_from_name(cmd), variant)
        if f is not None:
            # the derivation is long: `tpmtop profile show NAME` prints it, the report names it
            out[letter] = Cost(Decimal(repr(f.median_us)), f"chip profile {profile.name} ({f.source.get('kind')}; "
                                                           f"tpmtop profile show {profile.name})")
    return out


def letters_us(profile: Profile) -> dict[str, float]:
    """The profile's figures as the projection's letters, in µs (the dashboard's ``p``)."""
    return {x: us for x in LETTERS if (us := letter_us(profile, x)) is not None}
