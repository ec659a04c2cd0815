"""Before/after comparison of captures: p50 and p99 side by side, their ratio, and whether the
difference is more than the noise of the two histograms.

The noise rule (also in ``tpmtop compare --help``): for a percentile p of n samples, the
distribution-free 95 % confidence interval runs from the sample of rank n·p − 1.96·√(n·p·(1−p))
to the one of rank n·p + 1.96·√(n·p·(1−p)) + 1 (the binomial order-statistic interval; no
assumption about the shape of the latency distribution). Those ranks are read from each
capture's histogram, interpolating log-linearly inside a bucket, and the interval is anchored
on the capture's exact p50 (its full-resolution value). Above p90 (so for p99) interpolation in
the sparse tail is too optimistic, and the interval is widened to whole buckets (each 1.78x
wide): a p99 difference is named only when the two intervals sit in different buckets. A
difference is reported as
``slower``/``faster`` only when the two intervals do not overlap; otherwise it is ``within
noise``. A rank beyond the sample (p99 of a few dozen samples) leaves that side of the interval
open; a verdict is therefore given only when both captures hold at least ``min_samples(p)``
samples — the smallest n whose interval is closed on both sides (8 for p50, 53 for p90, 563
for p99) — and is otherwise ``too few samples (n=…)``: with 20 samples the p99 is the largest
sample, and no change in it can be told from noise. Without a histogram on either side no
interval exists: ``no histogram``.

Non-overlapping 95 % intervals is a stricter test than a 5 % significance test — deliberately:
a kernel regression report should not rest on a borderline result.

Sampling noise is not all the noise: two identical `tpmtop bench` runs one after the other on
a shared machine differ by more than their histograms' intervals (another process takes a
core, caches and frequency differ between runs). So the difference must also exceed the
run-to-run variation: the interval of the ratio B/A (B's low bound over A's high bound, B's
high bound over A's low bound) must lie wholly beyond ×``MIN_EFFECT`` of that percentile (or
below its inverse): ×1.5 for p50, ×4 for p99, from the ratios found between identical runs
(docs/captures.md, "Run-to-run noise"); a smaller change needs repeated runs to be told.

The floor (capture minor 2, :class:`tpmtop.bench.Floor`): a bench measures the machine's speed
through its run, a trivial TPM round trip between its rounds. This shared VM steps between
states where every round trip costs ×2–2.4 more, for a run or a minute, invisible in the load
average; the floor steps with the operations. When both captures carry a floor of the same TPM,
the band of ratios the floor's move explains runs from 1 to ×F (the floor's ratio, as if the
whole row scaled with it) and to 1 + k·Δ/A (as if each of the row's k TPM commands took Δ µs
more, the floor's difference): measured, a short command moves by about ×F, a long one
(StartAuthSession) by about +Δ. A row is judged only beyond that whole band (each end at the
floor's own 95 % interval) by the minimum effect. A capture without a floor (an older tpmtop,
an import) keeps the judgement without one, and compare says so.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

# A capture's latency summary ({"count", "p50", …, "histogram"}) and its histogram.
Summary = dict[str, Any]
Hist = list[Any]

Z95 = 1.959964
# Run-to-run variation of identical runs, by percentile (docs/compare.md, "Run-to-run noise":
# six `bench --sim --engine native -n 3000` runs on this project's 2-core shared VM at load
# 8–9; ratios between any two of them, every row). p50: 95 % of them within ×1.35, all but one
# burst of load (×2.5, one run's per-command) within ×1.41. p99: 95 % within ×3.1 — a tail on
# a shared machine is its scheduler's.
MIN_EFFECT = {0.5: 1.5, 0.99: 4.0}
BUCKETS_PER_DECADE = 4  # tpmtop.stats.LatencyHistogram.buckets()
_STEP = 10 ** (1 / BUCKETS_PER_DECADE)


def value_at_rank(hist: Hist, rank: float) -> float:
    """The latency (µs) at 1-based ``rank`` of a ``[[upper_bound_us, count], …]`` histogram."""
    items = sorted((float(b), int(c)) for b, c in hist if c > 0)
    n = sum(c for _, c in items)
    if n == 0:
        return math.nan
    rank = min(max(rank, 1.0), float(n))
    cum = 0
    prev_ub = 0.0
    for ub, c in items:
        if cum + c >= rank:
            # Bucket k covers (10**((k-1)/4), 10**(k/4)]; tpmtop omits empty buckets, so the
            # lower edge is one step down, but never below the previous bucket's bound.
            lo = max(ub / _STEP, prev_ub, 1e-9)
            frac = (rank - cum) / c
            return float(lo * (ub / lo) ** frac)
        cum += c
        prev_ub = ub
    return items[-1][0]


TAIL = 0.9  # percentiles above this get whole-bucket intervals


def _bucket_edges(hist: Hist, rank: float) -> tuple[float, float]:
    """(lower, upper] edges (µs) of the bucket holding 1-based ``rank``."""
    items = sorted((float(b), int(c)) for b, c in hist if c > 0)
    cum, prev_ub = 0, 0.0
    for ub, c in items:
        cum += c
        if cum >= rank:
            return max(ub / _STEP, prev_ub), ub
        prev_ub = ub
    return prev_ub, items[-1][0]


def interval(hist: Hist, p: float, exact: float | None = None) -> tuple[float, float] | None:
    """95 % confidence interval (µs) of percentile ``p`` (0..1); None without samples.
    An open side is 0 or +inf.

    ``exact``: the capture's own value of that percentile (from the full-resolution HDR
    histogram). Interpolating inside 1.78x-wide buckets misplaces a tail percentile by up to
    ~20 %; scaling the interval so that its centre rank falls on the exact value removes most of
    that, keeping the width the histogram gives."""
    n = sum(int(c) for _, c in hist) if hist else 0
    if n == 0:
        return None
    half = Z95 * math.sqrt(n * p * (1 - p))
    lo_rank = n * p - half
    hi_rank = n * p + half + 1
    if p > TAIL:
        # In the tail the density falls steeply inside a bucket, so interpolation puts the
        # order statistics too close together (tested: a "95 %" p99 interval covered the true
        # p99 in 65 % of captures). Whole buckets are coarse but never wrong.
        lo = _bucket_edges(hist, lo_rank)[0] if lo_rank >= 1 else 0.0
        hi = _bucket_edges(hist, hi_rank)[1] if hi_rank <= n else math.inf
        return lo, hi
    lo = value_at_rank(hist, lo_rank) if lo_rank >= 1 else 0.0
    hi = value_at_rank(hist, hi_rank) if hi_rank <= n else math.inf
    if exact is not None and exact > 0:
        centre = value_at_rank(hist, n * p)
        if centre > 0:
            lo, hi = lo * exact / centre, hi * exact / centre
    return lo, hi


@functools.cache
def min_samples(p: float) -> int:
    """The fewest samples whose 95 % order-statistic interval of percentile ``p`` is closed on
    both sides (lower rank >= 1, upper rank <= n): below it the interval is open-ended and the
    verdict cannot be "within noise", let alone "slower"."""
    n = 1
    while True:
        half = Z95 * math.sqrt(n * p * (1 - p))
        if n * p - half >= 1 and n * p + half + 1 <= n:
            return n
        n += 1


def _samples(summary: Summary) -> int:
    hist = summary.get("histogram") or ()
    return sum(int(c) for _, c in hist)


def verdict(a: Summary, b: Summary, p: float, band: tuple[float, float] = (1.0, 1.0)) -> str:
    """``band``: the ratios B/A the floor's move explains (:func:`explained`); (1, 1) without
    a floor. A change is named only beyond it, by the minimum effect."""
    ha, hb = a.get("histogram"), b.get("histogram")
    if not ha or not hb:
        return "no histogram"
    need = min_samples(p)
    n = min(_samples(a), _samples(b))
    if 0 < n < need:
        return f"too few samples (n={n} < {need})"
    key = f"p{round(p * 100)}"
    ia, ib = interval(ha, p, a.get(key)), interval(hb, p, b.get(key))
    if ia is None or ib is None:
        return "no samples"
    # ">=": in the tail the bounds are bucket edges and buckets are (lower, upper], so two
    # intervals that meet at an edge do not overlap. Beyond sampling noise, the ratio's whole
    # interval must also be beyond the run-to-run variation (MIN_EFFECT).
    m = min_effect(p)
    if ib[0] >= ia[1] and ib[0] >= ia[1] * m * band[1] and (p <= TAIL or _body_moved(a, b, band, slower=True)):
        return "slower"
    if ib[1] <= ia[0] and ib[1] * m <= ia[0] * band[0] and (p <= TAIL or _body_moved(a, b, band, slower=False)):
        return "faster"
    return "within noise"


BODY = 0.9  # where a tail verdict must be confirmed


def _body_moved(a: Summary, b: Summary, band: tuple[float, float], slower: bool) -> bool:
    """For a tail percentile: whether the tail's body (p90) moved the same way beyond its
    sampling interval, the floor's band and a p50's minimum effect. Measured under load
    (docs/captures.md, "Run-to-run noise"): between identical runs a command's p99 flipped
    ×0.03 while its p90 did not — a slow event about 1 % of the time came a little more or
    less often. A p99 alone moving is that rate, not a change; a tail that moved as a whole is."""
    ia = interval(a["histogram"], BODY, a.get("p90"))
    ib = interval(b["histogram"], BODY, b.get("p90"))
    if ia is None or ib is None:
        return False
    m = min_effect(0.5)  # the body's own run-to-run variation, as a p50's
    if slower:
        return ib[0] >= ia[1] * band[1] * m
    return ib[1] * m <= ia[0] * band[0]


def min_effect(p: float) -> float:
    """The run-to-run minimum effect for percentile ``p``: the nearest measured one at or above it."""
    at_or_above = [q for q in MIN_EFFECT if q >= p]
    return MIN_EFFECT[min(at_or_above)] if at_or_above else MIN_EFFECT[max(MIN_EFFECT)]


def judged(verdict_text: str) -> bool:
    """False for a verdict that judged nothing (too few samples, no histogram): its figures
    are not printed beside it."""
    return verdict_text in ("slower", "faster", "within noise")


def _ratio(a: float, b: float) -> float | None:
    if not a > 0:
        return None
    r = b / a
    return round(r, 3) if math.isfinite(r) else None


def _row(kind: str, key: dict[str, Any], a: Summary, b: Summary, moves: FloorMoves | None = None,
         commands: float = 1.0) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": kind, **key, "count": [a["count"], b["count"]]}
    for name, p in (("p50", 0.5), ("p99", 0.99)):
        move = (moves or {}).get(p)
        band = explained(move, a[name], commands)
        row[name] = [a[name], b[name]]
        row[f"{name}_ratio"] = _ratio(a[name], b[name])
        row[f"{name}_verdict"] = verdict(a, b, p, band)
        if move is not None:
            row[f"{name}_floor_band"] = [round(band[0], 3), round(band[1], 3)]
    return row


def compare(a: dict[str, Any], b: dict[str, Any], moves: FloorMoves | None = None) -> list[dict[str, Any]]:
    """Rows for every (engine, mode, op) in both captures (the whole operation) and every
    command code present in both for it. Ratios are B/A: above 1 means B is slower.
    ``moves``: the floor's move from A to B (:func:`floor_move`), None to judge without one."""
    runs_b = {(r["engine"], r["mode"], r["op"]): r for r in b["runs"]}
    rows = []
    for ra in a["runs"]:
        k = (ra["engine"], ra["mode"], ra["op"])
        rb = runs_b.get(k)
        if rb is None:
            continue
        key = {"engine": k[0], "mode": k[1], "op": k[2]}
        per_op = sum((ra.get("commands_per_op") or {}).values()) or 1.0
        rows.append(_row("operation", {**key, "command": None}, ra["op_us"], rb["op_us"], moves, per_op))
        for cc in sorted(set(ra["commands"]) & set(rb["commands"])):
            rows.append(_row("command", {**key, "command": cc}, ra["commands"][cc], rb["commands"][cc], moves))
    return rows


