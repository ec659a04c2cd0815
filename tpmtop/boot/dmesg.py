"""Kernel log: TPM/IMA lines, the warnings that matter, and initcall_debug durations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# `[    1.234567] msg`, /dev/kmsg `6,339,5140900,-;msg`, journalctl -k `… kernel: msg`.
_PREFIXES = (
    re.compile(r"^\[\s*\d+\.\d+\]\s?"),
    re.compile(r"^\d+,\d+,\d+,[^;]*;"),
    re.compile(r"^\S+ \d+ [\d:]+ \S+ kernel: "),
)
_TPM = re.compile(r"\b(tpm\w*|TPM|ima|IMA|integrity)\b")
WARNINGS = (
    "NULL name has changed",
    "null key integrity check failed",
    "HMAC check failed",
    "disabling TPM",
    "TPM interrupt not working",
    "A TPM error",
    "tpm_try_transmit",
)
_CALLING = re.compile(r"^calling  (\S+?)\+0x[0-9a-f]+/0x[0-9a-f]+(?: \[\S+\])? @ \d+\s*$")
_RETURNED = re.compile(
    r"^initcall (\S+?)\+0x[0-9a-f]+/0x[0-9a-f]+( \[\S+\])? returned (-?\d+) after (\d+) usecs\s*$")
_TPM_INITCALL = re.compile(r"tpm|tis|crb|ima|integrity", re.I)


@dataclass
class Initcall:
    name: str
    module: str | None
    usecs: int
    ret: int

    def to_json(self) -> dict:
        return {"name": self.name, "module": self.module, "usecs": self.usecs, "ret": self.ret}


@dataclass
class KernelLog:
    tpm_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    initcalls: list[Initcall] = field(default_factory=list)  # every returned initcall
    unfinished: list[str] = field(default_factory=list)  # `calling` without `returned`

    @property
    def initcall_debug(self) -> bool:
        return bool(self.initcalls)

    def tpm_initcalls(self) -> list[Initcall]:
        return [i for i in self.initcalls if _TPM_INITCALL.search(i.name) or
                (i.module and _TPM_INITCALL.search(i.module))]

    @property
    def initcall_total_usecs(self) -> int:
        return sum(i.usecs for i in self.initcalls)

    def to_json(self) -> dict:
        return {"tpm_lines": self.tpm_lines, "warnings": self.warnings,
                "initcall_debug": self.initcall_debug,
                "initcalls_total_usecs": self.initcall_total_usecs if self.initcalls else None,
                "tpm_initcalls": [i.to_json() for i in self.tpm_initcalls()],
                "unfinished_tpm_initcalls": [n for n in self.unfinished if _TPM_INITCALL.search(n)]}


def strip_prefix(line: str) -> str:
    for p in _PREFIXES:
        m = p.match(line)
        if m:
            return line[m.end():]
    return line


def parse_kernel_log(text: str) -> KernelLog:
    log = KernelLog()
    pending: dict[str, int] = {}
    for raw in text.splitlines():
        line = strip_prefix(raw.rstrip())
        m = _CALLING.match(line)
        if m:
            pending[m.group(1)] = pending.get(m.group(1), 0) + 1
            continue
        m = _RETURNED.match(line)
        if m:
            name = m.group(1)
            mod = m.group(2).strip()[1:-1] if m.group(2) else None
            log.initcalls.append(Initcall(name, mod, int(m.group(4)), int(m.group(3))))
            if pending.get(name):
                pending[name] -= 1
            continue
        if _TPM.search(line):
            log.tpm_lines.append(line)
            if any(w in line for w in WARNINGS):
                log.warnings.append(line)
    # An initcall that never returned is what a hung TPM probe looks like.
    log.unfinished = [n for n, c in pending.items() if c > 0]
    return log
