"""The Latency panel's histogram of the selected row, laid out for the lines and columns it has:
every bucket from the lowest populated to the highest (empty ones drawn empty), at the finest
resolution whose buckets all fit, on one time unit. No Textual here.

Live histograms (HDR, 3 significant digits) are read at :data:`FINE_PER_DECADE` buckets per
decade and merged to what fits; a capture holds 4 per decade (tpmtop.stats.LatencyHistogram.
buckets), which is then the finest. Every coarser resolution offered divides the finer one,
so a merged bucket is exactly the sum of the finer buckets under its bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CAPTURE_PER_DECADE = 4  # what a capture's histograms hold (tpmtop.stats.LatencyHistogram.buckets)
FINE_PER_DECADE = 1200  # 0.19 % wide buckets (HDR keeps 3 digits): a chip profile's ~1 % spread has a shape
# Each divides 1200 (and those of 4 divide 4): the finest that fits wins, so many steps
LADDER = (1200, 600, 400, 300, 240, 200, 150, 120, 100, 80, 60, 50, 40, 30, 24, 20, 16, 15, 12, 10, 8, 6, 5, 4, 3, 2, 1)


@dataclass(frozen=True)
class Bucket:
    upper_us: float
    count: int


@dataclass(frozen=True)
class Fitted:
    buckets: list[Bucket]  # lowest populated .. highest populated, empty ones included
    per_decade: int
    unit: str  # "µs", "ms" or "s": one unit on the whole axis
    scale: float  # µs per unit


def bucket_index(upper_us: float, per_decade: int) -> int:
    """k of a bucket bound 10**(k/per_decade) µs (the bounds LatencyHistogram.buckets makes)."""
    return round(math.log10(max(upper_us, 1.0)) * per_decade)


def fit(buckets: Sequence[Sequence[Any]], per_decade: int, lines: int) -> Fitted | None:
    """``buckets``: ``[[upper_bound_us, count], …]`` at ``per_decade``; the finest resolution
    (a divisor of ``per_decade``) whose lowest-to-highest run of buckets fits ``lines``."""
    src = [(bucket_index(float(ub), per_decade), int(c)) for ub, c in buckets if c]
    if not src:
        return None
    lo, hi = min(k for k, _ in src), max(k for k, _ in src)
    lines = max(1, lines)
    chosen = 1
    for p in LADDER:
        if p > per_decade or per_decade % p:
            continue
        f = per_decade // p
        if -(-hi // f) - -(-lo // f) + 1 <= lines:
            chosen = p
            break
    f = per_decade // chosen
    counts: dict[int, int] = {}
    for k, c in src:
        kc = -(-k // f)  # the coarse bucket whose bound is at or above this one
        counts[kc] = counts.get(kc, 0) + c
    first, last = min(counts), max(counts)
    out = [Bucket(10 ** (k / chosen), counts.get(k, 0)) for k in range(first, last + 1)]
    unit, scale = axis_unit(out[-1].upper_us)
    return Fitted(out, chosen, unit, scale)


def axis_unit(top_us: float) -> tuple[str, float]:
    """The axis' one unit: µs while its top is under 10 ms, then ms, then s from 100 s."""
    if top_us < 10_000:
        return "µs", 1.0
    if top_us < 100_000_000:
        return "ms", 1000.0
    return "s", 1_000_000.0


def fmt_axis(value: float) -> str:
    """Three significant figures, never an exponent: 0.0316, 1.78, 17.8, 178, 1,778."""
    if value >= 100:
        return f"{value:,.0f}"
    if value <= 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


def histogram_lines(buckets: Sequence[Sequence[Any]], per_decade: int, summary: dict[str, Any], lines: int,
                    width: int, bar_max: int = 40) -> tuple[str, list[str]]:
    """(the slowest sample and the resolution, for the title; one line per bucket). Markup,
    each line at most ``width`` cells (never wrapped): ``≤`` its bound in the axis' unit, the
    bar, the count; an empty bucket has no bar and no count."""
    fitted = fit(buckets, per_decade, lines)
    if fitted is None:
        return "", ["[dim]no samples[/]"]
    top_us = float(summary.get("max") or 0)
    head = f"max {fmt_axis(top_us / fitted.scale)} {fitted.unit}" if top_us else ""
    head += f" [dim]{fitted.per_decade}/decade[/]"
    labels = [fmt_axis(b.upper_us / fitted.scale) for b in fitted.buckets]
    label_w = max(len(t) for t in labels)
    top = max(b.count for b in fitted.buckets) or 1
    count_w = len(f"{top:,}")
    # "≤" label " " unit " " bar " " count
    bar_w = max(1, min(bar_max, width - (1 + label_w + 1 + len(fitted.unit) + 1) - 1 - count_w))
    p50, p99 = summary.get("p50", 0) or 0, summary.get("p99", 0) or 0
    out = []
    for b, label in zip(fitted.buckets, labels, strict=True):
        label_head = f"≤{label:>{label_w}} {fitted.unit}"
        if not b.count:
            out.append(f"[dim]{label_head}[/]")
            continue
        tone = "fast" if b.upper_us <= p50 * 1.2 else "mid" if b.upper_us <= p99 * 1.2 else "slow"
        n = max(1, round(b.count / top * bar_w))
        out.append(f"{label_head} [$latency-{tone}]{'█' * n}[/]{' ' * (bar_w - n)} {b.count:,}")
    return head, out
