"""Numbers as the panels print them. No Textual here."""

from __future__ import annotations

from typing import Any

# the histogram reads are plain numbers, the sources' (tpmtop.sources.histreads); the name stays here
# for the tests that read a summary
from tpmtop.sources.histreads import summary_of as summary_of


def fmt_us(us: float | None) -> str:
    """Microseconds for a cell under a "µs" header, in µs whatever the size (a column headed µs
    that printed "167 ms" mixed units): 87.4, 4,321, 167,000; from a second on without the
    thousands' commas, so that up to ten seconds fit the tables' 7-wide columns: 1520000.
    Blank for no data."""
    if us is None:
        return ""
    if us >= 1_000_000:
        return f"{us:.0f}"
    if us >= 1000:
        return f"{us:,.0f}"
    return f"{us:.1f}"


def tail_us(summary: dict[str, Any], key: str) -> str:
    """A p90/p99 cell: :func:`fmt_us`, or ``–`` from fewer samples than that tail needs
    (:func:`tpmtop.stats.judged`)."""
    from tpmtop.stats import tail_cell

    return tail_cell(summary, key, fmt_us)


def fmt_duration(us: float | None) -> str:
    """A duration with its unit, for text (not a µs column): 87.4 µs, 4,321 µs, 151 ms, 1.52 s."""
    if us is None:
        return ""
    if us >= 1_000_000:
        return f"{us / 1e6:.2f} s"
    if us >= 100_000:
        return f"{us / 1000:.0f} ms"
    return f"{fmt_us(us)} µs"


def fmt_age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
