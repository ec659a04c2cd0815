"""What the dashboard keeps for the cyclic garbage collector to walk (issue 54: no full GC over
50 ms at 8,000 events/s, benchmarks/ui_load.py --gc-only). A full collection stops every
thread for as long as it takes to walk every tracked object, so the dashboard must not keep
modules it does not use, records the collector need not see, or renders no frame will draw."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from collections import Counter

from textual.app import App, ComposeResult

from tests.helpers.paths import REPO
from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.tui.widgets.table import KeyedTable

# A fresh interpreter (the test runner has imported everything): the real app on a private
# swtpm under its default workload (mode none), headless, until the workload has extended PCR
# 16 a few hundred times through the engine's null primary.
DASHBOARD = r"""
import asyncio, gc, json, sys
from tpmtop.connect import open_tpm
from tpmtop.pcrs.attribution import Extend
from tpmtop.sources.live import LiveSource
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.main import MainScreen

async def main():
    src = LiveSource(open_tpm(sim=True), start_running=True, mode="none")
    try:
        app = TpmtopApp(src, theme="dark", remember=False, export_dir=sys.argv[1])
        async with app.run_test(size=(120, 40)) as pilot:
            screen = next(s for s in app.screen_stack if isinstance(s, MainScreen))
            watch = screen.dash.alerts.detector.pcr_watch
            for _ in range(1200):  # at most ~4 minutes on a loaded machine; ~1 s on a quiet one
                if len(watch.extends) >= 300:
                    break
                await pilot.pause(0.2)
            gc.collect()
            print(json.dumps({
                "extends_kept": len(watch.extends),
                "extends_tracked": sum(isinstance(o, Extend) for o in gc.get_objects()),
                "create_primary": 0x131 in src.recorder.command_stats(None),
                "imported": sorted({m.split(".")[0] for m in sys.modules
                                    if m.split(".")[0] in ("tpm2_pytss", "cryptography")}),
            }))
    finally:
        src.close()

