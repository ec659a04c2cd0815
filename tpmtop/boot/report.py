"""The boot report as plain data and plain text, shared by ``tpmtop boot`` and the Boot tab."""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tpmtop.boot import projection as pj
from tpmtop.boot.cmdline import shown
from tpmtop.boot.dmesg import KIND_TEXT
from tpmtop.boot.facts import SystemFacts, collect
from tpmtop.boot.rootfs import RootReader
from tpmtop.boot.series import TraceResult
from tpmtop.boot.session_mode import SessionMode, infer
from tpmtop.sessions.modes import HMAC_MODES


@dataclass
class BootReport:
    facts: SystemFacts
    session: SessionMode
    traces: list[TraceResult]
    extends: int | None
    extends_source: str
    projection: pj.Projection | None
    projection_reason: str | None
    verdict: str
    identity: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    verdict_parts: list[dict[str, Any]] = field(default_factory=list)  # what the verdict weighed, largest first

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "tpmtop.boot/1",
            "root": self.facts.root,
            "facts": self.facts.to_json()["facts"],
            "session_mode": self.session.to_json(),
            "tpm_identity": self.identity,
            "traces": [t.to_json() for t in self.traces],
            "extends": {"count": self.extends, "source": self.extends_source},
            "projection": self.projection.to_json() if self.projection else None,
            "projection_reason": self.projection_reason,
            "kernel_tpm_problems": ([pr.to_json() for pr in self.facts.kernel_log.problems]
                                    if self.facts.kernel_log else None),
            "systemd_tpm_units": ([u.to_json() for u in self.facts.units]
                                  if self.facts.units is not None else None),
            "journal_tpm_errors": ([e.to_json() for e in self.facts.journal.errors]
                                   if self.facts.journal is not None else None),
            "verdict": self.verdict,
            "verdict_parts": self.verdict_parts,
            "notes": self.notes,
        }


def _extends(sf: SystemFacts, override: int | None) -> tuple[int | None, str]:
    if override is not None:
        return override, "--extends"
    f = sf.get("ima.measurements")
    if f is not None and f.ok:
        return f.value, (f"{f.source}: one PCR extend per IMA measurement, counted since boot "
                         "(so it includes measurements made after boot finished)")
    if sf.config is not None and sf.config.get("CONFIG_IMA", "n") == "n":
        return 0, "CONFIG_IMA is not set: the kernel measures nothing"
    if f is not None and f.reason and f.reason.startswith("IMA is off"):
        return 0, f.reason
    return None, f.reason if f is not None and f.reason else "IMA measurement count unknown"


# How to record the next boot's kernel TPM commands with tpmtop kernel's probes.
ARM_KERNEL_TRACE = ("to time this machine's own kernel TPM commands during the next boot: add the output "
                    "of `tpmtop kernel --boot-cmdline` to the kernel command line; after the boot, "
                    "`sudo cat /sys/kernel/tracing/trace > k.txt`, `tpmtop kernel --trace k.txt --json k.json`, "
                    "then `tpmtop boot --capture k.json`; or watch what the boot recorded, and what follows, "
                    "in the dashboard: `sudo tpmtop --trace /sys/kernel/tracing/trace_pipe`")


