"""``systemd-analyze`` totals: where the boot time went, by phase."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

# systemd's format_timespan() units.
_UNITS = {"y": Decimal(31557600), "month": Decimal(2629800), "w": Decimal(604800), "d": Decimal(86400),
          "h": Decimal(3600), "min": Decimal(60), "s": Decimal(1), "ms": Decimal("0.001"),
          "us": Decimal("0.000001"), "µs": Decimal("0.000001")}
_PART = re.compile(r"(\d+(?:\.\d+)?)(month|min|ms|us|µs|y|w|d|h|s)(?![a-z])")
_TERM = re.compile(r"^\s*(.+?)\s*\((\w+)\)\s*$")
_TARGET = re.compile(r"^(\S+) reached after (.+?) in userspace\.?\s*$")


class SystemdAnalyzeError(ValueError):
    pass


def parse_timespan(text: str) -> Decimal:
    """``1min 2.004s`` → 62.004 (seconds). Raises on anything else."""
    text = text.strip()
    pos, total, seen = 0, Decimal(0), False
    for m in _PART.finditer(text):
        if text[pos:m.start()].strip():
            break
        total += Decimal(m.group(1)) * _UNITS[m.group(2)]
        pos, seen = m.end(), True
    if not seen or text[pos:].strip():
        raise SystemdAnalyzeError(f"not a systemd time span: {text!r}")
    return total


@dataclass
class BootTimes:
    phases: dict[str, Decimal] = field(default_factory=dict)  # firmware, loader, kernel, initrd, userspace
    phase_text: dict[str, str] = field(default_factory=dict)
    total: Decimal | None = None
    total_text: str | None = None
    target: str | None = None
    target_after: Decimal | None = None

    def to_json(self) -> dict:
        return {"phases_s": {k: float(v) for k, v in self.phases.items()},
                "phases_text": self.phase_text, "total_s": float(self.total) if self.total is not None else None,
                "total_text": self.total_text, "target": self.target,
                "target_after_s": float(self.target_after) if self.target_after is not None else None}


def parse_systemd_analyze(text: str) -> BootTimes:
    bt = BootTimes()
    found = False
    for line in text.splitlines():
        line = line.rstrip()
        if line.startswith("Startup finished in "):
            body = line[len("Startup finished in "):]
            terms, eq, total = body.partition("=")
            if not eq:
                raise SystemdAnalyzeError(f"no '=' total in: {line!r}")
            for term in terms.split(" + "):
                m = _TERM.match(term)
                if not m:
                    raise SystemdAnalyzeError(f"cannot read {term!r} in: {line!r}")
                bt.phases[m.group(2)] = parse_timespan(m.group(1))
                bt.phase_text[m.group(2)] = m.group(1)
            bt.total, bt.total_text = parse_timespan(total), total.strip()
            found = True
            continue
        m = _TARGET.match(line)
        if m:
            bt.target, bt.target_after = m.group(1), parse_timespan(m.group(2))
    if not found:
        first = next((ln for ln in text.splitlines() if ln.strip()), "(empty)")
        raise SystemdAnalyzeError(f"no 'Startup finished' line; systemd-analyze said: {first.strip()}")
    return bt
