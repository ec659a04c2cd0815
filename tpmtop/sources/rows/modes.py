"""The Modes panel's rows: each (engine, mode) run's operation p50 and its ratio to ``none``,
and the time series of op p50 across mode switches. No Textual here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from tpmtop.sources.runs import RunView


@dataclass
class TimelinePoint:
    t: float  # end of the second, monotonic s
    mode: str
    p50_us: float
    ops: int


def timeline(points: Sequence[tuple[float, str, str, str, int]], op: str, engine: str, now: float,
             seconds: int) -> list[TimelinePoint | None]:
    """Operation p50 per second over the last ``seconds`` (None: no operation that second),
    each second labelled with the mode most of its operations ran in: one series across mode
    switches, so a switch shows as a step."""
    from statistics import median

    start = now - seconds
    per: list[list[int]] = [[] for _ in range(seconds)]
    modes: list[dict[str, int]] = [{} for _ in range(seconds)]
    for t, e, m, o, total in reversed(points):
        if t < start:
            break
        if o != op or e != engine:
            continue
        i = min(seconds - 1, int(t - start))
        per[i].append(total)
        modes[i][m] = modes[i].get(m, 0) + 1
    out: list[TimelinePoint | None] = []
    for i in range(seconds):
        if per[i]:
            out.append(TimelinePoint(start + i + 1, max(modes[i], key=lambda m: modes[i][m]), median(per[i]) / 1000,
                                     len(per[i])))
        else:
            out.append(None)
    return out


@dataclass
class CompareRow:
    engine: str
    mode: str
    p50_us: float
    ratio: float | None  # to `none` of the same engine and op
    ops: int
    commands_per_op: float


def comparison(runs: list[RunView], op: str, modes_order: tuple[str, ...]) -> list[CompareRow]:
    """For each (engine, mode) run of ``op``: its operation p50 and the ratio to ``none``."""
    mine = [r for r in runs if r.op == op and r.ops]
    base = {r.engine: r.op_us["p50"] for r in mine if r.mode == "none" and r.op_us["p50"]}
    order = {m: i for i, m in enumerate(modes_order)}
    engines = {"native": 0, "esys": 1}
    mine.sort(key=lambda r: (engines.get(r.engine, 9), r.engine, order.get(r.mode, 99)))
    return [CompareRow(r.engine, r.mode, r.op_us["p50"],
                       r.op_us["p50"] / base[r.engine] if r.engine in base else None,
                       r.ops, r.commands_total) for r in mine]


def projection_summary(components_us: dict[str, float], n: int) -> str:
    """One line for the Modes panel: each mode's estimate for N extends."""
    from tpmtop.boot.projection import Cost, fmt_estimate, project

    proj = project(n, "", {k: Cost(Decimal(repr(v)), "") for k, v in components_us.items()})
    parts = [f"{m} {fmt_estimate(mc.estimate_s).removeprefix('about ')}" for m, mc in proj.modes.items()
             if mc.estimate_s is not None]
    return f"[b]boot, {n:,} extends[/] [dim](p)[/]: " + " · ".join(parts) if parts else ""
