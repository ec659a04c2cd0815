"""The Stream's rc column for a command that got no response (a transport failure), in the
column's narrow form: it read "no" ("no response" cut at its space), which looks like an
answer; it reads "lost" now, and the whole words where the column has room."""

from __future__ import annotations

import json

import pytest
from textual.geometry import Region

from tests.helpers.paths import REPO
from tests.helpers.tui import app_for, main_screen, until
from tpmtop.sources.replay import ReplaySource, load

SAMPLE = REPO / "tests" / "captures" / "sample-1.0.json"


def _lines(view) -> list[str]:
    w, h = view.region.width, view.region.height
    return [s.text.rstrip() for s in view.render_lines(Region(0, 0, w, h))]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_a_command_without_a_response_is_not_shown_as_no(tmp_path, size):
    doc = json.loads(SAMPLE.read_text())
    last = doc["events"][-1]
    # what a capture holds when the transport failed: no rc (tpmtop.tpm.names' words for it)
    last.update(rc=None, rc_text="(no response)", command="TPM2_CC_GetRandom")
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(doc))
    app = app_for(ReplaySource(load(str(path)), str(path)), tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        await pilot.press("5")
        view = screen.query_one("#stream-view")
        await until(pilot, lambda: any("GetRandom" in s for s in _lines(view)), what="the GetRandom row")
        row = next(s for s in _lines(view) if "GetRandom" in s)
        assert not row.endswith(" no"), row
        assert row.endswith(" lost") or row.endswith(" no response"), row
