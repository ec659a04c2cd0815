"""``systemd-analyze`` totals: where the boot time went, by phase."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

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

    def to_json(self) -> dict[str, Any]:
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


# -- blame and critical-chain: systemd's own TPM work ------------------------------------------
# Units that talk to the TPM or wait for it. systemd-cryptsetup@ only when it unlocks with the
# TPM (tpm2-device= in crypttab): its name does not say, so it is listed as "may".
TPM_UNITS = (
    (re.compile(r"^systemd-tpm2-setup(-early)?\.service$"), "creates the SRK / NvPCRs (systemd-tpm2-setup)"),
    (re.compile(r"^systemd-tpm2-clear\.service$"), "asks the firmware to clear the TPM"),
    (re.compile(r"^systemd-pcrphase[\w-]*\.service$"), "extends a boot phase into PCR 11 (systemd-pcrextend)"),
    (re.compile(r"^systemd-pcr(?:extend|fs|machine|product|nvdone|lock)[\w@\\.-]*\.service$"),
     "measures into a PCR (systemd-pcrextend)"),
    (re.compile(r"^systemd-cryptsetup@.*\.service$"), "unlocks a disk (with the TPM when crypttab says tpm2-device=)"),
    (re.compile(r"^dev-tpmrm?\d+\.device$"), "waits for the TPM device node"),
    (re.compile(r"^tpm2\.target$"), "waits for the TPM driver (tpm2.target)"),
    (re.compile(r"^tpm2-abrmd\.service$"), "the TPM2 access broker"),
    (re.compile(r"^(tcsd|trousers)\.service$"), "the TPM 1.2 daemon (TrouSerS)"),
    (re.compile(r"^(fapi|tpm2-tss|tpm-udev|tpm2-fapi)[\w-]*\.service$"), "tpm2-tss set-up"),
    (re.compile(r"^systemd-measure[\w@-]*\.service$"), "measures into a PCR"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CHAIN_HEAD = re.compile(r"^The ?time ?(when|after) ?(the ?)?unit|^The ?time ?the ?unit ?(took|takes) ?to ?start")
_CHAIN_ROW = re.compile(r"^(?P<indent>[ │|]*)(?:[└├`|]-+|[└├]─)?(?P<unit>[^\s└├─│]\S*?)"
                        r"(?:\s+@(?P<at>[^+]*?))?(?:\s+\+(?P<took>.+?))?\s*$")


def tpm_unit_role(unit: str) -> str | None:
    for rx, role in TPM_UNITS:
        if rx.match(unit):
            return role
    return None


@dataclass
class UnitTime:
    unit: str
    took: Decimal | None = None  # blame / critical-chain `+` time
    took_text: str | None = None
    at: Decimal | None = None  # critical-chain `@`: when it became active (since userspace began)
    on_critical_path: bool | None = None  # None when no critical-chain was read
    role: str | None = None
    chain_took: Decimal | None = None  # critical-chain `+`: its own start-up time on the path
    chain_took_text: str | None = None
    at_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "role": self.role,
                "took_s": float(self.took) if self.took is not None else None, "took_text": self.took_text,
                "critical_chain_took_s": float(self.chain_took) if self.chain_took is not None else None,
                "active_at_s": float(self.at) if self.at is not None else None,
                "on_critical_path": self.on_critical_path}


def _fail(path: str, lineno: int, why: str, line: str) -> NoReturn:
    from tpmtop.boot.badline import bad_line

    raise bad_line(path, lineno, why, line)


def parse_blame(text: str, path: str = "systemd-analyze blame") -> dict[str, UnitTime]:
    """``  4.212s systemd-tpm2-setup.service`` (right-aligned time, ``1min 30.003s`` forms)."""
    out: dict[str, UnitTime] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).strip()
        if not line:
            continue
        span, _, unit = line.rpartition(" ")
        if not span or not unit:
            _fail(path, lineno, "not a `systemd-analyze blame` line (time, then unit)", raw)
        try:
            took = parse_timespan(span)
        except SystemdAnalyzeError:
            _fail(path, lineno, "not a `systemd-analyze blame` line (time, then unit)", raw)
        out.setdefault(unit, UnitTime(unit, took, span.strip(), role=tpm_unit_role(unit)))
    return out


def parse_critical_chain(text: str, path: str = "systemd-analyze critical-chain") -> list[UnitTime]:
    """The chain, target first: ``unit @at +took`` per line under a tree of ``└─``."""
    chain: list[UnitTime] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).rstrip()
        if not line.strip() or _CHAIN_HEAD.match(line.strip()):
            continue
        m = _CHAIN_ROW.match(line)
        if not m or (not chain and m.group("indent")):
            _fail(path, lineno, "not a `systemd-analyze critical-chain` line", raw)
        at = took = None
        try:
            if m.group("at"):
                at = parse_timespan(m.group("at"))
            if m.group("took"):
                took = parse_timespan(m.group("took"))
        except SystemdAnalyzeError:
            _fail(path, lineno, "unreadable time in a critical-chain line", raw)
        took_text = m.group("took").strip() if m.group("took") else None
        chain.append(UnitTime(m.group("unit"), took, took_text, at, True, tpm_unit_role(m.group("unit")), took,
                              took_text,
                              m.group("at").strip() if m.group("at") else None))
    if not chain:
        _fail(path, 1, "no unit in `systemd-analyze critical-chain` output", text.strip()[:60] or "(empty)")
    return chain


def tpm_units(blame: dict[str, UnitTime] | None, chain: list[UnitTime] | None) -> list[UnitTime]:
    """The TPM units either output names, with their time and whether they are on the path."""
    on_path = {u.unit: u for u in chain or []}
    out: dict[str, UnitTime] = {}
    for u in (blame or {}).values():
        if u.role is None:
            continue
        c = on_path.get(u.unit)
        out[u.unit] = UnitTime(u.unit, u.took, u.took_text, c.at if c else None,
                               (c is not None) if chain is not None else None, u.role,
                               c.chain_took if c else None, c.chain_took_text if c else None,
                               c.at_text if c else None)
    for c in chain or []:
        if c.role is not None and c.unit not in out:
            out[c.unit] = c
    return sorted(out.values(), key=lambda u: (-(u.took or 0), u.unit))
