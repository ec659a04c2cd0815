"""Set-up and driver verdicts from the kernel's own files and logs, under a root directory (the
running system, or a saved tree: the boot report's :class:`~tpmtop.boot.rootfs.RootReader`).

The kernel-log rules are :mod:`tpmtop.boot.dmesg`'s one table (``PROBLEMS``): a message kind is
recognised there, for ``tpmtop boot`` and for the journal as well, and judged here.
Nothing here talks to the TPM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpmtop.boot import cmdline as cmdline_mod
from tpmtop.boot.dmesg import KIND_TEXT, KernelProblem, strip_prefix
from tpmtop.boot.facts import SystemFacts
from tpmtop.boot.rootfs import RootReader, Unavailable
from tpmtop.health.kernel_traffic import STALL_NS, KernelTraffic
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown
from tpmtop.textsafe import safe

ACPI_TPM2 = "/sys/firmware/acpi/tables/TPM2"
PLATFORM_DEVICES = "/sys/bus/platform/devices"
# A TPM's platform device: the ACPI ids of TPM 2.0 (MSFT0101) and the TIS/CRB drivers' own.
_TPM_PLATFORM = re.compile(r"^(MSFT0101|tpm_tis|tpm_crb|IFX\w*|STM\d+|NTC\d+|SMO\d+)", re.I)
INTERRUPTS = "/proc/interrupts"
TIS_INTERRUPTS_PARAM = "/sys/module/tpm_tis/parameters/interrupts"
HWRNG_DIR = "/sys/class/misc/hw_random"
SETUP_KINDS = ("interference", "null-key", "hmac", "session-state", "auth-session", "context-load")
TIMEOUT_KINDS = ("timeout", "transmit", "tpm-sts", "suspend", "selftest")
# Suspend/resume marks (kernel/power/suspend.c, hibernate.c): time-outs after a resume are the
# resume-failure pattern (system76 firmware-open #427).
_PM_MARK = re.compile(r"^(?:PM: (?P<what>suspend entry|suspend exit|hibernation entry|hibernation exit|"
                      r"resume from hibernation)|ACPI: PM: (?P<acpi>Waking up from system sleep state S\d))")
_TIME = re.compile(r"^\[\s*(\d+\.\d+)\]")
# the kernel's line when it leaves a stuttering AMD fTPM out of the hwrng (tpm-chip.c, 6.3+)
_AMD_STUTTER = re.compile(r"AMD fTPM version 0x[0-9a-fA-F]+ causes system stutter; hwrng disabled")


@dataclass(frozen=True)
class Inputs:
    """What the system verdicts read, gathered once (the root, the facts the boot report collects)."""

    reader: RootReader
    facts: SystemFacts
    manufacturer: str | None = None  # the TPM's, when tpmtop could ask it (the fTPM case)
    traffic: KernelTraffic | None = None  # the kernel's commands in the --capture files


def _dmesg_reason(sf: SystemFacts) -> str | None:
    f = sf.get("dmesg")
    if f is None or f.ok:
        return None
    r = f.reason or "dmesg unreadable"
    return f"needs root: {r}" if "permission" in r.lower() or "not permitted" in r.lower() else r


def _problems(sf: SystemFacts, kinds: tuple[str, ...]) -> list[KernelProblem]:
    return [p for p in (sf.kernel_log.problems if sf.kernel_log else []) if p.kind in kinds]


def _p_line(p: KernelProblem) -> str:
    t = f"[{p.time_s}] " if p.time_s is not None else ""
    return f"dmesg:{p.line}: {t}{safe(p.text)}"


def _has_dev(r: RootReader) -> list[str]:
    return [d for d in ("/dev/tpm0", "/dev/tpmrm0") if r.exists(d)]


def _platform_tpms(r: RootReader) -> list[str]:
    try:
        return [d for d in r.listdir(PLATFORM_DEVICES) if _TPM_PLATFORM.match(d)]
    except Unavailable:
        return []


def device(inp: Inputs) -> Verdict:
    """A TPM the firmware declares, and whether the kernel made /dev/tpm0 of it."""
    r, sf = inp.reader, inp.facts
    declared = []
    acpi = r.exists(ACPI_TPM2)
    if acpi:
        declared.append(f"ACPI TPM2 table ({ACPI_TPM2})")
    declared += [f"platform device {PLATFORM_DEVICES}/{d}" for d in _platform_tpms(r)]
    # tpm_tis.force=1 makes the driver's own "tpm_tis" device at the TIS address, with or
    # without the firmware: that is the command line's doing, not a declaration
    force = (sf.params or {}).get("tpm_tis.force")
    forced = force is not None and bool(force) and cmdline_mod.truthy(force[-1]) is True
    by = "forced by tpm_tis.force=1 on the command line" if forced and not acpi else "declared by firmware"
    devs = _has_dev(r)
    probe = sf.kernel_log.probes[0] if sf.kernel_log and sf.kernel_log.probes else None
    ev = list(declared)
    if probe is not None:
        ev.append(f"dmesg:{probe.line}: {probe.driver} {probe.device}: {probe.family} TPM "
                  f"(device-id 0x{probe.device_id:X}, rev-id {probe.rev_id})")
    ev.append(f"device nodes: {', '.join(devs) if devs else 'none (/dev/tpm0, /dev/tpmrm0 absent)'}")
    if devs:
        return Verdict(Kind.DEVICE, Level.OK, f"{' and '.join(devs)} present"
                       + (f", {by} ({declared[0].split(' (')[0]})" if declared else ""),
                       tuple(ev), (("declared", declared), ("devices", devs)))
    if not declared and probe is None:
        return Verdict(Kind.DEVICE, Level.INFO, "no TPM: the firmware declares none and there is no /dev/tpm0",
                       tuple(ev), (("declared", declared), ("devices", devs)))
    # Declared, and no node: the lines that say why (the HMAC set-up bail-out, a failed probe).
    why = _problems(sf, SETUP_KINDS + TIMEOUT_KINDS + ("tpm-error", "ima-bypass"))
    lines = [_p_line(p) for p in why]
    if not lines and sf.kernel_log is not None:
        lines = [f"dmesg: {safe(t)}" for t in sf.kernel_log.tpm_lines
                 if re.search(r"(?i)fail|error|disabl|unable|-\d+\b", t)][:8]
    reason = _dmesg_reason(sf)
    if not lines:
        lines = [reason] if reason else ["the kernel log names no TPM error (driver not loaded? "
                                         "CONFIG_TCG_TIS/CRB off, or the module blacklisted)"]
    return Verdict(Kind.DEVICE, Level.FAIL, ("the firmware declares a TPM" if by.startswith("declared")
                                             else f"a TPM is {by}") + " and there is no /dev/tpm0",
                   tuple(ev + lines), (("declared", declared), ("devices", devs)))


def _hmac_on(sf: SystemFacts) -> bool | None:
    """Whether the kernel is built with HMAC sessions: its config, else the null_name sysfs
    file that only such a kernel makes (None: neither could be read)."""
    cfg = sf.value("config.CONFIG_TCG_TPM2_HMAC")
    null = sf.value("tpm.null_name")
    return cfg in ("y", "m") if cfg is not None else (bool(null) if null is not None else None)


def hmac_build(inp: Inputs) -> Verdict:
    sf = inp.facts
    cfg = sf.value("config.CONFIG_TCG_TPM2_HMAC")
    null = sf.value("tpm.null_name")
    ev = []
    c = sf.get("config.CONFIG_TCG_TPM2_HMAC")
    if c is not None and c.ok:
        ev.append(f"CONFIG_TCG_TPM2_HMAC={cfg} ({c.source})")
    else:
        k = sf.get("kernel.config")
        ev.append(f"kernel config: {k.reason if k is not None else 'not read'}")
    if null is not None:
        ev.append(f"/sys/class/tpm/{sf.chips[0] if sf.chips else 'tpm0'}/null_name "
                  f"{'present (HMAC built in)' if null else 'absent'}")
    on = _hmac_on(sf)
    if on is None:
        return Verdict(Kind.HMAC_BUILD, Level.UNKNOWN, "cannot tell whether the kernel uses HMAC sessions: "
                       + "; ".join(ev), tuple(ev))
    return Verdict(Kind.HMAC_BUILD, Level.INFO,
                   "the kernel protects its TPM commands with HMAC sessions (CONFIG_TCG_TPM2_HMAC)" if on else
                   "the kernel's TPM commands use no HMAC session (CONFIG_TCG_TPM2_HMAC off)", tuple(ev),
                   (("hmac", on),))


def pcr_integrity(inp: Inputs) -> Verdict:
    sf = inp.facts
    f = sf.get("tpm.disable_pcr_integrity")
    params = sf.params or {}
    cmd = params.get("tpm.disable_pcr_integrity")
    ev = []
    if f is not None and f.ok:
        ev.append(f"{f.source}: {f.value}")
    elif f is not None:
        ev.append(f"{f.source}: {f.reason}")
    if cmd:
        ev.append(f"/proc/cmdline: tpm.disable_pcr_integrity={cmdline_mod.shown(cmd[-1])}")
    val = cmdline_mod.truthy(f.value) if f is not None and f.ok else (cmdline_mod.truthy(cmd[-1]) if cmd else None)
    if val is None:
        return Verdict(Kind.PCR_INTEGRITY, Level.INFO, "tpm.disable_pcr_integrity not set (kernel before 6.12 "
                       "or parameter absent)", tuple(ev))
    if _hmac_on(sf) is False:
        # the parameter exists either way (tpm module), but without CONFIG_TCG_TPM2_HMAC there is
        # no session for it to skip or use
        return Verdict(Kind.PCR_INTEGRITY, Level.INFO,
                       f"tpm.disable_pcr_integrity={int(bool(val))} has no effect: the kernel is built without "
                       "HMAC sessions (CONFIG_TCG_TPM2_HMAC off), so PCR extends use none",
                       tuple(ev), (("disable_pcr_integrity", val),))
    return Verdict(Kind.PCR_INTEGRITY, Level.INFO,
                   "PCR extends skip the HMAC session (tpm.disable_pcr_integrity=1)" if val else
                   "PCR extends use the HMAC session (tpm.disable_pcr_integrity=0)",
                   tuple(ev), (("disable_pcr_integrity", val),))


def hmac_messages(inp: Inputs) -> Verdict:
    sf = inp.facts
    reason = _dmesg_reason(sf)
    found = _problems(sf, SETUP_KINDS)
    jn = [e for e in (sf.journal.errors if sf.journal else []) if e.kind == "kernel"]
    if not found and reason:
        return unknown(Kind.HMAC_MESSAGES, reason)
    if not found:
        return Verdict(Kind.HMAC_MESSAGES, Level.OK, "no HMAC-session or null-key message in the kernel log",
                       (f"source: {sf.fact('dmesg').source}",))
    kinds = sorted({p.kind for p in found})
    lvl = Level.FAIL if any(k in ("interference", "null-key") for k in kinds) else Level.WARN
    text = "; ".join(KIND_TEXT[k] for k in kinds)
    ev = [_p_line(p) for p in found] + [f"journal: {safe(e.message)} ×{e.count}" for e in jn]
    if _hmac_on(sf) is False:
        # only the HMAC code (drivers/char/tpm/tpm2-sessions.c) prints these: a kernel built
        # without it cannot have, so the log is another kernel's (an earlier boot in the
        # journal, a saved tree's dmesg from another build) — not this kernel's failure
        return Verdict(Kind.HMAC_MESSAGES, Level.WARN,
                       f"{text} — but this kernel is built without HMAC sessions (CONFIG_TCG_TPM2_HMAC off) and "
                       "cannot print these lines: they are from another kernel or boot", tuple(ev),
                       (("kinds", kinds), ("hmac_built", False)))
    return Verdict(Kind.HMAC_MESSAGES, lvl, text, tuple(ev), (("kinds", kinds),))


def _tpm_irq_lines(r: RootReader) -> list[tuple[str, int]]:
    """(the line, its interrupt count over every CPU) of each /proc/interrupts line naming a TPM."""
    text = r.read_text(INTERRUPTS)
    rows = text.splitlines()
    ncpu = len(rows[0].split()) if rows else 0
    out = []
    for line in rows[1:]:
        if not re.search(r"\btpm\d*\b|tpm_tis|tpm_crb", line):
            continue
        cells = line.split()
        counts = [int(c) for c in cells[1:1 + ncpu] if c.isdigit()]
        out.append((" ".join(cells), sum(counts)))
    return out


def _param_value(text: str) -> bool | None:
    """tpm_tis.interrupts as sysfs shows it: a bool (Y/N, 6.4+) or an int (-1: "allowed unless a
    DMI quirk turns them off", 6.1's default; 0 off; 1 on). None: allowed by default."""
    t = text.strip()
    if t == "-1":
        return None
    return cmdline_mod.truthy(t)


def interrupts(inp: Inputs) -> Verdict:
    """Interrupt-driven, or polling: forced (command line, or the driver's default), because
    the interrupt did not fire (the driver's fallback), or because the TPM has no IRQ."""
    r, sf = inp.reader, inp.facts
    ev: list[str] = []
    try:
        lines = _tpm_irq_lines(r)
        ev += [f"{INTERRUPTS}: {safe(ln)}" for ln, _ in lines] or [f"{INTERRUPTS}: no line names a TPM"]
    except Unavailable as e:
        lines = []
        ev.append(str(e))
    param: bool | None = None
    raw = None
    try:
        raw = r.read_line(TIS_INTERRUPTS_PARAM)
        param = _param_value(raw)
        ev.append(f"{TIS_INTERRUPTS_PARAM}: {safe(raw)}" + (" (allowed unless a DMI quirk says no)" if raw == "-1"
                                                             else ""))
    except Unavailable as e:
        ev.append(str(e))
    cmd = (sf.params or {}).get("tpm_tis.interrupts")
    on_cmdline = cmd is not None and cmdline_mod.truthy(cmd[-1]) is False
    if cmd:
        ev.append(f"/proc/cmdline: tpm_tis.interrupts={cmdline_mod.shown(cmd[-1])}")
        if raw is None:
            param = cmdline_mod.truthy(cmd[-1])
    fell_back = _problems(sf, ("polling",))
    ev += [_p_line(p) for p in fell_back]
    irq_count = sum(n for _, n in lines)

    def v(level: Level, mode: str, text: str) -> Verdict:
        return Verdict(Kind.INTERRUPTS, level, text, tuple(ev),
                       (("mode", mode), ("irq_count", irq_count if lines else None), ("param", raw)))

    if not lines and not r.exists("/dev/tpm0") and not sf.chips:
        return unknown(Kind.INTERRUPTS, "no TPM bound to a driver: nothing to judge")
    if fell_back:
        return v(Level.WARN, "polling-fallback", "polling: the TPM interrupt did not fire and the driver fell back "
                 "(slower commands)")
    if lines and irq_count > 0:
        return v(Level.OK, "interrupts", f"interrupt-driven: {irq_count} TPM interrupts")
    if on_cmdline:
        return v(Level.INFO, "polling-off-cmdline", "polling: interrupts turned off on the command line "
                 "(tpm_tis.interrupts=0)")
    if param is False:
        return v(Level.INFO, "polling-off-default", "polling: tpm_tis.interrupts is off and not on the command "
                 "line (the driver's default on this kernel)")
    if lines:
        return v(Level.WARN, "polling-silent-irq", "an interrupt line is set up and never fired: the driver polls")
    return v(Level.INFO, "polling-no-irq", "polling: interrupts allowed, but the TPM has no interrupt line "
             "(the firmware declares none, or a CRB/SPI/I2C interface without one)")


def _pm_marks(r: RootReader, sf: SystemFacts) -> list[tuple[float | None, str]]:
    """Suspend/resume marks of the kernel log, with their times."""
    if sf.kernel_log is None:
        return []
    try:
        text, _ = r.command_output(["dmesg"])
    except Unavailable:
        return []
    out = []
    for raw in text.splitlines():
        m = _PM_MARK.match(strip_prefix(raw.rstrip()))
        if m:
            t = _TIME.match(raw)
            out.append((float(t.group(1)) if t else None, m.group("what") or m.group("acpi")))
    return out


def _boot_unix(r: RootReader) -> float | None:
    """When this machine booted, on the wall clock (dmesg's times are seconds since then): only
    for the running system, whose uptime is now."""
    import time

    if not r.live:
        return None
    try:
        return time.time() - float(r.read_line("/proc/uptime").split()[0])
    except (Unavailable, ValueError, IndexError):
        return None


def timeouts(inp: Inputs) -> Verdict:
    r, sf = inp.reader, inp.facts
    reason = _dmesg_reason(sf)
    found = _problems(sf, TIMEOUT_KINDS)
    jn = [e for e in (sf.journal.errors if sf.journal else [])
          if re.search(r"(?i)time(?:d)? ?out|timer expired|TPM_STS|-62\b", e.message)]
    if reason and not found and not jn:
        return unknown(Kind.TIMEOUTS, reason)
    marks = _pm_marks(r, sf)
    ev = []
    after_resume = 0
    boot_unix = _boot_unix(r) if inp.traffic is not None and inp.traffic.timeline else None
    for p in found:
        t = float(p.time_s) if p.time_s is not None else None
        note = ""
        if boot_unix is not None and t is not None and inp.traffic is not None:
            hit = inp.traffic.command_at(int((boot_unix + t) * 1e9))
            note += (f"  (then in flight: {hit[0]} from {safe(hit[1])}, sent {hit[2]:.1f} s before)" if hit
                     else "  (no captured command was in flight then)")
        prior = [(mt, w) for mt, w in marks if mt is not None and t is not None and mt <= t]
        if t is not None and prior and any(k in prior[-1][1] for k in ("exit", "Waking", "resume")):
            mt, w = prior[-1]
            after_resume += 1
            note += f"  ({t - (mt or 0.0):.1f} s after `{w}`)"
        ev.append(_p_line(p) + note)
    ev += [f"journal: [{e.first}] {safe(e.ident)}: {safe(e.message)} ×{e.count}" for e in jn]
    ev += [f"dmesg: [{t}] PM: {w}" for t, w in marks]
    if not found and not jn:
        return Verdict(Kind.TIMEOUTS, Level.OK, "no TPM time-out or status error in the kernel log"
                       + (" or journal" if sf.journal else ""), tuple(ev), (("count", 0),))
    n = len(found) + sum(e.count for e in jn)
    text = f"{n} TPM time-out(s)/status errors"
    if after_resume:
        text += f", {after_resume} after a resume"
    return Verdict(Kind.TIMEOUTS, Level.WARN, text, tuple(ev), (("count", n), ("after_resume", after_resume)))


def hwrng(inp: Inputs) -> Verdict:
    r = inp.reader
    try:
        current = r.read_line(f"{HWRNG_DIR}/rng_current")
    except Unavailable as e:
        return unknown(Kind.HWRNG, f"hwrng: {e}")
    ev = [f"{HWRNG_DIR}/rng_current: {safe(current)}"]
    try:
        ev.append(f"{HWRNG_DIR}/rng_available: {safe(r.read_line(HWRNG_DIR + '/rng_available'))}")
    except Unavailable as e:
        ev.append(str(e))
    manu = inp.manufacturer
    probe = inp.facts.kernel_log.probes[0] if inp.facts.kernel_log and inp.facts.kernel_log.probes else None
    if manu is None and probe is not None and probe.vendor:
        manu = probe.vendor
    if manu:
        ev.append(f"TPM manufacturer: {safe(manu)}")
    t = inp.traffic
    if t is not None:
        ev += t.hwrng_lines()
    data: tuple[tuple[str, Any], ...] = (("current", current), ("tpm", current.startswith("tpm-rng")))
    kernel = t.hwrng_data() if t is not None else None
    if kernel is not None:
        data += (("kernel", kernel),)
    amd = [ln for ln in (inp.facts.kernel_log.tpm_lines if inp.facts.kernel_log else []) if _AMD_STUTTER.search(ln)]
    if amd:
        # drivers/char/tpm/tpm-chip.c since v6.3 (f1324bbc4011, "tpm: disable hwrng for fTPM on
        # some AMD designs"): AMD's PA-410 firmware stutters on GetRandom; the kernel says so once
        ev.append(f"dmesg: {safe(amd[0])}")
        data += (("amd_ftpm_disabled", True),)
        if not current.startswith("tpm-rng"):
            return Verdict(Kind.HWRNG, Level.OK, f"hwrng {safe(current) or 'none'}: the kernel turned the AMD "
                           "fTPM's off (its firmware stutters on GetRandom: f1324bbc4011, Linux 6.3)", tuple(ev), data)
    if not current.startswith("tpm-rng"):
        return Verdict(Kind.HWRNG, Level.OK, f"hwrng {safe(current) or 'none'}: the TPM is not the kernel's "
                       "random source", tuple(ev), data)
    if manu and manu.upper().startswith("AMD"):
        return Verdict(Kind.HWRNG, Level.WARN, f"hwrng {safe(current)} on an AMD fTPM: its GetRandom calls are "
                       "known to stall the system (kernel commit ffe4a34b29aa turns it off on some designs)",
                       tuple(ev), data)
    if t is not None and t.hwrng_stalls:
        return Verdict(Kind.HWRNG, Level.WARN, f"hwrng {safe(current)}: {t.hwrng_stalls} of its GetRandom held the "
                       f"TPM {STALL_NS // 1_000_000} ms or more (its caller waits as long)", tuple(ev), data)
    share = ("its share of TPM time below" if t is not None and t.commands
             else "its share of TPM time: `tpmtop kernel --json K`, then `tpmtop health --capture K`")
    return Verdict(Kind.HWRNG, Level.INFO, f"hwrng {safe(current)}: the kernel sends the TPM GetRandom on its own "
                   f"({share})", tuple(ev), data)


def verdicts(inp: Inputs) -> list[Verdict]:
    return [device(inp), hmac_build(inp), pcr_integrity(inp), hmac_messages(inp),
            interrupts(inp), timeouts(inp), hwrng(inp)]
