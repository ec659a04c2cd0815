"""Latency histograms: HDR histograms (1 µs … 60 s, 3 significant digits) in nanoseconds.

Readable from any thread while another records: a lock guards each histogram. Recording only
appends to a pending list (~0.3 µs); the pure-Python HDR update happens in batches, on read or
every 1,024 values, off the TPM round trip's critical path. A batch records each HDR bucket
once with its count (:func:`_bucket_floor`): the same histogram as value by value, and a
1,024-value drain (latencies around 30 µs) takes 0.18 ms instead of 0.69 ms here (best of 30,
load average 10) — a shorter stall for whoever waits on the draining thread.

hdrh (and the ctypes, base64 and zlib it loads) is imported when a histogram first holds a
value: ``tpmtop info`` and ``handles`` record a few exchanges and never read a histogram, so
they never pay for it (tests/unit/test_import_hygiene.py keeps it so).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram

LOWEST_NS = 1_000  # 1 µs
HIGHEST_NS = 60_000_000_000  # 60 s
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 99.0)

# A tail percentile tells something beyond the largest sample only once at least one sample
# lies above it: p90 from 10 samples, p99 from 100 (of 20 samples the "p99" is their largest).
# Below that a table shows NOT_JUDGED, never a number that reads as a tail.
TAIL_MIN_SAMPLES = {"p90": 10, "p99": 100}
NOT_JUDGED = "–"


def judged(summary: dict[str, Any], key: str) -> bool:
    """Can ``summary[key]`` (a :meth:`LatencyHistogram.summary` member) be shown as what it
    says? p50, max and mean always; a tail percentile from :data:`TAIL_MIN_SAMPLES`."""
    return int(summary.get("count", 0)) >= TAIL_MIN_SAMPLES.get(key, 1)


def tail_cell(summary: dict[str, Any], key: str = "p99", fmt: Callable[[float], str] = "{:,.1f}".format) -> str:
    """A table cell for ``summary[key]``: ``fmt`` of it, or NOT_JUDGED (:func:`judged`)."""
    return fmt(summary[key]) if judged(summary, key) else NOT_JUDGED


def tail_note(*counts: int, key: str = "p99", column: str | None = None) -> str:
    """The legend a text table prints under it when one of its ``key`` cells (headed
    ``column``) is NOT_JUDGED; empty when none is."""
    need = TAIL_MIN_SAMPLES[key]
    if not any(0 < n < need for n in counts):
        return ""
    return f"{NOT_JUDGED} under {column or key}: fewer than {need} samples, whose {key} would be their largest"


# HdrHistogram's own layout for this range, worked out as its constructor does (without
# importing hdrh; tests/unit/test_import_hygiene.py compares them with hdrh's):
# values below 2**_UNIT_BITS ns share the first buckets' unit, each bucket holds 2**_SUB_BITS slots.
_UNIT_BITS = math.floor(math.log2(LOWEST_NS))
_SUB_BITS = max(math.ceil(math.log2(2 * 10 ** SIGNIFICANT_DIGITS)), 1)


EXACT_MAX = 256  # samples a LatencyHistogram keeps as they are (its percentiles then exact)


def _nearest_rank(xs: list[int], p: float) -> int:
    """The ``p`` percentile of sorted ``xs``: the smallest sample with at least p % of the
    samples at or below it (nearest rank)."""
    return xs[max(math.ceil(p / 100 * len(xs)) - 1, 0)]


def _new_hdr() -> HdrHistogram:
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)


def _bucket_floor(ns: int) -> int:
    """The lowest value of the HDR slot ``ns`` falls in: recording it counts in the same slot
    (tests/tpm/test_transport.py checks whole histograms against value-by-value recording)."""
    shift = ns.bit_length() - _SUB_BITS
    if shift < _UNIT_BITS:
        shift = _UNIT_BITS
    floor: int = ns >> shift << shift
    return floor


def recorded(h: HdrHistogram) -> list[tuple[int, int]]:
    """(highest value of the slot in ns, count) of every slot that holds a value, lowest first:
    what ``get_recorded_iterator()`` yields, read straight from the counts array. The iterator
    steps through every sub-bucket in pure Python (~0.3 s per histogram on a loaded 2-core
    machine, 42 histograms in a bench capture: the silence before "capture written"); this
    visits only the non-zero slots."""
    counts = h.counts[:h.counts_len]
    value_of, highest = h.get_value_from_index, h.get_highest_equivalent_value
    return [(highest(value_of(i)), c) for i, c in enumerate(counts) if c]


class LatencyHistogram:
    """One latency distribution. Values are nanoseconds; summaries are microseconds."""

    __slots__ = ("_exact", "_h", "_lock", "_max_ns", "_min_ns", "_pending", "_sum_ns")

    def __init__(self) -> None:
        self._h: HdrHistogram | None = None  # made by the first drain that has a value
        self._lock = threading.Lock()
        self._sum_ns = 0
        self._min_ns: int | None = None
        # The exact extremes: the HDR histogram answers with a bucket's edge, so two equal
        # samples of 36,977.0 µs would get a p50 of 36,995.1 µs — a value no sample had.
        # Every percentile is clamped into [min, max] of what was recorded.
        self._max_ns: int | None = None
        self._pending: list[int] = []
        # Every sample, sorted when read, while there are at most EXACT_MAX: a percentile of a
        # few samples is one of them (the p50 of 36,977, 36,977 and 36,978 µs is 36,977), not
        # an HDR slot's edge clamped into [min, max] (which read 36,978). None past that.
        self._exact: list[int] | None = []

    def record(self, ns: int, count: int = 1) -> None:
        with self._lock:
            ex = self._exact
            if ex is not None:
                if len(ex) + count <= EXACT_MAX:
                    ex.extend([ns] * count)
                else:
                    self._exact = None
            if count == 1:
                self._pending.append(ns)
                if len(self._pending) < 1024:
                    return
            else:
                self._pending.extend([ns] * count)
            self._drain()

    def _drain(self) -> None:  # caller holds the lock
        pending, self._pending = self._pending, []
        if not pending:
            return
        if self._h is None:
            self._h = _new_hdr()
        rec = self._h.record_value
        # Clamp into the trackable range rather than dropping: a sub-µs or >60 s sample is
        # still an operation that happened and must be counted.
        slots = Counter([_bucket_floor(LOWEST_NS if ns < LOWEST_NS else HIGHEST_NS if ns > HIGHEST_NS else ns)
                         for ns in pending])
        for value, n in slots.items():
            rec(value, n)
        self._sum_ns += sum(pending)
        m = min(pending)
        if self._min_ns is None or m < self._min_ns:
            self._min_ns = m
        m = max(pending)
        if self._max_ns is None or m > self._max_ns:
            self._max_ns = m

    def merge(self, other: LatencyHistogram) -> None:
        with other._lock:
            other._drain()
            if other._h is None:  # nothing recorded there: nothing to add
                return
            snap = _new_hdr()
            snap.add(other._h)
            s, m, mx = other._sum_ns, other._min_ns, other._max_ns
            theirs = None if other._exact is None else list(other._exact)
        with self._lock:
            self._drain()
            mine = self._exact
            self._exact = (mine + theirs if mine is not None and theirs is not None
                           and len(mine) + len(theirs) <= EXACT_MAX else None)
            if self._h is None:
                self._h = _new_hdr()
            self._h.add(snap)
            self._sum_ns += s
            if m is not None and (self._min_ns is None or m < self._min_ns):
                self._min_ns = m
            if mx is not None and (self._max_ns is None or mx > self._max_ns):
                self._max_ns = mx

    def snapshot(self) -> LatencyHistogram:
        """A copy as of now (an HDR copy, ~0.4 ms for 200,000 samples here): a summary and
        the buckets drawn from it then agree, whatever is recorded meanwhile."""
        copy = LatencyHistogram()
        copy.merge(self)
        return copy

    def reset(self) -> None:
        with self._lock:
            self._pending.clear()
            if self._h is not None:
                self._h.reset()
            self._sum_ns = 0
            self._min_ns = None
            self._max_ns = None
            self._exact = []

    @property
    def count(self) -> int:
        with self._lock:
            self._drain()
            return 0 if self._h is None else int(self._h.get_total_count())

    def percentile_ns(self, p: float) -> int:
        with self._lock:
            self._drain()
            if self._h is None or self._h.get_total_count() == 0:
                return 0
            if self._exact:
                return _nearest_rank(sorted(self._exact), p)
            return self._clamp(int(self._h.get_value_at_percentile(p)))

    def _clamp(self, ns: float) -> int:  # caller holds the lock, after a drain
        lo = self._min_ns if self._min_ns is not None else ns
        hi = self._max_ns if self._max_ns is not None else ns
        return int(min(max(ns, lo), hi))

    def summary(self) -> dict[str, Any]:
        """``{"count", "p50", "p90", "p99", "max", "mean"}`` in microseconds (floats)."""
        with self._lock:
            self._drain()
            n = 0 if self._h is None else self._h.get_total_count()
            if self._h is None or n == 0:
                return {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}
            if self._exact:
                xs = sorted(self._exact)
                vals = {q: float(_nearest_rank(xs, q)) for q in PERCENTILES}
            else:
                vals = self._h.get_percentile_to_value_dict(list(PERCENTILES))
            return {
                "count": n,
                "p50": round(self._clamp(vals[50.0]) / 1000, 3),
                "p90": round(self._clamp(vals[90.0]) / 1000, 3),
                "p99": round(self._clamp(vals[99.0]) / 1000, 3),
                "max": round(self._clamp(self._h.get_max_value()) / 1000, 3),
                "mean": round(self._sum_ns / n / 1000, 3),
            }

    def to_json(self) -> dict[str, Any]:
        """A capture's latency member: :meth:`summary` with ``histogram`` (:meth:`buckets`)."""
        return self.summary() | {"histogram": self.buckets()}

    def buckets(self, per_decade: int = 4) -> list[list[float]]:
        """Logarithmic buckets ``[[upper_bound_us, count], …]`` covering the recorded range.

        Bounds are 10**(k/per_decade) µs, so two captures bucket identically and can be
        compared or merged without the raw samples.
        """
        with self._lock:
            self._drain()
            if self._h is None or self._h.get_total_count() == 0:
                return []
            items = recorded(self._h)
        out: dict[float, int] = {}
        for value_ns, c in items:
            us = max(value_ns / 1000, 1.0)
            k = math.ceil(round(math.log10(us) * per_decade, 9))
            bound = round(10 ** (k / per_decade), 3)
            out[bound] = out.get(bound, 0) + c
        return [[b, out[b]] for b in sorted(out)]