def build_report(reader: RootReader, traces: list[TraceResult] | None = None,
                 capture: str | None = None, extends: int | None = None,
                 calls_per_sum: int | None = None, identity: dict[str, Any] | None = None,
                 chip_costs: dict[str, pj.Cost] | None = None) -> BootReport:
    """``chip_costs``: a chip profile's per-command costs (``tpmtop boot --chip``), used where
    the SLB9670's published figures would be: for what no trace or capture gives."""
    traces = traces or []
    sf = collect(reader)
    sm = infer(sf)
    notes: list[str] = []
    n, n_src = _extends(sf, extends)

    components, tnotes = pj.costs_from_traces(traces, calls_per_sum)
    notes += tnotes
    per_mode: dict[str, pj.Cost] = {}
    if capture:
        per_mode, cnotes = pj.load_capture_costs(capture, components)
        notes += cnotes
    projection, reason = None, None
    if not sf.tpm_seen and extends is None:
        chips = sf.get("tpm.chips")
        reason = (chips.reason if chips is not None and chips.reason else "no TPM") + \
            "; pass --extends N to project anyway"
    else:
        published = chip_costs if chip_costs is not None else pj.published_components()
        if not sm.applies:  # TPM 1.2: only the session-less extend has a meaning
            published = {"E0": published["E0"]}
            components = {k: c for k, c in components.items() if k == "E0"}
        filled = [k for k in published if k not in components]
        if filled and len(per_mode) < len(pj.MODES):
            for k in filled:
                components[k] = published[k]
            pub = [k for k in filled if published[k].source == pj.PUBLISHED_SOURCE]
            est = [k for k in filled if k not in pub]
            if pub:
                notes.append(f"{', '.join(pub)}: {pj.PUBLISHED_ABOUT}; import a trace (--trace) or a "
                             "capture (--capture) for this machine's figures")
            for src in dict.fromkeys(published[k].source for k in est):  # one line per source
                notes.append(f"{', '.join(k for k in est if published[k].source == src)}: {src}; a trace or "
                             "capture with that command gives this machine's figure")
            notes.append(ARM_KERNEL_TRACE)
        projection = pj.project(n, n_src, components, per_mode)
        if not sm.applies:
            _without_sessions(projection, sf, notes)
    rep = BootReport(sf, sm, traces, n, n_src, projection, reason, "", identity, notes)
    rep.verdict = verdict(rep)
    return rep


def _without_sessions(p: pj.Projection, sf: SystemFacts, notes: list[str]) -> None:
    """A TPM 1.2: only the session-less mode is a real possibility; the others are not
    projected rather than projected for a session the kernel cannot open."""
    for mode in HMAC_MODES:
        mc = p.modes[mode]
        mc.total_s = mc.estimate_s = mc.arithmetic = None
        mc.note = None
        mc.reason = "no HMAC sessions on a TPM 1.2"
    e0 = p.components.get("E0")
    if e0 is not None and e0.source == pj.PUBLISHED_SOURCE:
        notes.append("E0 is a TPM 2.0 chip's PCR_Extend (SLB9670); a TPM 1.2's TPM_Extend may differ: "
                     "import a trace of this machine (--trace) for its own figure")


def _cost_basis(p: pj.Projection, mode: str) -> str:
    m = p.modes[mode]
    if any(s.startswith("capture") for s in m.sources):
        return "costs from a tpmtop bench capture"
    profiles = sorted({s.split(" (", 1)[0] for s in m.sources if s.startswith("chip profile")})
    if profiles:
        return f"costs from the {', '.join(profiles)}, not this TPM"
    if m.sources and all(s.startswith("published") for s in m.sources):
        return "costs from published SLB9670 figures, not this TPM"
    if any(s.startswith("published") for s in m.sources):
        return "costs partly from published SLB9670 figures, not this TPM"
    return "costs from the imported trace"


def verdict(rep: BootReport) -> str:
    """Every TPM cost the inputs show, the largest first: the kernel's session mode, systemd's
    TPM units on the critical path, retry loops in the journal."""
    parts: list[tuple[float, str, str]] = []  # (seconds, what, sentence)
    kernel_s, kernel = _kernel_verdict(rep)
    parts.append((kernel_s, "kernel", kernel))
    parts += _systemd_verdict(rep)
    parts += _journal_verdict(rep)
    parts.sort(key=lambda x: -x[0])
    rep.verdict_parts = [{"what": w, "seconds": round(t, 6), "text": txt} for t, w, txt in parts]
    return " ".join(txt for _, _, txt in parts)