# -- the floor ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FloorMove:
    """A's and B's floor at one percentile (µs, exact order statistics of their round trips)
    and their 95 % intervals."""

    a: float
    b: float
    a_interval: tuple[float, float]
    b_interval: tuple[float, float]

    @property
    def ratio(self) -> float:
        return self.b / self.a

    def to_json(self) -> dict[str, Any]:
        return {"a_us": round(self.a, 3), "b_us": round(self.b, 3), "ratio": round(self.ratio, 3),
                "a_interval_us": [round(x, 3) for x in self.a_interval],
                "b_interval_us": [round(x, 3) for x in self.b_interval]}


# the floor's move at each percentile compare judges (p50, p99); a percentile whose floor
# interval is open (fewer round trips than min_samples) is left out, and judged without it
FloorMoves = dict[float, FloorMove]


def floor_probes(doc: dict[str, Any]) -> list[float]:
    """Every round trip of a capture's floor (µs), sorted; empty without one."""
    floor = doc.get("floor")
    if not isinstance(floor, dict):
        return []
    return sorted(float(x) for block in floor.get("blocks_us") or () for x in block)


def exact_interval(xs: list[float], p: float) -> tuple[float, float] | None:
    """95 % order-statistic interval of percentile ``p`` of sorted ``xs``; None when open."""
    n = len(xs)
    if n < min_samples(p):
        return None
    half = Z95 * math.sqrt(n * p * (1 - p))
    lo, hi = math.floor(n * p - half), math.ceil(n * p + half + 1)
    return xs[max(lo, 1) - 1], xs[min(hi, n) - 1]