# -- bpftrace's hist() text ------------------------------------------------------------------
# The layout kernel developers paste into mailing lists: power-of-two buckets, each row the
# bucket's label left-aligned in 16 columns, its count right-aligned in 8, then " |", a bar of
# "@" scaled to the fullest bucket in 52 columns, and "|". Every bucket from the lowest to the
# highest populated one is printed, the empty ones too (bpftrace's TextOutput::hist).
HIST_BAR = 52


def pow2_index(us: int) -> int:
    """bpftrace's hist() slot of a value: 1 for 0, 2 for 1, k + 2 for [2**k, 2**(k+1))."""
    return 1 if us <= 0 else us.bit_length() + 1


def _pow2_label(power: int) -> str:
    decade = min(power // 10, 6)
    suffix = "\0KMGTPE"[decade].strip("\0")
    return f"{1 << (power - 10 * decade)}{suffix}"


def _slot_label(i: int) -> str:
    if i == 1:
        return "[0]"
    if i == 2:
        return "[1]"
    return f"[{_pow2_label(i - 2)}, {_pow2_label(i - 1)})"


def hist_text(slots: dict[int, int], title: str) -> str:
    """``slots`` (pow2_index -> count) as bpftrace prints a ``hist()`` map: ``title`` (such as
    ``@us[native, per-command]``), a colon, one row per slot, and a blank line."""
    lines = [f"{title}:"]
    filled = {i: c for i, c in slots.items() if c}
    if filled:
        most = max(filled.values())
        for i in range(min(filled), max(filled) + 1):
            c = filled.get(i, 0)
            bar = "@" * int(c / most * HIST_BAR)
            lines.append(f"{_slot_label(i):<16}{c:>8} |{bar:<{HIST_BAR}}|")
    return "\n".join(lines) + "\n"


def pow2_slots_of_ns(values_ns: Iterable[int]) -> dict[int, int]:
    """bpftrace's hist() slots (of whole microseconds) of latencies in nanoseconds."""
    out: dict[int, int] = {}
    for ns in values_ns:
        i = pow2_index(int(ns) // 1000)
        out[i] = out.get(i, 0) + 1
    return out


def pow2_slots(h: LatencyHistogram) -> dict[int, int]:
    """A histogram's counts in bpftrace's hist() slots of whole microseconds. Each HDR slot
    (3 significant digits: 0.1 % wide) counts where its middle falls, so a value within 0.1 %
    of a power of two may land one bucket off."""
    with h._lock:
        h._drain()
        if h._h is None:
            return {}
        slots = recorded(h._h)
        low = h._h.get_lowest_equivalent_value
    out: dict[int, int] = {}
    for hi, c in slots:
        mid = (low(hi) + hi) // 2
        i = pow2_index(mid // 1000)
        out[i] = out.get(i, 0) + c
    return out
