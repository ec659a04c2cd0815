"""Issue 24 item 9: filter and navigation. `/` opens in the focused panel and says how to leave,
Ctrl-U clears it, `<` sorts the other way and the header names the sorted column, Tab turns the
tabs below 110×32, F10 quits, and [ / ] change the refresh interval live. Real swtpm, Pilot."""

from __future__ import annotations

from tests.helpers.tui import SIZE, app_for, header_text, main_screen, until
from tpmtop.tui.screens.filter import PanelFilter


def _ops(src) -> int:
    return sum(a.ops for a in src.accounts().values())


def _header_labels(table) -> dict[str, str]:
    return {str(k.value): str(c.label) for k, c in table.columns.items()}


class TestFilterLine:
    async def test_slash_opens_in_the_focused_panel_and_leaves_on_esc(self, live, tmp_path):
        """On Latency the filter line sits inside the Latency panel, talks about commands, says
        Esc leaves; Ctrl-U clears the text wherever the cursor is; Esc keeps the old filter."""
        src = live(start_running=True, rate=0, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            table = screen.query_one("#latency-table")
            await until(pilot, lambda: sum(1 for k in table._shadow if k.startswith("cc:")) >= 4, what="rows")
            await pilot.press("space", "3", "slash")
            await until(pilot, lambda: screen.query(PanelFilter), what="the filter line")
            line = screen.query_one(PanelFilter)
            latency = screen.query_one("#latency")
            assert line.parent is latency
            assert latency.region.contains_region(line.region)
            field = line.query_one("#table-filter")
            assert "command" in field.placeholder and "Handles" not in field.placeholder
            hint = str(line.query_one(".panel-filter-hint").render())
            assert "Esc leaves" in hint
            # the placeholder is whole: the input is wider than it
            assert field.region.width >= len(field.placeholder) + 2
            await pilot.press(*"Flush", "enter")
            await until(pilot, lambda: table.needle == "Flush", what="applied")
            await until(pilot, lambda: not screen.query(PanelFilter), what="closed on Enter")
            await pilot.press("slash")
            await until(pilot, lambda: screen.query(PanelFilter), what="open again")
            field = screen.query_one("#table-filter")
            assert field.value == "Flush"
            await pilot.press("home", "ctrl+u")  # readline's ^U only cut left of the cursor
            assert field.value == ""
            await pilot.press("escape")
            await until(pilot, lambda: not screen.query(PanelFilter), what="closed on Esc")
            assert table.needle == "Flush"  # Esc leaves the filter as it was
            assert app.focused is table

    async def test_the_stream_filter_line_shows_whole_at_120_columns(self, live, tmp_path):
        src = live(start_running=True, rate=100)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            await pilot.press("5", "slash")
            await until(pilot, lambda: screen.query(PanelFilter), what="the filter line")
            line = screen.query_one(PanelFilter)
            assert line.parent is screen.query_one("#stream")
            field = screen.query_one("#stream-filter")
            assert "errors" in field.placeholder
            assert field.region.width >= len(field.placeholder) + 2
            assert "Esc leaves" in str(line.query_one(".panel-filter-hint").render())


class TestSortAndKeys:
    async def test_less_than_sorts_back_and_the_header_marks_the_column(self, live, tmp_path):
        src = live(start_running=True, rate=0, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: sum(1 for k in table._shadow if k.startswith("cc:")) >= 4, what="rows")
            await pilot.press("space")
            table.focus()
            await pilot.press("less_than_sign")
            last = table.shown_columns[-1]
            assert table.sort_column == last
            labels = _header_labels(table)
            assert labels[last].endswith("▼")
            assert sum(label.endswith("▼") for label in labels.values()) == 1
            await pilot.press("greater_than_sign")  # back to the table's own order
            assert table.sort_column is None
            assert not any(label.endswith("▼") for label in _header_labels(table).values())
            await pilot.press("greater_than_sign")
            assert table.sort_column == table.shown_columns[1]
            assert _header_labels(table)[table.shown_columns[1]].endswith("▼")

    async def test_tab_turns_the_tabs_in_compact_mode(self, live, tmp_path):
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = main_screen(app)
            await until(pilot, lambda: screen.compact, what="compact layout")
            first = screen.active_panel
            await pilot.press("tab")
            i = screen.panels.index(first)
            assert screen.active_panel == screen.panels[(i + 1) % len(screen.panels)]
            assert screen.query_one("#panel-tabs").active == f"tab-{screen.active_panel}"
            await pilot.press("shift+tab")
            assert screen.active_panel == first

    async def test_panel_keys_visibly_land_on_panels_with_nothing_focusable_inside(self, live, tmp_path):
        """At 120x40 every panel shows: 2 and 4 used to change nothing on screen (Resources and
        Modes hold nothing focusable), so the key looked dead. The panel takes the focus and
        draws the focused border; Tab goes on from it."""
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            await until(pilot, lambda: not screen.compact and screen.query_one("#modes").display, what="full layout")
            for key, pid in (("2", "resources"), ("4", "modes"), ("1", "handles"), ("4", "modes")):
                await pilot.press(key)
                panel = screen.query_one(f"#{pid}")
                await until(pilot, lambda p=panel: p.has_focus_within, what=f"{pid} focused")
                await pilot.pause()
                # What the user sees: the panel's border in the focused colour, the others not.
                focused = panel.styles.border_top[1]
                others = [screen.query_one(f"#{q}").styles.border_top[1] for q in ("resources", "modes", "latency")
                          if q != pid]
                assert all(c != focused for c in others), pid
            await pilot.press("tab")
            assert not screen.query_one("#modes").has_focus_within

    async def test_brackets_change_the_refresh_interval_live(self, live, tmp_path):
        """] refreshes more often, [ less; the header says the interval; frames follow it."""
        src = live(start_running=True, rate=100)
        app = app_for(src, tmp_path)
        async with app.run_test(size=(200, 50)) as pilot:
            screen = main_screen(app)
            await until(pilot, lambda: _ops(src) > 0, what="ops")
            await pilot.press("left_square_bracket", "left_square_bracket", "left_square_bracket")
            assert screen.refresh_s == 2.0
            await until(pilot, lambda: "refresh 2 s" in header_text(app), what="the interval in the header")
            assert screen.clock.armed_s == 2.0  # the frames follow it
            await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket",
                              "right_square_bracket")
            assert screen.refresh_s == 0.1 and screen.clock.armed_s == 0.1
            await until(pilot, lambda: "refresh 0.1 s" in header_text(app), what="0.1 s in the header")

    async def test_f10_quits(self, live, tmp_path):
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await pilot.press("f10")
            await until(pilot, lambda: not app.is_running or app.return_code is not None, what="exit")
