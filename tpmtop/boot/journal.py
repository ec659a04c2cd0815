"""The boot's journal (``journalctl -b -o short-monotonic``): TPM and TSS errors, grouped.

A line is ``[    5.123456] host ident[pid]: message`` (seconds since boot, 6 decimals, the
seconds right-aligned in 5 columns and wider when needed); journalctl adds ``-- Boot … --`` /
``-- No entries --`` / ``-- Logs begin at … --`` banners, and a multi-line message continues on
lines indented to the message column.

What counts as a TPM error (formats from their sources):
- tpm2-tss's logger: ``ERROR:esys:src/tss2-esys/api/Esys_Unseal.c:98:Esys_Unseal() Esys Finish
  ErrorCode (0x00000128)`` and the ``WARNING:esys:…Received TPM Error`` before it;
- systemd's TPM code: ``Failed to unseal secret using TPM2: …``, ``A PCR value changed during
  the TPM2 policy session, restarting HMAC key unsealing (29 tries left).``, and others naming
  TPM2 with a failure;
- the kernel's TPM driver messages (see :mod:`tpmtop.boot.dmesg`).

Repeats are grouped by who logged them and the message with its numbers taken out (response
codes kept): a retry loop shows as one row with its count, first and last time, and the time
between tries — the time it cost the boot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn

from tpmtop.boot.badline import bad_line
from tpmtop.boot.dmesg import KIND_TEXT, classify

_LINE = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\]\s+(?P<host>\S+)\s+"
                   r"(?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")
_BANNER = re.compile(r"^-- .* --$|^-- No entries --$")
_TSS = re.compile(r"^(?P<level>ERROR|WARNING):(?P<module>[\w-]+):(?P<src>[^:\s]+):(?P<line>\d+):"
                  r"(?P<func>\w+)\(\)\s*(?P<rest>.*)$")
_TPM_WORD = re.compile(r"\bTPM2?\b|\btpm2?[_-]|\bTSS2?\b|\besys\b|tss2|tpm2-|TPM2_", re.I)
_FAILED = re.compile(r"(?i)\bfail|\berror\b|\bretry|\brestarting\b|\btimed? ?out\b|\bunable\b|\bcannot\b|\bcould not\b|"
                     r"\bnot (?:found|available|supported)\b")
_RC_HEX = (re.compile(r"ErrorCode \((?P<rc>0x[0-9a-fA-F]+)\)"),
           re.compile(r"\b(?:rc|RC|Error Code)[=: ]+(?P<rc>0x[0-9a-fA-F]+)"),
           re.compile(r"\(\s*(?P<rc>0x[0-9a-fA-F]{3,8})\s*\)"), re.compile(r"\bTPM error (?P<rc>0x[0-9a-fA-F]+)"))
# Programs whose every failure is a TPM failure: tpm2-tools (tpm2_*), tpm2-abrmd, TrouSerS.
TPM_PROGRAMS = ("tpm2_", "tpm2-", "tcsd", "tpm_")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_PATHLINE = re.compile(r"(\.c):\d+:")


@dataclass
class JournalError:
    """One group of like TPM/TSS error lines."""
    ident: str
    message: str  # the first occurrence, as logged
    key: str
    kind: str  # "tss" | "systemd" | "kernel" | "other"
    times: list[Decimal] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    rc: int | None = None
    rc_text: str | None = None
    meaning: str | None = None

    @property
    def count(self) -> int:
        return len(self.times)

    @property
    def first(self) -> Decimal:
        return self.times[0]

    @property
    def last(self) -> Decimal:
        return self.times[-1]

    @property
    def span(self) -> Decimal:
        return self.last - self.first

    @property
    def interval(self) -> Decimal | None:
        """Mean time between repeats."""
        return self.span / (self.count - 1) if self.count > 1 else None

    def to_json(self) -> dict[str, Any]:
        iv = self.interval
        return {"ident": self.ident, "kind": self.kind, "message": self.message, "count": self.count,
                "first_s": float(self.first), "last_s": float(self.last), "span_s": float(self.span),
                "interval_s": float(iv) if iv is not None else None,
                "rc": f"0x{self.rc:x}" if self.rc is not None else None, "rc_text": self.rc_text,
                "meaning": self.meaning, "lines": self.lines[:20]}


@dataclass
class Journal:
    entries: int = 0
    first_s: Decimal | None = None
    last_s: Decimal | None = None
    errors: list[JournalError] = field(default_factory=list)

    @property
    def error_lines(self) -> int:
        return sum(e.count for e in self.errors)

    def to_json(self) -> dict[str, Any]:
        return {"entries": self.entries, "first_s": float(self.first_s) if self.first_s is not None else None,
                "last_s": float(self.last_s) if self.last_s is not None else None,
                "tpm_error_lines": self.error_lines, "tpm_errors": [e.to_json() for e in self.errors]}


def _rc(msg: str) -> int | None:
    for rx in _RC_HEX:
        m = rx.search(msg)
        if m:
            v = int(m.group("rc"), 16)
            if 0 < v <= 0xFFFFFFFF:
                return v
    return None


def _key(ident: str, msg: str) -> str:
    """The message with counters and line numbers taken out, so that retries group together."""
    msg = _PATHLINE.sub(r"\1:N:", msg)
    return ident + ": " + _NUMBER.sub("N", msg).strip()


def _fail(path: str, lineno: int, why: str, line: str) -> NoReturn:
    raise bad_line(path, lineno, why, line)


def parse_journal(text: str, path: str = "journalctl -b -o short-monotonic") -> Journal:
    j = Journal()
    groups: dict[str, JournalError] = {}
    last_t: Decimal | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or _BANNER.match(line.strip()):
            continue
        if line[0] in " \t":
            continue  # the continuation of a multi-line message
        m = _LINE.match(line)
        if not m:
            _fail(path, lineno, "not a `journalctl -o short-monotonic` line", raw)
        t = Decimal(m.group("t"))
        if last_t is not None and t + Decimal("0.5") < last_t and m.group("ident") != "kernel":
            # Entries are in time order (the kernel's own are stamped at their source, and
            # interleave); a big step back is another boot or another file pasted in.
            _fail(path, lineno, f"time goes back from {last_t} s to {t} s: one boot per file "
                                "(journalctl -b)", raw)
        last_t = t if last_t is None else max(last_t, t)
        j.entries += 1
        j.first_s = t if j.first_s is None else j.first_s
        j.last_s = t
        ident, msg = m.group("ident"), m.group("msg")
        kind = meaning = None
        rc = None
        tss = _TSS.match(msg)
        if tss:
            if tss.group("level") != "ERROR":
                continue  # its ERROR line follows and carries the code
            kind, rc = "tss", _rc(msg)
            meaning = f"{tss.group('func')}() failed ({tss.group('module')})"
        elif ident == "kernel":
            p = classify(msg)
            if p is None:
                continue
            kind, rc, meaning = "kernel", p.rc, KIND_TEXT[p.kind]
        elif (_TPM_WORD.search(msg) or ident.startswith(TPM_PROGRAMS)) and _FAILED.search(msg):
            kind, rc = ("systemd" if ident.startswith("systemd") else "other"), _rc(msg)
        else:
            continue
        key = _key(ident, msg)
        g = groups.get(key)
        if g is None:
            g = groups[key] = JournalError(ident, msg, key, kind, rc=rc, meaning=meaning)
        g.times.append(t)
        g.lines.append(lineno)
    j.errors = sorted(groups.values(), key=lambda g: (-g.span, -g.count, g.rc is None, g.first))
    return j