def _systemd_verdict(rep: BootReport) -> list[tuple[float, str, str]]:
    units = rep.facts.units or []
    out = []
    # The chain's `+` times are each unit's own start-up on the path, one after another: they
    # add up. A device's blame time is a wait that overlaps everything else: named, not added.
    on = [u for u in units if u.on_critical_path and u.chain_took is not None]
    waits = [u for u in units if u.on_critical_path and u.chain_took is None and u.took is not None]
    if on or waits:
        total = sum((u.chain_took for u in on if u.chain_took is not None), Decimal(0))
        bt = rep.facts.boot_times
        of = f" of a {bt.total_text} boot" if bt and bt.total_text else ""
        names = ", ".join(f"{u.unit} +{u.chain_took_text}" for u in on)
        text = (f"On the critical path{of}, systemd's TPM units took {pj.fmt_seconds(total, 3)}: {names}"
                if on else f"systemd's TPM units are on the critical path{of}")
        if waits:
            text += ("; " if on else ": ") + ", ".join(f"{u.unit} waited {u.took_text} (blame)" for u in waits)
        out.append((float(max([total] + [u.took for u in waits if u.took is not None])), "systemd", text + "."))
    off = [u for u in units if u.on_critical_path is not True and u.took is not None and u.took >= 1]
    if off:
        names = ", ".join(f"{u.unit} {u.took_text}" for u in off)
        where = ("off the critical path, so they delay only what waits for them"
                 if rep.facts.critical_chain is not None else "(no critical-chain read: on the path or not is unknown)")
        slowest = max(u.took for u in off if u.took is not None)
        out.append((float(slowest) / 10, "systemd-off-path", f"Slow TPM units {where}: {names}."))
    return out


def _journal_verdict(rep: BootReport) -> list[tuple[float, str, str]]:
    j = rep.facts.journal
    out = []
    seen: set[str] = set()
    for e in (j.errors if j else []):  # longest loop first
        # One process logs a loop in several lines a try (tpm2-tss's ERROR, then its own
        # message): the longest group of each speaks for it.
        if e.count < 3 or e.ident in seen:
            continue
        seen.add(e.ident)
        code = f" (0x{e.rc:x}" + (f", {e.rc_text})" if e.rc_text else ")") if e.rc is not None else ""
        unit = next((u.unit for u in rep.facts.units or [] if u.on_critical_path
                     and (u.unit.startswith(e.ident + "@") or u.unit == e.ident + ".service")), None)
        where = (f"inside {unit}, on the critical path" if unit else "a retry loop that costs the boot that long")
        out.append((float(e.span), "journal",
                    f"{e.ident} logged the same TPM error {e.count} times over {pj.fmt_seconds(e.span, 3)}, "
                    f"every {pj.fmt_seconds(e.interval or Decimal(0), 3)}{code}: {where}."))
    return out


