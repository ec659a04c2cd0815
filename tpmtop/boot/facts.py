"""System facts for ``tpmtop boot``, each with its source or the reason it is unavailable.

Nothing here talks to a TPM: on Linux 6.12+ any user-space TPM command ends the session the
kernel keeps, so a diagnosis must read sysfs/securityfs only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tpmtop.boot import cmdline as cmdline_mod
from tpmtop.boot.dmesg import KernelLog, TpmProbe, parse_kernel_log
from tpmtop.boot.eventlog import EventLogError, EventLogSummary, parse_event_log
from tpmtop.boot.journal import Journal, parse_journal
from tpmtop.boot.kconfig import OPTIONS, read_config
from tpmtop.boot.rcwords import word_all
from tpmtop.boot.rootfs import RootReader, Unavailable
from tpmtop.boot.systemd import (
    BootTimes,
    SystemdAnalyzeError,
    UnitTime,
    parse_blame,
    parse_critical_chain,
    parse_systemd_analyze,
    tpm_units,
)
from tpmtop.boundedread import excerpt
from tpmtop.errors import UsageError

IMA_DIR = "/sys/kernel/security/ima"
TPM_CLASS = "/sys/class/tpm"
PCR_INTEGRITY_PARAM = "/sys/module/tpm/parameters/disable_pcr_integrity"


@dataclass
class Fact:
    name: str
    value: Any = None
    source: str | None = None
    reason: str | None = None  # set when unavailable
    # Other sources that state the same fact: [{"source", "value"}]; the first one (this
    # fact's ``source``) won, and ``agree`` says whether they all said the same.
    others: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def agree(self) -> bool:
        return all(o["value"] == self.value for o in self.others)

    @property
    def source_note(self) -> str:
        """The source, and what the others said."""
        if not self.others:
            return self.source or ""
        if all(o.get("reason") for o in self.others):
            return f"{self.source} (" + "; ".join(o["reason"] for o in self.others) + ")"
        if self.agree:
            return f"{self.source} ({', '.join(o['source'] for o in self.others)} agrees)"
        return f"{self.source} (won over " + ", ".join(
            f"{o['source']}: {o.get('reason') or o['value']}" for o in self.others) + ")"

    def to_json(self) -> dict[str, Any]:
        v = self.value.to_json() if hasattr(self.value, "to_json") else self.value
        if isinstance(v, list):
            v = [x.to_json() if hasattr(x, "to_json") else x for x in v]
        d = {"name": self.name, "value": v, "source": self.source, "reason": self.reason}
        if self.others:
            d["other_sources"] = self.others
        return d


@dataclass
class SystemFacts:
    root: str
    facts: dict[str, Fact] = field(default_factory=dict)
    config: dict[str, str] | None = None
    params: dict[str, list[str | None]] | None = None
    kernel_log: KernelLog | None = None
    boot_times: BootTimes | None = None
    event_log: EventLogSummary | None = None
    chips: list[str] = field(default_factory=list)
    journal: Journal | None = None
    units: list[UnitTime] | None = None  # systemd's TPM units, when blame or critical-chain was read
    critical_chain: list[UnitTime] | None = None

    @property
    def tpm_family(self) -> str | None:
        """"1.2" or "2.0", from sysfs or the kernel log."""
        v = self.value("tpm.family")
        return None if v is None else str(v)

    @property
    def tpm_seen(self) -> bool:
        return bool(self.chips) or self.tpm_family is not None

    def add(self, fact: Fact) -> Fact:
        self.facts[fact.name] = fact
        return fact

    def get(self, name: str) -> Fact | None:
        return self.facts.get(name)

    def fact(self, name: str) -> Fact:
        """A fact the caller knows was collected (a KeyError names the one that was not)."""
        return self.facts[name]

    def value(self, name: str) -> Any:
        f = self.facts.get(name)
        return f.value if f is not None and f.ok else None

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "facts": [f.to_json() for f in self.facts.values()]}


def parse_release(release: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", release or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _fact(sf: SystemFacts, name: str, fn: Callable[[], Any], source: str) -> Fact:
    try:
        return sf.add(Fact(name, fn(), source))
    except Unavailable as e:
        return sf.add(Fact(name, None, source, str(e)))


def _kernel_facts(reader: RootReader) -> tuple[SystemFacts, bool]:
    """The facts ``collect`` and ``collect_health`` share: the kernel log, release and build,
    command line, the TPM in sysfs and IMA; False when a live system is not Linux."""
    sf = SystemFacts(reader.shown_root if not reader.live else "/")
    if reader.live and not sys.platform.startswith("linux"):
        sf.add(Fact("kernel.release", None, None, f"not Linux ({sys.platform}): no kernel facts to read"))
        return sf, False
    for part in (_kernel_log, _release, _config, _cmdline, _tpm, _ima):
        part(sf, reader)
    return sf, True


def collect(reader: RootReader) -> SystemFacts:
    sf, linux = _kernel_facts(reader)
    if not linux:
        return sf
    _event_log(sf, reader)
    _systemd(sf, reader)
    _journal(sf, reader)
    word_all(sf.kernel_log.problems if sf.kernel_log else [])
    word_all(sf.journal.errors if sf.journal else [])
    return sf


def collect_health(reader: RootReader, journal: bool = True) -> SystemFacts:
    """What ``tpmtop health`` judges: the kernel log, release and build, command line, the TPM
    in sysfs, IMA and (``journal``) the journal; no systemd-analyze, no event log."""
    sf, linux = _kernel_facts(reader)
    if linux and journal:
        _journal(sf, reader)
    return sf


def collect_kernelfs(reader: RootReader) -> SystemFacts:
    """Only what sysfs, securityfs and /proc say, cheap enough to poll (the dashboard's
    ``--passive``): release, TPM chip and HMAC build, the PCR-integrity opt-out, IMA counts."""
    sf = SystemFacts(reader.shown_root if not reader.live else "/")
    _release(sf, reader)
    _cmdline(sf, reader)
    _tpm(sf, reader)
    _ima(sf, reader)
    return sf


def read_pcrs(reader: RootReader, chip: str, pcrs: Iterable[int], bank: str = "sha256") -> dict[int, str]:
    """PCR values the kernel exports (``pcr-<bank>/N``, 5.12+). Reading one makes the kernel send
    a PCR_Read, which uses no session."""
    out: dict[int, str] = {}
    for i in pcrs:
        try:
            out[i] = reader.read_line(f"{TPM_CLASS}/{chip}/pcr-{bank}/{i}").lower()
        except Unavailable:
            continue
    return out


_RELEASE = re.compile(r"[0-9A-Za-z._+~-]{1,128}")  # what `uname -r` prints; it names /boot/config-<release>


def _read_release(r: RootReader) -> str:
    text = r.read_line("/proc/sys/kernel/osrelease")
    if not _RELEASE.fullmatch(text):
        raise Unavailable(f"/proc/sys/kernel/osrelease holds no kernel release: {excerpt(text)}")
    return text


def _release(sf: SystemFacts, r: RootReader) -> None:
    rel = _fact(sf, "kernel.release", lambda: _read_release(r), "/proc/sys/kernel/osrelease")
    kl = sf.kernel_log
    if kl is None or kl.release is None:
        return
    src = f"{sf.fact('dmesg').source}:{kl.release_line} (`Linux version` line)"
    if rel.ok:
        rel.others.append({"source": src, "value": kl.release})
    else:
        sf.add(Fact("kernel.release", kl.release, src,
                    others=[{"source": rel.source, "value": None, "reason": rel.reason}]))


def _config(sf: SystemFacts, r: RootReader) -> None:
    rel = sf.fact("kernel.release")
    try:
        cfg, src = read_config(r, rel.value if rel.ok else None)
    except Unavailable as e:
        sf.add(Fact("kernel.config", None, f"/boot/config-{rel.value or '<release>'}, /proc/config.gz", str(e)))
        return
    sf.config = cfg
    sf.add(Fact("kernel.config", f"{len(cfg)} options", src))
    for opt in OPTIONS:
        sf.add(Fact(f"config.{opt}", cfg.get(opt, "n"), src + ("" if opt in cfg else " (not in the file: n)")))


def _cmdline(sf: SystemFacts, r: RootReader) -> None:
    f = _fact(sf, "cmdline", lambda: r.read_line("/proc/cmdline"), "/proc/cmdline")
    kl = sf.kernel_log
    if not f.ok and kl is not None and kl.cmdline is not None:
        f = sf.add(Fact("cmdline", kl.cmdline, f"{sf.fact('dmesg').source}:{kl.cmdline_line} (`Command line:` line)",
                        others=[{"source": f.source, "value": None, "reason": f.reason}]))
    # The module parameter is sysfs, not the command line: read it whatever /proc/cmdline says.
    _fact(sf, "tpm.disable_pcr_integrity", lambda: r.read_line(PCR_INTEGRITY_PARAM), PCR_INTEGRITY_PARAM)
    if not f.ok:
        return
    sf.params = cmdline_mod.parse_cmdline(f.value)
    sf.add(Fact("cmdline.tpm_ima", cmdline_mod.relevant(sf.params), f.source))


def _tpm(sf: SystemFacts, r: RootReader) -> None:
    probe = sf.kernel_log.probes[0] if sf.kernel_log and sf.kernel_log.probes else None
    try:
        sf.chips = [c for c in r.listdir(TPM_CLASS) if re.fullmatch(r"tpm\d+", c)]
    except Unavailable as e:
        reason = str(e)
        if reason.endswith("absent"):
            reason = f"no TPM: {TPM_CLASS} absent (no TPM, or the driver is not loaded)"
        sf.add(Fact("tpm.chips", [], TPM_CLASS, reason))
        _tpm_from_dmesg(sf, probe)
        return
    if not sf.chips:
        sf.add(Fact("tpm.chips", [], TPM_CLASS, f"no TPM: {TPM_CLASS} is empty"))
        _tpm_from_dmesg(sf, probe)
        return
    sf.add(Fact("tpm.chips", sf.chips, TPM_CLASS))
    base = f"{TPM_CLASS}/{sf.chips[0]}"
    ver = _fact(sf, "tpm.version", lambda: r.read_line(f"{base}/tpm_version_major"), f"{base}/tpm_version_major")
    if ver.ok and ver.value in ("1", "2"):
        fam = sf.add(Fact("tpm.family", {"1": "1.2", "2": "2.0"}[ver.value], ver.source))
        if probe is not None:
            fam.others.append({"source": _probe_source(sf, probe), "value": probe.family})
    elif probe is not None:
        sf.add(Fact("tpm.family", probe.family, _probe_source(sf, probe)))
    drv = _fact(sf, "tpm.driver", lambda: r.readlink_name(f"{base}/device/driver"), f"{base}/device/driver")
    if probe is not None:
        if drv.ok:
            drv.others.append({"source": _probe_source(sf, probe), "value": probe.driver})
        else:
            sf.add(Fact("tpm.driver", probe.driver, _probe_source(sf, probe)))
    _fact(sf, "tpm.description", lambda: r.read_line(f"{base}/device/description"), f"{base}/device/description")
    hid = _fact(sf, "tpm.hid", lambda: r.read_line(f"{base}/device/firmware_node/hid"),
                f"{base}/device/firmware_node/hid")
    if probe is not None and probe.acpi_hid:
        if hid.ok:
            hid.others.append({"source": _probe_source(sf, probe), "value": probe.acpi_hid})
        else:
            sf.add(Fact("tpm.hid", probe.acpi_hid, _probe_source(sf, probe)))
    _probe_ids(sf, probe)
    # Exported only when CONFIG_TCG_TPM2_HMAC is built in.
    null = f"{base}/null_name"
    sf.add(Fact("tpm.null_name", r.exists(null), null))
    sf.add(Fact("tpm.devices", [d for d in ("/dev/tpm0", "/dev/tpmrm0") if r.exists(d)], "/dev"))


def _probe_source(sf: SystemFacts, probe: TpmProbe) -> str:
    f = sf.get("dmesg")
    return f"{f.source if f is not None else 'dmesg'}:{probe.line}"


def _probe_ids(sf: SystemFacts, probe: TpmProbe | None) -> None:
    if probe is None:
        return
    src = _probe_source(sf, probe)
    sf.add(Fact("tpm.device_id", f"0x{probe.device_id:X} (rev-id {probe.rev_id})", src))
    if probe.vendor:
        sf.add(Fact("tpm.vendor", probe.vendor, f"{src} (ACPI id {probe.acpi_hid})"))


def _tpm_from_dmesg(sf: SystemFacts, probe: TpmProbe | None) -> None:
    """No TPM in sysfs (a saved tree with only a dmesg, or no driver bound now): the kernel log
    still says which chip the driver found at boot."""
    if probe is None:
        return
    src = _probe_source(sf, probe)
    sf.add(Fact("tpm.family", probe.family, src, others=[{"source": TPM_CLASS, "value": None,
                                                           "reason": sf.fact("tpm.chips").reason}]))
    sf.add(Fact("tpm.driver", probe.driver, src))
    if probe.acpi_hid:
        sf.add(Fact("tpm.hid", probe.acpi_hid, src))
    _probe_ids(sf, probe)


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
    cmd = sf.get("cmdline")
    sf.add(Fact("ima.policy_hints", hints, cmd.source if cmd is not None and cmd.ok else "/proc/cmdline")
           if sf.params is not None
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
        if not r.live:
            _units(sf, r, quiet=True)  # saved blame/critical-chain files speak for themselves
        return
    try:
        text, src = r.command_output(["systemd-analyze"])
    except Unavailable as e:
        sf.add(Fact("systemd", None, "systemd-analyze", str(e)))
        _units(sf, r)
        return
    try:
        sf.boot_times = parse_systemd_analyze(text)
    except SystemdAnalyzeError as e:
        sf.add(Fact("systemd", None, src, str(e)))
        _units(sf, r)
        return
    sf.add(Fact("systemd", sf.boot_times, src))
    _units(sf, r)


def _saved_or_live(r: RootReader, argv: list[str], saved: str) -> tuple[str, str]:
    """``(text, source)`` of a command's output, live or saved under the root; Unavailable."""
    if r.live:
        return r.command_output(argv)
    return r.read_text(saved), saved


