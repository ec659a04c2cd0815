"""What the dashboard keeps for the cyclic garbage collector to walk (issue 54: no full GC over
50 ms at 8,000 events/s, benchmarks/ui_load.py --gc-only). A full collection stops every
thread for as long as it takes to walk every tracked object, so the dashboard must not keep
modules it does not use, records the collector need not see, or renders no frame will draw."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

from textual.app import App, ComposeResult

from tests.helpers.paths import REPO
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
