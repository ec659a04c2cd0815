"""Boot-cost projection: how long the kernel's PCR extends take under each session mode.

Per-extend cost of each mode, built from per-command costs (the kernel's own sequences,
see domain notes §2):

    none         N × E0                    PCR_Extend with a password session
    per-command  N × (L + S + F + Eh)      6.10–6.11.6: a fresh salted session per extend
    reuse        (L + S + F) + N × Eh      6.12+: the session is kept (a lower bound: every
                                           user-space TPM access, resume … pays L+S+F again)
    saved        (L + S + F) + N × (L + Eh + C)  the proposed context-save variant

L = ContextLoad, S = StartAuthSession (salted), F = FlushContext, Eh = PCR_Extend in an
HMAC session, E0 = PCR_Extend without one, C = ContextSave. A capture from ``tpmtop bench``
(or the dashboard's own op p50s) measures a whole mode per extend and is used as is; that is
operation time, host work included, so a mode priced from commands beside it adds the host
time of an operation (``host``: H, said in the formula) — one basis on one line. All
arithmetic is Decimal; estimates are rounded to two significant figures because the per-call
cost varies from call to call and the models leave things out.

This is the one pricing of the modes: ``tpmtop boot``, the dashboard's Modes line and its
``p`` screen all call :func:`project`, so ``saved`` has one price everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from tpmtop.boot.series import OP_EXTEND, OP_EXTEND_HMAC, TraceResult, merged_operations
from tpmtop.errors import UsageError
from tpmtop.sessions.modes import MODE_INFO
from tpmtop.sessions.modes import MODES as MODES  # boot.report reads pj.MODES

COMPONENTS = {
    "E0": OP_EXTEND,
    "L": "ContextLoad",
    "S": "StartAuthSession",
    "F": "FlushContext",
    "Eh": OP_EXTEND_HMAC,
    "C": "ContextSave",
    # not a command: the host time of one operation (op p50 − its TPM time), added to a mode
    # priced from its commands when the modes beside it are priced by operation time and the
    # commands' own host time (below) is not known
    "H": "host time per operation",
}
# The host work of each command (a live sitting measures it apart from its wire time:
# tpmtop.sessions.accounting): a mode priced from its commands beside modes priced by
# operation time adds the host work of the commands it sends, its own basis. H, a whole
# per-command operation's host time, priced reuse ×5 too high at swtpm speed (its salt and
# key derivation, which reuse does once, counted on every extend).
HOST_COMPONENTS = {"h" + k: f"host work of {v}" for k, v in COMPONENTS.items() if k != "H"}
# A kept session's extends follow each other; the PCR_Extend measured inside per-command
# follows StartAuthSession's wait, and a command after a wait is slower, on the wire and on the
# host, than one back to back (docs/dashboard.md). So a kept-session extend not yet run is
# priced from plain extends measured as its would run: the dashboard's `none` baseline comes in
# short bursts (tpmtop.sources.live_workload), whose first extend follows the mode's operation
# and the others follow it back to back, each after the session's HMAC work timed on its own.
# Per extend: Eb + hEb, a plain extend back to back (wire, host); T, the TPM's own work for the
# HMAC'd extend over the plain one (Eh10 − Ew10, both after an operation, at p10, where waiting
# for a CPU adds least: tpmtop.sources.runs; and 0 where the two are not told apart:
# tpm_hmac_work); hM, the session's HMAC work.
# (each label fits p's 26-character column: tpmtop.tui.screens.projection)
KEPT_BASIS = {"Eh10": "PCR_Extend (HMAC), p10", "Ew10": "PCR_Extend, burst 1st, p10",
              "Eb": "PCR_Extend, back to back", "hM": "session HMACs back to back"}
HOST_COMPONENTS["hEb"] = "host work of a PCR_Extend, back to back"
HOST_COMPONENTS["hM"] = "host work of the session's HMACs, back to back"
KEPT_EXTEND = ("Eb", "T", "hEb", "hM")
COMPARED = ("Eh10", "Ew10", "Eh25", "Ew75")  # what T is read from (tpm_hmac_work)


def tpm_hmac_work(components: dict[str, Cost]) -> tuple[Cost, str]:
    """T, the TPM's own work for an HMAC'd extend over a plain one, and how it was read.

    Eh10 − Ew10 only where the HMAC'd extend is told apart from the plain one: its lower
    quartile (Eh25) above the plain one's upper quartile (Ew75). Ew comes from the first extend
    of each of the baseline's bursts, one per burst: ~15 samples in 600 per-command operations,
    whose p10 moved the difference by −12 to +34 µs between trials on swtpm, where the work
    itself is about a microsecond (docs/dashboard.md, "How close the estimate gets"); there the
    quartiles overlap and T is priced 0, said so. A chip's is told apart (slb9670: 24.4 ms
    against 6.4 ms) and priced in full."""
    diff = components["Eh10"].us - components["Ew10"].us
    source = components["Eh10"].source  # the sitting its inputs were measured in
    if components["Eh25"].us > components["Ew75"].us:
        return Cost(diff, source, "Eh10 − Ew10"), f"T = Eh10 − Ew10 = {fmt_us(diff)} µs"
    return Cost(Decimal(0), source, "not told apart"), (
        f"T = 0: the HMAC'd extend is not told apart from the plain one (Eh's p25 "
        f"{fmt_us(components['Eh25'].us)} µs not above Ew's p75 {fmt_us(components['Ew75'].us)} µs; "
        f"Eh10 − Ew10 would be {fmt_us(diff)} µs)")


PUBLISHED_SOURCE = "published SLB9670 figures (last resort)"
PUBLISHED_ABOUT = ("Infineon SLB9670 via ftrace on kernel 6.11-rc2, Sept 2024: another machine's TPM, "
                   "so the estimates only show the order of magnitude")
# domain notes §3, µs.
PUBLISHED_US = {"E0": Decimal(6360), "L": Decimal(36977), "S": Decimal(84747), "F": Decimal(3195),
                "Eh": Decimal(24356)}
# No SLB9670 ContextSave is published: the slb9670 profile's estimate (equal to ContextLoad, the
# same work in the other direction), said as an estimate wherever it prices something.
ESTIMATED_US = {"C": Decimal(36977)}
ESTIMATED_SOURCE = ("estimated: no published SLB9670 ContextSave, taken equal to its ContextLoad "
                    "(the slb9670 profile's estimate)")
SIG = 2


@dataclass
class Cost:
    us: Decimal
    source: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"us": float(self.us), "source": self.source, "detail": self.detail}


@dataclass
class ModeCost:
    mode: str
    formula: str
    arithmetic: str | None = None
    total_s: Decimal | None = None
    estimate_s: Decimal | None = None
    sources: list[str] = field(default_factory=list)
    note: str | None = None
    reason: str | None = None  # why no figure

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "formula": self.formula, "arithmetic": self.arithmetic,
                "total_s": float(self.total_s) if self.total_s is not None else None,
                "estimate_s": float(self.estimate_s) if self.estimate_s is not None else None,
                "sources": self.sources, "note": self.note, "reason": self.reason}


@dataclass
class Projection:
    extends: int | None
    extends_source: str
    components: dict[str, Cost]
    modes: dict[str, ModeCost]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"extends": self.extends, "extends_source": self.extends_source,
                "components_us": {k: c.to_json() for k, c in self.components.items()},
                "modes": {k: m.to_json() for k, m in self.modes.items()},
                "significant_figures": SIG, "notes": self.notes}


def round_sig(x: Decimal, n: int = SIG) -> Decimal:
    if x == 0:
        return Decimal(0)
    exp = x.adjusted() - n + 1
    return x.quantize(Decimal(1).scaleb(exp), rounding=ROUND_HALF_EVEN)


def fmt_us(x: Decimal) -> str:
    """As many decimals as the input had (at most 3): the arithmetic shows the inputs verbatim."""
    q = x.quantize(Decimal("0.001")).normalize()
    return f"{q:,f}"


def fmt_seconds(x: Decimal, digits: int | None = None) -> str:
    """A duration in s (or ms below 1 s) with ``digits`` significant figures (None: 4)."""
    v = round_sig(x, digits or 4)
    if abs(v) < 1:
        return f"{(v * 1000).normalize():,f} ms"
    return f"{v.normalize():,f} s"


def fmt_estimate(x: Decimal | None) -> str:
    return "?" if x is None else "about " + fmt_seconds(x, SIG)


def costs_from_traces(traces: list[TraceResult], calls_per_sum: int | None) -> tuple[dict[str, Cost], list[str]]:
    out: dict[str, Cost] = {}
    notes: list[str] = []
    ops = merged_operations(traces)
    for comp, op in COMPONENTS.items():
        s = ops.get(op)
        if s is None:
            continue
        ns, how = s.per_call_ns(calls_per_sum)
        # Name only the traces whose kind of data the figure came from (exact beats bucketed beats sums).
        kind = "samples_ns" if s.samples_ns else "buckets" if s.buckets else "sums"
        files = [t.path for t in traces if op in t.operations and getattr(t.operations[op], kind)]
        src = "trace " + ", ".join(files)
        if ns is None:
            notes.append(f"{op} in the trace is not usable as a per-call cost: {how}")
            continue
        out[comp] = Cost((Decimal(repr(ns)) / 1000).quantize(Decimal("0.001")), src, how)
    return out, notes


def load_capture_costs(path: str, components: dict[str, Cost] | None = None) -> tuple[dict[str, Cost], list[str]]:
    """Per-mode extend cost (op_us p50) from a ``tpmtop bench --json`` capture. A capture of
    the kernel's own commands (``tpmtop kernel --json``: an observed run) gives per-command
    costs instead, added to ``components`` where they are missing.

    Read with the capture package's streaming summary loader (schema-checked, finite numbers,
    events skipped as they stream by: a million-event capture needs no gigabyte of dicts);
    strings made safe for a terminal (the report quotes the capture's TPM names)."""
    from tpmtop.capture import load_summary
    from tpmtop.textsafe import safe_tree

    try:
        data = safe_tree(load_summary(path))
    except UsageError as e:
        msg = str(e)  # the user passed several files: the line must say which one
        raise UsageError(msg if path in msg else f"{path}: {msg}") from None
    for i, run in enumerate(data.get("runs") or ()):
        p50 = run["op_us"]["p50"]
        if p50 > _MAX_EXTEND_US:  # finite but absurd: the projection's decimals would overflow
            raise UsageError(f"{path}: runs[{i}].op_us.p50 of {p50:.3g} µs is not a plausible PCR extend")
    per_mode, notes = capture_costs(data, path)
    kernel = kernel_components(data, path)
    if kernel:
        notes = [n for n in notes if "has no extend runs" not in n]
        if components is not None:
            for k, c in kernel.items():
                components.setdefault(k, c)
    return per_mode, notes


# tpmtop kernel's per-command runs: the kernel's own commands, timed at tpm_transmit.
_KERNEL_COMMANDS = {"TPM2_CC_ContextLoad": "L", "TPM2_CC_StartAuthSession": "S", "TPM2_CC_FlushContext": "F",
                    "TPM2_CC_ContextSave": "C"}


def kernel_components(data: dict[str, Any], path: str) -> dict[str, Cost]:
    """Per-command costs (p50) from a ``tpmtop kernel --json`` capture. Its PCR_Extends carry
    an HMAC session when the kernel also started sessions (the probe sees only the header), so
    they price Eh then, E0 otherwise."""
    out: dict[str, Cost] = {}
    kernel_trace = data.get("kernel_trace")
    own = kernel_trace.get("kernel_commands") if isinstance(kernel_trace, dict) else None
    for run in data.get("runs") or ():
        if not isinstance(run, dict) or run.get("engine") != "observed" or run.get("mode") != "kernel":
            continue
        # the kernel's own commands when the capture says which they are (tpmtop kernel
        # since it names user-space and resource-manager commands): a tpm2-tools
        # StartAuthSession through /dev/tpmrm0 must not make the kernel's extends "HMAC"
        listed = run.get("commands")
        cmds: dict[str, Any] = own if isinstance(own, dict) else listed if isinstance(listed, dict) else {}
        hmac = "TPM2_CC_StartAuthSession" in cmds
        for name, summ in cmds.items():
            comp: str | None
            comp = ("Eh" if hmac else "E0") if name == "TPM2_CC_PCR_Extend" else _KERNEL_COMMANDS.get(name)
            p50 = summ.get("p50") if isinstance(summ, dict) else None
            if comp is None or not isinstance(p50, (int, float)) or p50 <= 0:
                continue
            out[comp] = Cost(Decimal(repr(float(p50))).quantize(Decimal("0.001")),
                             f"kernel capture {path}", f"p50 of {summ.get('count')} {name.removeprefix('TPM2_CC_')}")
    return out


_MAX_EXTEND_US = 3.6e9  # an hour


def capture_costs(data: Any, path: str) -> tuple[dict[str, Cost], list[str]]:
    """The checks tpmtop boot itself relies on, whichever loader read ``data``."""
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("tpmtop.capture/"):
        raise UsageError(f"{path}: not a tpmtop capture (no \"schema\": \"tpmtop.capture/1\")")
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise UsageError(f"{path}: capture has no \"runs\" list")
    tpm_member = data.get("tpm")
    tpm: dict[str, Any] = tpm_member if isinstance(tpm_member, dict) else {}
    where = " ".join(str(tpm[k]) for k in ("manufacturer", "vendor", "tcti") if tpm.get(k)) or "an unnamed TPM"
    if tpm.get("simulated"):
        where += ", a simulator — not this machine's TPM"
    best: dict[str, tuple[int, Cost]] = {}
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or run.get("op") != "extend":
            continue
        mode, engine = run.get("mode"), run.get("engine")
        p50 = (run.get("op_us") or {}).get("p50") if isinstance(run.get("op_us"), dict) else None
        if mode not in MODES:
            continue
        if not isinstance(p50, (int, float)) or p50 <= 0:
            raise UsageError(f"{path}: runs[{i}] (extend, {mode}) has no positive op_us.p50")
        # The kernel's own extends (tpmtop kernel / --kernel) are the real thing; of tpmtop's
        # engines, native is closer to the kernel's few µs of host work than ESAPI.
        rank = {"kernel": 0, "native": 1}.get(str(engine), 2)
        count = (run.get("op_us") or {}).get("count")
        cost = Cost(Decimal(repr(float(p50))), f"capture {path} ({where})",
                    f"p50 of {count} of the kernel's own extends" if engine == "kernel"
                    else f"p50 of {count} extends, engine {engine}")
        if mode not in best or rank < best[mode][0]:
            best[mode] = (rank, cost)
    notes = []
    if not best:
        notes.append(f"capture {path} has no extend runs")
    for run in runs:
        if isinstance(run, dict) and run.get("engine") == "kernel" and run.get("op") == "extend":
            # what the traced kernel did, from its own traffic: may differ from this machine's
            # config (the capture can be another machine's, or another boot's)
            notes.append(f"capture {path}: the traced kernel's {run.get('ops')} extends ran as "
                         f"'{run.get('mode')}' (from its own traffic)")
    engines = {"kernel" if "kernel's own" in c.detail else c.detail.rsplit("engine ", 1)[-1] for _, c in best.values()}
    if not engines & {"native", "kernel"} and best:
        notes.append("capture has only ESAPI runs: their host cost (OpenSSL look-ups) is far above the kernel's")
    return {m: c for m, (_, c) in best.items()}, notes


def _formula(once: list[str], each: list[str]) -> str:
    def group(letters: list[str]) -> str:
        return f"({' + '.join(letters)})" if len(letters) > 1 else letters[0]

    per = f"N × {group(each)}"
    return f"{group(once)} + {per}" if once else per


def _sum(names: list[str], comps: dict[str, Cost]) -> Decimal:
    return sum((comps[n].us for n in names), Decimal(0))


def project(extends: int | None, extends_source: str, components: dict[str, Cost],
            per_mode: dict[str, Cost] | None = None, per_mode_what: str = "capture p50") -> Projection:
    """``components``: per-command costs by letter (E0, L, S, F, Eh, C), and H, the host time
    of one operation; ``per_mode``: whole-mode per-extend costs (from a capture, or the
    dashboard's op p50s: ``per_mode_what`` names them), which win over the components for
    their mode. Those are operation times, host work included: beside them a mode priced from
    its commands adds H (one basis), or says in its row that it is TPM time only."""
    per_mode = per_mode or {}
    proj = Projection(extends, extends_source, components, {})
    n = extends
    hmac_work = tpm_hmac_work(components) if all(x in components for x in COMPARED) else None
    if hmac_work is not None:
        components = components | {"T": hmac_work[0]}  # derived from the inputs, not one of them
    for mode, info in MODE_INFO.items():  # the formulas are the modes' own (tpmtop.sessions.modes)
        once, each = list(info.once), list(info.each)
        mc = ModeCost(mode, info.formula, note=info.projection_note)
        if per_mode and mode not in per_mode:
            if each == ["Eh"] and all("h" + x in components for x in once) \
                    and hmac_work is not None and all(x in components for x in KEPT_EXTEND):
                # a kept session's extends, back to back: priced on that basis (above)
                once, each = once + ["h" + x for x in once], list(KEPT_EXTEND)
                mc.formula = _formula(once, each)
                mc.note = "; ".join(x for x in (mc.note, "each extend: none's PCR_Extend back to back (Eb, hEb) + the "
                                                         "TPM's HMAC work on it (T: Eh10 − Ew10, both after an "
                                                         "operation, at p10, where told apart) + the session's HMACs "
                                                         f"timed back to back (hM); {hmac_work[1]}") if x)
            elif all("h" + x in components for x in once + each):
                # each command's own host work: the basis of the modes priced by op p50
                once, each = once + ["h" + x for x in once], each + ["h" + x for x in each]
                mc.formula = _formula(once, each)
            elif "H" in components:
                each.append("H")  # host time per operation: the basis of the modes priced by op p50
                mc.formula = _formula(once, each)
            else:
                mc.note = "; ".join(x for x in (mc.note, f"TPM time only: its commands, without the host work "
                                                           f"the {per_mode_what}s of the other modes include") if x)
        proj.modes[mode] = mc
        if mode in per_mode:
            c = per_mode[mode]
            mc.formula = f"N × ({per_mode_what} for this mode)"
            if not info.note_when_measured:
                mc.note = None  # priced by its own p50, not from its commands
            mc.sources = [f"{c.source}: {c.detail}"]
            if n is None:
                mc.reason = "number of extends unknown"
                continue
            mc.total_s = Decimal(n) * c.us / Decimal(10 ** 6)
            mc.arithmetic = f"{n:,} × {fmt_us(c.us)} µs = {fmt_seconds(mc.total_s)}"
            mc.estimate_s = round_sig(mc.total_s)
            continue
        missing = [x for x in once + each if x not in components]
        if missing:
            mc.reason = "no cost for " + ", ".join(f"{x} ({COMPONENTS.get(x, 'host time')})"
                                                   for x in dict.fromkeys(missing))
            continue
        mc.sources = sorted({components[x].source for x in once + each})
        if n is None:
            mc.reason = "number of extends unknown"
            continue
        per = _sum(each, components)
        first = _sum(once, components)
        mc.total_s = (first + Decimal(n) * per) / Decimal(10 ** 6)
        mc.estimate_s = round_sig(mc.total_s)
        def terms(names: list[str]) -> str:
            t = " + ".join(fmt_us(components[x].us) for x in names)
            return f"({t})" if len(names) > 1 else t

        steps = [f"{n:,} × {terms(each)} µs"]
        if len(each) > 1:
            steps.append(f"{n:,} × {fmt_us(per)} µs")
        if once:
            steps = [f"{terms(once)} µs + {s}" for s in steps]
            if len(each) > 1:
                steps[-1] = f"{fmt_us(first)} µs + {n:,} × {fmt_us(per)} µs"
        mc.arithmetic = " = ".join(steps + [fmt_seconds(mc.total_s)])
    return proj


def published_components() -> dict[str, Cost]:
    """The published SLB9670 figures, and the estimate for what nothing published gives (C)."""
    return ({k: Cost(v, PUBLISHED_SOURCE) for k, v in PUBLISHED_US.items()}
            | {k: Cost(v, ESTIMATED_SOURCE) for k, v in ESTIMATED_US.items()})