def _kernel_verdict(rep: BootReport) -> tuple[float, str]:
    sf, p, sm = rep.facts, rep.projection, rep.session
    if p is None:
        why = (rep.projection_reason or "").split(";")[0].removeprefix("no TPM: ")
        return 0.0, f"No TPM is visible ({why}), so TPM sessions cannot be slowing this boot."
    if not sm.applies:
        return _tpm12_verdict(rep)
    if rep.extends is None:
        return 0.0, (f"Cannot size the TPM's share of this boot: the number of PCR extends is unknown "
                     f"({rep.extends_source}); rerun as root or pass --extends N.")
    if rep.extends == 0:
        if rep.extends_source == "--extends":
            ima = sf.value("ima.measurements")
            counted = (f"; IMA counted {ima:,} measurements on this system, each one a PCR extend"
                       if ima else "")
            return 0.0, ("With --extends 0 the projection assumes the kernel extends no PCRs while booting"
                         f"{counted}: under that assumption its TPM session mode costs this boot nothing.")
        return 0.0, (f"The kernel extends no PCRs while booting ({rep.extends_source}), so its TPM session "
                     "mode costs this boot nothing.")
    n = _counted(rep)
    none = p.modes["none"]
    win = linux_window(sf)
    chip = _chip_note(rep, sm.mode or "per-command")
    if sm.mode is None:
        pc = p.modes["per-command"]
        return float(_bounded(pc.estimate_s, win) or 0), (
            f"Cannot tell which session mode this kernel uses ({'; '.join(sm.reasons)}): {n} would cost "
            f"{_claim(pc.estimate_s, win, n)} with per-command sessions and {_claim(none.estimate_s, win, n)} "
            f"without ({_cost_basis(p, 'per-command')}).{chip}")
    cur = p.modes[sm.mode]
    if cur.estimate_s is None:
        return 0.0, f"The kernel uses {sm.mode} sessions, but its cost cannot be projected: {cur.reason}.{chip}"
    basis = _cost_basis(p, sm.mode)
    if sm.mode == "none":
        return float(_bounded(cur.estimate_s, win) or 0), (
            f"PCR extends run without HMAC sessions here ({sm.rule}): they cost {_claim(cur.estimate_s, win, n)} "
            f"({basis}), so the session mode is not what slows it.{chip}")
    label = "HMAC per-command sessions" if sm.mode == "per-command" else "The kept HMAC session"
    # Each fix with its own saving: the kept session (6.12+) saves per-command − reuse, no HMAC
    # session at all saves per-command − none (one figure for both overstated the first).
    fixes = [("CONFIG_TCG_TPM2_HMAC=n (or `tpm.disable_pcr_integrity=1` on 6.12+)", none)]
    if sm.mode == "per-command":
        fixes.insert(0, ("a kernel with the fix (6.12+ keeps the session)", p.modes["reuse"]))
    said = [f"{fix} would save {saved}" for fix, other in fixes
            if (saved := _saving(cur, other, win)) is not None]
    tail = ("; " + "; ".join(said)) if said else ""
    return float(_bounded(cur.estimate_s, win) or 0), (
        f"{label} cost {_claim(cur.estimate_s, win, n)} ({basis}; decided by {sm.rule}){tail}.{chip}")


def _saving(cur: pj.ModeCost, other: pj.ModeCost, win: Window | None) -> str | None:
    """What moving from ``cur`` to ``other`` saves, bounded by the Linux part of the boot; None
    when it is not priced or saves nothing."""
    if other.total_s is None or cur.total_s is None:
        return None
    saving = pj.round_sig(cur.total_s - other.total_s)
    if saving <= 0:
        return None
    if win is not None and saving > win.seconds:
        return f"at most {pj.fmt_seconds(win.seconds, 3)} of it ({pj.fmt_estimate(saving)} for all of them)"
    return pj.fmt_estimate(saving)


# The phases of `systemd-analyze` in which the kernel extends PCRs: firmware and boot loader
# run before Linux (their extends are the event log's, whatever the kernel's session mode).
LINUX_PHASES = ("kernel", "initrd", "userspace")


@dataclass(frozen=True)
class Window:
    """The part of the boot a kernel PCR extend can run in, and how it is made up."""

    seconds: Decimal
    phases: str  # "kernel 1.912s + initrd 4.207s + userspace 5.030s"
    boot: str | None  # the whole boot, "20.276s"


def linux_window(sf: SystemFacts) -> Window | None:
    """Kernel + initrd + userspace from systemd-analyze (None when it was not read)."""
    bt = sf.boot_times
    if bt is None:
        return None
    have = [ph for ph in LINUX_PHASES if ph in bt.phases]
    if "kernel" not in have or "userspace" not in have:
        return None
    return Window(sum((bt.phases[ph] for ph in have), Decimal(0)),
                  " + ".join(f"{ph} {bt.phase_text.get(ph, bt.phases[ph])}" for ph in have), bt.total_text)


def _bounded(x: Decimal | None, win: Window | None) -> Decimal | None:
    """A cost the boot paid is never more than the phases it ran in."""
    if x is None or win is None:
        return x
    return min(x, win.seconds)


