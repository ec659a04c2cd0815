"""The Modes panel's rows: each (engine, mode) run's operation p50 and its ratio to ``none``,
and the time series of op p50 across mode switches. No Textual here."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tpmtop.sources.runs import RunView


@dataclass
class CompareRow:
    engine: str
    mode: str
    p50_us: float
    ratio: float | None  # to `none` of the same engine and op
    ops: int
    commands_per_op: float
    interleaved: int = 0  # `none`: how many of its operations ran as the interleaved baseline


def comparison(runs: list[RunView], op: str, modes_order: tuple[str, ...],
               interleaved: dict[tuple[str, str], int] | None = None) -> list[CompareRow]:
    """For each (engine, mode) run of ``op``: its operation p50 and the ratio to ``none``.
    ``interleaved``: (engine, op) -> `none` operations the live workload ran between another
    mode's (the baseline it measures by itself, tpmtop.sources.live_workload)."""
    mine = [r for r in runs if r.op == op and r.ops]
    base = {r.engine: r.op_us["p50"] for r in mine if r.mode == "none" and r.op_us["p50"]}
    order = {m: i for i, m in enumerate(modes_order)}
    engines = {"native": 0, "esys": 1}
    mine.sort(key=lambda r: (engines.get(r.engine, 9), r.engine, order.get(r.mode, 99)))
    inter = interleaved or {}
    return [CompareRow(r.engine, r.mode, r.op_us["p50"],
                       r.op_us["p50"] / base[r.engine] if r.engine in base else None,
                       r.ops, r.commands_total, inter.get((r.engine, op), 0) if r.mode == "none" else 0)
            for r in mine]


def fmt_ratio(ratio: float) -> str:
    """×13.2, ×1.6, ×123: three significant figures at most (the p50s are not more exact)."""
    return f"×{ratio:,.0f}" if ratio >= 100 else f"×{ratio:.1f}"


def baseline_note(rows: list[CompareRow], current_mode: str, width: int = 80) -> str:
    """What the mark on an interleaved `none` row means (plain text, one line of ``width``), or ""."""
    if not any(r.interleaved for r in rows):
        return ""
    between = f"{current_mode}'s" if current_mode != "none" else "another mode's"
    text = f"none*: the baseline, single operations interleaved with {between} (no key needed)"
    return text if len(text) <= width else f"none*: interleaved with {between}"


def headline(rows: list[CompareRow], current: tuple[str, str], measuring: bool) -> str:
    """The Modes panel's first line: the running mode's ratio to `none`, both p50s of this
    run (markup). ``measuring``: a live workload that measures the baseline by itself."""
    engine, mode = current
    if mode == "none":
        return f"[b]none[/] [dim]({engine})[/]: the baseline, no session" if measuring or rows else ""
    ratio = vs_none(rows, current)
    if ratio:
        return f"[b]{mode} {ratio}[/] [dim]({engine})[/]"
    if measuring:
        return f"[b]{mode}[/] vs none: [dim]measuring none…[/]"
    return ""


def vs_none(rows: list[CompareRow], current: tuple[str, str]) -> str:
    """The running mode's ratio to `none` ("×44.4 vs none"), the number the Modes panel's first
    line and the header say; "" for `none` itself or before both are measured."""
    row = next((r for r in rows if (r.engine, r.mode) == current), None)
    if current[1] == "none" or row is None or row.ratio is None:
        return ""
    base = next((r for r in rows if (r.engine, r.mode) == (current[0], "none")), None)
    n = min(row.ops, base.ops) if base is not None else row.ops
    few = f" ({n} ops: few)" if n < FEW_OPS else ""
    return f"{fmt_ratio(row.ratio)} vs none{few}"


# Fewer operations on either side and the ratio of two p50s is marked: the p50 of n samples
# has a 95 % interval of ranks n/2 ± 0.98·√n, at 30 the 32nd to 68th percentiles, below it
# wider still (the first "×45.0 vs none", from 6 operations, settled at ×23.7).
FEW_OPS = 30


PER_MODE_WHAT = "op p50 measured here"  # the projection's wording for the Modes panel's own p50s


def projection_of(components_us: dict[str, float], n: int, per_mode_us: dict[str, float] | None = None) -> Any:
    """The boot projection (tpmtop.boot.projection.project, the one pricing of the modes) of
    the Modes panel's numbers: what its boot line and ``p`` print."""
    from tpmtop.boot.projection import Cost, project

    return project(n, "", {k: Cost(Decimal(repr(v)), "") for k, v in components_us.items()},
                   {m: Cost(Decimal(repr(v)), "") for m, v in (per_mode_us or {}).items()}, PER_MODE_WHAT)


def projection_summary(components_us: dict[str, float], n: int, per_mode_us: dict[str, float] | None = None) -> str:
    """One line for the Modes panel: each mode's estimate for N extends. A mode that ran here
    is N × the op p50 shown above it (one set of numbers); one that did not is priced from
    the commands it would send, each at its p50 wire time plus its own host work (hEh …), so
    that it is op time too (one basis on the line); where the commands' host work is not known
    apart (a capture), plus H, per-command's host time per operation. Without either it would
    be TPM time only: left to ``p``, which says so in its row, rather than shown beside op
    times. ``saved`` needs C (ContextSave), measured only when saved ran: until then it is not
    priced."""
    from tpmtop.boot.projection import fmt_estimate

    per_mode_us = per_mode_us or {}
    proj = projection_of(components_us, n, per_mode_us)

    def est(mc: Any) -> str:
        return fmt_estimate(mc.estimate_s).removeprefix("about ")

    ran = [f"{m} {est(mc)}" for m, mc in proj.modes.items() if mc.estimate_s is not None and m in per_mode_us]
    own_host = any(k.startswith("h") for k in components_us)
    host = own_host or "H" in components_us
    priced = [f"{m} ≈{est(mc)}" for m, mc in proj.modes.items() if mc.estimate_s is not None
              and m not in per_mode_us and (host or not ran)]
    if not ran and not priced:
        return ""
    text = f"[b]boot, {n:,} extends[/] [dim](p)[/]"
    if ran:
        text += ": N × op p50: " + " · ".join(ran)
    if priced:
        how = ("its commands' wire + host time" if own_host else "commands + per-command's host time") \
            if host and ran else "TPM time only"
        text += (f"; [dim]not run, {how}:[/] " if ran else f": [dim]{how}:[/] ") + " · ".join(priced)
    return text