def _same_tpm(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ta, tb = a.get("tpm") or {}, b.get("tpm") or {}
    return all(ta.get(k) == tb.get(k) for k in ("manufacturer", "vendor", "firmware", "simulated"))


def floor_move(a: dict[str, Any], b: dict[str, Any]) -> tuple[FloorMoves, str]:
    """The floor's move from capture A to B at p50 and p99, and why it is not used where it
    is not ("" when it is used at both)."""
    fa, fb = floor_probes(a), floor_probes(b)
    if not fa or not fb:
        which = " and ".join(x for x, f in (("A", fa), ("B", fb)) if not f)
        return {}, f"no floor in {which} (an older tpmtop, or not a bench): judged without one"
    if not _same_tpm(a, b):
        return {}, "floors not used: two TPMs (the floor is each one's own round trip)"
    moves: FloorMoves = {}
    for p in (0.5, 0.99):
        ia, ib = exact_interval(fa, p), exact_interval(fb, p)
        if ia is not None and ib is not None and fa[int(len(fa) * p)] > 0:
            moves[p] = FloorMove(fa[int(len(fa) * p)], fb[int(len(fb) * p)], ia, ib)
    n = min(len(fa), len(fb))
    missing = [f"p{round(p * 100)}" for p in (0.5, 0.99) if p not in moves]
    why = f"floor's {' and '.join(missing)} not used: too few round trips (n={n})" if missing else ""
    return moves, why


def explained(move: FloorMove | None, a_us: float, commands: float = 1.0) -> tuple[float, float]:
    """The ratios B/A that the floor's move explains for a row whose A value is ``a_us``
    with ``commands`` TPM commands in it: from 1 to the floor's ratio (the row scaled with it)
    and to 1 + commands·Δ/A (each command Δ µs slower or faster), each end at the floor's 95 %
    interval. (1, 1) without a floor."""
    if move is None or not a_us > 0:
        return 1.0, 1.0
    (alo, ahi), (blo, bhi) = move.a_interval, move.b_interval
    # A's interval may start at 0 (a capture's floor of zeros, read from a file): open above
    up = bhi / alo if alo > 0 else math.inf
    cands = [1.0, blo / ahi if ahi > 0 else 0.0, up, 1 + commands * (blo - ahi) / a_us,
             1 + commands * (bhi - alo) / a_us]
    # a floor that fell by more than the whole row explains any speed-up: no "faster" then
    return max(min(cands), 0.0), max(cands)


def only_in(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    kb = {(r["engine"], r["mode"], r["op"]) for r in b["runs"]}
    return [(r["engine"], r["mode"], r["op"]) for r in a["runs"] if (r["engine"], r["mode"], r["op"]) not in kb]