def _claim(x: Decimal | None, win: Window | None, n: str) -> str:
    """The cost with the phases it is compared with; never more than they took: a projection
    above them means the extends counted cannot all have run inside the boot."""
    if win is None:
        return (f"{pj.fmt_estimate(x)} for {n} (no systemd-analyze: the boot's length is unknown, so the cost "
                "is not bounded by it)")
    of = f" of a {win.boot} boot" if win.boot else ""
    part = f"the {pj.fmt_seconds(win.seconds, 4)} Linux part{of} ({win.phases}, where the kernel's extends run)"
    if x is None or x <= win.seconds:
        return f"{pj.fmt_estimate(x)} of {part}, for {n}"
    return (f"at most {pj.fmt_seconds(win.seconds, 3)}, all of {part}: at these costs the {n} would take "
            f"{pj.fmt_estimate(x)}, so not all of them ran inside it")


def _counted(rep: BootReport) -> str:
    """N and what it counts: IMA's count runs since boot, so it includes measurements made
    after the boot had finished (no per-extend time says which were inside it)."""
    n = f"{rep.extends:,} extends"
    if "counted since boot" in rep.extends_source:
        return f"{n} IMA counted since boot (later ones included: an upper bound)"
    if rep.extends_source == "--extends":
        return f"{n} (--extends)"
    return n


_VENDOR_WORDS = {"IFX": "infineon", "STM": "stmicro", "NTC": "nuvoton", "NTZ": "nationz", "ATML": "atmel",
                 "INTC": "intel", "AMD": "amd", "MSFT": "microsoft", "IBM": "ibm"}


def _same_vendor(a: str, b: str) -> bool:
    def key(x: str) -> str:
        x = x.strip()
        return _VENDOR_WORDS.get(x.upper(), x.lower())

    ka, kb = key(a), key(b)
    return ka.startswith(kb[:5]) or kb.startswith(ka[:5])


def _chip_note(rep: BootReport, mode: str) -> str:
    """When the costs are not this TPM's own (published figures of another chip, a capture of
    another TPM, a trace that does not name its chip): said on the verdict line, with what an
    answer for this chip would need."""
    p = rep.projection
    if p is None or mode not in p.modes:
        return ""
    sf = rep.facts
    vendor = sf.value("tpm.vendor")
    manufacturer = (rep.identity or {}).get("manufacturer")
    hid = sf.value("tpm.hid")
    who = str(vendor or manufacturer or "")
    this = who + (f" ({hid})" if hid and str(hid) not in who else "")
    if not this:
        return ""
    named = bool(manufacturer) or (bool(vendor) and "not named" not in str(vendor))
    sources = p.modes[mode].sources
    need = (" For this chip's own figures: a trace of its kernel's TPM commands (`tpmtop kernel`), a capture "
            "of it (`tpmtop bench --json`), or a profile recorded on it (`tpmtop profile record`).")
    if any(s.startswith("published") for s in sources):
        if named and _same_vendor(str(manufacturer or vendor), "IFX"):
            return ""
        if not named:
            return (f" This TPM ({this}) is priced with an Infineon SLB9670's published figures, which may not be "
                    f"its own.{need}")
        return f" This TPM is {this}, priced with an Infineon SLB9670's published figures, not its own.{need}"
    caps = [s for s in sources if s.startswith("capture")]
    if caps:
        if manufacturer and any(manufacturer in s for s in caps):
            return ""
        if vendor and not any("simulator" in s for s in caps) and any(_same_vendor(vendor, w) for s in caps
                                                                      for w in s.split("(")[-1].split()[:1]):
            return ""
        return f" This TPM is {this}; the capture's TPM is another ({caps[0].split('(', 1)[-1].rstrip(')')}).{need}"
    if any(s.startswith("trace") for s in sources):
        return f" This TPM is {this}; the imported trace does not name its chip, so the cost may be another's.{need}"
    return ""


