"""The `p` dialog at 120×40 and 80×24 (user test): its text is longer than the box, and End or
PgDn went to the N input only, so the last lines ("… Esc closes.") could not be reached; a p50
of 100 µs or more pushed the host column a place right. Read from what the box draws."""

from __future__ import annotations

import re

import pytest
from textual.geometry import Region

from tests.helpers.tui import app_for, main_screen, mode_ops, until


def _visible(app) -> list[str]:
    """The projection's lines the box shows now (its scrolled window of the text)."""
    box = app.screen.query_one("#projection-box")
    text = app.screen.query_one("#projection-text")
    h = box.scrollable_content_region.height
    return [s.text for s in text.render_lines(Region(0, round(box.scroll_y), text.size.width, h))]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_p_scrolls_to_its_end_and_aligns_its_numbers(live, tmp_path, size):
    from tpmtop.tui.screens.projection import ProjectionScreen

    src = live(start_running=True, rate=0, mode="per-command")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: mode_ops(src, "per-command") >= 20, what="per-command ops")
        src.set_running(False)
        await pilot.pause(0.1)
        src.barrier()
        # the tables' p50s (which `p` reads) now, not the last second's: under load that was a
        # moment before per-command had run, and `p` showed no measured figure at all
        main_screen(app).refresh_all()
        await pilot.pause(0.3)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="projection screen")
        box = app.screen.query_one("#projection-box")
        await until(pilot, lambda: box.max_scroll_y > 0, what="the dialog laid out, longer than its box")
        assert "Esc closes." not in " ".join(_visible(app))  # the case: the end is below the box
        await pilot.press("end")
        await until(pilot, lambda: "Esc closes." in " ".join(_visible(app)), what="End scrolls to the end")
        assert app.screen.focused is app.screen.query_one("#projection-n")  # N can still be typed
        await pilot.press("home")
        await until(pilot, lambda: "PCR extends" in " ".join(_visible(app)), what="Home back to the top")
        await pilot.press("pagedown")
        await until(pilot, lambda: box.scroll_y > 0, what="PgDn scrolls")

        # One column for the p50s and one for the host times, whatever the number's width.
        lines = [s for s in str(app.screen.query_one("#projection-text").render()).splitlines() if " host h" in s]
        assert len(lines) >= 5, lines
        assert any(re.search(r"\d{3}\.\d µs  host", s) for s in lines), lines  # one of 100 µs or more (hS)
        assert any(re.search(r"\D\d{2}\.\d µs  host", s) for s in lines), lines  # and one under 100
        assert len({s.index("host h") for s in lines}) == 1, lines  # hM (no p50 of its own) too
        assert len({s.rindex(" µs") for s in lines}) == 1, lines
