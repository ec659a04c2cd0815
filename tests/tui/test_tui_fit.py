"""Issue 24 item 10 (text cut at 120 columns) and item 13's NO_COLOR: the header drops whole words
instead of ending in "p…" once "TPM period 2" shows, the Boot report's tables fit the screen (their
last column wraps under itself), the Clients panel shows whole columns, and NO_COLOR=1 sends no
colour at all. Real swtpm where a TPM is needed; Pilot."""

from __future__ import annotations

import asyncio
import re

from tests.helpers.paths import TESTS
from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.boot.report import build_report, render_text
from tpmtop.boot.rootfs import RootReader
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.boot import BootScreen, fit_report

LAPTOP = TESTS / "fixtures" / "boot" / "laptop-6.10-hmac"
CAPTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


def _header_lines(app) -> list[str]:
    return str(main_screen(app).query_one("#header").render()).split("\n")


class TestHeader:
    async def test_a_second_tpm_period_leaves_line_two_whole_at_120_and_80(self, live, tmp_path):
        src = live(start_running=True, rate=100, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: sum(a.ops for a in src.accounts().values()) >= 5, what="ops")
            await asyncio.to_thread(lambda: src.run_on_owner(lambda _t: src.conn.sim.reset()))
            await until(pilot, lambda: "TPM period 2" in _header_lines(app)[1], timeout=60, what="period 2 shown")
            for size in ((120, 40), (80, 24)):
                await pilot.resize_terminal(*size)
                await until(pilot, lambda w=size[0]: main_screen(app).size.width == w, what="resized")
                await pilot.pause(0.5)  # a frame at the new width
                width = main_screen(app).query_one("#header").content_size.width
                for line in _header_lines(app):
                    assert len(line) <= width and "…" not in line, (size, line)
                line2 = _header_lines(app)[1]
                assert "TPM period 2" in line2 and "mode per-command" in line2
                assert not re.search(r"\b(p|po|pol|poll)$", line2), line2  # nothing cut mid-word


def _words(text: str) -> str:
    return "".join(w for w in text.split() if set(w) != {"-"})


class TestBootReport:
    def test_fit_report_keeps_every_line_within_the_width(self):
        text = render_text(build_report(RootReader(str(LAPTOP))))
        assert max(len(line) for line in text.split("\n")) > 120  # the CLI's tables are wider
        for width in (116, 76):
            fitted = fit_report(text, width)
            table_lines = [line for line in fitted.split("\n") if line.startswith("   ")]
            assert all(len(line) <= width for line in table_lines), width
            # nothing lost: the same words, in the same order (the rules under headers are cut to fit)
            assert _words(fitted) == _words(text)

    async def test_b_report_source_column_is_whole_on_screen_at_120(self):
        app = TpmtopApp(ReplaySource(load(CAPTURE), CAPTURE), theme="dark", remember=False, boot_root=str(LAPTOP))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("b")
            assert isinstance(app.screen, BootScreen)
            await until(pilot, lambda: app.screen.built, what="report built")
            await pilot.pause(0.2)
            scroll = app.screen.query_one("#boot-scroll")
            assert scroll.max_scroll_x == 0  # nothing to the right of the screen
            shown = str(app.screen.query_one("#boot-text").render())
            assert _words(shown) == _words(app.screen.text)


class TestNoColor:
    async def test_no_color_sends_no_colour_at_all(self, live, tmp_path, monkeypatch):
        """no-color.org: no foreground or background colour in any segment drawn; reverse and bold
        (attributes) stay, so the selected row still shows."""
        monkeypatch.setenv("NO_COLOR", "1")
        src = live(start_running=True, rate=100)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: sum(a.ops for a in src.accounts().values()) >= 5, what="ops")
            await pilot.press("3")
            await pilot.pause(0.5)
            assert _coloured(app) == []
            # the selected row still shows: reverse survives (an attribute, not a colour)
            assert any(seg.style is not None and seg.style.reverse for seg in _filtered_segments(app))


def _filtered_segments(app):
    from textual.color import Color

    background = Color(0, 0, 0)
    from tests.helpers.tui import drawn

    for strip in (s for _, strips in drawn(app) for s in strips):
        segments = list(strip)
        for f in app.get_line_filters():
            segments = f.apply(segments, background)
        yield from segments


def _coloured(app) -> list:
    out = []
    for seg in _filtered_segments(app):
        st = seg.style
        if st is not None and any(c is not None and not c.is_default for c in (st.color, st.bgcolor)):
            out.append((seg.text, str(st)))
    return out[:5]
