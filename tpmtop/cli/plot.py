"""``--plot FILE.svg|png`` of ``tpmtop bench`` and ``tpmtop compare``: the mode comparison as a
picture for slides and bug reports.

Drawn with matplotlib: the maintained standard for static charts in Python, SVG and PNG (and
PDF) from one API with no browser or JavaScript engine (plotly needs kaleido and Chromium for a
PNG), the headless Agg backend, and log axes that latency needs. It is an optional extra
(``pip install 'tpmtop[plot]'``) imported only when --plot is given, so no start-up pays for it.

Left: each (engine, mode)'s operation p50 as a bar, its p90 and p99 as marks, on a log axis
(µs), its label with the ratio of its p50 to ``none``'s. Right: the whole distributions, one line per mode,
from the runs' histograms (the capture's 10**(1/8)-wide buckets for a bench, the capture's own
for compare), as the share of operations per bucket on a log time axis: the tail and the gaps
a p50 hides.
"""

from __future__ import annotations

import importlib.util
import io
import os
from dataclasses import dataclass, field

from tpmtop.errors import TpmtopError, UsageError

FORMATS = ("svg", "png", "pdf")
INSTALL = "pip install 'tpmtop[plot]' (or: pip install matplotlib)"


@dataclass
class Series:
    """One bar and one line: a run (or one capture's run) of one (engine, mode, op)."""

    label: str
    p50: float
    p90: float | None
    p99: float
    buckets: list[list[float]] = field(default_factory=list)  # [[upper_bound_us, count], …]
    ratio: float | None = None  # p50 / the same engine's none p50
    per_decade: int = 4  # the buckets' bounds are 10**(k/per_decade) µs (tpmtop.stats)


def _filled(buckets: list[list[float]], per_decade: int) -> tuple[list[float], list[int]]:
    """Every bucket from one below the lowest filled to the highest, empty ones as 0: a line
    over a gap must drop to zero, not bridge it."""
    from tpmtop.viewmodel.rows.histogram import bucket_index

    ks = {bucket_index(b, per_decade): int(c) for b, c in buckets if b > 0}
    lo, hi = min(ks) - 1, max(ks)
    xs = [10 ** (k / per_decade) for k in range(lo, hi + 1)]
    return xs, [ks.get(k, 0) for k in range(lo, hi + 1)]


def check(path: str | None) -> None:
    """Before any work: a format by extension, matplotlib present, the destination writable."""
    if path is None:
        return
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise UsageError(f"--plot {path}: name a .svg, .png or .pdf file (the format follows the extension)")
    if importlib.util.find_spec("matplotlib") is None:
        raise TpmtopError(f"--plot needs matplotlib, which is not installed: {INSTALL}")
    from tpmtop.output import Output

    Output(path, what="--plot").check()


def draw(path: str, series: list[Series], title: str) -> None:
    """Write the chart to ``path`` (atomically, by the -o rules of tpmtop.output)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    from tpmtop.output import Output

    fig, (bars, dist) = plt.subplots(1, 2, figsize=(12, 0.45 * max(len(series), 4) + 2.2),
                                     gridspec_kw={"width_ratios": [1, 1.3]})
    try:
        y = list(range(len(series)))[::-1]  # the first run on top
        colours = [plt.get_cmap("tab10")(i % 10) for i in range(len(series))]
        bars.barh(y, [s.p50 for s in series], color=colours, alpha=0.85, label="p50")
        bars.scatter([s.p90 for s in series if s.p90], [yy for yy, s in zip(y, series, strict=True) if s.p90],
                     marker="|", s=120, color="black", label="p90")
        bars.scatter([s.p99 for s in series], y, marker="x", color="black", label="p99")
        # the ratio to none in the label: beside the bar it would collide with the p90/p99 marks
        bars.set_yticks(y, [s.label + (f"  ×{s.ratio:.1f}" if s.ratio is not None else "") for s in series])
        bars.set_xscale("log")
        bars.set_xlabel("operation latency (µs, log scale)")
        bars.legend(loc="lower right", fontsize=8)
        bars.set_title("p50 (bar), p90, p99 per mode; ×: p50 vs none", fontsize=10)
        for s, colour in zip(series, colours, strict=True):
            total = sum(c for _, c in s.buckets)
            if not total:
                continue
            xs, counts = _filled(s.buckets, s.per_decade)
            ys = [100 * c / total for c in counts]
            dist.step(xs, ys, where="pre", color=colour, label=s.label)
        dist.set_xscale("log")
        dist.set_xlabel("operation latency (µs, log scale; upper bucket bounds)")
        dist.set_ylabel("% of operations")
        dist.set_title("whole distribution", fontsize=10)
        dist.legend(fontsize=7)
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=os.path.splitext(path)[1].lower().lstrip("."))
    finally:
        plt.close(fig)
    Output(path, what="--plot").check().write_chunks([buf.getvalue()])
