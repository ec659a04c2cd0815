"""The Modes panel's time series (tpmtop.sources.timeline): per whole second, one writer."""

from __future__ import annotations

import gc

from tpmtop.sessions.modes import Engine, Mode, Op
from tpmtop.sources.timeline import OpsTimeline


def fill(tl: OpsTimeline, start: float, seconds: int, per_second: int, mode: str = "none", total=lambda i: 1000 * i):
    for s in range(seconds):
        for i in range(per_second):
            tl.add(start + s + i / per_second, "native", mode, "extend", total(i + 1))


def test_each_whole_second_gets_its_median_and_count_and_the_second_under_way_waits():
    tl = OpsTimeline()
    fill(tl, 100.0, 3, 5)  # totals 1..5 µs each second: median 3 µs
    pts = tl.series("extend", "native", now=102.5, seconds=4)
    # seconds 98, 99 (nothing), 100, 101; 102 is under way
    assert pts[:2] == [None, None]
    assert [(p.t, p.p50_us, p.ops, p.mode) for p in pts[2:]] == [(101.0, 3.0, 5, "none"), (102.0, 3.0, 5, "none")]
    # Once it is over, the last second is shown too, though no later operation closed it.
    last = tl.series("extend", "native", now=103.0, seconds=1)[0]
    assert last is not None and (last.t, last.p50_us, last.ops) == (103.0, 3.0, 5)


def test_a_second_is_labelled_with_the_mode_most_of_its_operations_ran_in():
    tl = OpsTimeline()
    for i in range(10):
        tl.add(50.0 + i / 10, "native", "reuse" if i < 7 else "none", "extend", 2000)
    (p,) = tl.series("extend", "native", now=51.0, seconds=1)
    assert p is not None and p.mode == "reuse" and p.ops == 10


def test_other_engines_and_ops_are_kept_apart():
    tl = OpsTimeline()
    tl.add(10.1, "native", "none", "extend", 1000)
    tl.add(10.2, "esapi", "none", "extend", 9000)
    tl.add(10.3, "native", "none", "read", 7000)
    (p,) = tl.series("extend", "native", now=11.0, seconds=1)
    assert p is not None and (p.p50_us, p.ops) == (1.0, 1)
    assert tl.series("extend", "esapi", now=11.0, seconds=1)[0].p50_us == 9.0


def test_old_seconds_are_dropped_and_clear_empties_it():
    tl = OpsTimeline(keep_seconds=5)
    fill(tl, 0.0, 20, 2)
    assert len(tl) == 5 * 2
    assert tl.series("extend", "native", now=20.0, seconds=10)[:5] == [None] * 5
    tl.clear()
    assert len(tl) == 0 and tl.series("extend", "native", now=20.0, seconds=3) == [None] * 3


def test_enum_members_are_not_kept():
    """The workload passes StrEnum members; a key holding them would keep its tuple tracked
    by the cyclic GC (the old ring held 200,000 such tuples)."""
    tl = OpsTimeline()
    tl.add(1.0, Engine.NATIVE, Mode.NONE, Op.EXTEND, 1000)
    keys = [k for per in tl._by_second.values() for k in per]
    assert keys == [("native", "extend")] and all(type(x) is str for k in keys for x in k)
    gc.collect()
    assert not any(gc.is_tracked(k) for k in keys)
