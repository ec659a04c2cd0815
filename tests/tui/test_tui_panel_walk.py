"""docs/extending.md's panel walk, executed: its three code blocks (the rows module, the widget,
the PanelSpec line) are taken from the page as written, put in a package of their own, the
line added to the panel table, and the dashboard started on a capture in a fresh interpreter
(the screen's keys are bound when its module is imported). The panel must then be in the
layout with its part drawn, behind its key and tab, in the help screen and in the palette."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

from tests.helpers.paths import REPO, TESTS

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"

SCRIPT = r'''
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import runs  # the rows module of the walk
from runs_widget import RunsPanel
from tpmtop.tui import panels
from tpmtop.tui.panels import Group, PanelSpec
spec = eval(open(sys.argv[2]).read(), {"PanelSpec": PanelSpec, "Group": Group, "RunsPanel": RunsPanel, "runs": runs})
panels.PANELS = (*panels.PANELS, spec)
panels.BY_ID[spec.id] = spec
from textual.widgets import Static, Tabs
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.actions import palette_entries
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.help import help_markup

async def main():
    seen = {}
    src = ReplaySource(load(sys.argv[3]), sys.argv[3])
    app = TpmtopApp(src, theme="dark", remember=False)
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.pause(0.5)
        panel = app.screen.query_one("#runs", RunsPanel)
        seen["full"] = {"display": panel.display, "title": panel.border_title,
                        "text": str(panel.query_one("#runs-text", Static).render()),
                        "height": panel.region.height}
    app = TpmtopApp(ReplaySource(load(sys.argv[3]), sys.argv[3]), theme="dark", remember=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("0")
        await pilot.pause(0.3)
        tabs = app.screen.query_one("#panel-tabs", Tabs)
        seen["compact"] = {"active": app.screen.active_panel, "tab": str(tabs.active_tab.label),
                           "shown": app.screen.query_one("#runs").display}
    seen["runs"] = [[r.mode, r.ops] for r in src.runs()]
    seen["help"] = spec.help in help_markup()
    seen["palette"] = [t for t, _, _ in palette_entries() if "runs" in t]
    print(json.dumps(seen))

asyncio.run(main())
'''


def _walk_blocks() -> list[str]:
    page = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    section = page.split("## A panel: 3 files", 1)[1].split("\n## ", 1)[0]
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", section, re.S)]


def test_the_documented_panel_walk_adds_a_panel_in_three_files(tmp_path):
    rows, widget, line = _walk_blocks()
    assert "def part(source" in rows and "class RunsPanel(Panel)" in widget and "PanelSpec(" in line
    (tmp_path / "runs.py").write_text(rows)
    (tmp_path / "runs_widget.py").write_text(widget)
    (tmp_path / "spec.py").write_text(line.strip().rstrip(","))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(tmp_path / "spec.py"), str(FIXTURE)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["runs"], "the capture has runs to list"
    full = seen["full"]
    assert full["display"] and full["title"] == "Runs" and full["height"] > 2
    for mode, ops in seen["runs"]:
        assert f"{mode}: {ops:,}" in full["text"]  # the part, as the widget draws it
    assert seen["compact"] == {"active": "runs", "tab": "0 Runs", "shown": True}  # key 0, its tab
    assert seen["help"]
    assert seen["palette"] == ["panel: Show runs"]


def test_every_built_in_panel_draws_its_part_through_show_part():
    """One path for every panel: each spec declares its part (a build from the source, or which
    of the view-model's typed parts is its own), the screen hands it to show_part; the frame
    keeps no map from panel ids to its typed parts."""
    from tpmtop.tui.panels import PANELS
    from tpmtop.tui.widgets.panel import Panel
    from tpmtop.viewmodel.frame import Frame, HandlesView

    assert len(PANELS) >= 7
    for p in PANELS:
        assert p.widget.show_part is not Panel.show_part, p.id
        assert (p.build is None) != (p.part is None), p.id
        assert not hasattr(p.widget, "show_frame"), p.id
    handles = HandlesView([], [])
    frame = Frame(handles=handles)
    assert not frame.parts  # the typed part stays in its field
    found = {p.id: p.part_of(frame) for p in PANELS}
    assert {k for k, v in found.items() if v is not None} == {"handles", "resources"}
    assert found["handles"] is handles and found["resources"] == []
    assert next(p for p in PANELS if p.id == "pcrs").part_of(Frame(parts={"pcrs": "x"})) == "x"