def _tpm12_verdict(rep: BootReport) -> tuple[float, str]:
    sf, p = rep.facts, rep.projection
    fam = sf.fact("tpm.family")
    head = f"This is a TPM 1.2 ({fam.source}): the kernel opens no HMAC sessions on it, so no session mode applies."
    parts = [head]
    kl = sf.kernel_log
    secs = 0.0
    if kl is not None and kl.initcall_debug:
        tic = sorted(kl.tpm_initcalls(), key=lambda i: -i.usecs)
        if tic:
            secs = sum(i.usecs for i in tic) / 1e6

            def one(i: Any) -> str:
                why = " (IMA reads PCRs 0–7 for its boot aggregate)" if i.name == "init_ima" else ""
                return f"{i.name} {pj.fmt_seconds(Decimal(i.usecs) / 10**6, 2)}{why}"

            parts.append("Its TPM boot costs are the initcalls: " + ", ".join(one(i) for i in tic[:3]))
    none = p.modes["none"] if p is not None else None
    if p is not None and none is not None and rep.extends and none.estimate_s is not None:
        secs = max(secs, float(none.estimate_s))
        parts.append(f"and {rep.extends:,} PCR extends, about {pj.fmt_seconds(none.estimate_s, 2)} "
                     f"({_cost_basis(p, 'none')}).")
        if len(parts) == 2:
            parts[1] = "Its TPM boot cost: " + parts[1].removeprefix("and ")
    elif len(parts) > 1:
        parts[-1] += "."
    return secs, " ".join(parts)


# -- text -----------------------------------------------------------------------------------

def _table(rows: list[list[str]], header: list[str], right: Set[int] = frozenset(), indent: str = "  ") -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def fmt(r: list[str]) -> str:
        return indent + "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                                  for i, c in enumerate(r)).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dict):  # command-line parameters: a value can be a megabyte long
        return " ".join(k if x is None else f"{k}={shown(x)}" for k, x in v.items()) or "(none)"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "(none)"
    return str(v)


def _us(v: float) -> str:
    return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


FACT_LABELS = [
    ("kernel.release", "kernel"), ("kernel.config", "kernel config"),
    ("config.CONFIG_TCG_TPM2_HMAC", "CONFIG_TCG_TPM2_HMAC"), ("config.CONFIG_IMA", "CONFIG_IMA"),
    ("config.CONFIG_IMA_ARCH_POLICY", "CONFIG_IMA_ARCH_POLICY"),
    ("config.CONFIG_HW_RANDOM_TPM", "CONFIG_HW_RANDOM_TPM"),
    ("config.CONFIG_TCG_TIS_SPI", "CONFIG_TCG_TIS_SPI"),
    ("cmdline.tpm_ima", "TPM/IMA parameters"), ("tpm.disable_pcr_integrity", "disable_pcr_integrity"),
    ("tpm.chips", "TPM chips"), ("tpm.version", "TPM version"), ("tpm.family", "TPM family"),
    ("tpm.driver", "interface (driver)"), ("tpm.device_id", "device id"), ("tpm.vendor", "vendor"),
    ("tpm.description", "description"), ("tpm.hid", "ACPI HID"), ("tpm.null_name", "null_name (HMAC)"),
    ("tpm.devices", "device nodes"), ("ima.measurements", "IMA measurements"), ("ima.violations", "IMA violations"),
    ("ima.policy_hints", "IMA policy hints"), ("eventlog", "firmware event log"), ("dmesg", "kernel log"),
    ("systemd", "systemd-analyze"), ("systemd.blame", "systemd-analyze blame"),
    ("systemd.critical-chain", "critical chain"), ("journal", "journal"),
]


def _fact_value(name: str, f: Any) -> str:
    v = f.value
    if name == "eventlog":
        return (f"{v.events} events ({v.extends} extends by firmware, {v.format}: "
                f"{', '.join(v.algorithms)})" + (f"; {v.note}" if v.note else ""))
    if name == "dmesg":
        return (f"{len(v.tpm_lines)} TPM/IMA lines, {len(v.warnings)} warnings, initcall_debug "
                + ("on" if v.initcall_debug else "off"))
    if name == "systemd":
        return " + ".join(f"{t} ({k})" for k, t in v.phase_text.items()) + f" = {v.total_text}"
    if name == "journal":
        return (f"{v.entries:,} entries, {v.error_lines} TPM/TSS error lines in {len(v.errors)} group(s)")
    return _show(v)


