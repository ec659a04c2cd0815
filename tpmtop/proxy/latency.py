"""A latency distribution sized to what it holds: the proxy keeps one per client and command
code, for thousands of clients.

:class:`tpmtop.stats.LatencyHistogram` (HDR, 1 µs … 60 s at 3 digits) allocates its full
count array up front — ~300 KB — which is right for a bench's few histograms and wrong for
one per client: 10,000 short-lived tpm2-tools processes would cost gigabytes. Here a value
falls in a log-linear bucket (7 significant bits: at most 0.8 % off, below the noise of any
TPM timing) kept in a dict, so a client with three GetRandom calls holds three buckets.
Count, sum, min and max are exact; percentiles are a bucket's middle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpmtop.stats import LatencyHistogram

_BITS = 7


def _key(ns: int) -> int:
    if ns <= 0:
        return 0
    b = ns.bit_length()
    if b <= _BITS:
        return ns
    shift = b - _BITS
    return (shift << _BITS) | (ns >> shift)


def _value(key: int) -> int:
    shift, mant = key >> _BITS, key & ((1 << _BITS) - 1)
    if shift == 0:
        return mant
    return (mant << shift) + (1 << (shift - 1))


class CompactLatency:
    __slots__ = ("counts", "max_ns", "min_ns", "n", "sum_ns")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.sum_ns = 0
        self.min_ns = 0
        self.max_ns = 0

    def record(self, ns: int) -> None:
        k = _key(ns)
        self.counts[k] = self.counts.get(k, 0) + 1
        if not self.n or ns < self.min_ns:
            self.min_ns = ns
        if ns > self.max_ns:
            self.max_ns = ns
        self.n += 1
        self.sum_ns += ns

    def merge(self, other: CompactLatency) -> None:
        if not other.n:
            return
        for k, c in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + c
        if not self.n or other.min_ns < self.min_ns:
            self.min_ns = other.min_ns
        self.max_ns = max(self.max_ns, other.max_ns)
        self.n += other.n
        self.sum_ns += other.sum_ns

    @property
    def count(self) -> int:
        return self.n

    def percentile_ns(self, p: float) -> int:
        if not self.n:
            return 0
        rank = max(1, -(-self.n * p // 100))  # ceil: the smallest value with p % at or below it
        seen = 0
        for k in sorted(self.counts):
            seen += self.counts[k]
            if seen >= rank:
                return min(max(_value(k), self.min_ns), self.max_ns)
        return self.max_ns

    def summary(self) -> dict[str, Any]:
        """The keys and units of ``LatencyHistogram.summary()`` (microseconds)."""
        if not self.n:
            return {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}
        return {"count": self.n,
                "p50": round(self.percentile_ns(50) / 1000, 3), "p90": round(self.percentile_ns(90) / 1000, 3),
                "p99": round(self.percentile_ns(99) / 1000, 3), "max": round(self.max_ns / 1000, 3),
                "mean": round(self.sum_ns / self.n / 1000, 3)}

    def to_histogram(self) -> LatencyHistogram:
        """A :class:`~tpmtop.stats.LatencyHistogram` with the same values (for the capture's
        ``runs``, whose bucket lists come from it)."""
        from tpmtop.stats import LatencyHistogram

        h = LatencyHistogram()
        for k, c in self.counts.items():
            h.record(min(max(_value(k), self.min_ns), self.max_ns), c)
        return h
