"""Kernel log: TPM/IMA lines, the warnings that matter, initcall_debug durations, and the
facts the log states when sysfs cannot be read (release, TPM family, interface, device id).

Messages as the kernel's TPM drivers print them (drivers/char/tpm/):
- tpm_tis_core.c: ``tpm_tis STM0125:00: 2.0 TPM (device-id 0x0, rev-id 78)`` (``1.2 TPM`` on
  a TPM 1.2), and ``[Firmware Bug]: TPM interrupt not working, polling instead``;
- tpm-interface.c: ``A TPM error (%d) occurred %s`` — the response code in *decimal*;
- tpm2-space.c: ``tpm2_load_context: failed with a TPM error 0x%04X``;
- tpm2-sessions.c: ``NULL key integrity failure!``, ``NULL name has changed, disabling TPM due
  to interference``, ``null key integrity check failed``, ``TPM: HMAC check failed``, and the
  auth-session warnings ``auth session is active`` / ``… is not active``,
  ``tpm2_start_auth_session: encryption is not active``, ``tpm session not filled correctly``;
- ima_init.c: ``No TPM chip found, activating TPM-bypass!`` (IMA without a TPM);
- timeouts: ``Operation Timed out``, ``tpm_try_transmit: send(): error -62``;
- tpm_tis_core.c: ``invalid TPM_STS.x 0x%02x, dumping stack for forensics`` (0xff: the chip
  did not answer the bus read);
- tpm2-sessions.c after the Dec 2025 fix "tpm2-sessions: address out-of-range indexing":
  ``session state malformed``, ``invalid handle 0x%08x``, ``could not find HMAC session``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

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
    "session state malformed",
    "could not find HMAC session",
    "invalid TPM_STS",
    "disabling TPM",
    "TPM interrupt not working",
    "A TPM error",
    "tpm_try_transmit",
)
# `[    1.234567] msg`: the time since boot, when the prefix gives it.
_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")
_LINUX_VERSION = re.compile(r"^Linux version (\S+)")
_COMMAND_LINE = re.compile(r"^Command line: (.*)$")
# tpm_tis_core.c's probe line; `driver device: family TPM (device-id 0x…, rev-id …)`.
_PROBE = re.compile(r"^(?P<driver>\S+) (?P<device>\S+): (?P<family>1\.2|2\.0) TPM "
                    r"\(device-id 0x(?P<did>[0-9A-Fa-f]+), rev-id (?P<rid>\d+)\)")
# An ACPI device name carries its vendor's prefix (PNP ids are generic): STM0125:00, IFX0102:00.
_ACPI_HID = re.compile(r"^(?P<hid>(?P<vendor>[A-Z]{3,4})[0-9A-F]{4}):\d+$")
ACPI_VENDORS = {
    "IFX": "Infineon", "STM": "STMicroelectronics", "NTC": "Nuvoton", "NSC": "Nuvoton (National)",
    "ATM": "Atmel", "ATML": "Atmel", "BCM": "Broadcom", "INTC": "Intel", "AMDI": "AMD",
    "MSFT": "generic TPM 2.0 (MSFT0101: firmware or discrete, vendor not named)",
    "PNP": "generic TPM 1.2 (PNP0C31: vendor not named)", "SMO": "SMSC", "WEC": "Winbond",
}
# (kind, pattern); the response code group `rc` (hex) or `rcdec` (decimal) when there is one.
PROBLEMS = (
    ("tpm-error", re.compile(r"A TPM error \((?P<rcdec>\d+)\) occurred (?P<what>.*)$")),
    ("context-load", re.compile(r"(?P<what>tpm2_(?:load|save)_context): "
                                r"failed with a TPM error 0x(?P<rc>[0-9A-Fa-f]+)")),
    ("interference", re.compile(r"NULL name has changed, disabling TPM due to interference")),
    ("null-key", re.compile(r"(?i)null key integrity (?:check )?fail")),
    ("null-key", re.compile(r"NULL Seed name comparison failed")),
    ("hmac", re.compile(r"HMAC check failed")),
    ("session-state", re.compile(r"session state malformed|could not find HMAC session|"
                                 r"invalid handle 0x[0-9A-Fa-f]+")),
    ("tpm-sts", re.compile(r"invalid TPM_STS\.x 0x(?P<sts>[0-9A-Fa-f]+)")),
    ("auth-session", re.compile(r"auth session is (?:not )?active|encryption is not active|"
                                r"tpm session not filled correctly|TPM: too many handles")),
    ("polling", re.compile(r"TPM interrupt not working, polling instead")),
    ("timeout", re.compile(r"(?i)\btimed out\b|\btime-?out\b(?!s)|send\(\): error -62\b")),
    ("transmit", re.compile(r"tpm_try_transmit: \w+\(\): error (?P<errno>-?\d+)")),
    ("suspend", re.compile(r"Ignoring error (?P<errno>-?\d+) while suspending")),
    ("selftest", re.compile(r"(?i)self ?test (?:failed|timed out)")),
    ("ima-bypass", re.compile(r"No TPM chip found, activating TPM-bypass")),
)
KIND_TEXT = {
    "tpm-error": "the TPM answered a kernel command with an error",
    "context-load": "loading or saving a context failed",
    "interference": "the kernel saw a changed null seed and disabled the TPM",
    "null-key": "the null primary's integrity check failed",
    "hmac": "a response HMAC did not verify",
    "auth-session": "an authorization session failed",
    "session-state": "the kernel's HMAC session bookkeeping failed (tpm2-sessions)",
    "tpm-sts": "the TPM's status register read back invalid (0xff: the chip did not answer)",
    "polling": "no TPM interrupt: the driver polls (slower commands)",
    "timeout": "a TPM command timed out",
    "transmit": "sending a command to the TPM failed",
    "suspend": "an error on suspend",
    "selftest": "the TPM self test failed",
    "ima-bypass": "IMA found no TPM: its measurements are extended into no PCR",
}
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

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "module": self.module, "usecs": self.usecs, "ret": self.ret}


@dataclass
class TpmProbe:
    """What the driver's probe line says about the chip."""
    driver: str  # the interface driver: tpm_tis, tpm_tis_spi, tpm_tis_i2c, …
    device: str  # STM0125:00, 00:05, spi0.0
    family: str  # "1.2" or "2.0"
    device_id: int
    rev_id: int
    line: int

    @property
    def acpi_hid(self) -> str | None:
        m = _ACPI_HID.match(self.device)
        return m.group("hid") if m else None

    @property
    def vendor(self) -> str | None:
        m = _ACPI_HID.match(self.device)
        if not m:
            return None
        v = m.group("vendor")
        return ACPI_VENDORS.get(v) or ACPI_VENDORS.get(v[:3])

    def to_json(self) -> dict[str, Any]:
        return {"driver": self.driver, "device": self.device, "family": self.family,
                "device_id": f"0x{self.device_id:X}", "rev_id": self.rev_id, "acpi_hid": self.acpi_hid,
                "vendor": self.vendor, "line": self.line}