def _units_section(sf: SystemFacts) -> list[str]:
    if not sf.units:
        return []
    rows = []
    for u in sf.units:
        path = "?" if u.on_critical_path is None else "yes" if u.on_critical_path else "no"
        rows.append([u.unit, u.took_text or "-", path, "@" + u.at_text if u.at_text else "-",
                     u.role or ""])
    out = ["systemd TPM units"] + _table(rows, ["unit", "took", "critical path", "active at", "what it does"],
                                        right={1, 3})
    if sf.critical_chain is None:
        out.append("  (no critical-chain read: whether a unit delayed the boot is unknown)")
    else:
        out.append(f"  critical chain to {sf.critical_chain[0].unit}: {len(sf.critical_chain)} units")
    return out + [""]


def _journal_section(sf: SystemFacts) -> list[str]:
    j = sf.journal
    if j is None or not j.errors:
        return []
    rows = []
    for e in j.errors:
        iv = e.interval
        code = f"0x{e.rc:x} {e.rc_text or ''}".strip() if e.rc is not None else ""
        msg = e.message if len(e.message) <= 70 else e.message[:67] + "..."
        rows.append([str(e.count), f"{e.first:.3f}", f"{e.last:.3f}",
                     pj.fmt_seconds(iv, 2) if iv is not None else "-", e.ident, msg])
        if code:
            rows.append(["", "", "", "", "", f"  → {code}"])
    return (["TPM errors in the journal (times: seconds since boot)"]
            + _table(rows, ["count", "first", "last", "every", "logged by", "message"], right={0, 1, 2, 3})
            + [""])


