"""The Latency panel's histogram layout (tpmtop.viewmodel.rows.histogram) on real histograms:
the whole range from the lowest populated bucket to the highest, the finest resolution that
fits, one unit, never wider than asked."""

from __future__ import annotations

import random

from textual.content import Content

from tpmtop.stats import LatencyHistogram
from tpmtop.viewmodel.rows.histogram import CAPTURE_PER_DECADE, FINE_PER_DECADE, fit, histogram_lines


def recorded(values_us: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in values_us:
        h.record(int(v * 1000))
    return h


def test_a_chip_profiles_narrow_spread_has_a_shape():
    """A profiled run: every extend ~151 ms within ~2 % (the host's jitter on top of fixed
    chip latencies). At a capture's 4 buckets per decade it is one bar; read finely it spreads
    over several lines of the box, every sample counted."""
    rng = random.Random(7)
    h = recorded([151_000 * (1 + abs(rng.gauss(0, 0.006))) for _ in range(500)])
    coarse = fit(h.buckets(CAPTURE_PER_DECADE), CAPTURE_PER_DECADE, 8)
    assert coarse is not None and sum(1 for b in coarse.buckets if b.count) == 1
    fine = fit(h.buckets(FINE_PER_DECADE), FINE_PER_DECADE, 8)
    assert fine is not None and len(fine.buckets) <= 8
    assert sum(1 for b in fine.buckets if b.count) >= 4 and sum(b.count for b in fine.buckets) == 500
    assert fine.per_decade >= 100 and fine.unit == "ms"


def test_every_bucket_between_the_lowest_and_the_highest():
    """Two groups three decades apart: the empty buckets between them are kept (as zeros), the
    tail is not cut, and the resolution drops until the whole range fits."""
    h = recorded([30.0] * 580 + [53_215.0] * 4)
    for lines in (4, 6, 12, 30):
        f = fit(h.buckets(FINE_PER_DECADE), FINE_PER_DECADE, lines)
        assert f is not None and len(f.buckets) <= lines
        assert f.buckets[0].count == 580 and f.buckets[-1].count == 4
        assert sum(b.count for b in f.buckets) == 584 and 0 in [b.count for b in f.buckets]
        assert f.buckets[-1].upper_us >= 53_215 and f.unit == "ms"


def test_coarser_buckets_are_sums_of_finer_ones():
    h = recorded([20.0 * 1.07 ** i for i in range(120)])
    fine = h.buckets(FINE_PER_DECADE)
    for lines in (3, 5, 9, 17):
        f = fit(fine, FINE_PER_DECADE, lines)
        assert f is not None and sum(b.count for b in f.buckets) == 120
        for b in f.buckets:  # exactly the finer buckets under its bound, above the one below
            lower = b.upper_us / 10 ** (1 / f.per_decade)
            assert b.count == sum(c for ub, c in fine if lower * 1.0001 < ub <= b.upper_us * 1.0001)


def test_lines_fit_the_width_and_say_the_slowest():
    h = recorded([30.0] * 50 + [900.0] * 20 + [12_500.0])
    for width in (20, 33, 60):
        head, lines = histogram_lines(h.buckets(FINE_PER_DECADE), FINE_PER_DECADE, h.summary(), 6, width)
        assert head.startswith("max 12.5 ms")
        assert all(Content.from_markup(line).cell_length <= width for line in lines), (width, lines)