asyncio.run(main())
"""


def test_the_dashboard_under_its_workload_loads_no_tpm2_pytss_and_tracks_no_extend(tmp_path):
    """The workload's native engine (null primary, extends) runs without tpm2-pytss and the
    cryptography it imports (~10,000 objects: a fifth of a full collection on main), and the
    PCR watch's last 4,096 extends are untracked records (gc.is_tracked is False)."""
    r = subprocess.run([sys.executable, "-c", DASHBOARD, str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=REPO,
                       env=dict(os.environ, TEXTUAL_ANIMATIONS="none", XDG_CONFIG_HOME=str(tmp_path)))
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["create_primary"] and seen["extends_kept"] >= 300, seen  # the code that imported them ran
    assert seen["imported"] == [], seen
    assert seen["extends_tracked"] == 0, seen


class _TableApp(App[None]):
    CSS = "KeyedTable { width: 1fr; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable([("name", "name", 12), ("a", "a", 8), ("b", "b", 8), ("c", "c", 8)], id="t")


def _tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


async def test_a_table_changing_every_second_keeps_no_stale_renders():
    """A KeyedTable whose cells change each refresh (the Latency table under a workload): after
    20 refreshes and after 120 more, about as many tracked objects. DataTable keeps each
    rendered row, cell and line under a count every change bumps; kept, those stale renders
    grew by thousands of objects a minute for every full collection to walk."""
    app = _TableApp()
    async with app.run_test(size=(80, 20)) as pilot:
        table = app.query_one(KeyedTable)

        async def refreshes(first: int, n: int) -> None:
            for i in range(first, first + n):
                table.sync([(f"r{r}", (f"row {r}", f"{i}", f"{i * r}", f"{i + r}")) for r in range(12)])
                await pilot.pause()

        await refreshes(0, 20)
        before = _tracked()
        await refreshes(20, 120)
        grown = _tracked() - before
        assert table.get_cell("r3", "b") == f"{139 * 3}"  # drawn as ever: the last refresh's values
    assert grown < 1500, grown


def _visits(kinds: tuple[type, ...]) -> Counter[type]:
    """How many references to objects of ``kinds`` a full collection visits: every reference
    held by a container the collector tracks, whether or not the object pointed to is tracked."""
    gc.collect()
    seen: Counter[type] = Counter()
    for o in gc.get_objects():
        for r in gc.get_referents(o):
            if isinstance(r, kinds):
                seen[type(r)] += 1
    return seen


async def test_the_recorder_and_the_pcr_watch_keep_their_records_out_of_the_collectors_walk(live, tmp_path):
    """Under the dashboard's unpaced workload, the recorder's ring of events and the PCR
    watch's last extends are kept in tpmtop.ring.Ring, and events with the same handles and
    sessions share one tuple of each: a full collection (every thread stopped)
    visits a few chunks' worth of their references, not one per record as in a deque (100,000
    events, 16,384 with their bytes, 4,096 extends: a fifth of every full collection's walk).
    What they hold is unchanged: the newest events in order, the extends the watch names."""
    from tpmtop.pcrs.attribution import Extend
    from tpmtop.recorder import Event
    from tpmtop.ring import CHUNK
    from tpmtop.tpm.names import cc_short

    src = live(start_running=True, mode="none", rate=0)
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        watch = main_screen(app).dash.alerts.detector.pcr_watch
        await until(pilot, lambda: src.recorder.total >= 12_000 and len(watch.extends) >= 3_000, timeout=600,
                    what="12,000 events and 3,000 extends")
        await pilot.press("space")  # the workload paused: what is kept stays put while it is counted
        await until(pilot, lambda: not src.running, what="the workload paused")
        seen = _visits((Event, Extend))
        events = src.recorder.events()
        extends = list(watch.extends)
    assert len(events) >= 12_000 and len(extends) >= 3_000
    # The events in order, none missing: each one the recorder numbered after the one before.
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
    assert {(e.pcr, e.command) for e in extends[-100:]} == {(16, cc_short(0x182))}  # the workload's PCR_Extend
    # Every extend names PCR 16 under one password session: one tuple of each for all of them,
    # not two or three new ones per event that each young collection counts (before: 12,000+).
    workload_extends = [e for e in events if e.cc == 0x182 and e.origin == "workload"]
    assert len(workload_extends) >= 10_000
    assert len({id(e.handles) for e in workload_extends}) == 1, workload_extends[0].handles
    assert len({id(e.sessions) for e in workload_extends}) == 1, workload_extends[0].sessions
    assert workload_extends[-1].handles == (16,) and workload_extends[-1].sessions[0][0] == 0x40000009
    # Each ring's chunk being filled, and the lists a refresh holds for a moment: not 12,000.
    assert seen[Event] < 4 * CHUNK, (seen[Event], len(events))
    assert seen[Extend] < 2 * CHUNK, (seen[Extend], len(extends))


def _in_a_cycle(obj: object, depth: int = 4) -> bool:
    """``obj`` reachable from itself through at most ``depth`` references: then reference
    counting cannot free it, only a full collection can."""
    frontier, seen = [obj], {id(obj)}
    for _ in range(depth):
        nxt = []
        for o in frontier:
            for r in gc.get_referents(o):
                if r is obj:
                    return True
                if id(r) not in seen and gc.is_tracked(r):
                    seen.add(id(r))
                    nxt.append(r)
        frontier = nxt
    return False


async def test_the_streams_lines_are_freed_by_reference_counting(live, tmp_path):
    """A line of the stream (a Strip and its seven caches) is in no cycle with itself. Cropped
    with crop_extend, a line already as wide as the view came back as the same Strip and cached
    itself: while following, every line shown was replaced each refresh, and each old one lived
    on until the next full collection, which then had to walk and free them (280 of 763 cyclic
    Strips in 4 s at 8,000 events/s)."""
    from tpmtop.tui.widgets.stream import StreamView

    src = live(start_running=True, mode="none", rate=0)
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        view = main_screen(app).query_one(StreamView)
        # laid out (a height of 0 before the first layout would read as a full page), then full
        await until(pilot, lambda: view.size.height > 2 and len(view.rows) >= view.size.height, timeout=300,
                    what="a page of commands")
        await pilot.press("space")
        await until(pilot, lambda: not src.running, what="the workload paused")
        await pilot.pause(0.5)
        lines = [view.render_line(y) for y in range(1, view.size.height)]
        texts = [line.text for line in lines]
        cyclic = [i for i, line in enumerate(lines) if _in_a_cycle(line)]
    # the commands, drawn as ever: each line a row with its time, the workload's extends among them
    assert all(re.match(r" *\d+\.\d{3} ", t) for t in texts) and any("PCR_Extend" in t for t in texts), texts
    assert cyclic == [], f"{len(cyclic)} of {len(lines)} lines cache themselves: {[texts[i] for i in cyclic]}"
