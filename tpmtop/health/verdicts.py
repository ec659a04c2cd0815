"""The closed sets of ``tpmtop health``: how bad a finding is (:class:`Level`), what it is about
(:class:`Kind`, grouped into :class:`Area`), and one finding with its evidence (:class:`Verdict`).
The report, the JSON schema, the exporter and the dashboard's panel all derive from these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any


class Level(StrEnum):
    """Ordered from good to bad (:attr:`rank`). ``unknown``: the source could not be read (a
    missing file, a permission): said in one line, never a failure of the rest."""

    OK = "ok"
    INFO = "info"
    UNKNOWN = "unknown"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def problem(self) -> bool:
        """Whether this level makes ``tpmtop health`` exit 1."""
        return self in (Level.WARN, Level.FAIL)


_RANK = {lv: i for i, lv in enumerate(Level)}


class Area(StrEnum):
    LOCKOUT = "lockout"
    STATE = "tpm state"
    SETUP = "setup"
    DRIVER = "driver"
    IMA = "ima"


class Kind(Enum):
    """What a verdict is about: (its id in JSON, its area, its label in the text report)."""

    TPM = ("tpm", Area.LOCKOUT, "TPM")
    LOCKOUT = ("lockout", Area.LOCKOUT, "lockout")
    AUTH_FAILURES = ("auth-failures", Area.LOCKOUT, "auth failures")
    FLAGS = ("flags", Area.STATE, "flags")
    SELFTEST = ("self-test", Area.STATE, "self-test")
    CLOCK = ("clock", Area.STATE, "clock")
    EK_CERTS = ("ek-certs", Area.STATE, "EK certs")
    NV = ("nv", Area.STATE, "NV")
    SLOTS = ("slots", Area.STATE, "slots")
    ADVISORIES = ("advisories", Area.STATE, "advisories")
    DEVICE = ("device", Area.SETUP, "device")
    HOLDERS = ("holders", Area.SETUP, "held by")
    HMAC_BUILD = ("hmac-build", Area.SETUP, "HMAC build")
    HMAC_MESSAGES = ("hmac-messages", Area.SETUP, "HMAC messages")
    PCR_INTEGRITY = ("pcr-integrity", Area.SETUP, "PCR integrity")
    INTERRUPTS = ("interrupts", Area.DRIVER, "interrupts")
    TIMEOUTS = ("timeouts", Area.DRIVER, "time-outs")
    CMD_TIMEOUTS = ("cmd-timeouts", Area.DRIVER, "kernel waits")
    HWRNG = ("hwrng", Area.DRIVER, "hwrng")
    IMA = ("ima", Area.IMA, "IMA")

    def __init__(self, ident: str, area: Area, label: str) -> None:
        self.ident = ident
        self.area = area
        self.label = label


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    level: Level
    text: str  # one line: what it means
    evidence: tuple[str, ...] = ()  # the lines, files and figures it rests on
    data: tuple[tuple[str, object], ...] = ()  # figures for --json (and the exporter), in order

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.ident, "area": self.kind.area.value, "level": self.level.value,
                "text": self.text, "evidence": list(self.evidence), "data": dict(self.data)}


def unknown(kind: Kind, why: str) -> Verdict:
    """A source that could not be read: one line saying why (``needs root: …`` and the like)."""
    return Verdict(kind, Level.UNKNOWN, why)


def tpm_required_unjudged(verdicts: list[Verdict]) -> bool:
    """Whether the TPM was meant to be judged and was not (no TPM on this machine, no permission
    to open it): its verdict is ``unknown`` with ``required`` in its data. A TPM left out by
    choice (``--root`` on a saved tree) is not."""
    return any(v.kind is Kind.TPM and v.level is Level.UNKNOWN and dict(v.data).get("required") is True
               for v in verdicts)


def exit_status(verdicts: list[Verdict]) -> int:
    """0 healthy, 1 a problem found (a warning or a failure) or the TPM not judged though it was
    this machine's to judge (exit 1 is "the TPM or the system failed": a script's ``tpmtop health
    && …`` must not pass on a machine whose TPM is missing)."""
    return 1 if any(v.level.problem for v in verdicts) or tpm_required_unjudged(verdicts) else 0
