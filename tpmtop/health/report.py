"""A health report: the verdicts in area order, as text or as the ``tpmtop.health/1`` JSON."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from tpmtop.health.verdicts import Area, Kind, Level, Verdict, exit_status
from tpmtop.textsafe import safe

SCHEMA_ID = "tpmtop.health/1"
EVIDENCE_SHOWN = 8  # lines of evidence per verdict in the text report (--json has them all)
WIDTH = 80  # the text report's columns, whatever $COLUMNS says (as `tpmtop pcrs`): it is read in logs and mail
EVIDENCE_LINES = 3  # wrapped lines one evidence item may take before it is cut with " …" (--json has it whole)
_INDENT = " " * 23  # under the verdict's text: "  MARK  label          "


@dataclass
class HealthReport:
    tpm: dict[str, Any]  # what TPM was asked ({"tcti", "simulated"}), or {"reason"} when none
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # sections skipped, and why
    # False when this machine's set-up, driver and IMA were not judged (a simulator, or a TPM
    # over a TCTI, without --root): "healthy" then speaks for the TPM asked, and says so
    machine_judged: bool = True

    @property
    def exit_status(self) -> int:
        return exit_status(self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_ID, "tpm": self.tpm, "verdicts": [v.to_json() for v in self.verdicts],
                "problems": sum(1 for v in self.verdicts if v.level.problem), "notes": self.notes,
                "machine_judged": self.machine_judged, "exit_status": self.exit_status}


_MARK = {Level.OK: "ok", Level.INFO: "info", Level.UNKNOWN: "?", Level.WARN: "WARN", Level.FAIL: "FAIL"}


def _wrap(text: str, first: str, max_lines: int | None = None) -> list[str]:
    """*text* within :data:`WIDTH` columns, *first* before its first line and :data:`_INDENT`
    before the rest; a word longer than a line is broken (a SHA-256, a path)."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=_INDENT, break_on_hyphens=False,
                         max_lines=max_lines, placeholder=" …") or [first.rstrip()]


def not_judged(rep: HealthReport) -> list[Verdict]:
    """The verdicts whose source could not be read (``?``): what "no problem found" does not cover."""
    return [v for v in rep.verdicts if v.level is Level.UNKNOWN]


def summary(rep: HealthReport) -> str:
    """The last line: "healthy" only when nothing went unjudged; otherwise it says what was not
    judged and why, the TPM first (a verdict is never better than its evidence)."""
    problems = sum(1 for v in rep.verdicts if v.level.problem)
    unread = sorted(not_judged(rep), key=lambda v: v.kind is not Kind.TPM)
    gaps = "; not judged: " + ", ".join(
        ("the TPM" if v.kind is Kind.TPM else v.kind.label) + f" ({v.text})" for v in unread) if unread else ""
    if problems:
        return f"{problems} problem(s) found{gaps}"
    if unread:
        return f"no problem found in what could be read{gaps}"
    if not rep.machine_judged:
        return "healthy: no problem found in the TPM asked (set-up, driver and IMA not judged: see the note)"
    return "healthy: no problem found"


def render_text(rep: HealthReport) -> str:
    out = []
    t = rep.tpm
    out += textwrap.wrap(f"TPM  {safe(t.get('tcti') or t.get('reason') or '-')}"
                         + ("  (simulated)" if t.get("simulated") else ""), WIDTH, subsequent_indent="     ",
                         break_on_hyphens=False)
    for area in Area:
        vs = [v for v in rep.verdicts if v.kind.area is area]
        if not vs:
            continue
        out.append("")
        out.append(area.value)
        for v in vs:
            out += _wrap(safe(v.text), f"  {_MARK[v.level]:<4}  {v.kind.label:<14} ")
            shown = v.evidence[:EVIDENCE_SHOWN]
            for e in shown:
                out += _wrap(safe(e), _INDENT, EVIDENCE_LINES)
            if len(v.evidence) > len(shown):
                out.append(f"{_INDENT}… {len(v.evidence) - len(shown)} more (--json has them all)")
    for n in rep.notes:
        out.append("")
        out += textwrap.wrap(f"note: {safe(n)}", WIDTH, subsequent_indent="      ", break_on_hyphens=False)
    out.append("")
    out += textwrap.wrap(safe(summary(rep)), WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(out)
