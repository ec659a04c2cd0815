"""A latency histogram read as plain numbers (a summary dict, buckets): what a source hands
the view-model for a run or a command, cached. No Textual here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EMPTY = {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}


# -- cached histogram reads ---------------------------------------------------------------------
# hdrh walks its counts array in Python: one summary() costs ~1 ms, and a dashboard reads a
# dozen histograms per refresh. A histogram whose count did not change has the same summary,
# so reads are cached by (histogram, count) — a paused dashboard then costs nearly nothing.
_cache: dict[tuple[int, str], tuple[object, int, object]] = {}


def _cached(h: Any, what: str, compute: Callable[[], Any]) -> Any:
    n = h.count
    key = (id(h), what)
    hit = _cache.get(key)
    if hit is not None and hit[0] is h and hit[1] == n:
        return hit[2]
    if len(_cache) > 4096:
        _cache.clear()
    value = compute()
    _cache[key] = (h, n, value)
    return value


def pairs(buckets: list[list[Any]]) -> list[Any]:
    """``[[bound, count], …]`` as ``[(bound, count), …]``: a tuple of two numbers is dropped
    from the cyclic GC's sight at the first collection that sees it, a list never is. A fine
    histogram (rows/histogram.py's FINE_PER_DECADE) has ~900 buckets, and the dashboard
    holds a few such reads at once: each full collection (which stops every thread) walked
    them all."""
    return [(b, c) for b, c in buckets]


def summary_of(h: Any) -> dict[str, Any]:
    """``h``: a :class:`tpmtop.stats.LatencyHistogram` (or anything with its summary/buckets)."""
    summary: dict[str, Any] = _cached(h, "summary", h.summary)
    return summary


class LiveBuckets:
    """``h``'s buckets, read when called: ``f()`` at a capture's 4 per decade, ``f(n)`` at n
    (the Latency panel's histogram reads live ones finer, tpmtop.viewmodel.rows.histogram);
    ``f.summary()`` the same histogram's summary now (its max must agree with the buckets)."""

    __slots__ = ("_h",)

    def __init__(self, h: Any) -> None:
        self._h = h

    def __call__(self, per_decade: int = 4) -> list[Any]:
        h = self._h
        result: list[Any] = _cached(h, f"buckets{per_decade}", lambda: pairs(h.buckets(per_decade)))
        return result

    def summary(self) -> dict[str, Any]:
        return summary_of(self._h)


def buckets_of(h: Any) -> Callable[..., list[Any]]:
    return LiveBuckets(h)


class FrozenBuckets:
    """A histogram's buckets and summary as of one moment (a snapshot): the Latency table's
    count and max and the histogram under it read the same samples. (Read live, the histogram
    drawn a moment after the table counted 492 where the table said 473, and showed a 6.29 ms
    sample above the table's 3,613 µs max.) Memoised here, not in the module's cache: a new
    snapshot each refresh must not be kept beyond its rows."""

    __slots__ = ("_buckets", "_h", "_summary")

    def __init__(self, snapshot: Any) -> None:
        self._h = snapshot
        self._summary: dict[str, Any] | None = None
        self._buckets: dict[int, list[Any]] = {}

    def __call__(self, per_decade: int = 4) -> list[Any]:
        b = self._buckets.get(per_decade)
        if b is None:
            b = self._buckets[per_decade] = pairs(self._h.buckets(per_decade))
        return b

    def summary(self) -> dict[str, Any]:
        if self._summary is None:
            self._summary = self._h.summary()
        return self._summary


_frozen: dict[int, tuple[Any, int, FrozenBuckets]] = {}  # id(h) -> (h, its count then, its latest snapshot)


def frozen_of(h: Any) -> tuple[dict[str, Any], FrozenBuckets]:
    """(summary, buckets) of ``h`` as of now, from one snapshot; the same snapshot again while
    nothing was recorded (a run not running is not copied every refresh)."""
    n = h.count
    hit = _frozen.get(id(h))
    if hit is not None and hit[0] is h and hit[1] == n:
        return hit[2].summary(), hit[2]
    if len(_frozen) > 4096:
        _frozen.clear()
    f = FrozenBuckets(h.snapshot())
    _frozen[id(h)] = (h, n, f)
    return f.summary(), f
