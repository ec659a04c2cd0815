"""The Modes panel's time series: operation p50 per second, across mode switches.

Kept per second as operations finish, not per operation. The series used to be built from a
ring of the latest 200,000 operations, walked in full on every refresh: under an unpaced
workload (~10,000 operations/s) that was 120-150 ms of Python each second on the stats worker,
holding the GIL against the UI thread and the workload it measures, and 200,000 tuples of enum
members that every full cyclic collection walked. Now a refresh reads at most one bucket per
second shown, a finished second's p50 is computed once, and a bucket holds plain ints.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from statistics import median

KEEP_SECONDS = 600  # wider than any series drawn (one column per second)


@dataclass
class TimelinePoint:
    t: float  # end of the second, monotonic s
    mode: str
    p50_us: float
    ops: int


class _Second:
    """One (second, engine, op): its totals while the second is under way, then its point."""

    __slots__ = ("modes", "point", "totals")

    def __init__(self) -> None:
        self.totals: list[int] = []
        self.modes: dict[str, int] = {}
        self.point: TimelinePoint | None = None

    def summary(self, t_end: float) -> TimelinePoint | None:
        totals, modes = list(self.totals), dict(self.modes)
        if not totals:
            return None
        return TimelinePoint(t_end, max(modes, key=modes.__getitem__), median(totals) / 1000, len(totals))


class OpsTimeline:
    """Operation totals per whole monotonic second and (engine, op). One writer (the workload
    thread, :meth:`add`) owns every change: when a second is over it reduces that second to its
    point (a median of at most ~10,000 ints, once a second, between operations) and drops the
    oldest. Readers on other threads (:meth:`series`) only read."""

    def __init__(self, keep_seconds: int = KEEP_SECONDS) -> None:
        self._keep = keep_seconds
        self._by_second: dict[int, dict[tuple[str, str], _Second]] = {}
        self._current: int | None = None
        self._lock = threading.Lock()  # the dict of seconds, against a reader's copy of it

    def add(self, t: float, engine: str, mode: str, op: str, total_ns: int) -> None:
        s = int(t)
        per = self._by_second.get(s) if s == self._current else None
        if per is None:  # a new second, or the series was cleared meanwhile (a reset, UI thread)
            per = self._next_second(s)
        # Plain str keys: a StrEnum member is a tracked object the cyclic GC would walk.
        key = (str(engine), str(op))
        b = per.get(key)
        if b is None:
            b = per[key] = _Second()
        b.totals.append(total_ns)
        mode = str(mode)
        b.modes[mode] = b.modes.get(mode, 0) + 1

    def _next_second(self, s: int) -> dict[tuple[str, str], _Second]:
        done = self._current
        if done is not None and done != s:
            for b in self._by_second.get(done, {}).values():
                b.point = b.summary(float(done + 1))
                b.totals = []  # the point stands for them from now on
        with self._lock:
            per = self._by_second.setdefault(s, {})
            for old in [k for k in self._by_second if k <= s - self._keep]:
                del self._by_second[old]
        self._current = s
        return per

    def clear(self) -> None:
        with self._lock:
            self._by_second.clear()
            self._current = None

    def __len__(self) -> int:
        """Operations held."""
        with self._lock:
            seconds = list(self._by_second.values())
        return sum(b.point.ops if b.point else len(b.totals) for per in seconds for b in list(per.values()))

    def series(self, op: str, engine: str, now: float, seconds: int) -> list[TimelinePoint | None]:
        """Operation p50 of each of the last ``seconds`` whole seconds before ``now`` (None: no
        operation that second), each labelled with the mode most of its operations ran in: one
        series across mode switches, so a switch shows as a step. The second under way is not
        drawn until it is over."""
        first = int(now) - seconds
        key = (str(engine), str(op))
        with self._lock:
            per_second = [self._by_second.get(s) for s in range(first, first + seconds)]
        out: list[TimelinePoint | None] = []
        for i, per in enumerate(per_second):
            b = per.get(key) if per is not None else None
            # A second the writer has not reduced yet (the workload paused in it): read, not kept.
            out.append(None if b is None else b.point or b.summary(float(first + i + 1)))
        return out