@dataclass
class KernelProblem:
    """A TPM warning or error the kernel logged, with the response code worded by tpm2-tss."""
    kind: str
    text: str
    line: int
    time_s: Decimal | None = None
    rc: int | None = None
    errno: int | None = None
    rc_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "meaning": KIND_TEXT[self.kind], "text": self.text, "line": self.line,
                "time_s": float(self.time_s) if self.time_s is not None else None,
                "rc": f"0x{self.rc:x}" if self.rc is not None else None, "rc_text": self.rc_text,
                "errno": self.errno}


@dataclass
class KernelLog:
    tpm_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    initcalls: list[Initcall] = field(default_factory=list)  # every returned initcall
    unfinished: list[str] = field(default_factory=list)  # `calling` without `returned`
    release: str | None = None  # from `Linux version …`
    release_line: int | None = None
    cmdline: str | None = None  # from `Command line: …` (x86 prints it at boot)
    cmdline_line: int | None = None
    probes: list[TpmProbe] = field(default_factory=list)
    problems: list[KernelProblem] = field(default_factory=list)

    @property
    def initcall_debug(self) -> bool:
        return bool(self.initcalls)

    def tpm_initcalls(self) -> list[Initcall]:
        return [i for i in self.initcalls if _TPM_INITCALL.search(i.name) or
                (i.module and _TPM_INITCALL.search(i.module))]

    @property
    def initcall_total_usecs(self) -> int:
        return sum(i.usecs for i in self.initcalls)

    def to_json(self) -> dict[str, Any]:
        return {"tpm_lines": self.tpm_lines, "warnings": self.warnings,
                "initcall_debug": self.initcall_debug,
                "initcalls_total_usecs": self.initcall_total_usecs if self.initcalls else None,
                "tpm_initcalls": [i.to_json() for i in self.tpm_initcalls()],
                "unfinished_tpm_initcalls": [n for n in self.unfinished if _TPM_INITCALL.search(n)],
                "release": self.release, "cmdline": self.cmdline, "tpm_probes": [p.to_json() for p in self.probes],
                "problems": [p.to_json() for p in self.problems]}


def strip_prefix(line: str) -> str:
    for p in _PREFIXES:
        m = p.match(line)
        if m:
            return line[m.end():]
    return line


def classify(line: str, lineno: int = 0, time_s: Decimal | None = None) -> KernelProblem | None:
    """A kernel TPM warning or error in ``line`` (prefix stripped), or None."""
    for kind, rx in PROBLEMS:
        m = rx.search(line)
        if not m:
            continue
        g = m.groupdict()
        p = KernelProblem(kind, line, lineno, time_s)
        if g.get("rc"):
            p.rc = int(g["rc"], 16)
        elif g.get("rcdec"):
            p.rc = int(g["rcdec"])
        if g.get("errno"):
            p.errno = int(g["errno"])
        return p
    return None


def parse_kernel_log(text: str) -> KernelLog:
    log = KernelLog()
    pending: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        tm = _TIME.match(raw)
        line = strip_prefix(raw.rstrip())
        if log.release is None:
            mv = _LINUX_VERSION.match(line)
            if mv:
                log.release, log.release_line = mv.group(1), lineno
                continue
        if log.cmdline is None:
            mc = _COMMAND_LINE.match(line)
            if mc:
                log.cmdline, log.cmdline_line = mc.group(1).strip(), lineno
                continue
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
        if _TPM.search(line) or "TPM" in line:
            log.tpm_lines.append(line)
            mp = _PROBE.match(line)
            if mp:
                log.probes.append(TpmProbe(mp.group("driver"), mp.group("device"), mp.group("family"),
                                           int(mp.group("did"), 16), int(mp.group("rid")), lineno))
                continue
            problem = classify(line, lineno, Decimal(tm.group(1)) if tm else None)
            if problem is not None:
                log.problems.append(problem)
            if problem is not None or any(w in line for w in WARNINGS):
                log.warnings.append(line)
    # An initcall that never returned is what a hung TPM probe looks like.
    log.unfinished = [n for n, c in pending.items() if c > 0]
    return log

