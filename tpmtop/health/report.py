"""A health report: the verdicts in area order, as text or as the ``tpmtop.health/1`` JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.health.verdicts import Area, Level, Verdict, exit_status
from tpmtop.textsafe import safe

SCHEMA_ID = "tpmtop.health/1"
EVIDENCE_SHOWN = 8  # lines of evidence per verdict in the text report (--json has them all)


@dataclass
class HealthReport:
    tpm: dict[str, Any]  # what TPM was asked ({"tcti", "simulated"}), or {"reason"} when none
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # sections skipped, and why

    @property
    def exit_status(self) -> int:
        return exit_status(self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_ID, "tpm": self.tpm, "verdicts": [v.to_json() for v in self.verdicts],
                "problems": sum(1 for v in self.verdicts if v.level.problem), "notes": self.notes,
                "exit_status": self.exit_status}


_MARK = {Level.OK: "ok", Level.INFO: "info", Level.UNKNOWN: "?", Level.WARN: "WARN", Level.FAIL: "FAIL"}


def render_text(rep: HealthReport) -> str:
    out = []
    t = rep.tpm
    out.append(f"TPM  {safe(t.get('tcti') or t.get('reason') or '-')}"
               + ("  (simulated)" if t.get("simulated") else ""))
    for area in Area:
        vs = [v for v in rep.verdicts if v.kind.area is area]
        if not vs:
            continue
        out.append("")
        out.append(area.value)
        for v in vs:
            out.append(f"  {_MARK[v.level]:<4}  {v.kind.label:<14} {safe(v.text)}")
            shown = v.evidence[:EVIDENCE_SHOWN]
            out += [f"        {' ' * 14} {safe(e)}" for e in shown]
            if len(v.evidence) > len(shown):
                out.append(f"        {' ' * 14} … {len(v.evidence) - len(shown)} more (--json has them all)")
    for n in rep.notes:
        out.append("")
        out.append(f"note: {safe(n)}")
    problems = sum(1 for v in rep.verdicts if v.level.problem)
    out.append("")
    out.append(f"{problems} problem(s) found" if problems else "healthy: no problem found")
    return "\n".join(out)
