"""What a theme switch draws is what Textual itself would draw: the shortcuts that make ``t``
and dialogs cheap (a backdrop rendered one row for all, a table cell laid out once and styled
per theme, the screen below a dialog tinted once per style) give the same segments, text and
style, as Textual's full path, under every theme."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.content import Content
from textual.geometry import Region
from textual.renderables.background_screen import BackgroundScreen
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, Static

from tpmtop.tui.widgets.backdrop import BackdropScreen, Column, Row, TintedBelow, _Tint
from tpmtop.tui.widgets.table import KeyedTable

THEMES = ["textual-dark", "textual-light", "nord", "gruvbox", "textual-dark"]  # and back to the first


def _drawn(strips) -> list[list[tuple]]:
    return [[(s.text, s.style, s.control) for s in strip] for strip in strips]


class _Reference(KeyedTable):
    """The same table, every cell laid out by DataTable itself."""

    _render_cell = DataTable._render_cell


COLUMNS = [("name", "name", 12), ("count", "count", 7), ("p50", "p50", 8), ("who", "who", 9)]
ROWS = [
    ("a", ("PCR_Extend", "1,410", "150 µs", Content("x"))),
    ("b", ("[b]bold[/]", "5", Text("12 ms", justify="right", style="italic"), "kernel")),
    ("c", ("ContextLoad_with_a_long_name", "5", "?", Content.styled("tpm2_tool", "$warning"))),
]


class _Tables(App):
    CSS = "KeyedTable { height: 6; width: 44; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="fast")
        yield _Reference(COLUMNS, id="reference")


async def test_a_table_draws_what_datatable_draws_under_every_theme():
    app = _Tables()
    async with app.run_test(size=(60, 16)) as pilot:
        fast, ref = app.query_one("#fast", KeyedTable), app.query_one("#reference", KeyedTable)
        for table in (fast, ref):
            table.sync(ROWS)
        app.set_focus(None)
        await pilot.pause()
        seen = []
        for i, theme in enumerate(THEMES):
            app.theme = theme
            if i == 2:  # a tick's new values and a moved cursor between two switches
                for table in (fast, ref):
                    table.sync([(ROWS[0][0], ("PCR_Extend", "1,411", "151 µs", "x")), *ROWS[1:]])
                    table.move_cursor(row=1)
            await pilot.pause()
            whole = Region(0, 0, fast.region.width, fast.region.height)
            drawn = _drawn(fast.render_lines(whole))
            assert drawn == _drawn(ref.render_lines(whole)), theme
            seen.append(drawn)
        assert seen[0] != seen[1]  # the themes did restyle the table
        assert fast._laid_out  # and the text cells came from their kept layouts


class _Boxes(BackdropScreen):
    def compose(self) -> ComposeResult:
        with Column(id="framed"):
            yield Static("framed")
        with Row(id="plain"):
            yield Static("plain")
        with Column(id="outlined"):
            yield Static("outlined")
        with Column(id="hatched"):
            yield Static("hatched")
        with Row(id="keyed"):
            yield Static("one")
            yield Static("two")

    def on_mount(self) -> None:
        framed = self.query_one("#framed")
        framed.border_title, framed.border_subtitle = "Latency", "p50"


class _BoxesApp(App):
    CSS = """
    #framed { border: round $primary; border-title-color: $accent; padding: 1 2; height: 9; }
    #plain { height: 5; }
    #outlined { outline: heavy $error; height: 6; }
    #hatched { hatch: right $primary 40%; height: 4; }
    #keyed { keyline: thin $primary; height: 5; }
    Static { width: 10; }
    """

    def get_default_screen(self) -> _Boxes:
        return _Boxes()


@pytest.mark.parametrize("size", [(40, 30), (23, 30)])
async def test_a_backdrop_draws_what_textual_draws_under_every_theme(size):
    app = _BoxesApp()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        boxes = [*app.screen.query("Column, Row"), app.screen]
        assert len(boxes) == 6
        for theme in THEMES:
            app.theme = theme
            await pilot.pause()
            for box in boxes:
                whole = Region(0, 0, box.region.width, box.region.height)
                part = Region(1, 2, max(1, box.region.width - 3), max(1, box.region.height - 3))
                for crop in (whole, part):
                    assert _drawn(box.render_lines(crop)) == _drawn(Widget.render_lines(box, crop)), (box, theme)


class _Dialog(TintedBelow, ModalScreen[None]):
    def compose(self) -> ComposeResult:
        yield Static("a dialog", id="dialog")


async def test_the_screen_below_a_dialog_is_tinted_as_textual_tints_it_under_every_theme(monkeypatch):
    drawn_below: list = []  # what the dialog gave each frame to draw under it
    ours = TintedBelow.render

    def recording(self):
        drawn_below.append(ours(self))
        return drawn_below[-1]

    monkeypatch.setattr(TintedBelow, "render", recording)
    app = _Tables()
    async with app.run_test(size=(60, 16)) as pilot:
        for table in app.query(KeyedTable):
            table.sync(ROWS)
        await pilot.pause()
        app.push_screen(_Dialog())
        options = app.console_options.update_dimensions(60, 16)
        for theme in THEMES:
            drawn_below.clear()
            app.theme = theme
            await pilot.pause()
            tint = drawn_below[-1]
            assert isinstance(tint, _Tint) and tint.color.a < 1 and tint.screen is app.screen_stack[0]
            textual = BackgroundScreen(tint.screen, tint.color)
            drawn = _drawn(Strip(line) for line in app.console.render_lines(tint, options))
            assert drawn == _drawn(Strip(line) for line in app.console.render_lines(textual, options)), theme
            assert any(text.strip() for line in drawn for text, _, _ in line)  # the tables, tinted