def _units(sf: SystemFacts, r: RootReader, quiet: bool = False) -> None:
    """``quiet``: systemd is not running there, so a missing output is not worth a line."""
    blame: dict[str, UnitTime] | None = None
    chain: list[UnitTime] | None = None
    parsers: tuple[tuple[str, list[str], str, Callable[[str, str], Any]], ...] = (
            ("blame", ["systemd-analyze", "blame"], "/run/tpmtop/systemd-analyze-blame.txt", parse_blame),
            ("critical-chain", ["systemd-analyze", "critical-chain"],
             "/run/tpmtop/systemd-analyze-critical-chain.txt", parse_critical_chain))
    for what, argv, saved, parse in parsers:
        try:
            text, src = _saved_or_live(r, argv, saved)
        except Unavailable as e:
            if not quiet:
                sf.add(Fact(f"systemd.{what}", None, saved if not r.live else " ".join(argv), str(e)))
            continue
        # A saved file that does not parse is bad input (exit 2, FILE:LINE); live output that
        # does not is a fact this systemd's format hides from us, said as such.
        try:
            value = parse(text, r.host_path(saved) if not r.live else src)
        except UsageError as e:
            if not r.live:
                raise
            sf.add(Fact(f"systemd.{what}", None, src, f"unreadable output: {e}"))
            continue
        if what == "blame":
            blame = value
            sf.add(Fact("systemd.blame", f"{len(value)} units", src))
        else:
            chain = sf.critical_chain = value
            sf.add(Fact("systemd.critical-chain", f"{value[0].unit}: {len(value)} units", src))
    if blame is None and chain is None:
        return
    sf.units = tpm_units(blame, chain)
    sf.add(Fact("systemd.tpm_units", sf.units, "systemd-analyze blame / critical-chain"))


def _journal(sf: SystemFacts, r: RootReader) -> None:
    saved = "/run/tpmtop/journal.txt"
    argv = ["journalctl", "-b", "-o", "short-monotonic", "--no-pager"]
    try:
        text, src = _saved_or_live(r, argv, saved)
    except Unavailable as e:
        sf.add(Fact("journal", None, saved if not r.live else " ".join(argv), str(e)))
        return
    try:
        sf.journal = parse_journal(text, r.host_path(saved) if not r.live else src)
    except UsageError as e:
        if not r.live:
            raise
        sf.add(Fact("journal", None, src, f"unreadable output: {e}"))
        return
    sf.add(Fact("journal", sf.journal, src))
