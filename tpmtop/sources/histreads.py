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
        result: list[Any] = _cached(h, f"buckets{per_decade}", lambda: h.buckets(per_decade))
        return result

    def summary(self) -> dict[str, Any]:
        return summary_of(self._h)


def buckets_of(h: Any) -> Callable[..., list[Any]]:
    return LiveBuckets(h)
