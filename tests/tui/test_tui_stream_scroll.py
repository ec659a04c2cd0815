"""The stream on Textual's ScrollView: frozen with s, Home/End/PgUp scroll it whatever has focus
(no 5 first), its scrollbar shows where the page is, and unfrozen those keys stay the focused
widget's. A replayed capture (its whole stream, deterministic) at 120×40."""

from __future__ import annotations

from tests.helpers.paths import TESTS
from tests.helpers.tui import app_for, main_screen, until
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.widgets.stream import StreamPanel, StreamView

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


def _first_shown(view: StreamView) -> str:
    return str(view.render()).splitlines()[1].split()[0]  # under the header line: its time column


async def test_s_then_home_scrolls_the_stream_to_its_first_row_without_pressing_5(tmp_path):
    app = app_for(ReplaySource(load(FIXTURE), FIXTURE), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = main_screen(app)
        panel = screen.query_one(StreamPanel)
        view = panel.view
        await until(pilot, lambda: len(view.rows) > view.size.height, 30, "a stream longer than its page")
        assert app.focused is not view
        newest = _first_shown(view)
        assert newest != view.rows[0].t.strip()  # following: the newest page, not the first
        await pilot.press("s")
        await pilot.press("home")
        await pilot.pause()
        assert panel.frozen and app.focused is not view  # the key reached the stream, focus stayed
        assert view.back == len(view.rows) - 1
        assert _first_shown(view) == view.rows[0].t.strip()  # the first row, on top
        await until(pilot, lambda: view.scroll_offset.y == 0, 10, "the scrollbar at the top")
        assert view.show_vertical_scrollbar  # frozen: the scrollbar says where the page is
        await pilot.press("pagedown")
        await pilot.pause()
        assert view.back == len(view.rows) - 1 - (view.size.height - 2)
        await pilot.press("end")
        await pilot.pause()
        assert view.back == 0 and _first_shown(view) == newest


async def test_unfrozen_home_is_the_focused_widgets(tmp_path):
    """The keys reach the stream only once it is frozen: following, Home is not taken from the
    focused widget and the stream stays on its newest page."""
    app = app_for(ReplaySource(load(FIXTURE), FIXTURE), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = main_screen(app)
        view = screen.query_one(StreamPanel).view
        await until(pilot, lambda: len(view.rows) > view.size.height, 30, "a stream longer than its page")
        newest = _first_shown(view)
        await pilot.press("home")
        await pilot.pause()
        assert view.back == 0 and _first_shown(view) == newest
        assert not view.show_vertical_scrollbar  # following: no scrollbar
