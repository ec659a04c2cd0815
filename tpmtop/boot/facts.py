"""System facts for ``tpmtop boot``, each with its source or the reason it is unavailable.

Nothing here talks to a TPM: on Linux 6.12+ any user-space TPM command ends the session the
kernel keeps, so a diagnosis must read sysfs/securityfs only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

from tpmtop.boot import cmdline as cmdline_mod
from tpmtop.boot.dmesg import KernelLog, parse_kernel_log
from tpmtop.boot.eventlog import EventLog, EventLogError, parse_event_log
from tpmtop.boot.kconfig import OPTIONS, read_config
from tpmtop.boot.rootfs import RootReader, Unavailable
from tpmtop.boot.systemd import BootTimes, SystemdAnalyzeError, parse_systemd_analyze

IMA_DIR = "/sys/kernel/security/ima"
TPM_CLASS = "/sys/class/tpm"
PCR_INTEGRITY_PARAM = "/sys/module/tpm/parameters/disable_pcr_integrity"


@dataclass
class Fact:
    name: str
    value: Any = None
    source: str | None = None
    reason: str | None = None  # set when unavailable

    @property
    def ok(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict:
        v = self.value.to_json() if hasattr(self.value, "to_json") else self.value
        return {"name": self.name, "value": v, "source": self.source, "reason": self.reason}


@dataclass
class SystemFacts:
    root: str
    facts: dict[str, Fact] = field(default_factory=dict)
    config: dict[str, str] | None = None
    params: dict[str, list[str | None]] | None = None
    kernel_log: KernelLog | None = None
    boot_times: BootTimes | None = None
    event_log: EventLog | None = None
    chips: list[str] = field(default_factory=list)

    def add(self, fact: Fact) -> Fact:
        self.facts[fact.name] = fact
        return fact

    def get(self, name: str) -> Fact | None:
        return self.facts.get(name)

    def value(self, name: str) -> Any:
        f = self.facts.get(name)
        return f.value if f is not None and f.ok else None

    def to_json(self) -> dict:
        return {"root": self.root, "facts": [f.to_json() for f in self.facts.values()]}


def parse_release(release: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", release or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _fact(sf: SystemFacts, name: str, fn, source: str) -> Fact:
    try:
        return sf.add(Fact(name, fn(), source))
    except Unavailable as e:
        return sf.add(Fact(name, None, source, str(e)))


def collect(reader: RootReader) -> SystemFacts:
    sf = SystemFacts(reader.shown_root if not reader.live else "/")
    if reader.live and not sys.platform.startswith("linux"):
        sf.add(Fact("kernel.release", None, None, f"not Linux ({sys.platform}): no kernel facts to read"))
        return sf
    _kernel(sf, reader)
    _cmdline(sf, reader)
    _tpm(sf, reader)
    _ima(sf, reader)
    _event_log(sf, reader)
    _kernel_log(sf, reader)
    _systemd(sf, reader)
    return sf


def _kernel(sf: SystemFacts, r: RootReader) -> None:
    rel = _fact(sf, "kernel.release", lambda: r.read_line("/proc/sys/kernel/osrelease"),
                "/proc/sys/kernel/osrelease")
    try:
        cfg, src = read_config(r, rel.value)
    except Unavailable as e:
        sf.add(Fact("kernel.config", None, f"/boot/config-{rel.value or '<release>'}, /proc/config.gz", str(e)))
        return
    sf.config = cfg
    sf.add(Fact("kernel.config", f"{len(cfg)} options", src))
    for opt in OPTIONS:
        sf.add(Fact(f"config.{opt}", cfg.get(opt, "n"), src + ("" if opt in cfg else " (not in the file: n)")))


def _cmdline(sf: SystemFacts, r: RootReader) -> None:
    f = _fact(sf, "cmdline", lambda: r.read_line("/proc/cmdline"), "/proc/cmdline")
    if not f.ok:
        return
    sf.params = cmdline_mod.parse_cmdline(f.value)
    sf.add(Fact("cmdline.tpm_ima", cmdline_mod.relevant(sf.params), "/proc/cmdline"))
    _fact(sf, "tpm.disable_pcr_integrity", lambda: r.read_line(PCR_INTEGRITY_PARAM), PCR_INTEGRITY_PARAM)


def _tpm(sf: SystemFacts, r: RootReader) -> None:
    try:
        sf.chips = [c for c in r.listdir(TPM_CLASS) if re.fullmatch(r"tpm\d+", c)]
    except Unavailable as e:
        reason = str(e)
        if reason.endswith("absent"):
            reason = f"no TPM: {TPM_CLASS} absent (no TPM, or the driver is not loaded)"
        sf.add(Fact("tpm.chips", [], TPM_CLASS, reason))
        return
    if not sf.chips:
        sf.add(Fact("tpm.chips", [], TPM_CLASS, f"no TPM: {TPM_CLASS} is empty"))
        return
    sf.add(Fact("tpm.chips", sf.chips, TPM_CLASS))
    base = f"{TPM_CLASS}/{sf.chips[0]}"
    _fact(sf, "tpm.version", lambda: r.read_line(f"{base}/tpm_version_major"), f"{base}/tpm_version_major")
    _fact(sf, "tpm.driver", lambda: r.readlink_name(f"{base}/device/driver"), f"{base}/device/driver")
    _fact(sf, "tpm.description", lambda: r.read_line(f"{base}/device/description"), f"{base}/device/description")
    _fact(sf, "tpm.hid", lambda: r.read_line(f"{base}/device/firmware_node/hid"),
          f"{base}/device/firmware_node/hid")
    # Exported only when CONFIG_TCG_TPM2_HMAC is built in.
    null = f"{base}/null_name"
    sf.add(Fact("tpm.null_name", r.exists(null), null))
    sf.add(Fact("tpm.devices", [d for d in ("/dev/tpm0", "/dev/tpmrm0") if r.exists(d)], "/dev"))
    # dmesg names the chip even when sysfs does not: `tpm_tis …: 2.0 TPM (device-id 0x1B, rev-id 22)`


def _ima(sf: SystemFacts, r: RootReader) -> None:
    cnt = f"{IMA_DIR}/runtime_measurements_count"
    try:
        sf.add(Fact("ima.measurements", int(r.read_line(cnt)), cnt))
    except Unavailable as e:
        reason = str(e)
        if reason.endswith("absent") and not r.exists(IMA_DIR):
            try:
                mounted = bool(r.listdir("/sys/kernel/security"))
            except Unavailable:
                mounted = False
            reason = (f"IMA is off ({IMA_DIR} absent)" if mounted
                      else "securityfs not mounted (/sys/kernel/security absent or empty), so IMA cannot be seen")
        sf.add(Fact("ima.measurements", None, cnt, reason))
    except ValueError:
        sf.add(Fact("ima.measurements", None, cnt, f"{cnt} does not hold a number"))
    viol = f"{IMA_DIR}/violations"
    try:
        sf.add(Fact("ima.violations", int(r.read_line(viol)), viol))
    except (Unavailable, ValueError):
        pass
    params = sf.params or {}
    hints = {k: params[k][-1] for k in ("ima_policy", "ima_appraise", "ima_tcb", "ima_hash", "ima_template")
             if k in params}
    sf.add(Fact("ima.policy_hints", hints, "/proc/cmdline") if sf.params is not None
           else Fact("ima.policy_hints", None, "/proc/cmdline", "kernel command line unreadable"))


def _event_log(sf: SystemFacts, r: RootReader) -> None:
    chip = sf.chips[0] if sf.chips else "tpm0"
    path = f"/sys/kernel/security/{chip}/binary_bios_measurements"
    try:
        raw = r.read_bytes(path)
    except Unavailable as e:
        sf.add(Fact("eventlog", None, path, str(e) + (" (no TPM or firmware gave no log)"
                                                       if str(e).endswith("absent") else "")))
        return
    try:
        sf.event_log = parse_event_log(raw)
    except EventLogError as e:
        sf.add(Fact("eventlog", None, path, f"unreadable TCG event log: {e}"))
        return
    sf.add(Fact("eventlog", sf.event_log, path))


def _kernel_log(sf: SystemFacts, r: RootReader) -> None:
    try:
        text, src = r.command_output(["dmesg"])
    except Unavailable as e:
        reason = str(e)
        if "Operation not permitted" in reason or "permission denied" in reason.lower():
            reason += " (kernel.dmesg_restrict=1: needs root or CAP_SYSLOG)"
        sf.add(Fact("dmesg", None, "dmesg" if r.live else "/run/tpmtop/dmesg.txt", reason))
        return
    sf.kernel_log = parse_kernel_log(text)
    sf.add(Fact("dmesg", sf.kernel_log, src))


def _systemd(sf: SystemFacts, r: RootReader) -> None:
    # sd_booted(): systemd is PID 1 exactly when this directory exists.
    if not r.exists("/run/systemd/system"):
        sf.add(Fact("systemd", None, "/run/systemd/system", "systemd is not running (no /run/systemd/system)"))
        return
    try:
        text, src = r.command_output(["systemd-analyze"])
    except Unavailable as e:
        sf.add(Fact("systemd", None, "systemd-analyze", str(e)))
        return
    try:
        sf.boot_times = parse_systemd_analyze(text)
    except SystemdAnalyzeError as e:
        sf.add(Fact("systemd", None, src, str(e)))
        return
    sf.add(Fact("systemd", sf.boot_times, src))
