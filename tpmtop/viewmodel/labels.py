"""The words the screen shows for what a source hands up as facts (issue 54): the header's
(:func:`header_text`), the Latency and Modes panels' notes (:func:`timing_notes`) and tpmtop's
own CPU (:func:`cpu_text`). A source says which state it is in, who the TPM is and how many
commands it saw; the sentences are written here, once, for every source. No Textual here.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

from tpmtop.sources.meters import CpuMeter
from tpmtop.sources.protocol import (
    CaptureFacts,
    HeaderInfo,
    KernelFacts,
    LiveFacts,
    PassiveFacts,
    PauseCause,
    PauseReason,
    SourceState,
    TpmName,
)
from tpmtop.sources.timings import KernelSessions, TimingsView
from tpmtop.textsafe import counted
from tpmtop.tpm.names import RC_OBJECT_MEMORY, RC_SESSION_HANDLES, RC_SESSION_MEMORY
from tpmtop.viewmodel.frame import HeaderText

# A full TPM's response code, and what is full (the workload pauses: tpmtop.sources.live_workload)
SLOTS = {RC_OBJECT_MEMORY: "object slots", RC_SESSION_MEMORY: "session slots", RC_SESSION_HANDLES: "session handles"}
KERNEL_TOOLTIP = ("the kernel's own TPM commands through kprobes on tpm_transmit: tpmtop sends nothing to the TPM, "
                  "so the kernel's kept HMAC session is not disturbed")


def header_text(h: HeaderInfo) -> HeaderText:
    """The header's words for a source's facts (each kind of source its own: live, a capture,
    the kernel's traffic, sysfs only)."""
    base = HeaderText(state=h.state, identity=_identity(h.name), tcti=h.tcti, simulated=h.simulated,
                      engine=h.engine, mode=h.mode, op=h.op, simulated_reason=h.simulated_reason,
                      profile=h.profile, marker=h.marker)
    f = h.facts
    if isinstance(f, LiveFacts):
        extra = f"poll {f.poll_s:g} s"
        if h.state is SourceState.DISCONNECTED:
            extra = f"retrying: {f.last_error or ''}"[:80]
        return replace(base,
            rate="rate max" if f.rate == 0 else f"rate {f.rate:g}/s, bursts of {f.burst}", extra=extra,
            marker=_paused(f.pause) if f.pause else f"TPM period {f.period}" if f.period > 1 else "",
            tooltip=f.profile_note or (f"profile {h.profile}" if h.profile else None))
    if isinstance(f, CaptureFacts):
        return replace(base, extra=_capture_line(f), tooltip=(
            f"profile {h.profile}: the capture's latencies were reproduced on a simulator" if h.profile else None))
    if isinstance(f, KernelFacts):
        return replace(base, identity="kernel TPM (not contacted)" if f.tpm_here else "kernel TPM",
                             extra=" · ".join(_kernel_bits(f)), tooltip=KERNEL_TOOLTIP)
    if isinstance(f, PassiveFacts):
        # Say what sysfs says: "not contacted" only when there is a TPM not to contact.
        return replace(base, identity="kernel TPM (not contacted)" if f.tpm_here else f"no TPM here (no {f.tpm_dir})",
                             tcti=f"{h.tcti} (--passive: {f.tpm_dir} and securityfs only)",
                             extra="no TPM traffic: sysfs and securityfs only", tooltip=f.note)
    return base


def _paused(p: PauseReason) -> str:
    """Why the workload paused itself."""
    if p.cause is PauseCause.SLOTS_FULL:
        return f"paused: TPM {SLOTS.get(p.rc or 0, 'slots')} full, see Handles"
    if p.cause is PauseCause.SLOT_FREED:
        return "paused: a slot was freed, space resumes"
    return f"paused after {p.failed} failed operations in a row"


def _identity(name: TpmName | None) -> str:
    if name is None:
        return "…"  # the TPM has not answered yet
    return (f"{'?' if name.manufacturer is None else name.manufacturer} {name.vendor or ''} "
            f"fw {'?' if name.firmware is None else name.firmware}")


def _capture_line(f: CaptureFacts) -> str:
    paced = ""
    if f.paced:
        paced = " · unpaced" if not f.rate else \
            f" · paced {f.rate:g}/s, bursts of {'?' if f.burst is None else f.burst}"
    return (f"{f.file} · {f.created} · {'?' if f.hostname is None else f.hostname} {f.kernel or ''}{paced}")


def _kernel_bits(f: KernelFacts) -> list[str]:
    bits = [counted(f.commands, "kernel command"), counted(f.extends, "extend")]
    if f.lost:  # before the long tail of the line: the header is cut at the terminal's width
        bits.append(f"{f.lost:,} events lost")
    bits.append("tpmtop sends no TPM command")
    if f.error:
        bits.insert(0, f"stopped: {f.error}")
    elif f.foreign:  # first, where a cut header still shows it
        bits.insert(0, "not a tpmtop probe trace (see the stream)")
    return bits


class TimingNotes(NamedTuple):
    """The Latency panel's subtitle and its operation rows' label, the Modes panel's subtitle
    and its lines of plain text under the bars."""

    subtitle: str
    run_label: str
    modes_note: str
    modes_lines: list[str]


def timing_notes(t: TimingsView) -> TimingNotes:
    label = f"{t.engine}/{t.mode}"
    if t.kernel is not None:
        subtitle = (f"kernel · {counted(t.run.ops, t.op + ' op', t.op + ' ops')}" if t.run
                    else "kernel · no extend yet")
        return TimingNotes(subtitle, label, "", _kernel_lines(t.kernel))
    if t.run is None and t.commands is not None:  # live, nothing of this run yet: what went on the wire
        subtitle = f"no {label} operation yet; all origins"
    else:
        subtitle = f"run {label}/{t.op} · {t.run.ops if t.run else 0} ops"
    note = ""
    if t.period is not None:
        p = t.period
        since = time.strftime("%H:%M:%S", time.localtime(p.since))
        subtitle += f" · this TPM period (since {since})"
        note = (f"since {since}; {p.earlier} earlier period{'s' if p.earlier != 1 else ''} "
                f"kept apart ({p.earlier_ops} ops)")
    return TimingNotes(subtitle, label, note, [])


def _kernel_lines(k: KernelSessions) -> list[str]:
    """The kernel's session verdict under the Modes bars, and what limits it."""
    lines = [f"sessions: {k.mode or 'cannot tell'}: {k.why}"]
    if k.note:  # a trace file of another kind: say so here too, not only in the stream
        lines.insert(0, k.note)
    if k.lost:
        lines.append(f"{k.lost:,} trace events lost (the buffer overran): commands are missing from these numbers")
    if k.mode == "reuse" and k.setups_after:
        most = sorted(k.setups_after.items(), key=lambda kv: -kv[1])
        lines.append("set-ups after: " + ", ".join(f"{what} ×{n}" for what, n in most))
    if k.blind:
        lines.append("no operation probes: an extend is its PCR_Extend alone, its host time not seen")
    elif k.estimated:
        lines.append("no operation probes: an extend is timed from its first command to its last")
    return lines


def cpu_text(cpu: CpuMeter) -> str:
    return f"CPU ui {cpu.ui:.0f}% all {cpu.process:.0f}%"