def render_text(rep: BootReport) -> str:
    sf = rep.facts
    out: list[str] = [f"tpmtop boot — {'this system' if sf.root == '/' else sf.root} "
                      "(read from files only; no TPM commands sent)" if rep.identity is None else
                      f"tpmtop boot — {sf.root}", ""]
    rows, missing = [], []
    for name, label in FACT_LABELS:
        f = sf.get(name)
        if f is None:
            continue
        if f.ok:
            rows.append([label, _fact_value(name, f), f.source_note])
        else:
            missing.append(f"  {label}: {f.reason}")
    out += ["System"] + _table(rows, ["fact", "value", "source"]) + [""]
    if missing:
        out += ["Could not see"] + missing + [""]

    if rep.identity:
        i = rep.identity
        out.append(f"TPM (asked directly): {i.get('manufacturer')} {i.get('vendor', '')} firmware {i.get('firmware')}"
                   + (" — a simulator, not this machine's TPM" if i.get("simulated") else ""))
        if not i.get("simulated"):
            out.append("  note: on Linux 6.12+ this query ended the kernel's kept HMAC session")
        out.append("")

    sm = rep.session
    mode = sm.mode or ("does not apply (TPM 1.2)" if not sm.applies else "cannot tell")
    out.append(f"Kernel session mode for PCR extends: {mode}")
    out += [f"  - {r}" for r in sm.reasons]
    if sm.rule:
        out.append(f"  decided by: {sm.rule}")
    out.append("")

    kl = sf.kernel_log
    if kl is not None:
        if kl.problems:
            out.append("Kernel TPM errors and warnings")
            for pr in kl.problems:
                at = f"[{pr.time_s}] " if pr.time_s is not None else ""
                out.append(f"  {at}{pr.text}")
                code = (f" — response code 0x{pr.rc:x}: {pr.rc_text or '(tpm2-tss not available to word it)'}"
                        if pr.rc is not None else "")
                out.append(f"      {KIND_TEXT[pr.kind]}{code}")
            out.append("")
        other = [w for w in kl.warnings if w not in {pr.text for pr in kl.problems}]
        if other:
            out += ["Kernel log warnings"] + [f"  {w}" for w in other] + [""]
        if kl.tpm_lines:
            shown = kl.tpm_lines[:12]
            out += ["Kernel log: TPM/IMA lines"] + [f"  {ln}" for ln in shown]
            if len(kl.tpm_lines) > len(shown):
                out.append(f"  … {len(kl.tpm_lines) - len(shown)} more (--json has all)")
            out.append("")
        if kl.initcall_debug:
            tic = kl.tpm_initcalls()
            total = kl.initcall_total_usecs
            tpm_total = sum(i.usecs for i in tic)
            # the count is of the rows listed (TPM/IMA ones), beside all initcalls' sum
            out.append(f"initcall_debug: {len(tic)} TPM/IMA initcalls, {tpm_total:,} µs, of {len(kl.initcalls)} "
                       f"initcalls logged, {total:,} µs in all")
            if tic:
                out += _table([[i.name + (f" [{i.module}]" if i.module else ""), f"{i.usecs:,}",
                                f"{100 * i.usecs / total:.1f} %" if total else "-"] for i in tic],
                              ["TPM/IMA initcall", "µs", "share"], right={1, 2})
            unfinished = kl.to_json()["unfinished_tpm_initcalls"]
            if unfinished:
                out.append(f"  never returned: {', '.join(unfinished)}")
            out.append("")
        elif kl is not None:
            out += ["initcall_debug: off (add initcall_debug to the kernel command line to time TPM/IMA init)", ""]

    out += _units_section(sf) + _journal_section(sf)

    for t in rep.traces:
        out.append(f"Trace {t.path} ({t.format}{', HMAC sessions seen' if t.hmac_seen else ''})")
        for title, series in (("TPM command", t.operations), ("function", t.functions)):
            rows = []
            for name, s in sorted(series.items()):
                j = s.to_json()
                if "summary_us" in j and s.precision != "sum":
                    sm_ = j["summary_us"]
                    rows.append([name, str(s.calls), _us(sm_["p50"]), _us(sm_["max"]),
                                 _us(j.get("total_us", sm_["mean"] * sm_["count"])), s.precision])
                else:
                    tot = sum(x["total"] for x in j.get("sums_us", []))
                    rows.append([name, "?" if s.calls is None else str(s.calls), "-", "-", _us(tot), "sum"])
            if rows:
                out += _table(rows, [title, "calls", "p50 µs", "max µs", "total µs", "precision"],
                              right={1, 2, 3, 4})
        out += [f"  note: {n}" for n in t.notes] + [""]

    p = rep.projection
    if p is None:
        out += [f"Projection: not made — {rep.projection_reason}", ""]
    else:
        cnt = "unknown" if p.extends is None else f"{p.extends:,}"
        out += [f"Projection: N = {cnt} kernel PCR extends ({p.extends_source})"]
        if sf.event_log is not None:
            out.append(f"  (the firmware's {sf.event_log.extends} event-log extends happen before Linux "
                       "and do not depend on the kernel's session mode)")
        for k, c in p.components.items():
            out.append(f"  {k:<2} = {pj.fmt_us(c.us):>10} µs  {pj.COMPONENTS[k]}: {c.source}"
                       + (f" ({c.detail})" if c.detail else ""))
        rows = []
        for m in pj.MODES:
            mc = p.modes[m]
            mark = (" ◀ this kernel" if m == rep.session.mode else
                    " ◀ TPM 1.2" if m == "none" and not rep.session.applies else "")
            rows.append([m + mark, pj.fmt_estimate(mc.estimate_s) if mc.estimate_s is not None else "-",
                         mc.formula, mc.note or mc.reason or ""])
        out += _table(rows, ["mode", "estimate", "formula", "caveat"])
        out.append("  arithmetic:")
        for m in pj.MODES:
            mc = p.modes[m]
            out.append(f"    {m:<11} {mc.arithmetic or '(' + (mc.reason or '?') + ')'}")
        out.append(f"  estimates rounded to {pj.SIG} significant figures")
        out.append("")
    out += [f"note: {n}" for n in rep.notes]
    if rep.notes:
        out.append("")
    out.append(f"Verdict: {rep.verdict}")
    return "\n".join(out) + "\n"
